package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/labstack/echo/v4"
	"github.com/oapi-codegen/runtime"

	"github.com/guildhall/guildhall/gen/api"
	"github.com/guildhall/guildhall/internal/apperr"
	"github.com/guildhall/guildhall/internal/guild"
	"github.com/guildhall/guildhall/internal/jsonfield"
	namerule "github.com/guildhall/guildhall/internal/names" // httpapi has a names of its own
)

// operation is one route of the contract, with what its middlewares need.
type operation struct {
	id       string
	method   string
	path     string // OpenAPI path, e.g. /roles/{roleID}/create
	route    *routers.Route
	public   bool // security: []
	ticket   bool // also accepts ?ticket= (the event stream)
	jsonBody bool // has a JSON request body
	rawBody  bool // streamed body, not validated (attachment upload)
	// streams: the operation answers with a stream of bytes rather than
	// JSON (attachment bytes, Server-Sent Events) or takes a raw body: its
	// duration is the client's, so the request deadline does not apply to
	// it.
	streams bool
	legacy  string
}

// gate applies the rate limit (429) and then authenticates the caller (401):
// per user for tokens that authenticated before (all of a user's tokens
// share one bucket), per client address otherwise, so guessing tokens is as
// slow as anything else and costs no store query past the limit. It starts
// the request's database budget (faults.go), which the authentication
// spends first.
func (h *Handler) gate(op *operation) echo.MiddlewareFunc {
	// The client's time comes after the authentication (a body), or the
	// operation bounds its own opening (a stream): the budget is paused.
	pause := op.jsonBody || op.streams
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			// The limit comes before the credential lookup (ratelimit.go).
			var key string // the bearer token's, for the limiter
			if h.limiter != nil {
				key = tokenKey(c)
				if !h.limiter.admit(c, key) {
					return &echo.HTTPError{Code: http.StatusTooManyRequests}
				}
			}
			orig := c.Request()
			// The request's reads are answered as of one moment after it
			// arrived (guild.Service.Request).
			base := h.svc.Request(orig.Context())
			start := time.Now()
			ctx, cancel := h.budget(base)
			defer cancel()
			var actor *guild.Actor
			if !op.public {
				var err error
				if h.tracer != nil {
					actor, err = h.authenticateTraced(ctx, c, op)
				} else {
					actor, err = h.authenticate(ctx, c, op)
				}
				if err != nil {
					if h.limiter != nil && errors.Is(err, apperr.ErrUnauthenticated) {
						h.limiter.refused(key)
					}
					return err
				}
				if h.limiter != nil {
					h.limiter.authenticated(key, actor.UserID)
				}
			}
			if pause {
				ctx = h.pauseBudget(base, start)
			}
			if actor != nil {
				ctx = withActor(ctx, actor)
			}
			c.SetRequest(orig.WithContext(ctx))
			err := next(c)
			c.SetRequest(orig) // see deadline
			return err
		}
	}
}

// authenticate resolves the caller's credentials under ctx.
func (h *Handler) authenticate(ctx context.Context, c echo.Context, op *operation) (*guild.Actor, error) {
	req := c.Request()
	authz := req.Header.Get(echo.HeaderAuthorization)
	if authz == "" && op.ticket {
		if t := req.URL.Query().Get("ticket"); t != "" {
			return h.svc.AuthenticateTicket(ctx, t)
		}
	}
	scheme, token, found := strings.Cut(authz, " ")
	if authz == "" || !found || !strings.EqualFold(scheme, "Bearer") {
		return nil, apperr.Unauthenticated("A bearer token is required: send Authorization: Bearer <token>.")
	}
	return h.svc.Authenticate(ctx, strings.TrimSpace(token))
}

