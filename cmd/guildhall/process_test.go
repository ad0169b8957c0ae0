package main

// Tests that run the real binary: `go build` once, then `guildhall serve`
// processes on loopback ports, killed with SIGKILL, restarted, and run side
// by side on one PostgreSQL database.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"gorm.io/driver/sqlite"
	"gorm.io/gorm"
	gormlogger "gorm.io/gorm/logger"

	"github.com/guildhall/guildhall/internal/testenv"
)

var (
	binMu    sync.Mutex
	binDir   string                // where the binaries are built; TestMain removes it
	binBuilt = map[string]*build{} // by name
)

type build struct {
	once sync.Once
	path string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// binary builds cmd/guildhall once per test run (only when a test needs it).
func binary(t *testing.T) string {
	t.Helper()
	return binaryLinked(t, "guildhall", "")
}

// binaryLinked builds cmd/guildhall once per test run under name, linked
// with ldflags (a variable set with -X, for a test that needs a build of
// its own).
func binaryLinked(t *testing.T, name, ldflags string) string {
	t.Helper()
	binMu.Lock()
	if binDir == "" {
		dir, err := os.MkdirTemp("", "guildhall-bin-")
		if err != nil {
			binMu.Unlock()
			t.Fatal(err)
		}
		binDir = dir
	}
	b := binBuilt[name]
	if b == nil {
		b = &build{path: filepath.Join(binDir, name)}
		binBuilt[name] = b
	}
	binMu.Unlock()
	b.once.Do(func() {
		cmd := exec.Command("go", "build", "-ldflags", ldflags, "-o", b.path, ".")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=1") // the SQLite driver needs cgo
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build %s: %v\n%s", name, err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// storeDir is where a set of instances keeps its state.
type storeDir struct {
	kind    string
	dataDir string // SQLite file (and blobs)
	dbURL   string // PostgreSQL, a fresh schema
	token   string // the owner's token (GUILDHALL_BOOTSTRAP_TOKEN)
}

func newStore(t *testing.T, kind string) storeDir {
	t.Helper()
	s := storeDir{kind: kind, dataDir: t.TempDir(), token: "gh_proc_" + rand.Text()}
	if kind == testenv.Postgres {
		s.dbURL = testenv.FreshPostgres(t)
	}
	return s
}

// syncBuffer collects a process's output.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// instance is one running `guildhall serve` process.
type instance struct {
	name   string
	cmd    *exec.Cmd
	stdout syncBuffer
	stderr syncBuffer
	exited chan struct{}
	URL    string // http://127.0.0.1:port, once ready
}

var listening = regexp.MustCompile(`listening on (http://\S+)`)

// start launches an instance on a free loopback port; call ready before use.
// It is killed when the test ends, and its output is logged if the test failed.
func start(t *testing.T, name string, s storeDir, extraEnv ...string) *instance {
	t.Helper()
	return startBinary(t, binary(t), name, s, extraEnv...)
}

// startBinary is start with a binary of the test's own (binaryLinked).
func startBinary(t *testing.T, bin, name string, s storeDir, extraEnv ...string) *instance {
	t.Helper()
	in := &instance{name: name, exited: make(chan struct{})}
	in.cmd = exec.Command(bin, "serve")
	env := make([]string, 0, len(os.Environ())+8)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GUILDHALL_") {
			env = append(env, kv)
		}
	}
	in.cmd.Env = append(env,
		"GUILDHALL_ADDR=127.0.0.1:0",
		"GUILDHALL_DATA_DIR="+s.dataDir,
		"GUILDHALL_DATABASE_URL="+s.dbURL,
		"GUILDHALL_BOOTSTRAP_TOKEN="+s.token,
		"GUILDHALL_RATE_LIMIT=0",
		"GUILDHALL_LOG_LEVEL=warn",
	)
	in.cmd.Env = append(in.cmd.Env, extraEnv...)
	in.cmd.Stdout, in.cmd.Stderr = &in.stdout, &in.stderr
	if err := in.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		_ = in.cmd.Wait()
		close(in.exited)
	}()
	t.Cleanup(func() {
		in.kill()
		out := in.stderr.String()
		for _, bad := range []string{"database is locked", "unexpected error", "panic"} {
			if strings.Contains(out, bad) {
				t.Errorf("%s logged %q", name, bad)
			}
		}
		if t.Failed() {
			t.Logf("--- %s stdout:\n%s--- %s stderr:\n%s", name, in.stdout.String(), name, out)
		}
	})
	return in
}

// ready waits until the instance listens and /readyz says 200. An
// instance just started on a busy machine may say 503 for a moment (its
// readiness write is bounded by a second, and may wait for the write lock
// another instance holds), so a 503 is asked again until the deadline.
func (in *instance) ready(t *testing.T, c *http.Client) *instance {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for in.URL == "" {
		if m := listening.FindStringSubmatch(in.stdout.String()); m != nil {
			in.URL = m[1]
			break
		}
		select {
		case <-in.exited:
			t.Fatalf("%s exited before listening: %v\n%s%s", in.name, in.cmd.ProcessState, in.stdout.String(), in.stderr.String())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not listen within 30 s", in.name)
		}
	}
	for {
		res, err := c.Get(in.URL + "/readyz")
		if err != nil {
			t.Fatalf("%s /readyz: %v", in.name, err)
		}
		body, _ := io.ReadAll(res.Body)
		_ = res.Body.Close()
		switch {
		case res.StatusCode == http.StatusOK:
			return in
		case res.StatusCode != http.StatusServiceUnavailable:
			t.Fatalf("%s /readyz: status %d %s", in.name, res.StatusCode, body)
		case time.Now().After(deadline):
			t.Fatalf("%s /readyz still 503 after 30 s: %s", in.name, body)
		}
		t.Logf("%s /readyz: 503 %s; asking again", in.name, bytes.TrimSpace(body))
		time.Sleep(100 * time.Millisecond)
	}
}

// kill sends SIGKILL and waits for the process to go.
func (in *instance) kill() {
	select {
	case <-in.exited:
		return
	default:
	}
	_ = in.cmd.Process.Signal(syscall.SIGKILL)
	<-in.exited
}

// createdOwner reports whether this start bootstrapped the store.
func (in *instance) createdOwner() bool {
	return strings.Contains(in.stdout.String(), "Created the owner")
}

// newClient is a client whose every answer is checked against the contract.
func newClient(t *testing.T) *http.Client {
	tr := &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 128, IdleConnTimeout: 30 * time.Second}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: testenv.CheckedTransport(t, tr), Timeout: 20 * time.Second}
}

