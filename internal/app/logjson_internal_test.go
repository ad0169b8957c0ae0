package app

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"
)

// linesOf writes the same records through slog's JSON handler and through
// flatJSONHandler (after derive, for both) and returns the two outputs.
func linesOf(t testing.TB, derive func(slog.Handler) slog.Handler, records ...slog.Record) (want, got string) {
	t.Helper()
	var w, g bytes.Buffer
	opts := &slog.HandlerOptions{Level: slog.LevelDebug}
	slogH, flatH := derive(slog.NewJSONHandler(&w, opts)), derive(newFlatJSONHandler(&g, opts))
	for _, r := range records {
		if err := slogH.Handle(context.Background(), r.Clone()); err != nil {
			t.Fatal(err)
		}
		if err := flatH.Handle(context.Background(), r.Clone()); err != nil {
			t.Fatal(err)
		}
	}
	return w.String(), g.String()
}

func same(h slog.Handler) slog.Handler { return h }

func record(tm time.Time, level slog.Level, msg string, attrs ...slog.Attr) slog.Record {
	r := slog.NewRecord(tm, level, msg, 0)
	r.AddAttrs(attrs...)
	return r
}

// Every line flatJSONHandler writes is the line slog's JSON handler writes,
// byte for byte: the access log's, and any other.
func TestFlatJSONHandlerWritesSlogsLines(t *testing.T) {
	now := time.Date(2026, 11, 30, 11, 20, 44, 123456789, time.UTC)
	local := time.Date(2026, 3, 1, 0, 0, 0, 0, time.FixedZone("x", 5*3600+30*60))
	cases := []struct {
		name string
		r    slog.Record
	}{
		{"access line", record(time.Now(), slog.LevelInfo, "request", slog.String("request_id", "0123456789abcdef-0000000000000001"),
			slog.String("method", "GET"), slog.String("path", "/api/users/01J0000000000000000000000"), slog.Int("status", 200),
			slog.Duration("latency", 1234567*time.Nanosecond), slog.String("remote_ip", "127.0.0.1"), slog.String("trace_id", "abc"))},
		{"error level", record(now, slog.LevelError, "request", slog.Int("status", 503))},
		{"custom level", record(now, slog.LevelInfo+2, "m")},
		{"zero time", record(time.Time{}, slog.LevelWarn, "no time", slog.Bool("ok", true))},
		{"time in a zone, whole seconds", record(local, slog.LevelDebug, "zone")},
		{"year past 9999", record(time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), slog.LevelInfo, "far")},
		{"escapes", record(now, slog.LevelInfo, "q\"\\\n\r\t\x00\x1f\x7f<>&", slog.String("k\"ey\n", "a\u2028b\u2029c\xffd\xc3"))},
		{"unicode", record(now, slog.LevelInfo, "héllo 世界 🎉", slog.String("ü", "ñ"))},
		{"numbers", record(now, slog.LevelInfo, "n", slog.Int64("min", -1<<63), slog.Uint64("max", 1<<64-1), slog.Duration("neg", -time.Second))},
		{"float (the JSON handler's)", record(now, slog.LevelInfo, "f", slog.Float64("x", 1e21), slog.String("after", "y"))},
		{"time attr (the JSON handler's)", record(now, slog.LevelInfo, "t", slog.Time("at", now))},
		{"group (the JSON handler's)", record(now, slog.LevelInfo, "g", slog.Group("grp", slog.Int("a", 1)))},
		{"any and error (the JSON handler's)", record(now, slog.LevelInfo, "e", slog.Any("err", errors.New("boom")), slog.Any("m", map[string]int{"a": 1}))},
		{"empty key (the JSON handler's)", record(now, slog.LevelInfo, "k", slog.Attr{}, slog.String("", "v"))},
		{"many attrs", record(now, slog.LevelInfo, "many", slog.Int("a", 1), slog.Int("b", 2), slog.Int("c", 3), slog.Int("d", 4),
			slog.Int("e", 5), slog.Int("f", 6), slog.Int("g", 7))},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			want, got := linesOf(t, same, tc.r)
			if got != want {
				t.Fatalf("flat handler wrote\n%q\nslog's JSON handler\n%q", got, want)
			}
		})
	}
}

// The access log's line is written by the flat path, not handed to slog
// (a handler that always handed over would write the same bytes).
func TestFlatJSONHandlerWritesAccessLineItself(t *testing.T) {
	r := record(time.Now(), slog.LevelInfo, "request", slog.String("request_id", "x"), slog.String("method", "GET"),
		slog.String("path", "/api/users/u"), slog.Int("status", 200), slog.Duration("latency", time.Millisecond),
		slog.String("remote_ip", "127.0.0.1"))
	if _, ok := appendFlatJSON(nil, r); !ok {
		t.Fatal("the access line is handed to slog's JSON handler")
	}
	if _, ok := appendFlatJSON(nil, record(time.Now(), slog.LevelInfo, "g", slog.Group("grp", slog.Int("a", 1)))); ok {
		t.Fatal("a group was written by the flat path")
	}
}

// A handler derived with WithAttrs or WithGroup writes slog's lines too.
func TestFlatJSONHandlerDerived(t *testing.T) {
	r := record(time.Now(), slog.LevelInfo, "request", slog.String("method", "GET"), slog.Int("status", 200))
	for name, derive := range map[string]func(slog.Handler) slog.Handler{
		"WithAttrs": func(h slog.Handler) slog.Handler { return h.WithAttrs([]slog.Attr{slog.String("component", "x")}) },
		"WithGroup": func(h slog.Handler) slog.Handler { return h.WithGroup("g") },
	} {
		t.Run(name, func(t *testing.T) {
			if want, got := linesOf(t, derive, r); got != want {
				t.Fatalf("flat handler wrote\n%q\nslog's JSON handler\n%q", got, want)
			}
		})
	}
}

// Whatever the strings and numbers, the lines are slog's.
func FuzzFlatJSONHandler(f *testing.F) {
	f.Add("request", "path", "/api/users/\xff\u2028", int64(200), int64(-5), true)
	f.Add("", "k", "\x00\"\\", int64(0), int64(1<<40), false)
	f.Fuzz(func(t *testing.T, msg, key, val string, n, d int64, b bool) {
		r := record(time.Unix(0, n).UTC(), slog.Level(n%16), msg, slog.String(key, val), slog.Int64("n", n),
			slog.Duration("d", time.Duration(d)), slog.Bool("b", b))
		if want, got := linesOf(t, same, r); got != want {
			t.Fatalf("flat handler wrote\n%q\nslog's JSON handler\n%q", got, want)
		}
	})
}

func BenchmarkAccessLine(b *testing.B) {
	r := record(time.Now(), slog.LevelInfo, "request", slog.String("request_id", "0123456789abcdef-0000000000000001"),
		slog.String("method", "GET"), slog.String("path", "/api/users/01J0000000000000000000000/permissions"), slog.Int("status", 200),
		slog.Duration("latency", 1234567*time.Nanosecond), slog.String("remote_ip", "127.0.0.1"))
	opts := &slog.HandlerOptions{}
	for name, h := range map[string]slog.Handler{
		"slog": slog.NewJSONHandler(discard{}, opts),
		"flat": newFlatJSONHandler(discard{}, opts),
	} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = h.Handle(context.Background(), r)
			}
		})
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
