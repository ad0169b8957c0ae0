package fresh_test

import (
	"context"
	"database/sql"
	"net/url"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql's "pgx"
	_ "github.com/mattn/go-sqlite3"    // database/sql's "sqlite3"

	"github.com/guildhall/guildhall/internal/fresh"
	"github.com/guildhall/guildhall/internal/testenv"
)

// gadgets is the table the test adds to a registry.
var gadgets = fresh.Table{Name: "gadgets", LogAs: "gadgets", Key: "id"}

// operatorDB is a database as an operator reaches it, behind the cache's
// back: the sqlite3 or psql command when there is one, else a connection
// of this process that the cache does not know of.
type operatorDB struct {
	t       *testing.T
	command []string // the command and its arguments before the SQL
	db      *sql.DB
}

func (o operatorDB) exec(stmt string) {
	o.t.Helper()
	if o.command != nil {
		cmd := exec.Command(o.command[0], append(o.command[1:], stmt)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			o.t.Fatalf("%v %q: %v\n%s", o.command, stmt, err, out)
		}
		return
	}
	if _, err := o.db.Exec(stmt); err != nil {
		o.t.Fatalf("%s: %v", stmt, err)
	}
}

func withCommand(t *testing.T, name string, args ...string) []string {
	if _, err := exec.LookPath(name); err != nil {
		t.Logf("no %s command: the operator's changes go through a connection of their own", name)
		return nil
	}
	return append([]string{name}, args...)
}

// TestATableAddedToTheRegistryIsFollowed: a cached read that depends on a
// row of a table is answered from memory while the table is not in the
// registry, whatever an operator changes (nothing logs it); once the table
// is added to the registry and installed, a change an operator makes with
// sqlite3 or psql drops exactly that row's reads, and the next read sees
// it.
func TestATableAddedToTheRegistryIsFollowed(t *testing.T) {
	testenv.Stores(t, func(t *testing.T, kind string) {
		ctx := context.Background()
		c, db, op, qualified, pg := openGadgets(t, kind)
		setup := []string{"CREATE TABLE gadgets (id VARCHAR(16) PRIMARY KEY, n INTEGER NOT NULL)",
			"INSERT INTO gadgets (id, n) VALUES ('g1', 1), ('g2', 1)"}
		for _, s := range setup {
			if _, err := db.ExecContext(ctx, s); err != nil {
				t.Fatalf("%s: %v", s, err)
			}
		}
		reads := 0
		read := func(id string) int {
			t.Helper()
			n, err := fresh.Read(fresh.Scope(ctx), c, fresh.Key{Kind: fresh.Kind(100), A: id},
				func(int) []fresh.Dep { return []fresh.Dep{{Table: "gadgets", Key: id}} },
				func(int) int { return 64 }, func(n int) int { return n },
				func() (int, error) {
					reads++
					var n int
					err := db.QueryRowContext(ctx, "SELECT n FROM "+qualified+" WHERE id = '"+id+"'").Scan(&n)
					return n, err
				})
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
		expect := func(id string, want int, wantReads int) {
			t.Helper()
			if got := read(id); got != want || reads != wantReads {
				t.Fatalf("read %s = %d after %d reads of the database; want %d after %d", id, got, reads, want, wantReads)
			}
		}
		expect("g1", 1, 1)
		expect("g1", 1, 1) // kept
		op.exec("UPDATE " + qualified + " SET n = 2 WHERE id = 'g1'")
		expect("g1", 1, 1) // not in the registry: nothing tells the cache

		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := fresh.Install(ctx, tx, fresh.Registry{Logged: []fresh.Table{gadgets}}, pg); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		expect("g1", 1, 1) // installing changes no row
		expect("g2", 1, 2)
		op.exec("UPDATE " + qualified + " SET n = 3 WHERE id = 'g2'")
		expect("g1", 1, 2) // another row's change leaves g1 kept
		expect("g2", 3, 3)
		op.exec("UPDATE " + qualified + " SET n = 4 WHERE id = 'g1'")
		expect("g1", 4, 4)
		expect("g1", 4, 4)
	})
}

// openGadgets opens an empty database of kind with a change log, a cache
// that follows it, and how an operator reaches it; qualified is how the
// operator names the gadgets table.
func openGadgets(t *testing.T, kind string) (c *fresh.Cache, db *sql.DB, op operatorDB, qualified string, pg *fresh.Postgres) {
	t.Helper()
	ctx := context.Background()
	var counter atomic.Int64
	c = fresh.New(fresh.Options{})
	t.Cleanup(func() { _ = c.Close() })
	if kind == testenv.SQLite {
		path := filepath.Join(t.TempDir(), "fresh.db")
		var err error
		db, err = sql.Open("sqlite3", "file:"+path+"?_journal_mode=WAL&_busy_timeout=10000")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		if err := fresh.CreateLog(ctx, db, fresh.Registry{}, nil); err != nil {
			t.Fatal(err)
		}
		if err := c.FollowSQLite("file:"+path+"?_query_only=true&_busy_timeout=10000", path+"-shm", &counter); err != nil {
			t.Fatal(err)
		}
		op = operatorDB{t: t, command: withCommand(t, "sqlite3", "-cmd", ".timeout 10000", path), db: db}
		return c, db, op, "gadgets", nil
	}
	dbURL := testenv.FreshPostgres(t)
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	schema := u.Query().Get("search_path")
	db, err = sql.Open("pgx", dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	pg = &fresh.Postgres{Schema: schema, Tag: schema, WriteKey: 7}
	if _, err := db.ExecContext(ctx, "CREATE TABLE settings (id INTEGER PRIMARY KEY, auth_version BIGINT NOT NULL DEFAULT 0, "+
		"credentials_version BIGINT NOT NULL DEFAULT 0)"); err != nil {
		t.Fatal(err)
	}
	if err := fresh.CreateLog(ctx, db, fresh.Registry{}, pg); err != nil {
		t.Fatal(err)
	}
	if err := c.FollowPostgres(ctx, db.QueryContext, *pg, nil); err != nil {
		t.Fatal(err)
	}
	op = operatorDB{t: t, command: withCommand(t, "psql", "-v", "ON_ERROR_STOP=1", testenv.PostgresURL(), "-c"), db: db}
	return c, db, op, schema + ".gadgets", pg
}
