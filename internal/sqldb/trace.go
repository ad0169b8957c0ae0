package sqldb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"gorm.io/gorm"
)

// Tracing, off unless Options.Tracer is set (when off, db.tracer is nil
// and every hook below returns at its nil check). On, the DB adds to the span
// its caller's context carries, and to nothing else: a statement of a
// background loop, whose context carries no span, is not traced.
//
//   - Every statement, where it is counted (QueryCount): GORM's through
//     callbacks, the hand-written ones in Queries.Query and Queries.Exec,
//     and the change log's questions (StatementSpan). A span per
//     statement, named by its summary ("SELECT users"), with the query
//     text (bounded; the arguments never, they are bound parameters).
//   - A write: a span "store.write" from the request's Write to its
//     answer, with the statements of its part of the batch as children
//     (they run on the writer goroutine, under the batch's context).
//
// The read cache traces its decisions with the same tracer (Tracer), so
// the store's spans are one instrumentation scope, whichever package
// starts them.
const tracerName = "github.com/guildhall/guildhall/internal/store"

// maxQueryText bounds the query text kept on a statement's span (GORM
// writes IN lists of any length).
const maxQueryText = 1024

// Attributes of the writes' spans and events beyond the semantic
// conventions.
const (
	attrBatchWrites = attribute.Key("guildhall.store.batch_writes")
	attrSavepoints  = attribute.Key("guildhall.store.savepoints")
)

type tracer struct {
	t      trace.Tracer
	system attribute.KeyValue // db.system.name
}

func newTracer(tp trace.TracerProvider, d Dialect) *tracer {
	if tp == nil {
		return nil
	}
	sys := semconv.DBSystemNameSQLite
	if d.Name() == "postgres" {
		sys = semconv.DBSystemNamePostgreSQL
	}
	return &tracer{t: tp.Tracer(tracerName), system: sys}
}

// recording returns ctx's span when t is on and the span records.
func (t *tracer) recording(ctx context.Context) (trace.Span, bool) {
	if t == nil {
		return nil, false
	}
	sp := trace.SpanFromContext(ctx)
	return sp, sp.IsRecording()
}

// statement starts the span of a statement whose text is known; nil when
// it is not traced.
func (t *tracer) statement(ctx context.Context, query string) trace.Span {
	if _, ok := t.recording(ctx); !ok {
		return nil
	}
	_, sp := t.t.Start(ctx, "db", trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(t.system))
	describeStatement(sp, query, "")
	return sp
}

// describeStatement names a statement's span and sets what it ran.
func describeStatement(sp trace.Span, query, table string) {
	op, target := summarize(query)
	if target == "" {
		target = table
	}
	summary := op
	if target != "" {
		summary += " " + target
		sp.SetAttributes(semconv.DBCollectionName(target))
	}
	if len(query) > maxQueryText {
		query = query[:maxQueryText] + "…"
	}
	sp.SetName(summary)
	sp.SetAttributes(semconv.DBOperationName(op), semconv.DBQuerySummary(summary), semconv.DBQueryText(query))
}

// EndSpan ends a statement's or a write's span (nil: not traced), failed
// when err is set; "no rows" is an answer, not a failure.
func EndSpan(sp trace.Span, err error) {
	if sp == nil {
		return
	}
	if err != nil && !errors.Is(err, sql.ErrNoRows) && !errors.Is(err, gorm.ErrRecordNotFound) {
		sp.RecordError(err)
		sp.SetStatus(codes.Error, "failed")
	}
	sp.End()
}

