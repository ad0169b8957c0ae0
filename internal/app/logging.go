package app

import (
	"io"
	"log/slog"
	"sync"
	"time"
)

// NewLogger returns the structured JSON logger of an instance, writing to w
// through a buffer that is flushed every flushEvery, when it holds
// flushBytes, and by the returned close function (call it before exiting).
// A request logs one line; writing each with its own system call cost a
// tenth of a cheap request, while a batch of lines costs one. At most the
// last flushEvery of lines is lost if the process is killed.
func NewLogger(w io.Writer, level string) (*slog.Logger, func() error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		l = slog.LevelInfo
	}
	sink := newBufferedSink(w, flushEvery)
	return slog.New(newFlatJSONHandler(sink, &slog.HandlerOptions{Level: l})), sink.Close
}

const (
	flushEvery = 100 * time.Millisecond
	flushBytes = 32 << 10
)

// bufferedSink batches writes to w.
type bufferedSink struct {
	mu     sync.Mutex
	w      io.Writer
	buf    []byte
	err    error // the first write error, kept to report at Close
	stop   chan struct{}
	done   chan struct{}
	closed bool
}

func newBufferedSink(w io.Writer, every time.Duration) *bufferedSink {
	b := &bufferedSink{w: w, buf: make([]byte, 0, flushBytes), stop: make(chan struct{}), done: make(chan struct{})}
	go b.loop(every)
	return b
}

func (b *bufferedSink) loop(every time.Duration) {
	defer close(b.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-b.stop:
			return
		case <-t.C:
			b.mu.Lock()
			b.flushLocked()
			b.mu.Unlock()
		}
	}
}

// Write appends p (one log record) to the buffer; after Close it writes
// through.
func (b *bufferedSink) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return b.w.Write(p)
	}
	b.buf = append(b.buf, p...)
	if len(b.buf) >= flushBytes {
		b.flushLocked()
	}
	return len(p), nil
}

func (b *bufferedSink) flushLocked() {
	if len(b.buf) == 0 {
		return
	}
	if _, err := b.w.Write(b.buf); err != nil && b.err == nil {
		b.err = err
	}
	b.buf = b.buf[:0]
}

// Close flushes what is buffered; later writes go straight to w.
func (b *bufferedSink) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	close(b.stop)
	b.flushLocked()
	err := b.err
	b.mu.Unlock()
	<-b.done
	return err
}
