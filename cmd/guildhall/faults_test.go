package main

// The fault suite: real `guildhall serve` processes meet real
// faults. Cases that need root (a private PostgreSQL cluster run as the
// postgres user, a tmpfs) set it up themselves and skip with the reason when
// they cannot, unless GUILDHALL_TEST_FAULTS=require (as .ci/run sets), which
// makes them fail instead. The kill -9 cases are TestCrashDurability.

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/guildhall/guildhall/internal/fresh"
)

// needFault skips (or, with GUILDHALL_TEST_FAULTS=require, fails) a fault
// case whose set-up cannot be had here.
func needFault(t *testing.T, why string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if os.Getenv("GUILDHALL_TEST_FAULTS") == "require" {
		t.Fatalf("%s (GUILDHALL_TEST_FAULTS=require): %v", why, err)
	}
	t.Skipf("%s: %v; set GUILDHALL_TEST_FAULTS=require to make this fail", why, err)
}

// cluster is a private PostgreSQL cluster in a temporary directory, run by
// the postgres user on a free loopback port: the test may stop, freeze and
// restart it without touching the shared server.
type cluster struct {
	t    *testing.T
	bin  string
	dir  string
	port int
	cred *syscall.Credential
	URL  string
}

// privateClusterSetup finds what a private cluster needs: root (to run it
// as the postgres user), initdb and that user. The error says what is
// missing.
func privateClusterSetup() (bin string, cred *syscall.Credential, err error) {
	if os.Geteuid() != 0 {
		return "", nil, fmt.Errorf("a private PostgreSQL cluster needs root (to run it as the postgres user): euid %d", os.Geteuid())
	}
	initdbs, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(initdbs) == 0 {
		return "", nil, fmt.Errorf("a private PostgreSQL cluster needs initdb: no /usr/lib/postgresql/*/bin/initdb")
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return "", nil, fmt.Errorf("a private PostgreSQL cluster needs the postgres user: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return filepath.Dir(initdbs[len(initdbs)-1]), &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

func privateCluster(t *testing.T) *cluster {
	t.Helper()
	bin, cred, err := privateClusterSetup()
	needFault(t, "no private PostgreSQL cluster", err)
	dir, err := os.MkdirTemp("", "guildhall-pg-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	c := &cluster{t: t, bin: bin, dir: filepath.Join(dir, "data"), port: port, cred: cred,
		URL: fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)}
	t.Cleanup(func() {
		c.signal(syscall.SIGCONT)
		_ = c.run("pg_ctl", "-D", c.dir, "-m", "immediate", "stop")
		_ = os.RemoveAll(dir)
	})
	if err := c.run("initdb", "-D", c.dir, "-A", "trust", "-U", "postgres", "--no-sync"); err != nil {
		t.Fatalf("initdb: %v", err)
	}
	c.start()
	return c
}

func (c *cluster) run(tool string, args ...string) error {
	cmd := exec.Command(filepath.Join(c.bin, tool), args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	cmd.Dir = "/"
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %v\n%s", tool, err, out)
	}
	return nil
}

func (c *cluster) start() {
	c.t.Helper()
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off", c.port, c.dir)
	if err := c.run("pg_ctl", "-D", c.dir, "-o", opts, "-l", filepath.Join(c.dir, "log"), "-w", "start"); err != nil {
		c.t.Fatalf("start the private cluster: %v", err)
	}
}

func (c *cluster) stop() {
	c.t.Helper()
	if err := c.run("pg_ctl", "-D", c.dir, "-m", "fast", "-w", "stop"); err != nil {
		c.t.Fatalf("stop the private cluster: %v", err)
	}
}

// crash stops the cluster the way a crash would (pg_ctl -m immediate): no
// shutdown checkpoint, and the next start recovers from the WAL.
func (c *cluster) crash() {
	c.t.Helper()
	if err := c.run("pg_ctl", "-D", c.dir, "-m", "immediate", "-w", "stop"); err != nil {
		c.t.Fatalf("crash the private cluster: %v", err)
	}
}

// signal sends sig to the postmaster and all its children (SIGSTOP freezes
// the database: connections stay open, nothing answers). To freeze, the
// postmaster stops first, and its children are listed only once it has: a
// connection it forked while they were being listed would escape and go
// on answering. It returns once every one of them has stopped.
func (c *cluster) signal(sig syscall.Signal) {
	c.t.Helper()
	data, err := os.ReadFile(filepath.Join(c.dir, "postmaster.pid"))
	if err != nil {
		return
	}
	first, _, _ := strings.Cut(string(data), "\n")
	pm, _ := strconv.Atoi(strings.TrimSpace(first))
	if pm <= 0 {
		return
	}
	if sig != syscall.SIGSTOP {
		for pid := range children(pm) {
			_ = syscall.Kill(pid, sig)
		}
		_ = syscall.Kill(pm, sig)
		return
	}
	_ = syscall.Kill(pm, sig)
	deadline := time.Now().Add(5 * time.Second)
	for procState(pm) != "T" {
		if time.Now().After(deadline) {
			c.t.Fatalf("the postmaster %d did not stop", pm)
		}
		time.Sleep(time.Millisecond)
	}
	for {
		running := 0
		for pid, state := range children(pm) {
			if state != "T" {
				running++
				_ = syscall.Kill(pid, sig)
			}
		}
		if running == 0 {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%d processes of the cluster did not stop", running)
		}
		time.Sleep(time.Millisecond)
	}
}

// children lists the processes whose parent is pid, with their state
// (/proc/<pid>/stat: "R", "S", "T" for stopped, ...).
func children(pid int) map[int]string {
	kids := map[int]string{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if state, ppid := procStat(child); ppid == pid {
			kids[child] = state
		}
	}
	return kids
}

// procState is the state of process pid ("" when it is gone).
func procState(pid int) string {
	state, _ := procStat(pid)
	return state
}

func procStat(pid int) (state string, ppid int) {
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return "", 0
	}
	// pid (comm) state ppid ...
	fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	if len(fields) < 2 {
		return "", 0
	}
	ppid, _ = strconv.Atoi(fields[1])
	return fields[0], ppid
}

// get answers GET url with its status, problem code and duration (status 0
// when the request itself failed).
func get(c *http.Client, url, token string) (status int, code, retryAfter string, took time.Duration) {
	req, _ := http.NewRequest("GET", url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	start := time.Now()
	res, err := c.Do(req)
	took = time.Since(start)
	if err != nil {
		return 0, "", "", took
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	if i := bytes.Index(body, []byte(`"code":"`)); i >= 0 {
		rest := body[i+8:]
		code = string(rest[:bytes.IndexByte(rest, '"')])
	}
	return res.StatusCode, code, res.Header.Get("Retry-After"), took
}

// eventually polls until ok or the deadline, and reports how long it took.
func eventually(t *testing.T, within time.Duration, what string, ok func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !ok() {
		if time.Since(start) > within {
			t.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return time.Since(start)
}

// startOn starts an instance on the private cluster.
func startOn(t *testing.T, name string, pg *cluster, env ...string) (*instance, storeDir) {
	s := storeDir{kind: "postgres", dataDir: t.TempDir(), dbURL: pg.URL, token: "gh_fault_" + strings.Repeat("x", 32)}
	return start(t, name, s, env...), s
}

// TestFaultDatabaseFrozen freezes PostgreSQL (SIGSTOP of every process of
// a private cluster): requests, reads and writes at once, answer 503
// unavailable with Retry-After within the database timeout plus one second
// (docs/design.md §13) instead of hanging, except a read the instance may
// answer from memory while its lease runs (no write can be acknowledged
// without its hearing of it: docs/design.md, "Leases"), which answers 200
// then and 503 once the lease ran out; /readyz answers 503 within a
// second and a half, and once the database is thawed the instance serves
// again by itself, /readyz included: a request that waited for each of its statements' own
// timeouts would take several database timeouts.
// The time bounds are the requirement of a fault's answer, with a second of
// slack for a busy machine (less than the timeout, so a doubled wait still
// fails); not a speed target.
func TestFaultDatabaseFrozen(t *testing.T) {
	pg := privateCluster(t)
	c := newClient(t)
	const timeout = 3 * time.Second
	in, s := startOn(t, "frozen", pg, "GUILDHALL_DB_TIMEOUT=3s")
	in.ready(t, c)
	must(t, c, in.URL, http.StatusOK, "GET", "/roles", s.token, nil)

	pg.signal(syscall.SIGSTOP)
	frozen := time.Now()
	type answer struct {
		what, code, retry string
		status            int
		took              time.Duration
	}
	answers := make(chan answer, 3)
	for _, path := range []string{"/roles", "/users"} {
		go func() {
			status, code, retry, took := get(c, in.URL+"/api"+path, s.token)
			answers <- answer{"GET " + path, code, retry, status, took}
		}()
	}
	go func() {
		const path = "/api/channels/frozen/create"
		req, _ := http.NewRequest("POST", in.URL+path, strings.NewReader(`{"name":"while frozen"}`))
		req.Header.Set("Authorization", "Bearer "+s.token)
		req.Header.Set("Content-Type", "application/json")
		start := time.Now()
		a := answer{what: "POST " + path}
		if res, err := c.Do(req); err == nil {
			body, _ := io.ReadAll(res.Body)
			_ = res.Body.Close()
			a.status, a.retry = res.StatusCode, res.Header.Get("Retry-After")
			if bytes.Contains(body, []byte(`"code":"unavailable"`)) {
				a.code = "unavailable"
			}
		}
		a.took = time.Since(start)
		answers <- a
	}()
	for range 3 {
		a := <-answers
		if a.status == http.StatusOK && a.what == "GET /roles" && time.Since(frozen) < fresh.DefaultLease {
			t.Logf("%s with the database frozen: 200 from memory under the lease after %v", a.what, a.took)
			continue
		}
		if a.status != http.StatusServiceUnavailable || a.code != "unavailable" || a.retry == "" || a.took > timeout+2*time.Second {
			t.Errorf("%s with the database frozen: %d %q Retry-After %q after %v; want 503 unavailable with Retry-After within %v and a second",
				a.what, a.status, a.code, a.retry, a.took, timeout)
		}
		t.Logf("%s with the database frozen: %d after %v", a.what, a.status, a.took)
	}
	time.Sleep(time.Until(frozen.Add(fresh.DefaultLease + 100*time.Millisecond)))
	if status, code, retry, took := get(c, in.URL+"/api/roles", s.token); status != http.StatusServiceUnavailable ||
		code != "unavailable" || retry == "" || took > timeout+2*time.Second {
		t.Errorf("GET /roles with the database frozen past the lease: %d %q Retry-After %q after %v; want 503 unavailable within %v and a second",
			status, code, retry, took, timeout)
	}
	status, _, _, took := get(c, in.URL+"/readyz", "")
	if status != http.StatusServiceUnavailable || took > 1500*time.Millisecond {
		t.Errorf("/readyz with the database frozen: %d after %v; want 503 within 1.5 s", status, took)
	}

	pg.signal(syscall.SIGCONT)
	back := eventually(t, 15*time.Second, "serving again after the thaw", func() bool {
		st, _, _ := call(c, in.URL, "GET", "/roles", s.token, nil)
		return st == http.StatusOK
	})
	t.Logf("first 200 %v after the thaw", back)
	must(t, c, in.URL, http.StatusCreated, "POST", "/channels/thawed/create", s.token, map[string]any{"name": "thawed"})
	// A probe is retried by its caller; what must hold is that readiness
	// comes back by itself. Right after the thaw the pools may first have
	// to replace the connections the freeze broke, and on a loaded machine
	// a fresh connection can take longer than one probe's second.
	ready := eventually(t, 5*time.Second, "/readyz ready after the thaw", func() bool {
		st, _, _, _ := get(c, in.URL+"/readyz", "")
		return st == http.StatusOK
	})
	t.Logf("/readyz ready %v after the first 200", ready)
}

// TestFaultDatabaseStoppedAndResumed stops PostgreSQL: requests answer 503
// unavailable with Retry-After (not 500 internal), /readyz 503; once it is
// started again the instance recovers by itself.
func TestFaultDatabaseStoppedAndResumed(t *testing.T) {
	pg := privateCluster(t)
	c := newClient(t)
	in, s := startOn(t, "stopped", pg, "GUILDHALL_DB_TIMEOUT=2s")
	in.ready(t, c)
	must(t, c, in.URL, http.StatusCreated, "POST", "/channels/before/create", s.token, map[string]any{"name": "before"})

	pg.stop()
	for _, path := range []string{"/roles", "/channels/before"} {
		status, code, retry, took := get(c, in.URL+"/api"+path, s.token)
		if status != http.StatusServiceUnavailable || code != "unavailable" || retry == "" {
			t.Errorf("GET %s with the database down: %d %q Retry-After %q (%v); want 503 unavailable with Retry-After", path, status, code, retry, took)
		}
	}
	if status, _, _, _ := get(c, in.URL+"/readyz", ""); status != http.StatusServiceUnavailable {
		t.Errorf("/readyz with the database down: %d", status)
	}

	pg.start()
	back := eventually(t, 15*time.Second, "serving again after the restart", func() bool {
		st, _, _ := call(c, in.URL, "GET", "/channels/before", s.token, nil)
		return st == http.StatusOK
	})
	t.Logf("first 200 %v after the database came back", back)
	if st, _, _, _ := get(c, in.URL+"/readyz", ""); st != http.StatusOK {
		t.Errorf("/readyz after the restart: %d", st)
	}
}

// TestFaultDiskFull runs SQLite on a small tmpfs and fills it: uploads and
// writes answer 507 insufficient_storage (not 500), reads still work,
// /readyz answers 503; once space is freed, writes succeed and /readyz is
// 200 again, with no restart.
func TestFaultDiskFull(t *testing.T) {
	if os.Geteuid() != 0 {
		needFault(t, "a full disk is a tmpfs mounted by the test, which needs root", fmt.Errorf("euid %d", os.Geteuid()))
	}
	mnt := t.TempDir()
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=6m", "tmpfs", mnt).CombinedOutput()
	needFault(t, "mount a tmpfs", errIf(err, out))
	t.Cleanup(func() { _ = exec.Command("umount", "-l", mnt).Run() })

	c := newClient(t)
	s := storeDir{kind: "sqlite", dataDir: filepath.Join(mnt, "data"), token: "gh_disk_" + strings.Repeat("y", 32)}
	in := start(t, "disk", s).ready(t, c)
	must(t, c, in.URL, http.StatusCreated, "POST", "/channels/files/create", s.token, map[string]any{"name": "files"})

	// Fill the disk.
	filler := filepath.Join(mnt, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = f.Write(make([]byte, 6<<20)) // fails with ENOSPC once full
	_ = f.Close()

	upload := func(id string, n int) int {
		req, _ := http.NewRequest("PUT", in.URL+"/api/channels/files/attachment?attachmentID="+id, bytes.NewReader(bytes.Repeat([]byte("d"), n)))
		req.Header.Set("Authorization", "Bearer "+s.token)
		req.Header.Set("Content-Type", "application/octet-stream")
		res, err := c.Do(req)
		if err != nil {
			t.Fatalf("upload: %v", err)
		}
		body, _ := io.ReadAll(res.Body)
		_ = res.Body.Close()
		if res.StatusCode == http.StatusInsufficientStorage && !bytes.Contains(body, []byte(`"insufficient_storage"`)) {
			t.Errorf("507 without its code: %s", body)
		}
		return res.StatusCode
	}
	if st := upload("big", 1<<20); st != http.StatusInsufficientStorage {
		t.Errorf("an upload on a full disk: %d, want 507", st)
	}
	if st, _, _ := call(c, in.URL, "POST", "/channels/more/create", s.token, map[string]any{"name": strings.Repeat("m", 90)}); st != http.StatusInsufficientStorage && st != http.StatusCreated {
		t.Errorf("a write on a full disk: %d, want 507 (or 201 if SQLite found room in a free page)", st)
	}
	must(t, c, in.URL, http.StatusOK, "GET", "/channels/files", s.token, nil) // reads still work
	if st, _, _, _ := get(c, in.URL+"/readyz", ""); st != http.StatusServiceUnavailable {
		t.Errorf("/readyz on a full disk: %d, want 503", st)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "/readyz 200 once space is freed", func() bool {
		st, _, _, _ := get(c, in.URL+"/readyz", "")
		return st == http.StatusOK
	})
	if st := upload("after", 1<<20); st != http.StatusCreated {
		t.Errorf("an upload once space is freed: %d, want 201", st)
	}
	left, _ := os.ReadDir(filepath.Join(s.dataDir, "blobs", "tmp"))
	if len(left) != 0 {
		t.Errorf("temporary files left behind: %d", len(left))
	}
}

func errIf(err error, out []byte) error {
	if err != nil {
		return fmt.Errorf("%v: %s", err, bytes.TrimSpace(out))
	}
	return nil
}

// TestFaultSIGTERMUnderLoad sends SIGTERM while writers write, event streams
// are open and a slow download is in flight: /readyz turns 503 at once (and
// the instance keeps serving for GUILDHALL_DRAIN_DELAY), the streams end,
// no request in flight fails, the download finishes byte for byte within
// GUILDHALL_SHUTDOWN_TIMEOUT, and the process exits 0.
func TestFaultSIGTERMUnderLoad(t *testing.T) {
	c := newClient(t)
	s := newStore(t, "sqlite")
	in := start(t, "sigterm", s, "GUILDHALL_SHUTDOWN_TIMEOUT=30s", "GUILDHALL_DRAIN_DELAY=1s").ready(t, c)
	must(t, c, in.URL, http.StatusCreated, "POST", "/channels/files/create", s.token, map[string]any{"name": "files"})
	body := bytes.Repeat([]byte("0123456789abcdef"), 20<<16) // 20 MiB: more than the sockets buffer
	req, _ := http.NewRequest("PUT", in.URL+"/api/channels/files/attachment?attachmentID=big", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+s.token)
	req.Header.Set("Content-Type", "application/octet-stream")
	if res, err := c.Do(req); err != nil || res.StatusCode != http.StatusCreated {
		t.Fatalf("upload: %v %v", res, err)
	}

	// Event streams: each must end (EOF) when the server shuts down.
	streamsEnded := make(chan error, 5)
	for range 5 {
		req, _ := http.NewRequest("GET", in.URL+"/api/events", nil)
		req.Header.Set("Authorization", "Bearer "+s.token)
		res, err := (&http.Client{}).Do(req)
		if err != nil || res.StatusCode != http.StatusOK {
			t.Fatalf("open a stream: %v %v", res, err)
		}
		go func() {
			_, err := io.Copy(io.Discard, res.Body)
			streamsEnded <- err
		}()
	}
	// A slow download: 256 KiB every 50 ms, about 4 s in all, so the server
	// is still writing it seconds after SIGTERM.
	downloaded := make(chan []byte, 1)
	dlStarted := make(chan struct{})
	go func() {
		req, _ := http.NewRequest("GET", in.URL+"/api/channels/files/attachment?attachmentID=big", nil)
		req.Header.Set("Authorization", "Bearer "+s.token)
		res, err := (&http.Client{}).Do(req)
		if err != nil {
			close(dlStarted)
			downloaded <- nil
			return
		}
		defer res.Body.Close()
		close(dlStarted)
		var got bytes.Buffer
		buf := make([]byte, 256<<10)
		for {
			n, err := io.ReadFull(res.Body, buf)
			got.Write(buf[:n])
			if err != nil {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		downloaded <- got.Bytes()
	}()
	<-dlStarted
	// Writers until the listener closes.
	type result struct{ status int }
	results := make(chan result, 10000)
	stopWriters := make(chan struct{})
	for w := range 4 {
		go func() {
			for i := 0; ; i++ {
				select {
				case <-stopWriters:
					return
				default:
				}
				st, _, err := call(c, in.URL, "POST", fmt.Sprintf("/channels/w%d-%d/create", w, i), s.token, map[string]any{"name": "x"})
				if err != nil {
					return // the listener closed: a refused connection is expected
				}
				results <- result{st}
			}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	sent := time.Now()
	if err := in.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	eventually(t, 900*time.Millisecond, "/readyz 503 while draining", func() bool {
		st, _, _, _ := get(c, in.URL+"/readyz", "")
		return st == http.StatusServiceUnavailable
	})
	for range 5 {
		select {
		case <-streamsEnded:
		case <-time.After(10 * time.Second):
			t.Fatal("an event stream did not end on shutdown")
		}
	}
	select {
	case <-in.exited:
	case <-time.After(30 * time.Second):
		t.Fatal("the server did not exit")
	}
	close(stopWriters)
	exitedAfter := time.Since(sent)
	t.Logf("exited %v after SIGTERM: %v", exitedAfter, in.cmd.ProcessState)
	if exitedAfter < 1500*time.Millisecond {
		t.Errorf("exited %v after SIGTERM: before the drain delay and the download in flight were over", exitedAfter)
	}
	if code := in.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("exit code %d after a clean drain, want 0", code)
	}
	if got := <-downloaded; !bytes.Equal(got, body) {
		t.Errorf("the download in flight got %d of %d bytes", len(got), len(body))
	}

	close(results)
	n := 0
	for r := range results {
		n++
		if r.status >= 500 {
			t.Errorf("a write answered %d during the shutdown", r.status)
		}
	}
	t.Logf("%d writes answered, none 5xx", n)
}
