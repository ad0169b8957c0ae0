package openapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"go.yaml.in/yaml/v3"

	"github.com/guildhall/guildhall/openapi"
)

// The contract's own style, checked on the embedded bytes the server
// validates against and serves: every operation has a lowerCamel
// operationId, tags, a summary, a description that states who may call it,
// and 4xx answers with the shared Problem; security is declared at the root
// (public operations say `security: []`); request bodies are closed; every
// schema has an example, and every example validates.

const problemRef = "#/components/schemas/Problem"

// load parses and validates the contract, examples included.
func load(t *testing.T) *openapi3.T {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(openapi.YAML)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	if err := doc.Validate(context.Background(), openapi3.EnableExamplesValidation()); err != nil {
		t.Fatalf("validate (with examples): %v", err)
	}
	return doc
}

// raw is the contract as plain YAML, for what kin-openapi does not keep
// (an `example: null` reads back as no example).
func raw(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := yaml.Unmarshal(openapi.YAML, &m); err != nil {
		t.Fatalf("yaml: %v", err)
	}
	return m
}

func dig(m map[string]any, keys ...string) map[string]any {
	for _, k := range keys {
		next, _ := m[k].(map[string]any)
		m = next
	}
	return m
}

type op struct {
	method, path string
	*openapi3.Operation
}

func (o op) String() string { return o.method + " " + o.path }

// operations lists every operation, sorted by path then method.
func operations(doc *openapi3.T) []op {
	var out []op
	for path, item := range doc.Paths.Map() {
		for method, o := range item.Operations() {
			out = append(out, op{method, path, o})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].path != out[j].path {
			return out[i].path < out[j].path
		}
		return out[i].method < out[j].method
	})
	return out
}

// requirement is an operation's x-required-permissions.
type requirement struct {
	Permissions []string
	Scope, Rule string
}

func requirementOf(t *testing.T, o op) requirement {
	t.Helper()
	x, ok := o.Extensions["x-required-permissions"].(map[string]any)
	if !ok {
		t.Fatalf("%s: no x-required-permissions", o)
	}
	var r requirement
	r.Scope, _ = x["scope"].(string)
	r.Rule, _ = x["rule"].(string)
	list, ok := x["permissions"].([]any)
	if !ok {
		t.Fatalf("%s: x-required-permissions.permissions is not a list", o)
	}
	for _, p := range list {
		r.Permissions = append(r.Permissions, fmt.Sprint(p))
	}
	return r
}

func TestContractValidatesWithExamples(t *testing.T) {
	t.Parallel()
	doc := load(t)
	if got := len(doc.Servers); got != 1 || doc.Servers[0].URL != "/api" {
		t.Errorf("servers must be exactly the relative /api (absolute URLs break validation for other hosts), got %d: %v", got, doc.Servers)
	}
	if len(doc.Security) == 0 {
		t.Error("security must be declared at the root")
	}
	if n := len(operations(doc)); n < 40 {
		t.Errorf("only %d operations: is the contract truncated?", n)
	}
}

var lowerCamel = regexp.MustCompile(`^[a-z][a-zA-Z0-9]*$`)

func TestEveryOperationIsDocumented(t *testing.T) {
	t.Parallel()
	doc := load(t)
	tags := map[string]bool{}
	for _, tag := range doc.Tags {
		tags[tag.Name] = true
	}
	catalog := map[string]bool{}
	for _, p := range doc.Components.Schemas["PermissionName"].Value.Enum {
		catalog[fmt.Sprint(p)] = true
	}
	ids := map[string]string{}
	for _, o := range operations(doc) {
		t.Run(o.String(), func(t *testing.T) {
			if !lowerCamel.MatchString(o.OperationID) {
				t.Errorf("operationId %q is not lowerCamel", o.OperationID)
			}
			if prev, dup := ids[o.OperationID]; dup {
				t.Errorf("operationId %q is also %s", o.OperationID, prev)
			}
			ids[o.OperationID] = o.String()
			if len(o.Tags) == 0 {
				t.Error("no tags")
			}
			for _, tag := range o.Tags {
				if !tags[tag] {
					t.Errorf("tag %q is not declared at the root", tag)
				}
			}
			if strings.TrimSpace(o.Summary) == "" {
				t.Error("no summary")
			}
			if !strings.Contains(o.Description, "**Permission:**") {
				t.Errorf("the description does not state the required permission (**Permission:**): %q", o.Description)
			}
			req := requirementOf(t, o)
			for _, p := range req.Permissions {
				if !catalog[p] {
					t.Errorf("x-required-permissions names %q, not a permission of the catalog", p)
				}
				if !strings.Contains(o.Description, "`"+p+"`") {
					t.Errorf("x-required-permissions needs %s but the description does not name it", p)
				}
			}
			if !slices.Contains([]string{"public", "global", "channel"}, req.Scope) {
				t.Errorf("x-required-permissions.scope %q", req.Scope)
			}
			if req.Scope == "channel" && !strings.Contains(o.path, "{channelID}") {
				t.Error("channel scope on a path without {channelID}")
			}
		})
	}
}

