package blob_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/guildhall/guildhall/internal/apperr"
	"github.com/guildhall/guildhall/internal/blob"
)

// newDir makes a Dir under a fresh directory and returns it with its root.
func newDir(t *testing.T) (*blob.Dir, string) {
	t.Helper()
	root := filepath.Join(t.TempDir(), "blobs")
	d, err := blob.NewDir(root)
	if err != nil {
		t.Fatal(err)
	}
	return d, root
}

// files lists the regular files under root, relative to it.
func files(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			rel, _ := filepath.Rel(root, p)
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i/251)
	}
	return b
}

func sumHex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func readAll(t *testing.T, d *blob.Dir, key string, size int64) []byte {
	t.Helper()
	r, err := d.Open(context.Background(), key, size)
	if err != nil {
		t.Fatalf("open %s: %v", key, err)
	}
	defer r.Close()
	data, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("read %s: %v", key, err)
	}
	return data
}

func TestDirPutOpenDelete(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		size int
	}{
		{"empty", 0},
		{"one byte", 1},
		{"small", 1000},
		{"several copy buffers", 100<<10 + 17},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d, root := newDir(t)
			data := pattern(tc.size)
			info, err := d.Put(context.Background(), iotest.HalfReader(bytes.NewReader(data)), int64(tc.size))
			if err != nil {
				t.Fatalf("put: %v", err)
			}
			if !blob.ValidKey(info.Key) || info.Size != int64(tc.size) || info.SHA256 != sumHex(data) {
				t.Fatalf("info %+v, want size %d sha %s and a valid key", info, tc.size, sumHex(data))
			}
			if got := files(t, root); !slices.Equal(got, []string{info.Key[:2] + "/" + info.Key}) {
				t.Fatalf("files after put: %v", got)
			}
			if got := readAll(t, d, info.Key, info.Size); !bytes.Equal(got, data) {
				t.Fatalf("read back %d bytes, want %d (equal content)", len(got), len(data))
			}
			if tc.size > 10 {
				r, err := d.Open(context.Background(), info.Key, info.Size)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := r.Seek(int64(tc.size-10), io.SeekStart); err != nil {
					t.Fatal(err)
				}
				tail, err := io.ReadAll(r)
				_ = r.Close()
				if err != nil || !bytes.Equal(tail, data[tc.size-10:]) {
					t.Fatalf("tail after seek: %v %x", err, tail)
				}
			}
			if err := d.Delete(context.Background(), info.Key); err != nil {
				t.Fatalf("delete: %v", err)
			}
			if _, err := d.Open(context.Background(), info.Key, info.Size); !errors.Is(err, blob.ErrNotFound) {
				t.Fatalf("open after delete: %v, want ErrNotFound", err)
			}
			if err := d.Delete(context.Background(), info.Key); err != nil {
				t.Fatalf("deleting a missing blob: %v, want nil", err)
			}
			if got := files(t, root); len(got) != 0 {
				t.Fatalf("files after delete: %v", got)
			}
		})
	}
}

// The same bytes twice make two blobs: replacing an attachment with equal
// bytes and then deleting the old blob must not delete the new one.
func TestDirKeysAreUnique(t *testing.T) {
	t.Parallel()
	d, _ := newDir(t)
	a, err := d.Put(context.Background(), strings.NewReader("same"), 10)
	if err != nil {
		t.Fatal(err)
	}
	b, err := d.Put(context.Background(), strings.NewReader("same"), 10)
	if err != nil {
		t.Fatal(err)
	}
	if a.Key == b.Key || a.SHA256 != b.SHA256 {
		t.Fatalf("keys %s %s, hashes %s %s", a.Key, b.Key, a.SHA256, b.SHA256)
	}
	if err := d.Delete(context.Background(), a.Key); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, d, b.Key, b.Size); string(got) != "same" {
		t.Fatalf("second blob after deleting the first: %q", got)
	}
}

