package httpapi_test

import (
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"io"
	"net/http"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/guildhall/guildhall/internal/testenv"
)

// heapGenerator yields n deterministic bytes without holding them, hashing
// what it hands out.
type heapGenerator struct {
	left int64
	pos  int64
	sum  hash.Hash
}

func newHeapGenerator(n int64) *heapGenerator { return &heapGenerator{left: n, sum: sha256.New()} }

func (g *heapGenerator) Read(p []byte) (int, error) {
	if g.left == 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > g.left {
		p = p[:g.left]
	}
	for i := range p {
		x := g.pos + int64(i)
		p[i] = byte(x) ^ byte(x>>9) ^ byte(x>>17)
	}
	g.pos += int64(len(p))
	g.left -= int64(len(p))
	g.sum.Write(p)
	return len(p), nil
}

// heapPeak samples the live heap while fn runs and returns the largest growth
// over the baseline taken (after a collection) just before it.
func heapPeak(t *testing.T, fn func()) uint64 {
	t.Helper()
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	base := ms.HeapAlloc
	var peak atomic.Uint64
	peak.Store(base)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		var m runtime.MemStats
		for {
			runtime.ReadMemStats(&m)
			if m.HeapAlloc > peak.Load() {
				peak.Store(m.HeapAlloc)
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	})
	fn()
	close(stop)
	wg.Wait()
	return peak.Load() - base
}

// A 100 MiB upload and download stream: neither the validator nor the
// handler nor the blob store holds the body, so the heap does not grow with
// it. The client runs in this process too and streams from a generator.
func TestAttachmentsHeapBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("100 MiB upload and download: skipped with -short")
	}
	// Not parallel: the heap is the whole process's. A buffered body would
	// show as >= 100 MiB (io.ReadAll, kin-openapi's security check did that);
	// streaming keeps the growth to a few buffers.
	const size = 100 << 20
	const maxGrowth = 16 << 20
	e := testenv.Start(t, testenv.SQLite, attLimit(size+1<<20))
	e.NewChannel("big")

	gen := newHeapGenerator(size)
	var status int
	var body []byte
	up := heapPeak(t, func() {
		req, err := http.NewRequest("PUT", e.URL+"/api"+attPath("big", "huge.bin"), gen)
		if err != nil {
			t.Fatal(err)
		}
		req.ContentLength = size
		req.Header.Set("Content-Type", "application/octet-stream")
		req.Header.Set("Authorization", "Bearer "+e.Owner)
		resp, err := e.HTTP.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		status = resp.StatusCode
		body, _ = io.ReadAll(resp.Body)
	})
	if status != http.StatusCreated {
		t.Fatalf("upload: %d %s", status, body)
	}
	want := hex.EncodeToString(gen.sum.Sum(nil))
	var m attMeta
	(&testenv.Response{Status: status, Body: body}).JSON(t, &m)
	if m.Size != size || m.SHA256 != want {
		t.Fatalf("uploaded %d bytes with sha256 %s, want %d and %s", m.Size, m.SHA256, size, want)
	}
	t.Logf("upload of %d MiB: peak heap growth %.1f MiB", size>>20, float64(up)/(1<<20))
	if up > maxGrowth {
		t.Errorf("upload grew the heap by %d bytes (> %d): the body is buffered somewhere", up, maxGrowth)
	}

	var got string
	var n int64
	down := heapPeak(t, func() {
		req, err := http.NewRequest("GET", e.URL+"/api"+attPath("big", "huge.bin"), nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+e.Owner)
		resp, err := e.HTTP.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		status = resp.StatusCode
		if resp.Header.Get("Content-Length") != strconv.Itoa(size) {
			t.Errorf("download Content-Length %q", resp.Header.Get("Content-Length"))
		}
		h := sha256.New()
		n, err = io.Copy(h, resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		got = hex.EncodeToString(h.Sum(nil))
	})
	if status != http.StatusOK || n != size || got != want {
		t.Fatalf("download: %d, %d bytes with sha256 %s; want 200, %d bytes, %s", status, n, got, size, want)
	}
	t.Logf("download of %d MiB: peak heap growth %.1f MiB", size>>20, float64(down)/(1<<20))
	if down > maxGrowth {
		t.Errorf("download grew the heap by %d bytes (> %d): the body is buffered somewhere", down, maxGrowth)
	}
}