func TestSecurityIsExplicit(t *testing.T) {
	t.Parallel()
	doc := load(t)
	for _, o := range operations(doc) {
		public := requirementOf(t, o).Scope == "public"
		explicitNone := o.Security != nil && len(*o.Security) == 0
		switch {
		case public && !explicitNone:
			t.Errorf("%s is public but does not say `security: []`", o)
		case !public && explicitNone:
			t.Errorf("%s says `security: []` but x-required-permissions.scope is not public", o)
		case public && !strings.Contains(o.Description, "no token is needed"):
			t.Errorf("%s is public but its description does not say no token is needed", o)
		}
	}
}

// TestErrorsUseTheSharedProblem: every error answer an operation can give is
// documented, with the shared Problem as its body.
func TestErrorsUseTheSharedProblem(t *testing.T) {
	t.Parallel()
	doc := load(t)
	for _, o := range operations(doc) {
		t.Run(o.String(), func(t *testing.T) {
			req := requirementOf(t, o)
			public := req.Scope == "public"
			var hasParams, ifMatch, pathParams bool
			params := append(append(openapi3.Parameters{}, doc.Paths.Value(o.path).Parameters...), o.Parameters...)
			for _, p := range params {
				hasParams = true
				ifMatch = ifMatch || p.Value.Name == "If-Match"
				pathParams = pathParams || p.Value.In == "path"
			}
			body := o.RequestBody != nil
			need := map[int]bool{http.StatusTooManyRequests: true, http.StatusInternalServerError: true}
			need[http.StatusUnauthorized] = !public
			need[http.StatusBadRequest] = hasParams || body
			// Create operations take the new resource's ID in the path: nothing to miss.
			need[http.StatusNotFound] = pathParams && !strings.HasSuffix(o.path, "/create")
			need[http.StatusPreconditionFailed] = ifMatch
			need[http.StatusRequestEntityTooLarge] = body
			need[http.StatusUnsupportedMediaType] = body
			need[http.StatusForbidden] = len(req.Permissions) > 0 || req.Rule == "self_or_owner"
			for status, needed := range need {
				if needed && o.Responses.Status(status) == nil {
					t.Errorf("%d is not documented", status)
				}
			}

			problems := 0
			for code, ref := range o.Responses.Map() {
				status, err := strconv.Atoi(code)
				if err != nil {
					t.Errorf("response %q: use explicit status codes", code)
					continue
				}
				if status < 400 {
					continue
				}
				if o.method == http.MethodHead {
					// A HEAD answer has no body, so it declares none; its
					// Content-Type is still application/problem+json.
					if ref.Value.Content != nil {
						t.Errorf("HEAD %d declares a body", status)
					}
					continue
				}
				mt := ref.Value.Content.Get("application/problem+json")
				if mt == nil || mt.Schema == nil || mt.Schema.Ref != problemRef || len(ref.Value.Content) != 1 {
					t.Errorf("%d is not application/problem+json with the shared Problem (%s)", status, problemRef)
					continue
				}
				problems++
			}
			if o.method != http.MethodHead && problems == 0 {
				t.Error("no 4xx answer with the shared Problem")
			}
			if o.method == http.MethodHead {
				// HEAD answers what GET would, so it documents the same errors.
				get := doc.Paths.Value(o.path).Get
				if get == nil {
					t.Fatal("HEAD without GET")
				}
				for _, code := range get.Responses.Keys() {
					if s, _ := strconv.Atoi(code); s >= 400 && s != http.StatusRequestedRangeNotSatisfiable && o.Responses.Value(code) == nil {
						t.Errorf("GET documents %s but HEAD does not", code)
					}
				}
			}
		})
	}
}

