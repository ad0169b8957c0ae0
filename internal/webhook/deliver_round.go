package webhook

import (
	"context"
	"errors"
	"net"
	"net/url"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/store/webhookq"
)

const tracerName = "github.com/guildhall/guildhall/internal/webhook"

// claim claims up to n deliveries due at now and starts what each needs
// (see Deliverer, take): it returns how many it claimed.
func (d *Deliverer) claim(ctx context.Context, n int, now time.Time) (int, error) {
	claimed, err := d.o.Queue.Claim(ctx, d.o.Instance, now, d.leaseFor(len(d.work)+n), n)
	if err != nil || len(claimed) == 0 {
		return 0, err
	}
	d.take(ctx, claimed)
	return len(claimed), nil
}

// take starts what each delivery claimed needs: it judges them by their
// creators, then queues those to attempt.
func (d *Deliverer) take(ctx context.Context, claimed []webhookq.ClaimedDelivery) {
	var order []string
	byCreator := map[string][]webhookq.ClaimedDelivery{}
	for _, c := range claimed {
		if _, ok := byCreator[c.CreatorID]; !ok {
			order = append(order, c.CreatorID)
		}
		byCreator[c.CreatorID] = append(byCreator[c.CreatorID], c)
	}
	for _, id := range order {
		d.judge(ctx, id, byCreator[id])
	}
}

