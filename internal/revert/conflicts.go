package revert

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/guildhall/guildhall/internal/apperr"
	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/store"
)

// reader reads the audit log: the store, or a write's transaction (which
// sees every event committed before it).
type reader interface {
	ListEvents(ctx context.Context, f store.EventFilter, limit int) ([]model.Event, int64, error)
}

// removals are the types of event that remove a subject of each kind, or
// make it anew: after either, what an event changed is not there to set back.
var removals = map[string][]string{
	"channel": {"channel.deleted", "channel.created"},
	"role":    {"role.deleted", "role.created"},
	"user":    {"user.deleted"},
}

// check refuses the revert (409) when a later event than p.ev changed the
// state it sets back or removed what it needs, or when made, the events of
// the revert's own change (inside its transaction), show that the state is
// no longer as p.ev left it.
func (p *plan) check(ctx context.Context, q reader, made []model.Event) error {
	if err := p.laterConflict(ctx, q); err != nil {
		return err
	}
	if p.found(made) {
		return nil
	}
	var seq int64
	if p.shifted != nil {
		var err error
		if seq, err = p.shifted(ctx, q); err != nil {
			return err
		}
	}
	return apperr.RevertConflict(seq, "The %s is no longer as event %d left it.", p.what, p.ev.Seq)
}

// laterConflict is the 409 of a later event than p.ev that changed the
// state it sets back or removed what it needs (nil: none).
func (p *plan) laterConflict(ctx context.Context, q reader) error {
	seq, err := p.later(ctx, q)
	if err != nil || seq == 0 {
		return err
	}
	return apperr.RevertConflict(seq, "Event %d changed the %s after event %d, or removed what it needs: revert the later change first, or make this one by hand.",
		seq, p.what, p.ev.Seq)
}

// goneConflict is the 409 of a revert whose change by hand was refused as a 404 or
// a 400, err: what it sets back, or what it needs, is gone since, by a later
// event when the log tells which. The request itself was valid, so the
// refusal is a conflict with the state, never a 404 (which says the event
// is unknown) or a 400 at a member of a body the request does not have.
func (p *plan) goneConflict(ctx context.Context, q reader, err error) error {
	if cerr := p.laterConflict(ctx, q); cerr != nil {
		return cerr
	}
	var seq int64
	if p.shifted != nil {
		var serr error
		if seq, serr = p.shifted(ctx, q); serr != nil {
			return serr
		}
	}
	detail := err.Error()
	if e, ok := apperr.As(err); ok {
		detail = e.Detail
		for _, f := range e.Fields {
			detail = f.Message
		}
	}
	return apperr.RevertConflict(seq, "The %s can no longer be set back as event %d had it: %s", p.what, p.ev.Seq, detail)
}

// found reports whether made, the events of the revert's change, show the
// state as p.ev left it.
func (p *plan) found(made []model.Event) bool {
	for _, e := range made {
		if e.Subject == p.ev.Subject && p.same(e) {
			return p.left == nil || p.left(e)
		}
	}
	// No change: the state is already what the revert sets back.
	return p.noop != nil && p.noop()
}

// later is the latest event after p.ev that stands in the way: on its
// subject, one that changes the same state or removes the subject; on
// the subjects p.gone watches, one of the watched types. 0: none.
func (p *plan) later(ctx context.Context, q reader) (int64, error) {
	kind, _, _ := strings.Cut(p.ev.Subject, ":")
	own := removals[kind]
	seq, err := latest(ctx, q, p.ev.Subject, p.ev.Seq, func(e model.Event) bool {
		return p.same(e) || slices.Contains(own, e.Type)
	})
	if err != nil {
		return 0, err
	}
	for _, w := range p.gone {
		s, err := latest(ctx, q, w.subject, p.ev.Seq, func(e model.Event) bool { return slices.Contains(w.types, e.Type) })
		if err != nil {
			return 0, err
		}
		seq = max(seq, s)
	}
	return seq, nil
}

// latestPage is how many of a subject's events one read takes.
const latestPage = 200

// latest is the latest event of subject after seq that match takes, read
// newest first through the subject's index: it reads only the subject's
// events since seq. 0: none.
func latest(ctx context.Context, q reader, subject string, after int64, match func(model.Event) bool) (int64, error) {
	var before int64
	for {
		list, next, err := q.ListEvents(ctx, store.EventFilter{Subject: subject, BeforeSeq: before}, latestPage)
		if err != nil {
			return 0, err
		}
		for _, e := range list {
			if e.Seq <= after {
				return 0, nil
			}
			if match(e) {
				return e.Seq, nil
			}
		}
		if next == 0 {
			return 0, nil
		}
		before = next
	}
}

// latestOfTypes is the latest event of one of types after seq, whatever
// its subject (0: none), read through the type index.
func latestOfTypes(ctx context.Context, q reader, after int64, types ...string) (int64, error) {
	var seq int64
	for _, t := range types {
		list, _, err := q.ListEvents(ctx, store.EventFilter{Type: t}, 1)
		if err != nil {
			return 0, err
		}
		if len(list) > 0 && list[0].Seq > after {
			seq = max(seq, list[0].Seq)
		}
	}
	return seq, nil
}

// The values of events' data: as read back from the log (JSON's types) or
// as the service writes them (Go's), compared and read alike.

// equal compares two values of events' data as JSON.
func equal(x, y any) bool {
	a, errA := json.Marshal(x)
	b, errB := json.Marshal(y)
	return errA == nil && errB == nil && string(a) == string(b)
}

func str(v any) string {
	switch s := v.(type) {
	case string:
		return s
	case *string:
		if s != nil {
			return *s
		}
	}
	return ""
}

func strPtr(v any) *string {
	switch s := v.(type) {
	case string:
		return &s
	case *string:
		return s
	}
	return nil
}

func strs(v any) []string {
	switch l := v.(type) {
	case []string:
		return l
	case []any:
		out := make([]string, 0, len(l))
		for _, x := range l {
			out = append(out, str(x))
		}
		return out
	}
	return nil
}

func num(v any) int {
	switch n := v.(type) {
	case float64:
		return int(n)
	case int:
		return n
	case json.Number:
		i, _ := n.Int64()
		return int(i)
	}
	return 0
}

func timePtr(v any) *time.Time {
	s := str(v)
	if s == "" {
		return nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return nil
	}
	return &t
}

func eqTime(a, b *time.Time) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Equal(*b)
}
