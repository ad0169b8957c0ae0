package store

import (
	"fmt"

	"gorm.io/gorm"
)

// QueryCount is the number of SQL statements the store has sent since it was
// opened (reads and writes, in and out of transactions; BEGIN and COMMIT are
// not counted). Tests and benchmarks use it to bound the cost of a request,
// e.g. "authorizing a request is one round trip on a warm instance".
func (s *Store) QueryCount() int64 { return s.statements.Load() }

// countStatements makes every statement sent through db move QueryCount.
func (s *Store) countStatements(db *gorm.DB) error {
	count := func(db *gorm.DB) {
		if !db.DryRun { // a subquery is built by a dry run of its own: not sent
			s.statements.Add(1)
		}
	}
	cb := db.Callback()
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
