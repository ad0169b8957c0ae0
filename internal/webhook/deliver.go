package webhook

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/sqldb"
	"github.com/guildhall/guildhall/internal/store/webhookq"
)

// The Deliverer: every instance runs one. It wakes after every commit (the
// events broker, which on PostgreSQL hears every instance's commits) and
// when the next attempt falls due, then
//
//  1. dispatches: makes the deliveries of the events committed since the
//     last dispatch, those its queue has room for (queuePerWorker)
//     leased to this instance already (webhookq.Queue.DispatchLeased);
//  2. claims the other due deliveries (retries, those a dispatch had no
//     room for, those whose lease ended), as many as its queue has room
//     for, each leased to this instance (webhookq.Queue.Claim): one
//     instance attempts a delivery at a time. It claims the next while
//     the workers attempt the last;
//  3. asks about each webhook's creator as of now (Audience): a creator
//     who cannot read the audit log any more disables the webhook, a
//     timed-out one holds its deliveries, and an event the creator could
//     not read in the audit log is dropped;
//  4. attempts the others, in Concurrency workers (so at most that many
//     at once), outside any transaction: a writer never waits for a
//     receiver. One whose lease no longer covers its attempt (it waited
//     behind receivers that hang) is left for its lease to end;
//  5. records the outcomes in batches (webhookq.Queue.Record), each only
//     while its lease is still this instance's.
//
// An instance killed mid-attempt leaves its leases to end: another
// instance, or this one restarted, claims the deliveries again, and the
// receiver may get one twice (at least once, never lost).
//
// An event hidden from the creator (a channel they cannot view, or one
// deleted since) is dropped: its delivery is deleted, so the webhook's
// list of deliveries never names an event its creator could not read, and
// it is never attempted, even if the creator may read it later.

// Defaults of DelivererOptions.
const (
	DefaultConcurrency = 16
	// queuePerWorker: the queue holds this many leased deliveries per
	// worker: room for what a dispatch makes under a stream of writes to
	// a prompt receiver (a dispatch every dispatchGap), so that it leases
	// most of them and few are left for a claim, which costs a
	// transaction and a row version more. A backlog is claimed in batches
	// as large.
	queuePerWorker = 16
	// coveredPerWorker: a lease covers the attempts of this many
	// deliveries per worker queued ahead (leaseFor), a minute's worth if
	// the receiver hangs; an instance killed holds its deliveries no
	// longer. A delivery further back whose lease no longer covers its
	// attempt when a worker takes it is left for its lease to end and a
	// claim (the queue's tail, only behind a receiver that hangs).
	coveredPerWorker = 4
	// leaseMargin is the lease's room beyond the attempts it must cover:
	// recording the outcome.
	leaseMargin = 10 * time.Second
	// DefaultPoll bounds how long the deliverer sleeps without a signal:
	// a commit whose signal was lost (a listener reconnecting), a lease
	// that ended (another instance's, or one this instance left
	// unattempted).
	DefaultPoll = 5 * time.Second
	// holdRecheck bounds how long a timed-out creator's deliveries wait
	// before the creator is asked again (their timeout may be lifted).
	holdRecheck = 5 * time.Minute
	// dispatchGap spaces dispatches: under a stream of writes, the commits
	// of a gap share one dispatch transaction, which the writers' own
	// would otherwise wait behind, one for each.
	dispatchGap = 50 * time.Millisecond
	// quietRecount spaces the counts of enabled webhooks that commits
	// prompt while none is enabled: the commit that creates or enables
	// the first one is followed by its count within this, on every
	// instance, at the cost of a count this often under a stream of
	// writes that no webhook receives.
	quietRecount  = 250 * time.Millisecond
	dispatchBatch = 500
	recordBatch   = 256
	// recordLinger bounds how long an outcome waits for others to be
	// recorded with it.
	recordLinger = 20 * time.Millisecond
)

// Signals wake the deliverer after commits and hear of the events it
// commits itself (a webhook disabled); *events.Broker is one.
type Signals interface {
	Subscribe() (<-chan struct{}, func())
	Published(lastSeq int64)
}

// Queue is the delivery queue the deliverer works through;
// *webhookq.Queue is the store's.
type Queue interface {
	DispatchLeased(ctx context.Context, limit int, lease webhookq.Lease) (webhookq.Dispatched, error)
	Claim(ctx context.Context, owner string, now time.Time, lease time.Duration, limit int) ([]webhookq.ClaimedDelivery, error)
	Record(ctx context.Context, owner string, recs []webhookq.DeliveryRecord) ([]model.Event, error)
	EnabledWebhooks(ctx context.Context) (int64, error)
	NextAttempt(ctx context.Context, now time.Time) (time.Time, error)
	Stats(ctx context.Context) (webhookq.Stats, error)
}

