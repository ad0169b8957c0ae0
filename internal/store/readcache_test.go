package store_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/permissions"
	"github.com/guildhall/guildhall/internal/store"
	"github.com/guildhall/guildhall/internal/testenv"
)

// sameDatabase returns a function that opens stores on one fresh database:
// the same SQLite file, or the same PostgreSQL schema, as two processes (two
// instances) would.
func sameDatabase(t *testing.T, kind string) func() *store.Store {
	opts := storeOptions(t, kind)
	return func() *store.Store {
		t.Helper()
		s, err := store.Open(context.Background(), opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
}

// seedAlice makes a fresh store's first write: the settings row and a user
// named alice.
func seedAlice(t *testing.T, s *store.Store) model.User {
	t.Helper()
	ctx := context.Background()
	var alice model.User
	if _, err := s.Write(ctx, func(tx *store.Tx) error {
		if err := tx.EnsureSettings(ctx, permissions.DefaultGlobal); err != nil {
			return err
		}
		var err error
		alice, err = tx.InsertUser(ctx, newUser("alice"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return alice
}

// TestReadCacheNeverOutlivesACommit: a repeated read is answered from
// memory, and the next read after any commit (this store's writer, a second
// store on the same database as a second instance would be, a statement
// outside the writer) sees it, for a user, a page of users, a channel, a
// channel's overwrites, a permission subject and the versions.
func TestReadCacheNeverOutlivesACommit(t *testing.T) {
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		testReadCacheNeverOutlivesACommit(t, kind)
	})
}

func testReadCacheNeverOutlivesACommit(t *testing.T, kind string) {
	ctx := context.Background()
	open := sameDatabase(t, kind)
	a, b := open(), open()
	alice := seedAlice(t, a)
	write := func(s *store.Store, fn func(tx *store.Tx) error) {
		t.Helper()
		if _, err := s.Write(ctx, fn); err != nil {
			t.Fatal(err)
		}
	}
	name := func() string {
		t.Helper()
		u, _, err := a.ReadUser(ctx, alice.ID)
		if err != nil {
			t.Fatal(err)
		}
		users, _, _, _, err := a.ListUsers(ctx, store.UserFilter{}, "", 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(users) != 1 || users[0].DisplayName != u.DisplayName {
			t.Fatalf("the page says %+v, the user %q", users, u.DisplayName)
		}
		return u.DisplayName
	}
	rename := func(s *store.Store, to string) {
		t.Helper()
		write(s, func(tx *store.Tx) error {
			u := alice
			u.DisplayName = to
			_, err := tx.UpdateUser(ctx, u)
			return err
		})
	}

	name() // fills the cache
	before := a.ReadCacheStats()
	if got := name(); got != "alice" {
		t.Fatalf("display name %q", got)
	}
	if st := a.ReadCacheStats(); st.Hits != before.Hits+2 || st.Misses != before.Misses {
		t.Fatalf("a repeated read went to the database: %+v, then %+v", before, st)
	}

	rename(a, "by this store")
	if got := name(); got != "by this store" {
		t.Fatalf("after this store's write: %q", got)
	}
	rename(b, "by another store")
	if got := name(); got != "by another store" {
		t.Fatalf("after another store's write: %q", got)
	}
	if err := b.ExecForTest("UPDATE users SET display_name = 'outside the writer' WHERE id = ?", alice.ID); err != nil {
		t.Fatal(err)
	}
	if got := name(); got != "outside the writer" {
		t.Fatalf("after a statement outside the writer: %q", got)
	}

	// The versions, a channel and a permission subject move the same way.
	v1, err := a.CurrentVersions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.CurrentVersions(ctx); err != nil {
		t.Fatal(err)
	}
	write(b, func(tx *store.Tx) error {
		if _, err := tx.InsertChannel(ctx, model.Channel{ID: "ops", Name: "ops", CreatedAt: model.Now(), UpdatedAt: model.Now()}); err != nil {
			return err
		}
		return tx.BumpCredentials(ctx)
	})
	v2, err := a.CurrentVersions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if v2.Credentials == v1.Credentials {
		t.Fatalf("versions still %+v after another store bumped them", v2)
	}
	sub, err := a.PermissionSubject(ctx, alice.ID, "ops", true)
	if err != nil {
		t.Fatal(err)
	}
	if !sub.ChannelExists || sub.Versions != v2 {
		t.Fatalf("subject %+v, want the channel and versions %+v", sub, v2)
	}
	c, _, err := a.ReadChannel(ctx, "ops")
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if l, err := a.ReadOverwrites(ctx, "ops"); err != nil || len(l.Items) != 0 {
			t.Fatalf("overwrites %+v, %v", l, err)
		}
	}
	write(b, func(tx *store.Tx) error {
		return tx.PutOverwrite(ctx, model.Overwrite{ChannelID: "ops", TargetType: model.TargetUser, TargetID: alice.ID,
			Allow: permissions.Of(permissions.SendMessages)})
	})
	if l, err := a.ReadOverwrites(ctx, "ops"); err != nil || len(l.Items) != 1 || l.Items[0].TargetID != alice.ID || l.Version == 0 {
		t.Fatalf("overwrites %+v, %v after another store set one", l, err)
	}
	write(b, func(tx *store.Tx) error {
		c.Name = "renamed"
		_, err := tx.UpdateChannel(ctx, c)
		return err
	})
	if c, _, err = a.ReadChannel(ctx, "ops"); err != nil || c.Name != "renamed" {
		t.Fatalf("channel %+v, %v after another store renamed it", c, err)
	}
	write(b, func(tx *store.Tx) error { _, err := tx.DeleteChannel(ctx, "ops"); return err })
	if sub, err = a.PermissionSubject(ctx, alice.ID, "ops", true); err != nil || sub.ChannelExists {
		t.Fatalf("subject %+v, %v after another store deleted the channel", sub, err)
	}
}

// TestReadCacheHandsOutCopies: a caller that changes the users of a page it
// was given (hiding an email) changes nothing another caller reads.
func TestReadCacheHandsOutCopies(t *testing.T) {
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		ctx := context.Background()
		s := openStore(t, kind)
		email := "alice@example.com"
		if _, err := s.Write(ctx, func(tx *store.Tx) error {
			if err := tx.EnsureSettings(ctx, permissions.DefaultGlobal); err != nil {
				return err
			}
			u := newUser("alice")
			u.Email = &email
			_, err := tx.InsertUser(ctx, u)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		for range 3 {
			users, _, _, _, err := s.ListUsers(ctx, store.UserFilter{}, "", 10)
			if err != nil {
				t.Fatal(err)
			}
			if len(users) != 1 || users[0].Email == nil || *users[0].Email != email || users[0].DisplayName != "alice" {
				t.Fatalf("page %+v", users)
			}
			users[0].Email, users[0].EmailHidden, users[0].DisplayName = nil, true, "changed by a caller"
		}
	})
}

// TestReadCacheKeepsNothingACommitChanged: a commit that lands while a
// read the cache missed is running (after the data version was probed)
// leaves nothing stale behind: the next read sees it.
func TestReadCacheKeepsNothingACommitChanged(t *testing.T) {
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		testReadCacheKeepsNothingACommitChanged(t, kind)
	})
}

func testReadCacheKeepsNothingACommitChanged(t *testing.T, kind string) {
	ctx := context.Background()
	open := sameDatabase(t, kind)
	a, b := open(), open()
	alice := seedAlice(t, a)
	committed := false
	a.AfterCachedReadForTest(func() {
		if committed {
			return
		}
		committed = true
		if _, err := b.Write(ctx, func(tx *store.Tx) error {
			u := alice
			u.DisplayName = "renamed during the read"
			_, err := tx.UpdateUser(ctx, u)
			return err
		}); err != nil {
			t.Error(err)
		}
	})
	u, _, err := a.ReadUser(ctx, alice.ID)
	if err != nil || u.DisplayName != "alice" || !committed {
		t.Fatalf("the read during the commit: %+v, %v (committed: %v)", u, err, committed)
	}
	for range 2 {
		if u, _, err = a.ReadUser(ctx, alice.ID); err != nil || u.DisplayName != "renamed during the read" {
			t.Fatalf("after the commit: %+v, %v", u, err)
		}
	}
}

// TestReadCacheClosesItsConnection: closing a store releases the cache's
// connection with the others: no file of the data directory stays open,
// and SQLite, closing its last connection, checkpoints and removes the
// WAL.
func TestReadCacheClosesItsConnection(t *testing.T) {
	if _, err := os.Stat("/proc/self/fd"); err != nil {
		t.Skip("needs /proc/self/fd to count open files")
	}
	ctx := context.Background()
	dir := t.TempDir()
	for i := range 3 {
		s, err := store.Open(ctx, store.Options{DataDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Write(ctx, func(tx *store.Tx) error { return tx.EnsureSettings(ctx, permissions.DefaultGlobal) }); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if _, err := s.CurrentVersions(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		fds, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		for _, fd := range fds {
			if target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name())); err == nil && strings.HasPrefix(target, dir) {
				t.Errorf("round %d: %s is still open after Close", i, target)
			}
		}
		for _, name := range []string{"guildhall.db-wal", "guildhall.db-shm"} {
			if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
				t.Errorf("round %d: %s left behind after Close", i, name)
			}
		}
	}
}

// TestReadCacheConcurrentReadersSeeEveryAcknowledgedWrite: readers of one
// store, hitting its read cache (on PostgreSQL, sharing the questions for
// the data version), while writes alternate between it and a second store
// on the same database: a read that starts after a write was acknowledged
// never answers the state before it. (make test-race runs this package
// under the race detector too.)
func TestReadCacheConcurrentReadersSeeEveryAcknowledgedWrite(t *testing.T) {
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		testReadCacheConcurrentReaders(t, kind)
	})
}

