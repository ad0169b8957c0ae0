package store

import "context"

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

// DisableReadCacheForTest sends every read to the database, as on
// PostgreSQL (benchmarks of the database path).
func (s *Store) DisableReadCacheForTest() { s.queries.cache = nil }

// AfterCachedReadForTest runs fn between a read the read cache missed and
// its keeping.
func (s *Store) AfterCachedReadForTest(fn func()) { s.cache.afterRead = fn }

// DataVersionTables are the tables whose writes move PostgreSQL's data
// version, and those whose writes do not.
func DataVersionTables() (cached, uncached []string) { return cachedTables, uncachedTables }
