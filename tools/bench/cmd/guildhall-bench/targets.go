package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/guildhall/guildhall/tools/bench/internal/client"
)

// A target is one server under load: the ceiling, or Guildhall on one
// store; or, for the million scenarios, Guildhall on one store with users
// seeded in bulk (sqlite-10k, sqlite-1m, ...).
type target struct {
	name    string // ceiling, sqlite, postgres; or <store>-<users> for the million scenarios
	group   string // "" (ceiling, sqlite, postgres), "million" or "history"
	addr    string // 127.0.0.1:port
	token   string
	logPath string
	env     []string // of the server, to start it again
	proc    *process
	pg      *pgCluster // postgres: the cluster whose processes count as the server's too
	pgDB    string
	api     *client.Client

	// Fixtures, filled by setup.
	ids        []string // seeded user IDs ({id})
	heavyUser  string
	lightUser  string
	deepCursor string // the cursor of page deepPage of ?limit=50
	deepPage   int
	deepReady  bool

	// The million scenarios' instances.
	ref      *target       // the smaller instance this one is compared with; nil: it is the smaller one
	users    int           // users seeded in bulk (the owner not counted)
	seedTime time.Duration // how long the bulk seeding took
	prefixes []string      // search prefixes, each shared by 100 users (searchPrefixes)
	searches []string      // the prefixes million_search_users draws from (sampleSearches)
	memory   []memSample   // the server's memory after each million scenario

	// The history scenarios' instances (history.go).
	histUser string // the user asked about
	histAt   string // the instant asked about, RFC 3339
	histLog  string // what the log holds, for the report
}

// memSample is a server process's memory after a scenario: its resident
// set then, and the most it has been since it started (VmRSS, VmHWM).
type memSample struct {
	scenario string
	rss, hwm int64 // bytes
}

// processMemory reads a process's VmRSS and VmHWM from /proc.
func processMemory(pid int) (rss, hwm int64, err error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		name, value, ok := strings.Cut(line, ":")
		if !ok || (name != "VmRSS" && name != "VmHWM") {
			continue
		}
		var kb int64
		if _, err := fmt.Sscanf(strings.TrimSpace(value), "%d kB", &kb); err != nil {
			return 0, 0, fmt.Errorf("%s of %d: %w", name, pid, err)
		}
		if name == "VmRSS" {
			rss = kb << 10
		} else {
			hwm = kb << 10
		}
	}
	return rss, hwm, nil
}

// process is a server started by the bench.
type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when it has exited
	err  error
	log  *os.File
}

// startProcess runs argv with the bench's environment less every
// GUILDHALL_* variable (the server runs on its defaults), plus env; its
// output goes to logPath; it is pinned to cpus when cpus is not empty. It
// dies with the bench (Pdeathsig) and does not get the terminal's Ctrl-C
// (own process group): the bench stops it in order.
func startProcess(argv, env []string, logPath, cpus string) (*process, error) {
	if cpus != "" {
		argv = append([]string{"taskset", "-c", cpus}, argv...)
	}
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644) // a server started again appends
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GUILDHALL_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", strings.Join(argv, " "), err)
	}
	p := &process{cmd: cmd, done: make(chan struct{}), log: f}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// pid is the server's pid: taskset executes the server in its own place.
