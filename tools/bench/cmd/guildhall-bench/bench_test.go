package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/guildhall/guildhall/tools/bench/internal/client"
)

// TestRunLoad drives a real net/http server with the load generator's
// loops (the connection itself is tested in internal/client).
func TestRunLoad(t *testing.T) {
	var mu sync.Mutex
	var bodies []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/echo":
			b, _ := io.ReadAll(r.Body)
			mu.Lock()
			bodies = append(bodies, string(b))
			mu.Unlock()
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write(b)
		default:
			http.Error(w, "no such thing", http.StatusNotFound)
		}
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	var counter atomic.Uint64
	source := func(t *testing.T, method, path, body string) *client.Source {
		t.Helper()
		tpl, err := client.NewTemplate(method, path, body, addr, "")
		if err != nil {
			t.Fatal(err)
		}
		src, err := client.NewSource(tpl, nil, "run", &counter, true)
		if err != nil {
			t.Fatal(err)
		}
		return src
	}

	t.Run("closed loop: every request answered, every create unique", func(t *testing.T) {
		src := source(t, "POST", "/echo", `{"username":"u{uniq}"}`)
		mu.Lock()
		bodies = nil
		mu.Unlock()
		res, err := runLoad(t.Context(), loadSpec{addr: addr, src: src, conns: 4, duration: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		if res.ok == 0 || res.non2xx != 0 || res.sockErrs != 0 || int64(len(res.lat)) != res.requests || res.requests != int64(len(bodies)) {
			t.Fatalf("ok %d non2xx %d sockErrs %d latencies %d requests %d; server saw %d (%s)",
				res.ok, res.non2xx, res.sockErrs, len(res.lat), res.requests, len(bodies), res.firstBad)
		}
		seen := map[string]bool{}
		for _, b := range bodies {
			if seen[b] {
				t.Fatalf("body %s sent twice", b)
			}
			seen[b] = true
		}
	})

	t.Run("open loop: the rate is kept, errors are counted", func(t *testing.T) {
		src := source(t, "GET", "/nope", "")
		res, err := runLoad(t.Context(), loadSpec{addr: addr, src: src, conns: 2, duration: 300 * time.Millisecond, rate: 100})
		if err != nil {
			t.Fatal(err)
		}
		// 100/s for 0.3 s is due 30 requests; the last few may not be due
		// before the end on a slow machine, none more may be sent.
		if res.requests > 30 || res.requests < 1 || res.non2xx != res.requests || !strings.HasPrefix(res.firstBad, "HTTP 404") {
			t.Fatalf("requests %d non2xx %d first %q", res.requests, res.non2xx, res.firstBad)
		}
	})
}

func TestPercentile(t *testing.T) {
	hundred := make([]int64, 100)
	for i := range hundred {
		hundred[i] = int64(i + 1)
	}
	tests := []struct {
		name   string
		sorted []int64
		p      float64
		want   int64
	}{
		{"empty", nil, 50, 0},
		{"one value", []int64{7}, 99, 7},
		{"p50 of 1..100", hundred, 50, 50},
		{"p99 of 1..100", hundred, 99, 99},
		{"p100 is the max", hundred, 100, 100},
		{"p50 of four is the second", []int64{1, 2, 3, 4}, 50, 2},
		{"p99 of ten is the max", []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 99, 10},
		{"a tiny p is the min", hundred, 0.001, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := percentile(tc.sorted, tc.p); got != tc.want {
				t.Fatalf("percentile(%v) = %d, want %d", tc.p, got, tc.want)
			}
		})
	}
}

