// Package testenv starts real Guildhall instances for tests: the whole stack
// (HTTP factory, validator, handlers, store) on a fresh SQLite file in
// t.TempDir() or a fresh PostgreSQL schema, and calls them over HTTP.
//
// PostgreSQL is used when it answers at GUILDHALL_TEST_DATABASE_URL (default
// postgres://127.0.0.1:5432/test); tests skip it with a message when it does
// not, unless GUILDHALL_TEST_POSTGRES=require (as in CI), which fails them.
package testenv

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/guildhall/guildhall/gen/api"
	"github.com/guildhall/guildhall/internal/app"
	"github.com/guildhall/guildhall/internal/config"
	"github.com/guildhall/guildhall/internal/contractcheck"
	"github.com/guildhall/guildhall/internal/httpapi"
)

// Store kinds.
const (
	SQLite   = "sqlite"
	Postgres = "postgres"
)

// PostgresURL is the server the PostgreSQL tests use.
func PostgresURL() string {
	if u := os.Getenv("GUILDHALL_TEST_DATABASE_URL"); u != "" {
		return u
	}
	return "postgres://127.0.0.1:5432/test?sslmode=disable"
}

var (
	pgOnce sync.Once
	pgErr  error
)

// PostgresReachable reports whether PostgresURL answers a ping (once per
// process).
func PostgresReachable() error {
	pgOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, PostgresURL())
		if err != nil {
			pgErr = err
			return
		}
		pgErr = conn.Ping(ctx)
		_ = conn.Close(ctx)
	})
	return pgErr
}

// RequirePostgres skips (or, with GUILDHALL_TEST_POSTGRES=require, fails)
// the test when PostgreSQL is unreachable.
func RequirePostgres(t testing.TB) {
	t.Helper()
	if err := PostgresReachable(); err != nil {
		if os.Getenv("GUILDHALL_TEST_POSTGRES") == "require" {
			t.Fatalf("PostgreSQL is required (GUILDHALL_TEST_POSTGRES=require) but unreachable at %s: %v", PostgresURL(), err)
		}
		t.Skipf("PostgreSQL unreachable at %s (%v): skipping; set GUILDHALL_TEST_POSTGRES=require to make this fail", PostgresURL(), err)
	}
}

// Stores runs fn once per store kind, as subtests named after the store.
func Stores(t *testing.T, fn func(t *testing.T, kind string)) {
	t.Helper()
	for _, kind := range []string{SQLite, Postgres} {
		t.Run(kind, func(t *testing.T) {
			if kind == Postgres {
				RequirePostgres(t)
			}
			fn(t, kind)
		})
	}
}

// FreshPostgres creates an empty schema and returns a URL whose connections
// use it; the schema is dropped when the test ends.
func FreshPostgres(t testing.TB) string {
	t.Helper()
	RequirePostgres(t)
	schema := "t_" + randomHex(8)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, PostgresURL())
	if err != nil {
		t.Fatalf("connect postgres: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("create schema: %v", err)
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(ctx, PostgresURL())
		if err != nil {
			return
		}
		defer c.Close(ctx)
		_, _ = c.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE")
	})
	u, _ := url.Parse(PostgresURL())
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// NoLimit is the rate limit of test instances: on, so that answers carry
// the RateLimit-* headers, and too high to refuse anything.
const NoLimit = 1e6

// Env is one running instance.
type Env struct {
	t      testing.TB
	Kind   string
	URL    string // http://127.0.0.1:port
	Owner  string // the owner's token
	App    *app.App
	Config config.Config
	HTTP   *http.Client
	server *httptest.Server
}

// Option changes the configuration of an instance.
type Option func(*config.Config)

// WithConfig edits the configuration.
func WithConfig(f func(*config.Config)) Option { return Option(f) }

// Config builds the configuration of a fresh instance of the given kind.
func Config(t testing.TB, kind string, opts ...Option) config.Config {
	t.Helper()
	cfg := baseConfig(t.TempDir())
	if kind == Postgres {
		cfg.DatabaseURL = FreshPostgres(t)
	}
	for _, o := range opts {
		o(&cfg)
	}
	return cfg
}

func baseConfig(dataDir string) config.Config {
	cfg := config.Default()
	cfg.Addr = "127.0.0.1:0"
	cfg.DataDir = dataDir
	// High enough never to refuse a test's requests, but on: every answer
	// then carries the RateLimit-* headers, and the contract check sees them.
	cfg.RateLimit = NoLimit
	cfg.BootstrapToken = "gh_test_" + randomHex(24)
	cfg.ShutdownTimeout = 5 * time.Second
	return cfg
}

// Instance is an instance run outside any test, for a TestMain whose
// examples share it (examples have no *testing.T). Every answer is checked
// against the contract; Close reports what was found.
type Instance struct {
	URL   string // http://127.0.0.1:port
	Owner string // the owner's token
	stop  func()
	mu    sync.Mutex
	found []string
}

