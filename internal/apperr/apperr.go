// Package apperr holds the few kinds of error the domain returns and the
// transport maps to HTTP statuses (one ordered switch in internal/httpapi).
//
// Domain code returns *Error values built with the constructors below; their
// Detail is written for the API's users and is shown to them. Anything that is
// not an *Error is unexpected and becomes a 500 whose detail is only logged.
package apperr

import (
	"errors"
	"fmt"
)

// Kinds. Match them with errors.Is.
var (
	ErrInvalid              = errors.New("invalid")
	ErrUnauthenticated      = errors.New("unauthenticated")
	ErrForbidden            = errors.New("forbidden")
	ErrNotFound             = errors.New("not found")
	ErrConflict             = errors.New("conflict")
	ErrLimitExceeded        = errors.New("limit exceeded")
	ErrPrecondition         = errors.New("precondition failed")
	ErrPreconditionRequired = errors.New("precondition required")
	ErrNotRevertible        = errors.New("not revertible")
	ErrTooLarge             = errors.New("payload too large")
	ErrUnsupportedMedia     = errors.New("unsupported media type")
	ErrRateLimited          = errors.New("rate limited")
	// Faults: the request could not be carried out, through no fault of its
	// own, or its body stalled.
	ErrRequestTimeout      = errors.New("request timeout")
	ErrUnavailable         = errors.New("unavailable")
	ErrInsufficientStorage = errors.New("insufficient storage")
)

// Reasons of a 403.
const (
	ReasonMissingPermissions = "missing_permissions"
	ReasonRoleHierarchy      = "role_hierarchy"
	ReasonCannotGrantUnheld  = "cannot_grant_unheld"
	ReasonSelfOrOwnerOnly    = "self_or_owner_only"
	ReasonOwnerOnly          = "owner_only"
)

// FieldError names one invalid part of a request. The domain names the
// input as it knows it (Field: "position", "links.gh", "cursor",
// "content_type"); the transport, which knows where each input travels,
// turns that into a Location ("body.position", "query.cursor",
// "header.Content-Type"). Errors the transport finds itself (the validator)
// carry the Location directly.
type FieldError struct {
	Location string
	Field    string
	Message  string
}

// Forbidden says why a request was refused.
type Forbidden struct {
	Reason  string
	Missing []string // permission names; empty (never nil) for hierarchy refusals
	Channel string   // the channel the check was made in, if any
	Role    string   // the role out of reach, for hierarchy refusals
	User    string   // the user out of reach, for hierarchy refusals
}

// Error is an expected failure with a message for the API's user.
type Error struct {
	Kind      error
	Detail    string
	Fields    []FieldError // ErrInvalid
	Forbidden *Forbidden   // ErrForbidden
	Limit     string       // ErrLimitExceeded: the limit's name
	Current   string       // ErrPrecondition: the version the resource is at; ErrLimitExceeded: the entity tag of what was too large to send
	Retry     string       // ErrRateLimited: the Retry-After, in seconds
	// ConflictingSeq is, for the ErrConflict of a revert, the later event
	// that changed what it would set back (0: none named).
	ConflictingSeq int64
	Cause          error // wrapped, for logs only
}

func (e *Error) Error() string {
	if e.Cause != nil {
		return fmt.Sprintf("%v: %s: %v", e.Kind, e.Detail, e.Cause)
	}
	return fmt.Sprintf("%v: %s", e.Kind, e.Detail)
}

// Is makes errors.Is(err, ErrNotFound) and friends work.
func (e *Error) Is(target error) bool { return target == e.Kind }

// Unwrap exposes the cause.
func (e *Error) Unwrap() error { return e.Cause }

// As returns the *Error in err's chain, if any.
func As(err error) (*Error, bool) {
	var e *Error
	ok := errors.As(err, &e)
	return e, ok
}

// NotFound builds a 404.
func NotFound(format string, args ...any) error {
	return &Error{Kind: ErrNotFound, Detail: fmt.Sprintf(format, args...)}
}

