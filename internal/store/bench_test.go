package store_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/google/uuid"

	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/permissions"
	"github.com/guildhall/guildhall/internal/store"
	"github.com/guildhall/guildhall/internal/testenv"
)

// benchStore opens a store of each kind with the settings row and n users.
func benchStores(b *testing.B, users int, fn func(b *testing.B, s *store.Store, ids []string)) {
	benchStoresPrepared(b, users, nil, fn)
}

// benchStoresPrepared is benchStores with prepare run on each store before
// anything is measured.
func benchStoresPrepared(b *testing.B, users int, prepare func(b *testing.B, s *store.Store, ids []string),
	fn func(b *testing.B, s *store.Store, ids []string)) {
	for _, kind := range []string{testenv.SQLite, testenv.Postgres} {
		b.Run(kind, func(b *testing.B) {
			if kind == testenv.Postgres {
				testenv.RequirePostgres(b)
			}
			ctx := context.Background()
			opts := store.Options{DataDir: b.TempDir()}
			if kind == testenv.Postgres {
				opts.DatabaseURL = testenv.FreshPostgres(b)
			}
			s, err := store.Open(ctx, opts)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = s.Close() })
			ids := make([]string, users)
			_, err = s.Write(ctx, func(tx *store.Tx) error {
				if err := tx.EnsureSettings(ctx, permissions.DefaultGlobal); err != nil {
					return err
				}
				for i := range ids {
					u, err := tx.InsertUser(ctx, newUser(fmt.Sprintf("seed%d", i)))
					if err != nil {
						return err
					}
					ids[i] = u.ID
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
			if prepare != nil {
				prepare(b, s, ids)
			}
			start := s.QueryCount()
			cpu := processCPU()
			b.ReportAllocs()
			b.ResetTimer()
			fn(b, s, ids)
			b.StopTimer()
			b.ReportMetric(float64(s.QueryCount()-start)/float64(b.N), "statements/op")
			if kind == testenv.SQLite { // PostgreSQL's work is in its own processes
				b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
			}
		})
	}
}

func newUser(name string) model.User {
	now := model.Now()
	return model.User{ID: uuid.Must(uuid.NewV7()).String(), Username: name, DisplayName: name, Status: model.StatusActive,
		CreatedAt: now, UpdatedAt: now}
}

// BenchmarkReadUser is GET /users/{id}'s store work in the database: a
// user and their roles, in one statement. BenchmarkReadUserCached is the
// same read answered by the cache, each in a request scope of its own (as
// requests come): the question to the change log and a hit.
func BenchmarkReadUser(b *testing.B)       { benchReadUser(b, false) }
func BenchmarkReadUserCached(b *testing.B) { benchReadUser(b, true) }

// BenchmarkReadUserCached32 is BenchmarkReadUserCached with 32 concurrent
// readers, as under load: on PostgreSQL they share the questions to the
// change log (questions/op, below 1).
func BenchmarkReadUserCached32(b *testing.B) {
	benchStoresPrepared(b, 1000, warmCache, func(b *testing.B, s *store.Store, ids []string) {
		before := s.CacheStats()
		var next atomic.Int64
		b.SetParallelism(32)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				ctx := s.ReadScope(context.Background())
				if _, err := s.User(ctx, ids[int(next.Add(1))%len(ids)]); err != nil {
					b.Error(err)
					return
				}
			}
		})
		after := s.CacheStats()
		b.ReportMetric(float64(after.Questions-before.Questions)/float64(b.N), "questions/op")
	})
}

