package guild

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/guildhall/guildhall/internal/apperr"
	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/store"
)

// TicketTTL is how long an event-stream ticket stays valid.
const TicketTTL = time.Minute

// AuditFilter selects audit-log entries.
type AuditFilter struct {
	ActorID string
	Type    string // exact, or a prefix ending in ".*"
	Subject string
	Since   *time.Time
	Until   *time.Time
}

// AuditLog pages through events, newest first.
func (s *Service) AuditLog(ctx context.Context, a *Actor, f AuditFilter, rawCursor string, limit int) (Page[model.Event], error) {
	since, until := "", ""
	if f.Since != nil {
		since = f.Since.UTC().Format(time.RFC3339Nano)
	}
	if f.Until != nil {
		until = f.Until.UTC().Format(time.RFC3339Nano)
	}
	filters := []string{"events", f.ActorID, f.Type, f.Subject, since, until}
	key, err := s.cursors.Decode(rawCursor, filters...)
	if err != nil {
		return Page[model.Event]{}, err
	}
	var before int64
	if key != "" {
		if before, err = strconv.ParseInt(key, 10, 64); err != nil || before <= 0 {
			return Page[model.Event]{}, apperr.Invalid("cursor", "the cursor is malformed; use the next_cursor of a previous page")
		}
	}
	if err := a.authorize(opListAuditLog); err != nil {
		return Page[model.Event]{}, err
	}
	sf := store.EventFilter{ActorID: f.ActorID, Subject: f.Subject, Since: f.Since, Until: f.Until, BeforeSeq: before}
	if prefix, ok := strings.CutSuffix(f.Type, "*"); ok {
		sf.TypePrefix = prefix
	} else {
		sf.Type = f.Type
	}
	events, next, err := s.store.ListEvents(ctx, sf, pageLimit(limit))
	if err != nil {
		return Page[model.Event]{}, err
	}
	page := Page[model.Event]{}
	if page.Items, err = s.visibleEvents(ctx, a, events); err != nil {
		return Page[model.Event]{}, err
	}
	if n := fitPage(page.Items); n < len(page.Items) {
		page.Items, next = page.Items[:n], page.Items[n-1].Seq
	}
	if next > 0 {
		// The seq of the last entry read, shown or not: it tells nothing of
		// what it was about.
		page.NextCursor = s.cursors.Encode(fmt.Sprint(next), filters...)
	}
	return page, nil
}

// maxPageBytes bounds what the events of one audit-log page weigh as JSON.
// One event holds at most about 250 KB (a profile-links change: twice ten
// URLs of 2,048 characters, each escaped up to six times over), so 200 of
// them could weigh 50 MB: a page ends early instead (a short page does not
// mean the end), and stays under 8 MiB.
const maxPageBytes = 4 << 20

// fitPage returns how many of events, at least one, fit in maxPageBytes.
func fitPage(events []model.Event) int {
	total := 0
	for i, e := range events {
		if total += eventBytes(e); total > maxPageBytes && i > 0 {
			return i
		}
	}
	return len(events)
}

// eventBytes is about what an event weighs as JSON: its data and reason as
// encoding/json writes them, and a bound on the rest.
func eventBytes(e model.Event) int {
	data, err := json.Marshal(e.Data)
	if err != nil {
		return maxPageBytes // never here: the data was read as JSON
	}
	reason, _ := json.Marshal(e.Reason)
	return len(data) + len(reason) + len(e.Type) + len(e.Subject) + 200
}

