// Command guildhall-load is Guildhall's load run: it starts an instance
// in-process (SQLite in a temporary directory, or PostgreSQL with
// -database-url) or targets a running one (-url with -token), seeds a
// community, and runs concurrent clients for a while: mostly reads that need
// authorization in a channel, plus writes. It prints throughput and latency
// percentiles per operation and the server's heap, and exits non-zero when a
// request fails with a 5xx or a target is missed.
//
//	make load   (or, in tools/bench: go run ./cmd/guildhall-load -duration 10s -clients 32)
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/guildhall/guildhall/internal/app"
	"github.com/guildhall/guildhall/internal/config"
	"github.com/guildhall/guildhall/tools/bench/internal/client"
)

func main() {
	var (
		target   = flag.String("url", "", "target a running server, http://host:port (with -token), instead of starting one")
		token    = flag.String("token", "", "owner token of the -url server")
		dbURL    = flag.String("database-url", "", "postgres:// URL for the in-process server (default: SQLite in a temp dir)")
		duration = flag.Duration("duration", 10*time.Second, "how long to run")
		clients  = flag.Int("clients", 32, "concurrent clients")
		writes   = flag.Float64("writes", 0.1, "fraction of requests that write")
		users    = flag.Int("users", 200, "users to seed")
		channels = flag.Int("channels", 100, "channels to seed")
		roles    = flag.Int("roles", 20, "roles to seed")
		p99Read  = flag.Duration("target-p99-read", 50*time.Millisecond, "fail if the p99 of reads exceeds this")
		minRPS   = flag.Float64("target-rps", 500, "fail if throughput is below this (requests per second)")
	)
	flag.Parse()
	if err := run(*target, *token, *dbURL, *duration, *clients, *writes, *users, *channels, *roles, *p99Read, *minRPS); err != nil {
		fmt.Fprintln(os.Stderr, "guildhall-load:", err)
		os.Exit(1)
	}
}

type result struct {
	op      string
	latency time.Duration
	status  int
}

func run(target, token, dbURL string, duration time.Duration, clients int, writeFrac float64, nUsers, nChannels, nRoles int,
	p99Read time.Duration, minRPS float64) error {
	ctx := context.Background()
	var a *app.App
	if target == "" {
		dir, err := os.MkdirTemp("", "guildhall-load-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		cfg := config.Default()
		cfg.DataDir, cfg.DatabaseURL, cfg.RateLimit = dir, dbURL, 0
		cfg.BootstrapToken = "gh_load_bootstrap_token_0123456789abcdef"
		if a, err = app.New(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
			return err
		}
		defer a.Close()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		sctx, stop := context.WithCancel(ctx)
		defer stop()
		go func() { _ = a.Serve(sctx, ln) }()
		target, token = "http://"+ln.Addr().String(), cfg.BootstrapToken
	}
	u, err := url.Parse(target)
	if err != nil || u.Scheme != "http" || u.Host == "" {
		return fmt.Errorf("-url %q: want http://host:port", target)
	}
	c := client.New(u.Host, token)
	defer c.Close()

	fmt.Printf("seeding %d roles, %d channels, %d users ...\n", nRoles, nChannels, nUsers)
	seed, err := seedCommunity(ctx, c, nRoles, nChannels, nUsers)
	if err != nil {
		return err
	}

	fmt.Printf("running %d clients for %s (%.0f%% writes) against %s\n", clients, duration, writeFrac*100, target)
	results := make(chan result, 4096)
	var all []result
	done := make(chan struct{})
	go func() {
		for r := range results {
			all = append(all, r)
		}
		close(done)
	}()
	deadline := time.Now().Add(duration)
	var wg sync.WaitGroup
	var seq atomic.Int64
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(i), 42))
			for time.Now().Before(deadline) {
				results <- step(ctx, c, rng, seed, writeFrac, &seq)
			}
		}(i)
	}
	wg.Wait()
	close(results)
	<-done
	return report(all, duration, a, p99Read, minRPS)
}

type seeded struct {
	users    []userTok
	channels []string
	roles    []string
}

type userTok struct{ id, token string }