// call sends one API request (path under /api) and reads the whole answer.
// A transport failure is returned, not reported: callers decide.
func call(c *http.Client, base, method, path, token string, body any) (int, []byte, error) {
	var r io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		r = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, base+"/api"+path, r)
	if err != nil {
		return 0, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := c.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	if err != nil {
		return 0, nil, err
	}
	return res.StatusCode, data, nil
}

// must sends a request from the test goroutine and fails unless the status is want.
func must(t *testing.T, c *http.Client, base string, want int, method, path, token string, body any) []byte {
	t.Helper()
	status, data, err := call(c, base, method, path, token, body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	if status != want {
		t.Fatalf("%s %s: status %d, want %d; body %s", method, path, status, want, data)
	}
	return data
}

func decode[T any](t *testing.T, data []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatalf("decode %s: %v", data, err)
	}
	return v
}

type item struct {
	ID       string   `json:"id"`
	Name     string   `json:"name"`
	Username string   `json:"username"`
	IsOwner  bool     `json:"is_owner"`
	Roles    []string `json:"roles"`
	Position int      `json:"position"`
	Type     string   `json:"type"`
	Subject  string   `json:"subject"`
}

type page struct {
	Items      []item  `json:"items"`
	NextCursor *string `json:"next_cursor"`
}

// listAll walks a keyset-paginated list (path has its query already).
func listAll(t *testing.T, c *http.Client, base, path, token string) []item {
	t.Helper()
	var all []item
	cursor := ""
	for {
		sep := "?"
		if strings.Contains(path, "?") {
			sep = "&"
		}
		p := path + sep + "limit=200"
		if cursor != "" {
			p += "&cursor=" + url.QueryEscape(cursor)
		}
		pg := decode[page](t, must(t, c, base, http.StatusOK, "GET", p, token, nil))
		all = append(all, pg.Items...)
		if pg.NextCursor == nil {
			return all
		}
		cursor = *pg.NextCursor
	}
}

// ledger is a concurrent set of keys with a value each.
type ledger struct {
	mu sync.Mutex
	m  map[string]string
}

func newLedger() *ledger { return &ledger{m: map[string]string{}} }

func (l *ledger) put(k, v string) {
	l.mu.Lock()
	l.m[k] = v
	l.mu.Unlock()
}

func (l *ledger) has(k string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.m[k]
	return ok
}

func (l *ledger) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.m)
}

func (l *ledger) snapshot() map[string]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return copyMap(l.m)
}

func copyMap(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// --- crash durability

// TestCrashDurability kills the server with SIGKILL while writers create
// channels, users and roles, restarts it on the same store and finds every
// write that was acknowledged (and nothing that was never attempted).
func TestCrashDurability(t *testing.T) {
	for _, kind := range []string{testenv.SQLite, testenv.Postgres} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			if kind == testenv.Postgres {
				testenv.RequirePostgres(t)
			}
			c := newClient(t)
			s := newStore(t, kind)
			// kind of resource -> key -> value; users are keyed by username.
			attempted := map[string]*ledger{"channel": newLedger(), "role": newLedger(), "user": newLedger()}
			acked := map[string]*ledger{"channel": newLedger(), "role": newLedger(), "user": newLedger()}
			rounds := 2
			if testing.Short() {
				rounds = 1
			}
			for round := 0; round < rounds; round++ {
				in := start(t, fmt.Sprintf("%s-run%d", kind, round), s).ready(t, c)
				if round == 0 && !in.createdOwner() {
					t.Fatalf("the first start did not create the owner:\n%s", in.stdout.String())
				}
				if round > 0 {
					verifyDurable(t, c, in, s.token, attempted, acked)
				}
				writeUntilKilled(t, c, in, s.token, round, attempted, acked)
			}
			in := start(t, kind+"-final", s).ready(t, c)
			if in.createdOwner() {
				t.Fatalf("the restart bootstrapped again: the store looked empty")
			}
			verifyDurable(t, c, in, s.token, attempted, acked)
			if kind == testenv.SQLite {
				db, err := gorm.Open(sqlite.Open("file:"+filepath.Join(s.dataDir, "guildhall.db")+"?mode=ro"), &gorm.Config{Logger: gormlogger.Discard})
				if err != nil {
					t.Fatalf("open the SQLite file: %v", err)
				}
				var res string
				if err := db.Raw("PRAGMA integrity_check").Scan(&res).Error; err != nil || res != "ok" {
					t.Errorf("integrity_check = %q, %v", res, err)
				}
				if sqlDB, err := db.DB(); err == nil {
					_ = sqlDB.Close()
				}
			}
		})
	}
}