// visibleEvents leaves out the events about a channel the caller may not
// know of (docs/design.md §12, non-disclosure): one they cannot view now,
// or one that no longer exists, unless their base permissions let them know
// of every channel. Deciding by the channel as it is now, not as it was,
// never shows what the caller could not read today.
func (s *Service) visibleEvents(ctx context.Context, a *Actor, events []model.Event) ([]model.Event, error) {
	if a.knowsEveryChannel() {
		return events, nil
	}
	var ids []string
	for _, e := range events {
		if id, ok := channelOfSubject(e.Subject); ok {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		out := events[:0:0]
		for _, e := range events {
			e.Data = a.redactChannelRefs(e.Data)
			out = append(out, e)
		}
		return out, nil
	}
	exists, err := s.store.ExistingChannels(ctx, ids)
	if err != nil {
		return nil, err
	}
	out := events[:0:0]
	for _, e := range events {
		if id, ok := channelOfSubject(e.Subject); ok && !(exists[id] && a.knows(id)) {
			continue
		}
		e.Data = a.redactChannelRefs(e.Data)
		out = append(out, e)
	}
	return out, nil
}

// channelOfSubject is the channel an event is about, if any: its subject
// names it (channel:<id>) or one of its attachments (attachment:<id>/<attachment>).
func channelOfSubject(subject string) (string, bool) {
	kind, rest, _ := strings.Cut(subject, ":")
	switch kind {
	case "channel":
		return rest, true
	case "attachment":
		id, _, ok := strings.Cut(rest, "/")
		return id, ok
	}
	return "", false
}

// CanStream checks that the caller may read the event stream.
func (s *Service) CanStream(a *Actor) error { return a.authorize(opStreamEvents) }

// CreateTicket issues a single-use ticket for the event stream. It belongs
// to the caller's token: revoking the token invalidates it.
//
// Like every write, it is authorized inside its transaction, against the
// caller as of then: a ticket is never minted for a caller who lost
// VIEW_AUDIT_LOG or their token meanwhile.
func (s *Service) CreateTicket(ctx context.Context, a *Actor) (string, time.Time, error) {
	secret := "tkt_" + strings.TrimPrefix(NewSecret(), TokenPrefix)
	expires := s.now().Add(TicketTTL)
	err := s.write(ctx, a, func(tx *store.Tx, a *Actor) error {
		if err := a.authorize(opCreateEventTicket); err != nil {
			return err
		}
		if a.TokenID == "" {
			return apperr.Unauthenticated("A ticket is minted with a bearer token.")
		}
		return tx.InsertTicket(ctx, HashToken(secret), a.UserID, a.TokenID, expires)
	})
	if err != nil {
		return "", time.Time{}, err
	}
	return secret, expires, nil
}

// AuthenticateTicket returns the actor of an unexpired ticket, as its token
// authenticates now, without consuming it: a request refused later (a 400
// or a 403) leaves the ticket usable. ConsumeTicket uses it up once the
// stream opens.
func (s *Service) AuthenticateTicket(ctx context.Context, ticket string) (*Actor, error) {
	if ticket == "" || len(ticket) > 128 {
		return nil, apperr.Unauthenticated("The event ticket is unknown, used or expired.")
	}
	hash := HashToken(ticket)
	cred, err := s.store.TicketCredentials(ctx, hash, s.now())
	if err != nil {
		return nil, err
	}
	auth, err := s.store.AuthState(ctx)
	if err != nil {
		return nil, err
	}
	a, err := s.actorFrom(cred, auth)
	if err != nil {
		return nil, err
	}
	a.ticket = hash
	return a, nil
}

// ConsumeTicket uses up the ticket an actor authenticated with, if any; a
// ticket another stream consumed meanwhile is a 401.
func (s *Service) ConsumeTicket(ctx context.Context, a *Actor) error {
	if a.ticket == "" {
		return nil
	}
	_, err := s.store.Write(ctx, func(tx *store.Tx) error {
		return tx.ConsumeTicket(ctx, a.ticket, s.now())
	})
	return err
}

// EventsAfter returns up to limit events with seq > after, oldest first,
// all of them: the stream shows each through VisibleEvents.
func (s *Service) EventsAfter(ctx context.Context, after int64, limit int) ([]model.Event, error) {
	return s.store.EventsAfter(ctx, after, limit)
}

// VisibleEvents returns the events the caller may see (visibleEvents).
func (s *Service) VisibleEvents(ctx context.Context, a *Actor, events []model.Event) ([]model.Event, error) {
	return s.visibleEvents(ctx, a, events)
}

// LastEventSeq is the newest event's seq.
func (s *Service) LastEventSeq(ctx context.Context) (int64, error) { return s.store.LastEventSeq(ctx) }
