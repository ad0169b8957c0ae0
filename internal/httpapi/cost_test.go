package httpapi_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/guildhall/guildhall/internal/testenv"
)

// Budgets of the hottest requests, on a warm instance: SQL statements per
// request (a request asks the change log once, a statement; its reads the
// cache answers cost nothing more, one it misses its query), and heap
// allocations per request (the test's client included).
// They are the regression guard of the speed work (docs/performance.md):
// counts, not times, so a busy machine cannot make them flaky, with room
// above what they measured when they were set.
var costBudgets = []struct {
	name       string
	method     string
	path       string // {user}, {heavy}, {light}: IDs of the fixture
	body       string
	status     int
	statements int64   // PostgreSQL adds the write lock and the NOTIFY to a write
	allocs     float64 // SQLite; the PostgreSQL driver allocates about half as much again
}{
	{"get user", "GET", "/users/{user}", "", 200, 1, 250},
	{"list 50 users", "GET", "/users?limit=50", "", 200, 1, 450},
	{"user permissions", "GET", "/users/{user}/permissions", "", 200, 1, 250},
	{"user permissions in a channel", "GET", "/users/{user}/permissions?channelID=light", "", 200, 1, 250},
	{"channel", "GET", "/channels/light", "", 200, 1, 250},
	{"permissions of a user with 248 roles in a channel with 499 overwrites", "GET", "/users/{heavy}/permissions?channelID=heavy", "", 200, 1, 300},
	{"overwrites of a bare channel", "GET", "/channels/light/permissions", "", 200, 1, 250},
	{"499 overwrites of a channel", "GET", "/channels/heavy/permissions", "", 200, 1, 1500},
	// A write asks once for the request and once for its transaction,
	// after the write lock (on SQLite, the request's question also reads
	// the change log, which the create before it moved), then inserts the
	// user and the event.
	{"create user", "POST", "/users", `{"username":"c%d","display_name":"C"}`, 201, 5, 450},
}

// TestHotRequestCosts checks the budgets above on both stores, and that
// the permissions of a user holding 248 roles in a channel with 499
// overwrites cost at most 1.5 times those of a user with no role in a
// bare channel: cost does not grow with the size of the setup.
func TestHotRequestCosts(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a fixture of 248 roles and 499 overwrites")
	}
	// Not parallel: allocations are counted for the whole process, and
	// the instance's answers are not checked against the contract, whose
	// check would be counted too (every other test checks them).
	testenv.Stores(t, func(t *testing.T, kind string) {
		e := testenv.StartUnchecked(t, kind)
		user := e.NewUser("light")
		e.NewChannel("light")
		heavy := heavyMember(e)
		ids := map[string]string{"{user}": user.ID, "{heavy}": heavy.ID}
		st := e.App.Store
		n := 0
		do := func(path, method, body string, status int) {
			t.Helper()
			for k, v := range ids {
				path = strings.ReplaceAll(path, k, v)
			}
			r := testenv.Req{Method: method, Path: path, Token: e.Owner}
			if body != "" {
				n++
				r.Body, r.Type = fmt.Sprintf(body, n), "application/json"
			}
			e.Must(status, r)
		}
		allocsOf := map[string]float64{}
		for _, c := range costBudgets {
			t.Run(c.name, func(t *testing.T) {
				// Warm: the instance's caches, and the read cache, which
				// the second request fills (the first fills the caches
				// that decide what the second reads).
				do(c.path, c.method, c.body, c.status)
				do(c.path, c.method, c.body, c.status)
				before := st.QueryCount()
				do(c.path, c.method, c.body, c.status)
				statements, budget := c.statements, c.allocs
				if kind == testenv.Postgres {
					budget *= 1.5
					if c.method != "GET" {
						// pg_advisory_xact_lock; the version and pg_notify go
						// in one statement, and one question reads both the
						// data version and the change log; no prepare before
						// the commit, no other instance holding a lease
						// (internal/fresh's lease.go).
						statements += 1
					}
				}
				if got := st.QueryCount() - before; got > statements {
					t.Errorf("%d statements, budget %d", got, statements)
				}
				allocs := testing.AllocsPerRun(20, func() { do(c.path, c.method, c.body, c.status) })
				allocsOf[c.name] = allocs
				if allocs > budget {
					t.Errorf("%.0f allocations per request, budget %.0f", allocs, budget)
				}
				t.Logf("%.0f allocations per request (budget %.0f)", allocs, budget)
			})
		}
		light, heavyCost := allocsOf["user permissions in a channel"], allocsOf["permissions of a user with 248 roles in a channel with 499 overwrites"]
		if light > 0 && heavyCost > 1.5*light {
			t.Errorf("the heavy permissions request costs %.0f allocations, %.2f times the light one (%.0f): more than 1.5", heavyCost, heavyCost/light, light)
		}
	})
}
