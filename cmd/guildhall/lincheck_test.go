package main

// The history checker: clients grant, revoke and check permissions through
// two `guildhall serve` processes on one PostgreSQL database while faults
// are injected, every operation is recorded with the moments it was sent
// and answered, and porcupine (github.com/anishathalye/porcupine) checks
// that the history is linearizable: that every check saw the state left by
// the grants and revocations in some order that respects real time, as one
// copy of the data would. It is what the store's freshness rule promises
// (docs/postgres.md): a change acknowledged by one instance governs the
// very next request on the other.

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/guildhall/guildhall/internal/testenv"
)

// The keys of the model. Each is one permission of one user that one write
// sets and one read observes, so each is a register of its own, and a
// check depends on no other key:
//   - the user's overwrite in a channel of the "ow-" kind: everyone is
//     denied VIEW_CHANNEL there, and the user's own overwrite allows it or
//     is absent;
//   - the user's membership of a role: each role "r<n>" is the only one
//     allowed VIEW_CHANNEL in its channel "rl-<n>", where everyone is denied
//     it.
const (
	linUsers    = 3
	linChannels = 2 // "ow-0", "ow-1"
	linRoles    = 2 // "r0", "r1", with the channels "rl-0", "rl-1"
	linClients  = 6
)

type linKey struct {
	user int
	role bool // false: overwrite in "ow-<n>"; true: membership of "r<n>"
	n    int
}

func (k linKey) String() string {
	if k.role {
		return fmt.Sprintf("u%d in role r%d", k.user, k.n)
	}
	return fmt.Sprintf("u%d's overwrite in #ow-%d", k.user, k.n)
}

// channel is where the key decides VIEW_CHANNEL.
func (k linKey) channel() string {
	if k.role {
		return fmt.Sprintf("rl-%d", k.n)
	}
	return fmt.Sprintf("ow-%d", k.n)
}

func linKeys() []linKey {
	var keys []linKey
	for u := range linUsers {
		for n := range linChannels {
			keys = append(keys, linKey{user: u, n: n})
		}
		for n := range linRoles {
			keys = append(keys, linKey{user: u, role: true, n: n})
		}
	}
	return keys
}

type linOp uint8

const (
	linGrant linOp = iota
	linRevoke
	linCheck
)

type linInput struct {
	key linKey
	op  linOp
}

// linOutput is a check's answer; a write's has none. A write whose outcome
// is unknown (no answer, or a 5xx) is recorded as never returning, which
// lets the checker place it anywhere after it was sent, or nowhere.
type linOutput struct {
	granted bool
	unknown bool
}

// linMeta says where an operation went, for the visualization.
type linMeta struct {
	via    string // instance A or B
	how    string // checks: "self" (the user's GET of the channel) or "owner" (GET …/permissions)
	answer string
}

