package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"net/http"
	"reflect"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/guildhall/guildhall/gen/api"
	"github.com/guildhall/guildhall/internal/apperr"
)

// problemInfo is the fixed part of each problem type: its status and title,
// and the description served at /problems/<code>.
type problemInfo struct {
	status      int
	title       string
	description string
}

var problems = map[api.ProblemCode]problemInfo{
	api.ProblemCodeValidation:           {400, "Request is invalid", "The request does not match the contract or breaks a rule. `errors` lists each problem with its location, such as `body.permissions[1]` or `query.limit`. Fix the request; repeating it unchanged will fail again."},
	api.ProblemCodeUnauthenticated:      {401, "Authentication required", "The request has no bearer token, or its token is unknown, revoked or expired, or belongs to a suspended user. Send `Authorization: Bearer <token>`."},
	api.ProblemCodeForbidden:            {403, "Forbidden", "The caller may not do this. `reason` says why: `missing_permissions` (listed in `missing_permissions`, with `channel_id` when the check was made in a channel), `role_hierarchy` (the role or user is not strictly below the caller's highest role; see `role_id` or `user_id`), `cannot_grant_unheld` (the change grants or revokes permissions the caller lacks), `self_or_owner_only` (a user's tokens belong to that user and the owner), or `owner_only` (only the owner may do this)."},
	api.ProblemCodeNotFound:             {404, "Not found", "The resource named in the path does not exist, or no route matches the URL."},
	api.ProblemCodeMethodNotAllowed:     {405, "Method not allowed", "The URL exists but not with this method; `Allow` lists the methods it takes."},
	api.ProblemCodeConflict:             {409, "Conflict", "The change conflicts with the current state: the ID, username or email is taken, or the owner cannot be changed that way."},
	api.ProblemCodeLimitExceeded:        {409, "Limit exceeded", "The change would exceed a configured limit, named in `limit` (`roles`, `channels`, `channels_per_category`, `overwrites_per_channel`, `profile_links`, `tokens`, or `answer_bytes`: an answer would weigh more than 8 MiB)."},
	api.ProblemCodePreconditionFailed:   {412, "Precondition failed", "The `If-Match` header does not match the resource's current `ETag`: someone changed it since you read it. Read it again and retry."},
	api.ProblemCodePreconditionRequired: {428, "Precondition required", "The request must be conditional: send the `ETag` of what you last read in `If-Match`. An import that deletes what its template leaves out (`prune=true`) needs the `ETag` of the export it was made from, so that it cannot delete what was created since."},
	api.ProblemCodeNotRevertible:        {400, "Not revertible", "The event is of a type no revert sets back: only changes of overwrites, role and global permissions, role memberships, roles' and channels' names, colors, topics and places, and timeouts are reverted."},
	api.ProblemCodePayloadTooLarge:      {413, "Payload too large", "The body is larger than allowed: 1 MiB for JSON, and the configured attachment limit (25 MiB by default) for uploads."},
	api.ProblemCodeUnsupportedMediaType: {415, "Unsupported media type", "The body's `Content-Type` is missing or not one the operation accepts."},
	api.ProblemCodeRangeNotSatisfiable:  {416, "Range not satisfiable", "The `Range` header lies outside the attachment's bytes."},
	api.ProblemCodeRateLimited:          {429, "Too many requests", "The client sent more requests than its rate limit allows (one budget per user, all their tokens together; per client address without a token), or opened more event streams at once than a user may. Wait `Retry-After` seconds, or close a stream first."},
	api.ProblemCodeRequestTimeout:       {408, "Request timeout", "The request body stalled: nothing arrived for the body idle timeout (`GUILDHALL_BODY_IDLE_TIMEOUT`, 30 s by default), or it arrived slower than the minimum rate (`GUILDHALL_BODY_MIN_RATE`, 1024 bytes a second by default). Nothing was stored; send it again."},
	api.ProblemCodeInsufficientStorage:  {507, "Insufficient storage", "The server's storage is full, so the change was not made. Reads still work. Retry once an operator has freed space; `/readyz` answers 503 meanwhile."},
	api.ProblemCodeUnavailable:          {503, "Service unavailable", "The database does not answer: it is down, unreachable or too slow (a request's database work has a budget, `GUILDHALL_DB_TIMEOUT`). The request was not carried out, or its write was rolled back; if the database stopped answering while the change was being committed, `detail` says that it may or may not have been made: read it back before repeating it. Retry after `Retry-After` seconds; the server recovers by itself once the database answers."},
	api.ProblemCodeHeaderTooLarge:       {431, "Request header fields too large", "The request's header fields are larger than the server accepts (1 MiB in all). The connection is closed; send smaller headers."},
	api.ProblemCodeNotImplemented:       {501, "Not implemented", "The request needs a feature of HTTP the server does not support: a `Transfer-Encoding` other than `chunked` (501), or an HTTP version other than 1.x (505)."},
	api.ProblemCodeInternal:             {500, "Internal error", "An unexpected error occurred. Nothing about it is shown here; quote `request_id` when reporting it."},
}