// TestDeprecatedOperationsSayWhatReplacesThem: deprecated operations carry
// Deprecation and Link on every answer, errors too.
func TestDeprecatedOperationsSayWhatReplacesThem(t *testing.T) {
	t.Parallel()
	doc := load(t)
	n := 0
	for _, o := range operations(doc) {
		if !o.Deprecated {
			continue
		}
		n++
		for code, ref := range o.Responses.Map() {
			if code == "405" {
				continue // the path's answer to a method it does not take, not the operation's
			}
			for _, h := range []string{"Deprecation", "Link"} {
				if ref.Value.Headers[h] == nil {
					t.Errorf("%s %s: no %s header", o, code, h)
				}
			}
		}
		if !strings.Contains(o.Description, "Deprecated: use") {
			t.Errorf("%s: the description does not name its successor", o)
		}
	}
	if n != 4 {
		t.Errorf("%d deprecated operations, want the 4 legacy role operations", n)
	}
}

func TestRequestBodiesAreClosed(t *testing.T) {
	t.Parallel()
	doc := load(t)
	for _, o := range operations(doc) {
		if o.RequestBody == nil {
			continue
		}
		if !o.RequestBody.Value.Required {
			t.Errorf("%s: the request body is not required", o)
		}
		for mediaType, mt := range o.RequestBody.Value.Content {
			s := mt.Schema.Value
			if s.Type.Is("string") && s.Format == "binary" {
				continue // raw bytes (attachment upload)
			}
			if !s.Type.Is("object") {
				t.Errorf("%s %s: the body is not an object", o, mediaType)
				continue
			}
			if ap := s.AdditionalProperties; ap.Has == nil || *ap.Has {
				t.Errorf("%s %s: the body schema does not set additionalProperties: false", o, mediaType)
			}
		}
	}
}

// TestEverythingHasAnExample: every component schema and header, and every
// JSON body of a request or an answer, has an example (all of them validate:
// see load).
func TestEverythingHasAnExample(t *testing.T) {
	t.Parallel()
	doc := load(t)
	rawSchemas := dig(raw(t), "components", "schemas")
	hasExample := func(ref *openapi3.SchemaRef) bool {
		if ref.Ref != "" {
			_, ok := dig(rawSchemas, strings.TrimPrefix(ref.Ref, "#/components/schemas/"))["example"]
			return ok
		}
		return ref.Value.Example != nil
	}
	for name := range doc.Components.Schemas {
		if _, ok := dig(rawSchemas, name)["example"]; !ok {
			t.Errorf("schema %s has no example", name)
		}
	}
	for name, h := range doc.Components.Headers {
		if h.Value.Example == nil && len(h.Value.Examples) == 0 {
			t.Errorf("header %s has no example", name)
		}
	}
	check := func(where string, content openapi3.Content) {
		for mediaType, mt := range content {
			if mt.Schema != nil && mt.Schema.Value.Format == "binary" {
				continue
			}
			if mt.Example == nil && len(mt.Examples) == 0 && (mt.Schema == nil || !hasExample(mt.Schema)) {
				t.Errorf("%s %s has no example", where, mediaType)
			}
		}
	}
	for _, o := range operations(doc) {
		if o.RequestBody != nil {
			check(o.String()+" request", o.RequestBody.Value.Content)
		}
		for code, ref := range o.Responses.Map() {
			check(o.String()+" "+code, ref.Value.Content)
		}
	}
}

// TestRateLimitHeadersSayWhatTheServerSends: RateLimit-Limit is the burst,
// refilled at the configured rate per second (internal/httpapi/ratelimit.go).
func TestRateLimitHeadersSayWhatTheServerSends(t *testing.T) {
	t.Parallel()
	doc := load(t)
	limit := doc.Components.Headers["RateLimitLimit"]
	if limit == nil || !strings.Contains(limit.Value.Description, "burst") || !strings.Contains(limit.Value.Description, "per second") {
		t.Error("RateLimit-Limit must describe the burst refilled per second")
	}
}

