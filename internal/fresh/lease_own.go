package fresh

import "encoding/json"

// A write's own commit, on PostgreSQL under a lease (lease.go): the
// writer's cache follows it from what the transaction read back in its
// last statement (commit_changes), with no question, and the reads that
// arrive while the write is committing wait for its end instead of
// asking again and again.

// Ended is told of the end of this instance's write transaction that read
// version v (CommitVersionSQL) and was prepared: committed, once the
// commit is known to have taken effect; not, when it failed or its
// outcome is unknown. The reads that wait for it (leases.current) then
// go on. A commit it follows as a question would, without one (committed).
func (c *Cache) Ended(v, nonce int64, own string, committed bool) {
	if c.lease == nil {
		return
	}
	defer c.lease.end(v, nonce)
	if committed {
		c.committed(v, nonce, own)
	}
}

// committed follows a commit of this instance's own write transaction as
// a question would, without one. own is what CommitVersionSQL read with
// v and nonce (commit_changes): the nonce of the version before v, and
// the changes logged under v. It follows them only when the cache stands
// at that version before v, of the same history, and no question is in
// flight (one that is would apply its answer after); and it ends the
// asking that the commit began only when it was prepared alone and
// nothing was heard since (leases.followedOwn): then the cache stands at
// the last version committed, as a round would find it. Otherwise the
// next read asks, as it would have. Called once the commit is known to
// have taken effect.
func (c *Cache) committed(v, nonce int64, own string) {
	if c.lease == nil || c.rounds == nil || own == "" {
		return
	}
	var o struct {
		Prev    *int64      `json:"prev"`
		Changes [][2]string `json:"changes"`
	}
	if json.Unmarshal([]byte(own), &o) != nil || o.Prev == nil || len(o.Changes) == 0 {
		return
	}
	// Only a round moves the position besides this: holding its lock,
	// the position read here is the one applied from.
	if !c.rounds.inflight.TryLock() {
		return
	}
	defer c.rounds.inflight.Unlock()
	if !c.at(position{v: v - 1, nonce: *o.Prev}) {
		return
	}
	changes := make([]Change, len(o.Changes))
	for i, ch := range o.Changes {
		changes[i] = Change{Table: ch[0], Key: ch[1]}
	}
	c.apply(delta{to: position{v: v, nonce: nonce}, changes: changes})
	if c.lease.followedOwn(v, nonce) {
		c.ownFollowed.Add(1)
	}
}

// aloneCommit is a version prepared with no other lease running: its
// nonce, the want its prepare moved to, and done, closed once its
// transaction ended (ended).
type aloneCommit struct {
	v, nonce int64
	want     uint64
	done     chan struct{}
}

// followedOwn ends the asking that a commit of this instance's, prepared
// alone (others == 0), began, once the cache has followed that commit by
// itself (Cache.Ended): when nothing was heard or polled since the
// prepare (want is still what it moved to), the cache now stands at the
// last version committed, as a round would have found it.
func (l *leases) followedOwn(v, nonce int64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	a := l.alone
	if a.v != v || a.nonce != nonce || l.want.Load() != a.want || l.heard > v {
		return false
	}
	l.have.Store(a.want)
	return true
}

// ownPending returns what a read may wait on instead of asking: the end
// of this instance's write prepared alone, when nothing else moved want
// since its prepare; nil otherwise.
func (l *leases) ownPending() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	a := l.alone
	if a.done == nil || l.want.Load() != a.want {
		return nil
	}
	select {
	case <-a.done:
		return nil
	default:
		return a.done
	}
}

// end tells the reads waiting on the write prepared alone as v that its
// transaction ended, committed or not (Cache.Ended).
func (l *leases) end(v, nonce int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ended(v, nonce)
}

// ended is end with l.mu held.
func (l *leases) ended(v, nonce int64) {
	a := l.alone
	if a.done == nil || a.v != v || a.nonce != nonce {
		return
	}
	select {
	case <-a.done:
	default:
		close(a.done)
	}
}
