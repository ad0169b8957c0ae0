package fresh

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
)

// A View is one value built from several logged tables, kept whole and
// read again part by part: the store's authorization state (the global
// permissions and roles as one part, each channel with its overwrites as
// another) is one. Its classify function names, for each change of the
// log, the part it reaches and the key within it (key "": the whole
// part), or says that the view does not depend on it. Values handed out
// are shared: the builder returns a new value, sharing with the one before
// what did not change, never one it changed in place.
type View[T any] struct {
	c    *Cache
	v    *view
	name string
}

// view is a View's state under the cache's lock: its value, and the parts
// changes reached since it was built, each with the gen of the change
// (Cache.gen), so that a build clears only what it read.
type view struct {
	classify func(Change) (part, key string, ok bool)
	state    any
	built    bool
	all      uint64                       // 0: clean
	whole    map[string]uint64            // part -> gen
	keys     map[string]map[string]uint64 // part -> key -> gen
	// building is held by the one build in progress; the others wait for
	// it under their own context (a lock that ignored it would add the
	// build's time to every waiter's own).
	building chan struct{}
}

// NewView adds a view to c, named for tracing.
func NewView[T any](c *Cache, name string, classify func(Change) (part, key string, ok bool)) *View[T] {
	v := &view{classify: classify, building: make(chan struct{}, 1)}
	c.mu.Lock()
	c.views = append(c.views, v)
	c.mu.Unlock()
	return &View[T]{c: c, v: v, name: name}
}

// Parts are the parts of a View to read again.
type Parts struct {
	all   bool
	whole map[string]bool
	keys  map[string]map[string]bool
}

// Empty reports whether nothing is to be read.
func (p Parts) Empty() bool { return !p.all && len(p.whole) == 0 && len(p.keys) == 0 }

// Whole reports whether the whole of part is to be read.
func (p Parts) Whole(part string) bool { return p.all || p.whole[part] }

// Keys returns the keys of part to read (sorted), when not the whole.
func (p Parts) Keys(part string) []string {
	out := make([]string, 0, len(p.keys[part]))
	for k := range p.keys[part] {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Has reports whether key of part is to be read, alone or with its part.
func (p Parts) Has(part, key string) bool { return p.Whole(part) || p.keys[part][key] }

// String says what p reads: "roles, every channels", "channels: 2".
func (p Parts) String() string {
	if p.all {
		return "everything"
	}
	var out []string
	for part := range p.whole {
		out = append(out, "every "+part)
	}
	for part, keys := range p.keys {
		if !p.whole[part] {
			out = append(out, fmt.Sprintf("%s: %d", part, len(keys)))
		}
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}

func (p *Parts) add(part, key string) {
	if key == "" {
		if p.whole == nil {
			p.whole = map[string]bool{}
		}
		p.whole[part] = true
		return
	}
	if p.keys == nil {
		p.keys = map[string]map[string]bool{}
	}
	if p.keys[part] == nil {
		p.keys[part] = map[string]bool{}
	}
	p.keys[part][key] = true
}

// PartsOf returns the parts the changes reach: a write transaction reads
// them again, over the cache's value, as it sees them (Own).
func (v *View[T]) PartsOf(changes []Change) Parts {
	var p Parts
	for _, ch := range changes {
		if ch.Table == "*" {
			return Parts{all: true}
		}
		if part, key, ok := v.v.classify(ch); ok {
			p.add(part, key)
		}
	}
	return p
}

// mark notes a change followed at gen.
func (v *view) mark(ch Change, gen uint64) {
	part, key, ok := v.classify(ch)
	switch {
	case !ok:
	case key == "":
		if v.whole == nil {
			v.whole = map[string]uint64{}
		}
		v.whole[part] = gen
	default:
		if v.keys == nil {
			v.keys = map[string]map[string]uint64{}
		}
		if v.keys[part] == nil {
			v.keys[part] = map[string]uint64{}
		}
		v.keys[part][key] = gen
	}
}

func (v *view) markAll(gen uint64) { v.all = gen }

func (v *view) clean() bool {
	return v.built && v.all == 0 && len(v.whole) == 0 && len(v.keys) == 0
}

// parts are what a build must read.
func (v *view) parts() Parts {
	if !v.built || v.all != 0 {
		return Parts{all: true}
	}
	var p Parts
	for part := range v.whole {
		p.add(part, "")
	}
	for part, keys := range v.keys {
		if p.whole[part] {
			continue
		}
		for k := range keys {
			p.add(part, k)
		}
	}
	return p
}

// done clears what a build that began at gen read.
func (v *view) done(state any, p Parts, gen uint64) {
	v.state, v.built = state, true
	if p.all && v.all <= gen {
		v.all = 0
	}
	for part, g := range v.whole {
		if p.Whole(part) && g <= gen {
			delete(v.whole, part)
		}
	}
	for part, keys := range v.keys {
		for k, g := range keys {
			if p.Has(part, k) && g <= gen {
				delete(keys, k)
			}
		}
		if len(keys) == 0 {
			delete(v.keys, part)
		}
	}
}

// Get returns the view as of the request's scope, building again only the
// parts that changed: build gets the value before (the zero T the first
// time, or after a reset, when p reads everything) and the parts to read.
func (v *View[T]) Get(ctx context.Context, build func(ctx context.Context, base T, p Parts) (T, error)) (T, error) {
	var zero T
	c, w := v.c, v.v
	if err := c.Fresh(ctx); err != nil {
		return zero, err
	}
	if st, ok := v.clean(ctx); ok {
		c.hits.Add(1)
		return st, nil
	}
	select {
	case w.building <- struct{}{}:
	case <-ctx.Done():
		return zero, ctx.Err()
	}
	defer func() { <-w.building }()
	if st, ok := v.clean(ctx); ok { // built while this read waited
		return st, nil
	}
	c.mu.Lock()
	base, _ := w.state.(T)
	parts, gen := w.parts(), c.gen
	c.mu.Unlock()
	c.misses.Add(1)
	if c.tracer != nil {
		c.tracer.decided(ctx, v.name, false, attrViewParts.String(parts.String()))
	}
	// The build reads after gen: what it reads is at least as new as every
	// change followed so far, and a change followed meanwhile leaves its
	// part marked for the next build. It is not cut short when the client
	// that asked goes away (others may be waiting for it), but it keeps
	// the request's deadline: its database work is bounded like the
	// request's own.
	bctx := context.WithoutCancel(ctx)
	if dl, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		bctx, cancel = context.WithDeadline(bctx, dl)
		defer cancel()
	}
	next, err := build(bctx, base, parts)
	if err != nil {
		return zero, err
	}
	c.mu.Lock()
	w.done(next, parts, gen)
	c.mu.Unlock()
	return next, nil
}

// clean returns the value when no change reached it since it was built.
func (v *View[T]) clean(ctx context.Context) (T, bool) {
	c := v.c
	c.mu.Lock()
	ok := v.v.clean()
	st, _ := v.v.state.(T)
	c.mu.Unlock()
	if ok && c.tracer != nil {
		c.tracer.decided(ctx, v.name, true)
	}
	return st, ok
}
