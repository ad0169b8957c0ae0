package store

import (
	"context"
	"strings"

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

// ExplainListUsersForTest returns the plan the database makes for
// ListUsers' statement (SQLite: EXPLAIN QUERY PLAN, its details one a
// line; PostgreSQL: EXPLAIN, or EXPLAIN ANALYZE when analyze is set).
func (s *Store) ExplainListUsersForTest(ctx context.Context, f UserFilter, after string, limit int, analyze bool) (string, error) {
	text, args := s.queries.sql().listUsers(f, after, limit)
	var lines []string
	if s.Postgres() {
		explain := "EXPLAIN "
		if analyze {
			explain = "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) "
		}
		if err := s.read.WithContext(ctx).Raw(explain+text, args...).Scan(&lines).Error; err != nil {
			return "", err
		}
		return strings.Join(lines, "\n"), nil
	}
	var rows []struct {
		ID, Parent, Notused int
		Detail              string
	}
	if err := s.read.WithContext(ctx).Raw("EXPLAIN QUERY PLAN "+text, args...).Scan(&rows).Error; err != nil {
		return "", err
	}
	for _, r := range rows {
		lines = append(lines, r.Detail)
	}
	return strings.Join(lines, "\n"), nil
}

// SearchRowsForTest counts the search index's rows of a user.
func (s *Store) SearchRowsForTest(ctx context.Context, userID string) (int64, error) {
	var n int64
	err := s.read.WithContext(ctx).Raw("SELECT COUNT(*) FROM user_search WHERE user_id = ?", userID).Scan(&n).Error
	return n, err
}

// AnalyzeForTest gathers PostgreSQL's statistics (nothing on SQLite).
func (s *Store) AnalyzeForTest(ctx context.Context) error {
	if !s.Postgres() {
		return nil
	}
	return s.write.WithContext(ctx).Exec("ANALYZE").Error
}