// linModel: each key is a register holding whether the permission is
// granted (initially not); a grant sets it, a revocation clears it, a check
// must see it.
var linModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[linKey][]porcupine.Operation{}
		var order []linKey
		for _, op := range history {
			k := op.Input.(linInput).key
			if _, ok := byKey[k]; !ok {
				order = append(order, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		parts := make([][]porcupine.Operation, 0, len(order))
		for _, k := range order {
			parts = append(parts, byKey[k])
		}
		return parts
	},
	Init: func() any { return false },
	Step: func(state, input, output any) (bool, any) {
		switch in := input.(linInput); in.op {
		case linGrant:
			return true, true
		case linRevoke:
			return true, false
		default:
			return output.(linOutput).granted == state.(bool), state
		}
	},
	Hash: func(state any) uint64 {
		if state.(bool) {
			return 1
		}
		return 0
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(linInput), output.(linOutput)
		switch {
		case in.op == linCheck:
			return fmt.Sprintf("check %s -> %s", in.key, grantedWord(out.granted))
		case out.unknown:
			return fmt.Sprintf("%s %s (outcome unknown)", in.op, in.key)
		}
		return fmt.Sprintf("%s %s", in.op, in.key)
	},
	DescribeState: func(state any) string { return grantedWord(state.(bool)) },
	DescribeOperationMetadata: func(info any) string {
		m := info.(linMeta)
		if m.how != "" {
			return fmt.Sprintf("on %s, as %s: %s", m.via, m.how, m.answer)
		}
		return fmt.Sprintf("on %s: %s", m.via, m.answer)
	},
}

func (o linOp) String() string {
	return [...]string{"grant", "revoke", "check"}[o]
}

func grantedWord(g bool) string {
	if g {
		return "granted"
	}
	return "not granted"
}

// linUser is a user of the workload, with their token.
type linUser struct{ id, token string }

// linWorld is two instances on one database and the history of what
// clients did through them.
type linWorld struct {
	t       *testing.T
	c       *http.Client
	bin     string
	env     []string
	owner   string
	users   []linUser
	keys    []linKey
	names   [2]string
	stores  [2]storeDir
	proxies [2]*dbProxy
	slots   [2]atomic.Pointer[instance] // nil while the instance is down
	starts  [2]int
	served  [2]atomic.Int64 // answers that were not failures, per instance
	begin   time.Time
	clients atomic.Int64 // porcupine client IDs handed out

	mu       sync.Mutex
	ops      []porcupine.Operation
	counts   map[string]int // operations recorded, by kind
	dropped  int            // checks that failed (no answer, 503): they tell nothing
	statuses map[string]int // failures, by answer
}

// newLinWorld starts instances A and B of bin on the database at dbURL,
// each connected through a proxy of its own, and sets the scene up
// through A.
func newLinWorld(t *testing.T, bin, dbURL string) *linWorld {
	t.Helper()
	w := &linWorld{t: t, bin: bin, names: [2]string{"A", "B"}, keys: linKeys(),
		counts: map[string]int{}, statuses: map[string]int{},
		// Faults answer 503 within two seconds rather than five.
		env: []string{"GUILDHALL_DB_TIMEOUT=2s"}}
	tr := &http.Transport{MaxIdleConns: 64, MaxIdleConnsPerHost: 32, IdleConnTimeout: 30 * time.Second}
	t.Cleanup(tr.CloseIdleConnections)
	w.c = &http.Client{Transport: testenv.CheckedTransport(t, tr), Timeout: 10 * time.Second}
	w.owner = "gh_lin_" + strings.Repeat("o", 32)
	w.clients.Store(linClients)
	for i := range 2 {
		u, p := viaProxy(t, dbURL)
		w.proxies[i] = p
		w.stores[i] = storeDir{kind: testenv.Postgres, dataDir: t.TempDir(), dbURL: u, token: w.owner}
	}
	for i := range 2 { // one after the other: A migrates and bootstraps
		w.slots[i].Store(w.launch(i))
	}
	a := w.slots[0].Load().URL
	for u := range linUsers {
		id := decode[item](t, must(t, w.c, a, http.StatusCreated, "POST", "/users", w.owner, map[string]any{"username": fmt.Sprintf("lin-u%d", u)})).ID
		tok := decode[struct{ Token string }](t, must(t, w.c, a, http.StatusCreated, "POST", "/users/"+id+"/tokens", w.owner, map[string]any{"name": "lin"}))
		w.users = append(w.users, linUser{id: id, token: tok.Token})
	}
	overwrite := func(ch, targetType, targetID string, allow, deny []string) {
		body := map[string]any{"target_type": targetType, "allow": allow, "deny": deny}
		if targetID != "" {
			body["target_id"] = targetID
		}
		must(t, w.c, a, http.StatusOK, "POST", "/channels/"+ch+"/permissions", w.owner, body)
	}
	for n := range linChannels {
		ch := fmt.Sprintf("ow-%d", n)
		must(t, w.c, a, http.StatusCreated, "POST", "/channels/"+ch+"/create", w.owner, map[string]any{"name": ch})
		overwrite(ch, "everyone", "", []string{}, []string{"VIEW_CHANNEL"})
	}
	for n := range linRoles {
		role, ch := fmt.Sprintf("r%d", n), fmt.Sprintf("rl-%d", n)
		must(t, w.c, a, http.StatusCreated, "POST", "/roles/"+role+"/create", w.owner, map[string]any{"name": role, "permissions": []string{}})
		must(t, w.c, a, http.StatusCreated, "POST", "/channels/"+ch+"/create", w.owner, map[string]any{"name": ch})
		overwrite(ch, "everyone", "", []string{}, []string{"VIEW_CHANNEL"})
		overwrite(ch, "role", role, []string{"VIEW_CHANNEL"}, []string{})
	}
	// Every key starts not granted, acknowledged before the history begins.
	w.begin = time.Now()
	return w
}

// launch starts instance i and waits until it is ready.
func (w *linWorld) launch(i int) *instance {
	w.starts[i]++
	name := fmt.Sprintf("%s%d", w.names[i], w.starts[i])
	return startBinary(w.t, w.bin, name, w.stores[i], w.env...).ready(w.t, w.c)
}

func (w *linWorld) now() int64 { return time.Since(w.begin).Nanoseconds() }

// pick returns a live instance, another than avoid when it can.
func (w *linWorld) pick(rng *rand.Rand, avoid int) (int, *instance) {
	first := rng.IntN(2)
	if avoid >= 0 {
		first = 1 - avoid
	}
	for _, i := range []int{first, 1 - first} {
		if in := w.slots[i].Load(); in != nil {
			return i, in
		}
	}
	return -1, nil
}

func (w *linWorld) record(op porcupine.Operation, kind string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.ops = append(w.ops, op)
	w.counts[kind]++
}

func (w *linWorld) failed(what string, checkDropped bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.statuses[what]++
	if checkDropped {
		w.dropped++
	}
}

// answer names a failed request's outcome: its status, or the error.
func answer(status int, err error) string {
	switch {
	case err == nil:
		return fmt.Sprint(status)
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	}
	if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
		return "client timeout"
	}
	return "connection error"
}

