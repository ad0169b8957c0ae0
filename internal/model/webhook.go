package model

import "time"

// Webhook is a destination that receives the audit log's events, signed,
// as they are written (Standard Webhooks).
type Webhook struct {
	ID  string
	URL string
	// Events are the patterns of the event types it receives: a type, or a
	// prefix ending in ".*", as the audit log's type filter matches them.
	Events      []string
	Description string
	Enabled     bool
	// DisabledReason says why it is disabled ("" while enabled): one of
	// the WebhookDisabled… values.
	DisabledReason string
	// CreatorID is the user whose view of the audit log it receives: who
	// created it, or last changed its url or events, rotated or re-enabled
	// it.
	CreatorID string
	// Secret signs every delivery ("whsec_" + base64 of 32 bytes); during
	// a rotation PreviousSecret signs beside it until PreviousUntil.
	Secret         string
	PreviousSecret string
	PreviousUntil  time.Time
	// AfterSeq: it receives the events with a greater seq (those written
	// after it was created).
	AfterSeq  int64
	Version   int64
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Why a webhook is disabled.
const (
	WebhookDisabledByUser    = "disabled"
	WebhookDisabledGone      = "gone"    // its receiver answered 410
	WebhookDisabledByCreator = "creator" // its creator was deleted or lost a permission it needs
)

// DeliveryState is where a delivery stands.
type DeliveryState string

// Delivery states.
const (
	DeliveryPending   DeliveryState = "pending"
	DeliveryDelivered DeliveryState = "delivered"
	DeliveryFailed    DeliveryState = "failed"
)

// Delivery is one event on its way to one webhook. Its ID is the
// webhook-id header of every attempt.
type Delivery struct {
	ID        string
	WebhookID string
	EventSeq  int64
	State     DeliveryState
	Attempts  int
	// LastStatus is the HTTP status of the last attempt (0: none, or no
	// answer); LastError says why an attempt without a status failed.
	LastStatus int
	LastError  string
	// NextAttemptAt is when it is next attempted (zero unless pending).
	NextAttemptAt time.Time
	CreatedAt     time.Time
	UpdatedAt     time.Time
}