// validate checks the request against the contract with kin-openapi. JSON
// bodies are read first (bounded by the body limit) and must be valid UTF-8
// holding exactly one JSON value; the streamed attachment body is not read.
func (h *Handler) validate(op *operation) echo.MiddlewareFunc {
	opts := &openapi3filter.Options{
		MultiError:              true,
		AuthenticationFunc:      openapi3filter.NoopAuthenticationFunc,
		SkipSettingDefaults:     true,
		KeepValidatedValue:      true,
		ExcludeRequestBody:      op.rawBody,
		SchemaValidationOptions: SchemaOptions(),
	}
	memo := memoizable(op)
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			req := c.Request()
			if err := checkContentEncoding(op, req); err != nil {
				return err
			}
			if op.jsonBody {
				if err := h.readJSONBody(c, op); err != nil {
					return err
				}
			}
			vreq := req
			if op.rawBody {
				// kin-openapi's security check reads the whole body into
				// memory (so that an AuthenticationFunc may read it), even
				// with ExcludeRequestBody. Authentication is the gate's, so
				// the validator gets a copy without the streamed body.
				vreq = req.WithContext(req.Context())
				vreq.Body, vreq.GetBody, vreq.ContentLength = http.NoBody, nil, 0
			}
			// The query is parsed once, by Echo (which keeps it for the
			// generated binder): the validator and singleValues read that
			// parse instead of parsing the URL again for each parameter.
			// No query, nothing to parse (not even an empty map).
			var query url.Values
			if req.URL.RawQuery != "" {
				query = c.QueryParams()
			}
			if err := h.checkContract(c, op, memo, &openapi3filter.RequestValidationInput{Request: vreq, QueryParams: query, Route: op.route, Options: opts}); err != nil {
				return err
			}
			if err := checkAuditReason(req.Header.Get("X-Audit-Reason")); err != nil {
				return err
			}
			return next(c)
		}
	}
}

// checkContract is validateRequest and singleValues, skipped for a
// memoizable request that passed them before (validated.go).
func (h *Handler) checkContract(c echo.Context, op *operation, memo bool, in *openapi3filter.RequestValidationInput) error {
	check := func() error {
		if err := validateRequest(c, in); err != nil {
			return err
		}
		return singleValues(op, in.Request, in.QueryParams)
	}
	if !memo {
		return check()
	}
	bp := keyBufs.Get().(*[]byte)
	defer func() {
		if cap(*bp) <= validatedKeyMax {
			keyBufs.Put(bp)
		}
	}()
	*bp = validatedKey(*bp, op, c, in.Request.URL.RawQuery)
	if h.validated.seen(*bp) {
		return nil
	}
	if err := check(); err != nil {
		return err
	}
	h.validated.add(*bp)
	return nil
}

// validation is what kin-openapi's check of one request takes besides the
// request: its input and the map of its path parameters. Both are kept for
// the next request (validations) rather than allocated for each; nothing
// kin-openapi returns refers to them once validationProblem has read its
// errors.
type validation struct {
	in     openapi3filter.RequestValidationInput
	params map[string]string
}

var validations = sync.Pool{New: func() any { return &validation{params: map[string]string{}} }}

// validateRequest checks the request of in (which has no PathParams) with
// the path parameters Echo matched, and turns kin-openapi's errors into
// ours.
func validateRequest(c echo.Context, in *openapi3filter.RequestValidationInput) error {
	v := validations.Get().(*validation)
	defer func() {
		clear(v.params)
		v.in = openapi3filter.RequestValidationInput{}
		validations.Put(v)
	}()
	for i, name := range c.ParamNames() {
		v.params[name] = c.ParamValues()[i]
	}
	v.in = *in
	v.in.PathParams = v.params
	if err := openapi3filter.ValidateRequest(in.Request.Context(), &v.in); err != nil {
		return validationProblem(err)
	}
	return nil
}