// writeUntilKilled runs 16 writers against in, SIGKILLs it mid-flight once
// enough writes are acknowledged, and returns when every writer has seen the
// connection fail.
func writeUntilKilled(t *testing.T, c *http.Client, in *instance, token string, round int, attempted, acked map[string]*ledger) {
	t.Helper()
	const writers = 16
	var killed atomic.Bool
	var nAcked atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			roles := 0
			for i := 0; ; i++ {
				var kind, key, path string
				var body map[string]any
				switch {
				case i%3 == 2 && roles < 3: // few roles: every create shifts all positions
					roles++
					kind, key = "role", fmt.Sprintf("r%d-%d-%d", round, w, i)
					path, body = "/roles/"+key+"/create", map[string]any{"name": key, "permissions": []string{}}
				case i%3 == 1:
					kind, key = "user", fmt.Sprintf("u%d_%d_%d", round, w, i)
					path, body = "/users", map[string]any{"username": key}
				default:
					kind, key = "channel", fmt.Sprintf("c%d-%d-%d", round, w, i)
					path, body = "/channels/"+key+"/create", map[string]any{"name": key}
				}
				attempted[kind].put(key, "")
				status, data, err := call(c, in.URL, "POST", path, token, body)
				if err != nil {
					if !killed.Load() {
						t.Errorf("%s before the kill: %v", path, err)
					}
					return
				}
				if status != http.StatusCreated {
					t.Errorf("POST %s: status %d, want 201; body %s", path, status, data)
					return
				}
				var created struct{ ID string }
				if err := json.Unmarshal(data, &created); err != nil || created.ID == "" {
					t.Errorf("POST %s: body %s: %v", path, data, err)
					return
				}
				acked[kind].put(key, created.ID)
				nAcked.Add(1)
			}
		}()
	}
	// Kill once a few hundred writes are acknowledged (or after 2 s), while
	// every writer still has a request in flight.
	deadline := time.Now().Add(2 * time.Second)
	for nAcked.Load() < 300 && time.Now().Before(deadline) && !t.Failed() {
		time.Sleep(5 * time.Millisecond)
	}
	killed.Store(true)
	in.kill()
	wg.Wait()
	if nAcked.Load() == 0 {
		t.Fatalf("no write was acknowledged before the kill")
	}
	t.Logf("round %d: %d writes acknowledged before SIGKILL", round, nAcked.Load())
}

// verifyDurable checks that every acknowledged write is there, with the
// acknowledged ID, and that whatever is there was at least attempted.
func verifyDurable(t *testing.T, c *http.Client, in *instance, token string, attempted, acked map[string]*ledger) {
	t.Helper()
	listed := map[string]map[string]string{"channel": {}, "role": {}, "user": {}}
	for _, it := range listAll(t, c, in.URL, "/channels", token) {
		listed["channel"][it.ID] = it.ID
	}
	for _, it := range decode[page](t, must(t, c, in.URL, http.StatusOK, "GET", "/roles", token, nil)).Items {
		listed["role"][it.ID] = it.ID
	}
	for _, it := range listAll(t, c, in.URL, "/users", token) {
		if !it.IsOwner {
			listed["user"][it.Username] = it.ID
		}
	}
	for kind, want := range acked {
		for key, id := range want.snapshot() {
			got, ok := listed[kind][key]
			if !ok {
				t.Errorf("acknowledged %s %q is missing after the crash", kind, key)
			} else if got != id {
				t.Errorf("acknowledged %s %q has ID %q, acknowledged as %q", kind, key, got, id)
			}
		}
		for key := range listed[kind] {
			if !attempted[kind].has(key) {
				t.Errorf("%s %q exists but was never created", kind, key)
			}
		}
	}
	// Each one also reads back on its own.
	for _, id := range acked["user"].snapshot() {
		must(t, c, in.URL, http.StatusOK, "GET", "/users/"+id, token, nil)
	}
	for key := range acked["channel"].snapshot() {
		must(t, c, in.URL, http.StatusOK, "GET", "/channels/"+key, token, nil)
	}
	for key := range acked["role"].snapshot() {
		must(t, c, in.URL, http.StatusOK, "GET", "/roles/"+key, token, nil)
	}
	// Acknowledged writes that were in flight at the kill may be there too.
	t.Logf("after restart: %d channels, %d roles, %d users (acknowledged %d, %d, %d)",
		len(listed["channel"]), len(listed["role"]), len(listed["user"]),
		acked["channel"].len(), acked["role"].len(), acked["user"].len())
}

