package store

import (
	"context"
	"fmt"

	"github.com/go-gormigrate/gormigrate/v2"
	"gorm.io/gorm"

	"github.com/guildhall/guildhall/internal/fresh"
	"github.com/guildhall/guildhall/internal/sqldb"
	"github.com/guildhall/guildhall/internal/store/schema"
)

// migrate applies the migrations that have not run yet, holding a lock so
// that instances starting together on one PostgreSQL database take turns.
func (s *Store) migrate(ctx context.Context) error {
	n := len(schema.Migrations)
	if s.migrateUpTo > 0 {
		n = s.migrateUpTo
	}
	d, pg := s.db.Dialect(), s.freshPG()
	list := make([]*gormigrate.Migration, 0, n)
	for _, m := range schema.Migrations[:n] {
		m := m
		list = append(list, &gormigrate.Migration{
			ID: m.ID,
			Migrate: func(tx *gorm.DB) error {
				for _, stmt := range schema.Statements(d.DDL(m.SQL)) {
					if err := tx.Exec(stmt).Error; err != nil {
						return fmt.Errorf("migration %s: %w", m.ID, err)
					}
				}
				if m.Run != nil {
					if err := m.Run(tx, d, pg); err != nil {
						return fmt.Errorf("migration %s: %w", m.ID, err)
					}
				}
				return nil
			},
		})
	}
	return s.db.WritePool().WithContext(sqldb.Unbounded(ctx)).Connection(func(conn *gorm.DB) error {
		if s.Postgres() {
			key := s.db.Namespace().MigrateKey
			if err := conn.Exec("SELECT pg_advisory_lock(?)", key).Error; err != nil {
				return fmt.Errorf("migration lock: %w", err)
			}
			defer conn.Exec("SELECT pg_advisory_unlock(?)", key)
		} else {
			// A SQLite table rebuild needs foreign keys off (they cannot be
			// switched inside a transaction); migrations that rebuild check
			// them with PRAGMA foreign_key_check before committing.
			if err := conn.Exec("PRAGMA foreign_keys = OFF").Error; err != nil {
				return fmt.Errorf("migrate: %w", err)
			}
			defer conn.Exec("PRAGMA foreign_keys = ON")
		}
		opts := *gormigrate.DefaultOptions
		opts.TableName = "schema_migrations"
		opts.UseTransaction = true
		if err := gormigrate.New(conn, &opts, list).Migrate(); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
		// One transaction: on PostgreSQL the triggers are created under the
		// write lock it takes (fresh.Install).
		return conn.Transaction(func(tx *gorm.DB) error {
			return fresh.Install(ctx, tx.Statement.ConnPool, registry, pg)
		})
	})
}