func benchReadUser(b *testing.B, cache bool) {
	prepare := warmCache
	if !cache {
		prepare = nil
	}
	benchStoresPrepared(b, 1000, prepare, func(b *testing.B, s *store.Store, ids []string) {
		i := 0
		for b.Loop() {
			ctx := s.ReadScope(context.Background())
			var err error
			if cache {
				_, err = s.User(ctx, ids[i%len(ids)])
			} else {
				_, err = s.UserFromDatabaseForTest(ctx, ids[i%len(ids)])
			}
			if err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
}

// warmCache fills the cache with every user and the first page of users.
func warmCache(b *testing.B, s *store.Store, ids []string) {
	ctx := context.Background()
	for _, id := range ids {
		if _, err := s.User(ctx, id); err != nil {
			b.Fatal(err)
		}
	}
	if _, _, err := s.ListUsers(ctx, store.UserFilter{}, "", 50); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkListUsers50 is GET /users?limit=50's store work in the database;
// BenchmarkListUsers50Cached answered by the cache.
func BenchmarkListUsers50(b *testing.B)       { benchListUsers50(b, false) }
func BenchmarkListUsers50Cached(b *testing.B) { benchListUsers50(b, true) }

func benchListUsers50(b *testing.B, cache bool) {
	prepare := warmCache
	if !cache {
		prepare = nil
	}
	benchStoresPrepared(b, 1000, prepare, func(b *testing.B, s *store.Store, _ []string) {
		for b.Loop() {
			ctx := s.ReadScope(context.Background())
			var users []model.User
			var err error
			if cache {
				users, _, err = s.ListUsers(ctx, store.UserFilter{}, "", 50)
			} else {
				users, _, err = s.ListUsersFromDatabaseForTest(ctx, store.UserFilter{}, "", 50)
			}
			if err != nil || len(users) != 50 {
				b.Fatal(len(users), err)
			}
		}
	})
}

// createUser is the store work of POST /users inside its write: the unique
// check, the row and its audit event.
func createUser(ctx context.Context, tx *store.Tx, name string) error {
	u, err := tx.InsertUser(ctx, newUser(name))
	if err != nil {
		return err
	}
	err = tx.AppendEvent(ctx, model.Event{Type: "user.created", Subject: "user:" + u.ID,
		Data: map[string]any{"username": u.Username, "display_name": u.DisplayName}})
	return err
}

// BenchmarkCreateUserAlone is a create committed (and synced) on its own.
func BenchmarkCreateUserAlone(b *testing.B) {
	benchStores(b, 0, func(b *testing.B, s *store.Store, _ []string) {
		ctx := context.Background()
		i := 0
		for b.Loop() {
			i++
			if _, err := s.Write(ctx, func(tx *store.Tx) error { return createUser(ctx, tx, fmt.Sprintf("alone%d", i)) }); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkCreateUserBatch32 is 32 concurrent creates sharing transactions
// (group commit); per op is per create.
func BenchmarkCreateUserBatch32(b *testing.B) {
	benchStores(b, 0, func(b *testing.B, s *store.Store, _ []string) {
		ctx := context.Background()
		var n atomic.Int64
		work := make(chan struct{}, 64)
		var wg sync.WaitGroup
		for range 32 {
			wg.Go(func() {
				for range work {
					name := fmt.Sprintf("batch%d", n.Add(1))
					if _, err := s.Write(ctx, func(tx *store.Tx) error { return createUser(ctx, tx, name) }); err != nil {
						b.Error(err)
					}
				}
			})
		}
		before := s.WriterStats()
		for b.Loop() {
			work <- struct{}{}
		}
		close(work)
		wg.Wait()
		after := s.WriterStats()
		if tx := after.Transactions - before.Transactions; tx > 0 {
			b.ReportMetric(float64(after.Writes-before.Writes)/float64(tx), "writes/tx")
		}
	})
}

// processCPU is the CPU time (user and system) this process has used, in
// nanoseconds: with SQLite in process, the cost of a write whose wall time
// is mostly waiting for its sync.
func processCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// BenchmarkSearchUsersKept is the same page as BenchmarkSearchUsers where
// the read cache keeps every user (each read once before): the database
// reads the page's index entries alone, the cache gives the users
// (searchKept), past the cached pages.
func BenchmarkSearchUsersKept(b *testing.B) {
	for _, n := range []int{2000, 20000} {
		b.Run(fmt.Sprintf("users=%d", n), func(b *testing.B) {
			f := store.UserFilter{Prefix: "seed1"}
			benchStoresPrepared(b, n, func(b *testing.B, s *store.Store, ids []string) {
				for _, id := range ids {
					if _, err := s.User(s.ReadScope(context.Background()), id); err != nil {
						b.Fatal(err)
					}
				}
			}, func(b *testing.B, s *store.Store, _ []string) {
				for b.Loop() {
					users, err := s.SearchKeptForTest(s.ReadScope(context.Background()), f, "", 20)
					if err != nil || len(users) != 20 {
						b.Fatalf("%d users, %v", len(users), err)
					}
				}
			})
		})
	}
}

// BenchmarkSearchUsers is a prefix search's store work in the database (GET
// /users?limit=20&q=seed1, the first page and the 50th) among 2,000 and
// 20,000 users seed0, seed1, …, of whom 1,111 and 11,111 match: a page
// reads its own users from each key's index, not every match.
func BenchmarkSearchUsers(b *testing.B) {
	for _, n := range []int{2000, 20000} {
		b.Run(fmt.Sprintf("users=%d", n), func(b *testing.B) {
			for _, page := range []int{1, 50} {
				b.Run(fmt.Sprintf("page=%d", page), func(b *testing.B) {
					f := store.UserFilter{Prefix: "seed1"}
					var after string
					benchStoresPrepared(b, n, func(b *testing.B, s *store.Store, _ []string) {
						after = ""
						for range page - 1 {
							var err error
							if _, after, err = s.ListUsersFromDatabaseForTest(context.Background(), f, after, 20); err != nil || after == "" {
								b.Fatalf("position %q, %v", after, err)
							}
						}
					}, func(b *testing.B, s *store.Store, _ []string) {
						for b.Loop() {
							users, _, err := s.ListUsersFromDatabaseForTest(s.ReadScope(context.Background()), f, after, 20)
							if err != nil || len(users) != 20 {
								b.Fatalf("%d users, %v", len(users), err)
							}
						}
					})
				})
			}
		})
	}
}
