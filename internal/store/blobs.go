package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"

	"gorm.io/gorm"

	"github.com/guildhall/guildhall/internal/blob"
)

// ChunkSize is the size of one stored piece of a database blob.
const ChunkSize = 256 << 10

// maxDBUploads bounds the uploads a DBBlobs streams at once. Each holds a
// pooled connection in a transaction for as long as its client takes to send
// the bytes, so without a bound a few slow clients could take the whole pool
// and stall every other write.
const maxDBUploads = 4

// DBBlobs keeps blobs in the database in chunks (for PostgreSQL with several
// instances, where every instance must reach every blob). A blob is written
// in its own transaction, before the metadata that points at it, so an
// interrupted upload (or a crash) leaves nothing behind; it is read a chunk
// at a time, and neither side ever holds it whole in memory.
type DBBlobs struct {
	s       *Store
	uploads chan struct{} // semaphore of maxDBUploads
}

// Blobs returns a database blob store; an instance makes one and keeps it
// (the bound on concurrent uploads is per DBBlobs).
func (s *Store) Blobs() *DBBlobs { return &DBBlobs{s: s, uploads: make(chan struct{}, maxDBUploads)} }

var _ blob.Store = (*DBBlobs)(nil)

// Put streams r into chunks of ChunkSize; a blob has at least one (empty)
// chunk, so a zero-byte blob exists too.
func (b *DBBlobs) Put(ctx context.Context, r io.Reader, max int64) (blob.Info, error) {
	select {
	case b.uploads <- struct{}{}:
		defer func() { <-b.uploads }()
	case <-ctx.Done():
		return blob.Info{}, ctx.Err()
	}
	key := blob.NewKey()
	h := sha256.New()
	src := &blob.LimitReader{R: r, Max: max}
	var size int64
	buf := make([]byte, ChunkSize)
	err := b.s.write.WithContext(ctx).Transaction(func(db *gorm.DB) error {
		for chunk := 0; ; chunk++ {
			n, end, err := fill(src, buf)
			if err != nil {
				return err // the source failed (not a clean end): store nothing
			}
			if n > 0 || chunk == 0 {
				h.Write(buf[:n])
				size += int64(n)
				if err := db.Exec("INSERT INTO blob_chunks (blob_key, chunk, data) VALUES (?, ?, ?)", key, chunk, buf[:n]).Error; err != nil {
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
	if err := b.s.read.WithContext(ctx).Table("blob_chunks").Where("blob_key = ? AND chunk = 0", key).Count(&n).Error; err != nil {
		return nil, fmt.Errorf("open blob: %w", err)
	}
	if n == 0 {
		return nil, blob.ErrNotFound
	}
	return &chunkReader{ctx: ctx, db: b.s.read, key: key, size: size}, nil
}

// Delete removes a blob's chunks.
func (b *DBBlobs) Delete(ctx context.Context, key string) error {
	if err := b.s.write.WithContext(ctx).Exec("DELETE FROM blob_chunks WHERE blob_key = ?", key).Error; err != nil {
		return fmt.Errorf("delete blob: %w", err)
	}
	return nil
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
		var data []byte
		err := r.db.WithContext(r.ctx).Raw("SELECT data FROM blob_chunks WHERE blob_key = ? AND chunk = ?", r.key, idx).Row().Scan(&data)
		if err != nil {
			return 0, fmt.Errorf("read blob chunk: %w", err)
		}
		r.buf, r.chunk = data, idx
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