// Conflict builds a 409.
func Conflict(format string, args ...any) error {
	return &Error{Kind: ErrConflict, Detail: fmt.Sprintf(format, args...)}
}

// NotRevertible builds the 400 of a revert of an event no revert sets back.
func NotRevertible(format string, args ...any) error {
	return &Error{Kind: ErrNotRevertible, Detail: fmt.Sprintf(format, args...)}
}

// RevertConflict builds the 409 of a revert that a later event, seq,
// stands in the way of.
func RevertConflict(seq int64, format string, args ...any) error {
	return &Error{Kind: ErrConflict, ConflictingSeq: seq, Detail: fmt.Sprintf(format, args...)}
}

// LimitExceeded builds a 409 limit_exceeded naming the limit.
func LimitExceeded(limit string, max int, what string) error {
	return &Error{Kind: ErrLimitExceeded, Limit: limit,
		Detail: fmt.Sprintf("The limit of %d %s is reached.", max, what)}
}

// MaxAnswerBytes bounds what one answer of the API weighs (docs/design.md
// §14, attachments' bytes aside): an answer that would weigh more is paged,
// or refused before anything is done.
const MaxAnswerBytes = 8 << 20

// AnswerTooLarge is the 409 of an answer that would weigh n bytes, more
// than MaxAnswerBytes; instead says what to do.
func AnswerTooLarge(what string, n int, instead string) error {
	return &Error{Kind: ErrLimitExceeded, Limit: "answer_bytes",
		Detail: fmt.Sprintf("%s would take %d bytes or more, over the %d bytes one answer may hold: %s.", what, n, MaxAnswerBytes, instead)}
}

// RateLimited builds a 429 rate_limited to retry after retry seconds.
func RateLimited(retry, detail string) error {
	return &Error{Kind: ErrRateLimited, Retry: retry, Detail: detail}
}

// Invalid builds a 400 with one error about an input field (see
// FieldError).
func Invalid(field, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	return &Error{Kind: ErrInvalid, Detail: "The request is invalid.",
		Fields: []FieldError{{Field: field, Message: msg}}}
}

// InvalidAt builds a 400 with one error at a location of the request (the
// transport's own checks, which know where the input travels).
func InvalidAt(location, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	return &Error{Kind: ErrInvalid, Detail: "The request is invalid.",
		Fields: []FieldError{{Location: location, Message: msg}}}
}

// InvalidFields builds a 400 with several field errors.
func InvalidFields(fields []FieldError) error {
	return &Error{Kind: ErrInvalid, Detail: "The request is invalid.", Fields: fields}
}

// Unauthenticated builds a 401.
func Unauthenticated(detail string) error {
	return &Error{Kind: ErrUnauthenticated, Detail: detail}
}

// Precondition builds a 412: the resource is no longer at the version the
// request expected; current is the version it is at (the transport names
// it the way its clients name versions).
func Precondition(current string) error {
	return &Error{Kind: ErrPrecondition, Current: current,
		Detail: fmt.Sprintf("The resource has changed since the version you expected; it is now at %s. Read it again.", current)}
}

// PreconditionNone builds a 412 for a resource that does not exist while
// the request expected one.
func PreconditionNone(detail string) error {
	return &Error{Kind: ErrPrecondition, Detail: detail}
}

// PreconditionRequired builds a 428: the request must name the version it
// expects (If-Match), for it would otherwise undo changes its sender has
// not seen.
func PreconditionRequired(detail string) error {
	return &Error{Kind: ErrPreconditionRequired, Detail: detail}
}

// TooLarge builds a 413.
func TooLarge(limit int64) error {
	return &Error{Kind: ErrTooLarge, Detail: fmt.Sprintf("The body exceeds %d bytes.", limit)}
}

// UnsupportedMedia builds a 415.
func UnsupportedMedia(detail string) error {
	return &Error{Kind: ErrUnsupportedMedia, Detail: detail}
}

// RequestTimeout builds a 408: the request body stalled.
func RequestTimeout(detail string, cause error) error {
	return &Error{Kind: ErrRequestTimeout, Detail: detail, Cause: cause}
}