// TestEveryAnswerDeclaresItsHeaders: the headers the server sends on every
// answer (X-Request-Id, and the RateLimit-* headers while rate limiting is
// on) are declared on every response, WWW-Authenticate on every 401 and
// Retry-After on every 429 (docs/design.md §12 "Every header").
func TestEveryAnswerDeclaresItsHeaders(t *testing.T) {
	t.Parallel()
	doc := load(t)
	always := []string{"X-Request-Id", "RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"}
	for _, o := range operations(doc) {
		for code, ref := range o.Responses.Map() {
			want := always
			switch code {
			case "401":
				want = append(want, "WWW-Authenticate")
			case "405":
				want = append(want, "Allow")
			case "429":
				want = append(want, "Retry-After")
			}
			for _, h := range want {
				if ref.Value.Headers[h] == nil {
					t.Errorf("%s %s does not declare %s", o, code, h)
				}
			}
		}
	}
}

// TestEveryPathDeclaresTheMethodsItRefuses: every operation lists the 405
// its path gives to other methods, with Allow (docs/design.md §3).
func TestEveryPathDeclaresTheMethodsItRefuses(t *testing.T) {
	t.Parallel()
	doc := load(t)
	for _, o := range operations(doc) {
		want := "#/components/responses/MethodNotAllowed"
		if o.method == http.MethodHead {
			want = "#/components/responses/HeadMethodNotAllowed"
		}
		if ref := o.Responses.Value("405"); ref == nil || ref.Ref != want {
			t.Errorf("%s does not declare 405 as %s", o, want)
		}
	}
}

// TestHeadWhereverGet: every GET has a HEAD twin (RFC 9110 §9.3.2) with the
// same parameters, statuses and headers and no body, but for Range and
// If-Range, which RFC 9110 §14.2 defines for GET alone (so HEAD has no 206
// or 416). The server answers the HEAD with the GET's handler, so
// gen/api/server.cfg.yaml leaves every HEAD operation out of the strict
// server; the models and the client (models.cfg.yaml, client.cfg.yaml) leave
// out none.
func TestHeadWhereverGet(t *testing.T) {
	t.Parallel()
	doc := load(t)
	var heads []string
	for _, path := range doc.Paths.InMatchingOrder() {
		item := doc.Paths.Value(path)
		get, head := item.Get, item.Head
		if get == nil {
			if head != nil {
				t.Errorf("HEAD %s has no GET", path)
			}
			continue
		}
		if head == nil {
			t.Errorf("GET %s has no HEAD", path)
			continue
		}
		heads = append(heads, head.OperationID)
		t.Run(head.OperationID, func(t *testing.T) {
			params := func(op *openapi3.Operation, skip ...string) []string {
				var out []string
				for _, p := range op.Parameters {
					if !slices.Contains(skip, p.Value.Name) {
						out = append(out, p.Value.In+":"+p.Value.Name)
					}
				}
				return out
			}
			if g, h := params(get, "Range", "If-Range"), params(head); !slices.Equal(g, h) {
				t.Errorf("parameters %v, GET's are %v", h, g)
			}
			if !slices.Equal(get.Tags, head.Tags) || fmt.Sprint(get.Extensions["x-required-permissions"]) != fmt.Sprint(head.Extensions["x-required-permissions"]) {
				t.Error("tags or x-required-permissions differ from GET's")
			}
			if fmt.Sprint(get.Security) != fmt.Sprint(head.Security) {
				t.Error("security differs from GET's")
			}
			for _, code := range get.Responses.Keys() {
				g, h := get.Responses.Value(code), head.Responses.Value(code)
				if code == "206" || code == "416" {
					if h != nil {
						t.Errorf("HEAD declares %s: HEAD ignores Range", code)
					}
					continue
				}
				if h == nil {
					t.Errorf("GET declares %s, HEAD does not", code)
					continue
				}
				if len(h.Value.Content) != 0 {
					t.Errorf("HEAD %s declares a body", code)
				}
				var gh, hh []string
				for name := range g.Value.Headers {
					gh = append(gh, name)
				}
				for name := range h.Value.Headers {
					hh = append(hh, name)
				}
				sort.Strings(gh)
				sort.Strings(hh)
				if !slices.Equal(gh, hh) {
					t.Errorf("%s: headers %v, GET's are %v", code, hh, gh)
				}
			}
			for _, code := range head.Responses.Keys() {
				if get.Responses.Value(code) == nil {
					t.Errorf("HEAD declares %s, GET does not", code)
				}
			}
		})
	}
	excluded := func(file string) []string {
		cfg, err := os.ReadFile("../gen/api/" + file)
		if err != nil {
			t.Fatal(err)
		}
		var c struct {
			OutputOptions struct {
				Exclude []string `yaml:"exclude-operation-ids"`
			} `yaml:"output-options"`
		}
		if err := yaml.Unmarshal(cfg, &c); err != nil {
			t.Fatal(err)
		}
		return c.OutputOptions.Exclude
	}
	// The server also leaves out the operations internal/httpapi answers
	// with plain Echo handlers; it refuses to start with an operation of
	// the contract unrouted, so only their names are checked here.
	ids := map[string]bool{}
	for _, path := range doc.Paths.InMatchingOrder() {
		for _, op := range doc.Paths.Value(path).Operations() {
			ids[op.OperationID] = true
		}
	}
	server := excluded("server.cfg.yaml")
	for _, id := range heads {
		if !slices.Contains(server, id) {
			t.Errorf("gen/api/server.cfg.yaml does not exclude the HEAD operation %s", id)
		}
	}
	for _, id := range server {
		if !ids[id] {
			t.Errorf("gen/api/server.cfg.yaml excludes %s, which the contract does not have", id)
		}
	}
	for _, file := range []string{"models.cfg.yaml", "client.cfg.yaml"} {
		if ex := excluded(file); len(ex) > 0 {
			t.Errorf("gen/api/%s excludes %v: the models and the client cover every operation", file, ex)
		}
	}
}

