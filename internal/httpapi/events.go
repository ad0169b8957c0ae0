package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/guildhall/guildhall/gen/api"
	"github.com/guildhall/guildhall/internal/apperr"
	"github.com/guildhall/guildhall/internal/guild"
)

// ListAuditLog implements GET /audit-log.
func (h *Handler) ListAuditLog(ctx context.Context, req api.ListAuditLogRequestObject) (api.ListAuditLogResponseObject, error) {
	a := actorOf(ctx)
	p := req.Params
	page, err := h.svc.AuditLog(ctx, a, guild.AuditFilter{ActorID: deref(p.ActorID), Type: deref(p.Type), Subject: deref(p.Subject),
		Since: p.Since, Until: p.Until}, deref(p.Cursor), deref(p.Limit))
	if err != nil {
		return nil, err
	}
	out := api.EventList{Items: make([]api.Event, len(page.Items)), NextCursor: cursorOf(page.NextCursor)}
	for i, e := range page.Items {
		out.Items[i] = toEvent(e)
	}
	return api.ListAuditLog200JSONResponse{Body: out}, nil
}

// CreateEventTicket implements POST /events/ticket.
func (h *Handler) CreateEventTicket(ctx context.Context, _ api.CreateEventTicketRequestObject) (api.CreateEventTicketResponseObject, error) {
	a := actorOf(ctx)
	ticket, expires, err := h.svc.CreateTicket(ctx, a)
	if err != nil {
		return nil, err
	}
	return api.CreateEventTicket201JSONResponse{Body: api.StreamTicket{Ticket: ticket, ExpiresAt: api.Timestamp(expires)}}, nil
}

// StreamEvents serves GET /events, and its HEAD twin, as Server-Sent
// Events. A raw operation (raw.go): a stream is written as events commit.
func (h *Handler) StreamEvents(c echo.Context) error {
	var p api.StreamEventsParams
	if err := queryParam(c, "after", false, &p.After, "integer", "int64"); err != nil {
		return err
	}
	if err := queryParam(c, "ticket", false, &p.Ticket, "string", ""); err != nil {
		return err
	}
	var err error
	if p.LastEventID, err = headerParam(c, "Last-Event-ID"); err != nil {
		return err
	}
	head := c.Request().Method == http.MethodHead
	return h.serveRaw(c, "StreamEvents", func(ctx context.Context) (rawAnswer, error) {
		return h.openStream(ctx, p, head)
	})
}

// openStream decides the answer of StreamEvents.
func (h *Handler) openStream(ctx context.Context, p api.StreamEventsParams, head bool) (rawAnswer, error) {
	a := actorOf(ctx)
	after := int64(-1)
	if v := p.LastEventID; v != nil {
		n, err := strconv.ParseInt(*v, 10, 64)
		if err != nil {
			return nil, apperr.InvalidAt("header.Last-Event-ID", "must be an event seq")
		}
		after = n
	} else if p.After != nil {
		after = *p.After
	}
	if err := h.svc.CanStream(a); err != nil { // 400 before 403 (docs/design.md §11)
		return nil, err
	}
	if head {
		if err := h.slots.check(a.UserID); err != nil { // what GET would answer
			return nil, err
		}
		return &eventStream{h: h, head: true}, nil // the headers of a stream, and no stream
	}
	// Opening is bounded by a database budget (faults.go); the stream then
	// runs under ctx, each of its reads with its own deadline.
	octx, cancel := h.budget(ctx)
	defer cancel()
	if after < 0 {
		// A fresh stream starts with the next event.
		var err error
		if after, err = h.svc.LastEventSeq(octx); err != nil {
			return nil, err
		}
	}
	// The user's slot is taken before the ticket is used: a stream refused
	// for the user's streams leaves its ticket usable.
	release, err := h.slots.acquire(a.UserID)
	if err != nil {
		return nil, err
	}
	if err := h.svc.ConsumeTicket(octx, a); err != nil { // only a stream that opens uses its ticket
		release()
		return nil, err
	}
	return &eventStream{h: h, ctx: ctx, actor: a, after: after, release: release}, nil
}

