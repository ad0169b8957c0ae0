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
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
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
	millionMisses    bool
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
	fs.BoolVar(&c.millionMisses, "million-misses", false, "measure misses: the million instances run with a read cache too small to keep more than a few hundred users (GUILDHALL_CACHE_BYTES="+strconv.Itoa(missCacheBytes)+"), so that a member read at random is a first read; implies -million-cold")
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
	if c.millionMisses {
		c.millionCold = true
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
	if err := b.openResults(); err != nil {
		return err
	}
	nd := needsOf(scs)
	wanted, stores, err := b.chooseTargets(ctx, nd)
	if err != nil {
		return err
	}
	b.header(nd)
	if nd.main {
		if err := b.startTargets(ctx, wanted, nd); err != nil {
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
			if err := b.prepareMillion(ctx, stores, nd.millionAccess); err != nil {
				return err
			}
		case "history":
			if err := b.prepareHistory(ctx, stores); err != nil {
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

// openResults creates the run directory and its two results files, and
// fixes what names this run's users and converts its CPU ticks.
func (b *bench) openResults() error {
	b.dir = b.cfg.out
	if b.dir == "" {
		b.dir = filepath.Join("tmp", "bench-http", time.Now().Format("20060102-150405"))
	}
	if err := os.MkdirAll(b.dir, 0o755); err != nil {
		return err
	}
	var err error
	if b.md, err = os.Create(filepath.Join(b.dir, "results.md")); err != nil {
		return err
	}
	if b.raw, err = os.Create(filepath.Join(b.dir, "results.jsonl")); err != nil {
		return err
	}
	b.hz = clockTicks()
	b.tag = strconv.FormatInt(time.Now().Unix()%(36*36*36*36*36), 36)
	return nil
}

// needs is what the chosen scenarios ask of the targets and the report.
type needs struct {
	perms   bool // the heavy permission setup
	access  bool // the access community beside it (setupAccess)
	deep    bool // users enough for page 1,000
	main    bool // the main group (ceiling, sqlite, postgres)
	million bool // the million group
	history bool // the history group
	mixed   bool // writes beside the reads
	// millionAccess: the access community on the million instances.
	millionAccess bool
}

func needsOf(scs []scenario) needs {
	return needs{
		perms:         slices.ContainsFunc(scs, func(s scenario) bool { return s.needs == "perms" || s.needs == "access" }),
		access:        slices.ContainsFunc(scs, func(s scenario) bool { return s.needs == "access" }),
		deep:          slices.ContainsFunc(scs, func(s scenario) bool { return s.needs == "deep" }),
		main:          slices.ContainsFunc(scs, func(s scenario) bool { return s.needs != "million" && s.needs != "history" }),
		million:       slices.ContainsFunc(scs, func(s scenario) bool { return s.needs == "million" }),
		history:       slices.ContainsFunc(scs, func(s scenario) bool { return s.needs == "history" }),
		mixed:         slices.ContainsFunc(scs, func(s scenario) bool { return s.writes != nil }),
		millionAccess: slices.ContainsFunc(scs, func(s scenario) bool { return s.needs == "million" && s.access }),
	}
}

// chooseTargets reads -targets and returns the targets to start and the
// stores among them; an unreachable PostgreSQL drops the postgres target
// (and says why in the report) rather than failing the run.
func (b *bench) chooseTargets(ctx context.Context, nd needs) (wanted, stores []string, err error) {
	for _, name := range strings.Split(b.cfg.targets, ",") {
		switch name = strings.TrimSpace(name); name {
		case "ceiling", "sqlite", "postgres":
			wanted = append(wanted, name)
		default:
			return nil, nil, fmt.Errorf("unknown target %q (ceiling, sqlite, postgres)", name)
		}
	}
	stores = slices.DeleteFunc(slices.Clone(wanted), func(s string) bool { return s == "ceiling" })
	switch {
	case nd.million && len(stores) == 0:
		return nil, nil, errors.New("the million scenarios need sqlite or postgres in -targets")
	case nd.history && len(stores) == 0:
		return nil, nil, errors.New("the history scenarios need sqlite or postgres in -targets")
	case nd.million && b.cfg.millionUsers <= b.cfg.users:
		return nil, nil, errors.New("the million scenarios need -million-users above -users")
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
	return wanted, stores, nil
}

// header writes the report's opening: the machine, the command, and how
// the run measures.
func (b *bench) header(nd needs) {
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
	if nd.main {
		b.say("- ceiling, sqlite, postgres: %s users seeded through the API\n", thousands(int64(b.cfg.users)))
	}
	if nd.mixed {
		b.say("- mixed_get_user: %g creates/s beside the reads (open loop, one connection)\n", b.cfg.mixedRate)
	}
	if nd.million {
		b.say("- million: per store, an instance with %s users and one with %s, seeded in bulk into the database before the server serves them\n",
			thousands(int64(b.cfg.users)), thousands(int64(b.cfg.millionUsers)))
		if b.cfg.millionMisses {
			b.say("- million: measured on misses (-million-misses): the million instances' read caches (GUILDHALL_CACHE_BYTES=%d) keep the caller's credentials and a few hundred users, so that a member read at random, or their permissions, is read from the database, as a member's first read is\n", missCacheBytes)
		} else if b.cfg.millionCold {
			b.say("- million: measured cold (-million-cold): the servers' read caches fill as the scenarios read\n")
		} else {
			b.say("- million: each user read once before the scenarios, as a server that has run a while has: the read caches hold what they would\n")
		}
	}
	if nd.history {
		b.say("- history: per store, an instance whose audit log has %s events, of which at least %s permission-relevant changes after the instant asked about, made through the API; the rest filler written in bulk into the database while the server is stopped\n",
			thousands(historyEvents), thousands(historyRelevant))
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
}

// group returns the targets of a group ("", "million" or "history"), in the order they
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
