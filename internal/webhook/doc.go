// Package webhook is the delivery core of webhooks as Standard Webhooks
// defines them: a delivery's secret and signature (NewSecret, Sign), the
// check of a destination (CheckURL, and a Dialer that checks the address
// of every connection again, so DNS cannot rebind a checked name to an
// address the check refuses), the schedule of retries (NextAttempt) and
// one attempt to deliver (Attempt, through a client from NewClient).
//
// The Deliverer (deliver.go), which every instance runs, puts them to
// work: it makes the deliveries of committed events, claims them through
// the store's queue (internal/store/webhookq), asks the domain
// (an Audience: internal/guild) what each webhook's creator may read, and
// records each Outcome.
package webhook
