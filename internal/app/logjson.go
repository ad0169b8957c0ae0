package app

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"
)

// flatJSONHandler writes a record the way slog's JSON handler does, byte
// for byte, without the handler's general machinery, when the record's
// attributes are all flat strings, integers, booleans and durations: every
// access-log line, one per request, where slog's handler cost about a
// twentieth of a cheap request's CPU. Any other record (a group, a value
// of another kind, a year outside 0-9999), and every handler derived with
// WithAttrs or WithGroup, goes through the JSON handler itself, so the log
// reads the same whichever path wrote a line.
type flatJSONHandler struct {
	*slog.JSONHandler
	w io.Writer // safe for concurrent writes (bufferedSink)
}

func newFlatJSONHandler(w io.Writer, opts *slog.HandlerOptions) *flatJSONHandler {
	if opts == nil {
		opts = &slog.HandlerOptions{}
	}
	if opts.ReplaceAttr != nil || opts.AddSource {
		panic("flatJSONHandler: ReplaceAttr and AddSource are the JSON handler's alone")
	}
	return &flatJSONHandler{JSONHandler: slog.NewJSONHandler(w, opts), w: w}
}

var flatBufs = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

func (h *flatJSONHandler) Handle(ctx context.Context, r slog.Record) error {
	bp := flatBufs.Get().(*[]byte)
	b, ok := appendFlatJSON((*bp)[:0], r)
	var err error
	if ok {
		_, err = h.w.Write(b)
	} else {
		err = h.JSONHandler.Handle(ctx, r)
	}
	if cap(b) <= 16<<10 {
		*bp = b
		flatBufs.Put(bp)
	}
	return err
}

// appendFlatJSON appends r as slog's JSON handler (no ReplaceAttr, no
// source) writes it, or reports false for a record it does not write.
func appendFlatJSON(b []byte, r slog.Record) ([]byte, bool) {
	b = append(b, '{')
	if !r.Time.IsZero() {
		t := r.Time.Round(0)
		if y := t.Year(); y < 0 || y >= 10000 {
			return b, false
		}
		b = append(b, `"time":"`...)
		b = t.AppendFormat(b, time.RFC3339Nano)
		b = append(b, `",`...)
	}
	b = append(b, `"level":`...)
	b = appendJSONString(b, r.Level.String())
	b = append(b, `,"msg":`...)
	b = appendJSONString(b, r.Message)
	ok := true
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "" {
			ok = false // slog elides some of these: its rules, not ours
			return false
		}
		b = append(b, ',')
		b = appendJSONString(b, a.Key)
		b = append(b, ':')
		switch v := a.Value; v.Kind() {
		case slog.KindString:
			b = appendJSONString(b, v.String())
		case slog.KindInt64:
			b = strconv.AppendInt(b, v.Int64(), 10)
		case slog.KindUint64:
			b = strconv.AppendUint(b, v.Uint64(), 10)
		case slog.KindBool:
			b = strconv.AppendBool(b, v.Bool())
		case slog.KindDuration:
			b = strconv.AppendInt(b, int64(v.Duration()), 10)
		default:
			ok = false
		}
		return ok
	})
	return append(b, '}', '\n'), ok
}

// appendJSONString appends s quoted as slog's JSON handler quotes it: the
// control characters, '"' and '\\' escaped, invalid UTF-8 as U+FFFD, and
// U+2028 and U+2029 escaped.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case c == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case c == '\u2028' || c == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[c&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
