package fresh

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Tracing says how the cache traces, off unless Tracer is set. On, it adds
// to the span its caller's context carries, and to nothing else:
//
//   - its decision: an event "cache.hit" or "cache.miss" on the current
//     span for each cacheable read;
//   - a span "store.follow_changes" for the freshness question (following
//     the change log), with its outcome: unchanged, changed (and how many
//     changes), or reset;
//   - the statements of SQLite's log connection, through Statement.
type Tracing struct {
	Tracer trace.Tracer
	// Statement starts the span of a statement (nil when it is not
	// traced), as the store traces its own; End ends it.
	Statement func(ctx context.Context, query string) trace.Span
	End       func(sp trace.Span, err error)
}

// Attributes of the cache's spans and events beyond the semantic
// conventions.
const (
	attrCacheRead    = attribute.Key("guildhall.cache.read")    // credentials, user, user_page, and each View's name
	attrCacheOutcome = attribute.Key("guildhall.cache.outcome") // unchanged, changed, reset
	attrCacheChanges = attribute.Key("guildhall.cache.changes") // changes followed
	attrCacheVersion = attribute.Key("guildhall.cache.version") // the change log's version followed to
	attrViewParts    = attribute.Key("guildhall.cache.rebuild") // the parts of a View read again
)

type tracer struct{ Tracing }

func newTracer(t Tracing) *tracer {
	if t.Tracer == nil {
		return nil
	}
	return &tracer{t}
}

// recording returns ctx's span when t is on and the span records.
func (t *tracer) recording(ctx context.Context) (trace.Span, bool) {
	if t == nil {
		return nil, false
	}
	sp := trace.SpanFromContext(ctx)
	return sp, sp.IsRecording()
}

// statement starts the span of a statement of the log's connection.
func (t *tracer) statement(ctx context.Context, query string) trace.Span {
	if t == nil || t.Statement == nil {
		return nil
	}
	return t.Statement(ctx, query)
}

func (t *tracer) end(sp trace.Span, err error) {
	if sp != nil && t.End != nil {
		t.End(sp, err)
	}
}

// decided records the cache's answer to a cacheable read as an event of
// the current span.
func (t *tracer) decided(ctx context.Context, read string, hit bool, attrs ...attribute.KeyValue) {
	sp, ok := t.recording(ctx)
	if !ok {
		return
	}
	name := "cache.miss"
	if hit {
		name = "cache.hit"
	}
	sp.AddEvent(name, trace.WithAttributes(append(attrs, attrCacheRead.String(read))...))
}

// cacheReads names the cacheable reads for decided.
var cacheReads = map[Kind]string{Credentials: "credentials", User: "user", UserPage: "user_page"}

// followSpan starts the span of a freshness question, with what the cache
// had followed so far; nil when not traced.
func (t *tracer) followSpan(ctx context.Context, c *Cache) (context.Context, *followTrace) {
	if _, ok := t.recording(ctx); !ok {
		return ctx, nil
	}
	ctx, sp := t.Tracer.Start(ctx, "store.follow_changes")
	return ctx, &followTrace{span: sp, changes: c.changes.Load(), resets: c.resets.Load()}
}

// followTrace is a freshness question being traced.
type followTrace struct {
	span            trace.Span
	changes, resets int64
}

// end records the question's outcome: what the cache followed while the
// request waited for it (on PostgreSQL a question answers every read
// waiting for it, so what it followed is what each of them waited for).
func (f *followTrace) end(c *Cache, err error) {
	if f == nil {
		return
	}
	if err != nil {
		f.span.RecordError(err)
		f.span.SetStatus(codes.Error, "the change log did not answer")
		f.span.End()
		return
	}
	changes := c.changes.Load() - f.changes
	outcome := "unchanged"
	switch {
	case c.resets.Load() > f.resets:
		outcome = "reset"
	case changes > 0:
		outcome = "changed"
	}
	c.mu.Lock()
	v := c.pos.v
	c.mu.Unlock()
	f.span.SetAttributes(attrCacheOutcome.String(outcome), attrCacheChanges.Int64(changes), attrCacheVersion.Int64(v))
	f.span.End()
}
