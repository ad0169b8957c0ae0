package sqldb

import (
	"context"
	"fmt"
	"sync/atomic"

	"gorm.io/gorm"
)

// QueryCount is the number of SQL statements sent since the database was
// opened (reads and writes, in and out of transactions; BEGIN and COMMIT
// are not counted). Tests and benchmarks use it to bound the cost of a
// request, e.g. "authorizing a request is one round trip on a warm
// instance".
func (db *DB) QueryCount() int64 { return db.statements.Load() }

// uncounted marks a context whose statements QueryCount leaves out.
type uncounted struct{}

// Uncounted marks ctx's statements as background work that QueryCount
// leaves out (the webhooks' deliverer, which asks the database now and
// then on its own), so that the count stays what requests cost.
func Uncounted(ctx context.Context) context.Context { return context.WithValue(ctx, uncounted{}, true) }

// Counter is QueryCount's counter, for statements sent on connections of
// their own (the read cache's, on the SQLite change log).
func (db *DB) Counter() *atomic.Int64 { return &db.statements }

// countStatements makes every statement sent through g move QueryCount.
func (db *DB) countStatements(g *gorm.DB) error {
	count := func(g *gorm.DB) {
		// A subquery is built by a dry run of its own: not sent.
		if !g.DryRun && (g.Statement.Context == nil || g.Statement.Context.Value(uncounted{}) == nil) {
			db.statements.Add(1)
		}
	}
	cb := g.Callback()
	const name = "guildhall:count_statements"
	for _, err := range []error{
		cb.Create().Before("gorm:create").Register(name, count),
		cb.Query().Before("gorm:query").Register(name, count),
		cb.Update().Before("gorm:update").Register(name, count),
		cb.Delete().Before("gorm:delete").Register(name, count),
		cb.Row().Before("gorm:row").Register(name, count),
		cb.Raw().Before("gorm:raw").Register(name, count),
	} {
		if err != nil {
			return fmt.Errorf("register statement counter: %w", err)
		}
	}
	return nil
}