// problemFor maps an error to the contract's Problem: the one mapping of
// error kinds to statuses. ok is false for unexpected errors (500).
func problemFor(err error) (p api.Problem, ok bool) {
	if e, isApp := apperr.As(err); isApp {
		p = newProblem(codeOf(e.Kind), e.Detail)
		p.Errors = fieldList(e.Fields)
		if f := e.Forbidden; f != nil {
			reason := api.ProblemReason(f.Reason)
			p.Reason = &reason
			missing := make([]api.PermissionName, 0, len(f.Missing))
			for _, m := range f.Missing {
				missing = append(missing, api.PermissionName(m))
			}
			p.MissingPermissions = &missing
			p.ChannelId, p.RoleId, p.UserId = strPtr(f.Channel), strPtr(f.Role), strPtr(f.User)
		}
		p.Limit = strPtr(e.Limit)
		if e.ConflictingSeq > 0 {
			p.ConflictingSeq = &e.ConflictingSeq
		}
		if e.Kind == apperr.ErrPrecondition && e.Current != "" {
			detail := fmt.Sprintf("The resource has changed; its current ETag is %s. Read it again.", quoteTag(e.Current))
			p.Detail = &detail
		}
		return p, true
	}
	var he *echo.HTTPError
	if errors.As(err, &he) {
		switch he.Code {
		case http.StatusNotFound:
			return newProblem(api.ProblemCodeNotFound, "No route matches this URL."), true
		case http.StatusMethodNotAllowed:
			return newProblem(api.ProblemCodeMethodNotAllowed, "This URL does not take this method; see Allow."), true
		case http.StatusRequestEntityTooLarge:
			return newProblem(api.ProblemCodePayloadTooLarge, "The body is too large."), true
		case http.StatusUnsupportedMediaType:
			return newProblem(api.ProblemCodeUnsupportedMediaType, "The Content-Type is not accepted."), true
		case http.StatusUnauthorized:
			return newProblem(api.ProblemCodeUnauthenticated, "A valid bearer token is required."), true
		case http.StatusBadRequest:
			return binderProblem(he), true
		case http.StatusTooManyRequests:
			return newProblem(api.ProblemCodeRateLimited, "Too many requests."), true
		}
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return newProblem(api.ProblemCodePayloadTooLarge, fmt.Sprintf("The body exceeds %d bytes.", mbe.Limit)), true
	}
	return newProblem(api.ProblemCodeInternal, "An unexpected error occurred."), false
}

// binderProblem turns a 400 of the generated binder into a validation
// problem. The validator and singleValues check every parameter first, so
// what reaches the binder is a body member that does not decode into its Go
// type (2.0 for an integer): the decoder's typed error names the member.
func binderProblem(he *echo.HTTPError) api.Problem {
	msg := fmt.Sprint(he.Message)
	loc := "request"
	var ute *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(he.Internal, &ute) && ute.Field != "":
		loc = "body." + ute.Field
		msg = fmt.Sprintf("must be %s, not %s", jsonKind(ute.Type.Kind()), ute.Value)
	case errors.As(he.Internal, &ute), errors.As(he.Internal, &se):
		loc = "body"
	}
	p := newProblem(api.ProblemCodeValidation, "The request could not be read: "+msg)
	p.Errors = appendField(p.Errors, apperr.FieldError{Location: loc, Message: msg})
	return p
}

