package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/guildhall/guildhall/internal/blob"
)

// ChunkSize is the size of one stored piece of a database blob.
const ChunkSize = 256 << 10

// maxDBUploads bounds the uploads a DBBlobs copies into the database at
// once; each holds a pooled connection in a transaction while it does.
const maxDBUploads = 4

// BlobGrace is how long a deleted or replaced database blob stays readable:
// a download that started before the change finishes within it.
const BlobGrace = time.Hour

// DBBlobs keeps blobs in the database in chunks (for PostgreSQL with several
// instances, where every instance must reach every blob). An upload is first
// spooled to a local temporary file, at the client's pace, and only then
// copied into the database in one short transaction: a slow client never
// holds a pooled connection. The blob is written before the metadata that
// points at it, and an interrupted upload stores nothing. It is read a chunk
// at a time, and neither side ever holds it whole in memory. Delete moves a
// blob to the trash; Sweep removes it for good after BlobGrace.
type DBBlobs struct {
	s       *Store
	uploads chan struct{} // semaphore of maxDBUploads
}

// Blobs returns a database blob store; an instance makes one and keeps it
// (the bound on concurrent uploads is per DBBlobs).
func (s *Store) Blobs() *DBBlobs { return &DBBlobs{s: s, uploads: make(chan struct{}, maxDBUploads)} }

var _ blob.Store = (*DBBlobs)(nil)

