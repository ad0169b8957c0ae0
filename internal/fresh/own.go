package fresh

import (
	"context"
	"errors"
	"fmt"
)

// What a write transaction changed itself. The cache holds what was
// committed; a write transaction that reads through it must read again
// what it changed before committing, and it learns what that is from the
// entries its own statements logged: the triggers are the one list of what
// a write changes, so no write says it again by hand.
//
// On SQLite the log's entries are numbered in commit order and one writer
// runs at a time, so the transaction's are those after the version the
// cache followed to inside it (Position, after Fresh under the write
// lock). On PostgreSQL they carry the transaction's version, which its
// setting remembers (LogChangeBody); the logging triggers are deferred, and
// own_changes fires those pending before it reads (registry_pg.go).

// Position is the version of the log the cache has followed to.
func (c *Cache) Position() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pos.v
}

// Follows reports whether the cache follows a change log (FollowSQLite,
// FollowPostgres), rather than starting over at every question.
func (c *Cache) Follows() bool { return c.sqliteLog != nil || c.rounds != nil }

// Own returns the changes the transaction that q runs in has logged so
// far, in no order and with repeats: on SQLite those after the version
// from; on PostgreSQL (pg set) those of its own version. A transaction of
// a store that follows no log gets the change of everything.
func (c *Cache) Own(ctx context.Context, q QueryFunc, pg *Postgres, from int64) ([]Change, error) {
	if !c.Follows() {
		return []Change{{Table: "*"}}, nil
	}
	query, args := "SELECT tbl, key FROM change_log WHERE v > ?", []any{from}
	if pg != nil {
		query, args = "SELECT tbl, key FROM "+quoteIdent(pg.Schema)+".own_changes()", nil
	}
	rows, err := q(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("read the transaction's changes: %w", err)
	}
	defer rows.Close()
	var out []Change
	for rows.Next() {
		var ch Change
		if err := rows.Scan(&ch.Table, &ch.Key); err != nil {
			return nil, fmt.Errorf("read the transaction's changes: %w", err)
		}
		out = append(out, ch)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return nil, fmt.Errorf("read the transaction's changes: %w", err)
	}
	return out, nil
}
