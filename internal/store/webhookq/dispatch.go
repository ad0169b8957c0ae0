package webhookq

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/sqldb"
)

// deliveryInsertChunk bounds the rows of one INSERT of deliveries (12
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