// readJSONBody enforces the JSON body limit, the media type and strict JSON
// (strictjson.go) before the validator sees the body (encoding/json would
// accept invalid UTF-8, duplicate member names, lone surrogates and trailing
// data).
func (h *Handler) readJSONBody(c echo.Context, op *operation) error {
	req := c.Request()
	if req.ContentLength > h.maxJSON {
		// Declared too large: answered at once, without waiting for a body
		// that may never come.
		return apperr.TooLarge(h.maxJSON)
	}
	var data []byte
	if req.Body != nil {
		var err error
		// The same per-read deadline and minimum rate as an upload: a JSON
		// body that stalls is a 408, not a connection held for ever.
		body := io.NopCloser(h.boundBody(c.Response(), req.Body)) // net/http closes req.Body
		data, err = io.ReadAll(http.MaxBytesReader(c.Response(), body, h.maxJSON))
		if err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				return apperr.TooLarge(h.maxJSON)
			}
			if errors.Is(err, apperr.ErrRequestTimeout) {
				return err
			}
			// A malformed chunked encoding, or a body shorter than its
			// Content-Length: the client's fault, never a 500.
			return apperr.InvalidAt("body", "the body could not be read: %s", err)
		}
	}
	if len(data) == 0 {
		return apperr.InvalidAt("body", "a JSON body is required")
	}
	ct := req.Header.Get(echo.HeaderContentType)
	mt, _, err := mime.ParseMediaType(ct)
	if ct == "" || err != nil || op.route.Operation.RequestBody.Value.Content.Get(mt) == nil {
		want := make([]string, 0, 1)
		for k := range op.route.Operation.RequestBody.Value.Content {
			want = append(want, k)
		}
		sort.Strings(want)
		return apperr.UnsupportedMedia("Content-Type must be " + strings.Join(want, " or ") + ".")
	}
	if err := checkJSONCharset(mt, ct); err != nil {
		return err
	}
	if err := checkJSON(data); err != nil {
		return apperr.InvalidAt(err.(*jsonError).Location(), "%s", err.(*jsonError).msg)
	}
	req.Body = io.NopCloser(bytes.NewReader(data))
	req.ContentLength = int64(len(data))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }
	return nil
}

// validationProblem turns kin-openapi's errors into a 400 (or 415) listing
// each problem with a location such as body.permissions[1].
func validationProblem(err error) error {
	var fields []apperr.FieldError
	var media error
	var walk func(error)
	walk = func(err error) {
		if me, ok := err.(openapi3.MultiError); ok {
			for _, e := range me {
				walk(e)
			}
			return
		}
		re, ok := err.(*openapi3filter.RequestError)
		if !ok {
			fields = append(fields, apperr.FieldError{Location: "request", Message: err.Error()})
			return
		}
		switch {
		case re.Parameter != nil:
			loc := re.Parameter.In + "." + re.Parameter.Name
			fields = append(fields, schemaFields(loc, re.Err, paramMessage(re))...)
		case re.RequestBody != nil:
			if re.Err == nil {
				// The only body error without a cause: the Content-Type is
				// not among the operation's (readJSONBody answers most
				// such requests before the validator does).
				media = apperr.UnsupportedMedia("The Content-Type is not accepted by this operation.")
				return
			}
			if errors.Is(re.Err, openapi3filter.ErrInvalidRequired) {
				fields = append(fields, apperr.FieldError{Location: "body", Message: "a body is required"})
				return
			}
			fields = append(fields, schemaFields("body", re.Err, "the body does not match the contract")...)
		default:
			fields = append(fields, apperr.FieldError{Location: "request", Message: re.Error()})
		}
	}
	walk(err)
	if media != nil {
		return media
	}
	return apperr.InvalidFields(fields)
}

func paramMessage(re *openapi3filter.RequestError) string {
	if errors.Is(re.Err, openapi3filter.ErrInvalidRequired) {
		return "is required"
	}
	if re.Reason != "" {
		return re.Reason
	}
	return "is invalid"
}