// eventStream writes events with seq > after as they are committed: it reads
// them from the store by seq after each wake-up, so it never skips or repeats
// one, and a slow client slows only itself.
type eventStream struct {
	h     *Handler
	ctx   context.Context
	actor *guild.Actor
	after int64
	head  bool
	// release frees the user's stream slot (nil for HEAD, which opens no
	// stream). serveRaw calls Close once the stream ends, however it ends:
	// the client gone, an error, a revocation or the server shutting down.
	release func()
}

// Close frees the stream's slot.
func (s *eventStream) Close() error {
	if s.release != nil {
		s.release()
	}
	return nil
}

// allowed re-authorizes the stream against the current state: a revoked or
// expired token, a suspended or deleted user, or a lost VIEW_AUDIT_LOG ends
// it (the client's reconnect then gets the 401 or 403).
// The caller as of now then decides which events the stream shows.
func (s *eventStream) allowed() bool {
	a, err := s.h.svc.Recheck(s.ctx, s.actor)
	if err == nil {
		err = s.h.svc.CanStream(a)
	}
	if err != nil {
		if s.ctx.Err() == nil {
			s.h.log.Info("event stream ended: no longer authorized", "user_id", s.actor.UserID, "err", err)
		}
		return false
	}
	s.actor = a
	return true
}

const eventBatch = 256

func (s *eventStream) write(w http.ResponseWriter) error {
	rc := http.NewResponseController(w)
	if !s.head {
		_ = rc.SetWriteDeadline(time.Time{}) // a stream outlives the server's write timeout
	}
	hd := w.Header()
	hd.Set("Content-Type", "text/event-stream")
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if s.head {
		return nil
	}
	if _, err := fmt.Fprint(w, ": stream open\nretry: 2000\n\n"); err != nil {
		return nil
	}
	_ = rc.Flush()

	// On shutdown, a write blocked on a stalled client fails at once instead
	// of holding the graceful shutdown until its timeout.
	defer context.AfterFunc(s.h.streams, func() { _ = rc.SetWriteDeadline(time.Now()) })()

	wake, unsubscribe := s.h.broker.Subscribe()
	defer unsubscribe()
	heartbeat := time.NewTicker(s.h.heartbeat)
	defer heartbeat.Stop()
	for {
		// Drain everything committed so far.
		for {
			if s.ctx.Err() != nil || s.h.streams.Err() != nil {
				return nil // a long replay stops too
			}
			events, err := s.h.svc.EventsAfter(s.ctx, s.after, eventBatch)
			if err != nil {
				if s.ctx.Err() == nil {
					s.h.log.Warn("event stream read failed", "err", err)
				}
				return nil
			}
			// Checked after the read: if the caller is still allowed now,
			// every event read was committed before any revocation, and
			// what the caller may see of them is decided as of now.
			if len(events) > 0 && !s.allowed() {
				return nil
			}
			shown, err := s.h.svc.VisibleEvents(s.ctx, s.actor, events)
			if err != nil {
				return nil
			}
			for _, e := range shown {
				data, err := json.Marshal(toEvent(e))
				if err != nil {
					return nil
				}
				if _, err := fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", e.Seq, e.Type, data); err != nil {
					return nil // the client is gone
				}
			}
			if len(events) > 0 {
				s.after = events[len(events)-1].Seq
			}
			if len(shown) > 0 {
				if err := rc.Flush(); err != nil {
					return nil
				}
			}
			if len(events) < eventBatch {
				break
			}
		}
		select {
		case <-s.ctx.Done():
			return nil
		case <-s.h.streams.Done(): // the server is shutting down
			return nil
		case <-wake:
		case <-heartbeat.C:
			if !s.allowed() {
				return nil
			}
			if _, err := fmt.Fprint(w, ": heartbeat\n\n"); err != nil {
				return nil
			}
			if err := rc.Flush(); err != nil {
				return nil
			}
		}
	}
}