func (p *process) pid() int { return p.cmd.Process.Pid }

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop asks the server to shut down (SIGTERM) and kills it after a while.
func (p *process) stop() {
	if p == nil {
		return
	}
	if !p.exited() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(20 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
	p.log.Close()
}

// freeAddr returns a loopback address with a port nobody listens on now.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// waitReady polls /readyz until the server answers 200.
func (t *target) waitReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	hc := &http.Client{Timeout: 2 * time.Second}
	for {
		resp, err := hc.Get("http://" + t.addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if t.proc.exited() {
			return fmt.Errorf("%s exited before it was ready (%v); its log %s ends:\n%s", t.name, t.proc.err, t.logPath, tail(t.logPath, 2000))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %v; its log %s ends:\n%s", t.name, timeout, t.logPath, tail(t.logPath, 2000))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// pids are the processes whose CPU is the server's: the server's process
// tree and, on PostgreSQL, the cluster's, less the backends of other
// databases (other users of a shared cluster).
func (t *target) pids(ctx context.Context) []int {
	parents := allParents()
	pids := descendants(t.proc.pid(), parents)
	if t.pg != nil && t.pg.postmaster > 0 {
		pids = append(pids, t.pg.countedPIDs(ctx, parents, t.pgDB)...)
	}
	return pids
}

func tail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > n {
		_, _ = f.Seek(st.Size()-n, 0)
	}
	b := make([]byte, n)
	k, _ := f.Read(b)
	return string(b[:k])
}

// pgCluster is the PostgreSQL server the postgres target runs on.
type pgCluster struct {
	adminURL   string
	conn       *pgx.Conn
	version    string
	postmaster int            // 0: not found (not local, or not visible): neither pinned nor counted
	pinned     map[int]string // pid -> Cpus_allowed_list before the bench pinned it
	notes      []string       // what the report should say about it
}

func openPG(ctx context.Context, adminURL string) (*pgCluster, error) {
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	conn, err := pgx.Connect(cctx, adminURL)
	if err != nil {
		return nil, err
	}
	pg := &pgCluster{adminURL: adminURL, conn: conn}
	_ = conn.QueryRow(ctx, "SELECT version()").Scan(&pg.version)
	pg.postmaster, err = pg.findPostmaster(ctx)
	if err != nil {
		pg.notes = append(pg.notes, "PostgreSQL's processes are neither pinned nor counted: "+err.Error())
	}
	return pg, nil
}

// findPostmaster finds the cluster's postmaster: the first line of
// postmaster.pid in its data directory, or else the postgres process whose
// parent is not a postgres process.
func (pg *pgCluster) findPostmaster(ctx context.Context) (int, error) {
	u, err := url.Parse(pg.adminURL)
	if err != nil {
		return 0, err
	}
	if ip := net.ParseIP(u.Hostname()); u.Hostname() != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return 0, fmt.Errorf("%s is not on this machine", u.Hostname())
	}
	var dir string
	if err := pg.conn.QueryRow(ctx, "SHOW data_directory").Scan(&dir); err == nil {
		if b, err := os.ReadFile(filepath.Join(dir, "postmaster.pid")); err == nil {
			first, _, _ := strings.Cut(string(b), "\n")
			if pid, err := strconv.Atoi(strings.TrimSpace(first)); err == nil {
				if st, err := readProcStat(pid); err == nil && st.comm != "" {
					return pid, nil
				}
			}
		}
	}
	parents := allParents()
	for pid, pp := range parents {
		st, err := readProcStat(pid)
		if err != nil || (st.comm != "postgres" && st.comm != "postmaster") {
			continue
		}
		if pst, err := readProcStat(pp); err != nil || (pst.comm != "postgres" && pst.comm != "postmaster") {
			return pid, nil
		}
	}
	return 0, errors.New("no postmaster found (data_directory unreadable and no postgres process visible)")
}

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

func (pg *pgCluster) createDB(ctx context.Context, name string) (string, error) {
	if _, err := pg.conn.Exec(ctx, "CREATE DATABASE "+quoteIdent(name)); err != nil {
		return "", fmt.Errorf("create database %s: %w", name, err)
	}
	u, _ := url.Parse(pg.adminURL)
	u.Path = "/" + name
	return u.String(), nil
}

// settle readies a database just seeded in bulk for measuring: VACUUM
// ANALYZE, so that its plans are made on statistics and autovacuum has no
// reason to wake during the runs.
func (pg *pgCluster) settle(ctx context.Context, dbURL string) error {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, "VACUUM (ANALYZE)")
	return err
}

// checkpoint writes out what bulk seeding left in the WAL, so that the
// checkpointer (whose CPU is counted) does not do it during the runs.
func (pg *pgCluster) checkpoint(ctx context.Context) error {
	_, err := pg.conn.Exec(ctx, "CHECKPOINT")
	return err
}

func (pg *pgCluster) dropDB(ctx context.Context, name string) error {
	_, err := pg.conn.Exec(ctx, "DROP DATABASE IF EXISTS "+quoteIdent(name)+" WITH (FORCE)")
	return err
}

// countedPIDs are the cluster's processes less the backends (and
// autovacuum workers) of databases other than db.
func (pg *pgCluster) countedPIDs(ctx context.Context, parents map[int]int, db string) []int {
	other := map[int]bool{}
	rows, err := pg.conn.Query(ctx, "SELECT pid FROM pg_stat_activity WHERE datname IS NOT NULL AND datname <> $1", db)
	if err == nil {
		for rows.Next() {
			var pid int
			if rows.Scan(&pid) == nil {
				other[pid] = true
			}
		}
		rows.Close()
	}
	var out []int
	for _, pid := range descendants(pg.postmaster, parents) {
		if !other[pid] {
			out = append(out, pid)
		}
	}
	return out
}

// pin moves the postmaster and all its children to cpus (new backends
// inherit it from the postmaster), remembering what each had.
func (pg *pgCluster) pin(cpus string) error {
	if pg.postmaster == 0 {
		return nil
	}
	pg.pinned = map[int]string{}
	for _, pid := range descendants(pg.postmaster, allParents()) {
		orig, err := cpusAllowed(pid)
		if err != nil {
			continue
		}
		if err := setAffinity(pid, cpus); err != nil {
			if pid == pg.postmaster {
				return err
			}
			continue
		}
		pg.pinned[pid] = orig
	}
	return nil
}

// restore gives every process of the cluster its CPUs back: what it had,
// or what the postmaster had for the backends born since.
func (pg *pgCluster) restore() error {
	if pg.postmaster == 0 || pg.pinned == nil {
		return nil
	}
	def, ok := pg.pinned[pg.postmaster]
	if !ok {
		return nil
	}
	var errs []error
	for _, pid := range descendants(pg.postmaster, allParents()) {
		want, ok := pg.pinned[pid]
		if !ok {
			want = def
		}
		if err := setAffinity(pid, want); err != nil && pid == pg.postmaster {
			errs = append(errs, err)
		}
	}
	pg.pinned = nil
	return errors.Join(errs...)
}
