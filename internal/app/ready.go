package app

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"
)

// ReadyTimeout bounds the database check of /readyz, so that the probe
// answers within a second even when the database hangs.
const ReadyTimeout = time.Second

// MinFreeBytes is the free space below which a SQLite data directory counts
// as full: writes would fail with 507.
const MinFreeBytes = 1 << 20

// Ready reports whether the instance should get traffic (/readyz): not while
// it drains, not while the database does not answer within ReadyTimeout, and
// not while its writes cannot succeed (a full disk; no write transaction
// commits within ReadyTimeout: the writer stuck, the write lock held by a
// stopped instance or another process).
func (a *App) Ready(ctx context.Context) error {
	if a.draining.Load() {
		return errors.New("draining: the instance is shutting down")
	}
	ctx, cancel := context.WithTimeout(ctx, ReadyTimeout)
	defer cancel()
	if err := a.Store.Ping(ctx); err != nil {
		return fmt.Errorf("the database does not answer: %w", err)
	}
	if err := a.Store.WritesSucceed(ctx); err != nil {
		return fmt.Errorf("writes cannot succeed: %w", err)
	}
	if !a.Store.Postgres() {
		var st syscall.Statfs_t
		if err := syscall.Statfs(a.Config.DataDir, &st); err == nil {
			if free := int64(st.Bavail) * int64(st.Bsize); free < MinFreeBytes {
				return fmt.Errorf("the data directory's disk is full (%d bytes free)", free)
			}
		}
	}
	return nil
}

// drain makes /readyz answer 503 from now on.
func (a *App) drain() { a.draining.Store(true) }
