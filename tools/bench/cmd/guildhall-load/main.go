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
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/guildhall/guildhall/internal/app"
	"github.com/guildhall/guildhall/internal/config"
)

func main() {
	var (
		url      = flag.String("url", "", "target a running server (with -token) instead of starting one")
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
	if err := run(*url, *token, *dbURL, *duration, *clients, *writes, *users, *channels, *roles, *p99Read, *minRPS); err != nil {
		fmt.Fprintln(os.Stderr, "guildhall-load:", err)
		os.Exit(1)
	}
}

type result struct {
	op      string
	latency time.Duration
	status  int
}

func run(url, token, dbURL string, duration time.Duration, clients int, writeFrac float64, nUsers, nChannels, nRoles int,
	p99Read time.Duration, minRPS float64) error {
	ctx := context.Background()
	var a *app.App
	if url == "" {
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
		url, token = "http://"+ln.Addr().String(), cfg.BootstrapToken
	}
	c := &client{base: url + "/api", token: token, http: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients * 2}}}

	fmt.Printf("seeding %d roles, %d channels, %d users ...\n", nRoles, nChannels, nUsers)
	seed, err := c.seed(nRoles, nChannels, nUsers)
	if err != nil {
		return err
	}

	fmt.Printf("running %d clients for %s (%.0f%% writes) against %s\n", clients, duration, writeFrac*100, url)
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
				results <- c.step(rng, seed, writeFrac, &seq)
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

type client struct {
	base, token string
	http        *http.Client
}

func (c *client) do(method, path, token string, body any) (int, []byte, error) {
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, c.base+path, r)
	if err != nil {
		return 0, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return resp.StatusCode, data, err
}

func (c *client) must(want int, method, path string, body any) map[string]any {
	st, data, err := c.do(method, path, c.token, body)
	if err != nil || st != want {
		panic(fmt.Sprintf("seed %s %s: %d %s %v", method, path, st, data, err))
	}
	var m map[string]any
	_ = json.Unmarshal(data, &m)
	return m
}

func (c *client) seed(nRoles, nChannels, nUsers int) (s seeded, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	perms := []string{"VIEW_CHANNEL", "SEND_MESSAGES", "MANAGE_MESSAGES", "ATTACH_FILES", "EMBED_LINKS", "ADD_REACTIONS"}
	for i := 0; i < nRoles; i++ {
		id := fmt.Sprintf("role-%d", i)
		c.must(201, "POST", "/roles/"+id+"/create", map[string]any{"name": id, "permissions": []string{perms[i%len(perms)]}})
		s.roles = append(s.roles, id)
	}
	for i := 0; i < nChannels; i++ {
		id := fmt.Sprintf("chan-%d", i)
		c.must(201, "POST", "/channels/"+id+"/create", map[string]any{"name": id})
		s.channels = append(s.channels, id)
		if i%3 == 0 {
			c.must(200, "POST", "/channels/"+id+"/permissions", map[string]any{"target_type": "everyone", "allow": []string{}, "deny": []string{"SEND_MESSAGES"}})
			c.must(200, "POST", "/channels/"+id+"/permissions", map[string]any{"target_type": "role", "target_id": s.roles[i%nRoles], "allow": []string{"SEND_MESSAGES"}, "deny": []string{}})
		}
	}
	for i := 0; i < nUsers; i++ {
		u := c.must(201, "POST", "/users", map[string]any{"username": fmt.Sprintf("user%d", i)})
		id := u["id"].(string)
		for j := 0; j < 3; j++ {
			st, data, err := c.do("POST", "/users/"+id+"/roles/"+s.roles[(i+j)%nRoles], c.token, nil)
			if err != nil || st != 204 {
				return s, fmt.Errorf("assign: %d %s %v", st, data, err)
			}
		}
		t := c.must(201, "POST", "/users/"+id+"/tokens", map[string]any{"name": "load"})
		s.users = append(s.users, userTok{id: id, token: t["token"].(string)})
	}
	return s, nil
}

func (c *client) step(rng *rand.Rand, s seeded, writeFrac float64, seq *atomic.Int64) result {
	u := s.users[rng.IntN(len(s.users))]
	ch := s.channels[rng.IntN(len(s.channels))]
	var op, method, path, token string
	var body any
	token = u.token
	if rng.Float64() < writeFrac {
		token = c.token
		switch rng.IntN(3) {
		case 0:
			op, method, path, body = "write rename channel", "POST", "/channels/"+ch+"/rename", map[string]any{"name": fmt.Sprintf("n%d", seq.Add(1))}
		case 1:
			op, method, path, body = "write set overwrite", "POST", "/channels/"+ch+"/permissions",
				map[string]any{"target_type": "user", "target_id": u.id, "allow": []string{"EMBED_LINKS"}, "deny": []string{fmt.Sprint([]string{"ADD_REACTIONS", "MENTION_EVERYONE"}[rng.IntN(2)])}}
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
	st, _, err := c.do(method, path, token, body)
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
