package fresh

// Stats counts what the read cache answered from memory, what it sent
// to the database, the questions it asked the change log, and the times it
// started over; Entries and Bytes are its size now (Bytes an estimate),
// users included.
type Stats struct {
	Hits, Misses, Questions, Resets int64
	// Leased counts the requests answered under the lease (lease.go),
	// which asked nothing.
	Leased int64
	// AtLock counts the write transactions that found the cache at the
	// data version they read under the write lock, and asked nothing.
	AtLock int64
	// OwnFollowed counts this instance's commits that the cache followed
	// by itself, its reads then answered under the lease with no question
	// (Ended).
	OwnFollowed    int64
	Entries, Bytes int
	// UserBytes is the part of Bytes that the packed users hold.
	UserBytes int
	// KeptSearches counts the pages of searches the database answered
	// with their entries alone, their users being kept.
	KeptSearches int64
	// Rounds counts the questions PostgreSQL's rounds sent, each shared
	// by the reads that asked at once (Questions counts those reads).
	Rounds int64
	// LeaseCurrent reports whether a read would now be answered under the
	// lease, asking nothing (PostgreSQL).
	LeaseCurrent bool
}

// Stats returns the cache's counters since it was made.
func (c *Cache) Stats() Stats {
	c.mu.Lock()
	n, ub := len(c.m)+c.users.len(), c.users.bytes()
	b := c.bytes + ub
	c.mu.Unlock()
	return Stats{Hits: c.hits.Load(), Misses: c.misses.Load(), Questions: c.questions.Load(),
		Resets: c.resets.Load(), Leased: c.leased.Load(), AtLock: c.lockedAt.Load(), OwnFollowed: c.ownFollowed.Load(), Entries: n, Bytes: b, UserBytes: ub, KeptSearches: c.keptSearches.Load(), Rounds: c.RoundsSent(),
		LeaseCurrent: c.lease != nil && c.lease.held()}
}
