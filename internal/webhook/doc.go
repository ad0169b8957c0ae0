// Package webhook is the delivery core of webhooks as Standard Webhooks
// defines them: a delivery's secret and signature (NewSecret, Sign), the
// check of a destination (CheckURL, and a Dialer that checks the address
// of every connection again, so DNS cannot rebind a checked name to an
// address the check refuses), the schedule of retries (NextAttempt) and
// one attempt to deliver (Attempt, through a client from NewClient).
//
// It knows nothing of the store, of events or of who may read them: its
// caller decides what to deliver and to whom, keeps the deliveries, and
// records each Outcome. It is not wired into the service yet: no operation
// of the contract creates a webhook, and nothing delivers one.
package webhook
