package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// SQLiteFile is the name of the SQLite database in a data directory.
const SQLiteFile = "guildhall.db"

// BlobRef is an attachment's blob as its metadata describes it.
type BlobRef struct {
	Key    string
	Size   int64
	SHA256 string
}

// SnapshotSQLite writes a consistent copy of the SQLite database of dataDir
// to dest (which must not exist) with VACUUM INTO, online: it runs in one
// read transaction beside a live server's writers (WAL), and the copy is the
// database as of that transaction's start. The copy is synced to disk.
func SnapshotSQLite(ctx context.Context, dataDir, dest string) error {
	src := filepath.Join(dataDir, SQLiteFile)
	if _, err := os.Stat(src); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("no SQLite store in %s (%s is missing)", dataDir, SQLiteFile)
		}
		return err
	}
	db, err := sql.Open("sqlite3", "file:"+src+"?_busy_timeout=10000")
	if err != nil {
		return fmt.Errorf("open %s: %w", src, err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, "VACUUM INTO ?", dest); err != nil {
		return fmt.Errorf("snapshot %s: %w", src, err)
	}
	f, err := os.Open(dest)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync snapshot: %w", err)
	}
	return nil
}

// SQLiteBlobRefs lists the blobs that the attachments of the SQLite file at
// path point at, after checking the file's integrity.
func SQLiteBlobRefs(ctx context.Context, path string) ([]BlobRef, error) {
	db, err := sql.Open("sqlite3", "file:"+path+"?mode=ro&_busy_timeout=10000")
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	defer db.Close()
	var check string
	if err := db.QueryRowContext(ctx, "PRAGMA integrity_check").Scan(&check); err != nil {
		return nil, fmt.Errorf("check %s: %w", path, err)
	}
	if check != "ok" {
		return nil, fmt.Errorf("%s is damaged: integrity_check says %s", path, strings.TrimSpace(check))
	}
	rows, err := db.QueryContext(ctx, "SELECT blob_key, size, sha256 FROM attachments ORDER BY blob_key")
	if err != nil {
		return nil, fmt.Errorf("list attachments of %s: %w", path, err)
	}
	defer rows.Close()
	var out []BlobRef
	for rows.Next() {
		var r BlobRef
		if err := rows.Scan(&r.Key, &r.Size, &r.SHA256); err != nil {
			return nil, fmt.Errorf("list attachments of %s: %w", path, err)
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// ReferencedBlobs reports which of keys an attachment points at.
func (s *Store) ReferencedBlobs(ctx context.Context, keys []string) (map[string]bool, error) {
	out := make(map[string]bool, len(keys))
	const batch = 500
	for len(keys) > 0 {
		n := min(batch, len(keys))
		var found []string
		if err := s.db.ReadPool().WithContext(ctx).Model(&attachmentRow{}).Where("blob_key IN ?", keys[:n]).Pluck("blob_key", &found).Error; err != nil {
			return nil, fmt.Errorf("find referenced blobs: %w", err)
		}
		for _, k := range found {
			out[k] = true
		}
		keys = keys[n:]
	}
	return out, nil
}
