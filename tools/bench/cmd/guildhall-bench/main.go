// Command guildhall-bench is Guildhall's side-by-side HTTP load benchmark
// (make bench-http; docs/performance.md). In one run it drives the real
// server on SQLite and on PostgreSQL, and a bare Echo server with the same
// routes (the ceiling), with the same load generator, in interleaved
// rounds, and prints a table per scenario: req/s, server CPU per request,
// latency percentiles, errors, and the ratio of CPU per request to the
// ceiling's in the same round.
//
//	guildhall-bench [flags]          run the benchmark (-h lists the flags)
//	guildhall-bench ceiling [flags]  the ceiling server (the bench starts it)
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	mrand "math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/uuid"

	"github.com/guildhall/guildhall/tools/bench/internal/bulk"
	"github.com/guildhall/guildhall/tools/bench/internal/client"
)

type config struct {
	scenarios        string
	pageDeep         bool
	targets          string
	users, deepUsers int
	conns            int
	duration, warmup time.Duration
	rounds           int
	rate             float64
	mixedRate        float64
	millionUsers     int
	millionCold      bool
	quick            bool
	bin              string
	pgURL            string
	out              string
	pin              string
	genCPU, srvCPU   int
	seedConns        int
	keepData         bool
	cpuProfile       string
}

func parseFlags(args []string) (config, error) {
	var c config
	fs := flag.NewFlagSet("guildhall-bench", flag.ContinueOnError)
	fs.StringVar(&c.scenarios, "scenarios", "default", "comma-separated scenarios or groups: "+scenarioNames()+"; groups "+groupNames+" (default: "+defaultScenarios+")")
	fs.BoolVar(&c.pageDeep, "page-deep", false, "also run page_deep (seeds -deep-users users: slow)")
	fs.StringVar(&c.targets, "targets", "ceiling,sqlite,postgres", "targets to run, in this order")
	fs.IntVar(&c.users, "users", 10000, "users to seed through the API (and in bulk into the smaller instance of the million scenarios)")
	fs.IntVar(&c.millionUsers, "million-users", 1_000_000, "users seeded in bulk into the bigger instance of the million scenarios")
	fs.BoolVar(&c.millionCold, "million-cold", false, "measure the million instances cold: without first reading each of their users once")
	fs.IntVar(&c.deepUsers, "deep-users", 100000, "users in all for page_deep")
	fs.IntVar(&c.conns, "conns", 32, "connections of the closed loop")
	fs.DurationVar(&c.duration, "duration", 5*time.Second, "length of a measured round")
	fs.DurationVar(&c.warmup, "warmup", 2*time.Second, "warm-up per target and scenario (not measured)")
	fs.IntVar(&c.rounds, "rounds", 3, "measured rounds per target and scenario (order alternates A B C, C B A, ...)")
	fs.Float64Var(&c.rate, "rate", 200, "requests per second of the open loop (latency scenarios)")
	fs.Float64Var(&c.mixedRate, "mixed-rate", 40, "creates per second beside the reads of mixed_get_user (open loop, one connection)")
	fs.BoolVar(&c.quick, "quick", false, "smoke run: -rounds 1 -duration 1s -warmup 500ms unless given")
	fs.StringVar(&c.bin, "bin", "bin/guildhall", "the guildhall binary to measure")
	fs.StringVar(&c.pgURL, "pg", "postgres://127.0.0.1:5432/test?sslmode=disable", "PostgreSQL to create the bench's database in (skipped when unreachable)")
	fs.StringVar(&c.out, "out", "", "run directory (default tmp/bench-http/<time>)")
	fs.StringVar(&c.pin, "pin", "auto", "auto: load generator on -loadgen-cpu, servers and PostgreSQL on -server-cpu when taskset exists and there are 2+ CPUs; off: no pinning")
	fs.IntVar(&c.genCPU, "loadgen-cpu", 0, "CPU of the load generator when pinning")
	fs.IntVar(&c.srvCPU, "server-cpu", 1, "CPU of the servers when pinning")
	fs.IntVar(&c.seedConns, "seed-conns", 32, "concurrent requests while seeding")
	fs.BoolVar(&c.keepData, "keep-data", false, "keep the SQLite data directory in the run directory")
	fs.StringVar(&c.cpuProfile, "cpuprofile", "", "write a CPU profile of the bench itself (the load generator) to this file")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if c.quick {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if !set["rounds"] {
			c.rounds = 1
		}
		if !set["duration"] {
			c.duration = time.Second
		}
		if !set["warmup"] {
			c.warmup = 500 * time.Millisecond
		}
	}
	if c.pageDeep {
		c.scenarios += ",page_deep"
	}
	switch {
	case c.users < 1 || c.users > 1_000_000:
		return c, errors.New("-users must be 1..1000000")
	case c.conns < 1 || c.conns > 4096:
		return c, errors.New("-conns must be 1..4096")
	case c.rounds < 1 || c.duration <= 0 || c.warmup < 0:
		return c, errors.New("-rounds must be >= 1 and -duration > 0")
	case c.rate <= 0 || c.mixedRate <= 0:
		return c, errors.New("-rate and -mixed-rate must be > 0")
	case c.millionUsers < 1 || c.millionUsers > 9_999_999:
		return c, errors.New("-million-users must be 1..9999999")
	case c.pin != "auto" && c.pin != "off":
		return c, errors.New("-pin is auto or off")
	}
	return c, nil
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "ceiling" {
		if err := ceilingMain(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "guildhall-bench ceiling:", err)
			os.Exit(1)
		}
		return
	}
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "guildhall-bench:", err)
		}
		os.Exit(2)
	}
	pinned, note := pinSelf(cfg)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	b := &bench{cfg: cfg, pinned: pinned, pinNote: note, results: map[string]map[string]*targetResult{}}
	if cfg.cpuProfile != "" {
		f, err := os.Create(cfg.cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "guildhall-bench:", err)
			os.Exit(2)
		}
		defer pprof.StopCPUProfile()
	}
	err = b.run(ctx)
	b.cleanup()
	if err != nil {
		fmt.Fprintln(os.Stderr, "guildhall-bench:", err)
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}

