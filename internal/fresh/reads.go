package fresh

import (
	"context"

	"github.com/guildhall/guildhall/internal/model"
)

// Lookup returns what the cache holds under k, as of the last time it
// followed the log (the caller has made it Fresh), without counting a hit
// or a miss: a write transaction decides for itself (Own) whether the
// value is still the one it sees.
func (c *Cache) Lookup(k Key) (any, bool) {
	v, ok, _ := c.lookup(k)
	return v, ok
}

// User returns one user as of the request's scope: the caller's own value
// (but for a long list of role IDs, shared and read-only: model.User.Roles),
// decoded afresh from the packed users (packed.go), or read with read and
// kept.
func (c *Cache) User(ctx context.Context, id string, read func() (model.User, error)) (model.User, error) {
	if err := c.Fresh(ctx); err != nil {
		return model.User{}, err
	}
	u, hit, gen := c.lookupUser(id)
	c.decided(ctx, User, hit)
	if hit {
		return u, nil
	}
	u, err := read()
	if err != nil {
		return u, err
	}
	if c.afterRead != nil {
		c.afterRead()
	}
	c.keepUser(gen, u)
	return u, nil
}

// Page returns a page of users as of the request's scope, kept under k:
// from the cache while the page and each of its users are kept as the
// page read them, else read with read and kept.
func (c *Cache) Page(ctx context.Context, k Key, read func() ([]model.User, string, error)) ([]model.User, string, error) {
	if err := c.Fresh(ctx); err != nil {
		return nil, "", err
	}
	users, next, hit, gen := c.lookupPage(k)
	c.decided(ctx, UserPage, hit)
	if hit {
		return users, next, nil
	}
	users, next, err := read()
	if err != nil {
		return nil, "", err
	}
	if c.afterRead != nil {
		c.afterRead()
	}
	c.keepPage(gen, k, users, next)
	return users, next, nil
}

// KeptUsers returns the kept users of ids, each at its version of
// versions, or false when one of them is not kept at it: a search that
// read its entries alone completes them with it.
func (c *Cache) KeptUsers(ids []string, versions []int64) ([]model.User, bool) {
	return c.keptUsers(ids, versions)
}

// NoteKeptSearch counts a page of a search answered with KeptUsers.
func (c *Cache) NoteKeptSearch() { c.keptSearches.Add(1) }

// AfterRead sets fn to run between a read that missed and its keeping
// (tests: a change committed meanwhile must keep the value out).
func (c *Cache) AfterRead(fn func()) { c.afterRead = fn }

// Traced records on the current span that a read was answered from the
// cache or not, when the caller decided that itself (Lookup), without
// counting it.
func (c *Cache) Traced(ctx context.Context, kind Kind, hit bool) {
	if c.tracer != nil {
		c.tracer.decided(ctx, cacheReads[kind], hit)
	}
}

// Clear drops everything the cache holds, as a reset of the log does
// (tests that measure what a cache filled from empty holds).
func (c *Cache) Clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.clearLocked()
	c.gen++
}
