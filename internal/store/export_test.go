package store

import (
	"context"
	"strings"

	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/sqldb"
	"github.com/guildhall/guildhall/internal/store/schema"
)

// Hooks for the store's external tests.

// OptionsUpTo returns opts that apply only the first n migrations.
func OptionsUpTo(opts Options, n int) Options {
	opts.migrateUpTo = n
	return opts
}

// MigrationIndex returns the position of a migration (1-based), or 0.
func MigrationIndex(id string) int {
	for i, m := range schema.Migrations {
		if m.ID == id {
			return i + 1
		}
	}
	return 0
}

// ExecForTest runs a statement on the write pool outside the writer, as
// code before a migration wrote rows.
func (s *Store) ExecForTest(sql string, args ...any) error {
	return s.db.WritePool().Exec(sql, args...).Error
}

// ExecForTestInTx runs a statement in a write transaction.
func (tx *Tx) ExecForTestInTx(ctx context.Context, sql string, args ...any) error {
	return tx.with(ctx).Exec(sql, args...).Error
}

// ScanForTest reads the rows of a query into dest, past the cache.
func (s *Store) ScanForTest(dest any, sql string, args ...any) error {
	return s.db.ReadPool().Raw(sql, args...).Scan(dest).Error
}

// QueuedWrites is the number of writes waiting for the writer.
func (s *Store) QueuedWrites() int { return s.db.QueuedWrites() }

// UserFromDatabaseForTest reads a user past the cache (benchmarks of the
// database path).
func (s *Store) UserFromDatabaseForTest(ctx context.Context, id string) (model.User, error) {
	return s.queries.getUser(ctx, id)
}

// ListUsersFromDatabaseForTest reads a page of users past the cache.
func (s *Store) ListUsersFromDatabaseForTest(ctx context.Context, f UserFilter, after string, limit int) ([]model.User, string, error) {
	return s.queries.listUsers(ctx, f, after, limit)
}

// ErrNotKeptForTest is errNotKept.
var ErrNotKeptForTest = errNotKept

// SearchKeptForTest reads a page of a search with the kept users alone
// (searchKept), past the cached pages.
func (s *Store) SearchKeptForTest(ctx context.Context, f UserFilter, after string, limit int) ([]model.User, error) {
	users, _, err := s.searchKept(ctx, s.searches, f, after, limit)
	return users, err
}

// AfterCachedReadForTest runs fn between a read the cache missed and its
// keeping.
func (s *Store) AfterCachedReadForTest(fn func()) { s.cache.AfterRead(fn) }

// ChangeLogTables are the tables whose writes the change log logs, and
// those whose writes it does not.
func ChangeLogTables() (logged, unlogged []string) {
	for _, t := range registry.Logged {
		logged = append(logged, t.Name)
	}
	return logged, registry.Unlogged
}

// ExplainListUsersForTest returns how the database runs a page of users:
// on SQLite its query plan, one step a line; on PostgreSQL the plan as run
// (EXPLAIN ANALYZE, JSON), with the rows each step read.
func (s *Store) ExplainListUsersForTest(ctx context.Context, f UserFilter, after string, limit int) (string, error) {
	key, id := strings.ToLower(f.Prefix), after
	if i := strings.LastIndexByte(after, 0); i >= 0 {
		key, id = after[:i], after[i+1:]
	}
	text, args := s.lists().listUsers(f, key, id, limit+1)
	if s.Postgres() {
		var plan string
		err := s.db.ReadPool().WithContext(ctx).Raw("EXPLAIN (ANALYZE, FORMAT JSON) "+text, args...).Row().Scan(&plan)
		return plan, err
	}
	rows, err := s.db.ReadPool().WithContext(ctx).Raw("EXPLAIN QUERY PLAN "+text, args...).Rows()
	if err != nil {
		return "", err
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var id, parent, notused int
		var detail string
		if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
			return "", err
		}
		b.WriteString(detail + "\n")
	}
	return b.String(), rows.Err()
}

// UserBatchesSentForTest returns how many statements the batches of user
// reads sent (PostgreSQL; 0 on SQLite, which has none).
func (s *Store) UserBatchesSentForTest() int64 {
	if s.userBatches == nil {
		return 0
	}
	return s.userBatches.Sent()
}

// SearchStatementsForTest returns how many statements are prepared on the
// pool searches run on (PostgreSQL).
func (s *Store) SearchStatementsForTest() int { return s.searches.sql.Prepared() }

// EventChunk is the most events one INSERT writes.
const EventChunk = sqldb.EventChunk

// ExplainHoldersPageForTest returns how the database runs a page of
// HoldersPage: SQLite's plan, one step a line; PostgreSQL's as run
// (EXPLAIN ANALYZE, JSON), with the rows each step read.
func (s *Store) ExplainHoldersPageForTest(ctx context.Context, h Holders, after string, n int) (string, error) {
	text, args := holdersStatement(s.queries.dialect(), h, after, n)
	explain := "EXPLAIN QUERY PLAN "
	if s.Postgres() {
		explain = "EXPLAIN (ANALYZE, FORMAT JSON) "
		for i, a := range args {
			if list, ok := a.([]string); ok { // GORM would spell it out as a list
				args[i] = "{" + strings.Join(list, ",") + "}"
			}
		}
	}
	rows, err := s.db.ReadPool().WithContext(ctx).Raw(explain+text, args...).Rows()
	if err != nil {
		return "", err
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var id, parent, notused int
		var detail string
		dest := []any{&id, &parent, &notused, &detail}
		if s.Postgres() {
			dest = []any{&detail}
		}
		if err := rows.Scan(dest...); err != nil {
			return "", err
		}
		b.WriteString(detail + "\n")
	}
	return b.String(), rows.Err()
}

// WriteLockKey is the key of the advisory lock every write transaction
// takes (PostgreSQL).
func (s *Store) WriteLockKey() int64 { return s.freshPG().WriteKey }
