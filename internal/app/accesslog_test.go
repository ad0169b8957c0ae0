package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/guildhall/guildhall/internal/app"
	"github.com/guildhall/guildhall/internal/config"
)

// TestAccessLogLine: each request writes one line, with exactly the
// fields operators rely on, its request ID the one the answer carries.
func TestAccessLogLine(t *testing.T) {
	cfg := config.Default()
	cfg.DataDir = t.TempDir()
	var logged bytes.Buffer
	a, err := app.New(context.Background(), cfg, slog.New(slog.NewJSONHandler(&logged, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	logged.Reset()
	for _, tc := range []struct {
		path   string
		status int
	}{{"/api/roles", http.StatusUnauthorized}, {"/api/nope", http.StatusNotFound}, {"/healthz", http.StatusOK}} {
		logged.Reset()
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, tc.path, nil)
		req.RemoteAddr = "192.0.2.7:4321"
		a.HTTP.Echo.ServeHTTP(rec, req)
		lines := strings.Split(strings.TrimSpace(logged.String()), "\n")
		if rec.Code != tc.status || len(lines) != 1 {
			t.Fatalf("%s: status %d, %d lines logged:\n%s", tc.path, rec.Code, len(lines), logged.String())
		}
		var line map[string]any
		if err := json.Unmarshal([]byte(lines[0]), &line); err != nil {
			t.Fatal(err)
		}
		keys := make([]string, 0, len(line))
		for k := range line {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		if want := []string{"latency", "level", "method", "msg", "path", "remote_ip", "request_id", "status", "time"}; !slices.Equal(keys, want) {
			t.Errorf("%s: fields %v, want %v", tc.path, keys, want)
		}
		if line["msg"] != "request" || line["level"] != "INFO" || line["method"] != "GET" || line["path"] != tc.path ||
			line["status"] != float64(tc.status) || line["remote_ip"] != "192.0.2.7" || line["request_id"] != rec.Header().Get("X-Request-Id") {
			t.Errorf("%s: %s", tc.path, lines[0])
		}
		if _, ok := line["latency"].(float64); !ok {
			t.Errorf("%s: latency %v, want nanoseconds", tc.path, line["latency"])
		}
	}
}