// schemaFields flattens schema errors under a location prefix.
func schemaFields(prefix string, err error, fallback string) []apperr.FieldError {
	if me, ok := err.(openapi3.MultiError); ok {
		var out []apperr.FieldError
		for _, e := range me {
			out = append(out, schemaFields(prefix, e, fallback)...)
		}
		return out
	}
	var se *openapi3.SchemaError
	if !errors.As(err, &se) {
		msg := fallback
		if err != nil && !errors.Is(err, openapi3filter.ErrInvalidRequired) {
			msg = err.Error()
		}
		return []apperr.FieldError{{Location: prefix, Message: msg}}
	}
	loc := prefix + pointerPath(se.JSONPointer())
	msg := se.Reason
	switch {
	case se.SchemaField == "enum" && isPermissionEnum(se.Schema):
		msg = fmt.Sprintf("unknown permission %q", fmt.Sprint(se.Value))
	case se.SchemaField == "uniqueItems":
		if i, v, ok := firstDuplicate(se.Value); ok {
			loc += "[" + strconv.Itoa(i) + "]"
			msg = fmt.Sprintf("duplicate value %q", v)
		}
	case se.SchemaField == "required": // the pointer ends with the member
		msg = "is required"
	case se.SchemaField == "type" && isNumber(se.Value):
		// A number the validator cannot hold as a float64 (1e400): its
		// message would name the library's types.
		msg = "is a number out of range"
	case se.SchemaField == "pattern" && se.Schema != nil:
		// The contract says in words what a pattern refuses, where the
		// pattern itself would not tell a reader.
		if m, ok := se.Schema.Extensions["x-pattern-message"].(string); ok {
			msg = m
		}
	case se.SchemaField == "properties": // a member the schema does not know
		// kin-openapi reports each unknown member in an error of its own,
		// naming it in the reason; the error carries the whole object, so
		// listing the object's unknown members here would report each of
		// them once per error (n² entries for n members).
		if k, ok := unsupportedMember(se.Reason); ok {
			return []apperr.FieldError{{Location: loc + "." + k, Message: "is not a known field"}}
		}
	}
	return []apperr.FieldError{{Location: loc, Message: msg}}
}

// unsupportedMember is the member named by kin-openapi's reason for an
// unknown member: property "name" is unsupported.
func unsupportedMember(reason string) (string, bool) {
	q, ok := strings.CutPrefix(reason, "property ")
	if !ok {
		return "", false
	}
	if q, ok = strings.CutSuffix(q, " is unsupported"); !ok {
		return "", false
	}
	k, err := strconv.Unquote(q)
	return k, err == nil
}

// singleValues refuses a query or header parameter given more than once
// when the contract declares one value (not an array): the validator looks
// at the first value only, and the generated binder would refuse it with a
// message of its own.
func singleValues(op *operation, req *http.Request, query url.Values) error {
	var fields []apperr.FieldError
	check := func(p *openapi3.Parameter) {
		if p == nil || p.Schema == nil || p.Schema.Value == nil || p.Schema.Value.Type.Is("array") {
			return
		}
		switch p.In {
		case openapi3.ParameterInQuery:
			if len(query[p.Name]) > 1 {
				fields = append(fields, apperr.FieldError{Location: "query." + p.Name, Message: "is given more than once"})
			}
		case openapi3.ParameterInHeader:
			if len(req.Header.Values(p.Name)) > 1 {
				fields = append(fields, apperr.FieldError{Location: "header." + p.Name, Message: "is given more than once"})
			}
		}
	}
	for _, p := range op.route.PathItem.Parameters {
		check(p.Value)
	}
	for _, p := range op.route.Operation.Parameters {
		check(p.Value)
	}
	if len(fields) > 0 {
		return apperr.InvalidFields(fields)
	}
	return nil
}

// isNumber reports whether a decoded JSON value is a number.
func isNumber(v any) bool {
	_, ok := v.(json.Number)
	return ok
}

// pointerPath renders a JSON pointer as .name and [index] steps.
func pointerPath(ptr []string) string {
	var b strings.Builder
	for _, p := range ptr {
		if _, err := strconv.Atoi(p); err == nil {
			b.WriteString("[" + p + "]")
		} else {
			b.WriteString("." + p)
		}
	}
	return b.String()
}

