package blob

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// TempGrace is how old a temporary upload file of another process (or of a
// crashed one) must be before SweepTemp removes it. Upload bodies are
// bounded in time (a stalled body is a 408 within the body idle timeout), so
// a file untouched for this long belongs to no upload that can still finish.
const TempGrace = time.Hour

// OrphanGrace is how old a placed blob that no attachment points at must be
// before SweepOrphans removes it: between placing a blob and committing the
// metadata that points at it, an upload takes at most a transaction's time.
const OrphanGrace = time.Hour

// RelPath is where a blob lives under a Dir's root: <k[:2]>/<k>.
func RelPath(key string) string { return filepath.Join(key[:2], key) }

func (d *Dir) track(name string, open bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if open {
		d.open[name] = struct{}{}
	} else {
		delete(d.open, name)
	}
}

// SweepTemp removes the temporary files of interrupted uploads: never one
// that an upload of this process has open, and another's only once it has
// been untouched for longer than grace. It returns how many it removed.
func (d *Dir) SweepTemp(grace time.Duration) (int64, error) {
	dir := filepath.Join(d.root, "tmp")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, fmt.Errorf("read blob tmp dir: %w", err)
	}
	var n int64
	for _, e := range entries {
		name := filepath.Join(dir, e.Name())
		d.mu.Lock()
		_, live := d.open[name]
		d.mu.Unlock()
		if live {
			continue
		}
		info, err := e.Info()
		if err != nil || time.Since(info.ModTime()) <= grace {
			continue
		}
		if err := os.Remove(name); err == nil {
			n++
		}
	}
	return n, nil
}

// Walk calls fn for every placed blob with its size and modification time.
func (d *Dir) Walk(fn func(key string, size int64, mod time.Time) error) error {
	tops, err := os.ReadDir(d.root)
	if err != nil {
		return fmt.Errorf("read blob dir: %w", err)
	}
	for _, top := range tops {
		if !top.IsDir() || len(top.Name()) != 2 {
			continue // tmp, or not ours
		}
		entries, err := os.ReadDir(filepath.Join(d.root, top.Name()))
		if err != nil {
			return fmt.Errorf("read blob dir: %w", err)
		}
		for _, e := range entries {
			if !ValidKey(e.Name()) || e.Name()[:2] != top.Name() {
				continue
			}
			info, err := e.Info()
			if errors.Is(err, fs.ErrNotExist) {
				continue // deleted meanwhile
			}
			if err != nil {
				return fmt.Errorf("stat blob: %w", err)
			}
			if err := fn(e.Name(), info.Size(), info.ModTime()); err != nil {
				return err
			}
		}
	}
	return nil
}

// SweepOrphans removes the placed blobs older than grace that no attachment
// points at (left by a crash between placing a blob and committing its
// metadata, or between committing a replacement and deleting the old blob).
// referenced reports which of the keys given are still pointed at.
func (d *Dir) SweepOrphans(ctx context.Context, grace time.Duration, referenced func(context.Context, []string) (map[string]bool, error)) (int64, error) {
	var old []string
	err := d.Walk(func(key string, _ int64, mod time.Time) error {
		if time.Since(mod) > grace {
			old = append(old, key)
		}
		return ctx.Err()
	})
	if err != nil || len(old) == 0 {
		return 0, err
	}
	refs, err := referenced(ctx, old)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, key := range old {
		if refs[key] {
			continue
		}
		if err := d.Delete(ctx, key); errors.Is(err, ErrHeld) {
			return n, nil // a backup runs: the next sweep goes on
		} else if err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}
