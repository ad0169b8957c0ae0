package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/guildhall/guildhall/internal/apperr"
	"github.com/guildhall/guildhall/internal/sqldb"
)

// How the store runs SQL, one rule:
//
//   - The hot reads, the ones a request makes on every call and the cache
//     answers (credentials, a user, a page of users), the change log's
//     questions, the events a history answer undoes (thousands of rows:
//     EventsAfterInstant), those of the webhooks' deliveries (hundreds a
//     batch under a stream of deliveries: eventsBySeq), and the two hot
//     writes, a new user (every member who joins makes it) and the audit
//     events (every write appends them: internal/sqldb's insertEvents),
//     are constant SQL beside their resource's functions, run as
//     statements prepared once per pool (sqldb.Queries.Query) and scanned
//     by hand into the model, without reflection. A parameter SQLite's planner reads (a LIMIT) would have
//     it prepare the statement again at every run: a LIMIT's count is
//     sqldb.Dialect.Limit's.
//   - Everything else, the writes, the reads of a write transaction that
//     are not hot, the cold reads and the authorization state's parts
//     (authstate.go), goes through GORM's builder on each resource's row
//     types; SQL text appears only in the migrations and, for a
//     statement the builder cannot say (an UPDATE ... WHERE id IN
//     (SELECT ...)), as gorm.Expr or a named constant beside its function.
//
// No function does both. There is one read path per question: outside a
// transaction the Store's cached reads (User, ListUsers, Credentials,
// AuthState), inside one the Tx's (GetUser, Credentials, AuthState), which
// share the SQL and the scanners of the hot reads.

// queries are the reads, shared by the store (the read pool: Store.queries,
// Store.searches) and a write transaction (its own connection, so a
// transaction never waits on itself: Tx). sqldb.Queries runs their
// statements.
type queries struct{ sql sqldb.Queries }

// with is GORM's builder, under the context statements run under
// (sqldb.Queries.With).
func (q queries) with(ctx context.Context) *gorm.DB { return q.sql.With(ctx) }

// query runs a constant SQL query through a reused prepared statement
// (sqldb.Queries.Query).
func (q queries) query(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return q.sql.Query(ctx, query, args...)
}

// exec runs a constant SQL statement like query.
func (q queries) exec(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return q.sql.Exec(ctx, query, args...)
}

func (q queries) dialect() sqldb.Dialect { return q.sql.Dialect() }

// micros is a timestamp as the store keeps it: microseconds since the Unix
// epoch, UTC, in a BIGINT column on both databases. Reading one is an
// integer scan, where a SQLite DATETIME was a text parse on every row.
type micros int64

func microsOf(t time.Time) micros { return micros(t.UnixMicro()) }

// time is the timestamp as the API shows it: UTC, microsecond precision.
func (m micros) time() time.Time { return time.UnixMicro(int64(m)).UTC() }

func microsPtr(t *time.Time) *micros {
	if t == nil {
		return nil
	}
	m := microsOf(*t)
	return &m
}

func timePtr(m *micros) *time.Time {
	if m == nil {
		return nil
	}
	t := m.time()
	return &t
}

// notFound turns gorm's record-not-found into a 404 with the detail given.
func notFound(err error, format string, args ...any) error {
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return apperr.NotFound(format, args...)
	}
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), err)
}

// duplicate turns a unique key's violation into a 409 with the detail
// given.
func duplicate(err error, format string, args ...any) error {
	if errors.Is(err, gorm.ErrDuplicatedKey) || sqldb.UniqueViolation(err) != "" {
		return apperr.Conflict(format, args...)
	}
	return err // not a conflict: the message is not this one
}

func lowerPtr(s *string) *string {
	if s == nil {
		return nil
	}
	l := strings.ToLower(*s)
	return &l
}

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }
