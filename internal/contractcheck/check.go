// Package contractcheck checks answers against the contract from outside:
// every answer under /api must have a status the operation declares, send
// only headers that response declares, carry a body matching the declared
// schema, and be application/problem+json when it is an error. A path that
// matches no operation must be a 404 problem, a method the path does not
// take a 405 problem whose Allow lists the methods it does.
//
// internal/testenv wraps every test server with [Checker.Wrap], so that an
// undeclared answer fails the test that caused it.
package contractcheck

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
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
)

// Base is the prefix of the contract's paths (its only server).
const Base = "/api"

// frameHeaders describe the message rather than the resource; HTTP itself
// defines them for every answer, so the contract does not repeat them.
// OpenAPI ignores a declared Content-Type header (the media type is the
// content's key).
var frameHeaders = map[string]bool{
	"Content-Type": true, "Content-Length": true, "Date": true, "Transfer-Encoding": true,
	"Connection": true, "Keep-Alive": true, "Trailer": true,
}

// corsHeader reports the headers of CORS (the Fetch standard), sent only to
// the browser origins an operator allows; the contract's description says
// so once instead of on every answer.
func corsHeader(name string, values []string) bool {
	if strings.HasPrefix(name, "Access-Control-") {
		return true
	}
	return name == "Vary" && slices.Equal(values, []string{"Origin"})
}

// Checker holds the contract, parsed once.
type Checker struct {
	doc   *openapi3.T
	paths []*pathTemplate
	opts  *openapi3filter.Options
}

type pathTemplate struct {
	path    string // as in the contract, e.g. /roles/{roleID}
	re      *regexp.Regexp
	names   []string
	item    *openapi3.PathItem
	literal int // characters outside parameters: more is more specific
}

var paramRE = regexp.MustCompile(`\{[^/{}]+\}`)

// New prepares a checker for doc, which must be loaded and valid.
func New(doc *openapi3.T, schemaOpts ...openapi3.SchemaValidationOption) (*Checker, error) {
	c := &Checker{doc: doc, opts: &openapi3filter.Options{
		IncludeResponseStatus: true, MultiError: true, SchemaValidationOptions: schemaOpts,
	}}
	for path, item := range doc.Paths.Map() {
		p := &pathTemplate{path: path, item: item}
		var re strings.Builder
		re.WriteString("^" + regexp.QuoteMeta(Base))
		last := 0
		for _, loc := range paramRE.FindAllStringIndex(path, -1) {
			re.WriteString(regexp.QuoteMeta(path[last:loc[0]]))
			re.WriteString("([^/]+)")
			p.names = append(p.names, path[loc[0]+1:loc[1]-1])
			p.literal += loc[0] - last
			last = loc[1]
		}
		re.WriteString(regexp.QuoteMeta(path[last:]) + "$")
		p.literal += len(path) - last
		var err error
		if p.re, err = regexp.Compile(re.String()); err != nil {
			return nil, fmt.Errorf("path %s: %w", path, err)
		}
		c.paths = append(c.paths, p)
	}
	sort.Slice(c.paths, func(i, j int) bool {
		if c.paths[i].literal != c.paths[j].literal {
			return c.paths[i].literal > c.paths[j].literal
		}
		return c.paths[i].path < c.paths[j].path
	})
	for _, name := range []string{"NotFound", "MethodNotAllowed"} {
		if doc.Components.Responses[name] == nil {
			return nil, fmt.Errorf("the contract has no components/responses/%s", name)
		}
	}
	if doc.Components.Schemas["Problem"] == nil || doc.Components.Schemas["Event"] == nil {
		return nil, errors.New("the contract has no Problem or Event schema")
	}
	return c, nil
}

// Answer is what the server sent.
type Answer struct {
	Status int
	Header http.Header
	Body   []byte // nil when not kept (binary bodies, HEAD)
	// Truncated is set when only the first part of the body was kept.
	Truncated bool
}

// Covered reports whether the request is under the contract's base path.
func Covered(r *http.Request) bool {
	p := r.URL.EscapedPath()
	return p == Base || strings.HasPrefix(p, Base+"/")
}

