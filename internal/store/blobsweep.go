package store

import (
	"context"
	"fmt"
	"time"
)

// AdoptOrphans moves to the trash the database blobs that no attachment
// points at and that are not in the trash already: those left by a crash
// between storing a blob and committing its metadata, or between committing
// a replacement and trashing the old blob. Sweep then removes them once
// BlobGrace has passed, a grace longer than any upload takes to commit its
// metadata; and Sweep never removes a blob an attachment points at, so an
// upload whose blob was adopted a moment before it committed keeps it. It
// returns how many it adopted.
func (b *DBBlobs) AdoptOrphans(ctx context.Context, now time.Time) (int64, error) {
	res := b.s.db.WritePool().WithContext(ctx).Exec(adoptOrphans, microsOf(now))
	if res.Error != nil {
		return 0, fmt.Errorf("adopt orphaned blobs: %w", res.Error)
	}
	return res.RowsAffected, nil
}

// adoptOrphans is an INSERT ... SELECT, which GORM's builder cannot say.
const adoptOrphans = `INSERT INTO blob_trash (blob_key, deleted_at)
SELECT c.blob_key, ? FROM blob_chunks c
WHERE c.chunk = 0
AND NOT EXISTS (SELECT 1 FROM attachments a WHERE a.blob_key = c.blob_key)
AND NOT EXISTS (SELECT 1 FROM blob_trash t WHERE t.blob_key = c.blob_key)
ON CONFLICT (blob_key) DO NOTHING`
