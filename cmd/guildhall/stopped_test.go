package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/guildhall/guildhall/internal/testenv"
)

// TestStoppedInstanceHoldsWritesBriefly stops (SIGSTOP) an instance in the
// middle of a large write, its transaction open and the write lock held,
// beside another instance on the same PostgreSQL database
// (docs/postgres.md): the other's writes succeed again within 10 s, its
// /readyz says 503 while they cannot and 200 once they can; once resumed,
// the stopped instance's client has had an error, its write is not half
// done, and it serves again.
//
// The bound is the requirement of the fault (with a second of slack for a
// busy machine), not a speed target.
func TestStoppedInstanceHoldsWritesBriefly(t *testing.T) {
	t.Parallel()
	s := newStore(t, testenv.Postgres)
	named := func(app string) storeDir {
		u, err := url.Parse(s.dbURL)
		if err != nil {
			t.Fatal(err)
		}
		q := u.Query()
		q.Set("application_name", app)
		u.RawQuery = q.Encode()
		d := s
		d.dbURL = u.String()
		return d
	}
	c := newClient(t)
	long := *c
	long.Timeout = 60 * time.Second // a request of the stopped instance waits for it
	one := start(t, "one", named("gh-one")).ready(t, c)
	// The second instance's writes give up after a second, so that while the
	// lock is held they fail one after the other rather than wait it out.
	two := start(t, "two", named("gh-two"), "GUILDHALL_DB_TIMEOUT=1s").ready(t, c)
	defer func() { _ = one.cmd.Process.Signal(syscall.SIGCONT) }()

	const n = 500
	channels := make([]map[string]any, n)
	for i := range channels {
		channels[i] = map[string]any{"id": fmt.Sprintf("c%03d", i), "name": fmt.Sprintf("Channel %d", i), "kind": "text",
			"parent_id": nil, "position": i, "topic": nil, "overwrites": []any{}}
	}
	must(t, c, one.URL, http.StatusOK, "POST", "/import", s.token, map[string]any{"format": "guildhall-template/1",
		"global_permissions": []string{"VIEW_CHANNEL"}, "roles": []any{}, "channels": channels})
	must(t, c, two.URL, http.StatusCreated, "POST", "/roles/small/create", s.token, map[string]any{"name": "small", "permissions": []string{}})
	smallWrite := func(name string) (int, []byte, error) {
		return call(c, two.URL, "POST", "/roles/small/rename", s.token, map[string]any{"name": name})
	}

	// The first instance loops reorders of every channel, forward then
	// backward, until told to stop; each answer is kept.
	reorder := func(v int) map[string]any {
		moves := make([]map[string]any, n)
		for i := range moves {
			p := i
			if v%2 == 1 {
				p = n - 1 - i
			}
			moves[i] = map[string]any{"id": fmt.Sprintf("c%03d", i), "position": p}
		}
		return map[string]any{"positions": moves}
	}
	var (
		mu      sync.Mutex
		enough  bool
		answers []string
	)
	looped := make(chan struct{})
	go func() {
		defer close(looped)
		for v := 1; ; v++ {
			mu.Lock()
			stop := enough
			mu.Unlock()
			if stop {
				return
			}
			status, body, err := call(&long, one.URL, "POST", "/channels/reorder", s.token, reorder(v))
			if status == http.StatusOK {
				body = nil
			}
			mu.Lock()
			answers = append(answers, fmt.Sprintf("%d %v %s", status, err, body))
			mu.Unlock()
		}
	}()

	// Stop it at random moments until it is stopped holding the write lock
	// (a granted advisory lock of one of its sessions), for good: still held
	// a moment later.
	ctx := context.Background()
	db, err := pgx.Connect(ctx, testenv.PostgresURL())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(ctx)
	holds := func() bool {
		var k int
		err := db.QueryRow(ctx, `SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
			WHERE l.locktype = 'advisory' AND l.granted AND a.application_name = 'gh-one'`).Scan(&k)
		if err != nil {
			t.Fatal(err)
		}
		return k > 0
	}
	var stoppedAt time.Time
	for attempt := 0; ; attempt++ {
		if attempt == 200 {
			t.Fatal("the first instance never stopped holding the write lock in 200 tries")
		}
		time.Sleep(time.Duration(20+rand.IntN(80)) * time.Millisecond)
		if err := one.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		stoppedAt = time.Now()
		if holds() {
			time.Sleep(200 * time.Millisecond)
			if holds() {
				t.Logf("stopped holding the write lock at try %d", attempt+1)
				break
			}
		}
		if err := one.cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	enough = true
	before := len(answers)
	mu.Unlock()

	// The second instance: a small write, then /readyz, over and over until
	// a write succeeds. /readyz may say 200 only when writes succeed.
	var (
		recovered time.Duration
		notReady  int
	)
	for i := 0; recovered == 0; i++ {
		if time.Since(stoppedAt) > 20*time.Second {
			t.Fatalf("the second instance's writes still fail %v after the first stopped", time.Since(stoppedAt))
		}
		status, body, err := smallWrite(fmt.Sprintf("Small %d", i))
		switch {
		case err == nil && status == http.StatusOK:
			recovered = time.Since(stoppedAt)
			continue
		case err != nil || status != http.StatusServiceUnavailable:
			t.Fatalf("a write on the second instance while the first is stopped: %d %v %s; want 503 or 200", status, err, body)
		}
		ready, _, _, took := get(c, two.URL+"/readyz", "")
		if ready == http.StatusOK {
			// Then the next write must succeed.
			if st, body, err := smallWrite("ready"); err != nil || st != http.StatusOK {
				t.Fatalf("/readyz of the second instance said 200 (%v after the stop), and its next write: %d %v %s", time.Since(stoppedAt), st, err, body)
			}
			recovered = time.Since(stoppedAt)
			continue
		}
		if ready != http.StatusServiceUnavailable {
			t.Fatalf("/readyz of the second instance: %d", ready)
		}
		if took > 2*time.Second {
			t.Errorf("/readyz of the second instance took %v", took)
		}
		notReady++
	}
	t.Logf("the second instance's writes succeed again %v after the first stopped; /readyz said 503 %d times before", recovered, notReady)
	if recovered > 11*time.Second {
		t.Errorf("the second instance's writes succeeded again %v after the first stopped; want within 10 s", recovered)
	}
	if notReady == 0 {
		t.Error("/readyz of the second instance never said 503 while its writes failed")
	}
	if st, _, _, _ := get(c, two.URL+"/readyz", ""); st != http.StatusOK {
		t.Errorf("/readyz of the second instance once its writes succeed: %d, want 200", st)
	}

	// The first instance resumes: the request of the stopped transaction
	// fails, and nothing of it was done.
	if err := one.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-looped:
	case <-time.After(30 * time.Second):
		t.Fatal("the stopped instance's request did not end within 30 s of its resuming")
	}
	mu.Lock()
	last := answers[len(answers)-1]
	if len(answers) != before+1 || last[:3] != "503" {
		t.Errorf("the request of the stopped transaction: %q (%d answers, %d before the stop); want one, a 503", last, len(answers), before)
	}
	mu.Unlock()
	positions := map[int]int{} // which order each channel is in: 0 forward, 1 backward
	for _, ch := range listAll(t, c, two.URL, "/channels", s.token) {
		var i int
		if _, err := fmt.Sscanf(ch.ID, "c%03d", &i); err != nil {
			continue
		}
		switch ch.Position {
		case i:
			positions[0]++
		case n - 1 - i:
			positions[1]++
		}
	}
	if positions[0] != n && positions[1] != n {
		t.Errorf("the channels are half reordered: %d forward, %d backward of %d", positions[0], positions[1], n)
	}
	back := eventually(t, 15*time.Second, "the resumed instance writes again", func() bool {
		st, _, _ := call(c, one.URL, "POST", "/channels/reorder", s.token, reorder(0))
		return st == http.StatusOK
	})
	t.Logf("the resumed instance wrote again %v after its first answer", back)
	if st, _, _, _ := get(c, one.URL+"/readyz", ""); st != http.StatusOK {
		t.Errorf("/readyz of the resumed instance: %d, want 200", st)
	}
}

