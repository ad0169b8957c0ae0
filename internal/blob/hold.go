package blob

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// ErrHeld is returned by Delete while a backup holds the directory: the blob
// stays, and the orphan sweep removes it once the hold is gone.
var ErrHeld = errors.New("blob directory held by a backup")

// holdName is the lock file a backup holds; Walk skips it (not a two-letter
// directory). It is created by the first Hold and never removed.
const holdName = ".backup-hold"

// Hold stops every process on this directory from deleting blobs until the
// returned release is called; it waits, within ctx, for deletions under
// way to finish. A backup holds the directory from just before it snapshots
// the database until it has copied every blob that snapshot points at, so a
// blob cannot go between the snapshot and its copy: a deletion always comes
// after the commit that dropped the blob's last reference, and one that
// comes after the snapshot finds the hold and leaves the blob.
//
// The hold is an advisory lock (flock) on a file in the directory, so it
// binds other processes (the server beside a backup CLI) and ends with the
// process that took it, a crash included.
func (d *Dir) Hold(ctx context.Context) (release func(), err error) {
	f, err := os.OpenFile(filepath.Join(d.root, holdName), os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		return nil, fmt.Errorf("hold blob dir: %w", err)
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { _ = f.Close() }, nil // closing the file releases the lock
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			_ = f.Close()
			return nil, fmt.Errorf("hold blob dir: %w", err)
		}
		select {
		case <-ctx.Done():
			_ = f.Close()
			return nil, fmt.Errorf("hold blob dir: %w", ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// unheld runs remove unless a backup holds the directory, in which case it
// returns ErrHeld. It holds a shared lock while remove runs, so a Hold taken
// meanwhile waits for it.
func (d *Dir) unheld(remove func() error) error {
	f, err := os.Open(filepath.Join(d.root, holdName))
	if errors.Is(err, os.ErrNotExist) {
		// No backup has ever run here. One that starts now creates the file
		// and snapshots after this check, so it cannot point at this blob.
		return remove()
	}
	if err != nil {
		return fmt.Errorf("check blob dir hold: %w", err)
	}
	defer f.Close()
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return ErrHeld
	}
	if err != nil {
		return fmt.Errorf("check blob dir hold: %w", err)
	}
	return remove()
}