// Put streams r to a temporary file, hashing it, then into chunks of
// ChunkSize; a blob has at least one (empty) chunk, so a zero-byte blob
// exists too.
func (b *DBBlobs) Put(ctx context.Context, r io.Reader, max int64) (blob.Info, error) {
	spool, err := os.CreateTemp("", "guildhall-upload-*")
	if err != nil {
		return blob.Info{}, fmt.Errorf("spool upload: %w", err)
	}
	defer os.Remove(spool.Name())
	defer spool.Close()
	h := sha256.New()
	// io.Copy ends on io.EOF alone: any other error of the source, a
	// client gone mid-body included, stores nothing.
	size, err := io.Copy(io.MultiWriter(spool, h), &blob.LimitReader{R: r, Max: max})
	if err != nil {
		return blob.Info{}, err
	}
	if _, err := spool.Seek(0, io.SeekStart); err != nil {
		return blob.Info{}, fmt.Errorf("spool upload: %w", err)
	}

	select {
	case b.uploads <- struct{}{}:
		defer func() { <-b.uploads }()
	case <-ctx.Done():
		return blob.Info{}, ctx.Err()
	}
	key := blob.NewKey()
	buf := make([]byte, ChunkSize)
	ctx, cancel := b.s.db.TxContext(ctx)
	defer cancel()
	err = b.s.db.WritePool().WithContext(ctx).Transaction(func(db *gorm.DB) error {
		for chunk := 0; ; chunk++ {
			n, end, err := fill(spool, buf)
			if err != nil {
				return fmt.Errorf("read spooled upload: %w", err)
			}
			if n > 0 || chunk == 0 {
				if err := db.Create(&blobChunkRow{BlobKey: key, Chunk: chunk, Data: buf[:n]}).Error; err != nil {
					return fmt.Errorf("write blob chunk: %w", err)
				}
			}
			if end {
				return nil
			}
		}
	})
	if err != nil {
		return blob.Info{}, err
	}
	return blob.Info{Key: key, Size: size, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

// fill reads r until buf is full or r ends. end reports a clean end (io.EOF);
// any other error, io.ErrUnexpectedEOF included (a client gone mid-body), is
// returned as err. Unlike io.ReadFull, it never takes a source's own
// io.ErrUnexpectedEOF for the end of the data.
func fill(r io.Reader, buf []byte) (n int, end bool, err error) {
	for n < len(buf) {
		m, rerr := r.Read(buf[n:])
		n += m
		if rerr == io.EOF { // the io.Reader contract: EOF itself, unwrapped
			return n, true, nil
		}
		if rerr != nil {
			return n, false, rerr
		}
	}
	return n, false, nil
}

// Open returns a reader that loads one chunk at a time.
func (b *DBBlobs) Open(ctx context.Context, key string, size int64) (blob.Reader, error) {
	var n int64
	if err := b.s.db.ReadPool().WithContext(ctx).Model(&blobChunkRow{}).Where("blob_key = ? AND chunk = 0", key).Count(&n).Error; err != nil {
		return nil, fmt.Errorf("open blob: %w", err)
	}
	if n == 0 {
		return nil, blob.ErrNotFound
	}
	// The reader outlives the request's database budget (the bytes go at
	// the client's pace): each chunk's read has its own statement deadline.
	return &chunkReader{ctx: context.WithoutCancel(ctx), db: b.s.db.ReadPool(), key: key, size: size}, nil
}

// blobChunkRow is a chunk of a blob kept in the database.
type blobChunkRow struct {
	BlobKey string `gorm:"primaryKey"`
	Chunk   int    `gorm:"primaryKey;autoIncrement:false"`
	Data    []byte
}

func (blobChunkRow) TableName() string { return "blob_chunks" }

// blobTrashRow is a deleted blob awaiting its sweep.
type blobTrashRow struct {
	BlobKey   string `gorm:"primaryKey"`
	DeletedAt micros
}

func (blobTrashRow) TableName() string { return "blob_trash" }

// Delete moves a blob to the trash: it stays readable for BlobGrace, then
// Sweep removes it.
func (b *DBBlobs) Delete(ctx context.Context, key string) error {
	err := b.s.db.WritePool().WithContext(ctx).Clauses(clause.OnConflict{
		Columns:   []clause.Column{{Name: "blob_key"}},
		DoUpdates: clause.AssignmentColumns([]string{"deleted_at"}),
	}).Create(&blobTrashRow{BlobKey: key, DeletedAt: microsOf(time.Now())}).Error
	if err != nil {
		return fmt.Errorf("delete blob: %w", err)
	}
	return nil
}

// Sweep removes for good the blobs deleted before the given time, and
// returns how many.
func (b *DBBlobs) Sweep(ctx context.Context, deletedBefore time.Time) (int64, error) {
	var n int64
	err := b.s.db.WritePool().WithContext(ctx).Transaction(func(db *gorm.DB) error {
		old := db.Model(&blobTrashRow{}).Select("blob_key").Where("deleted_at < ?", microsOf(deletedBefore))
		// A blob an attachment points at is never removed: an orphan that
		// AdoptOrphans trashed just before its upload committed the metadata.
		err := db.Where("blob_key IN (?)", old).Where("blob_key NOT IN (?)", db.Model(&attachmentRow{}).Select("blob_key")).
			Delete(&blobChunkRow{}).Error
		if err != nil {
			return err
		}
		res := db.Where("deleted_at < ?", microsOf(deletedBefore)).Delete(&blobTrashRow{})
		n = res.RowsAffected
		return res.Error
	})
	if err != nil {
		return 0, fmt.Errorf("sweep blobs: %w", err)
	}
	return n, nil
}

type chunkReader struct {
	ctx   context.Context
	db    *gorm.DB
	key   string
	size  int64
	off   int64
	chunk int    // index of buf, -1 when none
	buf   []byte // the loaded chunk
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if r.off >= r.size {
		return 0, io.EOF
	}
	idx := int(r.off / ChunkSize)
	if r.buf == nil || r.chunk != idx {
		var c blobChunkRow
		err := r.db.WithContext(r.ctx).Select("data").Where("blob_key = ? AND chunk = ?", r.key, idx).Take(&c).Error
		if err != nil {
			return 0, fmt.Errorf("read blob chunk: %w", err)
		}
		r.buf, r.chunk = c.Data, idx
	}
	start := int(r.off % ChunkSize)
	if start >= len(r.buf) {
		return 0, io.ErrUnexpectedEOF
	}
	n := copy(p, r.buf[start:])
	r.off += int64(n)
	return n, nil
}

func (r *chunkReader) Seek(offset int64, whence int) (int64, error) {
	var abs int64
	switch whence {
	case io.SeekStart:
		abs = offset
	case io.SeekCurrent:
		abs = r.off + offset
	case io.SeekEnd:
		abs = r.size + offset
	default:
		return 0, errors.New("seek: bad whence")
	}
	if abs < 0 {
		return 0, errors.New("seek: negative position")
	}
	r.off = abs
	return abs, nil
}

func (r *chunkReader) Close() error { r.buf = nil; return nil }
