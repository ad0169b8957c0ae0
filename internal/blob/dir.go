package blob

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
)

// Dir keeps blobs as files under a directory: <dir>/<k[:2]>/<k>, written
// through <dir>/tmp so a blob is either whole or absent. Keys come from
// NewKey, never from a request, so no client input becomes a path.
type Dir struct {
	root string
	mu   sync.Mutex
	open map[string]struct{} // temporary files of this process's uploads in progress
}

// NewDir prepares the directory. It removes nothing: only the serving
// process sweeps (SweepTemp, SweepOrphans), so that another process on the
// same directory, such as the token CLI beside a running server, never
// touches a live upload.
func NewDir(root string) (*Dir, error) {
	if err := os.MkdirAll(filepath.Join(root, "tmp"), 0o750); err != nil {
		return nil, fmt.Errorf("create blob dir: %w", err)
	}
	return &Dir{root: root, open: map[string]struct{}{}}, nil
}

func (d *Dir) path(key string) string { return filepath.Join(d.root, key[:2], key) }

// Put streams r to a temporary file while hashing it, syncs it, and renames
// it into place; on any failure (a read error, the context ending, the limit)
// the temporary file is removed and nothing is stored.
func (d *Dir) Put(ctx context.Context, r io.Reader, max int64) (Info, error) {
	key := NewKey()
	tmp, err := os.CreateTemp(filepath.Join(d.root, "tmp"), key+"-*")
	if err != nil {
		return Info{}, fmt.Errorf("create blob: %w", err)
	}
	d.track(tmp.Name(), true)
	defer d.track(tmp.Name(), false)
	placed := ""
	done := false
	defer func() {
		if !done {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
			if placed != "" {
				_ = os.Remove(placed)
			}
		}
	}()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(tmp, h), &LimitReader{R: ctxReader{ctx, r}, Max: max})
	if err != nil {
		return Info{}, err
	}
	if err := ctx.Err(); err != nil {
		return Info{}, err
	}
	if err := tmp.Sync(); err != nil {
		return Info{}, fmt.Errorf("sync blob: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return Info{}, fmt.Errorf("close blob: %w", err)
	}
	dir := filepath.Join(d.root, key[:2])
	if err := os.Mkdir(dir, 0o750); err == nil {
		// A new directory entry in the root: make it durable too.
		if err := syncDir(d.root); err != nil {
			return Info{}, err
		}
	} else if !errors.Is(err, fs.ErrExist) {
		return Info{}, fmt.Errorf("create blob dir: %w", err)
	}
	if err := os.Rename(tmp.Name(), d.path(key)); err != nil {
		return Info{}, fmt.Errorf("place blob: %w", err)
	}
	placed = d.path(key)
	if err := syncDir(dir); err != nil {
		return Info{}, err
	}
	done = true
	return Info{Key: key, Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

// Open opens a blob.
func (d *Dir) Open(_ context.Context, key string, _ int64) (Reader, error) {
	if !ValidKey(key) {
		return nil, ErrNotFound
	}
	f, err := os.Open(d.path(key))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("open blob: %w", err)
	}
	return f, nil
}

// Delete removes a blob; while a backup holds the directory it removes
// nothing and returns ErrHeld.
func (d *Dir) Delete(_ context.Context, key string) error {
	if !ValidKey(key) {
		return nil
	}
	return d.unheld(func() error {
		if err := os.Remove(d.path(key)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("delete blob: %w", err)
		}
		return nil
	})
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync blob dir: %w", err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync blob dir: %w", err)
	}
	return nil
}

// ctxReader stops reading once the context is done (a client gone mid-upload).
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
