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
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

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
