package guild

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/guildhall/guildhall/internal/apperr"
)

// Page is one page of a keyset-paginated list.
type Page[T any] struct {
	Items      []T
	NextCursor *string
}

// DefaultLimit and MaxLimit bound ?limit=.
const (
	DefaultLimit = 50
	MaxLimit     = 200
)

// cursor is what an opaque ?cursor= carries: the last key seen and a hash of
// the filters the walk was started with.
type cursor struct {
	Key     string `json:"k"`
	Filters string `json:"f,omitempty"`
}

func filterHash(parts ...string) string {
	if len(parts) == 0 {
		return ""
	}
	sum := sha256.Sum256([]byte(strings.Join(parts, "\x00")))
	return hex.EncodeToString(sum[:8])
}

func encodeCursor(key string, filters ...string) *string {
	b, _ := json.Marshal(cursor{Key: key, Filters: filterHash(filters...)})
	s := base64.RawURLEncoding.EncodeToString(b)
	return &s
}

// decodeCursor returns the key of a cursor made with the same filters ("" for
// no cursor); anything else is a 400 at query.cursor.
func decodeCursor(raw string, filters ...string) (string, error) {
	if raw == "" {
		return "", nil
	}
	b, err := base64.RawURLEncoding.DecodeString(raw)
	var c cursor
	if err == nil {
		err = json.Unmarshal(b, &c)
	}
	if err != nil || c.Key == "" {
		return "", apperr.Invalid("cursor", "the cursor is malformed; use the next_cursor of a previous page")
	}
	if c.Filters != filterHash(filters...) {
		return "", apperr.Invalid("cursor", "the cursor was made with other filters; start again without a cursor")
	}
	return c.Key, nil
}

func pageLimit(limit int) int {
	if limit <= 0 {
		return DefaultLimit
	}
	if limit > MaxLimit {
		return MaxLimit
	}
	return limit
}

// Precondition is what a write expects of the resource it changes (HTTP's
// If-Match, parsed by the transport): any current version (Any), or one of
// some versions, each as the resource's Tag gives it. A nil *Precondition
// expects nothing.
type Precondition struct {
	Any  bool
	Tags []string
}

// Tag is the version of a resource as a precondition names it.
func Tag(version int64) string { return strconv.FormatInt(version, 10) }

// check applies a precondition to a resource at the version current.
func (p *Precondition) check(current string) error {
	if p == nil || p.Any {
		return nil
	}
	for _, t := range p.Tags {
		if t == current {
			return nil
		}
	}
	return apperr.Precondition(current)
}
