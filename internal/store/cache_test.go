package store_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
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
func sameDatabase(t *testing.T, kind string, opts ...func(*store.Options)) func() *store.Store {
	o := storeOptions(t, kind)
	for _, f := range opts {
		f(&o)
	}
	return func() *store.Store {
		t.Helper()
		s, err := store.Open(context.Background(), o)
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

// request is the context of one request (its read scope).
func request(s *store.Store) context.Context { return s.ReadScope(context.Background()) }

// write runs fn in a write of s, failing the test on error.
func write(t *testing.T, s *store.Store, fn func(ctx context.Context, tx *store.Tx) error) {
	t.Helper()
	ctx := context.Background()
	if _, err := s.Write(ctx, func(tx *store.Tx) error { return fn(ctx, tx) }); err != nil {
		t.Fatal(err)
	}
}

// cacheFixture is a store with a user holding a role and a token, and a
// channel with an overwrite.
type cacheFixture struct {
	alice model.User
	hash  string
}

func newCacheFixture(t *testing.T, s *store.Store) cacheFixture {
	t.Helper()
	alice := seedAlice(t, s)
	write(t, s, func(ctx context.Context, tx *store.Tx) error {
		now := model.Now()
		if _, err := tx.InsertRole(ctx, model.Role{ID: "mods", Name: "mods", Permissions: permissions.Of(permissions.ManageRoles), CreatedAt: now, UpdatedAt: now}); err != nil {
			return err
		}
		if _, err := tx.AddUserRole(ctx, alice.ID, "mods", now); err != nil {
			return err
		}
		if _, err := tx.InsertChannel(ctx, model.Channel{ID: "ops", Name: "ops", CreatedAt: now, UpdatedAt: now}); err != nil {
			return err
		}
		if err := tx.PutOverwrite(ctx, model.Overwrite{ChannelID: "ops", TargetType: model.TargetRole, TargetID: "mods",
			Allow: permissions.Of(permissions.SendMessages)}); err != nil {
			return err
		}
		return tx.InsertToken(ctx, model.Token{ID: newUser("t").ID, UserID: alice.ID, Name: "cli", CreatedAt: now}, "hash-of-alice")
	})
	return cacheFixture{alice: alice, hash: "hash-of-alice"}
}

// cachedReads are the store's cached reads, each rendering what it read.
func cachedReads(f cacheFixture) map[string]func(ctx context.Context, s *store.Store) (string, error) {
	return map[string]func(ctx context.Context, s *store.Store) (string, error){
		"user": func(ctx context.Context, s *store.Store) (string, error) {
			u, err := s.User(ctx, f.alice.ID)
			return fmt.Sprintf("%s %s %v", u.DisplayName, u.Status, u.Roles), err
		},
		"page of users": func(ctx context.Context, s *store.Store) (string, error) {
			users, next, err := s.ListUsers(ctx, store.UserFilter{}, "", 10)
			var names []string
			for _, u := range users {
				names = append(names, u.DisplayName+" "+u.Status+fmt.Sprint(u.Roles))
			}
			return fmt.Sprint(names, next != ""), err
		},
		"credentials": func(ctx context.Context, s *store.Store) (string, error) {
			c, err := s.Credentials(ctx, f.hash)
			return fmt.Sprintf("%s %s %v", c.Principal.UserID, c.Status, c.Principal.Roles), err
		},
		"authorization state": func(ctx context.Context, s *store.Store) (string, error) {
			a, err := s.AuthState(ctx)
			if err != nil {
				return "", err
			}
			global, gv := a.Global()
			var b strings.Builder
			fmt.Fprintf(&b, "global %v@%d;", global.Names(), gv)
			for _, r := range a.Roles() {
				fmt.Fprintf(&b, " role %s %s %d %v;", r.ID, r.Name, r.Position, r.Permissions.Names())
			}
			for _, c := range a.Channels() {
				ows, v, _ := a.Overwrites(c.ID) // unordered
				slices.SortFunc(ows, func(x, y model.Overwrite) int {
					return strings.Compare(x.TargetType+x.TargetID, y.TargetType+y.TargetID)
				})
				fmt.Fprintf(&b, " channel %s %s overwrites@%d %v;", c.ID, c.Name, v, ows)
			}
			return b.String(), nil
		},
	}
}

// TestCacheNeverOutlivesACommit: each cached read, repeated in a request of
// its own, is answered from memory; after a commit, by this store's writer,
// by a second store on the same database (as a second instance), or by a
// statement outside the writer, the next request's read answers what a
// store with nothing cached reads, and the reads the change did not touch
// are still answered from memory.
func TestCacheNeverOutlivesACommit(t *testing.T) {
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		open := sameDatabase(t, kind)
		a, b := open(), open()
		f := newCacheFixture(t, a)
		reads := cachedReads(f)
		changes := []struct {
			name    string
			by      func()
			changed []string // the reads whose answer it changes
			kept    []string // the reads it leaves in the cache
		}{
			{"a rename by this store", func() {
				write(t, a, func(ctx context.Context, tx *store.Tx) error {
					u := f.alice
					u.DisplayName = "renamed"
					_, err := tx.UpdateUser(ctx, u)
					return err
				})
			}, []string{"user", "page of users"}, []string{"authorization state"}},
			{"a role taken by another store", func() {
				write(t, b, func(ctx context.Context, tx *store.Tx) error {
					_, err := tx.RemoveUserRole(ctx, f.alice.ID, "mods", model.Now())
					return err
				})
			}, []string{"user", "page of users", "credentials"}, []string{"authorization state"}},
			{"a suspension outside the writer", func() {
				if err := b.ExecForTest("UPDATE users SET status = ? WHERE id = ?", model.StatusSuspended, f.alice.ID); err != nil {
					t.Fatal(err)
				}
			}, []string{"user", "page of users", "credentials"}, []string{"authorization state"}},
			{"a role's permissions by another store", func() {
				write(t, b, func(ctx context.Context, tx *store.Tx) error {
					r, err := tx.GetRole(ctx, "mods")
					if err != nil {
						return err
					}
					r.Permissions = r.Permissions.Union(permissions.Of(permissions.MentionEveryone))
					_, err = tx.UpdateRole(ctx, r)
					return err
				})
			}, []string{"authorization state"}, []string{"credentials"}},
			{"an overwrite by another store", func() {
				write(t, b, func(ctx context.Context, tx *store.Tx) error {
					return tx.PutOverwrite(ctx, model.Overwrite{ChannelID: "ops", TargetType: model.TargetEveryone,
						Deny: permissions.Of(permissions.EmbedLinks)})
				})
			}, []string{"authorization state"}, []string{"user", "page of users", "credentials"}},
			{"a channel renamed outside the writer", func() {
				if err := b.ExecForTest("UPDATE channels SET name = 'renamed' WHERE id = 'ops'"); err != nil {
					t.Fatal(err)
				}
			}, []string{"authorization state"}, []string{"user", "page of users", "credentials"}},
			{"the global permissions by this store", func() {
				write(t, a, func(ctx context.Context, tx *store.Tx) error {
					return tx.SetGlobal(ctx, permissions.DefaultGlobal.Union(permissions.Of(permissions.ManageMessages)))
				})
			}, []string{"authorization state"}, []string{"user", "page of users", "credentials"}},
		}
		for _, c := range changes {
			t.Run(c.name, func(t *testing.T) {
				before := map[string]string{}
				for name, read := range reads {
					first, err := read(request(a), a)
					if err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					st := a.CacheStats()
					again, err := read(request(a), a)
					if err != nil || again != first {
						t.Fatalf("%s: %q, then %q (%v)", name, first, again, err)
					}
					if after := a.CacheStats(); after.Misses != st.Misses {
						t.Errorf("%s: a repeated read went to the database", name)
					}
					before[name] = first
				}
				c.by()
				cold := open()
				for name, read := range reads {
					st := a.CacheStats()
					got, err := read(request(a), a)
					if err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					hit := a.CacheStats().Misses == st.Misses
					want, err := read(request(cold), cold)
					if err != nil {
						t.Fatalf("%s, with nothing cached: %v", name, err)
					}
					if got != want {
						t.Errorf("%s: %q after the change, where a store with nothing cached reads %q", name, got, want)
					}
					if slices.Contains(c.changed, name) == (got == before[name]) {
						t.Errorf("%s: %q before, %q after: the test expects it changed: %v", name, before[name], got, slices.Contains(c.changed, name))
					}
					if slices.Contains(c.kept, name) && !hit {
						t.Errorf("%s: the change should have left it cached", name)
					}
				}
			})
		}
	})
}