// jsonKind names a Go kind as the JSON type it decodes from.
func jsonKind(k reflect.Kind) string {
	switch k {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Slice, reflect.Array:
		return "an array"
	}
	return "an object"
}

func codeOf(kind error) api.ProblemCode {
	switch kind {
	case apperr.ErrInvalid:
		return api.ProblemCodeValidation
	case apperr.ErrUnauthenticated:
		return api.ProblemCodeUnauthenticated
	case apperr.ErrForbidden:
		return api.ProblemCodeForbidden
	case apperr.ErrNotFound:
		return api.ProblemCodeNotFound
	case apperr.ErrConflict:
		return api.ProblemCodeConflict
	case apperr.ErrLimitExceeded:
		return api.ProblemCodeLimitExceeded
	case apperr.ErrRateLimited:
		return api.ProblemCodeRateLimited
	case apperr.ErrPrecondition:
		return api.ProblemCodePreconditionFailed
	case apperr.ErrPreconditionRequired:
		return api.ProblemCodePreconditionRequired
	case apperr.ErrNotRevertible:
		return api.ProblemCodeNotRevertible
	case apperr.ErrTooLarge:
		return api.ProblemCodePayloadTooLarge
	case apperr.ErrUnsupportedMedia:
		return api.ProblemCodeUnsupportedMediaType
	case apperr.ErrRequestTimeout:
		return api.ProblemCodeRequestTimeout
	case apperr.ErrUnavailable:
		return api.ProblemCodeUnavailable
	case apperr.ErrInsufficientStorage:
		return api.ProblemCodeInsufficientStorage
	}
	return api.ProblemCodeInternal
}

func newProblem(code api.ProblemCode, detail string) api.Problem {
	info := problems[code]
	return api.Problem{Type: "/problems/" + string(code), Title: info.title, Status: info.status,
		Code: code, Detail: &detail}
}

// maxFieldErrors bounds the entries of a problem's errors: an answer costs
// no more than its request, however many problems the request holds.
const maxFieldErrors = 100

// fieldList is a problem's errors: each problem once, in the order found,
// at most maxFieldErrors of them, then one entry that says how many more
// there are.
func fieldList(fields []apperr.FieldError) *[]api.FieldError {
	if len(fields) == 0 {
		return nil
	}
	out := make([]api.FieldError, 0, min(len(fields), maxFieldErrors+1))
	seen := make(map[apperr.FieldError]bool, len(fields))
	more := 0
	for _, f := range fields {
		f.Field = "" // located already: the location names it
		if seen[f] {
			continue
		}
		seen[f] = true
		if len(out) == maxFieldErrors {
			more++
			continue
		}
		out = append(out, api.FieldError{Location: f.Location, Message: f.Message})
	}
	if more > 0 {
		out = append(out, api.FieldError{Location: "request",
			Message: fmt.Sprintf("%d more problems are not listed", more)})
	}
	return &out
}

func appendField(list *[]api.FieldError, f apperr.FieldError) *[]api.FieldError {
	if list == nil {
		list = &[]api.FieldError{}
	}
	*list = append(*list, api.FieldError{Location: f.Location, Message: f.Message})
	return list
}