// pinSelf puts the bench (the load generator) on its CPU by executing
// itself again under taskset, so that the Go runtime sizes GOMAXPROCS to
// that one CPU. It returns whether pinning is on and what to report.
func pinSelf(cfg config) (bool, string) {
	if cfg.pin == "off" {
		return false, "off (-pin off): servers and load generator share every CPU"
	}
	if v := os.Getenv("GUILDHALL_BENCH_PINNED"); v != "" {
		return true, fmt.Sprintf("load generator on CPU %d; servers (and PostgreSQL) on CPU %d", cfg.genCPU, cfg.srvCPU)
	}
	n := onlineCPUs()
	taskset, err := exec.LookPath("taskset")
	switch {
	case err != nil:
		return false, "off: taskset not found; servers and load generator share every CPU"
	case n < 2:
		return false, fmt.Sprintf("off: %d CPU online; servers and load generator share it", n)
	case cfg.genCPU == cfg.srvCPU || cfg.genCPU < 0 || cfg.srvCPU < 0 || cfg.genCPU >= n || cfg.srvCPU >= n:
		fmt.Fprintf(os.Stderr, "guildhall-bench: -loadgen-cpu %d and -server-cpu %d must be two different CPUs of 0..%d\n", cfg.genCPU, cfg.srvCPU, n-1)
		os.Exit(2)
	}
	exe, err := os.Executable()
	if err != nil {
		return false, "off: " + err.Error()
	}
	argv := append([]string{"taskset", "-c", strconv.Itoa(cfg.genCPU), exe}, os.Args[1:]...)
	env := append(os.Environ(), "GUILDHALL_BENCH_PINNED=1", "GUILDHALL_BENCH_ARGV0="+os.Args[0])
	err = syscall.Exec(taskset, argv, env)
	return false, "off: could not re-execute under taskset: " + err.Error()
}

type bench struct {
	cfg     config
	pinned  bool
	pinNote string

	dir      string
	md       *os.File // results.md
	raw      *os.File // results.jsonl
	hz       float64
	tag      string // makes usernames unique to this run
	counter  atomic.Uint64
	targets  []*target // every server started, of every group
	pg       *pgCluster
	pgPinned bool
	results  map[string]map[string]*targetResult // scenario -> target -> result
	skipped  string                              // why a target is missing, for the report
}

func (b *bench) srvCPUs() string {
	if !b.pinned {
		return ""
	}
	return strconv.Itoa(b.cfg.srvCPU)
}

// say prints to stdout and to results.md.
func (b *bench) say(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	fmt.Print(s)
	if b.md != nil {
		_, _ = b.md.WriteString(s)
	}
}

// progress prints to stderr only.
func progress(format string, args ...any) { fmt.Fprintf(os.Stderr, format, args...) }