func TestSpreadAndRatios(t *testing.T) {
	nan := math.NaN()
	tests := []struct {
		name     string
		a, ref   []float64
		want     spread
		wantNone bool
	}{
		{name: "round by round", a: []float64{300, 330, 290}, ref: []float64{25, 30, 20},
			want: spread{med: 12, lo: 11, hi: 14.5, n: 3}},
		{name: "even count: mean of the middle two", a: []float64{10, 40, 20, 30}, ref: []float64{10, 10, 10, 10},
			want: spread{med: 2.5, lo: 1, hi: 4, n: 4}},
		{name: "a round missing on either side is skipped", a: []float64{100, nan, 300}, ref: []float64{10, 10, nan},
			want: spread{med: 10, lo: 10, hi: 10, n: 1}},
		{name: "a zero reference is skipped", a: []float64{5}, ref: []float64{0}, wantNone: true},
		{name: "unequal lengths pair what they share", a: []float64{4, 8, 12}, ref: []float64{2, 2},
			want: spread{med: 3, lo: 2, hi: 4, n: 2}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := summarize(pairRatios(tc.a, tc.ref))
			if tc.wantNone {
				if got.n != 0 || !math.IsNaN(got.med) {
					t.Fatalf("got %+v, want nothing", got)
				}
				return
			}
			if got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
	t.Run("µs per request", func(t *testing.T) {
		if got := perRequestMicros(250, 100, 10_000); got != 250 {
			t.Fatalf("250 ticks at 100 Hz over 10,000 requests = %v µs, want 250", got)
		}
		if got := perRequestMicros(1, 100, 0); !math.IsNaN(got) {
			t.Fatalf("no requests = %v, want NaN", got)
		}
	})
}

func TestParseProcStat(t *testing.T) {
	// proc(5): pid (comm) state ppid pgrp session tty_nr tpgid flags minflt
	// cminflt majflt cmajflt utime stime cutime cstime priority nice
	// num_threads itrealvalue starttime ...
	tail := " 0 0 0 0 4194560 5 0 0 0 1234 567 8 9 20 0 7 0 424242 1000 10 18446744073709551615"
	tests := []struct {
		name    string
		line    string
		want    procStat
		wantErr bool
	}{
		{"plain", "42 (guildhall) S 7" + tail, procStat{pid: 42, ppid: 7, comm: "guildhall", utime: 1234, stime: 567, startTimeTick: 424242}, false},
		{"spaces and parentheses in the name", "43 (postgres: a (b) c) R 1" + tail,
			procStat{pid: 43, ppid: 1, comm: "postgres: a (b) c", utime: 1234, stime: 567, startTimeTick: 424242}, false},
		{"cut short", "44 (x) S 1 0 0", procStat{}, true},
		{"no name", "45 S 1" + tail, procStat{}, true},
		{"letters for utime", "46 (x) S 1 0 0 0 0 4194560 5 0 0 0 lots 567 8 9 20 0 7 0 1 1000 10 1", procStat{}, true},
	}
	t.Run("this process", func(t *testing.T) {
		st, err := readProcStat(os.Getpid())
		if err != nil || st.pid != os.Getpid() || st.ppid != os.Getppid() || st.startTimeTick == 0 {
			t.Fatalf("got %+v, %v; want pid %d ppid %d", st, err, os.Getpid(), os.Getppid())
		}
	})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseProcStat(tc.line)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error: %v", err, tc.wantErr)
			}
			if got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestParseMachineStat(t *testing.T) {
	content := "cpu  100 5 50 1000 20 3 2 1 0 0\ncpu0 50 2 25 500 10 1 1 0 0 0\nintr 1 2 3\n"
	busy, total, err := parseMachineStat(content)
	if err != nil {
		t.Fatal(err)
	}
	// busy = user + nice + system + irq + softirq + steal; total adds idle and iowait.
	if busy != 100+5+50+3+2+1 || total != busy+1000+20 {
		t.Fatalf("busy %d total %d", busy, total)
	}
	if _, _, err := parseMachineStat("cpu0 1 2 3 4 5 6 7 8\n"); err == nil {
		t.Fatal("no error without the aggregate line")
	}
}

func TestParseCPUList(t *testing.T) {
	tests := []struct {
		in      string
		want    []int
		wantErr bool
	}{
		{"1", []int{1}, false},
		{"0-3,6\n", []int{0, 1, 2, 3, 6}, false},
		{"0-1,3-4", []int{0, 1, 3, 4}, false},
		{"", nil, true},
		{"3-1", nil, true},
		{"a", nil, true},
	}
	for _, tc := range tests {
		t.Run(strconv.Quote(tc.in), func(t *testing.T) {
			got, err := parseCPUList(tc.in)
			if (err != nil) != tc.wantErr || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %v, %v; want %v (error: %v)", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestProcessTreeAndCPUDelta(t *testing.T) {
	parents := map[int]int{1: 0, 10: 1, 11: 10, 12: 10, 13: 12, 20: 1, 21: 20}
	if got, want := descendants(10, parents), []int{10, 11, 12, 13}; !reflect.DeepEqual(got, want) {
		t.Fatalf("descendants(10) = %v, want %v", got, want)
	}
	if got, want := descendants(99, parents), []int{99}; !reflect.DeepEqual(got, want) {
		t.Fatalf("descendants of an unknown pid = %v, want %v", got, want)
	}
	before := cpuSample{{10, 5}: 100, {11, 6}: 50, {12, 7}: 10}
	after := cpuSample{
		{10, 5}: 160, // +60
		{11, 6}: 50,  // +0
		{12, 9}: 4,   // pid 12 reused by a new process: counts whole
		{14, 8}: 30,  // born during the run: counts whole
	}
	if got := cpuDelta(before, after); got != 60+0+4+30 {
		t.Fatalf("cpuDelta = %d, want 94", got)
	}
	self := sampleCPU([]int{os.Getpid()})
	if len(self) != 1 {
		t.Fatalf("sampling this process gave %v", self)
	}
}

func TestSelectScenarios(t *testing.T) {
	names := func(ss []scenario) string {
		var n []string
		for _, s := range ss {
			n = append(n, s.name)
		}
		return strings.Join(n, ",")
	}
	tests := []struct {
		in, want string
		wantErr  bool
	}{
		{in: "get_user", want: "get_user"},
		{in: "create_user,get_user", want: "get_user,create_user"}, // the bench's order: reads before writes
		{in: "page_deep", want: "page_1,page_1000"},
		{in: "default", want: "get_user,get_perms,get_perms_channel,get_channel,list_users,list_channels,perms_heavy,perms_light,perms_heavy_explain,perms_light_explain,list_overwrites_heavy,list_overwrites_light,mixed_get_user,create_user,latency_get_user,latency_create_user"},
		{in: "million,get_user", want: "get_user,million_get_user,million_get_perms,million_get_user_zipf,million_get_perms_zipf,million_list_users,million_search_users,million_search_flood,million_page_1000"},
		{in: "create_user,mixed_get_user", want: "mixed_get_user,create_user"},
		{in: "access", want: "access_open,access_role,access_users,million_access_open,million_access_role,million_access_users"},
		{in: "history", want: "history_perms_explain,history_overwrites,history_roles"},
		{in: "history_roles,get_user", want: "get_user,history_roles"},
		{in: "get_usr", wantErr: true},
		{in: "", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := selectScenarios(tc.in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error: %v", err, tc.wantErr)
			}
			if !tc.wantErr && names(got) != tc.want {
				t.Fatalf("got %s, want %s", names(got), tc.want)
			}
		})
	}
}

// TestMillionMissesFlag: -million-misses measures first reads, so the
// instances are not read through first (it implies -million-cold).
func TestMillionMissesFlag(t *testing.T) {
	c, err := parseFlags([]string{"-million-misses", "-scenarios", "million_get_user"})
	if err != nil {
		t.Fatal(err)
	}
	if !c.millionMisses || !c.millionCold {
		t.Fatalf("misses %v, cold %v: want both", c.millionMisses, c.millionCold)
	}
	if c, err = parseFlags(nil); err != nil || c.millionMisses || c.millionCold {
		t.Fatalf("defaults: misses %v, cold %v, err %v", c.millionMisses, c.millionCold, err)
	}
}

// TestCeiling checks that the ceiling answers the scenarios' routes like
// Guildhall would: statuses, shapes, auth, validation and a cursor walk.
func TestCeiling(t *testing.T) {
	seeded := []string{"01a0-c", "01a0-a", "01a0-b"}
	c := newCeiling("tok", "01a0-heavy", "01a0-light", seeded)
	srv := httptest.NewServer(c.handler())
	defer srv.Close()
	do := func(method, path, token, body string) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&m)
		return resp.StatusCode, m
	}
	tests := []struct {
		name, method, path, token, body string
		wantStatus                      int
		check                           func(t *testing.T, m map[string]any)
	}{
		{"no token", "GET", "/api/users/01a0-a", "", "", 401, nil},
		{"wrong token", "GET", "/api/users/01a0-a", "nope", "", 401, nil},
		{"a user", "GET", "/api/users/01a0-a", "tok", "", 200, func(t *testing.T, m map[string]any) {
			if m["id"] != "01a0-a" || m["status"] != "active" || m["roles"] == nil || m["created_at"] == nil {
				t.Errorf("user %v", m)
			}
		}},
		{"an unknown user", "GET", "/api/users/zzz", "tok", "", 404, func(t *testing.T, m map[string]any) {
			if m["code"] != "not_found" {
				t.Errorf("problem %v", m)
			}
		}},
		{"permissions", "GET", "/api/users/01a0-a/permissions", "tok", "", 200, func(t *testing.T, m map[string]any) {
			if m["channel_id"] != nil || len(m["permissions"].([]any)) != len(defaultGlobal) {
				t.Errorf("permissions %v", m)
			}
		}},
		{"permissions in the heavy channel, explained", "GET", "/api/users/01a0-heavy/permissions?channelID=heavy&explain=true", "tok", "", 200,
			func(t *testing.T, m map[string]any) {
				if m["channel_id"] != heavyChannel || len(m["explain"].([]any)) != len(channelPerms) {
					t.Errorf("explain %v", m)
				}
			}},
		{"permissions in an unknown channel", "GET", "/api/users/01a0-a/permissions?channelID=zzz", "tok", "", 404, nil},
		{"a channel", "GET", "/api/channels/bench", "tok", "", 200, func(t *testing.T, m map[string]any) {
			if m["id"] != "bench" || m["name"] != "Bench" || m["kind"] != "text" || m["parent_id"] != nil || m["synced"] != false {
				t.Errorf("channel %v", m)
			}
		}},
		{"the channels", "GET", "/api/channels", "tok", "", 200, func(t *testing.T, m map[string]any) {
			items := m["items"].([]any)
			// bench, the list's, heavy and light, in the order created.
			if len(items) != 1+listChannelCount+2 || m["next_cursor"] != nil {
				t.Fatalf("%d channels, next_cursor %v", len(items), m["next_cursor"])
			}
			for i, it := range items {
				if p := it.(map[string]any)["position"]; p != float64(i) {
					t.Errorf("channel %d at position %v", i, p)
				}
			}
			if first := items[0].(map[string]any); first["id"] != benchChannel {
				t.Errorf("first channel %v", first)
			}
		}},
		{"the heavy channel's overwrites", "GET", "/api/channels/heavy/permissions", "tok", "", 200, func(t *testing.T, m map[string]any) {
			// everyone, the roles, and the users there are (heavy + 3 seeded).
			if n := len(m["items"].([]any)); n != 1+heavyRoles+1+len(seeded) || m["next_cursor"] != nil {
				t.Errorf("%d overwrites, next_cursor %v", n, m["next_cursor"])
			}
		}},
		{"the light channel's overwrites", "GET", "/api/channels/light/permissions", "tok", "", 200, func(t *testing.T, m map[string]any) {
			if n := len(m["items"].([]any)); n != 0 {
				t.Errorf("%d overwrites", n)
			}
		}},
		{"create", "POST", "/api/users", "tok", `{"username":"u1","display_name":"Bench 1"}`, 201, func(t *testing.T, m map[string]any) {
			if m["username"] != "u1" || m["display_name"] != "Bench 1" || m["id"] == "" {
				t.Errorf("created %v", m)
			}
		}},
		{"create with a bad username", "POST", "/api/users", "tok", `{"username":"u 1"}`, 400, nil},
		{"create with an unknown field", "POST", "/api/users", "tok", `{"username":"u1","x":1}`, 400, nil},
		{"who has access", "GET", "/api/channels/" + accessRoleChannel + "/access?limit=2", "tok", "", 200, func(t *testing.T, m map[string]any) {
			if n := len(m["items"].([]any)); n != 2 || m["next_cursor"] == nil {
				t.Errorf("%d users, next_cursor %v", n, m["next_cursor"])
			}
		}},
		{"a bad limit", "GET", "/api/users?limit=0", "tok", "", 400, nil},
		{"a bad cursor", "GET", "/api/users?cursor=!!", "tok", "", 400, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, m := do(tc.method, tc.path, tc.token, tc.body)
			if status != tc.wantStatus {
				t.Fatalf("status %d, want %d: %v", status, tc.wantStatus, m)
			}
			if tc.check != nil {
				tc.check(t, m)
			}
		})
	}
	t.Run("a cursor walk sees every user once, in order", func(t *testing.T) {
		var got []string
		path := "/api/users?limit=2"
		for range 10 {
			status, m := do("GET", path, "tok", "")
			if status != 200 {
				t.Fatalf("status %d", status)
			}
			for _, it := range m["items"].([]any) {
				got = append(got, it.(map[string]any)["id"].(string))
			}
			next, _ := m["next_cursor"].(string)
			if next == "" {
				break
			}
			path = "/api/users?limit=2&cursor=" + url.QueryEscape(next)
		}
		want := []string{"01a0-a", "01a0-b", "01a0-c", "01a0-heavy", "01a0-light"}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("walk %v, want %v", got, want)
		}
	})
}

