package webhook

import (
	"context"
	"net/url"
	"time"

	"github.com/guildhall/guildhall/internal/model"
)

// A webhook receives what its creator could read in the audit log at
// delivery time. The Deliverer asks an Audience about the creator before
// each round of attempts; the domain (internal/guild) answers, so the rules
// of who may read what stay in one place.

// Standing is where a webhook's creator stands at delivery time.
type Standing int

// Standings.
const (
	// Reads: the creator may read the audit log; Creator.Visible says
	// which events.
	Reads Standing = iota
	// Held: the creator is timed out; deliveries wait until Creator.Until.
	Held
	// Lost: the creator was deleted or suspended, or lost a permission a
	// webhook needs; the webhook is disabled (reason "creator").
	Lost
)

// Creator is a webhook's creator as of delivery time.
type Creator struct {
	Standing Standing
	Until    time.Time // Held: when the timeout ends
	Why      string    // Lost: why, for the log and the event's reason
	// Visible returns, of events (oldest first), those the creator may
	// read, as the audit log shows them to the creator (Reads only).
	Visible func(ctx context.Context, events []model.Event) ([]model.Event, error)
}

// Audience tells the Deliverer about a webhook's creator;
// guild.Service is one.
type Audience interface {
	WebhookCreator(ctx context.Context, userID string) (Creator, error)
	// WebhookDisabled is the event of a webhook the deliverer disabled
	// (a webhook.updated by the system), why saying why.
	WebhookDisabled(before, after model.Webhook, why string) model.Event
}

// EventData is what an event tells of a webhook: never its secret, and of
// its URL only the scheme and host, since a receiver's path or query may
// be a credential of its own and the audit log has readers who may not
// manage webhooks.
func EventData(w model.Webhook) map[string]any {
	return map[string]any{"destination": destinationOf(w.URL), "events": w.Events, "description": w.Description,
		"enabled": w.Enabled, "creator_id": w.CreatorID}
}

func destinationOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return u.Scheme + "://" + u.Host
}