// DelivererOptions configure a Deliverer.
type DelivererOptions struct {
	Queue    Queue
	Audience Audience
	// Encode writes an event as the audit log shows it: a delivery's body.
	Encode  func(model.Event) ([]byte, error)
	Signals Signals
	// AllowPrivate lets deliveries reach loopback, private, link-local,
	// shared and unspecified addresses (GUILDHALL_WEBHOOK_ALLOW_PRIVATE).
	AllowPrivate bool
	Resolver     Resolver
	// Instance names this instance in the leases it takes; "" draws one.
	Instance string
	// Concurrency bounds the attempts in flight (DefaultConcurrency).
	Concurrency int
	// Poll, the longest sleep (DefaultPoll); Timeout bounds an attempt
	// (AttemptTimeout).
	Poll, Timeout time.Duration
	Logger        *slog.Logger
	Tracer        trace.TracerProvider  // nil: no spans
	Registerer    prometheus.Registerer // nil: no metrics
	Now           func() time.Time      // nil: time.Now
	Rand          func() float64        // the retries' jitter; nil: math/rand
}

// Deliverer delivers the webhooks' deliveries (see above).
type Deliverer struct {
	o       DelivererOptions
	client  *http.Client
	tracer  trace.Tracer
	metrics *metrics

	work  chan job      // claimed, judged, waiting for a worker
	freed chan struct{} // a worker took a job (coalesced)
	// rescheduled: an outcome recorded puts a delivery back in the queue,
	// due later (a retry, a hold) or at once (released): the loop reads
	// when the next is due (coalesced).
	rescheduled chan struct{}
	inFlight    atomic.Int64 // attempts being made
	records     chan webhookq.DeliveryRecord

	mu      sync.Mutex
	cancel  context.CancelFunc // set by Start
	loop    sync.WaitGroup     // run
	workers sync.WaitGroup     // the workers
	rec     sync.WaitGroup     // recorder
	once    sync.Once
}

// NewDeliverer returns a Deliverer; Start starts it.
func NewDeliverer(o DelivererOptions) *Deliverer {
	if o.Concurrency <= 0 {
		o.Concurrency = DefaultConcurrency
	}
	if o.Poll <= 0 {
		o.Poll = DefaultPoll
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Instance == "" {
		b := make([]byte, 8)
		_, _ = rand.Read(b)
		o.Instance = "instance-" + hex.EncodeToString(b)
	}
	d := &Deliverer{o: o, client: NewClient(Options{AllowPrivate: o.AllowPrivate, Resolver: o.Resolver, Timeout: o.Timeout, Conns: o.Concurrency}),
		work: make(chan job, queuePerWorker*o.Concurrency), freed: make(chan struct{}, 1),
		rescheduled: make(chan struct{}, 1),
		records:     make(chan webhookq.DeliveryRecord, recordBatch)}
	if o.Tracer != nil {
		d.tracer = o.Tracer.Tracer(tracerName)
	}
	d.metrics = newMetrics(o.Registerer, d)
	return d
}

// Start runs the deliverer until Close (or ctx's end).
func (d *Deliverer) Start(ctx context.Context) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cancel != nil {
		return // started already
	}
	ctx, d.cancel = context.WithCancel(sqldb.Uncounted(ctx))
	d.rec.Add(1)
	go func() {
		defer d.rec.Done()
		d.recorder()
	}()
	for range d.o.Concurrency {
		d.workers.Add(1)
		go func() {
			defer d.workers.Done()
			d.worker(ctx)
		}()
	}
	d.loop.Add(1)
	go func() {
		defer d.loop.Done()
		d.run(ctx)
	}()
}

// Close stops claiming, ends the attempts in flight (an attempt cut short
// is released, not counted: it is made again at once, here or elsewhere),
// records what came of them, and returns. Call it before closing the
// store.
func (d *Deliverer) Close() error {
	d.once.Do(func() {
		d.mu.Lock()
		cancel := d.cancel
		d.cancel = func() {} // never started after Close
		d.mu.Unlock()
		if cancel == nil {
			return
		}
		cancel()
		d.loop.Wait()
		close(d.work) // the loop alone sends work
		d.workers.Wait()
		close(d.records)
		d.rec.Wait()
		d.client.CloseIdleConnections()
	})
	return nil
}

// Instance is the name of this instance in its leases.
func (d *Deliverer) Instance() string { return d.o.Instance }