func isPermissionEnum(s *openapi3.Schema) bool {
	for _, v := range s.Enum {
		if v == "ADMINISTRATOR" {
			return true
		}
	}
	return false
}

func firstDuplicate(v any) (int, string, bool) {
	list, ok := v.([]any)
	if !ok {
		return 0, "", false
	}
	seen := map[string]bool{}
	for i, x := range list {
		k := fmt.Sprint(x)
		if seen[k] {
			return i, k, true
		}
		seen[k] = true
	}
	return 0, "", false
}

// formatValidators check the email and uri formats, which kin-openapi leaves
// unchecked by default.
var formatValidators = openapi3.WithStringFormatValidators(map[string]openapi3.StringFormatValidator{
	"email": openapi3.NewCallbackValidator(func(s string) error {
		if !emailPattern.MatchString(s) {
			return errors.New("is not an email address")
		}
		return nil
	}),
	"uri": openapi3.NewCallbackValidator(func(s string) error {
		if strings.ContainsAny(s, " \t\r\n") || !uriPattern.MatchString(s) {
			return errors.New("is not an absolute URI")
		}
		return nil
	}),
	"date-time": openapi3.NewCallbackValidator(func(s string) error {
		if _, err := jsonfield.ParseTime(s); err != nil {
			return errors.New("is not an RFC 3339 date-time (hours 00 to 23, offsets within ±23:59)")
		}
		return nil
	}),
})

var (
	emailPattern = regexp.MustCompile(`^[A-Za-z0-9.!#$%&'*+/=?^_` + "`" + `{|}~-]+@[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)+$`)
	uriPattern   = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*://[^/?#\s]+`)
)

// legacy marks a deprecated operation's answers, errors included, with
// Deprecation (RFC 9745) and its successor's Link (in which legacyUserLink
// names the user, once the body is read).
func (h *Handler) legacy(op *operation) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			hd := c.Response().Header()
			hd.Set("Deprecation", legacyDeprecation())
			hd.Set("Link", successorLink(op.legacy, c.Param("roleID"), ""))
			return next(c)
		}
	}
}

// legacyUserLink completes the successor Link of add_user and remove_user,
// whose successor's path names the user of the body: it runs once the
// validator has read the body, so that every answer from there on, errors
// included, names the user (before, the Link holds {userID}).
func (h *Handler) legacyUserLink(op *operation) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			// The validator leaves the value it validated on the body, as
			// the generated code binds it.
			vb, ok := c.Request().Body.(interface{ ValidatedValue() any })
			var ref api.UserRef
			if ok && runtime.BindJSONValue(vb.ValidatedValue(), &ref) == nil && ref.UserId != "" {
				if roleID, err := pathParam(c, "roleID"); err == nil {
					c.Response().Header().Set("Link", successorLink(op.legacy, roleID, ref.UserId))
				}
			}
			return next(c)
		}
	}
}

// legacySince is when the legacy role operations were deprecated.
var legacySince = time.Date(2026, time.January, 1, 0, 0, 0, 0, time.UTC)

func legacyDeprecation() string { return fmt.Sprintf("@%d", legacySince.Unix()) }

// successorLink names a legacy operation's successor; userID is filled in
// once the body is read (add_user and remove_user carry it there).
func successorLink(successor, roleID, userID string) string {
	if userID == "" {
		userID = "%7BuserID%7D"
	}
	u := strings.NewReplacer("{roleID}", roleID, "{userID}", userID).Replace(successor)
	return "</api" + u + `>; rel="successor-version"`
}

// checkAuditReason refuses what the schema cannot: an X-Audit-Reason that is
// not UTF-8 text (PostgreSQL would refuse to store it: a 500), or holds a
// character the rule of names refuses where the pattern cannot tell.
func checkAuditReason(v string) error {
	if msg := namerule.CheckText(v); msg != "" {
		return apperr.InvalidAt("header.X-Audit-Reason", "%s", msg)
	}
	return nil
}
