package store

import (
	"context"
	"fmt"

	"github.com/guildhall/guildhall/internal/fresh"
	"github.com/guildhall/guildhall/internal/sqldb"
)

// The store's freshness, declared once. Every table is in the registry:
// logged, when a cached read depends on it, or not. The change log's
// triggers (installed at every start, fresh.Install) and what the cache
// drops both follow from it; the cached reads name what they depend on in
// the same terms (credentialDeps, userDeps, authPart).
var registry = fresh.Registry{
	Logged: []fresh.Table{
		{Name: "settings", LogAs: "settings", Columns: "global_permissions, global_version"},
		{Name: "users", LogAs: "users", Key: "id"},
		{Name: "user_roles", LogAs: "users", Key: "user_id"},
		{Name: "tokens", LogAs: "tokens", Key: "hash"},
		{Name: "roles", LogAs: "roles", Key: "id"},
		{Name: "channels", LogAs: "channels", Key: "id"},
		{Name: "overwrites", LogAs: "overwrites", Key: "channel_id"},
	},
	// No cached read depends on these: writing them (an event appended, a
	// ticket consumed, an attachment or a profile changed, a blob swept)
	// logs nothing.
	Unlogged: []string{"events", "event_tickets", "attachments", "profiles", "blob_chunks", "blob_trash",
		"schema_migrations", "data_version", "change_log", "deployment_keys", "names_checked",
		"webhooks", "webhook_deliveries", "webhook_dispatch", "fresh_instances", "fresh_prepared"},
}

// loggedAs returns the name a table's changes are logged under, and false
// for a table the registry does not log.
func loggedAs(table string) (string, bool) {
	for _, t := range registry.Logged {
		if t.Name == table {
			return t.LogAs, true
		}
	}
	return "", false
}

// userDeps: a kept user changes with their row and their roles (logged as
// theirs), and with any role's position, which orders their role IDs.
var userDeps = fresh.UserDeps{Table: "users", Whole: []string{"roles"}}

// credentialDeps: a token's credentials change with the token and with its
// user (status, roles, deletion).
func credentialDeps(c Credentials) []fresh.Dep {
	return []fresh.Dep{{Table: "tokens", Key: c.TokenHash}, {Table: "users", Key: c.Principal.UserID}}
}

// The authorization state's parts (authstate.go): the global permissions
// with the roles, and each channel with its overwrites.
const (
	authRoles    = "roles"
	authChannels = "channels"
)

// authPart names the part of the authorization state a change reaches.
func authPart(ch fresh.Change) (part, key string, ok bool) {
	switch ch.Table {
	case "settings", "roles":
		return authRoles, "", true
	case "channels", "overwrites":
		return authChannels, ch.Key, true
	}
	return "", "", false
}

func newAuthView(c *fresh.Cache) *fresh.View[*AuthState] {
	return fresh.NewView[*AuthState](c, "auth_state", authPart)
}

// freshPG says how the PostgreSQL database logs (nil on SQLite).
func (s *Store) freshPG() *fresh.Postgres {
	if !s.Postgres() {
		return nil
	}
	ns := s.db.Namespace()
	return &fresh.Postgres{Schema: ns.Schema, Tag: ns.Tag, WriteKey: ns.WriteKey}
}

// cacheTracing is how the read cache traces: its decisions on the caller's
// span, with the store's tracer, and its log statements as the store's.
func cacheTracing(db *sqldb.DB) fresh.Tracing {
	if db.Tracer() == nil {
		return fresh.Tracing{}
	}
	return fresh.Tracing{Tracer: db.Tracer(), Statement: db.StatementSpan, End: sqldb.EndSpan}
}

// ReadScope returns a context for one request: its cached reads are all
// answered as of one moment after this call (fresh.Scope).
func (s *Store) ReadScope(ctx context.Context) context.Context { return fresh.Scope(ctx) }

// CacheStats returns the read cache's counters since the store was opened.
func (s *Store) CacheStats() fresh.Stats { return s.cache.Stats() }

// PruneChangeLog deletes the oldest entries of the change log, keeping the
// newest fresh keeps, and returns how many it deleted.
func (s *Store) PruneChangeLog(ctx context.Context) (int64, error) {
	var n int64
	_, err := s.Write(ctx, func(tx *Tx) error {
		res, err := tx.exec(ctx, fresh.PruneSQL)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("prune the change log: %w", err)
	}
	return n, nil
}