// run is the loop: dispatch, claim, attempt, sleep until woken.
//
// While no webhook is enabled it sends nothing to the database but their
// count, every Poll and after a commit's signal, at most every
// quietRecount: a stream of writes costs it four cheap reads a second,
// and the first webhook created or enabled is counted within
// quietRecount of its commit, its deliveries then dispatched at once.
//
// It claims when a delivery may be due: its own dispatch made some, its
// last claim filled the queue, an outcome put a delivery back in the
// queue, the next attempt the queue has scheduled came, or Poll passed (a
// lease that ends, one of an instance stopped or one this instance left
// unattempted, is so claimed within Poll of its end); and after any signal
// (a webhook enabled again, a redelivery: writes that make deliveries due
// without an event to dispatch, the redelivery's a signal with no event at
// all), at most once every dispatchGap. Under a stream of writes no
// webhook receives, the claims so cost two reads every dispatchGap, not
// two reads a commit.
func (d *Deliverer) run(ctx context.Context) {
	wake, unsubscribe := d.o.Signals.Subscribe()
	defer unsubscribe()
	timer := time.NewTimer(0)
	defer timer.Stop()
	var checked time.Time    // when the enabled webhooks were last counted
	var dispatched time.Time // when the last dispatch began
	var nextDue time.Time    // when the queue said the next delivery falls due (zero: unknown)
	var asked time.Time      // when the last claim began
	quiet, dispatch, due, poked := true, true, true, false
	recount := false // a commit's signal came while quiet
	for ctx.Err() == nil {
		if since := time.Since(checked); since >= d.o.Poll || (quiet && recount && since >= quietRecount) {
			quiet, checked, dispatch, due, recount = d.quiet(ctx), time.Now(), true, true, false
		}
		if !nextDue.IsZero() && !time.Now().Before(nextDue) {
			due, nextDue = true, time.Time{}
		}
		sleep := d.o.Poll - time.Since(checked)
		if quiet && recount {
			sleep = min(sleep, quietRecount-time.Since(checked))
		}
		if !nextDue.IsZero() {
			sleep = min(sleep, time.Until(nextDue))
		}
		if wait := dispatchGap - time.Since(asked); poked && wait <= 0 {
			due, poked = true, false
		} else if poked {
			sleep = min(sleep, wait)
		}
		if !quiet {
			if wait := dispatchGap - time.Since(dispatched); dispatch && wait <= 0 {
				dispatched = time.Now()
				left, more := d.dispatch(ctx)
				due = due || left
				// Events past its batches wait for the next dispatch, a
				// gap later, not for a commit's signal, which may not come.
				if dispatch = more; more {
					sleep = min(sleep, dispatchGap-time.Since(dispatched))
				}
			} else if dispatch {
				sleep = min(sleep, wait)
			}
			if free := cap(d.work) - len(d.work); due && free > 0 {
				asked = time.Now()
				now := d.o.Now()
				n, err := d.claim(ctx, free, now)
				switch {
				case err != nil:
					if ctx.Err() == nil {
						d.o.Logger.Warn("webhook deliveries: claim failed", "err", err)
					}
				case n == free:
					// More may be due: claim again once a worker takes
					// a job (freed).
				default:
					due, nextDue = false, time.Now().Add(d.untilNextDue(ctx, now))
					sleep = min(sleep, time.Until(nextDue))
				}
			}
			d.refreshQueue(ctx)
		}
		timer.Reset(max(sleep, time.Millisecond))
		select {
		case <-ctx.Done():
		case <-wake:
			dispatch, poked, recount = true, true, quiet
		case <-d.freed:
		case <-d.rescheduled:
			due = true
		case <-timer.C:
		}
	}
}

// quiet reports whether no webhook is enabled: nothing to deliver.
func (d *Deliverer) quiet(ctx context.Context) bool {
	n, err := d.o.Queue.EnabledWebhooks(ctx)
	if err != nil {
		if ctx.Err() == nil {
			d.o.Logger.Warn("webhook deliveries: counting the webhooks failed", "err", err)
		}
		return false
	}
	if n == 0 {
		d.metrics.observeQueue(webhookq.Stats{})
	}
	return n == 0
}

// leaseFor is the lease of a claim that brings the queue to queued
// deliveries: the last waits for the workers to attempt those before it,
// a round of attempts (AttemptTimeout at most) per Concurrency of them,
// then for its own attempt and the recording of its outcome; at most
// coveredPerWorker rounds (covers). A receiver that hangs makes every
// round last that long; an instance killed meanwhile leaves its
// deliveries to others once the lease ends.
func (d *Deliverer) leaseFor(queued int) time.Duration {
	c := d.o.Concurrency
	rounds := min((queued+c-1)/c, coveredPerWorker)
	return time.Duration(rounds+1)*attemptTimeout(d.o.Timeout) + leaseMargin
}

