package store

import (
	"testing"

	"github.com/guildhall/guildhall/internal/sqldb"
)

// TestMayChange: what a write transaction changed is read again for a
// question only after a statement that may have written what it depends
// on; a plain insert adds new keys only, which a question about rows that
// existed before cannot see.
func TestMayChange(t *testing.T) {
	ins := func(table string) sqldb.Written { return sqldb.Written{Op: "INSERT", Table: table} }
	creds := []string{"tokens", "users"}
	auth := []string{"settings", "roles", "channels", "overwrites"}
	for _, tc := range []struct {
		name     string
		writes   []sqldb.Written
		existing bool
		logged   []string
		want     bool
	}{
		{"nothing written", nil, true, creds, false},
		{"a user created, the caller's credentials", []sqldb.Written{ins("users"), ins("events")}, true, creds, false},
		{"a user created, the authorization state", []sqldb.Written{ins("users")}, false, auth, false},
		{"a role given: a user's roles", []sqldb.Written{ins("user_roles")}, true, creds, true},
		{"a user updated", []sqldb.Written{{Op: "UPDATE", Table: "users"}}, true, creds, true},
		{"a token deleted", []sqldb.Written{{Op: "DELETE", Table: "tokens"}}, true, creds, true},
		{"an upsert", []sqldb.Written{{Op: "INSERT", Table: "users", Upsert: true}}, true, creds, true},
		{"a channel created: the whole view", []sqldb.Written{ins("channels")}, false, auth, true},
		{"an overwrite, a channel's question", []sqldb.Written{ins("overwrites")}, false, []string{"channels", "overwrites"}, true},
		{"savepoints", []sqldb.Written{{Op: "SAVEPOINT"}, {Op: "RELEASE"}}, false, auth, false},
		{"a rollback", []sqldb.Written{{Op: "ROLLBACK"}}, true, creds, true},
		{"a WITH", []sqldb.Written{{Op: "WITH", Table: "events"}}, true, creds, true},
		{"an unlogged table", []sqldb.Written{{Op: "UPDATE", Table: "attachments"}}, false, auth, false},
	} {
		if got := mayChange(tc.writes, tc.existing, tc.logged); got != tc.want {
			t.Errorf("%s: mayChange = %v, want %v", tc.name, got, tc.want)
		}
	}
}