// --- many instances

// TestConcurrentStart starts three instances at once on an empty schema:
// the migrations and the bootstrap run exactly once and every instance comes up.
func TestConcurrentStart(t *testing.T) {
	t.Parallel()
	s := newStore(t, testenv.Postgres)
	c := newClient(t)
	ins := make([]*instance, 3)
	for i := range ins {
		ins[i] = start(t, fmt.Sprintf("start-%d", i), s)
	}
	owners := 0
	for _, in := range ins {
		in.ready(t, c)
		if in.createdOwner() {
			owners++
		}
		must(t, c, in.URL, http.StatusOK, "GET", "/roles", s.token, nil)
	}
	if owners != 1 {
		t.Errorf("%d instances created the owner, want exactly 1", owners)
	}
	users := listAll(t, c, ins[0].URL, "/users", s.token)
	if len(users) != 1 || !users[0].IsOwner {
		t.Errorf("users after concurrent starts = %+v, want only the owner", users)
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, s.dbURL)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(ctx)
	var n, distinct int
	if err := conn.QueryRow(ctx, "SELECT count(*), count(DISTINCT id) FROM schema_migrations").Scan(&n, &distinct); err != nil {
		t.Fatalf("read schema_migrations: %v", err)
	}
	if n == 0 || n != distinct {
		t.Errorf("schema_migrations has %d rows, %d distinct: want each migration once", n, distinct)
	}
	var settings int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM settings").Scan(&settings); err != nil || settings != 1 {
		t.Errorf("settings rows = %d (%v), want 1", settings, err)
	}
}