func TestMillionNames(t *testing.T) {
	for n, want := range map[int]string{10_000: "10k", 1_000_000: "1m", 20_000: "20k", 500: "500", 1_500_000: "1500k", 1234: "1234"} {
		if got := compactCount(n); got != want {
			t.Errorf("compactCount(%d) = %q, want %q", n, got, want)
		}
	}
	tests := []struct {
		n           int
		first, last string
		count       int
	}{
		{n: 10_000, first: "m_00000", last: "m_00099", count: 100},
		{n: 1_000_000, first: "m_00000", last: "m_09999", count: 10_000},
		{n: 250, first: "m_00000", last: "m_00001", count: 2},
		{n: 99, first: "m_", last: "m_", count: 1},
	}
	for _, tc := range tests {
		got := searchPrefixes("m_", tc.n)
		if len(got) != tc.count || got[0] != tc.first || got[len(got)-1] != tc.last {
			t.Errorf("searchPrefixes(%d): %d prefixes %q..%q, want %d %q..%q", tc.n, len(got), got[0], got[len(got)-1], tc.count, tc.first, tc.last)
		}
		// Every prefix is shared by 100 of the n users (all of them, under 100).
		for _, p := range []string{got[0], got[len(got)-1]} {
			shared := 0
			for i := range tc.n {
				if strings.HasPrefix(fmt.Sprintf("m_%07d", i), p) {
					shared++
				}
			}
			if shared != min(100, tc.n) {
				t.Errorf("searchPrefixes(%d): %q is shared by %d users", tc.n, p, shared)
			}
		}
	}
	// million_search_users searches as many different prefixes on both
	// instances, spread over the bigger one's users.
	small, big := sampleSearches(searchPrefixes("m_", 10_000), searchSample), sampleSearches(searchPrefixes("m_", 1_000_000), searchSample)
	if len(small) != 100 || small[99] != "m_00099" {
		t.Errorf("the smaller instance's searches: %d, the last %q; want all 100 of its prefixes", len(small), small[len(small)-1])
	}
	if len(big) != 100 || big[0] != "m_00000" || big[1] != "m_00100" || big[99] != "m_09900" {
		t.Errorf("the bigger instance's searches: %d, %q, %q .. %q; want every 100th of its prefixes", len(big), big[0], big[1], big[len(big)-1])
	}
}

