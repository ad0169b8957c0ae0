// Package webhookq is the webhooks' delivery queue: which deliveries are
// made (Dispatch), which instance attempts which (Claim), and what came of
// each attempt (Record), in the tables webhook_deliveries and
// webhook_dispatch. The webhooks themselves, and the listing of their
// deliveries, are internal/store's; the queue runs on the store's writer
// and read pool (store.Store.WebhookQueue).
//
// Every step is a write transaction: writers are serialized (the store's
// write takes the write lock: BEGIN IMMEDIATE on SQLite, a
// transaction-scoped advisory lock on PostgreSQL), so events are numbered
// in commit order, and a dispatch, which runs under the same lock, sees
// every event up to the newest committed: the cursor it advances never
// passes an event still to commit. The same lock makes a claim atomic: two
// instances never lease the same delivery.
package webhookq

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/sqldb"
)

// Queue is the delivery queue, on the store's writer and read pool.
type Queue struct {
	write  func(ctx context.Context, fn func(tx *sqldb.Tx) error) ([]model.Event, error)
	reads  sqldb.Queries
	events func(ctx context.Context, seqs []int64) (map[int64]model.Event, error)
	// guardUntil: a dispatch whose cursor is below it checks its
	// deliveries against those made already (dispatch).
	guardUntil atomic.Int64
	// analyzed is the pending count the statistics of the deliveries
	// were last brought in line with (Stats: refreshed at that count, or
	// left as they were when it drained below analyzeAt); -1 until this
	// instance's first Stats.
	analyzed atomic.Int64
}

// New returns the queue over the store's write transactions (write: the
// one every writer of the database goes through, so that the lock above
// holds), its read pool, and its read of the events with the seqs given
// (those still kept).
func New(write func(ctx context.Context, fn func(tx *sqldb.Tx) error) ([]model.Event, error), reads sqldb.Queries,
	events func(ctx context.Context, seqs []int64) (map[int64]model.Event, error)) *Queue {
	q := &Queue{write: write, reads: reads, events: events}
	q.analyzed.Store(-1)
	return q
}

// micros is a timestamp as the store keeps it: microseconds since the Unix
// epoch, UTC, in a BIGINT column.
type micros int64

func microsOf(t time.Time) micros { return micros(t.UnixMicro()) }

func (m micros) time() time.Time { return time.UnixMicro(int64(m)).UTC() }

// queueDeliveryRow is a row of webhook_deliveries as the queue writes it.
type queueDeliveryRow struct {
	ID            string `gorm:"primaryKey"`
	WebhookID     string
	EventSeq      int64
	State         string
	Attempts      int
	LastStatus    *int
	LastError     *string
	NextAttemptAt *micros
	LeaseOwner    *string
	LeaseUntil    *micros
	CreatedAt     micros `gorm:"autoCreateTime:false"`
	UpdatedAt     micros `gorm:"autoUpdateTime:false"`
}

func (queueDeliveryRow) TableName() string { return "webhook_deliveries" }

// queueCursorRow is webhook_dispatch's one row: up to which event seq
// deliveries were made.
type queueCursorRow struct {
	ID  int64 `gorm:"primaryKey"`
	Seq int64
}

func (queueCursorRow) TableName() string { return "webhook_dispatch" }

// queueWebhook is what a dispatch reads of an enabled webhook: what it
// matches, and what an attempt of a delivery it leases needs.
type queueWebhook struct {
	ID             string
	Events         string
	AfterSeq       int64
	URL            string
	Secret         string
	PreviousSecret *string
	PreviousUntil  *micros
	CreatorID      string
}

// newDeliveryID returns a delivery's ID, its webhook-id: "msg_" and a
// UUIDv7 in hex (36 characters, no "."), so IDs sort by creation.
func newDeliveryID() string {
	id := uuid.Must(uuid.NewV7())
	return "msg_" + strings.ReplaceAll(id.String(), "-", "")
}