// covers reports whether a lease still covers an attempt begun now and
// the recording of its outcome.
func (d *Deliverer) covers(c webhookq.ClaimedDelivery) bool {
	return !d.o.Now().Add(attemptTimeout(d.o.Timeout) + leaseMargin).After(c.LeaseUntil)
}

// dispatch makes the deliveries of what was committed since the last
// dispatch, a bounded number of batches at a time (claims go on between).
// Those the queue has room for are made leased to this instance and
// started at once, with no claim; it reports whether it made others,
// left for a claim, and whether more events wait to be dispatched.
func (d *Deliverer) dispatch(ctx context.Context) (left, more bool) {
	for range 20 {
		room := cap(d.work) - len(d.work) // only this loop adds work
		lease := webhookq.Lease{Owner: d.o.Instance, Until: d.o.Now().Add(d.leaseFor(len(d.work) + room)), Max: room}
		out, err := d.o.Queue.DispatchLeased(ctx, dispatchBatch, lease)
		if err != nil {
			if ctx.Err() == nil {
				d.o.Logger.Warn("webhook deliveries: dispatch failed", "err", err)
			}
			return true, false // what it made, if anything, is left to the claims
		}
		d.metrics.dispatched.Add(float64(out.Made))
		d.take(ctx, out.Claimed)
		left = left || out.Made > len(out.Claimed)
		if !out.More {
			return left, false
		}
	}
	return left, true
}

// untilNextDue returns how long to sleep before the next attempt the
// queue has scheduled after claimed (the time the last claim took as now)
// falls due, at most Poll: one that fell due while that claim ran, too
// late for it, is claimed at once. It asks the queue that alone, not
// Stats: after every claim that finds nothing more, under a stream of
// deliveries, Stats's count of everything pending was the database's
// dearest statement.
func (d *Deliverer) untilNextDue(ctx context.Context, claimed time.Time) time.Duration {
	next, err := d.o.Queue.NextAttempt(ctx, claimed)
	if err != nil {
		if ctx.Err() == nil {
			d.o.Logger.Warn("webhook deliveries: reading the queue failed", "err", err)
		}
		return d.o.Poll
	}
	if next.IsZero() {
		return d.o.Poll
	}
	// A little after: a delivery is due once next_attempt_at <= now.
	return min(max(next.Sub(d.o.Now())+time.Millisecond, time.Millisecond), d.o.Poll)
}

// recorder writes the outcomes in batches: an outcome waits up to
// recordLinger for others, so that a stream of attempts, whose outcomes
// come one at a time, costs a transaction every recordLinger rather than
// one an attempt. The leases cover the wait (leaseMargin); Close writes
// what has arrived at once.
func (d *Deliverer) recorder() {
	batch := make([]webhookq.DeliveryRecord, 0, recordBatch)
	linger := time.NewTimer(recordLinger)
	defer linger.Stop()
	for r := range d.records {
		batch = append(batch[:0], r)
		linger.Reset(recordLinger)
	gather:
		for len(batch) < recordBatch {
			select {
			case r, ok := <-d.records:
				if !ok {
					break gather
				}
				batch = append(batch, r)
			case <-linger.C:
				break gather
			}
		}
		d.flush(batch)
	}
}

// flush records a batch. A failure is logged: the leases end, and the
// deliveries are attempted again (at least once).
func (d *Deliverer) flush(batch []webhookq.DeliveryRecord) {
	ctx, cancel := context.WithTimeout(sqldb.Uncounted(context.Background()), 2*AttemptTimeout)
	defer cancel()
	events, err := d.o.Queue.Record(ctx, d.o.Instance, batch)
	if err != nil {
		d.o.Logger.Warn("webhook deliveries: recording outcomes failed; they will be attempted again",
			"deliveries", len(batch), "err", err)
		return
	}
	again := false
	for _, r := range batch {
		d.metrics.outcome(r)
		again = again || r.Step == webhookq.StepRetry || r.Step == webhookq.StepHold || r.Step == webhookq.StepRelease
	}
	if again {
		select {
		case d.rescheduled <- struct{}{}:
		default:
		}
	}
	if len(events) > 0 {
		d.o.Signals.Published(events[len(events)-1].Seq)
		for _, e := range events {
			d.o.Logger.Warn("webhook disabled", "webhook_id", e.Subject, "reason", deref(e.Reason))
		}
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// errCut is the error of an attempt cut short by Close.
var errCut = errors.New("webhook: the instance stopped during the attempt")