// TestHistoryScenarios checks that the history scenarios ask about the
// target's user and instant (escaped in the query), one request at a
// time, and are not run on a target without a history log.
func TestHistoryScenarios(t *testing.T) {
	def, err := selectScenarios("default")
	if err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(def, func(s scenario) bool { return s.needs == "history" }) {
		t.Error("a history scenario is in the default group: seeding its log takes minutes")
	}
	if nd := needsOf([]scenario{mustScenario(t, "history_roles")}); !nd.history || nd.main || nd.million {
		t.Errorf("needs of history_roles = %+v; want the history group alone", nd)
	}
	hist := &target{name: "sqlite-history", group: "history", histUser: "01a0-u", histAt: "2026-01-02T03:04:05.123456+00:00", ids: []string{"x"}}
	tests := []struct{ name, wantPath string }{
		{"history_perms_explain", "/api/users/01a0-u/permissions?channelID=c07&explain=true&at=2026-01-02T03%3A04%3A05.123456%2B00%3A00"},
		{"history_overwrites", "/api/channels/c07/permissions?at=2026-01-02T03%3A04%3A05.123456%2B00%3A00"},
		{"history_roles", "/api/roles?at=2026-01-02T03%3A04%3A05.123456%2B00%3A00"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sc := mustScenario(t, tc.name)
			if sc.conns != 1 || sc.open {
				t.Errorf("conns %d, open %v; want a closed loop of 1 connection", sc.conns, sc.open)
			}
			path, _, _, err := sc.fill(hist)
			if err != nil || path != tc.wantPath {
				t.Errorf("fill = %q, %v; want %q", path, err, tc.wantPath)
			}
			if _, _, _, err := sc.fill(&target{name: "sqlite", ids: []string{"x"}}); err == nil {
				t.Error("filled for a target without a history log")
			}
		})
	}
}