// TestTwoInstances runs two processes on one PostgreSQL schema: a write on A
// reads on B at once, an authorization change made on A governs B within one
// second, and B's event stream carries an event written on A.
func TestTwoInstances(t *testing.T) {
	t.Parallel()
	s := newStore(t, testenv.Postgres)
	c := newClient(t)
	a := start(t, "A", s)
	b := start(t, "B", s)
	a.ready(t, c)
	b.ready(t, c)
	owner := s.token

	t.Run("write on A reads on B", func(t *testing.T) {
		must(t, c, a.URL, http.StatusCreated, "POST", "/channels/general/create", owner, map[string]any{"name": "General"})
		got := decode[item](t, must(t, c, b.URL, http.StatusOK, "GET", "/channels/general", owner, nil))
		if got.Name != "General" {
			t.Errorf("B reads name %q, want General", got.Name)
		}
		data := must(t, c, b.URL, http.StatusCreated, "POST", "/users", owner, map[string]any{"username": "bob"})
		id := decode[item](t, data).ID
		if got := decode[item](t, must(t, c, a.URL, http.StatusOK, "GET", "/users/"+id, owner, nil)); got.Username != "bob" {
			t.Errorf("A reads username %q, want bob", got.Username)
		}
	})

	// A user with a role, and a channel that everyone is denied. A channel the
	// user cannot view is, to them, a missing one (docs/design.md §12): 404.
	uid := decode[item](t, must(t, c, a.URL, http.StatusCreated, "POST", "/users", owner, map[string]any{"username": "mallory"})).ID
	tok := decode[struct{ ID, Token string }](t, must(t, c, a.URL, http.StatusCreated, "POST", "/users/"+uid+"/tokens", owner, map[string]any{"name": "t"}))
	user := tok.Token
	must(t, c, a.URL, http.StatusCreated, "POST", "/roles/staff/create", owner, map[string]any{"name": "Staff", "permissions": []string{}})
	must(t, c, a.URL, http.StatusNoContent, "POST", "/users/"+uid+"/roles/staff", owner, nil)
	must(t, c, a.URL, http.StatusCreated, "POST", "/channels/secret/create", owner, map[string]any{"name": "Secret"})
	overwrite := func(targetType, targetID string, allow, deny []string) map[string]any {
		return map[string]any{"target_type": targetType, "target_id": targetID, "allow": allow, "deny": deny}
	}
	must(t, c, a.URL, http.StatusOK, "POST", "/channels/secret/permissions", owner,
		map[string]any{"target_type": "everyone", "allow": []string{}, "deny": []string{"VIEW_CHANNEL"}})

	type change struct {
		method, path string
		body         any
		status       int
	}
	cases := []struct {
		name   string
		change change // made on A, as the owner
		probe  string // GET on B, as the user
		before int    // the probe's status before the change
		after  int    // and after
	}{
		{"role permission granted", change{"PUT", "/roles/staff/permissions", map[string]any{"permissions": []string{"VIEW_AUDIT_LOG"}}, 200},
			"/audit-log?limit=1", 403, 200},
		{"role permission revoked", change{"PUT", "/roles/staff/permissions", map[string]any{"permissions": []string{}}, 200},
			"/audit-log?limit=1", 200, 403},
		{"role overwrite allows", change{"POST", "/channels/secret/permissions", overwrite("role", "staff", []string{"VIEW_CHANNEL"}, []string{}), 200},
			"/channels/secret", 404, 200},
		{"user overwrite denies", change{"POST", "/channels/secret/permissions", overwrite("user", uid, []string{}, []string{"VIEW_CHANNEL"}), 200},
			"/channels/secret", 200, 404},
		{"user overwrite removed", change{"POST", "/channels/secret/permissions", overwrite("user", uid, []string{}, []string{}), 200},
			"/channels/secret", 404, 200},
		{"role taken away", change{"DELETE", "/users/" + uid + "/roles/staff", nil, 204},
			"/channels/secret", 200, 404},
		{"global permission removed", change{"PUT", "/permissions/global", map[string]any{"permissions": []string{"SEND_MESSAGES"}}, 200},
			"/channels/general", 200, 404},
		{"token revoked", change{"DELETE", "/users/" + uid + "/tokens/" + tok.ID, nil, 204},
			"/roles", 200, 401},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// B has served the user (its cache is warm) and still says the old answer.
			for range 3 {
				must(t, c, b.URL, tc.before, "GET", tc.probe, user, nil)
			}
			must(t, c, a.URL, tc.change.status, tc.change.method, tc.change.path, owner, tc.change.body)
			acked := time.Now()
			polls := 0
			for {
				polls++
				status, body, err := call(c, b.URL, "GET", tc.probe, user, nil)
				if err != nil {
					t.Fatalf("probe B: %v", err)
				}
				if status == tc.after {
					break
				}
				if status != tc.before {
					t.Fatalf("probe B: status %d; body %s", status, body)
				}
				if time.Since(acked) > time.Second {
					t.Fatalf("B still answers %d %s one second after A acknowledged the change (%d polls)", status, tc.probe, polls)
				}
				time.Sleep(2 * time.Millisecond)
			}
			latency := time.Since(acked)
			t.Logf("B reflected the change %v after A's answer (%d probe(s))", latency, polls)
			if latency >= time.Second {
				t.Errorf("latency %v, want < 1 s", latency)
			}
		})
	}

	// docs/design.md §13: a timeout set on one instance is in force on the
	// other on its next request, even with its caches warm, and ends by
	// itself on both at its time, with no write.
	t.Run("timeout set on A holds on B and ends on both", func(t *testing.T) {
		must(t, c, a.URL, http.StatusCreated, "POST", "/roles/auditors/create", owner, map[string]any{"name": "Auditors", "permissions": []string{"VIEW_AUDIT_LOG"}})
		tid := decode[item](t, must(t, c, a.URL, http.StatusCreated, "POST", "/users", owner, map[string]any{"username": "tim"})).ID
		tim := decode[struct{ Token string }](t, must(t, c, a.URL, http.StatusCreated, "POST", "/users/"+tid+"/tokens", owner, map[string]any{"name": "t"})).Token
		must(t, c, a.URL, http.StatusNoContent, "POST", "/users/"+tid+"/roles/auditors", owner, nil)
		for _, in := range []*instance{a, b, b, b} { // warm
			must(t, c, in.URL, http.StatusOK, "GET", "/audit-log?limit=1", tim, nil)
		}
		until := time.Now().Add(5 * time.Second).UTC()
		req, _ := http.NewRequest("PATCH", a.URL+"/api/users/"+tid, strings.NewReader(`{"timeout_until":"`+until.Format(time.RFC3339Nano)+`"}`))
		req.Header.Set("Authorization", "Bearer "+owner)
		req.Header.Set("Content-Type", "application/merge-patch+json")
		res, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Fatalf("PATCH timeout_until on A: %d", res.StatusCode)
		}
		for _, in := range []*instance{b, a} {
			st, body, _ := call(c, in.URL, "GET", "/audit-log?limit=1", tim, nil)
			switch {
			case !time.Now().Before(until):
				t.Fatalf("the machine took until the timeout's end to ask %s: nothing was checked", in.name)
			case st != http.StatusForbidden:
				t.Errorf("%s on the next request after the timeout: %d %s, want 403", in.name, st, body)
			}
		}
		time.Sleep(time.Until(until) + 50*time.Millisecond)
		for _, in := range []*instance{b, a} {
			must(t, c, in.URL, http.StatusOK, "GET", "/audit-log?limit=1", tim, nil)
		}
	})

	t.Run("event written on A streams on B", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", b.URL+"/api/events", nil)
		req.Header.Set("Authorization", "Bearer "+owner)
		res, err := c.Do(req)
		if err != nil {
			t.Fatalf("open stream on B: %v", err)
		}
		defer res.Body.Close()
		if res.StatusCode != http.StatusOK || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
			t.Fatalf("stream: status %d, type %q", res.StatusCode, res.Header.Get("Content-Type"))
		}
		lines := make(chan string, 64)
		go func() {
			defer close(lines)
			sc := bufio.NewScanner(res.Body)
			for sc.Scan() {
				lines <- sc.Text()
			}
		}()
		// The stream's start point is fixed once its first comment arrives.
		for l := range lines {
			if strings.HasPrefix(l, ": stream open") {
				break
			}
		}
		must(t, c, a.URL, http.StatusCreated, "POST", "/channels/from-a/create", owner, map[string]any{"name": "From A"})
		acked := time.Now()
		var event string
		for l := range lines {
			switch {
			case strings.HasPrefix(l, "event: "):
				event = strings.TrimPrefix(l, "event: ")
			case strings.HasPrefix(l, "data: "):
				var ev item
				if err := json.Unmarshal([]byte(strings.TrimPrefix(l, "data: ")), &ev); err != nil {
					t.Fatalf("event data %q: %v", l, err)
				}
				if event != "channel.created" || ev.Subject != "channel:from-a" {
					t.Fatalf("first event on B = %s %s, want channel.created channel:from-a", event, l)
				}
				latency := time.Since(acked)
				t.Logf("B streamed A's event %v after A's answer", latency)
				if latency >= time.Second {
					t.Errorf("latency %v, want < 1 s", latency)
				}
				return
			}
		}
		t.Fatalf("the stream on B ended without A's event: %v", ctx.Err())
	})
}