// seedCommunity creates the roles, the channels (a third with
// overwrites) and the users, each with three roles and a token of their
// own, as the owner.
func seedCommunity(ctx context.Context, c *client.Client, nRoles, nChannels, nUsers int) (seeded, error) {
	var s seeded
	perms := []string{"VIEW_CHANNEL", "SEND_MESSAGES", "MANAGE_MESSAGES", "ATTACH_FILES", "EMBED_LINKS", "ADD_REACTIONS"}
	for i := 0; i < nRoles; i++ {
		id := fmt.Sprintf("role-%d", i)
		if err := c.Call(ctx, "POST", "/roles/"+id+"/create", map[string]any{"name": id, "permissions": []string{perms[i%len(perms)]}}, 201, nil); err != nil {
			return s, fmt.Errorf("seed: %w", err)
		}
		s.roles = append(s.roles, id)
	}
	for i := 0; i < nChannels; i++ {
		id := fmt.Sprintf("chan-%d", i)
		if err := c.Call(ctx, "POST", "/channels/"+id+"/create", map[string]any{"name": id}, 201, nil); err != nil {
			return s, fmt.Errorf("seed: %w", err)
		}
		s.channels = append(s.channels, id)
		if i%3 == 0 {
			for _, o := range []map[string]any{
				{"target_type": "everyone", "allow": []string{}, "deny": []string{"SEND_MESSAGES"}},
				{"target_type": "role", "target_id": s.roles[i%nRoles], "allow": []string{"SEND_MESSAGES"}, "deny": []string{}},
			} {
				if err := c.Call(ctx, "POST", "/channels/"+id+"/permissions", o, 200, nil); err != nil {
					return s, fmt.Errorf("seed: %w", err)
				}
			}
		}
	}
	for i := 0; i < nUsers; i++ {
		var u client.Created
		if err := c.Call(ctx, "POST", "/users", client.UserCreate{Username: fmt.Sprintf("user%d", i)}, 201, &u); err != nil {
			return s, fmt.Errorf("seed: %w", err)
		}
		for j := 0; j < 3; j++ {
			if err := c.Call(ctx, "POST", "/users/"+u.ID+"/roles/"+s.roles[(i+j)%nRoles], nil, 204, nil); err != nil {
				return s, fmt.Errorf("seed: %w", err)
			}
		}
		var t struct {
			Token string `json:"token"`
		}
		if err := c.Call(ctx, "POST", "/users/"+u.ID+"/tokens", map[string]any{"name": "load"}, 201, &t); err != nil {
			return s, fmt.Errorf("seed: %w", err)
		}
		s.users = append(s.users, userTok{id: u.ID, token: t.Token})
	}
	return s, nil
}

func step(ctx context.Context, c *client.Client, rng *rand.Rand, s seeded, writeFrac float64, seq *atomic.Int64) result {
	u := s.users[rng.IntN(len(s.users))]
	ch := s.channels[rng.IntN(len(s.channels))]
	var op, method, path, token string
	var body any
	token = u.token
	if rng.Float64() < writeFrac {
		token = "" // the owner's
		switch rng.IntN(3) {
		case 0:
			op, method, path, body = "write rename channel", "POST", "/channels/"+ch+"/rename", map[string]any{"name": fmt.Sprintf("n%d", seq.Add(1))}
		case 1:
			op, method, path, body = "write set overwrite", "POST", "/channels/"+ch+"/permissions",
				map[string]any{"target_type": "user", "target_id": u.id, "allow": []string{"EMBED_LINKS"}, "deny": []string{[]string{"ADD_REACTIONS", "MENTION_EVERYONE"}[rng.IntN(2)]}}
		default:
			op, method, path, body = "write create user", "POST", "/users", map[string]any{"username": fmt.Sprintf("load%d-%d", rng.IntN(1e9), seq.Add(1))}
		}
	} else {
		switch rng.IntN(4) {
		case 0:
			op, method, path = "read channel", "GET", "/channels/"+ch
		case 1:
			op, method, path = "read channel list", "GET", "/channels?limit=50"
		case 2:
			op, method, path = "read permissions in channel", "GET", "/users/"+u.id+"/permissions?channelID="+ch
		default:
			op, method, path = "read roles", "GET", "/roles"
		}
	}
	start := time.Now()
	st, _, err := c.Do(ctx, method, path, token, body)
	if err != nil {
		st = 599
	}
	return result{op: op, latency: time.Since(start), status: st}
}

func report(all []result, d time.Duration, a *app.App, p99Read time.Duration, minRPS float64) error {
	byOp := map[string][]time.Duration{}
	var fail5xx, reads int
	var readLat []time.Duration
	statuses := map[int]int{}
	for _, r := range all {
		byOp[r.op] = append(byOp[r.op], r.latency)
		statuses[r.status]++
		if r.status >= 500 {
			fail5xx++
		}
		if r.op[:4] == "read" {
			reads++
			readLat = append(readLat, r.latency)
		}
	}
	ops := make([]string, 0, len(byOp))
	for op := range byOp {
		ops = append(ops, op)
	}
	sort.Strings(ops)
	fmt.Printf("\n%-30s %8s %10s %10s %10s\n", "operation", "count", "p50", "p95", "p99")
	for _, op := range ops {
		l := byOp[op]
		fmt.Printf("%-30s %8d %10s %10s %10s\n", op, len(l), pct(l, 50), pct(l, 95), pct(l, 99))
	}
	rps := float64(len(all)) / d.Seconds()
	fmt.Printf("\ntotal %d requests in %s: %.0f req/s; statuses %v\n", len(all), d, rps, statuses)
	if a != nil {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		fmt.Printf("process heap in use %.1f MiB, total allocated %.1f MiB (server and load generator share the process)\n",
			float64(ms.HeapInuse)/(1<<20), float64(ms.TotalAlloc)/(1<<20))
	}
	var errs []string
	if fail5xx > 0 {
		errs = append(errs, fmt.Sprintf("%d requests failed with 5xx", fail5xx))
	}
	if p := pctD(readLat, 99); reads > 0 && p > p99Read {
		errs = append(errs, fmt.Sprintf("read p99 %s exceeds the target %s", p, p99Read))
	}
	if rps < minRPS {
		errs = append(errs, fmt.Sprintf("throughput %.0f req/s is below the target %.0f", rps, minRPS))
	}
	if len(errs) > 0 {
		return fmt.Errorf("targets missed: %v", errs)
	}
	fmt.Println("targets met")
	return nil
}

func pctD(l []time.Duration, p int) time.Duration {
	if len(l) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), l...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[(len(s)-1)*p/100]
}

func pct(l []time.Duration, p int) string { return pctD(l, p).Round(10 * time.Microsecond).String() }
