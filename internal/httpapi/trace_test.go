package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/guildhall/guildhall/internal/config"
	"github.com/guildhall/guildhall/internal/testenv"
)

// A traced request (GUILDHALL_TRACING=otlp, the spans recorded in memory
// instead of exported) with a W3C traceparent: its server span continues
// the caller's trace and carries the request ID; inside it are the
// authorization (a span, and the service's checks as events), the store's
// statements and the read cache's decisions. Run with -v to see the spans.
func TestTracingSpansOfOneRequest(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		rec := tracetest.NewSpanRecorder()
		e := testenv.Start(t, kind, testenv.WithConfig(func(c *config.Config) {
			c.Tracing, c.SpanProcessor = "otlp", rec
		}))
		alice := e.NewUser("alice")
		e.NewChannel("ops")
		if kind == testenv.Postgres {
			// The instance followed its own writes and answers from memory
			// under its lease: a change by hand makes its next request ask.
			changeByHand(t, e, "UPDATE %s SET topic = 'by hand' WHERE id = 'ops'", "channels")
		}

		const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
		res := e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/users/" + alice.ID + "/permissions?channelID=ops",
			Token: e.Owner, Headers: map[string]string{"traceparent": "00-" + traceID + "-" + parentID + "-01"}})
		for k := range res.Header {
			if strings.HasPrefix(strings.ToLower(k), "trace") {
				t.Errorf("response header %s: tracing adds none", k)
			}
		}
		spans := traceOf(t, rec, traceID)
		t.Logf("the spans of GET /api/users/{userID}/permissions?channelID=ops on %s:\n%s", kind, printSpans(spans))

		server := only(t, spans, func(s sdktrace.ReadOnlySpan) bool { return s.SpanKind() == trace.SpanKindServer })
		if server.Name() != "getUserPermissions" {
			t.Errorf("server span %q, want the operation ID", server.Name())
		}
		if got := server.Parent().SpanID().String(); got != parentID || !server.Parent().IsRemote() {
			t.Errorf("server span's parent %s (remote %v), want the traceparent's %s", got, server.Parent().IsRemote(), parentID)
		}
		if got := attr(server.Attributes(), "guildhall.request_id"); got == "" || got != res.Header.Get("X-Request-ID") {
			t.Errorf("request ID on the span %q, X-Request-ID %q", got, res.Header.Get("X-Request-ID"))
		}
		if got := attr(server.Attributes(), "http.response.status_code"); got != "200" {
			t.Errorf("status on the span %q", got)
		}
		if got := attr(server.Attributes(), "http.route"); got != "/api/users/:userID/permissions" {
			t.Errorf("route on the span %q", got)
		}
		authz := only(t, spans, func(s sdktrace.ReadOnlySpan) bool { return s.Name() == "authorize" })
		if authz.Parent().SpanID() != server.SpanContext().SpanID() {
			t.Errorf("authorize is not a child of the server span")
		}
		if !slices.ContainsFunc(server.Events(), func(ev sdktrace.Event) bool {
			return ev.Name == "authorize.check" && attr(ev.Attributes, "guildhall.permissions") == `["MANAGE_ROLES"]` &&
				attr(ev.Attributes, "guildhall.allowed") == "true"
		}) {
			t.Errorf("no permission check (MANAGE_ROLES, allowed) among the server span's events %v", server.Events())
		}
		statements := 0
		decisions := map[string]bool{}
		for _, s := range spans {
			if attr(s.Attributes(), "db.system.name") != "" {
				statements++
				if !under(spans, s, server) {
					t.Errorf("statement %q outside the request's span", s.Name())
				}
				if attr(s.Attributes(), "db.query.text") == "" {
					t.Errorf("statement %q without its text", s.Name())
				}
			}
			for _, ev := range s.Events() {
				if ev.Name == "cache.hit" || ev.Name == "cache.miss" {
					decisions[ev.Name+" "+attr(ev.Attributes, "guildhall.cache.read")] = true
				}
			}
		}
		if statements == 0 {
			t.Errorf("no statement span")
		}
		// The owner's credentials were read by the requests before; alice
		// was not read since she was created.
		for _, want := range []string{"cache.hit credentials", "cache.miss user"} {
			if !decisions[want] {
				t.Errorf("no %s among the cache's decisions %v", want, decisions)
			}
		}
		follow := only(t, spans, func(s sdktrace.ReadOnlySpan) bool { return s.Name() == "store.follow_changes" })
		if follow.Parent().SpanID() != authz.SpanContext().SpanID() {
			t.Errorf("the freshness question is not asked by the authorization")
		}
		if o := attr(follow.Attributes(), "guildhall.cache.outcome"); o != "changed" && o != "unchanged" && o != "reset" {
			t.Errorf("freshness question's outcome %q", o)
		}

		// A write: its statements run on the store's writer, under the
		// span of the request's write.
		const writeTrace = "0af7651916cd43dd8448eb211c80319c"
		e.Must(http.StatusCreated, testenv.Req{Method: "POST", Path: "/roles/mods/create", Token: e.Owner,
			Body:    map[string]any{"name": "Moderators", "permissions": []string{"MANAGE_MESSAGES"}},
			Headers: map[string]string{"traceparent": "00-" + writeTrace + "-b7ad6b7169203331-01"}})
		spans = traceOf(t, rec, writeTrace)
		t.Logf("the spans of POST /api/roles/mods/create on %s:\n%s", kind, printSpans(spans))
		write := only(t, spans, func(s sdktrace.ReadOnlySpan) bool { return s.Name() == "store.write" })
		inserts := 0
		for _, s := range spans {
			if s.Parent().SpanID() == write.SpanContext().SpanID() && strings.HasPrefix(s.Name(), "INSERT roles") {
				inserts++
			}
		}
		if inserts == 0 {
			t.Errorf("no INSERT roles under store.write")
		}

		// A statement GORM builds as a subquery (a dry run, nothing sent)
		// has no span: the audit log's page is a subquery in a statement,
		// and the spans of statements are the statements counted.
		const auditTrace = "5bf92f3577b34da6a3ce929d0e0e4737"
		sent := e.App.Store.QueryCount()
		e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/audit-log?type=role.*", Token: e.Owner,
			Headers: map[string]string{"traceparent": "00-" + auditTrace + "-b7ad6b7169203332-01"}})
		sent = e.App.Store.QueryCount() - sent
		spans = traceOf(t, rec, auditTrace)
		traced := 0
		for _, s := range spans {
			if attr(s.Attributes(), "db.system.name") != "" {
				traced++
			}
		}
		if traced == 0 || int64(traced) != sent {
			t.Errorf("GET /audit-log?type=role.*: %d statement spans for %d statements sent:\n%s", traced, sent, printSpans(spans))
		}

		// The caller's decision holds: a trace it does not sample records
		// nothing here.
		const unsampled = "11111111111111111111111111111111"
		e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/users/" + alice.ID, Token: e.Owner,
			Headers: map[string]string{"traceparent": "00-" + unsampled + "-2222222222222222-00"}})
		time.Sleep(50 * time.Millisecond) // the server span ends after the answer
		for _, s := range rec.Started() {
			if s.SpanContext().TraceID().String() == unsampled {
				t.Fatalf("span %q of an unsampled trace", s.Name())
			}
		}
	})
}