func strPtr(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// statusClientClosedRequest is the status the access log and the metrics
// give a request whose client went away before its answer.
const statusClientClosedRequest = 499

// clientGone answers a request whose work was canceled because its client
// went away: a 503 (not carried out, retry), which reaches a client that
// only half-closed its connection and still reads. The status the access
// log and the metrics see is 499, as proxies log a client that closed its
// request, so that a client leaving does not read as a fault of the
// server's.
func (h *Handler) clientGone(c echo.Context, err error) {
	req := c.Request()
	rid := c.Response().Header().Get(echo.HeaderXRequestID)
	h.log.Info("request canceled", "request_id", rid, "method", req.Method, "path", req.URL.Path)
	p, _ := problemOf(c, apperr.Unavailable(err))
	c.Response().Header().Set("Retry-After", retryAfterUnavailable)
	writeProblem(c, p, "")
	c.Response().Status = statusClientClosedRequest
}

// problemOf is the problem an error answers c's request with, and whether
// the error was expected (problemFor).
func problemOf(c echo.Context, err error) (api.Problem, bool) {
	p, expected := problemFor(err)
	p.RequestId = c.Response().Header().Get(echo.HeaderXRequestID)
	instance := c.Request().URL.EscapedPath()
	p.Instance = &instance
	return p, expected
}

// errorHandler renders every error as application/problem+json: handlers,
// the validator, authentication, unknown routes, wrong methods and panics.
func (h *Handler) errorHandler(err error, c echo.Context) {
	if c.Response().Committed {
		return // a stream that failed midway: nothing more can be said
	}
	err = h.classifyFault(c, err)
	if _, ok := apperr.As(err); !ok && errors.Is(err, context.Canceled) && errors.Is(c.Request().Context().Err(), context.Canceled) {
		h.clientGone(c, err)
		return
	}
	if e, ok := apperr.As(err); ok && len(e.Fields) > 0 {
		h.ops.of(c).locateFields(e.Fields)
	}
	p, expected := problemOf(c, err)
	if !expected {
		h.log.Error("unexpected error", "request_id", p.RequestId, "method", c.Request().Method, "path", c.Request().URL.Path, "err", err)
	}
	if p.Status == http.StatusUnauthorized {
		c.Response().Header().Set("WWW-Authenticate", `Bearer realm="guildhall"`)
	}
	if e, ok := apperr.As(err); ok && e.Retry != "" {
		c.Response().Header().Set("Retry-After", e.Retry)
	}
	if e, ok := apperr.As(err); ok && e.Kind == apperr.ErrLimitExceeded && e.Current != "" {
		c.Response().Header().Set("ETag", quoteTag(e.Current))
	}
	if p.Status == http.StatusTooManyRequests && c.Response().Header().Get("Retry-After") == "" {
		c.Response().Header().Set("Retry-After", "1")
	}
	h.faultHeaders(c, p.Status, err)
	etag := ""
	if e, ok := apperr.As(err); ok && e.Kind == apperr.ErrLimitExceeded && e.Current != "" {
		etag = quoteTag(e.Current)
	}
	writeProblem(c, p, etag)
}

func problemJSON(p api.Problem) []byte {
	body, _ := json.Marshal(p)
	return body
}

// writeProblem writes p, with etag (quoted, or empty for none) as the
// problem's ETag: an error answer carries no entity tag of what the request
// named, but what was too large to send still has one that a later request
// may name (an oversized export, for a pruning import).
func writeProblem(c echo.Context, p api.Problem, etag string) {
	body := problemJSON(p)
	w := c.Response()
	w.Header().Set(echo.HeaderContentType, "application/problem+json")
	w.Header().Del("Content-Disposition")
	w.Header().Del("ETag")
	if etag != "" {
		w.Header().Set("ETag", etag)
	}
	if c.Request().Method == http.MethodHead {
		w.WriteHeader(p.Status)
		return
	}
	w.WriteHeader(p.Status)
	_, _ = w.Write(body)
}

// problemPage serves the description of a problem type at /problems/<code>.
func problemPage(c echo.Context) error {
	code := api.ProblemCode(strings.TrimPrefix(c.Param("code"), "/"))
	info, ok := problems[code]
	if !ok {
		return echo.ErrNotFound
	}
	var b strings.Builder
	fmt.Fprintf(&b, "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>%s</title></head><body>", info.title)
	fmt.Fprintf(&b, "<h1>%s</h1><p>Status %d, code <code>%s</code>.</p><p>%s</p>", info.title, info.status, code, mdCode(info.description))
	b.WriteString("<p>Every Guildhall error is an RFC 9457 problem (<code>application/problem+json</code>); see <a href=\"/docs/\">the API documentation</a>.</p></body></html>")
	return c.HTML(http.StatusOK, b.String())
}

// mdCode turns `x` into <code>x</code> (descriptions hold no other markup).
func mdCode(s string) string {
	parts := strings.Split(s, "`")
	var b strings.Builder
	for i, p := range parts {
		if i%2 == 1 {
			b.WriteString("<code>" + html.EscapeString(p) + "</code>")
		} else {
			b.WriteString(html.EscapeString(p))
		}
	}
	return b.String()
}
