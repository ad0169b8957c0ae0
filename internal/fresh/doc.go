// Package fresh decides when a value read from the database may be served
// again: the change log that triggers write in the database (registry.go;
// which tables log, and under which key, is the store's registry), how an
// instance follows it (follow.go: SQLite's own connection and wal-index,
// PostgreSQL's shared rounds), the read cache that drops what each commit
// changed (cache.go, packed.go, pages.go, view.go), and what a write
// transaction changed itself (own.go).
//
// It knows no resource's SQL: the store declares its tables and what each
// cached read depends on, and reads the values; this package only says
// whether what it holds is still true.
package fresh
