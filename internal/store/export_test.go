package store

import (
	"context"

	"github.com/guildhall/guildhall/internal/model"
)

// Hooks for the store's external tests.

// OptionsUpTo returns opts that apply only the first n migrations.
func OptionsUpTo(opts Options, n int) Options {
	opts.migrateUpTo = n
	return opts
}

// MigrationIndex returns the position of a migration (1-based), or 0.
func MigrationIndex(id string) int {
	for i, m := range migrations {
		if m.id == id {
			return i + 1
		}
	}
	return 0
}

// ExecForTest runs a statement on the write pool outside the writer, as
// code before a migration wrote rows.
func (s *Store) ExecForTest(sql string, args ...any) error {
	return s.write.Exec(sql, args...).Error
}

// ExecForTestInTx runs a statement in a write transaction.
func (tx *Tx) ExecForTestInTx(ctx context.Context, sql string, args ...any) error {
	return tx.with(ctx).Exec(sql, args...).Error
}

// QueuedWrites is the number of writes waiting for the writer.
func (s *Store) QueuedWrites() int { return len(s.writer.jobs) }

// UserFromDatabaseForTest reads a user past the cache (benchmarks of the
// database path).
func (s *Store) UserFromDatabaseForTest(ctx context.Context, id string) (model.User, error) {
	return s.queries.getUser(ctx, id)
}

// ListUsersFromDatabaseForTest reads a page of users past the cache.
func (s *Store) ListUsersFromDatabaseForTest(ctx context.Context, f UserFilter, after string, limit int) ([]model.User, bool, error) {
	return s.queries.listUsers(ctx, f, after, limit)
}

// AfterCachedReadForTest runs fn between a read the cache missed and its
// keeping.
func (s *Store) AfterCachedReadForTest(fn func()) { s.cache.afterRead = fn }

// ChangeLogTables are the tables whose writes the change log logs, and
// those whose writes it does not.
func ChangeLogTables() (logged, unlogged []string) {
	for _, t := range changeLogTables {
		logged = append(logged, t.table)
	}
	return logged, unloggedTables
}

// ChangeLogBackend is the process ID of the PostgreSQL backend that answers
// the change log's questions (0: none open).
func (s *Store) ChangeLogBackend() uint32 {
	l := s.pgLog
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn == nil {
		return 0
	}
	return l.conn.PID()
}