// --- concurrent writers

// TestConcurrentWriters runs 32 writers for a bounded time on each store (two
// instances on PostgreSQL), mixing creates, renames, role assignments and
// overwrites; nothing answers 5xx, and what reads back is exactly what was
// acknowledged. Then writers race on the same IDs and usernames: exactly one
// wins each race, the others get 409.
func TestConcurrentWriters(t *testing.T) {
	for _, kind := range []string{testenv.SQLite, testenv.Postgres} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			if kind == testenv.Postgres {
				testenv.RequirePostgres(t)
			}
			c := newClient(t)
			s := newStore(t, kind)
			n := 1
			if kind == testenv.Postgres {
				n = 2
			}
			var bases []string
			ins := make([]*instance, n)
			for i := range ins {
				ins[i] = start(t, fmt.Sprintf("%s-%d", kind, i), s)
			}
			for _, in := range ins {
				bases = append(bases, in.ready(t, c).URL)
			}
			d := 3 * time.Second
			if testing.Short() {
				d = time.Second
			}
			want := mixedWriters(t, c, bases, s.token, 32, d)
			if t.Failed() {
				return
			}
			checkState(t, c, bases[len(bases)-1], s.token, want)
			t.Run("races", func(t *testing.T) { races(t, c, bases, s.token, 32) })
		})
	}
}

// expected is the state the acknowledged writes add up to.
type expected struct {
	channels   map[string]string            // id -> last acknowledged name
	roles      map[string]bool              // id
	users      map[string]string            // username -> id
	userRoles  map[string]map[string]bool   // user id -> role ids
	overwrites map[string]map[string]string // channel -> role -> allow (joined)
	writes     int
}