func TestDirLimit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		size    int
		max     int64
		tooBig  bool
		oneByte bool // feed the bytes one at a time
	}{
		{"empty under zero limit", 0, 0, false, false},
		{"one byte over zero limit", 1, 0, true, false},
		{"exactly the limit", 1024, 1024, false, false},
		{"one byte past the limit", 1025, 1024, true, false},
		{"exactly the limit, byte by byte", 300, 300, false, true},
		{"one byte past, byte by byte", 301, 300, true, true},
		{"far past the limit", 1 << 20, 1024, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d, root := newDir(t)
			data := pattern(tc.size)
			var r io.Reader = bytes.NewReader(data)
			if tc.oneByte {
				r = iotest.OneByteReader(r)
			}
			info, err := d.Put(context.Background(), r, tc.max)
			if tc.tooBig {
				if !errors.Is(err, apperr.ErrTooLarge) {
					t.Fatalf("put %d bytes with limit %d: %v, want ErrTooLarge", tc.size, tc.max, err)
				}
				if got := files(t, root); len(got) != 0 {
					t.Fatalf("a refused upload left files: %v", got)
				}
				return
			}
			if err != nil {
				t.Fatalf("put %d bytes with limit %d: %v", tc.size, tc.max, err)
			}
			if info.Size != int64(tc.size) || !bytes.Equal(readAll(t, d, info.Key, info.Size), data) {
				t.Fatalf("stored %+v, want the %d bytes", info, tc.size)
			}
		})
	}
}

// A failed or interrupted upload stores nothing and leaves no temporary file.
func TestDirFailedUploadLeavesNothing(t *testing.T) {
	t.Parallel()
	boom := errors.New("client went away")
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		r    io.Reader
		want error
	}{
		{"reader fails midway", context.Background(), io.MultiReader(bytes.NewReader(pattern(70<<10)), iotest.ErrReader(boom)), boom},
		{"body ends early", context.Background(), io.MultiReader(bytes.NewReader(pattern(5000)), iotest.ErrReader(io.ErrUnexpectedEOF)), io.ErrUnexpectedEOF},
		{"context canceled", canceled, bytes.NewReader(pattern(5000)), context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d, root := newDir(t)
			keep, err := d.Put(context.Background(), strings.NewReader("previous"), 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := d.Put(tc.ctx, tc.r, 1<<20); !errors.Is(err, tc.want) {
				t.Fatalf("put: %v, want %v", err, tc.want)
			}
			if got := files(t, root); !slices.Equal(got, []string{keep.Key[:2] + "/" + keep.Key}) {
				t.Fatalf("files after a failed put: %v (only the previous blob should remain)", got)
			}
			if got := readAll(t, d, keep.Key, keep.Size); string(got) != "previous" {
				t.Fatalf("previous blob: %q", got)
			}
		})
	}
}

// Keys come from NewKey only: anything else is not found and never touches a
// path, in or outside the directory.
func TestDirRefusesForeignKeys(t *testing.T) {
	t.Parallel()
	d, root := newDir(t)
	victim := filepath.Join(filepath.Dir(root), "victim")
	if err := os.WriteFile(victim, []byte("keep me"), 0o600); err != nil {
		t.Fatal(err)
	}
	inside := filepath.Join(root, "tmp", "inside")
	if err := os.WriteFile(inside, []byte("keep me too"), 0o600); err != nil {
		t.Fatal(err)
	}
	good := blob.NewKey()
	for _, key := range []string{
		"", "../victim", "../../victim", "/etc/passwd", "tmp/inside", "..", ".",
		strings.ToUpper(good), good[:31], good + "0", good[:30] + "/x", "0123456789abcdef0123456789abcdeg",
	} {
		if blob.ValidKey(key) {
			t.Errorf("ValidKey(%q) = true", key)
		}
		if _, err := d.Open(context.Background(), key, 0); !errors.Is(err, blob.ErrNotFound) {
			t.Errorf("Open(%q): %v, want ErrNotFound", key, err)
		}
		if err := d.Delete(context.Background(), key); err != nil {
			t.Errorf("Delete(%q): %v", key, err)
		}
	}
	for _, p := range []string{victim, inside} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s after foreign keys: %v", p, err)
		}
	}
	for range 100 {
		if k := blob.NewKey(); !blob.ValidKey(k) {
			t.Fatalf("NewKey() = %q is not valid", k)
		}
	}
}

