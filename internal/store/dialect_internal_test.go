package store

import (
	"fmt"
	"regexp"
	"testing"

	"github.com/guildhall/guildhall/internal/sqldb"
)

// TestSQLiteLimitsAreNotPlanned: no prepared SQLite statement gives its
// LIMIT as a plain parameter, which SQLite's planner reads and then
// prepares the statement again at every run (sqldb.Dialect.Limit): every
// shape of a page of users and of a search's entries (the change log's
// question: internal/fresh).
func TestSQLiteLimitsAreNotPlanned(t *testing.T) {
	plain := regexp.MustCompile(`(?i)LIMIT\s+\?`)
	sqlite := sqldb.ByDialect(func(d sqldb.Dialect) sqldb.Dialect { return d })["sqlite"]
	texts := map[string]string{}
	for _, f := range []UserFilter{{}, {Status: "active"}, {RoleID: "r"}, {RoleID: "r", Status: "active"},
		{Prefix: "a"}, {Prefix: "a", MatchEmail: true}, {Prefix: "a", RoleID: "r", Status: "active"}} {
		text, _ := buildListUsers(sqlite, f)
		texts[fmt.Sprintf("a page of users %+v", f)] = text
		if f.Prefix != "" {
			text, _ = buildSearchEntries(sqlite, f)
			texts[fmt.Sprintf("a search's entries %+v", f)] = text
		}
	}
	for name, text := range texts {
		if plain.MatchString(text) {
			t.Errorf("%s: a plain LIMIT parameter in %s", name, text)
		}
	}
	// The statement still limits: the parameter is there, hidden.
	if text, _ := buildListUsers(sqlite, UserFilter{}); !regexp.MustCompile(`LIMIT \+\?$`).MatchString(text) {
		t.Errorf("a page of users: %s; want it to end in LIMIT +?", text)
	}
}