func testReadCacheConcurrentReaders(t *testing.T, kind string) {
	ctx := context.Background()
	open := sameDatabase(t, kind)
	stores := []*store.Store{open(), open()}
	a := stores[0]
	var alice model.User
	if _, err := a.Write(ctx, func(tx *store.Tx) error {
		if err := tx.EnsureSettings(ctx, permissions.DefaultGlobal); err != nil {
			return err
		}
		var err error
		u := newUser("alice")
		u.DisplayName = "v0000"
		alice, err = tx.InsertUser(ctx, u)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	const writes = 150
	var acked atomic.Int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	for r := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				before := acked.Load()
				var name string
				if r%2 == 0 {
					u, _, err := a.ReadUser(ctx, alice.ID)
					if err != nil {
						t.Error(err)
						return
					}
					name = u.DisplayName
				} else {
					users, _, _, _, err := a.ListUsers(ctx, store.UserFilter{}, "", 10)
					if err != nil || len(users) != 1 {
						t.Error(len(users), err)
						return
					}
					name = users[0].DisplayName
				}
				var seen int64
				if _, err := fmt.Sscanf(name, "v%d", &seen); err != nil {
					t.Error(err)
					return
				}
				if seen < before {
					t.Errorf("a read after write %d was acknowledged answered %q", before, name)
					return
				}
			}
		}()
	}
	for i := int64(1); i <= writes && !t.Failed(); i++ {
		if _, err := stores[i%2].Write(ctx, func(tx *store.Tx) error {
			u := alice
			u.DisplayName = fmt.Sprintf("v%04d", i)
			_, err := tx.UpdateUser(ctx, u)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		acked.Store(i)
	}
	close(done)
	wg.Wait()
	if st := a.ReadCacheStats(); st.Hits == 0 {
		t.Errorf("the readers never hit the cache: %+v", st)
	}
}