// judge asks about the creator of deliveries claimed together, then
// attempts each the creator may read, and records the others' fate.
func (d *Deliverer) judge(ctx context.Context, creatorID string, ds []webhookq.ClaimedDelivery) {
	release := func(err error) {
		if ctx.Err() == nil {
			d.o.Logger.Warn("webhook deliveries: judging the creator failed; released", "creator_id", creatorID, "err", err)
		}
		for _, c := range ds {
			d.record(recordOf(c, webhookq.StepRelease))
		}
	}
	cr, err := d.o.Audience.WebhookCreator(ctx, creatorID)
	if err != nil {
		release(err)
		return
	}
	switch cr.Standing {
	case Lost:
		for _, c := range ds {
			r := recordOf(c, webhookq.StepRelease)
			r.Disable = model.WebhookDisabledByCreator
			r.DisableEvent = d.disableEvent(cr.Why)
			d.record(r)
		}
		return
	case Held:
		for _, c := range ds {
			r := recordOf(c, webhookq.StepHold)
			r.NextAttemptAt = minTime(cr.Until, d.o.Now().Add(holdRecheck))
			d.record(r)
		}
		return
	}
	var events []model.Event
	seen := map[int64]bool{}
	for _, c := range ds {
		if c.Event != nil && !seen[c.EventSeq] {
			seen[c.EventSeq] = true
			events = append(events, *c.Event)
		}
	}
	visible, err := cr.Visible(ctx, events)
	if err != nil {
		release(err)
		return
	}
	bodies := map[int64][]byte{}
	for _, e := range visible {
		if bodies[e.Seq], err = d.o.Encode(e); err != nil {
			release(err)
			return
		}
	}
	for _, c := range ds {
		switch body, ok := bodies[c.EventSeq]; {
		case c.Event == nil:
			// Purged by the audit log's retention: nothing to deliver.
			r := recordOf(c, webhookq.StepFailed)
			r.Error = "the event is no longer kept"
			d.record(r)
		case !ok:
			d.record(recordOf(c, webhookq.StepDrop)) // hidden from the creator
		default:
			d.start(c, body)
		}
	}
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func recordOf(c webhookq.ClaimedDelivery, step webhookq.DeliveryStep) webhookq.DeliveryRecord {
	return webhookq.DeliveryRecord{ID: c.ID, LeaseUntil: c.LeaseUntil, WebhookID: c.WebhookID, Step: step}
}

// record hands an outcome to the recorder; it waits while the recorder's
// queue is full, which slows the claims down to what can be recorded.
func (d *Deliverer) record(r webhookq.DeliveryRecord) { d.records <- r }

// disableEvent makes the event of a webhook the deliverer disables.
func (d *Deliverer) disableEvent(why string) func(before, after model.Webhook) model.Event {
	return func(before, after model.Webhook) model.Event { return d.o.Audience.WebhookDisabled(before, after, why) }
}

// job is a claimed delivery a worker attempts, and its body.
type job struct {
	c    webhookq.ClaimedDelivery
	body []byte
}

// start queues a delivery for the workers; claims never exceed the
// queue's room, so it does not wait.
func (d *Deliverer) start(c webhookq.ClaimedDelivery, body []byte) { d.work <- job{c: c, body: body} }

// worker attempts the queued deliveries one at a time until the queue
// closes; once ctx ends, what is still queued is released unattempted. A
// delivery whose lease no longer covers its attempt (it waited behind a
// receiver that hangs) is left as it is: once the lease ends a claim
// takes it, here or elsewhere.
func (d *Deliverer) worker(ctx context.Context) {
	for j := range d.work {
		select {
		case d.freed <- struct{}{}:
		default:
		}
		if ctx.Err() != nil {
			d.record(recordOf(j.c, webhookq.StepRelease))
			continue
		}
		if !d.covers(j.c) {
			d.metrics.lapsed.Inc()
			continue
		}
		d.inFlight.Add(1)
		r := d.attempt(ctx, j.c, j.body)
		d.inFlight.Add(-1)
		d.record(r)
	}
}

// attempt makes one attempt and says what it means for the delivery.
func (d *Deliverer) attempt(ctx context.Context, c webhookq.ClaimedDelivery, body []byte) webhookq.DeliveryRecord {
	number := c.Attempts + 1
	ctx, span := d.span(ctx, c, number)
	began := time.Now()
	out := Attempt(ctx, d.client, c.URL, Delivery{ID: c.ID, Body: body}, c.Secrets, d.o.Now())
	d.metrics.attempted(out, time.Since(began))
	r := recordOf(c, webhookq.StepRetry)
	r.Attempted, r.Status, r.Error = true, out.Status, describe(out.Err)
	switch {
	case out.Result == Delivered:
		r.Step = webhookq.StepDelivered
	case out.Result == Gone:
		r.Step, r.Disable = webhookq.StepFailed, model.WebhookDisabledGone
		r.DisableEvent = d.disableEvent("its receiver answered 410 Gone")
	case ctx.Err() != nil:
		// Cut short by Close: not counted, attempted again at once.
		r = recordOf(c, webhookq.StepRelease)
		out.Err = errCut
	default:
		next, ok := NextAttempt(number, d.o.Now(), out.RetryAfter, d.o.Rand)
		if ok {
			r.NextAttemptAt = next
		} else {
			r.Step = webhookq.StepFailed
		}
	}
	endSpan(span, out, r.Step)
	return r
}

// describe says why no answer came, for the delivery's last_error: never
// the address a name resolved to (URLError's Detail is written for the
// webhook's creator), nor the connection's details.
func describe(err error) string {
	var ue *URLError
	var ne net.Error
	switch {
	case err == nil:
		return ""
	case errors.As(err, &ue):
		return ue.Detail
	case errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout():
		return "No answer came within " + strconv.Itoa(int(AttemptTimeout/time.Second)) + " s."
	case errors.Is(err, ErrMalformedSecret):
		return "The webhook's secret cannot sign."
	}
	return "The connection to the receiver failed."
}

// span starts an attempt's span (a client span); nil when tracing is off.
// It names the destination's scheme and host, never its path or query,
// which may hold a token of the receiver's.
func (d *Deliverer) span(ctx context.Context, c webhookq.ClaimedDelivery, number int) (context.Context, trace.Span) {
	if d.tracer == nil {
		return ctx, nil
	}
	attrs := []attribute.KeyValue{
		attribute.String("guildhall.webhook_id", c.WebhookID),
		attribute.String("guildhall.delivery_id", c.ID),
		attribute.Int64("guildhall.event_seq", c.EventSeq),
		attribute.Int("guildhall.webhook.attempt", number),
		attribute.Int("guildhall.webhook.signatures", len(c.Secrets)),
	}
	if u, err := url.Parse(c.URL); err == nil {
		attrs = append(attrs, attribute.String("url.scheme", u.Scheme), attribute.String("server.address", u.Hostname()))
	}
	return d.tracer.Start(ctx, "webhook.attempt", trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
}

var stepNames = map[webhookq.DeliveryStep]string{webhookq.StepDelivered: "delivered", webhookq.StepRetry: "retry",
	webhookq.StepFailed: "failed", webhookq.StepRelease: "released"}

func endSpan(span trace.Span, out Outcome, step webhookq.DeliveryStep) {
	if span == nil {
		return
	}
	if out.Status != 0 {
		span.SetAttributes(attribute.Int("http.response.status_code", out.Status))
	}
	span.SetAttributes(attribute.String("guildhall.webhook.result", stepNames[step]))
	if out.Result != Delivered {
		msg := "HTTP " + strconv.Itoa(out.Status)
		if out.Err != nil {
			msg = describe(out.Err)
		}
		span.SetStatus(codes.Error, msg)
	}
	span.End()
}
