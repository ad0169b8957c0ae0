package tracing_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/guildhall/guildhall/internal/tracing"
)

// Off is no provider at all, and a nil provider is safe to use.
func TestOffIsNoProvider(t *testing.T) {
	for _, exporter := range []string{"", "off"} {
		p, err := tracing.New(context.Background(), tracing.Options{Exporter: exporter, SampleRatio: 1})
		if err != nil || p != nil {
			t.Fatalf("New(%q) = %v, %v; want nil, nil", exporter, p, err)
		}
		if tp := p.TracerProvider(); tp != nil {
			t.Fatalf("TracerProvider of nil = %v, want a nil interface", tp)
		}
		if err := p.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tracing.New(context.Background(), tracing.Options{Exporter: "zipkin"}); err == nil {
		t.Fatal("an unknown exporter was accepted")
	}
}

// Sampling is parent-based: the ratio decides the traces the instance
// starts; a caller's decision holds either way.
func TestSamplingFollowsTheParent(t *testing.T) {
	t.Setenv("OTEL_SERVICE_NAME", "") // the default name is checked
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "")
	sampled := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1},
		TraceFlags: trace.FlagsSampled, Remote: true})
	unsampled := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{2}, SpanID: trace.SpanID{2}, Remote: true})
	cases := []struct {
		name   string
		ratio  float64
		parent trace.SpanContext
		want   bool
	}{
		{"a root at ratio 1", 1, trace.SpanContext{}, true},
		{"a root at ratio 0", 0, trace.SpanContext{}, false},
		{"a sampled caller at ratio 0", 0, sampled, true},
		{"an unsampled caller at ratio 1", 1, unsampled, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := tracetest.NewSpanRecorder()
			p, err := tracing.New(context.Background(), tracing.Options{Exporter: "otlp", SampleRatio: tc.ratio,
				Processor: rec, Version: "test"})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Shutdown(context.Background())
			ctx := trace.ContextWithRemoteSpanContext(context.Background(), tc.parent)
			_, sp := p.TracerProvider().Tracer("test").Start(ctx, "request")
			sp.End()
			if got := sp.SpanContext().IsSampled(); got != tc.want {
				t.Fatalf("sampled %v, want %v", got, tc.want)
			}
			if tc.want {
				s := rec.Ended()[0]
				if name, _ := s.Resource().Set().Value("service.name"); name.AsString() != "guildhall" {
					t.Errorf("service.name %q", name.AsString())
				}
			}
		})
	}
}
