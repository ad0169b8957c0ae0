package sqldb_test

import (
	"context"
	"testing"
	"time"

	"github.com/guildhall/guildhall/internal/sqldb"
	"github.com/guildhall/guildhall/internal/testenv"
)

// Two deployments in two schemas of one PostgreSQL database share neither
// the write lock nor the NOTIFY channel (docs/design.md §12); two instances of one
// deployment share both.
func TestSchemasDoNotShareLocksOrChannel(t *testing.T) {
	a, b := testenv.FreshPostgres(t), testenv.FreshPostgres(t)
	open := func(url string) *sqldb.DB {
		s, err := sqldb.Open(context.Background(), sqldb.Options{DatabaseURL: url})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	sa, sa2, sb := open(a), open(a), open(b)
	if sa.EventChannel() != sa2.EventChannel() {
		t.Fatalf("one schema, two channels: %q, %q", sa.EventChannel(), sa2.EventChannel())
	}
	if sa.EventChannel() == sb.EventChannel() || sa.EventChannel() == "guildhall_events" {
		t.Fatalf("channels %q and %q: not per schema", sa.EventChannel(), sb.EventChannel())
	}

	held, release, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		_, err := sa.Write(context.Background(), func(*sqldb.Tx) error {
			close(held)
			<-release
			return nil
		})
		done <- err
	}()
	<-held
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := sb.Write(ctx, func(*sqldb.Tx) error { return nil }); err != nil {
		t.Fatalf("a write in schema B waited for schema A's write lock: %v", err)
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel2()
	if _, err := sa2.Write(ctx2, func(*sqldb.Tx) error { return nil }); err == nil {
		t.Fatal("a second instance on schema A wrote while the first held the write lock")
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