// write grants or revokes k through instance i and records it. It returns
// the client ID to go on with (a new one after an outcome that is unknown:
// the operation never returns, as far as the history knows), and whether
// the write was answered.
func (w *linWorld) write(cid, i int, in *instance, k linKey, op linOp) (int, bool) {
	u := w.users[k.user]
	var method, path string
	var body any
	want := http.StatusNoContent
	switch {
	case k.role && op == linGrant:
		method, path = "POST", "/users/"+u.id+"/roles/"+fmt.Sprintf("r%d", k.n)
	case k.role:
		method, path = "DELETE", "/users/"+u.id+"/roles/"+fmt.Sprintf("r%d", k.n)
	default:
		allow := []string{}
		if op == linGrant {
			allow = []string{"VIEW_CHANNEL"}
		}
		method, path, want = "POST", "/channels/"+k.channel()+"/permissions", http.StatusOK
		body = map[string]any{"target_type": "user", "target_id": u.id, "allow": allow, "deny": []string{}}
	}
	sent := w.now()
	status, data, err := call(w.c, in.URL, method, path, w.owner, body)
	ret := w.now()
	meta := linMeta{via: w.names[i], answer: answer(status, err)}
	input := linInput{key: k, op: op}
	switch {
	case err == nil && status == want:
		w.served[i].Add(1)
		w.record(porcupine.Operation{ClientId: cid, Input: input, Call: sent, Output: linOutput{}, Return: ret, Metadata: meta}, op.String())
		return cid, true
	case errors.Is(err, syscall.ECONNREFUSED):
		// Never sent: the instance had just been killed.
		w.failed("write: "+meta.answer, false)
		return cid, false
	case err == nil && status < 500:
		w.t.Errorf("%s %s on %s: %d %s", method, path, w.names[i], status, data)
	}
	w.failed("write: "+meta.answer, false)
	w.record(porcupine.Operation{ClientId: cid, Input: input, Call: sent, Output: linOutput{unknown: true}, Return: math.MaxInt64, Metadata: meta}, "unknown")
	return int(w.clients.Add(1)) - 1, false
}