// TestCacheDropsOnlyWhatChanged: a user created elsewhere leaves every
// other user, everyone's credentials and the authorization state in the
// cache; only the lists of users go.
func TestCacheDropsOnlyWhatChanged(t *testing.T) {
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		open := sameDatabase(t, kind)
		a, b := open(), open()
		f := newCacheFixture(t, a)
		reads := cachedReads(f)
		for _, read := range reads {
			if _, err := read(request(a), a); err != nil {
				t.Fatal(err)
			}
		}
		for i := range 20 {
			write(t, b, func(ctx context.Context, tx *store.Tx) error {
				_, err := tx.InsertUser(ctx, newUser(fmt.Sprint("joiner", i)))
				return err
			})
			for name, read := range reads {
				st := a.CacheStats()
				if _, err := read(request(a), a); err != nil {
					t.Fatal(err)
				}
				missed := a.CacheStats().Misses != st.Misses
				if missed != (name == "page of users") {
					t.Errorf("after a user joined, %s missed: %v", name, missed)
				}
			}
		}
	})
}

// TestCacheScopeIsOneMomentAndReadsItsOwnWrites: the reads of one request
// are answered as of one moment, after it began (a commit by another
// instance during the request shows in the next request); a write the
// request commits itself shows in its own next read.
func TestCacheScopeIsOneMomentAndReadsItsOwnWrites(t *testing.T) {
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		open := sameDatabase(t, kind)
		a, b := open(), open()
		alice := seedAlice(t, a)
		rename := func(s *store.Store, ctx context.Context, to string) {
			t.Helper()
			if _, err := s.Write(ctx, func(tx *store.Tx) error {
				u := alice
				u.DisplayName = to
				_, err := tx.UpdateUser(ctx, u)
				return err
			}); err != nil {
				t.Fatal(err)
			}
		}
		name := func(ctx context.Context) string {
			t.Helper()
			u, err := a.User(ctx, alice.ID)
			if err != nil {
				t.Fatal(err)
			}
			return u.DisplayName
		}
		ctx := request(a)
		if got := name(ctx); got != "alice" {
			t.Fatalf("%q", got)
		}
		rename(b, context.Background(), "by another instance")
		if got := name(ctx); got != "alice" {
			t.Errorf("within the request that began before the commit: %q", got)
		}
		if got := name(request(a)); got != "by another instance" {
			t.Errorf("the next request: %q", got)
		}
		rename(a, ctx, "by the request")
		if got := name(ctx); got != "by the request" {
			t.Errorf("the request's read after its own write: %q", got)
		}
	})
}

