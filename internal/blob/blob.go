// Package blob stores attachment bytes. A blob is written once under a fresh
// random key, streamed (never whole in memory) and hashed on the way; the
// attachment metadata points at it. Keys are generated here and never come
// from a request, so no client input ever becomes a path.
package blob

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"regexp"

	"github.com/guildhall/guildhall/internal/apperr"
)

// Info describes a stored blob.
type Info struct {
	Key    string
	Size   int64
	SHA256 string // lower-case hex
}

// Reader reads a blob; it can seek, so ranges can be served.
type Reader interface {
	io.ReadSeekCloser
}

// Store keeps blobs.
type Store interface {
	// Put streams r into a new blob of at most max bytes, hashing it on the
	// way, under a fresh key. The blob exists only once Put returns without
	// error: past max it stores nothing and returns an apperr.ErrTooLarge
	// error, and a failing r (any error but io.EOF, io.ErrUnexpectedEOF
	// included) or the end of ctx stores nothing either.
	Put(ctx context.Context, r io.Reader, max int64) (Info, error)
	// Open reads a blob of the given size.
	Open(ctx context.Context, key string, size int64) (Reader, error)
	// Delete removes a blob; a missing blob is not an error. While a backup
	// holds the store it removes nothing and returns ErrHeld: the blob is
	// then an orphan, which the orphan sweep removes later.
	Delete(ctx context.Context, key string) error
}

// ErrNotFound is returned by Open for a missing blob.
var ErrNotFound = errors.New("blob not found")

var keyPattern = regexp.MustCompile(`^[0-9a-f]{32}$`)

// NewKey returns a fresh random key.
func NewKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// ValidKey reports whether key could have come from NewKey.
func ValidKey(key string) bool { return keyPattern.MatchString(key) }

// LimitReader passes at most Max bytes of R and fails with an
// apperr.ErrTooLarge error as soon as R holds more: exactly Max bytes pass,
// Max+1 do not. A negative Max counts as 0.
type LimitReader struct {
	R   io.Reader
	Max int64
	n   int64 // bytes read from R
}

func (l *LimitReader) Read(p []byte) (int, error) {
	limit := max(l.Max, 0)
	if l.n > limit {
		return 0, apperr.TooLarge(limit)
	}
	if len(p) == 0 {
		return 0, nil
	}
	// Read one byte past the limit to tell "exactly Max" from "more".
	if rest := limit + 1 - l.n; int64(len(p)) > rest {
		p = p[:rest]
	}
	n, err := l.R.Read(p)
	l.n += int64(n)
	if l.n > limit {
		return 0, apperr.TooLarge(limit)
	}
	return n, err
}