// check reads k through instance i, as the user (GET of the channel: 200
// or, not allowed to view it, 404) or as the owner (the user's effective
// permissions in the channel), and records it; a check that fails is
// dropped. It returns whether it was answered.
func (w *linWorld) check(cid, i int, in *instance, k linKey, asOwner bool) bool {
	u := w.users[k.user]
	meta := linMeta{via: w.names[i], how: "self"}
	path, token := "/channels/"+k.channel(), u.token
	if asOwner {
		meta.how = "owner"
		path, token = "/users/"+u.id+"/permissions?channelID="+k.channel(), w.owner
	}
	sent := w.now()
	status, data, err := call(w.c, in.URL, "GET", path, token, nil)
	ret := w.now()
	var granted bool
	switch {
	case err != nil || status >= 500:
		w.failed("check: "+answer(status, err), true)
		return false
	case asOwner && status == http.StatusOK:
		var p struct{ Permissions []string }
		if err := json.Unmarshal(data, &p); err != nil {
			w.t.Errorf("GET %s on %s: %v: %s", path, w.names[i], err, data)
			return false
		}
		granted = slices.Contains(p.Permissions, "VIEW_CHANNEL")
	case !asOwner && (status == http.StatusOK || status == http.StatusNotFound):
		granted = status == http.StatusOK
	default:
		w.t.Errorf("GET %s on %s: %d %s", path, w.names[i], status, data)
		w.failed("check: "+answer(status, err), true)
		return false
	}
	w.served[i].Add(1)
	meta.answer = fmt.Sprint(status)
	w.record(porcupine.Operation{ClientId: cid, Input: linInput{key: k, op: linCheck}, Call: sent,
		Output: linOutput{granted: granted}, Return: ret, Metadata: meta}, "check")
	return true
}

// client runs the workload until stop is closed: a third of its
// operations write a key and then check it at once on the other instance
// (the read a stale cache would get wrong), the rest check a key. After a
// failure it pauses a little, as a client would, rather than spin on an
// instance whose database is away.
func (w *linWorld) client(id int, seed uint64, stop <-chan struct{}) {
	rng := rand.New(rand.NewPCG(seed, uint64(id)))
	cid := id
	for {
		select {
		case <-stop:
			return
		default:
		}
		ok := false
		k := w.keys[rng.IntN(len(w.keys))]
		if i, in := w.pick(rng, -1); in != nil {
			ok = true
			if rng.IntN(3) == 0 {
				op := linGrant
				if rng.IntN(2) == 0 {
					op = linRevoke
				}
				cid, ok = w.write(cid, i, in, k, op)
				i, in = w.pick(rng, i)
			}
			if in != nil {
				ok = w.check(cid, i, in, k, rng.IntN(2) == 0) && ok
			}
		}
		if !ok {
			time.Sleep(25 * time.Millisecond) // a client's pause after a failure
		}
	}
}

// run runs the clients until stop is closed, and returns when they are done.
func (w *linWorld) run(seed uint64) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for id := range linClients {
		wg.Go(func() { w.client(id, seed, done) })
	}
	return func() {
		close(done)
		wg.Wait()
	}
}