// NewDir removes nothing (another process opening the directory, such as
// the token CLI beside a running server, must not touch a live upload);
// SweepTemp, which only the serving process runs, removes the temporary
// files of interrupted uploads once they are older than the grace, and never
// one that an upload of its own has open, however old.
func TestSweepTempRemovesOnlyStaleUnopenedFiles(t *testing.T) {
	t.Parallel()
	d, root := newDir(t)
	info, err := d.Put(context.Background(), strings.NewReader("stored"), 100)
	if err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(root, "tmp", blob.NewKey()+"-1")
	fresh := filepath.Join(root, "tmp", blob.NewKey()+"-2")
	for _, p := range []string{stale, fresh} {
		if err := os.WriteFile(p, []byte("partial"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-2 * blob.TempGrace)
	if err := os.Chtimes(stale, old, old); err != nil {
		t.Fatal(err)
	}
	all := []string{info.Key[:2] + "/" + info.Key, "tmp/" + filepath.Base(fresh), "tmp/" + filepath.Base(stale)}
	slices.Sort(all)
	d2, err := blob.NewDir(root)
	if err != nil {
		t.Fatal(err)
	}
	if got := files(t, root); !slices.Equal(got, all) {
		t.Fatalf("files after NewDir: %v, want %v (NewDir removes nothing)", got, all)
	}

	// An upload of d2 in progress whose file is old: stalled, not gone.
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		_, err := d2.Put(context.Background(), pr, 100)
		done <- err
	}()
	if _, err := pw.Write([]byte("half")); err != nil {
		t.Fatal(err)
	}
	var live string
	for _, f := range files(t, root) {
		if strings.HasPrefix(f, "tmp/") && !slices.Contains(all, f) {
			live = filepath.Join(root, f)
		}
	}
	if live == "" {
		t.Fatal("the upload in progress has no temporary file")
	}
	if err := os.Chtimes(live, old, old); err != nil {
		t.Fatal(err)
	}
	n, err := d2.SweepTemp(blob.TempGrace)
	if err != nil || n != 1 {
		t.Fatalf("SweepTemp = %d, %v; want 1 (the stale file only)", n, err)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Fatalf("the stale temporary file is still there: %v", err)
	}
	for _, p := range []string{fresh, live} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("SweepTemp removed %s: %v", p, err)
		}
	}
	_ = pw.Close()
	if err := <-done; err != nil {
		t.Fatalf("the upload failed after the sweep: %v", err)
	}
	if got := readAll(t, d2, info.Key, info.Size); string(got) != "stored" {
		t.Fatalf("stored blob after the sweep: %q", got)
	}
}

// SweepOrphans removes placed blobs that nothing points at once they are
// older than the grace, and keeps referenced and young ones.
func TestSweepOrphans(t *testing.T) {
	t.Parallel()
	d, root := newDir(t)
	ctx := context.Background()
	put := func(s string) string {
		info, err := d.Put(ctx, strings.NewReader(s), 100)
		if err != nil {
			t.Fatal(err)
		}
		return info.Key
	}
	kept, orphan, young := put("kept"), put("orphan"), put("young")
	old := time.Now().Add(-2 * blob.OrphanGrace)
	for _, k := range []string{kept, orphan} {
		if err := os.Chtimes(filepath.Join(root, blob.RelPath(k)), old, old); err != nil {
			t.Fatal(err)
		}
	}
	var asked []string
	n, err := d.SweepOrphans(ctx, blob.OrphanGrace, func(_ context.Context, keys []string) (map[string]bool, error) {
		asked = append(asked, keys...)
		return map[string]bool{kept: true}, nil
	})
	if err != nil || n != 1 {
		t.Fatalf("SweepOrphans = %d, %v; want 1", n, err)
	}
	slices.Sort(asked)
	if want := []string{kept, orphan}; !slices.Equal(asked, sortedCopy(want)) {
		t.Fatalf("asked about %v, want the old blobs %v only", asked, want)
	}
	if _, err := os.Stat(filepath.Join(root, blob.RelPath(orphan))); !os.IsNotExist(err) {
		t.Fatalf("the orphan is still there: %v", err)
	}
	for _, k := range []string{kept, young} {
		if _, err := os.Stat(filepath.Join(root, blob.RelPath(k))); err != nil {
			t.Fatalf("blob %s removed: %v", k, err)
		}
	}
}