func (b *bench) run(ctx context.Context) error {
	scs, err := selectScenarios(b.cfg.scenarios)
	if err != nil {
		return err
	}
	if _, err := os.Stat(b.cfg.bin); err != nil && strings.Contains(b.cfg.targets, "sql") {
		return fmt.Errorf("%s: %w (make build)", b.cfg.bin, err)
	}
	b.dir = b.cfg.out
	if b.dir == "" {
		b.dir = filepath.Join("tmp", "bench-http", time.Now().Format("20060102-150405"))
	}
	if err := os.MkdirAll(b.dir, 0o755); err != nil {
		return err
	}
	if b.md, err = os.Create(filepath.Join(b.dir, "results.md")); err != nil {
		return err
	}
	if b.raw, err = os.Create(filepath.Join(b.dir, "results.jsonl")); err != nil {
		return err
	}
	b.hz = clockTicks()
	b.tag = strconv.FormatInt(time.Now().Unix()%(36*36*36*36*36), 36)

	needPerms := slices.ContainsFunc(scs, func(s scenario) bool { return s.needs == "perms" })
	needDeep := slices.ContainsFunc(scs, func(s scenario) bool { return s.needs == "deep" })
	needMain := slices.ContainsFunc(scs, func(s scenario) bool { return s.needs != "million" })
	needMillion := slices.ContainsFunc(scs, func(s scenario) bool { return s.needs == "million" })
	needMixed := slices.ContainsFunc(scs, func(s scenario) bool { return s.writes != nil })

	var wanted []string
	for _, name := range strings.Split(b.cfg.targets, ",") {
		switch name = strings.TrimSpace(name); name {
		case "ceiling", "sqlite", "postgres":
			wanted = append(wanted, name)
		default:
			return fmt.Errorf("unknown target %q (ceiling, sqlite, postgres)", name)
		}
	}
	stores := slices.DeleteFunc(slices.Clone(wanted), func(s string) bool { return s == "ceiling" })
	switch {
	case needMillion && len(stores) == 0:
		return errors.New("the million scenarios need sqlite or postgres in -targets")
	case needMillion && b.cfg.millionUsers <= b.cfg.users:
		return errors.New("the million scenarios need -million-users above -users")
	}
	if slices.Contains(wanted, "postgres") {
		pg, err := openPG(ctx, b.cfg.pgURL)
		if err != nil {
			b.skipped = fmt.Sprintf("PostgreSQL unreachable at %s (%v): the postgres target is skipped", redactURL(b.cfg.pgURL), err)
			progress("%s\n", b.skipped)
			wanted = slices.DeleteFunc(wanted, func(s string) bool { return s == "postgres" })
			stores = slices.DeleteFunc(stores, func(s string) bool { return s == "postgres" })
		} else {
			b.pg = pg
		}
	}

	b.say("# guildhall-bench %s\n\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	for _, l := range machine(b.cfg.bin, b.pg) {
		b.say("- %s\n", l)
	}
	argv0 := os.Getenv("GUILDHALL_BENCH_ARGV0")
	if argv0 == "" {
		argv0 = os.Args[0]
	}
	b.say("- command: `%s`\n", shellJoin(append([]string{argv0}, os.Args[1:]...)))
	b.say("- pinning: %s\n", b.pinNote)
	b.say("- %d round(s) of %v after a %v warm-up, per target and scenario; closed loop: %d connections; open loop: %g req/s\n",
		b.cfg.rounds, b.cfg.duration, b.cfg.warmup, b.cfg.conns, b.cfg.rate)
	if needMain {
		b.say("- ceiling, sqlite, postgres: %s users seeded through the API\n", thousands(int64(b.cfg.users)))
	}
	if needMixed {
		b.say("- mixed_get_user: %g creates/s beside the reads (open loop, one connection)\n", b.cfg.mixedRate)
	}
	if needMillion {
		b.say("- million: per store, an instance with %s users and one with %s, seeded in bulk into the database before the server serves them\n",
			thousands(int64(b.cfg.users)), thousands(int64(b.cfg.millionUsers)))
		if b.cfg.millionCold {
			b.say("- million: measured cold (-million-cold): the servers' read caches fill as the scenarios read\n")
		} else {
			b.say("- million: each user read once before the scenarios, as a server that has run a while has: the read caches hold what they would\n")
		}
	}
	if b.skipped != "" {
		b.say("- %s\n", b.skipped)
	}
	if b.pg != nil {
		for _, n := range b.pg.notes {
			b.say("- %s\n", n)
		}
	}
	b.say("- run directory: %s\n\n", b.dir)

	for _, name := range wanted {
		if !needMain {
			break
		}
		var err error
		switch name {
		case "ceiling":
			err = b.startCeiling(ctx, needDeep)
		case "sqlite":
			err = b.startGuildhall(ctx, "sqlite", needPerms)
		case "postgres":
			err = b.startGuildhall(ctx, "postgres", needPerms)
		}
		if err != nil {
			return err
		}
	}

	for _, sc := range scs {
		switch sc.needs {
		case "deep":
			if err := b.prepareDeep(ctx); err != nil {
				return err
			}
		case "million":
			if err := b.prepareMillion(ctx, stores); err != nil {
				return err
			}
		}
		if err := b.runScenario(ctx, sc); err != nil {
			return err
		}
	}
	if s := ratioSummary(b.names(""), b.results); s != "" {
		b.say("%s", s)
	}
	if s := millionSummary(b.group("million"), b.results); s != "" {
		b.say("%s", s)
	}
	progress("tables written to %s\n", filepath.Join(b.dir, "results.md"))
	return nil
}