// summarize returns a statement's operation (its first keyword, upper
// case) and the table it is about: the first name after FROM, INTO or
// UPDATE outside parentheses (or after PRAGMA), unquoted.
func summarize(query string) (op, table string) {
	depth, i := 0, 0
	word := func() string { // the next word or punctuation at i
		for i < len(query) && (query[i] == ' ' || query[i] == '\n' || query[i] == '\t' || query[i] == '\r') {
			i++
		}
		start := i
		for i < len(query) && isNameByte(query[i]) {
			i++
		}
		if i == start && i < len(query) {
			i++
		}
		return query[start:i]
	}
	op = strings.ToUpper(word())
	if op == "" {
		return "", ""
	}
	if op == "PRAGMA" {
		return op, strings.Trim(word(), "`\"")
	}
	if op == "UPDATE" {
		return op, unquote(word())
	}
	for i < len(query) {
		w := word()
		switch {
		case w == "(":
			depth++
		case w == ")":
			depth--
		case depth == 0 && (strings.EqualFold(w, "FROM") || strings.EqualFold(w, "INTO")):
			if name := unquote(word()); name != "(" {
				return op, name
			}
			return op, ""
		}
	}
	return op, ""
}

func isNameByte(b byte) bool {
	return b == '_' || b == '.' || b == '`' || b == '"' || b >= '0' && b <= '9' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z'
}

func unquote(name string) string {
	name = strings.ReplaceAll(strings.ReplaceAll(name, "`", ""), `"`, "")
	if len(name) > 64 {
		name = name[:64]
	}
	return name
}

// traceStatements registers GORM callbacks that give each of g's
// statements a span (only when tracing is on).
func (db *DB) traceStatements(g *gorm.DB) error {
	if db.tracer == nil {
		return nil
	}
	const key = "guildhall:span"
	start := func(g *gorm.DB) {
		ctx := g.Statement.Context
		if ctx == nil || g.DryRun { // a subquery's build: nothing is sent
			return
		}
		if _, ok := db.tracer.recording(ctx); !ok {
			return
		}
		_, sp := db.tracer.t.Start(ctx, "db", trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(db.tracer.system))
		g.InstanceSet(key, sp)
	}
	end := func(g *gorm.DB) {
		v, ok := g.InstanceGet(key)
		if !ok {
			return
		}
		sp := v.(trace.Span)
		describeStatement(sp, g.Statement.SQL.String(), g.Statement.Table)
		EndSpan(sp, g.Error)
	}
	cb := g.Callback()
	const name = "guildhall:trace"
	for _, err := range []error{
		cb.Create().Before("gorm:create").Register(name, start),
		cb.Create().After("gorm:create").Register(name+"_end", end),
		cb.Query().Before("gorm:query").Register(name, start),
		cb.Query().After("gorm:query").Register(name+"_end", end),
		cb.Update().Before("gorm:update").Register(name, start),
		cb.Update().After("gorm:update").Register(name+"_end", end),
		cb.Delete().Before("gorm:delete").Register(name, start),
		cb.Delete().After("gorm:delete").Register(name+"_end", end),
		cb.Raw().Before("gorm:raw").Register(name, start),
		cb.Raw().After("gorm:raw").Register(name+"_end", end),
		cb.Row().Before("gorm:row").Register(name, start),
		cb.Row().After("gorm:row").Register(name+"_end", end),
	} {
		if err != nil {
			return fmt.Errorf("register statement tracing: %w", err)
		}
	}
	return nil
}

// write starts the span of a write, from Write to its answer; nil when not
// traced.
func (t *tracer) write(ctx context.Context) (context.Context, trace.Span) {
	if _, ok := t.recording(ctx); !ok {
		return ctx, nil
	}
	return t.t.Start(ctx, "store.write")
}

// running notes on a write's span that its batch began running it.
func running(sp trace.Span, batch int, savepoints bool) {
	if sp == nil {
		return
	}
	sp.AddEvent("transaction", trace.WithAttributes(attrBatchWrites.Int(batch), attrSavepoints.Bool(savepoints)))
}

// Tracer is the tracer of the store's spans (nil when tracing is off),
// for the read cache's (internal/fresh).
func (db *DB) Tracer() trace.Tracer {
	if db.tracer == nil {
		return nil
	}
	return db.tracer.t
}

// StatementSpan starts the span of a statement sent outside Queries (the
// read cache's questions to the change log), as Queries traces its own; nil
// when it is not traced. EndSpan ends it.
func (db *DB) StatementSpan(ctx context.Context, query string) trace.Span {
	return db.tracer.statement(ctx, query)
}