// awaitServed waits until every live instance has answered n more
// requests than at marks, the sign that it serves again after a fault.
func (w *linWorld) awaitServed(marks [2]int64, n int64, within time.Duration, after string) {
	w.t.Helper()
	deadline := time.Now().Add(within)
	for i := range 2 {
		for w.slots[i].Load() != nil && w.served[i].Load() < marks[i]+n {
			if time.Now().After(deadline) {
				w.t.Fatalf("instance %s did not serve again within %v after %s: %d answers of %d", w.names[i], within, after, w.served[i].Load()-marks[i], n)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

func (w *linWorld) marks() [2]int64 { return [2]int64{w.served[0].Load(), w.served[1].Load()} }

// history returns what was recorded so far.
func (w *linWorld) history() []porcupine.Operation {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.ops)
}

// summary says how many operations of each kind were recorded.
func (w *linWorld) summary() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, c := range w.counts {
		n += c
	}
	s := fmt.Sprintf("%d operations (%d checks, %d grants, %d revocations, %d writes of unknown outcome; %d failed checks dropped) on %d keys through 2 instances",
		n, w.counts["check"], w.counts["grant"], w.counts["revoke"], w.counts["unknown"], w.dropped, len(w.keys))
	if len(w.statuses) > 0 {
		var parts []string
		for k, c := range w.statuses {
			parts = append(parts, fmt.Sprintf("%s ×%d", k, c))
		}
		slices.Sort(parts)
		s += "; failures: " + strings.Join(parts, ", ")
	}
	return s
}

// linCheckResult is porcupine's verdict on a history.
type linCheckResult struct {
	result porcupine.CheckResult
	info   porcupine.LinearizationInfo
	took   time.Duration
	bad    []linKey // the keys whose history is not linearizable
}

// checkHistory runs porcupine on the history, bounded in time.
func checkHistory(ops []porcupine.Operation) linCheckResult {
	start := time.Now()
	res, info := porcupine.CheckOperationsVerbose(linModel, ops, 60*time.Second)
	r := linCheckResult{result: res, info: info, took: time.Since(start)}
	if res == porcupine.Illegal {
		for _, part := range linModel.Partition(ops) {
			if !porcupine.CheckOperations(linModel, part) {
				r.bad = append(r.bad, part[0].Input.(linInput).key)
			}
		}
	}
	return r
}

// staleRead finds, among the operations of one key, a check that no write
// can explain: each write that may have come last before it (one that
// returned before the check was sent and was not followed by another that
// did, or one in flight, or one whose outcome is unknown) left the other
// value. It describes the check and the write it missed.
func staleRead(ops []porcupine.Operation) (string, bool) {
	var writes []porcupine.Operation
	for _, op := range ops {
		if op.Input.(linInput).op != linCheck {
			writes = append(writes, op)
		}
	}
	for _, c := range ops {
		if c.Input.(linInput).op != linCheck {
			continue
		}
		possible := map[bool]bool{}
		var last *porcupine.Operation
		for j := range writes {
			w := &writes[j]
			if w.Call > c.Return {
				continue
			}
			if w.Return >= c.Call {
				possible[w.Input.(linInput).op == linGrant] = true
				continue
			}
			if last == nil || w.Return > last.Return {
				last = w
			}
			superseded := false
			for _, w2 := range writes {
				if w2.Call > w.Return && w2.Return < c.Call {
					superseded = true
					break
				}
			}
			if !superseded {
				possible[w.Input.(linInput).op == linGrant] = true
			}
		}
		if last == nil {
			possible[false] = true // the initial state
		}
		if got := c.Output.(linOutput).granted; !possible[got] {
			cm := c.Metadata.(linMeta)
			msg := fmt.Sprintf("a check of %s on %s (as %s: %s), sent at %s, saw %s",
				c.Input.(linInput).key, cm.via, cm.how, cm.answer, seconds(c.Call), grantedWord(got))
			if last != nil {
				msg += fmt.Sprintf(", though the %s through %s had been answered %s before, and no write of that key could come between",
					last.Input.(linInput).op, last.Metadata.(linMeta).via, gap(c.Call-last.Return))
			}
			return msg, true
		}
	}
	return "", false
}

func seconds(ns int64) string { return fmt.Sprintf("%.1f ms", float64(ns)/1e6) }

func gap(ns int64) string {
	if ns < 1e6 {
		return fmt.Sprintf("%d µs", ns/1e3)
	}
	return seconds(ns)
}

// visualize writes porcupine's HTML view of the history to
// .ci/artifacts/lincheck/name (kept by CI) and returns its path.
func visualize(t *testing.T, r linCheckResult, name string) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "..", ".ci", "artifacts", "lincheck"))
	if err == nil {
		err = os.MkdirAll(dir, 0o755)
	}
	if err != nil {
		t.Logf("no visualization: %v", err)
		return ""
	}
	path := filepath.Join(dir, name)
	if err := porcupine.VisualizePath(linModel, r.info, path); err != nil {
		t.Logf("no visualization: %v", err)
		return ""
	}
	return path
}