// Check returns what in the answer the contract does not declare, one
// sentence each; none when it conforms. Requests outside the base path are
// not the contract's and always conform.
func (c *Checker) Check(r *http.Request, a Answer) []string {
	if !Covered(r) {
		return nil
	}
	var out []string
	bad := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	tpl, params := c.match(r.URL.EscapedPath())
	switch {
	case tpl == nil:
		if a.Status != http.StatusNotFound {
			bad("no operation's path matches, so the answer must be 404, not %d", a.Status)
		}
		c.checkResponse(r, a, "(no path)", c.doc.Components.Responses["NotFound"].Value, nil, bad)
		return out
	case r.Method == http.MethodOptions:
		// OPTIONS is HTTP's own (RFC 9110 §9.3.7) and CORS preflights: the
		// contract's description says that it answers 204 with Allow.
		if a.Status != http.StatusNoContent {
			bad("OPTIONS must answer 204, not %d", a.Status)
		}
		c.checkAllow(tpl, a, bad)
		return out
	}
	op := tpl.item.GetOperation(r.Method)
	if op == nil {
		if a.Status != http.StatusMethodNotAllowed {
			bad("%s does not take %s, so the answer must be 405, not %d", tpl.path, r.Method, a.Status)
		}
		c.checkAllow(tpl, a, bad)
		c.checkResponse(r, a, "(no operation)", c.doc.Components.Responses["MethodNotAllowed"].Value, nil, bad)
		return out
	}
	ref := op.Responses.Status(a.Status)
	if ref == nil || ref.Value == nil {
		bad("status %d is not declared for %s (declared: %s)", a.Status, op.OperationID, strings.Join(op.Responses.Keys(), ", "))
		return out
	}
	route := &routers.Route{Spec: c.doc, Path: tpl.path, PathItem: tpl.item, Method: r.Method, Operation: op}
	c.checkResponse(r, a, op.OperationID, ref.Value, &openapi3filter.RequestValidationInput{Request: r, PathParams: params, Route: route}, bad)
	return out
}

// match finds the path template of an escaped request path, and its
// parameters.
func (c *Checker) match(escaped string) (*pathTemplate, map[string]string) {
	for _, p := range c.paths {
		m := p.re.FindStringSubmatch(escaped)
		if m == nil {
			continue
		}
		params := make(map[string]string, len(p.names))
		for i, name := range p.names {
			v, err := url.PathUnescape(m[i+1])
			if err != nil {
				v = m[i+1]
			}
			params[name] = v
		}
		return p, params
	}
	return nil, nil
}

// checkAllow: a 405 (and an OPTIONS answer) lists exactly the path's methods.
func (c *Checker) checkAllow(tpl *pathTemplate, a Answer, bad func(string, ...any)) {
	want := []string{http.MethodOptions}
	for m := range tpl.item.Operations() {
		want = append(want, m)
	}
	sort.Strings(want)
	var got []string
	for _, v := range a.Header.Values("Allow") {
		for _, m := range strings.Split(v, ",") {
			if m = strings.TrimSpace(m); m != "" {
				got = append(got, m)
			}
		}
	}
	sort.Strings(got)
	if !slices.Equal(got, want) {
		bad("Allow is %q, want the methods of %s: %s", strings.Join(got, ", "), tpl.path, strings.Join(want, ", "))
	}
}