// TestCacheHandsOutCopies: a caller that changes what it was given (a user
// of a page, their roles, credentials' roles) changes nothing another
// caller reads.
func TestCacheHandsOutCopies(t *testing.T) {
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		s := sameDatabase(t, kind)()
		f := newCacheFixture(t, s)
		for range 3 {
			ctx := request(s)
			users, _, err := s.ListUsers(ctx, store.UserFilter{}, "", 10)
			if err != nil || len(users) != 1 || users[0].DisplayName != "alice" || users[0].Roles[0] != "mods" {
				t.Fatalf("page %+v, %v", users, err)
			}
			users[0].DisplayName, users[0].Roles[0] = "changed by a caller", "changed"
			u, err := s.User(ctx, f.alice.ID)
			if err != nil || u.Roles[0] != "mods" {
				t.Fatalf("user %+v, %v", u, err)
			}
			u.Roles[0] = "changed"
			c, err := s.Credentials(ctx, f.hash)
			if err != nil || c.Principal.Roles[0] != "mods" {
				t.Fatalf("credentials %+v, %v", c, err)
			}
			c.Principal.Roles[0] = "changed"
			a, err := s.AuthState(ctx)
			if err != nil {
				t.Fatal(err)
			}
			roles := a.Roles()
			roles[0].Name = "changed"
			ows, _, _ := a.Overwrites("ops")
			ows[0].TargetID = "changed"
		}
		a, _ := s.AuthState(request(s))
		if r, _ := a.Role("mods"); r.Name != "mods" || a.Roles()[0].Name != "mods" {
			t.Errorf("roles changed by a caller: %+v", a.Roles())
		}
		if ows, _, _ := a.Overwrites("ops"); ows[0].TargetID != "mods" {
			t.Errorf("overwrites changed by a caller: %+v", ows)
		}
	})
}