// Launch runs an instance on SQLite in a fresh temporary directory.
func Launch() (*Instance, error) {
	dir, err := os.MkdirTemp("", "guildhall-instance-")
	if err != nil {
		return nil, err
	}
	cfg := baseConfig(dir)
	a, err := app.New(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	c, err := checker()
	if err != nil {
		_ = a.Close()
		_ = os.RemoveAll(dir)
		return nil, err
	}
	inst := &Instance{Owner: cfg.BootstrapToken}
	srv := httptest.NewUnstartedServer(c.Wrap(a.HTTP.Echo, func(msg string) {
		inst.mu.Lock()
		inst.found = append(inst.found, msg)
		inst.mu.Unlock()
	}))
	srv.Listener = httpapi.ProblemListener(srv.Listener) // as app.Serve does
	srv.Start()
	inst.URL = srv.URL
	inst.stop = func() {
		a.HTTP.Shutdown()
		srv.Close()
		_ = a.Close()
		_ = os.RemoveAll(dir)
	}
	return inst, nil
}

// Close stops the instance and returns the answers it gave that the contract
// does not declare.
func (i *Instance) Close() []string {
	i.stop()
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.found
}

// Start runs an instance of the given kind behind httptest.
func Start(t testing.TB, kind string, opts ...Option) *Env {
	t.Helper()
	return StartWith(t, kind, Config(t, kind, opts...))
}

// StartWith runs an instance with the configuration given.
func StartWith(t testing.TB, kind string, cfg config.Config) *Env {
	t.Helper()
	return start(t, kind, cfg, true)
}

// StartUnchecked runs an instance whose answers are not checked against the
// contract, with rate limiting off: for the tests and benchmarks that count
// what the server itself spends (time, or allocations in the whole process),
// which the check's own work would swamp. Every other test uses Start.
func StartUnchecked(t testing.TB, kind string, opts ...Option) *Env {
	t.Helper()
	cfg := Config(t, kind, opts...)
	cfg.RateLimit = 0
	return start(t, kind, cfg, false)
}

func start(t testing.TB, kind string, cfg config.Config, checked bool) *Env {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if os.Getenv("GUILDHALL_TEST_LOG") != "" {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	a, err := app.New(context.Background(), cfg, log)
	if err != nil {
		t.Fatalf("start %s instance: %v", kind, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	a.Background(ctx)
	var h http.Handler = a.HTTP.Echo
	if checked {
		h = CheckContract(t, h)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Listener = httpapi.ProblemListener(srv.Listener) // as app.Serve does
	srv.Start()
	e := &Env{t: t, Kind: kind, URL: srv.URL, Owner: cfg.BootstrapToken, App: a, Config: cfg, server: srv,
		HTTP: &http.Client{Timeout: 60 * time.Second}}
	t.Cleanup(func() {
		cancel()
		a.HTTP.Shutdown()
		srv.Close()
		_ = a.Close()
	})
	return e
}

// checker is the contract, parsed once per test process and shared by every
// instance.
var checker = sync.OnceValues(func() (*contractcheck.Checker, error) {
	doc, err := httpapi.LoadContract()
	if err != nil {
		return nil, err
	}
	return contractcheck.New(doc, httpapi.SchemaOptions()...)
})

// CheckContract wraps a server's handler so that every answer under /api is
// checked against the contract (internal/contractcheck): an answer the
// contract does not declare fails t, naming the request, the operation, the
// status and what is undeclared. testenv's own instances are wrapped; a test
// that serves an app itself wraps app.Handler with it.
//
// A fuzz target's *testing.F cannot fail while fuzzing, so for one the
// findings are reported when it ends.
func CheckContract(t testing.TB, h http.Handler) http.Handler {
	t.Helper()
	c, err := checker()
	if err != nil {
		t.Fatalf("contract: %v", err)
	}
	if _, fuzz := t.(*testing.F); !fuzz {
		return c.Wrap(h, func(msg string) { t.Errorf("%s", msg) })
	}
	var mu sync.Mutex
	var held []string
	t.Cleanup(func() { // registered first, so it runs after the server has stopped
		mu.Lock()
		defer mu.Unlock()
		for _, msg := range held {
			t.Errorf("%s", msg)
		}
	})
	return c.Wrap(h, func(msg string) {
		mu.Lock()
		held = append(held, msg)
		mu.Unlock()
	})
}

// CheckedTransport wraps a client transport so that every answer it
// receives under /api is checked against the contract, failing t: for
// servers a test does not run in-process (the binary, in cmd/guildhall's
// tests).
func CheckedTransport(t testing.TB, base http.RoundTripper) http.RoundTripper {
	t.Helper()
	c, err := checker()
	if err != nil {
		t.Fatalf("contract: %v", err)
	}
	return c.Transport(base, func(msg string) { t.Errorf("%s", msg) })
}

// WithT returns the environment reporting to another test (a subtest, or
// the *testing.T of a fuzz target, where the *testing.F must not be used).
func (e *Env) WithT(t testing.TB) *Env {
	c := *e
	c.t = t
	return &c
}

// Client is the generated client, authenticated with token ("" for none).
func (e *Env) Client(token string) *api.ClientWithResponses {
	e.t.Helper()
	c, err := api.NewClientWithResponses(e.URL+"/api", api.WithHTTPClient(e.HTTP),
		api.WithRequestEditorFn(func(_ context.Context, req *http.Request) error {
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			return nil
		}))
	if err != nil {
		e.t.Fatalf("client: %v", err)
	}
	return c
}

// Response is a raw answer.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// JSON decodes the body into v, failing the test on error.
func (r *Response) JSON(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.Body, v); err != nil {
		t.Fatalf("decode %d body %q: %v", r.Status, r.Body, err)
	}
}

// Map decodes the body as a JSON object.
func (r *Response) Map(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	r.JSON(t, &m)
	return m
}

// Problem decodes a problem+json body, checking its media type and status.
func (r *Response) Problem(t testing.TB) api.Problem {
	t.Helper()
	if ct := r.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("status %d: Content-Type %q, want application/problem+json; body %s", r.Status, ct, r.Body)
	}
	var p api.Problem
	r.JSON(t, &p)
	if p.Status != r.Status || p.Code == "" || p.Type != "/problems/"+string(p.Code) || p.RequestId == "" {
		t.Fatalf("malformed problem for status %d: %s", r.Status, r.Body)
	}
	return p
}

// Req is a request for Do.
type Req struct {
	Method  string
	Path    string // under /api, e.g. /roles
	Token   string
	Body    any    // encoded as JSON unless it is []byte or string
	Type    string // Content-Type; application/json when Body is set
	Headers map[string]string
}

// Do sends a request and reads the whole answer.
func (e *Env) Do(r Req) *Response {
	e.t.Helper()
	var body io.Reader
	ct := r.Type
	switch b := r.Body.(type) {
	case nil:
	case []byte:
		body = bytes.NewReader(b)
	case string:
		body = strings.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			e.t.Fatalf("encode body: %v", err)
		}
		body = bytes.NewReader(data)
		if ct == "" {
			ct = "application/json"
		}
	}
	req, err := http.NewRequest(r.Method, e.URL+"/api"+r.Path, body)
	if err != nil {
		e.t.Fatalf("request: %v", err)
	}
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	if r.Token != "" {
		req.Header.Set("Authorization", "Bearer "+r.Token)
	}
	for k, v := range r.Headers {
		req.Header.Set(k, v)
	}
	resp, err := e.HTTP.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", r.Method, r.Path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatalf("%s %s: read body: %v", r.Method, r.Path, err)
	}
	return &Response{Status: resp.StatusCode, Header: resp.Header, Body: data}
}

// Must sends a request and fails the test unless the status is want.
func (e *Env) Must(want int, r Req) *Response {
	e.t.Helper()
	res := e.Do(r)
	if res.Status != want {
		e.t.Fatalf("%s %s: status %d, want %d; body %s", r.Method, r.Path, res.Status, want, res.Body)
	}
	return res
}

// User is a user created for a test, with a token.
type User struct {
	ID, Username, Token string
}

// NewUser creates a user (as the owner) and a token for them.
func (e *Env) NewUser(username string) User {
	e.t.Helper()
	res := e.Must(http.StatusCreated, Req{Method: "POST", Path: "/users", Token: e.Owner, Body: map[string]any{"username": username}})
	id := res.Map(e.t)["id"].(string)
	tok := e.Must(http.StatusCreated, Req{Method: "POST", Path: "/users/" + id + "/tokens", Token: e.Owner, Body: map[string]any{"name": "test"}})
	return User{ID: id, Username: username, Token: tok.Map(e.t)["token"].(string)}
}

// NewRole creates a role (as the owner) with the permissions given; it lands
// at position 1.
func (e *Env) NewRole(id string, perms ...string) {
	e.t.Helper()
	if perms == nil {
		perms = []string{}
	}
	e.Must(http.StatusCreated, Req{Method: "POST", Path: "/roles/" + id + "/create", Token: e.Owner,
		Body: map[string]any{"name": id, "permissions": perms}})
}

// Assign gives a user a role (as the owner).
func (e *Env) Assign(userID, roleID string) {
	e.t.Helper()
	e.Must(http.StatusNoContent, Req{Method: "POST", Path: "/users/" + userID + "/roles/" + roleID, Token: e.Owner})
}

// NewChannel creates a channel (as the owner).
func (e *Env) NewChannel(id string) {
	e.t.Helper()
	e.Must(http.StatusCreated, Req{Method: "POST", Path: "/channels/" + id + "/create", Token: e.Owner, Body: map[string]any{"name": id}})
}

// SetOverwrite sets an overwrite (as the owner).
func (e *Env) SetOverwrite(channel, targetType, targetID string, allow, deny []string) {
	e.t.Helper()
	body := map[string]any{"target_type": targetType, "allow": nonNil(allow), "deny": nonNil(deny)}
	if targetID != "" {
		body["target_id"] = targetID
	}
	e.Must(http.StatusOK, Req{Method: "POST", Path: "/channels/" + channel + "/permissions", Token: e.Owner, Body: body})
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Fatalf is a shortcut for formatting test failures about a response.
func (r *Response) String() string { return fmt.Sprintf("%d %s", r.Status, r.Body) }