func mixedWriters(t *testing.T, c *http.Client, bases []string, token string, writers int, d time.Duration) expected {
	t.Helper()
	results := make([]expected, writers)
	stop := time.Now().Add(d)
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e := expected{channels: map[string]string{}, roles: map[string]bool{}, users: map[string]string{},
				userRoles: map[string]map[string]bool{}, overwrites: map[string]map[string]string{}}
			var chans, roles, users []string
			// The writers together stay under the 500 channels a community
			// may have, however fast the machine; past it a writer renames.
			maxChans := 450 / writers
			pick := func(s []string, i int) string { return s[(i*7+w)%len(s)] }
			for i := 0; time.Now().Before(stop); i++ {
				base := bases[(w+i)%len(bases)] // alternate instances
				var method, path string
				var body any
				want := http.StatusCreated
				var onAck func(data []byte) error
				switch op := i % 6; {
				case op == 0 && len(chans) < maxChans || len(chans) == 0:
					id := fmt.Sprintf("w%d-c%d", w, i)
					method, path, body = "POST", "/channels/"+id+"/create", map[string]any{"name": id}
					onAck = func([]byte) error { chans = append(chans, id); e.channels[id] = id; return nil }
				case op == 1 || len(users) == 0:
					name := fmt.Sprintf("w%d_u%d", w, i)
					method, path, body = "POST", "/users", map[string]any{"username": name}
					onAck = func(data []byte) error {
						var u item
						if err := json.Unmarshal(data, &u); err != nil || u.ID == "" {
							return fmt.Errorf("user body %s: %v", data, err)
						}
						users = append(users, u.ID)
						e.users[name] = u.ID
						return nil
					}
				case op == 2 && len(roles) < 4 || len(roles) == 0:
					id := fmt.Sprintf("w%d-r%d", w, i)
					method, path, body = "POST", "/roles/"+id+"/create", map[string]any{"name": id, "permissions": []string{"VIEW_CHANNEL"}}
					onAck = func([]byte) error { roles = append(roles, id); e.roles[id] = true; return nil }
				case op == 4:
					u, r := pick(users, i), pick(roles, i+1)
					method, path, want = "POST", "/users/"+u+"/roles/"+r, http.StatusNoContent
					onAck = func([]byte) error {
						if e.userRoles[u] == nil {
							e.userRoles[u] = map[string]bool{}
						}
						e.userRoles[u][r] = true
						return nil
					}
				case op == 5:
					ch, r := pick(chans, i), pick(roles, i)
					allow := []string{"VIEW_CHANNEL"}
					if i%4 == 1 {
						allow = []string{"SEND_MESSAGES", "ADD_REACTIONS"}
					}
					method, path, want = "POST", "/channels/"+ch+"/permissions", http.StatusOK
					body = map[string]any{"target_type": "role", "target_id": r, "allow": allow, "deny": []string{}}
					onAck = func([]byte) error {
						if e.overwrites[ch] == nil {
							e.overwrites[ch] = map[string]string{}
						}
						e.overwrites[ch][r] = strings.Join(allow, ",")
						return nil
					}
				default: // rename one of this writer's channels
					ch := pick(chans, i)
					name := fmt.Sprintf("renamed %d by %d", i, w)
					method, path, want, body = "POST", "/channels/"+ch+"/rename", http.StatusOK, map[string]any{"name": name}
					onAck = func([]byte) error { e.channels[ch] = name; return nil }
				}
				status, data, err := call(c, base, method, path, token, body)
				if err != nil {
					t.Errorf("%s %s: %v", method, path, err)
					return
				}
				if status != want {
					t.Errorf("%s %s: status %d, want %d; body %s", method, path, status, want, data)
					return
				}
				if err := onAck(data); err != nil {
					t.Error(err)
					return
				}
				e.writes++
			}
			results[w] = e
		}()
	}
	wg.Wait()
	all := expected{channels: map[string]string{}, roles: map[string]bool{}, users: map[string]string{},
		userRoles: map[string]map[string]bool{}, overwrites: map[string]map[string]string{}}
	for _, e := range results {
		for k, v := range e.channels {
			all.channels[k] = v
		}
		for k := range e.roles {
			all.roles[k] = true
		}
		for k, v := range e.users {
			all.users[k] = v
		}
		for k, v := range e.userRoles {
			all.userRoles[k] = v
		}
		for k, v := range e.overwrites {
			all.overwrites[k] = v
		}
		all.writes += e.writes
	}
	t.Logf("%d writers, %v, %d instance(s): %d writes acknowledged (%.0f/s)", writers, d, len(bases), all.writes, float64(all.writes)/d.Seconds())
	if all.writes < writers {
		t.Errorf("only %d writes in %v", all.writes, d)
	}
	return all
}

// checkState reads everything back and compares it with what was acknowledged.
func checkState(t *testing.T, c *http.Client, base, token string, want expected) {
	t.Helper()
	chans := listAll(t, c, base, "/channels", token)
	got := map[string]string{}
	for _, ch := range chans {
		if _, dup := got[ch.ID]; dup {
			t.Errorf("channel %q listed twice", ch.ID)
		}
		got[ch.ID] = ch.Name
	}
	if !equalMaps(got, want.channels) {
		t.Errorf("channels (id -> name) differ from the acknowledged writes:\n%s", diff(got, want.channels))
	}

	roles := decode[page](t, must(t, c, base, http.StatusOK, "GET", "/roles", token, nil)).Items
	gotRoles := map[string]string{}
	var positions []int
	for _, r := range roles {
		gotRoles[r.ID] = ""
		positions = append(positions, r.Position)
	}
	wantRoles := map[string]string{}
	for id := range want.roles {
		wantRoles[id] = ""
	}
	if !equalMaps(gotRoles, wantRoles) || len(roles) != len(gotRoles) {
		t.Errorf("roles differ from the acknowledged writes:\n%s", diff(gotRoles, wantRoles))
	}
	sort.Ints(positions)
	for i, p := range positions {
		if p != i+1 {
			t.Errorf("role positions %v, want 1..%d without holes or repeats", positions, len(positions))
			break
		}
	}

	users := listAll(t, c, base, "/users", token)
	gotUsers, wantUsers := map[string]string{}, copyMap(want.users)
	for _, u := range users {
		if u.IsOwner {
			continue
		}
		if _, dup := gotUsers[u.Username]; dup {
			t.Errorf("user %q listed twice", u.Username)
		}
		gotUsers[u.Username] = u.ID
		var wantR []string
		for r := range want.userRoles[u.ID] {
			wantR = append(wantR, r)
		}
		gotR := slices.Clone(u.Roles)
		sort.Strings(wantR)
		sort.Strings(gotR)
		if !slices.Equal(gotR, wantR) {
			t.Errorf("user %s has roles %v, acknowledged %v", u.Username, gotR, wantR)
		}
	}
	if !equalMaps(gotUsers, wantUsers) {
		t.Errorf("users (username -> id) differ from the acknowledged writes:\n%s", diff(gotUsers, wantUsers))
	}

	type ow struct {
		TargetType string   `json:"target_type"`
		TargetID   string   `json:"target_id"`
		Allow      []string `json:"allow"`
	}
	for ch := range want.channels {
		list := decode[struct{ Items []ow }](t, must(t, c, base, http.StatusOK, "GET", "/channels/"+ch+"/permissions", token, nil)).Items
		gotOW := map[string]string{}
		for _, o := range list {
			gotOW[o.TargetType+":"+o.TargetID] = strings.Join(o.Allow, ",")
		}
		wantOW := map[string]string{}
		for r, allow := range want.overwrites[ch] {
			wantOW["role:"+r] = allow
		}
		if !equalMaps(gotOW, wantOW) {
			t.Errorf("overwrites of %s differ from the acknowledged writes:\n%s", ch, diff(gotOW, wantOW))
		}
	}

	// One audit event per acknowledged create, none lost, none doubled.
	events := listAll(t, c, base, "/audit-log?type=channel.created", token)
	seen := map[string]int{}
	for _, ev := range events {
		seen[strings.TrimPrefix(ev.Subject, "channel:")]++
	}
	for ch := range want.channels {
		if seen[ch] != 1 {
			t.Errorf("channel %s has %d channel.created events, want 1", ch, seen[ch])
		}
	}
	if len(events) != len(want.channels) {
		t.Errorf("%d channel.created events, want %d", len(events), len(want.channels))
	}
}

