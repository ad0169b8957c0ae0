package app_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/guildhall/guildhall/internal/store"
	"github.com/guildhall/guildhall/internal/testenv"
)

// /metrics reports the group commit as the store counts it: batches,
// writes, and batches run again because a write of theirs failed; and the
// read cache's hits and misses, and the searches whose users it gave.
// Concurrent creates of one username make conflicts, which may share a
// batch with the one that succeeds (then it runs again).
func TestMetricsCountGroupCommits(t *testing.T) {
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		var wg sync.WaitGroup
		for i := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				name := fmt.Sprintf("m%d", i)
				if i%2 == 0 {
					name = "taken"
				}
				r := e.Do(testenv.Req{Method: "POST", Path: "/users", Token: e.Owner, Type: "application/json",
					Body: fmt.Sprintf(`{"username":%q}`, name)})
				if r.Status != http.StatusCreated && r.Status != http.StatusConflict {
					t.Errorf("create %s: %d %s", name, r.Status, r.Body)
				}
			}()
		}
		wg.Wait()
		for range 3 { // the same read, twice from the read cache
			e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/users?limit=50", Token: e.Owner})
		}
		// A search of users the page above kept: its entries from the
		// database, its users from the cache.
		e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/users?q=m&limit=5", Token: e.Owner})
		got := scrape(t, e, func(name string) bool { return strings.HasPrefix(name, "guildhall_store_") })
		st := e.App.Store.WriterStats() // nothing writes now
		rc := e.App.Store.CacheStats()
		want := map[string]float64{
			"guildhall_store_write_transactions_total":  float64(st.Transactions),
			"guildhall_store_writes_total":              float64(st.Writes),
			"guildhall_store_write_reruns_total":        float64(st.Reruns),
			"guildhall_store_read_cache_hits_total":     float64(rc.Hits),
			"guildhall_store_read_cache_misses_total":   float64(rc.Misses),
			"guildhall_store_data_version_probes_total": float64(rc.Questions),
			"guildhall_store_read_cache_leased_total":   float64(rc.Leased),
			"guildhall_store_read_cache_resets_total":   float64(rc.Resets),
			"guildhall_store_read_cache_bytes":          float64(rc.Bytes),
			"guildhall_store_search_pages_kept_total":   float64(rc.KeptSearches),
		}
		if rc.KeptSearches != 1 {
			t.Errorf("read cache %+v: the search of kept users was not answered with them", rc)
		}
		if rc.Hits < 2 {
			t.Errorf("read cache %+v: the repeated page was not answered from it", rc)
		}
		// One question per request, whose reads (credentials, the
		// authorization state, the page) share it; on PostgreSQL a request
		// under the lease asks none, and is counted as leased instead (the
		// instance followed its own creates by itself).
		if n := rc.Questions + rc.Leased; n < 4 || n > rc.Hits+rc.Misses {
			t.Errorf("read cache %+v: not one question or lease per request", rc)
		}
		for name, w := range want {
			if v, ok := got[name]; !ok || v != w {
				t.Errorf("%s = %v (reported: %v), want %v", name, v, ok, w)
			}
		}
		// The bootstrap and the 16 creates at least (a conflict is a write
		// that failed, still a write).
		if st.Writes < 17 || st.Transactions > st.Writes || st.Reruns > st.Transactions {
			t.Errorf("writer stats %+v do not add up", st)
		}
		t.Logf("%s: %+v", kind, st)
	})
}

// A request whose client goes away before its answer is counted as 499
// (client closed request), not as a 5xx of the server's: a create waiting
// for the writer, whose client gives up. (What is written, for a client
// that only half-closed, is a 503 problem, which the contract check
// around the instance checks.)
func TestMetricsCountAClientThatLeftAs499(t *testing.T) {
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		held, release := make(chan struct{}), make(chan struct{})
		var once sync.Once
		t.Cleanup(func() { once.Do(func() { close(release) }) })
		go func() {
			_, _ = e.App.Store.Write(context.Background(), func(*store.Tx) error {
				close(held)
				<-release
				return nil
			})
		}()
		<-held
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "POST", e.URL+"/api/users", strings.NewReader(`{"username":"gone"}`))
		req.Header.Set("Authorization", "Bearer "+e.Owner)
		req.Header.Set("Content-Type", "application/json")
		if res, err := e.HTTP.Do(req); err == nil {
			res.Body.Close()
			t.Fatalf("the create answered %d while the writer was held", res.StatusCode)
		}
		series := func() map[string]float64 {
			return scrape(t, e, func(name string) bool {
				return strings.HasPrefix(name, "guildhall_http_requests_total{") && strings.Contains(name, `route="/api/users"`)
			})
		}
		// The server notices the client's leaving on its own time.
		want := `guildhall_http_requests_total{method="POST",route="/api/users",status="499"}`
		var got map[string]float64
		for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			if got = series(); got[want] == 1 {
				break
			}
		}
		if got[want] != 1 {
			t.Errorf("the create whose client left: %v; want %s 1", got, want)
		}
		// A client that half-closes its connection after its request
		// still reads: it gets a 503 problem to retry, counted as 499 too.
		u, _ := url.Parse(e.URL)
		conn, err := net.Dial("tcp", u.Host)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		body := `{"username":"half"}`
		fmt.Fprintf(conn, "POST /api/users HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
			u.Host, e.Owner, len(body), body)
		_ = conn.(*net.TCPConn).CloseWrite()
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		res, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("a half-closed client got no answer: %v", err)
		}
		problem, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Retry-After") == "" || !strings.Contains(string(problem), `"unavailable"`) {
			t.Errorf("a half-closed client: %d Retry-After %q %s; want 503 unavailable with Retry-After", res.StatusCode, res.Header.Get("Retry-After"), problem)
		}
		once.Do(func() { close(release) })
		if got = series(); got[want] != 2 {
			t.Errorf("after the half-closed client too: %v; want %s 2", got, want)
		}
		for name := range got {
			if strings.Contains(name, `status="5`) {
				t.Errorf("a client leaving was counted as a fault of the server's: %s", name)
			}
		}
	})
}

// scrape reads /metrics and returns the samples whose names (labels
// included) keep says to.
func scrape(t *testing.T, e *testenv.Env, keep func(name string) bool) map[string]float64 {
	t.Helper()
	res, err := e.HTTP.Get(e.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	got := map[string]float64{}
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if ok && keep(name) {
			v, err := strconv.ParseFloat(value, 64)
			if err != nil {
				t.Fatalf("%s: %v", sc.Text(), err)
			}
			got[name] = v
		}
	}
	return got
}