// explain describes each key whose history is not linearizable.
func explain(ops []porcupine.Operation, bad []linKey) []string {
	var out []string
	for _, k := range bad {
		var mine []porcupine.Operation
		for _, op := range ops {
			if op.Input.(linInput).key == k {
				mine = append(mine, op)
			}
		}
		if msg, ok := staleRead(mine); ok {
			out = append(out, msg)
		} else {
			out = append(out, fmt.Sprintf("%s: no single stale check explains it; see the visualization", k))
		}
	}
	return out
}

// linFault is one fault of the schedule.
type linFault struct {
	kind string
	what string
	do   func()
}

// TestLinearizable records grants, revocations and checks of 6 clients
// against two instances on one PostgreSQL database while faults are
// injected one after the other, each followed by traffic until both
// instances serve again: a delay on one instance's database connection,
// every database connection of an instance cut, kill -9 of an instance
// (restarted on the same database), and a crash and restart of the
// database. Porcupine must find the history linearizable.
//
// The database restart needs a private PostgreSQL cluster (root, as in
// TestFaultDatabaseStoppedAndResumed); without one, cutting both
// instances' connections stands in for it, unless GUILDHALL_TEST_FAULTS=
// require, which fails instead. The other faults go through a TCP proxy of
// the test's own and always run.
func TestLinearizable(t *testing.T) {
	t.Parallel()
	var pg *cluster
	var dbURL string
	if _, _, err := privateClusterSetup(); err != nil {
		if os.Getenv("GUILDHALL_TEST_FAULTS") == "require" {
			t.Fatalf("the database restart needs a private cluster (GUILDHALL_TEST_FAULTS=require): %v", err)
		}
		t.Logf("no database restart: %v; cutting both instances' connections stands in for it (set GUILDHALL_TEST_FAULTS=require to make this fail)", err)
		dbURL = testenv.FreshPostgres(t)
	} else {
		pg = privateCluster(t)
		dbURL = pg.URL
	}
	w := newLinWorld(t, binary(t), dbURL)
	seed := uint64(time.Now().UnixNano())
	started := time.Now()

	delay := func(i int) linFault {
		return linFault{"db-delay", fmt.Sprintf("every packet between %s and the database held 30 ms, for 1.5 s", w.names[i]), func() {
			w.proxies[i].slow(30 * time.Millisecond)
			time.Sleep(1500 * time.Millisecond) // how long the fault lasts
			w.proxies[i].slow(0)
		}}
	}
	cut := func(is ...int) linFault {
		var names []string
		for _, i := range is {
			names = append(names, w.names[i])
		}
		return linFault{"db-cut", "the database connections of " + strings.Join(names, " and ") + " cut", func() {
			for _, i := range is {
				w.proxies[i].cut()
			}
		}}
	}
	kill := func(i int) linFault {
		return linFault{"kill-9", fmt.Sprintf("%s killed with SIGKILL and started again", w.names[i]), func() {
			w.slots[i].Swap(nil).kill()
			w.slots[i].Store(w.launch(i))
		}}
	}
	restart := func() linFault {
		if pg == nil {
			return cut(0, 1)
		}
		return linFault{"db-restart", "PostgreSQL crashed (pg_ctl -m immediate) and started again", func() {
			pg.crash()
			pg.start()
		}}
	}
	schedule := []linFault{delay(0), cut(1), kill(0), restart(), delay(1), cut(0), kill(1), restart()}

	stop := w.run(seed)
	stopped := false
	defer func() {
		if !stopped {
			stop()
		}
	}()
	w.awaitServed([2]int64{}, 20, 20*time.Second, "the start")
	faults := map[string]int{}
	for _, f := range schedule {
		f.do()
		faults[f.kind]++
		// Both instances serve again, with some traffic before the next.
		w.awaitServed(w.marks(), 100, 30*time.Second, f.what)
	}
	stop()
	stopped = true
	// Last, every key checked on each instance, one at a time.
	rng, last := rand.New(rand.NewPCG(seed, 99)), int(w.clients.Add(1))-1
	for _, k := range w.keys {
		for i := range 2 {
			w.check(last, i, w.slots[i].Load(), k, rng.IntN(2) == 0)
		}
	}

	ops := w.history()
	r := checkHistory(ops)
	var kinds []string
	for _, k := range []string{"db-delay", "db-cut", "kill-9", "db-restart"} {
		if faults[k] > 0 {
			kinds = append(kinds, fmt.Sprintf("%d %s", faults[k], k))
		}
	}
	summary := fmt.Sprintf("%s; faults: %s; porcupine: %s in %v (run %v, seed %d)",
		w.summary(), strings.Join(kinds, ", "), r.result, r.took.Round(time.Millisecond), time.Since(started).Round(100*time.Millisecond), seed)
	switch r.result {
	case porcupine.Ok:
		t.Logf("linearizable: %s", summary)
	case porcupine.Illegal:
		path := visualize(t, r, "TestLinearizable.html")
		t.Fatalf("NOT linearizable: %s\n%s\nvisualization: %s", summary, strings.Join(explain(ops, r.bad), "\n"), path)
	default:
		t.Fatalf("the checker did not finish: %s", summary)
	}
	if w.counts["check"] < 500 || w.counts["grant"]+w.counts["revoke"] < 100 {
		t.Errorf("too little was checked to mean anything: %s", summary)
	}
	// A fault answers 503 (or no answer at all, from an instance killed);
	// a 500 is an error the fault did not explain.
	for what, n := range w.statuses {
		if _, status, _ := strings.Cut(what, ": "); status != "503" && !strings.HasPrefix(status, "connection") && status != "client timeout" {
			t.Errorf("%d answers %q during the faults: a fault should be a 503", n, what)
		}
	}
}