// TestStoppedReaderHearsOnResume: beside an instance that answers reads
// from memory under its lease (docs/design.md, "Leases"), a second
// instance's revocation and grant govern the first's next request after
// it is resumed from SIGSTOP: stopped for less than a lease (the write
// waits for it to hear) and for more (the write goes on once its lease ran
// out, and it asks until it holds one again). The write's wait is bounded
// by the lease, with slack for a busy machine; a requirement, not a speed
// target.
func TestStoppedReaderHearsOnResume(t *testing.T) {
	t.Parallel()
	s := newStore(t, testenv.Postgres)
	c := newClient(t)
	reader := start(t, "reader", s).ready(t, c)
	writer := start(t, "writer", s).ready(t, c)
	defer func() { _ = reader.cmd.Process.Signal(syscall.SIGCONT) }()
	owner := s.token
	uid := decode[item](t, must(t, c, writer.URL, http.StatusCreated, "POST", "/users", owner, map[string]any{"username": "ann"})).ID
	user := decode[struct{ Token string }](t, must(t, c, writer.URL, http.StatusCreated, "POST", "/users/"+uid+"/tokens", owner, map[string]any{"name": "t"})).Token
	must(t, c, writer.URL, http.StatusCreated, "POST", "/roles/auditors/create", owner, map[string]any{"name": "Auditors", "permissions": []string{"VIEW_AUDIT_LOG"}})
	must(t, c, writer.URL, http.StatusNoContent, "POST", "/users/"+uid+"/roles/auditors", owner, nil)

	for i, stopped := range []time.Duration{300 * time.Millisecond, 3 * time.Second, 100 * time.Millisecond, 2500 * time.Millisecond} {
		grant := i%2 == 1
		perms, before, after := []string{}, http.StatusOK, http.StatusForbidden
		if grant {
			perms, before, after = []string{"VIEW_AUDIT_LOG"}, http.StatusForbidden, http.StatusOK
		}
		for range 5 { // warm: the reader answers from memory
			must(t, c, reader.URL, before, "GET", "/audit-log?limit=1", user, nil)
		}
		time.Sleep(100 * time.Millisecond) // a heartbeat or two: the lease is held
		must(t, c, reader.URL, before, "GET", "/audit-log?limit=1", user, nil)
		if err := reader.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		began := time.Now()
		done := make(chan error, 1)
		go func() {
			status, body, err := call(c, writer.URL, "PUT", "/roles/auditors/permissions", owner, map[string]any{"permissions": perms})
			if err == nil && status != http.StatusOK {
				err = fmt.Errorf("status %d: %s", status, body)
			}
			done <- err
		}()
		time.Sleep(stopped)
		if err := reader.cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatalf("round %d: the change on the writer: %v", i, err)
		}
		if took := time.Since(began); took > stopped+5*time.Second {
			t.Fatalf("round %d: the change took %v beside an instance stopped for %v", i, took, stopped)
		}
		if st, body, err := call(c, reader.URL, "GET", "/audit-log?limit=1", user, nil); err != nil || st != after {
			t.Fatalf("round %d (stopped %v): the resumed reader's next request answers %d %s (%v), want %d", i, stopped, st, body, err, after)
		}
	}
}