// Unavailable builds a 503: the database does not answer (down, unreachable
// or too slow); cause is logged, never shown.
func Unavailable(cause error) error {
	return &Error{Kind: ErrUnavailable, Detail: "The database does not answer; the request was not carried out. Retry shortly.", Cause: cause}
}

// UnavailableOutcomeUnknown builds the 503 of a write whose transaction did
// not answer in time once it ran: it may or may not have been carried out.
func UnavailableOutcomeUnknown(cause error) error {
	return &Error{Kind: ErrUnavailable, Detail: "The database stopped answering while the change was being committed: it may or may not have been made. Read it back before repeating it.", Cause: cause}
}

// InsufficientStorage builds a 507: the disk (or the database's) is full;
// cause is logged, never shown.
func InsufficientStorage(cause error) error {
	return &Error{Kind: ErrInsufficientStorage, Detail: "The server's storage is full; the change was not made.", Cause: cause}
}

// MissingPermissions builds a 403 naming what is missing (channel "" for a global check).
func MissingPermissions(channel string, missing []string) error {
	d := "Missing permissions: "
	if channel != "" {
		d = fmt.Sprintf("Missing permissions in channel %s: ", channel)
	}
	return &Error{Kind: ErrForbidden, Detail: d + join(missing) + ".",
		Forbidden: &Forbidden{Reason: ReasonMissingPermissions, Missing: missing, Channel: channel}}
}

// MissingOneOf builds a 403 for a global check that any one of several
// permissions passes, naming them all: the caller holds none.
func MissingOneOf(missing []string) error {
	return &Error{Kind: ErrForbidden, Detail: "Missing permissions: one of " + join(missing) + " is needed.",
		Forbidden: &Forbidden{Reason: ReasonMissingPermissions, Missing: missing}}
}

// CannotGrant builds a 403 for a change that grants or revokes permissions the caller lacks.
func CannotGrant(channel string, missing []string) error {
	d := "You cannot grant or revoke permissions you do not have: "
	if channel != "" {
		d = fmt.Sprintf("You cannot grant or revoke permissions you do not have in channel %s: ", channel)
	}
	return &Error{Kind: ErrForbidden, Detail: d + join(missing) + ".",
		Forbidden: &Forbidden{Reason: ReasonCannotGrantUnheld, Missing: missing, Channel: channel}}
}

// RoleHierarchy builds a 403 for a role at or above the caller's top role.
func RoleHierarchy(roleID, detail string) error {
	return &Error{Kind: ErrForbidden, Detail: detail,
		Forbidden: &Forbidden{Reason: ReasonRoleHierarchy, Missing: []string{}, Role: roleID}}
}

// UserHierarchy builds a 403 for a user whose top role is not below the caller's.
func UserHierarchy(userID, detail string) error {
	return &Error{Kind: ErrForbidden, Detail: detail,
		Forbidden: &Forbidden{Reason: ReasonRoleHierarchy, Missing: []string{}, User: userID}}
}

// SelfOrOwnerOnly builds a 403 for another user's tokens.
func SelfOrOwnerOnly(userID string) error {
	return &Error{Kind: ErrForbidden, Detail: "A user's tokens are managed by that user and the owner only.",
		Forbidden: &Forbidden{Reason: ReasonSelfOrOwnerOnly, Missing: []string{}, User: userID}}
}

// OwnerOnly builds a 403 for what the owner alone may do.
func OwnerOnly(what string) error {
	return &Error{Kind: ErrForbidden, Detail: "Only the owner can " + what + ".",
		Forbidden: &Forbidden{Reason: ReasonOwnerOnly, Missing: []string{}}}
}

func join(names []string) string {
	s := ""
	for i, n := range names {
		if i > 0 {
			s += ", "
		}
		s += n
	}
	return s
}

// IsNotFound reports whether err is a 404.
func IsNotFound(err error) bool { return errors.Is(err, ErrNotFound) }
