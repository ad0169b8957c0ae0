package guild

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
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
		return "", apperr.Invalid("query.cursor", "the cursor is malformed; use the next_cursor of a previous page")
	}
	if c.Filters != filterHash(filters...) {
		return "", apperr.Invalid("query.cursor", "the cursor was made with other filters; start again without a cursor")
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

// ETag is the strong entity tag of a version.
func ETag(version int64) string { return fmt.Sprintf("%q", fmt.Sprint(version)) }

// checkIfMatch applies an If-Match header to a resource whose current tag is
// given: "" or "*" pass, otherwise one of the listed tags must equal it
// (strong comparison: weak tags never match).
func checkIfMatch(header, current string) error {
	header = strings.TrimSpace(header)
	if header == "" || header == "*" {
		return nil
	}
	for _, t := range strings.Split(header, ",") {
		if strings.TrimSpace(t) == current {
			return nil
		}
	}
	return apperr.Precondition(current)
}