// TestLinearizableFindsStaleReads runs the same workload, without faults,
// against a build whose read cache skips its freshness question
// (internal/fresh's testOnlySkipFreshness, set at link time): the checker
// must find the history not linearizable, and name a stale check. It
// checks what was recorded every second and stops at the first violation;
// finding none within ten seconds fails.
func TestLinearizableFindsStaleReads(t *testing.T) {
	t.Parallel()
	bin := binaryLinked(t, "guildhall-skips-freshness",
		"-X github.com/guildhall/guildhall/internal/fresh.testOnlySkipFreshness=yes")
	w := newLinWorld(t, bin, testenv.FreshPostgres(t))
	seed := uint64(time.Now().UnixNano())
	stop := w.run(seed)
	defer stop()
	start := time.Now()
	for time.Since(start) < 10*time.Second {
		time.Sleep(time.Second) // how much history each check adds
		ops := w.history()
		r := checkHistory(ops)
		switch r.result {
		case porcupine.Ok:
			continue
		case porcupine.Illegal:
			path := visualize(t, r, "TestLinearizableFindsStaleReads.html")
			t.Logf("not linearizable with the freshness question skipped, as it must not be, after %v: %s; %d of %d keys; porcupine took %v (seed %d)",
				time.Since(start).Round(100*time.Millisecond), w.summary(), len(r.bad), len(w.keys), r.took.Round(time.Millisecond), seed)
			for _, msg := range explain(ops, r.bad) {
				t.Logf("  %s", msg)
			}
			t.Logf("visualization: %s", path)
			return
		default:
			t.Fatalf("the checker did not finish: %s", w.summary())
		}
	}
	t.Fatalf("no violation found in 10 s with the freshness question skipped: %s (seed %d)", w.summary(), seed)
}
