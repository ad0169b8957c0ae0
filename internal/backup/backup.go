// Package backup takes consistent snapshots of a live SQLite store (the
// database and the attachment blobs) and restores them into an empty data
// directory; for PostgreSQL, where the blobs live in the database, it says
// which pg_dump and pg_restore commands to run.
//
// A snapshot directory holds guildhall.db (made with VACUUM INTO: one read
// transaction, so writers go on), blobs/<k[:2]>/<k> for every blob an
// attachment of that database points at, and manifest.json with the size and
// SHA-256 of each file. The manifest is written last: a directory without one
// is an incomplete backup, and restore refuses it.
package backup

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/guildhall/guildhall/internal/blob"
	"github.com/guildhall/guildhall/internal/store"
)

// ManifestName is the manifest's file name in a snapshot directory.
const ManifestName = "manifest.json"

// Format is the version of the snapshot layout.
const Format = 1

// File is one file of a snapshot, relative to its directory.
type File struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// Manifest describes a snapshot.
type Manifest struct {
	Format    int       `json:"format"`
	Store     string    `json:"store"`
	CreatedAt time.Time `json:"created_at"`
	Database  File      `json:"database"`
	Blobs     []File    `json:"blobs"`
}

// BlobCount is the number of blobs in the snapshot.
func (m Manifest) BlobCount() int { return len(m.Blobs) }

// BlobBytes is their total size.
func (m Manifest) BlobBytes() int64 {
	var n int64
	for _, b := range m.Blobs {
		n += b.Size
	}
	return n
}

// SQLite writes a snapshot of the SQLite store in dataDir to the directory
// to, which must be empty or absent, while a server may be running on it.
//
// Blobs are written once under fresh keys and never change, so any copy of
// one is good; the only race is with deletion. First every blob present is
// copied, without stopping anyone. Then the blob directory is held
// (blob.Dir.Hold: no process deletes a blob meanwhile; a replaced or deleted
// attachment leaves its blob to the orphan sweep), the database is
// snapshotted, the blobs its attachments point at that were placed since the
// first pass are copied, and the hold is released. Copied blobs that the
// snapshot does not point at are removed, and every blob is checked against
// its attachment's size and SHA-256.
func SQLite(ctx context.Context, dataDir, to string) (Manifest, error) {
	if _, err := os.Stat(filepath.Join(dataDir, store.SQLiteFile)); err != nil {
		return Manifest{}, fmt.Errorf("no SQLite store in %s: %w", dataDir, err)
	}
	if err := emptyDir(to); err != nil {
		return Manifest{}, err
	}
	live, err := blob.NewDir(filepath.Join(dataDir, "blobs"))
	if err != nil {
		return Manifest{}, err
	}
	copied := map[string]File{} // key -> the copy in the snapshot
	err = live.Walk(func(key string, _ int64, _ time.Time) error {
		f, err := copyBlob(ctx, live, key, to)
		if errors.Is(err, blob.ErrNotFound) {
			return nil // deleted meanwhile: the snapshot cannot need it
		}
		if err != nil {
			return err
		}
		copied[key] = f
		return nil
	})
	if err != nil {
		return Manifest{}, err
	}

	dbPath := filepath.Join(to, store.SQLiteFile)
	refs, err := snapshotHeld(ctx, live, dataDir, dbPath, to, copied)
	if err != nil {
		return Manifest{}, err
	}

	m := Manifest{Format: Format, Store: "sqlite", CreatedAt: time.Now().UTC()}
	wanted := map[string]bool{}
	for _, r := range refs {
		f := copied[r.Key]
		if f.Size != r.Size || f.SHA256 != r.SHA256 {
			return Manifest{}, fmt.Errorf("blob %s does not match its attachment (size %d, sha256 %s; the attachment says %d, %s): the live store is damaged",
				r.Key, f.Size, f.SHA256, r.Size, r.SHA256)
		}
		if !wanted[r.Key] {
			wanted[r.Key] = true
			m.Blobs = append(m.Blobs, f)
		}
	}
	for key, f := range copied {
		if !wanted[key] {
			if err := os.Remove(filepath.Join(to, f.Path)); err != nil {
				return Manifest{}, err
			}
		}
	}
	sort.Slice(m.Blobs, func(i, j int) bool { return m.Blobs[i].Path < m.Blobs[j].Path })
	if m.Database, err = describe(to, store.SQLiteFile); err != nil {
		return Manifest{}, err
	}
	if err := syncTree(to); err != nil {
		return Manifest{}, err
	}
	if err := writeManifest(to, m); err != nil {
		return Manifest{}, err
	}
	return m, nil
}

