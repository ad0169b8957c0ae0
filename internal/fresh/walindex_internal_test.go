//go:build unix

package fresh

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
)

// openMapped creates a database in dir with a change log that logs the
// table gadgets, and opens the log's connection on it, closed with the
// test, with the wal-index mapped.
func openMapped(t *testing.T, dir string) (*sqliteLog, *atomic.Int64) {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(dir, "fresh.db")
	db, err := sql.Open("sqlite3", "file:"+path+"?_journal_mode=WAL&_busy_timeout=10000")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS gadgets (id TEXT PRIMARY KEY, n INTEGER NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	if err := CreateLog(ctx, db, Registry{Logged: []Table{{Name: "gadgets", LogAs: "gadgets", Key: "id"}}}, nil); err != nil &&
		!strings.Contains(err.Error(), "already exists") {
		t.Fatal(err)
	}
	var counter atomic.Int64
	l, err := openSQLiteLog("file:"+path+"?_query_only=true&_busy_timeout=10000", path+"-shm", &counter, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = l.close()
		l.releaseWALIndex()
	})
	if _, err := l.start(); err != nil {
		t.Fatal(err)
	}
	if l.wal == nil {
		t.Fatal("the change log did not map the wal-index")
	}
	return l, &counter
}

// TestSQLiteLogAsksOnlyWhenTheHeaderMoves: while nothing is committed, the
// change log's question is answered from the wal-index header with no
// statement; a commit from another connection (as another process makes
// one) is seen by the very next question, which reads the log in one
// statement; a checkpoint that restarts the log moves the header but not
// the data, so the question reads the log and finds nothing changed.
func TestSQLiteLogAsksOnlyWhenTheHeaderMoves(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	l, statements := openMapped(t, dir)
	other, err := sql.Open("sqlite3", "file:"+filepath.Join(dir, "fresh.db")+"?_busy_timeout=10000")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	exec := func(q string) {
		t.Helper()
		if _, err := other.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	var pos position
	// ask returns what next says after pos and how many statements it ran.
	ask := func() (delta, int64) {
		t.Helper()
		before := statements.Load()
		d, err := l.next(ctx, pos)
		if err != nil {
			t.Fatal(err)
		}
		return d, statements.Load() - before
	}

	exec("INSERT INTO gadgets (id, n) VALUES ('g', 0)")
	if pos, err = l.start(); err != nil {
		t.Fatal(err)
	}
	ask() // the first question asks: nothing was seen yet: nothing was seen yet
	for range 100 {
		if d, n := ask(); n != 0 || d.to != pos || d.reset || len(d.changes) != 0 {
			t.Fatalf("nothing committed: next = %+v after %d statements; want %+v after none", d, n, pos)
		}
	}

	exec("UPDATE gadgets SET n = n + 1")
	d, n := ask()
	if n != 1 || d.reset || len(d.changes) != 1 || d.changes[0].Table != "gadgets" || d.to.v != pos.v+1 {
		t.Fatalf("after another connection's commit: next = %+v after %d statements; want the settings change in one", d, n)
	}
	pos = d.to
	if d, n := ask(); n != 0 || d.to != pos {
		t.Fatalf("nothing committed since: next = %+v after %d statements; want %+v after none", d, n, pos)
	}

	exec("PRAGMA wal_checkpoint(TRUNCATE)")
	if d, n := ask(); n != 1 || d.to != pos || d.reset || len(d.changes) != 0 {
		t.Fatalf("after a checkpoint: next = %+v after %d statements; want no change, asked in one", d, n)
	}
	exec("UPDATE gadgets SET n = n + 1")
	if d, n = ask(); n != 1 || len(d.changes) != 1 || d.to.v != pos.v+1 {
		t.Fatalf("after a commit into a restarted log: next = %+v after %d statements; want the change in one", d, n)
	}
	pos = d.to

	// Without the header (a platform with no mapping, or a header being
	// written), PRAGMA data_version decides whether to read the log.
	l.mu.Lock()
	if err := l.wal.close(); err != nil {
		t.Fatal(err)
	}
	l.wal = nil
	l.mu.Unlock()
	if d, n = ask(); n != 2 || len(d.changes) != 0 || d.reset || d.to.v != pos.v {
		t.Fatalf("without the header, first: next = %+v after %d statements; want data_version moved, the log read, nothing new", d, n)
	}
	pos = d.to
	if d, n = ask(); n != 1 || d.to != pos {
		t.Fatalf("without the header, nothing committed: next = %+v after %d statements; want data_version alone", d, n)
	}
	exec("UPDATE gadgets SET n = n + 1")
	if d, n = ask(); n != 2 || len(d.changes) != 1 || d.to.v != pos.v+1 {
		t.Fatalf("without the header, after a commit: next = %+v after %d statements; want the change in two", d, n)
	}
}

// TestWALIndexKeepsSQLiteLocks: mapping the wal-index leaves the process's
// locks on it in place. SQLite holds a shared lock on byte 128 of the
// wal-index while this process uses it; closing any descriptor of the file
// would drop it, and the next process to open the database would take
// itself for the first and reset the wal-index under this one.
func TestWALIndexKeepsSQLiteLocks(t *testing.T) {
	if _, err := os.Stat("/proc/locks"); err != nil {
		t.Skipf("no /proc/locks to read the process's locks from: %v", err)
	}
	dir := t.TempDir()
	openMapped(t, dir)
	// A second connection of the log on the same file maps the same
	// wal-index again, and gives it back.
	l2, _ := openMapped(t, dir)
	if err := l2.close(); err != nil {
		t.Fatal(err)
	}
	l2.releaseWALIndex()
	fi, err := os.Stat(filepath.Join(dir, "fresh.db-shm"))
	if err != nil {
		t.Fatal(err)
	}
	ino := fi.Sys().(*syscall.Stat_t).Ino
	locks, err := os.ReadFile("/proc/locks")
	if err != nil {
		t.Fatal(err)
	}
	// "1: POSIX  ADVISORY  READ 4242 08:01:123456 128 128"
	held := false
	for _, line := range strings.Split(string(locks), "\n") {
		f := strings.Fields(line)
		if len(f) >= 8 && f[1] == "POSIX" && f[4] == strconv.Itoa(os.Getpid()) &&
			strings.HasSuffix(f[5], ":"+strconv.FormatUint(ino, 10)) && f[6] == "128" {
			held = true
		}
	}
	if !held {
		t.Fatalf("the process holds no lock on byte 128 of the wal-index (inode %d) with a store open:\n%s", ino, locks)
	}
}

// TestSQLiteLogLimitIsNotPlanned: the change log's question on SQLite does
// not give its LIMIT as a plain parameter, which SQLite's planner reads
// and then prepares the statement again at every run.
func TestSQLiteLogLimitIsNotPlanned(t *testing.T) {
	if !strings.Contains(sqliteChangesAfter, "LIMIT +?") || strings.Contains(sqliteChangesAfter, "LIMIT ?") {
		t.Errorf("the change log's question limits with %q; want LIMIT +?", sqliteChangesAfter)
	}
}