// group returns the targets of a group ("" or "million"), in the order they
// were started.
func (b *bench) group(name string) []*target {
	var out []*target
	for _, t := range b.targets {
		if t.group == name {
			out = append(out, t)
		}
	}
	return out
}

func (b *bench) names(group string) []string {
	var out []string
	for _, t := range b.group(group) {
		out = append(out, t.name)
	}
	return out
}

func randomToken() string {
	buf := make([]byte, 24)
	_, _ = rand.Read(buf)
	return "gh_bench_" + hex.EncodeToString(buf)
}

func (b *bench) startCeiling(ctx context.Context, deep bool) error {
	n := b.cfg.users
	if deep {
		n = max(n, b.cfg.deepUsers)
	}
	ids := make([]string, n+2)
	for i := range ids {
		ids[i] = uuid.Must(uuid.NewV7()).String()
	}
	idsPath := filepath.Join(b.dir, "ceiling-ids.txt")
	if err := os.WriteFile(idsPath, []byte(strings.Join(ids, "\n")+"\n"), 0o644); err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	addr, err := freeAddr()
	if err != nil {
		return err
	}
	t := &target{name: "ceiling", addr: addr, token: randomToken(), logPath: filepath.Join(b.dir, "ceiling.log")}
	t.proc, err = startProcess([]string{exe, "ceiling", "-addr", addr, "-token", t.token, "-ids", idsPath}, nil, t.logPath, b.srvCPUs())
	if err != nil {
		return err
	}
	b.targets = append(b.targets, t)
	if err := t.waitReady(ctx, 30*time.Second); err != nil {
		return err
	}
	t.api = client.New(addr, t.token)
	t.heavyUser, t.lightUser = ids[0], ids[1]
	t.ids = ids[2 : 2+b.cfg.users]
	progress("ceiling: pid %d on %s\n", t.proc.pid(), addr)
	return nil
}

func (b *bench) startGuildhall(ctx context.Context, store string, needPerms bool) error {
	addr, err := freeAddr()
	if err != nil {
		return err
	}
	t := &target{name: store, addr: addr, token: randomToken(), logPath: filepath.Join(b.dir, store+".log")}
	if _, err := b.guildhallEnv(ctx, t, store, ""); err != nil {
		return err
	}
	if err := b.launch(ctx, t); err != nil {
		return err
	}
	t.api = client.New(addr, t.token)
	progress("%s: pid %d on %s; seeding %d users ...\n", store, t.proc.pid(), addr, b.cfg.users)
	start := time.Now()
	if t.ids, err = t.api.SeedUsers(ctx, "s"+b.tag+"_", 0, b.cfg.users, b.cfg.seedConns); err != nil {
		return fmt.Errorf("%s: seeding: %w", store, err)
	}
	progress("%s: seeded %d users in %v\n", store, len(t.ids), time.Since(start).Round(time.Millisecond))
	if err := setupBench(ctx, t.api); err != nil {
		return fmt.Errorf("%s: bench channel: %w", store, err)
	}
	if needPerms {
		start := time.Now()
		if t.heavyUser, t.lightUser, err = setupHeavy(ctx, t.api, t.ids, "p"+b.tag+"_", 8); err != nil {
			return fmt.Errorf("%s: heavy permission setup: %w", store, err)
		}
		progress("%s: %d roles and %d overwrites set up in %v\n", store, heavyRoles, 1+heavyRoles+min(len(t.ids)+1, heavyUserOvers), time.Since(start).Round(time.Millisecond))
	}
	return nil
}

// guildhallEnv sets the environment of Guildhall on store for t: its
// address, no rate limit, the owner's token, its data directory, and on
// PostgreSQL a database of its own (guildhall_bench_<tag><suffix>), whose
// URL it returns. The cluster is pinned with the first such database.
func (b *bench) guildhallEnv(ctx context.Context, t *target, store, suffix string) (dbURL string, err error) {
	t.env = []string{
		"GUILDHALL_ADDR=" + t.addr,
		"GUILDHALL_RATE_LIMIT=0",
		"GUILDHALL_BOOTSTRAP_TOKEN=" + t.token,
		"GUILDHALL_DATA_DIR=" + filepath.Join(b.dir, t.name+"-data"),
	}
	if store != "postgres" {
		return "", nil
	}
	t.pg = b.pg
	t.pgDB = "guildhall_bench_" + b.tag + suffix
	if dbURL, err = b.pg.createDB(ctx, t.pgDB); err != nil {
		return "", err
	}
	t.env = append(t.env, "GUILDHALL_DATABASE_URL="+dbURL)
	if b.pinned && !b.pgPinned {
		b.pgPinned = true
		if err := b.pg.pin(b.srvCPUs()); err != nil {
			b.say("- PostgreSQL not pinned: %v\n\n", err)
		} else if b.pg.postmaster > 0 {
			progress("postgres: postmaster %d and its processes pinned to CPU %d\n", b.pg.postmaster, b.cfg.srvCPU)
		}
	}
	return dbURL, nil
}