// checkResponse checks an answer against the response the contract declares
// for it: the headers sent, their values, the media type and the body.
func (c *Checker) checkResponse(r *http.Request, a Answer, opID string, resp *openapi3.Response, in *openapi3filter.RequestValidationInput, bad func(string, ...any)) {
	declared := map[string]*openapi3.HeaderRef{}
	for name, h := range resp.Headers {
		declared[http.CanonicalHeaderKey(name)] = h
	}
	var undeclared []string
	for name, values := range a.Header {
		name = http.CanonicalHeaderKey(name)
		if frameHeaders[name] || corsHeader(name, values) {
			continue
		}
		h, ok := declared[name]
		if !ok {
			undeclared = append(undeclared, name)
			continue
		}
		if err := checkHeaderValue(h.Value, values); err != nil {
			bad("%s %d: header %s %q: %v", opID, a.Status, name, values, err)
		}
	}
	if len(undeclared) > 0 {
		sort.Strings(undeclared)
		bad("%s %d sends headers the contract does not declare for it: %s", opID, a.Status, strings.Join(undeclared, ", "))
	}
	for name, h := range declared {
		if h.Value.Required && a.Header.Get(name) == "" {
			bad("%s %d: the required header %s is missing", opID, a.Status, name)
		}
	}

	ct := a.Header.Get("Content-Type")
	mt, _, _ := mime.ParseMediaType(ct)
	if a.Status >= 400 && mt != "application/problem+json" {
		bad("%s %d: an error must be application/problem+json, not %q", opID, a.Status, ct)
	}
	head := r.Method == http.MethodHead
	if len(resp.Content) == 0 {
		if !head && len(a.Body) > 0 {
			bad("%s %d declares no body but %d bytes were sent", opID, a.Status, len(a.Body))
		}
		if !head && ct != "" && a.Status != http.StatusNotModified {
			bad("%s %d declares no body but sends Content-Type %q", opID, a.Status, ct)
		}
		return
	}
	media := resp.Content.Get(ct)
	if media == nil {
		bad("%s %d: Content-Type %q is not declared (declared: %s)", opID, a.Status, ct, strings.Join(contentKeys(resp.Content), ", "))
		return
	}
	if head || a.Truncated || media.Schema == nil {
		return
	}
	schema := media.Schema.Value
	switch {
	case schema.Type.Is("string") && schema.Format == "binary":
		return // raw bytes: any
	case mt == "text/event-stream":
		c.checkEventStream(opID, a.Body, bad)
		return
	}
	if in == nil { // an answer outside any operation: check the body alone
		var v any
		if err := json.Unmarshal(a.Body, &v); err != nil {
			bad("%s %d: the body is not JSON: %v", opID, a.Status, err)
			return
		}
		if err := schema.VisitJSON(v, append(c.opts.SchemaValidationOptions, openapi3.MultiErrors(), openapi3.VisitAsResponse())...); err != nil {
			bad("%s %d: the body does not match the schema: %v", opID, a.Status, err)
		}
	} else {
		vin := *in
		if head {
			// kin-openapi skips HEAD; its body is empty anyway.
			return
		}
		err := openapi3filter.ValidateResponse(context.Background(), &openapi3filter.ResponseValidationInput{
			RequestValidationInput: &vin, Status: a.Status, Header: a.Header, Body: io.NopCloser(bytes.NewReader(a.Body)), Options: c.opts,
		})
		if err != nil {
			bad("%s %d: %v", opID, a.Status, err)
		}
	}
	if a.Status >= 400 {
		var p struct {
			Status int    `json:"status"`
			Code   string `json:"code"`
			Type   string `json:"type"`
		}
		if json.Unmarshal(a.Body, &p) == nil && (p.Status != a.Status || p.Type != "/problems/"+p.Code) {
			bad("%s %d: the problem says status %d, type %q, code %q", opID, a.Status, p.Status, p.Type, p.Code)
		}
	}
}

func contentKeys(c openapi3.Content) []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// checkHeaderValue checks a header's value against its declared schema
// (integers and strings: the contract declares no other header types).
func checkHeaderValue(h *openapi3.Header, values []string) error {
	if h == nil || h.Schema == nil || h.Schema.Value == nil {
		return nil
	}
	if len(values) != 1 {
		return fmt.Errorf("sent %d times", len(values))
	}
	s := h.Schema.Value
	var v any = values[0]
	if s.Type.Is("integer") {
		n, err := strconv.ParseInt(values[0], 10, 64)
		if err != nil {
			return errors.New("is not an integer")
		}
		v = float64(n)
	}
	return s.VisitJSON(v)
}

// checkEventStream checks the Server-Sent Events received: each event's
// data is an Event whose seq and type are the message's id and event.
func (c *Checker) checkEventStream(opID string, body []byte, bad func(string, ...any)) {
	event := c.doc.Components.Schemas["Event"].Value
	blocks := strings.Split(string(body), "\n\n")
	blocks = blocks[:len(blocks)-1] // the last is empty, or cut short by the end of the stream
	for _, block := range blocks {
		var id, typ, data string
		for _, line := range strings.Split(block, "\n") {
			field, value, _ := strings.Cut(line, ":")
			value = strings.TrimPrefix(value, " ")
			switch field {
			case "id":
				id = value
			case "event":
				typ = value
			case "data":
				data += value
			case "", "retry":
			default:
				bad("%s: unknown event-stream field %q", opID, field)
			}
		}
		if data == "" {
			continue
		}
		var v map[string]any
		if err := json.Unmarshal([]byte(data), &v); err != nil {
			bad("%s: event data is not JSON: %v", opID, err)
			continue
		}
		if err := event.VisitJSON(v, openapi3.MultiErrors(), openapi3.VisitAsResponse()); err != nil {
			bad("%s: event %s does not match Event: %v", opID, id, err)
		}
		if seq, _ := v["seq"].(float64); strconv.FormatInt(int64(seq), 10) != id || v["type"] != typ {
			bad("%s: event id %q / type %q differ from its data (seq %v, type %v)", opID, id, typ, v["seq"], v["type"])
		}
	}
}
