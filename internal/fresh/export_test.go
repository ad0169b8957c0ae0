package fresh

import "sync"

// LeaseCurrent reports whether a read would be answered under the lease.
func (c *Cache) LeaseCurrent() bool { return c.lease.held() }

// StopListening stops the listener as a crash would: no goodbye.
func (c *Cache) StopListening() {
	c.lease.stop()
	<-c.lease.done
}

const LeaseMargin = leaseMargin

// LeaseHolders are the other instances this one would wait for.
func (c *Cache) LeaseHolders() []string {
	c.lease.mu.Lock()
	defer c.lease.mu.Unlock()
	var ids []string
	now := c.lease.now()
	for id, p := range c.lease.others {
		if p.until > now {
			ids = append(ids, id)
		}
	}
	return ids
}

// HoldNotices makes the listener stop taking notifications, as one that
// lags, until release is called (once or more).
func (c *Cache) HoldNotices() (release func()) {
	c.lease.gate.Lock()
	return sync.OnceFunc(c.lease.gate.Unlock)
}

// PrepareSQL is the prepare's statement ($1 the version, $2 the channel,
// $3 the payload).
func (c *Cache) PrepareSQL() string { return c.lease.prepareSQL() }

// At is the version of the log the cache stands at.
func (c *Cache) At() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pos.v
}

// Heard is the lease's floor: the highest version heard prepared or
// committed.
func (c *Cache) Heard() int64 {
	c.lease.mu.Lock()
	defer c.lease.mu.Unlock()
	return c.lease.heard
}
