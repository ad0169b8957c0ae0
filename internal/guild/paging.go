package guild

import (
	"strconv"

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