// snapshotHeld snapshots the database into dbPath and copies the blobs it
// points at that are not in copied yet, holding the blob directory so that
// none of them can be deleted in between.
func snapshotHeld(ctx context.Context, live *blob.Dir, dataDir, dbPath, to string, copied map[string]File) ([]store.BlobRef, error) {
	release, err := live.Hold(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	if err := store.SnapshotSQLite(ctx, dataDir, dbPath); err != nil {
		return nil, err
	}
	refs, err := store.SQLiteBlobRefs(ctx, dbPath)
	if err != nil {
		return nil, err
	}
	for _, r := range refs {
		if _, ok := copied[r.Key]; ok {
			continue
		}
		f, err := copyBlob(ctx, live, r.Key, to)
		if errors.Is(err, blob.ErrNotFound) {
			return nil, fmt.Errorf("blob %s is missing from the live store though an attachment points at it: the store is damaged, or a process that does not honour the backup hold deleted it", r.Key)
		}
		if err != nil {
			return nil, err
		}
		copied[r.Key] = f
	}
	return refs, nil
}

// Restore copies the snapshot in from into dataDir, which must be empty or
// absent, verifying every file against the manifest before and after the
// copy, and the database's integrity.
func Restore(ctx context.Context, from, dataDir string) (Manifest, error) {
	m, err := ReadManifest(from)
	if err != nil {
		return Manifest{}, err
	}
	if err := Verify(from, m); err != nil {
		return Manifest{}, err
	}
	if err := emptyDir(dataDir); err != nil {
		return Manifest{}, err
	}
	for _, f := range append([]File{m.Database}, m.Blobs...) {
		if err := ctx.Err(); err != nil {
			return Manifest{}, err
		}
		got, err := copyFile(filepath.Join(from, f.Path), dataDir, f.Path)
		if err != nil {
			return Manifest{}, err
		}
		if got != f {
			return Manifest{}, fmt.Errorf("%s changed while it was restored", f.Path)
		}
	}
	if err := os.MkdirAll(filepath.Join(dataDir, "blobs", "tmp"), 0o750); err != nil {
		return Manifest{}, err
	}
	if _, err := store.SQLiteBlobRefs(ctx, filepath.Join(dataDir, store.SQLiteFile)); err != nil {
		return Manifest{}, err
	}
	if err := syncTree(dataDir); err != nil {
		return Manifest{}, err
	}
	return m, nil
}

// ReadManifest reads the manifest of a snapshot directory.
func ReadManifest(dir string) (Manifest, error) {
	data, err := os.ReadFile(filepath.Join(dir, ManifestName))
	if errors.Is(err, fs.ErrNotExist) {
		return Manifest{}, fmt.Errorf("%s has no %s: it is not a backup, or an incomplete one", dir, ManifestName)
	}
	if err != nil {
		return Manifest{}, err
	}
	var m Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return Manifest{}, fmt.Errorf("read %s: %w", ManifestName, err)
	}
	if m.Format != Format || m.Store != "sqlite" {
		return Manifest{}, fmt.Errorf("%s: format %d of store %q is not one this version restores (format %d, sqlite)", ManifestName, m.Format, m.Store, Format)
	}
	return m, nil
}

// Verify checks every file of a snapshot against its manifest.
func Verify(dir string, m Manifest) error {
	for _, f := range append([]File{m.Database}, m.Blobs...) {
		if !filepath.IsLocal(f.Path) {
			return fmt.Errorf("%s names a path outside the backup: %q", ManifestName, f.Path)
		}
		got, err := describe(dir, f.Path)
		if err != nil {
			return err
		}
		if got != f {
			return fmt.Errorf("%s is damaged: size %d, sha256 %s; the manifest says %d, %s", f.Path, got.Size, got.SHA256, f.Size, f.SHA256)
		}
	}
	return nil
}

// emptyDir creates dir, or accepts it if it exists and is empty.
func emptyDir(dir string) error {
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return os.MkdirAll(dir, 0o750)
	case err != nil:
		return err
	case len(entries) > 0:
		return fmt.Errorf("%s is not empty: give an empty or new directory", dir)
	}
	return nil
}

func copyBlob(ctx context.Context, live *blob.Dir, key, to string) (File, error) {
	r, err := live.Open(ctx, key, 0)
	if err != nil {
		return File{}, err
	}
	defer r.Close()
	return writeFile(r, to, filepath.Join("blobs", blob.RelPath(key)))
}

func copyFile(src, toDir, rel string) (File, error) {
	r, err := os.Open(src)
	if err != nil {
		return File{}, err
	}
	defer r.Close()
	return writeFile(r, toDir, rel)
}

// writeFile copies r to toDir/rel, synced, and describes what it wrote.
func writeFile(r io.Reader, toDir, rel string) (File, error) {
	path := filepath.Join(toDir, rel)
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return File{}, err
	}
	w, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o640)
	if err != nil {
		return File{}, err
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(w, h), r)
	if err == nil {
		err = w.Sync()
	}
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(path)
		return File{}, fmt.Errorf("write %s: %w", path, err)
	}
	return File{Path: filepath.ToSlash(rel), Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

func describe(dir, rel string) (File, error) {
	f, err := os.Open(filepath.Join(dir, filepath.FromSlash(rel)))
	if err != nil {
		return File{}, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return File{}, fmt.Errorf("read %s: %w", rel, err)
	}
	return File{Path: rel, Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

func writeManifest(dir string, m Manifest) error {
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, ManifestName+".tmp")
	if _, err := writeFile(bytes.NewReader(data), dir, ManifestName+".tmp"); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, ManifestName)); err != nil {
		return err
	}
	return syncDir(dir)
}

// syncTree syncs every directory under root, so the files' entries are durable.
func syncTree(root string) error {
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return syncDir(path)
		}
		return nil
	})
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}