// TestCacheKeepsNothingACommitChanged: a commit that lands while a read the
// cache missed is running (after the change log was asked) leaves nothing
// stale behind: the next request sees it.
func TestCacheKeepsNothingACommitChanged(t *testing.T) {
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		open := sameDatabase(t, kind)
		a, b := open(), open()
		alice := seedAlice(t, a)
		committed := false
		a.AfterCachedReadForTest(func() {
			if committed {
				return
			}
			committed = true
			write(t, b, func(ctx context.Context, tx *store.Tx) error {
				u := alice
				u.DisplayName = "renamed during the read"
				_, err := tx.UpdateUser(ctx, u)
				return err
			})
		})
		u, err := a.User(request(a), alice.ID)
		if err != nil || u.DisplayName != "alice" || !committed {
			t.Fatalf("the read during the commit: %+v, %v (committed: %v)", u, err, committed)
		}
		for range 2 {
			if u, err = a.User(request(a), alice.ID); err != nil || u.DisplayName != "renamed during the read" {
				t.Fatalf("after the commit: %+v, %v", u, err)
			}
		}
	})
}

// TestCacheStaysWithinItsBound: however many users are read, the cache's
// estimate of its size stays within the bound it was given, and what it
// answers is right.
func TestCacheStaysWithinItsBound(t *testing.T) {
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		const bound = 64 << 10
		s := sameDatabase(t, kind, func(o *store.Options) { o.CacheBytes = bound })()
		seedAlice(t, s)
		var ids []string
		write(t, s, func(ctx context.Context, tx *store.Tx) error {
			for i := range 1000 {
				u, err := tx.InsertUser(ctx, newUser(fmt.Sprintf("u%04d", i)))
				if err != nil {
					return err
				}
				ids = append(ids, u.ID)
			}
			return nil
		})
		for round := range 2 {
			for i, id := range ids {
				u, err := s.User(request(s), id)
				if err != nil || u.Username != fmt.Sprintf("u%04d", i) {
					t.Fatalf("user %d: %+v, %v", i, u, err)
				}
				if st := s.CacheStats(); st.Bytes > bound {
					t.Fatalf("round %d, read %d: the cache holds %d bytes, over its bound of %d", round, i, st.Bytes, bound)
				}
			}
		}
		if st := s.CacheStats(); st.Entries == 0 || st.Entries >= len(ids) {
			t.Errorf("%d entries for %d users read under a bound that fits fewer", st.Entries, len(ids))
		}
	})
}

// TestCacheClosesItsConnection: closing a store releases the change log's
// connection with the others: no file of the data directory stays open,
// and SQLite, closing its last connection, checkpoints and removes the
// WAL.
func TestCacheClosesItsConnection(t *testing.T) {
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
			if _, err := s.AuthState(ctx); err != nil {
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

// TestCacheConcurrentReadersSeeEveryAcknowledgedWrite: readers of one
// store, hitting its cache (on PostgreSQL, sharing their questions), while
// writes alternate between it and a second store on the same database: a
// request that starts after a write was acknowledged never reads the state
// before it. (make test-race runs this package under the race detector
// too.)
func TestCacheConcurrentReadersSeeEveryAcknowledgedWrite(t *testing.T) {
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
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
			wg.Go(func() {
				for {
					select {
					case <-done:
						return
					default:
					}
					before := acked.Load()
					ctx := request(a)
					var name string
					if r%2 == 0 {
						u, err := a.User(ctx, alice.ID)
						if err != nil {
							t.Error(err)
							return
						}
						name = u.DisplayName
					} else {
						users, _, err := a.ListUsers(ctx, store.UserFilter{}, "", 10)
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
			})
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
		if st := a.CacheStats(); st.Hits == 0 {
			t.Errorf("the readers never hit the cache: %+v", st)
		}
	})
}