func mustScenario(t *testing.T, name string) scenario {
	t.Helper()
	sc, ok := scenarioNamed(name)
	if !ok {
		t.Fatalf("no scenario %q", name)
	}
	return sc
}

// TestTables renders the mixed table and the million summary from made-up
// rounds: the ratios are taken round by round, and the goal is judged.
func TestTables(t *testing.T) {
	rec := func(us, rps float64) runRecord {
		return runRecord{SrvUs: num(us), RPS: num(rps), Requests: 100, Seconds: 1}
	}
	withW := func(us float64) runRecord {
		r := rec(us, 90)
		r.Writes, r.WritesOK = 40, 40
		return r
	}
	var mixed scenario
	for _, s := range scenarios {
		if s.name == "mixed_get_user" {
			mixed = s
		}
	}
	alone := map[string]*targetResult{
		"ceiling": {rounds: []runRecord{rec(10, 100), rec(10, 100)}},
		"sqlite":  {rounds: []runRecord{rec(40, 100), rec(50, 100)}},
	}
	with := map[string]*targetResult{
		"ceiling": {rounds: []runRecord{withW(10), withW(11)}},
		"sqlite":  {rounds: []runRecord{withW(60), withW(55)}},
	}
	out := mixedTable(mixed, "closed loop", 40, []string{"ceiling", "sqlite"}, alone, with)
	for _, want := range []string{"| sqlite | 100 | 90.0 | 45.0 (40.0–50.0) | 57.5 (55.0–60.0) | 1.30× (1.10–1.50) |", "| 40.0 |", "sqlite 1.30× (not met)"} {
		if !strings.Contains(out, want) {
			t.Errorf("mixed table lacks %q:\n%s", want, out)
		}
	}

	small := &target{name: "sqlite-10k", group: "million", users: 10_000, deepPage: 200}
	big := &target{name: "sqlite-1m", group: "million", users: 1_000_000, deepPage: 1000, ref: small}
	all := map[string]map[string]*targetResult{
		"million_get_user":  {"sqlite-10k": {rounds: []runRecord{rec(20, 1), rec(30, 1)}}, "sqlite-1m": {rounds: []runRecord{rec(30, 1), rec(30, 1)}}},
		"million_page_1000": {"sqlite-10k": {rounds: []runRecord{rec(40, 1), rec(60, 1)}}, "sqlite-1m": {rounds: []runRecord{rec(44, 1), rec(66, 1)}}},
		// Measured beside: the first page, slower in the second round as
		// the deep page was.
		"million_page_1000" + besideSuffix: {"sqlite-10k": {rounds: []runRecord{rec(40, 1), rec(50, 1)}}, "sqlite-1m": {rounds: []runRecord{rec(40, 1), rec(60, 1)}}},
	}
	out = millionSummary([]*target{small, big}, all)
	for _, want := range []string{"### 1,000,000 users / 10,000 users", "| scenario | sqlite-1m ÷ sqlite-10k |", "| million_get_user | 1.25× (1.00–1.50) |", "page 1000 of the bigger, and page 200 of the smaller",
		"million_page_1000 over million_list_users on the same instance", "| sqlite-10k | 50.0 (40.0–60.0) | 45.0 (40.0–50.0) | 1.10× (1.00–1.20) |", "| sqlite-1m | 55.0 (44.0–66.0) | 50.0 (40.0–60.0) | 1.10× |"} {
		if !strings.Contains(out, want) {
			t.Errorf("million summary lacks %q:\n%s", want, out)
		}
	}
}
