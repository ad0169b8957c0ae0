package main

import (
	"context"
	"database/sql"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "github.com/mattn/go-sqlite3" // the driver the store uses, for the other process's connection
)

// TestFaultSQLiteWriteLockHeld: another process holds SQLite's write lock
// (a maintenance script, a backup tool). Reads go on; a write answers 503
// unavailable with Retry-After within the database timeout and a second,
// never "database is locked"; /readyz says 503, since writes cannot
// succeed (docs/design.md §12); once the lock is released, writes succeed
// and /readyz is 200 again.
func TestFaultSQLiteWriteLockHeld(t *testing.T) {
	c := newClient(t)
	const timeout = time.Second
	s := newStore(t, "sqlite")
	in := start(t, "locked", s, "GUILDHALL_DB_TIMEOUT=1s").ready(t, c)
	must(t, c, in.URL, http.StatusCreated, "POST", "/channels/before/create", s.token, map[string]any{"name": "before"})

	db, err := sql.Open("sqlite3", "file:"+filepath.Join(s.dataDir, "guildhall.db")+"?_busy_timeout=5000")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatalf("take the write lock: %v", err)
	}
	locked := true
	defer func() {
		if locked {
			_, _ = conn.ExecContext(ctx, "ROLLBACK")
		}
	}()

	req, _ := http.NewRequest("POST", in.URL+"/api/channels/during/create", strings.NewReader(`{"name":"during"}`))
	req.Header.Set("Authorization", "Bearer "+s.token)
	req.Header.Set("Content-Type", "application/json")
	begun := time.Now()
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	_ = res.Body.Close()
	took := time.Since(begun)
	if res.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), `"code":"unavailable"`) ||
		res.Header.Get("Retry-After") == "" || took > timeout+time.Second {
		t.Errorf("a write while another process holds the lock: %d Retry-After %q after %v: %s; want 503 unavailable within %v and a second",
			res.StatusCode, res.Header.Get("Retry-After"), took, body, timeout)
	}
	must(t, c, in.URL, http.StatusOK, "GET", "/channels/before", s.token, nil) // reads go on
	if st, _, _, _ := get(c, in.URL+"/readyz", ""); st != http.StatusServiceUnavailable {
		t.Errorf("/readyz while writes cannot succeed: %d, want 503", st)
	}

	if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	locked = false
	must(t, c, in.URL, http.StatusCreated, "POST", "/channels/after/create", s.token, map[string]any{"name": "after"})
	eventually(t, 10*time.Second, "/readyz 200 once the lock is released", func() bool {
		st, _, _, _ := get(c, in.URL+"/readyz", "")
		return st == http.StatusOK
	})
	must(t, c, in.URL, http.StatusNotFound, "GET", "/channels/during", s.token, nil) // the refused write left nothing
}
