package sqldb_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/mattn/go-sqlite3"

	"github.com/guildhall/guildhall/internal/apperr"
	"github.com/guildhall/guildhall/internal/sqldb"
	"github.com/guildhall/guildhall/internal/testenv"
)

// Classify names the faults of what lies beneath: a full disk is a 507, a
// database that does not answer a 503; anything else stays as it was (a
// 500, or the domain's own answer).
func TestClassify(t *testing.T) {
	s, err := sqldb.Open(context.Background(), sqldb.Options{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	cases := []struct {
		name string
		err  error
		want error // nil: unchanged
	}{
		{"ENOSPC writing a blob", &fs.PathError{Op: "write", Path: "/data/blobs/tmp/x", Err: syscall.ENOSPC}, apperr.ErrInsufficientStorage},
		{"SQLite full", fmt.Errorf("insert: %w", sqlite3.Error{Code: sqlite3.ErrFull}), apperr.ErrInsufficientStorage},
		{"PostgreSQL disk_full", &pgconn.PgError{Code: "53100"}, apperr.ErrInsufficientStorage},
		{"our deadline", fmt.Errorf("query: %w", context.DeadlineExceeded), apperr.ErrUnavailable},
		{"connection refused", &pgconn.ConnectError{}, apperr.ErrUnavailable},
		{"statement_timeout", &pgconn.PgError{Code: "57014"}, apperr.ErrUnavailable},
		{"admin shutdown", &pgconn.PgError{Code: "57P01"}, apperr.ErrUnavailable},
		{"connection exception", &pgconn.PgError{Code: "08006"}, apperr.ErrUnavailable},
		{"network", &net.OpError{Op: "read", Err: syscall.ECONNRESET}, apperr.ErrUnavailable},
		{"SQLite busy", sqlite3.Error{Code: sqlite3.ErrBusy}, apperr.ErrUnavailable},
		{"unexpected EOF on SQLite (not a connection)", fmt.Errorf("read blob: %w", io.ErrUnexpectedEOF), nil},
		{"a client gone", context.Canceled, nil},
		{"a unique violation", &pgconn.PgError{Code: "23505"}, nil},
		{"something else", errors.New("boom"), nil},
		{"a domain answer", apperr.NotFound("no"), nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := s.Classify(tc.err)
			if tc.want == nil {
				if got != tc.err {
					t.Fatalf("Classify changed %v into %v", tc.err, got)
				}
				return
			}
			if !errors.Is(got, tc.want) || !errors.Is(got, tc.err) {
				t.Fatalf("Classify(%v) = %v, want %v wrapping the cause", tc.err, got, tc.want)
			}
		})
	}
	if err := s.Writable(); err == nil {
		t.Fatal("Writable after a full disk: nil, want an error for a few seconds")
	}
}

// On PostgreSQL, a connection that ends in the middle of an answer (the
// database crashed or restarted, the network was cut), which pgx reports as
// a bare io.ErrUnexpectedEOF, is a 503 like any other lost connection.
func TestClassifyPostgresConnectionEnded(t *testing.T) {
	s, err := sqldb.Open(context.Background(), sqldb.Options{DatabaseURL: testenv.FreshPostgres(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	cause := fmt.Errorf("follow the change log: %w", io.ErrUnexpectedEOF)
	if got := s.Classify(cause); !errors.Is(got, apperr.ErrUnavailable) || !errors.Is(got, cause) {
		t.Fatalf("Classify(%v) = %v, want %v wrapping the cause", cause, got, apperr.ErrUnavailable)
	}
}
