package app

import (
	"bytes"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

type lockedBuffer struct {
	mu     sync.Mutex
	b      bytes.Buffer
	writes int
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.writes++
	return l.b.Write(p)
}

func (l *lockedBuffer) snapshot() (string, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String(), l.writes
}

// TestLoggerBatchesLines: many records reach the output in few writes, every
// line arrives whole and in order, within the flush interval without Close,
// and Close leaves nothing behind.
func TestLoggerBatchesLines(t *testing.T) {
	out := &lockedBuffer{}
	log, closeLog := NewLogger(out, "info")
	const n = 200
	for i := range n {
		log.Info("request", "i", i)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		text, _ := out.snapshot()
		if strings.Count(text, "\n") == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v only %d of %d lines were written without Close", 5*time.Second, strings.Count(text, "\n"), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	log.Debug("below the level")
	log.Warn("last")
	if err := closeLog(); err != nil {
		t.Fatal(err)
	}
	text, writes := out.snapshot()
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	if len(lines) != n+1 || !strings.Contains(lines[n], `"msg":"last"`) {
		t.Fatalf("got %d lines, last %q; want %d ending with the warning", len(lines), lines[len(lines)-1], n+1)
	}
	for i, l := range lines[:n] {
		if !strings.HasPrefix(l, "{") || !strings.Contains(l, `"i":`+strconv.Itoa(i)+`}`) {
			t.Fatalf("line %d is %q", i, l)
		}
	}
	if writes >= n/2 {
		t.Fatalf("%d records took %d writes: not batched", n+1, writes)
	}
	log.Info("after close") // writes through
	if text, _ := out.snapshot(); !strings.Contains(text, "after close") {
		t.Fatal("a record after Close was lost")
	}
}
