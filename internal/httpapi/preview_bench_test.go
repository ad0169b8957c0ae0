package httpapi_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/guildhall/guildhall/internal/app"
	"github.com/guildhall/guildhall/internal/config"
	"github.com/guildhall/guildhall/internal/testenv"
)

// BenchmarkPreviewExplainEightAtOnce sends eight explained previews at once
// at the limits of one (docs/performance.md, "Admin work at scale"): a
// moderator holding MANAGE_ROLES previews the 245 roles below them, each
// holding every permission but ADMINISTRATOR, over 500 channels (10
// categories of 49, 11 overwrites each), under the memory limit `guildhall
// serve` sets. "50 channels": each request names 50 channels of its own,
// more than the explanation steps allowed (a 400); "fitting": each names
// as many as fit, the largest explained answers there are. It reports the
// peak RSS of the process (server and client; VmHWM, reset before the
// first request), whose goal is under 300 MB, and the largest answer.
//
//	go test -run '^$' -bench PreviewExplainEightAtOnce -benchtime 5x ./internal/httpapi
func BenchmarkPreviewExplainEightAtOnce(b *testing.B) {
	e := testenv.StartUnchecked(b, testenv.SQLite) // the preview reads the cached view of the community: no statement
	e.Must(http.StatusOK, testenv.Req{Method: "POST", Path: "/import", Token: e.Owner, Body: moderatedTemplate(245, 10, 49)})
	mod := e.NewUser("mod")
	e.Assign(mod.ID, "mod")
	roles := make([]string, 245)
	for i := range roles {
		roles[i] = fmt.Sprintf("r%03d", i)
	}
	var channels []string
	for c := range 10 {
		channels = append(channels, fmt.Sprintf("cat%d", c))
		for i := range 49 {
			channels = append(channels, fmt.Sprintf("cat%d-%02d", c, i))
		}
	}
	post := func(ids []string) (int, int64) {
		body, _ := json.Marshal(map[string]any{"roles": roles, "explain": true, "channel_ids": ids})
		req, _ := http.NewRequest("POST", e.URL+"/api/permissions/preview", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+mod.Token)
		res, err := e.HTTP.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		defer res.Body.Close()
		n, _ := io.Copy(io.Discard, res.Body) // what a client does with it is not the server's memory
		return res.StatusCode, n
	}
	fit := 50 // the most channels whose explanations fit
	for ; fit > 1; fit-- {
		if status, _ := post(channels[:fit]); status == http.StatusOK {
			break
		}
	}
	for _, tc := range []struct {
		name string
		n    int
		want int
	}{{"50 channels", 50, http.StatusBadRequest}, {"fitting", fit, http.StatusOK}} {
		b.Run(tc.name, func(b *testing.B) {
			if limit := app.LimitMemory(config.Default().MemoryLimit); limit > 0 {
				b.Cleanup(func() { debug.SetMemoryLimit(math.MaxInt64) })
			}
			runtime.GC()
			debug.FreeOSMemory()
			if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
				b.Skipf("cannot reset the peak RSS: %v", err)
			}
			var largest int64
			for b.Loop() {
				var wg sync.WaitGroup
				var mu sync.Mutex
				for i := range 8 {
					ids := channels[i*tc.n%len(channels):][:tc.n]
					wg.Go(func() {
						status, n := post(ids)
						if status != tc.want {
							b.Errorf("status %d, want %d", status, tc.want)
						}
						mu.Lock()
						largest = max(largest, n)
						mu.Unlock()
					})
				}
				wg.Wait()
			}
			b.ReportMetric(float64(peakRSS(b))/1e6, "peak-RSS-MB")
			b.ReportMetric(float64(largest)/1e6, "answer-MB")
			b.ReportMetric(float64(tc.n), "channels/request")
		})
	}
}

// peakRSS is the process's VmHWM in bytes.
func peakRSS(b *testing.B) int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return kb << 10
		}
	}
	b.Fatal("no VmHWM in /proc/self/status")
	return 0
}

// moderatedTemplate is a community with a role "mod" (MANAGE_ROLES) above
// roles others, each holding every permission but ADMINISTRATOR, and
// categories each holding perCategory channels, every one with an
// everyone overwrite and one for 10 of the roles.
func moderatedTemplate(roles, categories, perCategory int) map[string]any {
	var all []string
	for _, p := range e2eCatalog {
		if p != "ADMINISTRATOR" {
			all = append(all, p)
		}
	}
	rs := []map[string]any{{"id": "mod", "name": "Moderators", "position": roles + 1, "color": nil, "permissions": []string{"MANAGE_ROLES", "VIEW_CHANNEL"}}}
	for i := range roles {
		rs = append(rs, map[string]any{"id": fmt.Sprintf("r%03d", i), "name": "r", "position": roles - i, "color": nil, "permissions": all})
	}
	overwrites := []map[string]any{{"target_type": "everyone", "allow": []string{}, "deny": []string{"SEND_MESSAGES"}}}
	for i := 0; i < roles && len(overwrites) < 11; i += 7 {
		overwrites = append(overwrites, map[string]any{"target_type": "role", "target_id": fmt.Sprintf("r%03d", i),
			"allow": []string{"SEND_MESSAGES"}, "deny": []string{"MENTION_EVERYONE"}})
	}
	var channels []map[string]any
	for c := range categories {
		cat := fmt.Sprintf("cat%d", c)
		channels = append(channels, map[string]any{"id": cat, "kind": "category", "name": cat, "parent_id": nil, "position": c, "topic": nil, "overwrites": overwrites})
		for i := range perCategory {
			channels = append(channels, map[string]any{"id": fmt.Sprintf("%s-%02d", cat, i), "kind": "text", "name": "c", "parent_id": cat,
				"position": i, "topic": nil, "overwrites": overwrites})
		}
	}
	return map[string]any{"format": "guildhall-template/1", "global_permissions": []string{"VIEW_CHANNEL"}, "roles": rs, "channels": channels}
}