// launch starts (or starts again) Guildhall for t and waits until it is
// ready.
func (b *bench) launch(ctx context.Context, t *target) error {
	var err error
	if t.proc, err = startProcess([]string{b.cfg.bin, "serve"}, t.env, t.logPath, b.srvCPUs()); err != nil {
		return err
	}
	if !slices.Contains(b.targets, t) {
		b.targets = append(b.targets, t)
	}
	return t.waitReady(ctx, 120*time.Second)
}

// prepareMillion starts, once, the instances the million scenarios compare:
// for each store, one with -users users and one with -million-users, both
// seeded in bulk.
func (b *bench) prepareMillion(ctx context.Context, stores []string) error {
	if len(b.group("million")) > 0 {
		return nil
	}
	for _, store := range stores {
		small, err := b.startBulk(ctx, store, b.cfg.users, nil)
		if err != nil {
			return err
		}
		if _, err := b.startBulk(ctx, store, b.cfg.millionUsers, small); err != nil {
			return err
		}
	}
	if b.pg != nil && slices.Contains(stores, "postgres") {
		if err := b.pg.checkpoint(ctx); err != nil {
			progress("postgres: CHECKPOINT after seeding: %v\n", err)
		}
	}
	return nil
}

// startBulk starts Guildhall on store with n users written straight into
// its database (internal/bulk): the server starts once on the empty store,
// which creates the owner and their token, stops, the users are written,
// and it starts again. User i is m<tag>_<i, 7 digits>, "Member <i>".
func (b *bench) startBulk(ctx context.Context, store string, n int, ref *target) (*target, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	name := store + "-" + compactCount(n)
	t := &target{name: name, group: "million", addr: addr, token: randomToken(), logPath: filepath.Join(b.dir, name+".log"), ref: ref, users: n}
	dbURL, err := b.guildhallEnv(ctx, t, store, "_"+compactCount(n))
	if err != nil {
		return nil, err
	}
	if err := b.launch(ctx, t); err != nil {
		return nil, err
	}
	t.proc.stop()
	progress("%s: seeding %s users in bulk ...\n", name, thousands(int64(n)))
	start := time.Now()
	prefix := "m" + b.tag + "_"
	t.ids, err = bulk.Users(ctx, filepath.Join(b.dir, name+"-data"), dbURL, n, func(i int) (string, string) {
		return fmt.Sprintf("%s%07d", prefix, i), fmt.Sprintf("Member %07d", i)
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if t.pg != nil {
		if err := t.pg.settle(ctx, dbURL); err != nil {
			return nil, fmt.Errorf("%s: VACUUM ANALYZE: %w", name, err)
		}
	}
	t.seedTime = time.Since(start)
	progress("%s: seeded %s users in %v\n", name, thousands(int64(n)), t.seedTime.Round(time.Millisecond))
	if err := b.launch(ctx, t); err != nil {
		return nil, err
	}
	t.api = client.New(addr, t.token)
	t.prefixes = searchPrefixes(prefix, n)
	t.searches = sampleSearches(t.prefixes, searchSample)
	// The deep page: page 1,000, or the last full page of a smaller
	// instance (the owner is one user more).
	if t.deepPage = min(1000, (n+1)/50); t.deepPage >= 2 {
		if t.deepCursor, err = t.api.CursorOfPage(ctx, t.deepPage); err != nil {
			return nil, fmt.Errorf("%s: walking to page %d: %w", name, t.deepPage, err)
		}
		t.deepReady = true
	}
	progress("%s: pid %d on %s; page %d found\n", name, t.proc.pid(), addr, t.deepPage)
	if !b.cfg.millionCold {
		start := time.Now()
		err := client.Parallel(ctx, len(t.ids), b.cfg.conns, func(ctx context.Context, i int) error {
			return t.api.Call(ctx, "GET", "/users/"+t.ids[i], nil, http.StatusOK, nil)
		})
		if err != nil {
			return nil, fmt.Errorf("%s: reading every user once: %w", name, err)
		}
		progress("%s: read every user once in %v\n", name, time.Since(start).Round(time.Millisecond))
	}
	return t, nil
}

// prepareDeep seeds every real target up to -deep-users and walks each
// target's list to the cursor of page 1,000.
func (b *bench) prepareDeep(ctx context.Context) error {
	for _, t := range b.group("") {
		if t.deepReady {
			continue
		}
		if t.name != "ceiling" && len(t.ids) < b.cfg.deepUsers {
			more := b.cfg.deepUsers - len(t.ids)
			progress("%s: seeding %d more users for page_deep ...\n", t.name, more)
			start := time.Now()
			ids, err := t.api.SeedUsers(ctx, "d"+b.tag+"_", 0, more, b.cfg.seedConns)
			if err != nil {
				return fmt.Errorf("%s: seeding: %w", t.name, err)
			}
			progress("%s: seeded %d users in %v\n", t.name, more, time.Since(start).Round(time.Millisecond))
			t.ids = append(t.ids, ids...)
		}
		cur, err := t.api.CursorOfPage(ctx, 1000)
		if err != nil {
			return fmt.Errorf("%s: walking to page 1,000: %w", t.name, err)
		}
		t.deepCursor, t.deepReady = cur, true
	}
	return nil
}

// source builds the requests of sc for t and sends one as a preflight; nil
// when t has not what sc needs.
func (b *bench) source(sc scenario, t *target) (*client.Source, error) {
	path, body, keys, err := sc.fill(t)
	if err != nil {
		progress("  %s: skipped: %v\n", t.name, err)
		return nil, nil
	}
	tpl, err := client.NewTemplate(sc.method, path, body, t.addr, t.token)
	if err != nil {
		return nil, err
	}
	// A million keys would hold a million requests: those are built as
	// they are sent, on every target of the group alike.
	src, err := client.NewSource(tpl, keys, b.tag, &b.counter, sc.needs != "million")
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", sc.name, t.name, err)
	}
	if sc.skew > 0 {
		src.Skewed(sc.skew)
	}
	status, snippet, err := preflight(t.addr, src)
	switch {
	case err != nil:
		return nil, fmt.Errorf("%s %s: preflight: %w", sc.name, t.name, err)
	case status < 200 || status > 299:
		progress("  %s: preflight answered %d: %s\n", t.name, status, snippet)
	}
	return src, nil
}

// aloneSuffix names the results of a scenario with writes measured without
// them.
const aloneSuffix = "/alone"

// besideSuffix names the results of the scenario measured beside another
// (scenario.beside), under the other's name.
const besideSuffix = "/beside"

func (b *bench) runScenario(ctx context.Context, sc scenario) error {
	progress("== %s\n", sc.name)
	group := b.group("")
	if sc.needs == "million" {
		group = b.group("million")
	}
	srcs := map[*target]*client.Source{}
	writes := map[*target]*client.Source{}
	for _, t := range group {
		src, err := b.source(sc, t)
		if err != nil || src == nil {
			if err != nil {
				return err
			}
			continue
		}
		srcs[t] = src
		if sc.writes != nil {
			if writes[t], err = b.source(*sc.writes, t); err != nil {
				return err
			}
		}
	}
	res := map[string]*targetResult{}
	b.results[sc.name] = res
	alone := map[string]*targetResult{}
	if sc.writes != nil {
		b.results[sc.name+aloneSuffix] = alone
	}
	var base scenario
	baseSrcs := map[*target]*client.Source{}
	beside := map[string]*targetResult{}
	if sc.beside != "" {
		var ok bool
		if base, ok = scenarioNamed(sc.beside); !ok {
			return fmt.Errorf("%s: no scenario %q to measure beside it", sc.name, sc.beside)
		}
		base.variant = "beside " + sc.name
		for t := range srcs {
			src, err := b.source(base, t)
			if err != nil {
				return err
			}
			baseSrcs[t] = src
		}
		b.results[sc.name+besideSuffix] = beside
	}
	add := func(m map[string]*targetResult, t *target, rec runRecord, lat, wlat []int64) {
		tr := m[t.name]
		if tr == nil {
			tr = &targetResult{}
			m[t.name] = tr
		}
		tr.rounds = append(tr.rounds, rec)
		tr.lat = append(tr.lat, lat...)
		tr.wlat = append(tr.wlat, wlat...)
	}
	// With writes, every round warms each target up again before its reads
	// alone (the writes of its last round emptied its read cache); without,
	// one warm-up per target does.
	if b.cfg.warmup > 0 && sc.writes == nil {
		for _, t := range group {
			if srcs[t] != nil {
				if _, _, _, err := b.measure(ctx, sc, t, srcs[t], nil, "warmup", 0); err != nil {
					return err
				}
			}
			if baseSrcs[t] != nil {
				if _, _, _, err := b.measure(ctx, base, t, baseSrcs[t], nil, "warmup", 0); err != nil {
					return err
				}
			}
		}
	}
	measureBeside := func(t *target, r int) error {
		if baseSrcs[t] == nil {
			return nil
		}
		rec, lat, _, err := b.measure(ctx, base, t, baseSrcs[t], nil, "measure", r)
		if err == nil {
			add(beside, t, rec, lat, nil)
		}
		return err
	}
	for r := 0; r < b.cfg.rounds; r++ {
		order := slices.Clone(group)
		if r%2 == 1 {
			slices.Reverse(order)
		}
		for _, t := range order {
			if srcs[t] == nil {
				continue
			}
			if sc.writes != nil {
				if b.cfg.warmup > 0 {
					if _, _, _, err := b.measure(ctx, sc, t, srcs[t], nil, "warmup", r); err != nil {
						return err
					}
				}
				rec, lat, _, err := b.measure(ctx, sc, t, srcs[t], nil, "measure", r)
				if err != nil {
					return err
				}
				add(alone, t, rec, lat, nil)
			}
			if r%2 == 0 {
				if err := measureBeside(t, r); err != nil {
					return err
				}
			}
			rec, lat, wlat, err := b.measure(ctx, sc, t, srcs[t], writes[t], "measure", r)
			if err != nil {
				return err
			}
			add(res, t, rec, lat, wlat)
			if r%2 == 1 {
				if err := measureBeside(t, r); err != nil {
					return err
				}
			}
		}
	}
	how := fmt.Sprintf("closed loop, %d connections", b.cfg.conns)
	if sc.open {
		how = fmt.Sprintf("open loop at %g req/s, latency from each request's scheduled time", b.cfg.rate)
	}
	var names []string
	refOf := map[string]string{}
	for _, t := range group {
		names = append(names, t.name)
		refOf[t.name] = "ceiling"
		if t.group == "million" {
			refOf[t.name] = t.name
			if t.ref != nil {
				refOf[t.name] = t.ref.name
			}
		}
	}
	if sc.needs == "million" {
		// What the scenario left the server holding (for the search, a
		// flood of them: every request a prefix of its own).
		for _, t := range group {
			if rss, hwm, err := processMemory(t.proc.pid()); err == nil {
				t.memory = append(t.memory, memSample{sc.name, rss, hwm})
				progress("  %s: RSS %.1f MB, peak %.1f MB\n", t.name, float64(rss)/1e6, float64(hwm)/1e6)
			}
		}
	}
	switch {
	case sc.writes != nil:
		b.say("%s\n", mixedTable(sc, how, b.cfg.mixedRate, names, alone, res))
	case sc.needs == "million":
		b.say("%s\n", scenarioTable(sc, how, names, res, refOf, "the smaller instance"))
	default:
		b.say("%s\n", scenarioTable(sc, how, names, res, refOf, "ceiling"))
	}
	// The latencies are in the table now; keep the memory down.
	for _, m := range []map[string]*targetResult{res, alone, beside} {
		for _, tr := range m {
			tr.lat, tr.wlat = nil, nil
		}
	}
	return nil
}

// measure runs one round (or warm-up) of sc against t and accounts for it;
// with writes, those run beside it, in an open loop at -mixed-rate on one
// connection, and the server's CPU is charged to sc's requests.
func (b *bench) measure(ctx context.Context, sc scenario, t *target, src, writes *client.Source, phase string, round int) (runRecord, []int64, []int64, error) {
	spec := loadSpec{addr: t.addr, src: src, conns: b.cfg.conns, seed: mrand.Uint64()}
	spec.duration = b.cfg.duration
	if phase == "warmup" {
		spec.duration = b.cfg.warmup
	}
	if sc.open {
		spec.rate = b.cfg.rate
	}
	// The CPU window is kept tight around the load: the processes are listed
	// before, sampled just before and just after, and only then are the
	// processes born during the run (new PostgreSQL backends) added.
	pids := t.pids(ctx)
	c0, m0, w0 := sampleCPU(pids), machineBusyTicks(), time.Now()
	var wres loadResult
	var werr error
	var wg sync.WaitGroup
	if writes != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wres, werr = runLoad(ctx, loadSpec{addr: t.addr, src: writes, conns: 1, duration: spec.duration, rate: b.cfg.mixedRate, seed: mrand.Uint64()})
		}()
	}
	res, err := runLoad(ctx, spec)
	wg.Wait()
	if err == nil {
		err = werr
	}
	if err != nil {
		return runRecord{}, nil, nil, err
	}
	c1, m1, window := sampleCPU(pids), machineBusyTicks(), time.Since(w0).Seconds()
	for k, v := range sampleCPU(slices.DeleteFunc(t.pids(ctx), func(p int) bool { return slices.Contains(pids, p) })) {
		c1[k] = v
	}
	if t.proc.exited() {
		return runRecord{}, nil, nil, fmt.Errorf("%s exited during %s (%v); its log %s ends:\n%s", t.name, sc.name, t.proc.err, t.logPath, tail(t.logPath, 2000))
	}
	srv := cpuDelta(c0, c1)
	sec := res.elapsed.Seconds()
	slices.Sort(res.lat)
	rec := runRecord{
		Scenario: sc.name, Target: t.name, Phase: phase, Round: round,
		Seconds: num(sec), Window: num(window),
		Requests: res.requests, OK: res.ok, Non2xx: res.non2xx, SockErrs: res.sockErrs,
		RPS:        num(float64(res.ok) / sec),
		SrvTicks:   srv,
		SrvUs:      num(perRequestMicros(srv, b.hz, res.requests)),
		SrvCores:   num(float64(srv) / b.hz / window),
		GenCores:   num(res.genCPU.Seconds() / sec),
		OtherCores: num((float64(m1-m0)/b.hz - float64(srv)/b.hz - res.genCPU.Seconds()) / window),
		P50ms:      num(ms(percentile(res.lat, 50))),
		P99ms:      num(ms(percentile(res.lat, 99))),
		MaxMs:      num(ms(percentile(res.lat, 100))),
		FirstBad:   res.firstBad,
	}
	rec.Variant = sc.variant
	if sc.writes != nil {
		rec.Variant = "alone"
		if writes != nil {
			slices.Sort(wres.lat)
			rec.Variant = "with_writes"
			rec.Writes, rec.WritesOK = wres.requests, wres.ok
			rec.WritesBad = wres.non2xx + wres.sockErrs
			rec.WriteP99ms = num(ms(percentile(wres.lat, 99)))
			if rec.FirstBad == "" {
				rec.FirstBad = wres.firstBad
			}
		}
	}
	if line, err := json.Marshal(rec); err == nil {
		_, _ = b.raw.Write(append(line, '\n'))
	}
	p := "r" + strconv.Itoa(round+1)
	if phase == "warmup" {
		p = "w "
	}
	extra := ""
	if writes != nil {
		extra = fmt.Sprintf("  + %d writes, p99 %s ms", rec.Writes, fmtNum(float64(rec.WriteP99ms)))
	}
	progress("  %s %-8s %8s req/s  %7s µs/req  p50 %s ms  p99 %s ms  err %d  srv %.2f gen %.2f other %.2f cores%s\n",
		p, t.name, fmtNum(float64(rec.RPS)), fmtNum(float64(rec.SrvUs)), fmtNum(float64(rec.P50ms)), fmtNum(float64(rec.P99ms)),
		rec.Non2xx+rec.SockErrs, float64(rec.SrvCores), float64(rec.GenCores), math.Max(0, float64(rec.OtherCores)), extra)
	if phase == "warmup" {
		return rec, nil, nil, nil
	}
	return rec, res.lat, wres.lat, nil
}

