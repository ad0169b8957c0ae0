// Package schema is the database's schema, as the migrations that make it:
// one list, run in order at every start by the store (internal/store),
// on SQLite and PostgreSQL alike.
package schema

import (
	"strings"

	"gorm.io/gorm"

	"github.com/guildhall/guildhall/internal/fresh"
	"github.com/guildhall/guildhall/internal/sqldb"
)

// Migration is one step of the schema.
type Migration struct {
	ID  string
	SQL string
	// Run, when set, runs after SQL in the same transaction: what SQL alone
	// cannot do the same way on both databases. pg says how PostgreSQL's
	// change log is named and locked (nil on SQLite).
	Run func(tx *gorm.DB, d sqldb.Dialect, pg *fresh.Postgres) error
}

// Statements splits a migration's SQL into its statements.
func Statements(sql string) []string {
	var out []string
	for _, part := range strings.Split(sql, ";") {
		if p := strings.TrimSpace(part); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// registryOf0012 is the change log's registry as migration 0012 created
// it: a migration runs as it shipped, and the tables logged since get
// their triggers from fresh.Install, which follows the store's registry.
var registryOf0012 = fresh.Registry{Logged: []fresh.Table{
	{Name: "settings", LogAs: "settings", Columns: "global_permissions, global_version"},
	{Name: "users", LogAs: "users", Key: "id"},
	{Name: "user_roles", LogAs: "users", Key: "user_id"},
	{Name: "tokens", LogAs: "tokens", Key: "hash"},
	{Name: "roles", LogAs: "roles", Key: "id"},
	{Name: "channels", LogAs: "channels", Key: "id"},
	{Name: "overwrites", LogAs: "overwrites", Key: "channel_id"},
}}