// eventPatterns reads the events column of a webhook: a JSON array
// of patterns (a comma-separated list is read too).
func eventPatterns(s string) []string {
	var out []string
	if err := json.Unmarshal([]byte(s), &out); err == nil {
		return out
	}
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// patternMatches reports whether an event type matches a webhook's
// pattern as the audit log's type filter does: the type itself, or a
// prefix ending in ".*" ("role.*" matches "role.created" and
// "role.permissions.set", not "role").
func patternMatches(pattern, typ string) bool {
	if prefix, ok := strings.CutSuffix(pattern, "*"); ok {
		return strings.HasPrefix(typ, prefix)
	}
	return pattern == typ
}

// deliveryInsertChunk bounds the rows of one INSERT of deliveries (13
// parameters each): far within both databases' bounds on parameters.
const deliveryInsertChunk = 200

// Dispatch makes the deliveries of up to limit events after the
// cursor, one per enabled webhook whose patterns match an event with a seq
// above its after_seq, and advances the cursor past them. It returns how
// many deliveries it made, and whether more events wait (a full batch).
// The cursor starts, and moves forward when webhooks change, at the oldest
// after_seq of the enabled webhooks: a webhook receives only events written
// after it was created, so nothing before it can be delivered. With no
// enabled webhook, or no event after the cursor, it writes nothing.
func (q *Queue) Dispatch(ctx context.Context, limit int) (made int, more bool, err error) {
	d, err := q.DispatchLeased(ctx, limit, Lease{})
	return d.Made, d.More, err
}

// Lease asks a dispatch to lease what it makes to an instance, as a claim
// would: up to Max deliveries, to Owner until Until.
type Lease struct {
	Owner string
	Until time.Time
	Max   int
}

// Dispatched is what a dispatch made: how many deliveries, whether more
// events wait, and the deliveries leased to the instance that dispatched.
type Dispatched struct {
	Made    int
	More    bool
	Claimed []ClaimedDelivery
}

// DispatchLeased is Dispatch, with up to lease.Max of the deliveries it
// makes leased to lease.Owner and returned claimed: the instance that
// makes a delivery attempts it without a claim's transaction. The others
// are made leased to nobody, for claims.
func (q *Queue) DispatchLeased(ctx context.Context, limit int, lease Lease) (Dispatched, error) {
	if busy, err := q.dispatchDue(ctx); err != nil || !busy {
		return Dispatched{}, err
	}
	out, hooks, leased, bodies, err := q.dispatch(ctx, limit, lease, false)
	if errors.Is(err, errMadeAlready) {
		// A delivery past a cursor that stood was made already: the
		// cursor was set back by hand, or its row was lost and made anew
		// behind deliveries beyond a batch. The same dispatch again,
		// leaving those as they are.
		out, hooks, leased, bodies, err = q.dispatch(ctx, limit, lease, true)
	}
	if err != nil {
		return Dispatched{}, fmt.Errorf("dispatch webhooks: %w", err)
	}
	if len(leased) == 0 {
		return out, nil
	}
	claimed := make([]claimRow, len(leased))
	for i, r := range leased {
		h := hooks[r.WebhookID]
		claimed[i] = claimRow{ID: r.ID, WebhookID: r.WebhookID, EventSeq: r.EventSeq, URL: h.URL, Secret: h.Secret,
			PreviousSecret: h.PreviousSecret, PreviousUntil: h.PreviousUntil, CreatorID: h.CreatorID}
	}
	// The lease as stored (microseconds), as a claim returns it.
	if out.Claimed, err = q.claimed(ctx, claimed, bodies, microsOf(lease.Until).time(), model.Now()); err != nil {
		// Made and leased: the lease ends, and a claim takes them then.
		return Dispatched{}, err
	}
	return out, nil
}

// errMadeAlready: a dispatch that expected no delivery past its cursor
// met one.
var errMadeAlready = errors.New("a delivery past the dispatch cursor exists")

// dispatch is DispatchLeased's write transaction. Every delivery made is
// past the cursor, and a cursor that stood has none past it (it moves in
// the transaction that makes them), so the deliveries are inserted as
// they are: on PostgreSQL, ON CONFLICT's check of each row is a good part
// of the INSERT's cost (docs/performance.md). When the cursor had to be
// made (a first dispatch, or its row lost), or guard says so, some may
// exist: those are left as they are (ON CONFLICT DO NOTHING), and the
// newest of them is remembered (guardUntil), so that the dispatches after
// it check too until their cursor passes it, rather than each meeting a
// conflict first. A conflict that was not expected is errMadeAlready, the
// transaction rolled back.
func (q *Queue) dispatch(ctx context.Context, limit int, lease Lease, guard bool) (
	out Dispatched, hooks map[string]queueWebhook, leased []queueDeliveryRow, bodies map[int64]model.Event, err error) {
	_, err = q.write(ctx, func(tx *sqldb.Tx) error {
		out, hooks, leased, bodies = Dispatched{}, nil, nil, nil // a write may run twice (sqldb.DB.Write)
		db := tx.With(ctx)
		var list []queueWebhook
		if err := db.Table("webhooks").
			Select("id, events, after_seq, url, secret, previous_secret, previous_until, creator_id").
			Where("enabled").Order("id").Find(&list).Error; err != nil {
			return fmt.Errorf("read webhooks: %w", err)
		}
		if len(list) == 0 {
			return nil
		}
		cursor, stood, err := dispatchCursor(ctx, tx, list)
		if err != nil {
			return err
		}
		recheck := guard || !stood // deliveries past the cursor may exist
		if recheck {
			if err := q.noteNewestMade(ctx, tx, list); err != nil {
				return err
			}
		}
		guard := recheck || cursor < q.guardUntil.Load()
		var events []dispatchedEvent
		if err := db.Table("events").Select("seq, type, subject").
			Where("seq > ?", cursor).Order("seq").Limit(limit).Find(&events).Error; err != nil {
			return fmt.Errorf("read events to dispatch: %w", err)
		}
		if len(events) == 0 {
			return nil
		}
		out.More = len(events) == limit
		hooks = make(map[string]queueWebhook, len(list))
		for _, h := range list {
			hooks[h.ID] = h
		}
		m := makeDeliveries(list, events, lease)
		rows := m.rows
		if leased = m.leased; len(leased) > 0 {
			if bodies, err = leasedEvents(db, m.first, m.last, limit, m.wanted); err != nil {
				return err
			}
		}
		if len(rows) > 0 {
			// The pair (webhook, event) is unique: a delivery made already
			// (the cursor's row lost) stays as it is, and one of those
			// leased here is then not made.
			ins := db
			if guard {
				ins = db.Clauses(clause.OnConflict{DoNothing: true})
			}
			res := ins.CreateInBatches(&rows, deliveryInsertChunk)
			if res.Error != nil {
				if !guard && sqldb.UniqueViolation(res.Error) != "" {
					return errMadeAlready
				}
				return fmt.Errorf("create deliveries: %w", res.Error)
			}
			out.Made = int(res.RowsAffected)
			if out.Made < len(rows) && len(leased) > 0 {
				if leased, err = madeLeased(ctx, tx, leased); err != nil {
					return err
				}
			}
		}
		last := events[len(events)-1].Seq
		if err := db.Model(&queueCursorRow{}).Where("id = 1").Update("seq", last).Error; err != nil {
			return fmt.Errorf("advance the dispatch cursor: %w", err)
		}
		return nil
	})
	return out, hooks, leased, bodies, err
}

// noteNewestMade raises guardUntil to the newest event that list's
// webhooks have a delivery of (one probe of the (webhook, event) index
// each). A write that rolls back leaves it raised: it only has
// dispatches check for longer.
func (q *Queue) noteNewestMade(ctx context.Context, tx *sqldb.Tx, list []queueWebhook) error {
	for _, h := range list {
		var newest sql.NullInt64
		if err := tx.With(ctx).Raw("SELECT MAX(event_seq) FROM webhook_deliveries WHERE webhook_id = ?", h.ID).
			Scan(&newest).Error; err != nil {
			return fmt.Errorf("read the newest delivery of webhook %s: %w", h.ID, err)
		}
		for cur := q.guardUntil.Load(); newest.Valid && newest.Int64 > cur; cur = q.guardUntil.Load() {
			if q.guardUntil.CompareAndSwap(cur, newest.Int64) {
				break
			}
		}
	}
	return nil
}

// dispatchMade is what a dispatch makes of its events: the deliveries,
// those of them leased, and the seqs of the leased ones' events (wanted,
// from first to last).
type dispatchMade struct {
	rows, leased []queueDeliveryRow
	wanted       map[int64]bool
	first, last  int64
}

// makeDeliveries makes the deliveries of events to the webhooks of list
// whose patterns match them, those the lease has room for leased.
func makeDeliveries(list []queueWebhook, events []dispatchedEvent, lease Lease) dispatchMade {
	now, until := microsOf(model.Now()), microsOf(lease.Until)
	m := dispatchMade{wanted: map[int64]bool{}, first: math.MaxInt64}
	for _, h := range list {
		patterns := eventPatterns(h.Events)
		for i := range events {
			e := &events[i]
			if e.Seq <= h.AfterSeq || !matchesAny(patterns, e.Type) || isOwnCreation(h.ID, e.Type, e.Subject) {
				continue
			}
			due := now
			r := queueDeliveryRow{ID: newDeliveryID(), WebhookID: h.ID, EventSeq: e.Seq,
				State: string(model.DeliveryPending), NextAttemptAt: &due, CreatedAt: now, UpdatedAt: now}
			if lease.Owner != "" && len(m.leased) < lease.Max {
				r.LeaseOwner, r.LeaseUntil = &lease.Owner, &until
				m.leased = append(m.leased, r)
				m.wanted[e.Seq] = true
				m.first, m.last = min(m.first, e.Seq), max(m.last, e.Seq)
			}
			m.rows = append(m.rows, r)
		}
	}
	return m
}

// leasedEvents reads whole the events of the deliveries a dispatch
// leased, those wanted, from first to last (those between that no
// delivery wants are read and left), so that they need no read by seq
// after the dispatch: on PostgreSQL that read is planned once per
// connection, and a plan made while the table was small reads all of it
// for as long as no ANALYZE comes (no autovacuum). This one has the shape
// of the dispatch's first read, a range of the primary key in its order,
// whatever the table's size; a dispatch that leased nothing (its webhooks
// receive none of the events) makes none.
func leasedEvents(db *gorm.DB, first, last int64, limit int, wanted map[int64]bool) (map[int64]model.Event, error) {
	var events []dispatchedEvent
	if err := db.Table("events").Select("seq, type, actor_id, subject, data, reason, created_at").
		Where("seq >= ? AND seq <= ?", first, last).Order("seq").Limit(limit).Find(&events).Error; err != nil {
		return nil, fmt.Errorf("read the leased deliveries' events: %w", err)
	}
	out := make(map[int64]model.Event, len(wanted))
	for i := range events {
		if wanted[events[i].Seq] {
			out[events[i].Seq] = events[i].model()
		}
	}
	return out, nil
}

// dispatchedEvent is an events row as a dispatch reads it.
type dispatchedEvent struct {
	Seq           int64
	Type, Subject string
	ActorID       *string
	Data          string
	Reason        *string
	CreatedAt     micros
}

// model is the event, as store's read of the events by seq returns it.
func (e *dispatchedEvent) model() model.Event {
	ev := model.Event{Seq: e.Seq, Type: e.Type, ActorID: e.ActorID, Subject: e.Subject,
		Reason: e.Reason, CreatedAt: e.CreatedAt.time(), Data: map[string]any{}}
	_ = json.Unmarshal([]byte(e.Data), &ev.Data) // written by the store as a JSON object
	return ev
}

// madeLeased returns those of the deliveries leased that the dispatch
// made: those whose pair was not there already.
func madeLeased(ctx context.Context, tx *sqldb.Tx, leased []queueDeliveryRow) ([]queueDeliveryRow, error) {
	ids := make([]string, len(leased))
	for i, r := range leased {
		ids[i] = r.ID
	}
	var made []string
	if err := tx.With(ctx).Model(&queueDeliveryRow{}).Where("id IN ?", ids).Pluck("id", &made).Error; err != nil {
		return nil, fmt.Errorf("read the deliveries made: %w", err)
	}
	kept := map[string]bool{}
	for _, id := range made {
		kept[id] = true
	}
	out := leased[:0]
	for _, r := range leased {
		if kept[r.ID] {
			out = append(out, r)
		}
	}
	return out, nil
}

// dispatchDueSQL: one round trip, which the builder cannot say.
const dispatchDueSQL = "SELECT (SELECT COUNT(*) FROM webhooks WHERE enabled) AS hooks, " +
	"(SELECT seq FROM webhook_dispatch WHERE id = 1) AS cur, (SELECT MAX(seq) FROM events) AS last"

// dispatchDue reports, from the read pool, whether a dispatch may have
// work: an enabled webhook, and an event after the cursor. A dispatch
// that has none takes no write lock (the deliverer asks after every
// commit: the writers' own transactions must not double).
func (q *Queue) dispatchDue(ctx context.Context) (bool, error) {
	var row struct {
		Hooks int64
		Cur   *int64
		Last  *int64
	}
	err := q.reads.With(ctx).Raw(dispatchDueSQL).Scan(&row).Error
	if err != nil {
		return false, fmt.Errorf("read the dispatch cursor: %w", err)
	}
	switch {
	case row.Hooks == 0 || row.Last == nil:
		return false, nil
	case row.Cur == nil:
		return true, nil
	}
	return *row.Cur < *row.Last, nil
}

// dispatchCursor reads the cursor, creating it at the first dispatch, and
// moves it up to the oldest after_seq of the enabled webhooks hooks.
// stood is whether its row was there: then no delivery was made past it
// (unless it was set back by hand, or made anew behind deliveries that a
// later batch of the dispatches will pass). Moved up, it has none past
// it either (none were made past where it was).
func dispatchCursor(ctx context.Context, tx *sqldb.Tx, hooks []queueWebhook) (cursor int64, stood bool, err error) {
	db := tx.With(ctx)
	var rows []queueCursorRow
	if err := db.Where("id = 1").Find(&rows).Error; err != nil {
		return 0, false, fmt.Errorf("read the dispatch cursor: %w", err)
	}
	start := hooks[0].AfterSeq
	for _, h := range hooks[1:] {
		start = min(start, h.AfterSeq)
	}
	stood = len(rows) == 1
	if stood && rows[0].Seq >= start {
		return rows[0].Seq, true, nil
	}
	err = db.Clauses(clause.OnConflict{Columns: []clause.Column{{Name: "id"}},
		DoUpdates: clause.AssignmentColumns([]string{"seq"})}).Create(&queueCursorRow{ID: 1, Seq: start}).Error
	if err != nil {
		return 0, false, fmt.Errorf("set the dispatch cursor: %w", err)
	}
	return start, stood, nil
}

// isOwnCreation reports whether an event is a webhook's own
// webhook.created, which it never receives: its after_seq is raised past
// it once its transaction committed, and a dispatch between the two must
// not deliver it either.
func isOwnCreation(webhookID, typ, subject string) bool {
	return typ == "webhook.created" && subject == "webhook:"+webhookID
}

func matchesAny(patterns []string, typ string) bool {
	for _, p := range patterns {
		if patternMatches(p, typ) {
			return true
		}
	}
	return false
}

// ClaimedDelivery is a delivery leased to one instance for one attempt,
// with what the attempt needs.
type ClaimedDelivery struct {
	ID        string
	WebhookID string
	EventSeq  int64
	Attempts  int // made before this one
	// LeaseUntil is when the lease ends; with the owner, it fences what
	// the attempt records (Queue.Record).
	LeaseUntil time.Time
	URL        string
	// Secrets sign the attempt: the webhook's secret, then, during a
	// rotation, the previous one.
	Secrets   []string
	CreatorID string
	// Event is the delivery's event; nil when a claim found it no longer
	// kept (purged by the audit log's retention). A dispatch hands its
	// leased deliveries the events it read.
	Event *model.Event
}

type claimRow struct {
	ID             string
	WebhookID      string
	EventSeq       int64
	Attempts       int
	URL            string
	Secret         string
	PreviousSecret *string
	PreviousUntil  *micros
	CreatorID      string
}

// duePending is the condition on the pending deliveries (d) that the due
// index holds, written out: the index holds only those
// (webhook_deliveries_due, partial), and neither SQLite nor a generic
// PostgreSQL plan uses a partial index for a condition given as a
// parameter. The deliveries delivered or failed, the most of the table,
// are then in no index an outcome's UPDATE must write on PostgreSQL but
// the primary key and (webhook, event).
const duePending = "d.state = '" + string(model.DeliveryPending) + "'"

// Claim leases to owner, until now+lease, up to limit pending
// deliveries of enabled webhooks that are due at now and leased to nobody
// (or whose lease has ended), oldest due first, and returns them with
// their webhook's destination and secrets and their event.
func (q *Queue) Claim(ctx context.Context, owner string, now time.Time, lease time.Duration, limit int) ([]ClaimedDelivery, error) {
	var rows []claimRow
	at, until := microsOf(now), microsOf(now.Add(lease))
	due := func(db *gorm.DB) *gorm.DB {
		return db.Table("webhook_deliveries AS d").Joins("JOIN webhooks w ON w.id = d.webhook_id").
			Where(duePending+" AND d.next_attempt_at <= ? AND (d.lease_until IS NULL OR d.lease_until < ?) AND w.enabled", at, at)
	}
	// Asked first of the read pool: the deliverer asks after every commit,
	// and a claim with nothing to claim must not take the write lock. In
	// the order of the due index, as the claim reads: unordered,
	// PostgreSQL may scan the table from its start, through every
	// delivery made before the backlog, to find one.
	var some []string
	if err := due(q.reads.With(ctx)).Select("d.id").Order("d.next_attempt_at").Limit(1).Find(&some).Error; err != nil || len(some) == 0 {
		return nil, err
	}
	_, err := q.write(ctx, func(tx *sqldb.Tx) error {
		rows = nil
		db := tx.With(ctx)
		err := due(db).
			Select("d.id, d.webhook_id, d.event_seq, d.attempts, w.url, w.secret, w.previous_secret, w.previous_until, w.creator_id").
			Order("d.next_attempt_at").Limit(limit).Find(&rows).Error
		if err != nil {
			return fmt.Errorf("read due deliveries: %w", err)
		}
		if len(rows) == 0 {
			return nil
		}
		ids := make([]string, len(rows))
		for i, r := range rows {
			ids[i] = r.ID
		}
		return db.Model(&queueDeliveryRow{}).Where("id IN ?", ids).
			Updates(map[string]any{"lease_owner": owner, "lease_until": until}).Error
	})
	if err != nil || len(rows) == 0 {
		return nil, err
	}
	return q.claimed(ctx, rows, nil, until.time(), now)
}

// claimed returns the deliveries rows, leased until until, with their
// events (read from the read pool) and the secrets that sign them at now.
func (q *Queue) claimed(ctx context.Context, rows []claimRow, known map[int64]model.Event, until, now time.Time) ([]ClaimedDelivery, error) {
	var seqs []int64
	for _, r := range rows {
		if _, ok := known[r.EventSeq]; !ok {
			seqs = append(seqs, r.EventSeq)
		}
	}
	events := known
	if len(seqs) > 0 {
		read, err := q.events(ctx, seqs)
		if err != nil {
			return nil, err
		}
		for seq, e := range known {
			read[seq] = e
		}
		events = read
	}
	out := make([]ClaimedDelivery, len(rows))
	for i, r := range rows {
		c := ClaimedDelivery{ID: r.ID, WebhookID: r.WebhookID, EventSeq: r.EventSeq, Attempts: r.Attempts,
			LeaseUntil: until, URL: r.URL, Secrets: []string{r.Secret}, CreatorID: r.CreatorID}
		if r.PreviousSecret != nil && *r.PreviousSecret != "" && r.PreviousUntil != nil && r.PreviousUntil.time().After(now) {
			c.Secrets = append(c.Secrets, *r.PreviousSecret)
		}
		if e, ok := events[r.EventSeq]; ok {
			c.Event = &e
		}
		out[i] = c
	}
	return out, nil
}

// analyzeAt is the smallest backlog for which Stats has PostgreSQL's
// statistics refreshed.
const analyzeAt = 1000

// refreshStatistics has PostgreSQL's statistics of webhook_deliveries
// refreshed (ANALYZE) when the pending deliveries grew past analyzeAt and
// four times what they were at the last refresh, again once such a
// backlog has drained below a quarter of it, and at this instance's first
// Stats, which does not know what the statistics say (taken by an
// instance since stopped, of a backlog since drained).
//
// A backlog builds faster than autovacuum samples the table (a receiver
// down after a quiet spell): statistics taken when hardly anything was
// pending make the planner read every pending delivery and sort them for
// each claim, so the claims slow down as the backlog grows, and the
// backlog grows faster. With the backlog in the statistics a claim reads
// the oldest due deliveries in the order of their index, however many
// wait. Drained, the table is refreshed again: statistics that still say
// most deliveries are pending make every Stats (the deliverer's metrics
// ask it every few seconds) read the whole table, every delivery ever
// made, instead of the pending ones on the due index.
//
// An ANALYZE samples a bounded number of rows; a failed one is left to
// autovacuum. SQLite's planner, which has no such statistics here, takes
// that index whatever the backlog.
func (q *Queue) refreshStatistics(ctx context.Context, pending int64) {
	if q.reads.Dialect().Name() != "postgres" {
		return
	}
	last := q.analyzed.Load()
	refresh := false
	switch {
	case last < 0: // this instance's first look
		refresh = q.analyzed.CompareAndSwap(last, pending)
	case pending < last/4: // drained: the next backlog refreshes them again
		refresh = q.analyzed.CompareAndSwap(last, pending) && last >= analyzeAt
	case pending >= analyzeAt && pending > 4*last:
		refresh = q.analyzed.CompareAndSwap(last, pending)
	}
	if refresh {
		_ = q.reads.With(ctx).Exec("ANALYZE webhook_deliveries").Error
	}
}

// EnabledWebhooks counts the enabled webhooks.
func (q *Queue) EnabledWebhooks(ctx context.Context) (int64, error) {
	var n int64
	if err := q.reads.With(ctx).Table("webhooks").Where("enabled").Count(&n).Error; err != nil {
		return 0, fmt.Errorf("count enabled webhooks: %w", err)
	}
	return n, nil
}

// NextAttempt returns when the earliest attempt the queue has scheduled
// after now falls due: a retry's, or a hold's end (zero: none). It reads
// the due index from now on, past neither the deliveries due and in
// flight nor the row versions that their outcomes left in the index
// (PostgreSQL keeps those until a vacuum): a question of a few index
// entries however busy the queue (but for the retries of disabled
// webhooks scheduled before the answer, each passed), where Stats counts
// them all. A lease's end it does not say.
func (q *Queue) NextAttempt(ctx context.Context, now time.Time) (time.Time, error) {
	var next []int64
	err := q.reads.With(ctx).Table("webhook_deliveries AS d").Select("d.next_attempt_at").
		Joins("JOIN webhooks w ON w.id = d.webhook_id").
		Where(duePending+" AND d.next_attempt_at > ? AND w.enabled", microsOf(now)).
		Order("d.next_attempt_at").Limit(1).Find(&next).Error
	if err != nil {
		return time.Time{}, fmt.Errorf("read the next attempt: %w", err)
	}
	if len(next) == 0 {
		return time.Time{}, nil
	}
	return micros(next[0]).time(), nil
}

// Stats are the queue as metrics show it.
type Stats struct {
	Pending       int64     // pending deliveries of enabled webhooks
	OldestPending time.Time // when the oldest of them was made (zero: none)
}

// Stats reads the queue's stats.
func (q *Queue) Stats(ctx context.Context) (Stats, error) {
	var row struct {
		N      int64
		Oldest *int64
	}
	err := q.reads.With(ctx).Table("webhook_deliveries AS d").
		Select("COUNT(*) AS n, MIN(d.created_at) AS oldest").
		Joins("JOIN webhooks w ON w.id = d.webhook_id").
		Where(duePending + " AND w.enabled").Take(&row).Error
	if err != nil {
		return Stats{}, fmt.Errorf("read the delivery queue: %w", err)
	}
	q.refreshStatistics(ctx, row.N)
	st := Stats{Pending: row.N}
	if row.Oldest != nil {
		st.OldestPending = micros(*row.Oldest).time()
	}
	return st, nil
}
