// Package cursor seals the opaque ?cursor= of every keyset-paginated list:
// what a walk's last key was, bound to the filters it started with, in a
// form a caller can neither read nor forge.
package cursor

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/guildhall/guildhall/internal/apperr"
)

// cursor is what an opaque ?cursor= carries: the last key seen and a hash of
// the filters the walk was started with. It travels sealed (Sealer): a
// caller can neither read it nor make one.
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

// A Sealer seals and opens cursors with the deployment's key (AES-256-GCM,
// the same on every instance), so that a cursor reveals nothing the caller
// cannot see, however it is decoded (the key of the last row read may be
// a hidden channel's, or name one), and a tampered or foreign cursor is
// refused.
//
// The nonce is derived from the cursor (an HMAC of it under a key of its
// own, as in SIV): the same place in the same walk is the same cursor, so
// an answer is a function of the data, and two cursors never share a nonce
// unless they are the same cursor.
type Sealer struct {
	aead     cipher.AEAD
	nonceKey []byte
}

// New is the Sealer of the deployment's key (32 bytes).
func New(key []byte) Sealer {
	if len(key) != 32 {
		// A store migrated short of its keys (a test of a migration):
		// cursors of a key of zeros, sealed all the same.
		key = make([]byte, 32)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		panic(fmt.Sprintf("cursor key: %v", err)) // 32 bytes always make a cipher
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		panic(fmt.Sprintf("cursor key: %v", err))
	}
	nonceKey := sha256.Sum256(append([]byte("guildhall cursor nonce\x00"), key...))
	return Sealer{aead: aead, nonceKey: nonceKey[:]}
}

// Encode seals the key of a page's last item, bound to the walk's filters.
func (cs Sealer) Encode(key string, filters ...string) *string {
	// Without HTML escaping, each of "<", ">" and "&" in a key (a search's
	// position holds a name) takes one byte, not six: the longest name
	// stays within the cursor's length in the contract.
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(cursor{Key: key, Filters: filterHash(filters...)})
	plain := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	mac := hmac.New(sha256.New, cs.nonceKey)
	mac.Write(plain)
	nonce := mac.Sum(nil)[:cs.aead.NonceSize()]
	s := base64.RawURLEncoding.EncodeToString(cs.aead.Seal(nonce, nonce, plain, nil))
	return &s
}

// Decode returns the key of a cursor made with the same filters ("" for no
// cursor); anything else is a 400 at query.cursor.
func (cs Sealer) Decode(raw string, filters ...string) (string, error) {
	if raw == "" {
		return "", nil
	}
	malformed := apperr.Invalid("cursor", "the cursor is malformed; use the next_cursor of a previous page")
	sealed, err := base64.RawURLEncoding.DecodeString(raw)
	if err != nil || len(sealed) < cs.aead.NonceSize() {
		return "", malformed
	}
	n := cs.aead.NonceSize()
	plain, err := cs.aead.Open(nil, sealed[:n], sealed[n:], nil)
	var c cursor
	if err == nil {
		err = json.Unmarshal(plain, &c)
	}
	if err != nil || c.Key == "" {
		return "", malformed
	}
	if c.Filters != filterHash(filters...) {
		return "", apperr.Invalid("cursor", "the cursor was made with other filters; start again without a cursor")
	}
	return c.Key, nil
}
