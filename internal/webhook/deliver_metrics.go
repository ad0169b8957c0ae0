package webhook

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/store/webhookq"
)

// metrics are the deliverer's. The queue's gauges (pending, oldest
// pending) are the whole deployment's, read from the store: every
// instance reports the same queue.
type metrics struct {
	dispatched prometheus.Counter
	outcomes   *prometheus.CounterVec
	attempts   *prometheus.CounterVec
	duration   prometheus.Histogram
	lapsed     prometheus.Counter

	pending  atomic.Int64
	oldest   atomic.Int64 // Unix microseconds of the oldest pending delivery's creation; 0: none
	observed atomic.Int64 // Unix nanoseconds of the last reading of the queue
}

func newMetrics(reg prometheus.Registerer, d *Deliverer) *metrics {
	m := &metrics{
		dispatched: prometheus.NewCounter(prometheus.CounterOpts{Name: "guildhall_webhook_deliveries_made_total",
			Help: "Deliveries this instance made from committed events (one per matching webhook and event)."}),
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "guildhall_webhook_deliveries_total",
			Help: "Claimed deliveries this instance settled, by outcome: delivered, retried (pending again), failed (after the last attempt, or a 410), " +
				"gone (a 410: failed, the webhook disabled), held (its creator timed out), dropped (an event its creator may not read), " +
				"disabled (its creator lost what a webhook needs), released (not attempted: stopping, or an error)."},
			[]string{"outcome"}),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "guildhall_webhook_attempts_total",
			Help: "Attempts this instance made, by result: delivered (2xx), gone (410), retry (anything else, no answer included)."},
			[]string{"result"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "guildhall_webhook_attempt_duration_seconds",
			Help:    "How long attempts took, from the request to the answer's status (or the failure).",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}}),
		lapsed: prometheus.NewCounter(prometheus.CounterOpts{Name: "guildhall_webhook_deliveries_lapsed_total",
			Help: "Leased deliveries this instance left unattempted because their lease ran short while they waited behind receivers that hang; " +
				"each is claimed again within 5 s of its lease's end."}),
	}
	if reg == nil {
		return m
	}
	reg.MustRegister(m.dispatched, m.outcomes, m.attempts, m.duration, m.lapsed,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "guildhall_webhook_deliveries_pending",
			Help: "Pending deliveries of enabled webhooks, due or waiting for a retry (the deployment's, as last read by this instance)."},
			func() float64 { return float64(m.pending.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "guildhall_webhook_oldest_pending_seconds",
			Help: "Age of the oldest pending delivery of an enabled webhook (0: none): a backlog, or a receiver failing for that long."},
			func() float64 {
				if o := m.oldest.Load(); o != 0 {
					return max(time.Since(time.UnixMicro(o)).Seconds(), 0)
				}
				return 0
			}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "guildhall_webhook_attempts_in_flight",
			Help: "Attempts this instance is making now (bounded by its concurrency)."},
			func() float64 { return float64(d.inFlight.Load()) }))
	return m
}

// observeEvery bounds how stale the queue's gauges get while the
// deliverer is busy.
const observeEvery = 2 * time.Second

// observeQueue keeps the queue's stats for the gauges.
func (m *metrics) observeQueue(st webhookq.Stats) {
	m.pending.Store(st.Pending)
	if st.OldestPending.IsZero() {
		m.oldest.Store(0)
	} else {
		m.oldest.Store(st.OldestPending.UnixMicro())
	}
	m.observed.Store(time.Now().UnixNano())
}

// stale reports whether the queue's gauges are older than observeEvery.
func (m *metrics) stale() bool { return time.Since(time.Unix(0, m.observed.Load())) > observeEvery }

func (m *metrics) attempted(out Outcome, took time.Duration) {
	m.attempts.WithLabelValues(out.Result.String()).Inc()
	m.duration.Observe(took.Seconds())
}

func (m *metrics) outcome(r webhookq.DeliveryRecord) {
	var o string
	switch r.Step {
	case webhookq.StepDelivered:
		o = "delivered"
	case webhookq.StepRetry:
		o = "retried"
	case webhookq.StepFailed:
		o = "failed"
		if r.Disable == model.WebhookDisabledGone {
			o = "gone"
		}
	case webhookq.StepHold:
		o = "held"
	case webhookq.StepDrop:
		o = "dropped"
	default:
		o = "released"
		if r.Disable != "" {
			o = "disabled"
		}
	}
	m.outcomes.WithLabelValues(o).Inc()
}

// refreshQueue reads the queue for the gauges when they are stale.
func (d *Deliverer) refreshQueue(ctx context.Context) {
	if !d.metrics.stale() {
		return
	}
	if st, err := d.o.Queue.Stats(ctx); err == nil {
		d.metrics.observeQueue(st)
	}
}