// preflight sends one request and returns its status (and the body's start
// when it is not a success).
func preflight(addr string, src *client.Source) (int, string, error) {
	c, err := client.Dial(addr)
	if err != nil {
		return 0, "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	var bufs client.RenderBufs
	resp, err := c.RoundTrip(src.Next(mrand.New(mrand.NewPCG(1, 2)), &bufs))
	if err != nil {
		return 0, "", err
	}
	return resp.Status, trunc(string(resp.Body), 300), nil
}

func (b *bench) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, t := range b.targets {
		t.proc.stop()
	}
	if b.pg != nil {
		for _, t := range b.targets {
			if t.pgDB != "" {
				if err := b.pg.dropDB(ctx, t.pgDB); err != nil {
					progress("dropping database %s: %v\n", t.pgDB, err)
				}
			}
		}
		if err := b.pg.restore(); err != nil {
			progress("restoring PostgreSQL's CPU affinity: %v\n", err)
		}
		_ = b.pg.conn.Close(ctx)
	}
	if !b.cfg.keepData {
		for _, t := range b.targets {
			if t.name != "ceiling" {
				_ = os.RemoveAll(filepath.Join(b.dir, t.name+"-data"))
			}
		}
	}
	for _, f := range []io.Closer{b.md, b.raw} {
		if f != nil {
			_ = f.Close()
		}
	}
}

func shellJoin(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		if a != "" && strings.IndexFunc(a, func(r rune) bool {
			return !(r == '-' || r == '_' || r == '.' || r == '/' || r == ',' || r == '=' || r == ':' ||
				r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9')
		}) < 0 {
			out[i] = a
		} else {
			out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(out, " ")
}

// redactURL hides a password in a database URL.
func redactURL(s string) string {
	if i := strings.Index(s, "@"); i > 0 {
		if j := strings.Index(s, "://"); j > 0 && j < i {
			if k := strings.Index(s[j+3:i], ":"); k >= 0 {
				return s[:j+3+k] + ":***" + s[i:]
			}
		}
	}
	return s
}
