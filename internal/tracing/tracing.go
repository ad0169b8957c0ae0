// Package tracing builds an instance's OpenTelemetry tracer provider. It is
// off unless configured: then there is no provider at all, and the packages
// that trace (internal/httpapi, internal/store, internal/guild) skip their
// work behind a nil check.
//
// On, spans go through a batching processor to the OTLP/HTTP exporter, which
// reads the standard OTEL_EXPORTER_OTLP_* variables (endpoint, headers,
// timeout, TLS); the resource reads OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES. Sampling is parent-based: a request whose
// traceparent says "sampled" is recorded, one that says "not sampled" is
// not, and a trace this instance starts is recorded with the configured
// ratio.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// Options say whether and where to send traces.
type Options struct {
	// Exporter is "off" (or empty) or "otlp".
	Exporter string
	// SampleRatio is the share of the traces started here that are
	// recorded (0 to 1).
	SampleRatio float64
	// Version is the service.version of the resource.
	Version string
	// Processor, when set, receives the spans instead of the OTLP exporter
	// (tests).
	Processor sdktrace.SpanProcessor
	// Logger reports the exporter's failures.
	Logger *slog.Logger
}

// Provider is an instance's tracer provider.
type Provider struct {
	sdk *sdktrace.TracerProvider
}

// New returns the provider the options ask for; nil when tracing is off.
func New(ctx context.Context, o Options) (*Provider, error) {
	switch o.Exporter {
	case "", "off":
		return nil, nil
	case "otlp":
	default:
		return nil, fmt.Errorf("tracing: unknown exporter %q", o.Exporter)
	}
	if o.SampleRatio < 0 || o.SampleRatio > 1 {
		return nil, errors.New("tracing: the sample ratio must be between 0 and 1")
	}
	// The variables come last, so that OTEL_SERVICE_NAME and
	// OTEL_RESOURCE_ATTRIBUTES win over the defaults.
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName("guildhall"), semconv.ServiceVersion(o.Version)),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv())
	if err != nil {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	opts := []sdktrace.TracerProviderOption{
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(o.SampleRatio))),
	}
	if o.Processor != nil {
		opts = append(opts, sdktrace.WithSpanProcessor(o.Processor))
	} else {
		// Nothing is sent yet: the exporter connects when the first batch
		// goes out.
		exp, err := otlptracehttp.New(ctx)
		if err != nil {
			return nil, fmt.Errorf("tracing: OTLP exporter: %w", err)
		}
		opts = append(opts, sdktrace.WithBatcher(exp))
	}
	if o.Logger != nil {
		// The SDK reports export failures through its one process-wide
		// handler; without this they would go to the standard logger,
		// outside the JSON log.
		log := o.Logger
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Warn("tracing", "err", err) }))
	}
	return &Provider{sdk: sdktrace.NewTracerProvider(opts...)}, nil
}

// TracerProvider is what the tracing packages take: nil when p is (tracing
// off), never an interface holding a nil pointer.
func (p *Provider) TracerProvider() trace.TracerProvider {
	if p == nil {
		return nil
	}
	return p.sdk
}

// Shutdown sends the spans still buffered and stops the exporter, within
// ctx's deadline. A nil provider has nothing to do.
func (p *Provider) Shutdown(ctx context.Context) error {
	if p == nil {
		return nil
	}
	if err := p.sdk.Shutdown(ctx); err != nil {
		return fmt.Errorf("tracing: shut down: %w", err)
	}
	return nil
}