// A backup's hold stops every deletion, from any Dir on the same root (another
// process's included: the lock is on a file), until it is released; the
// orphan sweep stops too, without an error, and removes the blob afterwards.
func TestHoldStopsDeletes(t *testing.T) {
	t.Parallel()
	d, root := newDir(t)
	ctx := context.Background()
	other, err := blob.NewDir(root) // as the backup CLI beside a server
	if err != nil {
		t.Fatal(err)
	}
	info, err := d.Put(ctx, strings.NewReader("held"), 100)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(root, blob.RelPath(info.Key))
	release, err := other.Hold(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Delete(ctx, info.Key); !errors.Is(err, blob.ErrHeld) {
		t.Fatalf("Delete during a hold = %v, want ErrHeld", err)
	}
	old := time.Now().Add(-2 * blob.OrphanGrace)
	if err := os.Chtimes(path, old, old); err != nil {
		t.Fatal(err)
	}
	none := func(context.Context, []string) (map[string]bool, error) { return map[string]bool{}, nil }
	if n, err := d.SweepOrphans(ctx, blob.OrphanGrace, none); err != nil || n != 0 {
		t.Fatalf("SweepOrphans during a hold = %d, %v; want 0, nil", n, err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the blob went during the hold: %v", err)
	}
	// A second hold waits for the first, within its context.
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := d.Hold(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a second Hold = %v, want it to wait until its deadline", err)
	}
	release()
	if n, err := d.SweepOrphans(ctx, blob.OrphanGrace, none); err != nil || n != 1 {
		t.Fatalf("SweepOrphans after the hold = %d, %v; want 1", n, err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("the orphan is still there after the hold: %v", err)
	}
	walked := 0
	if err := d.Walk(func(string, int64, time.Time) error { walked++; return nil }); err != nil || walked != 0 {
		t.Fatalf("Walk = %d blobs, %v; the hold file is not a blob", walked, err)
	}
}

func sortedCopy(s []string) []string {
	c := slices.Clone(s)
	slices.Sort(c)
	return c
}

// countingReader counts the bytes its source hands out.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// endless yields bytes forever.
type endless struct{}

func (endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'x'
	}
	return len(p), nil
}

func TestLimitReader(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		src    func() io.Reader
		size   int // bytes in src (-1: endless)
		max    int64
		tooBig bool
	}{
		{"empty, zero limit", func() io.Reader { return strings.NewReader("") }, 0, 0, false},
		{"empty, negative limit counts as zero", func() io.Reader { return strings.NewReader("") }, 0, -5, false},
		{"one byte, negative limit", func() io.Reader { return strings.NewReader("x") }, 1, -5, true},
		{"exactly the limit", func() io.Reader { return bytes.NewReader(pattern(64)) }, 64, 64, false},
		{"exactly the limit, data with EOF", func() io.Reader { return iotest.DataErrReader(bytes.NewReader(pattern(64))) }, 64, 64, false},
		{"exactly the limit, one byte at a time", func() io.Reader { return iotest.OneByteReader(bytes.NewReader(pattern(64))) }, 64, 64, false},
		{"under the limit", func() io.Reader { return bytes.NewReader(pattern(10)) }, 10, 64, false},
		{"one byte past", func() io.Reader { return bytes.NewReader(pattern(65)) }, 65, 64, true},
		{"one byte past, data with EOF", func() io.Reader { return iotest.DataErrReader(bytes.NewReader(pattern(65))) }, 65, 64, true},
		{"one byte past, one byte at a time", func() io.Reader { return iotest.OneByteReader(bytes.NewReader(pattern(65))) }, 65, 64, true},
		{"endless", func() io.Reader { return endless{} }, -1, 1000, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			src := &countingReader{r: tc.src()}
			lr := &blob.LimitReader{R: src, Max: tc.max}
			got, err := io.ReadAll(lr)
			limit := max(tc.max, 0)
			if int64(len(got)) > limit {
				t.Fatalf("passed %d bytes, more than the limit %d", len(got), limit)
			}
			if src.n > limit+1 {
				t.Fatalf("read %d bytes from the source, more than limit+1 = %d", src.n, limit+1)
			}
			if tc.tooBig {
				if !errors.Is(err, apperr.ErrTooLarge) {
					t.Fatalf("err %v, want ErrTooLarge", err)
				}
				// It stays failed.
				if n, err := lr.Read(make([]byte, 10)); n != 0 || !errors.Is(err, apperr.ErrTooLarge) {
					t.Fatalf("read after the limit: %d %v", n, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("err %v", err)
			}
			if !bytes.Equal(got, pattern(tc.size)) {
				t.Fatalf("passed %d bytes, want the %d of the source", len(got), tc.size)
			}
		})
	}
}

// A failing source's error passes through unchanged (it is not a clean end).
func TestLimitReaderPassesErrors(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	lr := &blob.LimitReader{R: io.MultiReader(strings.NewReader("abc"), iotest.ErrReader(boom)), Max: 100}
	got, err := io.ReadAll(lr)
	if string(got) != "abc" || !errors.Is(err, boom) {
		t.Fatalf("got %q, %v; want \"abc\", boom", got, err)
	}
}