// races makes writers (spread over the instances) create the same channel,
// role and username at once: one 201, and 409 for every other.
func races(t *testing.T, c *http.Client, bases []string, token string, writers int) {
	rounds := 5
	if testing.Short() {
		rounds = 2
	}
	for round := 0; round < rounds; round++ {
		for _, kind := range []string{"channel", "role", "user"} {
			statuses := make([]int, writers)
			ids := make([]string, writers)
			start := make(chan struct{})
			var wg sync.WaitGroup
			for w := 0; w < writers; w++ {
				var path string
				var body any
				switch kind {
				case "channel":
					path, body = fmt.Sprintf("/channels/race-%d/create", round), map[string]any{"name": fmt.Sprint("by ", w)}
				case "role":
					path, body = fmt.Sprintf("/roles/race-%d/create", round), map[string]any{"name": fmt.Sprint("by ", w), "permissions": []string{}}
				case "user": // the same username, in different cases
					name := []string{"Racer_%d", "racer_%d", "RACER_%d"}[w%3]
					path, body = "/users", map[string]any{"username": fmt.Sprintf(name, round)}
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					status, data, err := call(c, bases[w%len(bases)], "POST", path, token, body)
					if err != nil {
						t.Errorf("%s: %v", path, err)
						return
					}
					statuses[w] = status
					if status == http.StatusCreated {
						var it item
						_ = json.Unmarshal(data, &it)
						ids[w] = it.ID
					} else if status != http.StatusConflict {
						t.Errorf("%s: status %d, want 201 or 409; body %s", path, status, data)
					}
				}()
			}
			close(start)
			wg.Wait()
			var won []int
			for w, st := range statuses {
				if st == http.StatusCreated {
					won = append(won, w)
				}
			}
			if len(won) != 1 {
				t.Errorf("round %d, %s: %d writers got 201 (%v), want exactly 1", round, kind, len(won), won)
				continue
			}
			// The winner's write is the one stored.
			winner := won[0]
			switch kind {
			case "channel":
				got := decode[item](t, must(t, c, bases[0], http.StatusOK, "GET", fmt.Sprintf("/channels/race-%d", round), token, nil))
				if got.Name != fmt.Sprint("by ", winner) {
					t.Errorf("channel race-%d is named %q, the winner was writer %d", round, got.Name, winner)
				}
			case "role":
				got := decode[item](t, must(t, c, bases[0], http.StatusOK, "GET", fmt.Sprintf("/roles/race-%d", round), token, nil))
				if got.Name != fmt.Sprint("by ", winner) {
					t.Errorf("role race-%d is named %q, the winner was writer %d", round, got.Name, winner)
				}
			case "user":
				n := 0
				for _, u := range listAll(t, c, bases[0], "/users", token) {
					if strings.EqualFold(u.Username, fmt.Sprintf("racer_%d", round)) {
						n++
						if u.ID != ids[winner] {
							t.Errorf("user %s has ID %s, the winner got %s", u.Username, u.ID, ids[winner])
						}
					}
				}
				if n != 1 {
					t.Errorf("%d users named racer_%d (ignoring case), want 1", n, round)
				}
			}
		}
	}
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// diff lists up to 10 differences between got and want.
func diff(got, want map[string]string) string {
	var out []string
	for k, v := range want {
		if g, ok := got[k]; !ok {
			out = append(out, fmt.Sprintf("  missing %s=%q", k, v))
		} else if g != v {
			out = append(out, fmt.Sprintf("  %s = %q, want %q", k, g, v))
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok {
			out = append(out, fmt.Sprintf("  unexpected %s=%q", k, v))
		}
	}
	sort.Strings(out)
	if len(out) > 10 {
		out = append(out[:10], fmt.Sprintf("  … and %d more", len(out)-10))
	}
	return strings.Join(out, "\n")
}