// Tracing off (the default) starts no span, even with a traceparent and a
// tracer provider installed process-wide: the instance uses none.
func TestTracingOffRecordsNothing(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))
	t.Cleanup(func() { otel.SetTracerProvider(prev) })
	e := testenv.Start(t, testenv.SQLite)
	u := e.NewUser("alice")
	e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/users/" + u.ID, Token: e.Owner,
		Headers: map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}})
	if n := len(rec.Started()); n != 0 {
		t.Fatalf("%d spans started with tracing off", n)
	}
}

// traceOf waits for the server span of a trace to end and returns the
// trace's spans.
func traceOf(t *testing.T, rec *tracetest.SpanRecorder, traceID string) []sdktrace.ReadOnlySpan {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		var spans []sdktrace.ReadOnlySpan
		done := false
		for _, s := range rec.Ended() {
			if s.SpanContext().TraceID().String() == traceID {
				spans = append(spans, s)
				done = done || s.SpanKind() == trace.SpanKindServer
			}
		}
		if done {
			return spans
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server span of trace %s did not end; ended: %d spans", traceID, len(spans))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func only(t *testing.T, spans []sdktrace.ReadOnlySpan, match func(sdktrace.ReadOnlySpan) bool) sdktrace.ReadOnlySpan {
	t.Helper()
	var found []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if match(s) {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d matching spans, want 1:\n%s", len(found), printSpans(spans))
	}
	return found[0]
}

func attr(attrs []attribute.KeyValue, key string) string {
	for _, kv := range attrs {
		if string(kv.Key) == key {
			return kv.Value.String()
		}
	}
	return ""
}

// under reports whether s descends from ancestor.
func under(spans []sdktrace.ReadOnlySpan, s, ancestor sdktrace.ReadOnlySpan) bool {
	byID := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	for _, x := range spans {
		byID[x.SpanContext().SpanID()] = x
	}
	for p, ok := s, true; ok; p, ok = byID[p.Parent().SpanID()] {
		if p.Parent().SpanID() == ancestor.SpanContext().SpanID() {
			return true
		}
	}
	return false
}

// printSpans renders a trace as a tree, children in the order they
// started, each span with its attributes and events.
func printSpans(spans []sdktrace.ReadOnlySpan) string {
	ids := map[trace.SpanID]bool{}
	for _, s := range spans {
		ids[s.SpanContext().SpanID()] = true
	}
	slices.SortFunc(spans, func(a, b sdktrace.ReadOnlySpan) int { return a.StartTime().Compare(b.StartTime()) })
	var b strings.Builder
	var walk func(parent trace.SpanID, root bool, depth int)
	walk = func(parent trace.SpanID, root bool, depth int) {
		for _, s := range spans {
			if root && ids[s.Parent().SpanID()] || !root && s.Parent().SpanID() != parent {
				continue
			}
			pad := strings.Repeat("  ", depth)
			fmt.Fprintf(&b, "%s%s [%s]", pad, s.Name(), s.SpanKind())
			if s.Status().Code != 0 {
				fmt.Fprintf(&b, " status=%s", s.Status().Code)
			}
			fmt.Fprintf(&b, " %s\n", attrList(s.Attributes()))
			for _, ev := range s.Events() {
				fmt.Fprintf(&b, "%s  · %s %s\n", pad, ev.Name, attrList(ev.Attributes))
			}
			walk(s.SpanContext().SpanID(), false, depth+1)
		}
	}
	walk(trace.SpanID{}, true, 0)
	return b.String()
}

func attrList(attrs []attribute.KeyValue) string {
	out := make([]string, 0, len(attrs))
	for _, kv := range attrs {
		v := kv.Value.String()
		if kv.Key == "db.query.text" && len(v) > 60 {
			v = v[:60] + "…"
		}
		out = append(out, string(kv.Key)+"="+v)
	}
	return strings.Join(out, " ")
}

// changeByHand runs stmt on e's PostgreSQL database as an operator would
// (psql: not through the service), its %s the schema-qualified table, and
// returns once the instance has heard of it: its next request asks the
// change log.
func changeByHand(t *testing.T, e *testenv.Env, stmt, table string) {
	t.Helper()
	ctx := context.Background()
	u, err := url.Parse(e.Config.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	operator, err := pgx.Connect(ctx, testenv.PostgresURL())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = operator.Close(ctx) }()
	if _, err := operator.Exec(ctx, fmt.Sprintf(stmt, pgx.Identifier{u.Query().Get("search_path"), table}.Sanitize())); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); e.App.Store.CacheStats().LeaseCurrent; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the instance did not hear a change by hand within 10 s")
		}
	}
}