// TestLinkLabelsInTheSchema: OpenAPI 3.0 cannot constrain member names, so
// the label rule is a schema under x-property-names (JSON Schema's
// propertyNames) on both link maps; the server checks it (internal/guild,
// and httpapi's TestProfileLinkLabelsFollowTheContract).
func TestLinkLabelsInTheSchema(t *testing.T) {
	t.Parallel()
	doc := load(t)
	for _, name := range []string{"ProfileLinks", "ProfileLinksPatch"} {
		links := doc.Components.Schemas[name].Value.Properties["links"].Value
		x, ok := links.Extensions["x-property-names"].(map[string]any)
		if !ok || x["pattern"] != "^[a-z0-9_-]{1,32}$" || x["type"] != "string" {
			t.Errorf("%s.links: x-property-names is %v, want a string schema with the pattern ^[a-z0-9_-]{1,32}$", name, links.Extensions["x-property-names"])
		}
	}
}

var semver = regexp.MustCompile(`^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$`)

// TestVersion: info.version is semver, the npm package of the TypeScript
// client (gen/ts) carries it, CHANGELOG.md has its section, and the
// openapi-fetch it depends on is the one the contract checks pin. Whether
// the version announces every breaking change is .ci/contract/versions.sh's
// (oasdiff) to say.
func TestVersion(t *testing.T) {
	t.Parallel()
	doc := load(t)
	v := doc.Info.Version
	if !semver.MatchString(v) {
		t.Fatalf("info.version %q is not semver (MAJOR.MINOR.PATCH)", v)
	}
	var pkg struct {
		Name         string            `json:"name"`
		Version      string            `json:"version"`
		Dependencies map[string]string `json:"dependencies"`
	}
	readJSON(t, "../gen/ts/package.json", &pkg)
	if pkg.Version != v {
		t.Errorf("gen/ts/package.json is version %q, the contract %q", pkg.Version, v)
	}
	var tools struct {
		Dependencies map[string]string `json:"dependencies"`
	}
	readJSON(t, "../.ci/contract/package.json", &tools)
	if got, want := pkg.Dependencies["openapi-fetch"], tools.Dependencies["openapi-fetch"]; got == "" || got != want {
		t.Errorf("gen/ts depends on openapi-fetch %q, the contract checks pin %q", got, want)
	}
	changelog, err := os.ReadFile("../CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^## ` + regexp.QuoteMeta(v) + `\b`).Match(changelog) {
		t.Errorf("CHANGELOG.md has no section \"## %s\"", v)
	}
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
