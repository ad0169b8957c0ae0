package store

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"

	"github.com/google/uuid"

	"github.com/guildhall/guildhall/internal/model"
)

// liveHeap is the heap in use after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestCacheRealSize: a cache filled far past its bound, with search pages
// (GET /api/users?q=, what a client can send as many of as it likes), with
// users, with users and their credentials, with pages and users, and with both between writes that drop every page,
// holds no more heap than its bound: the heap in use
// after a collection, with the cache full and then emptied, differs by at
// most the bound. Not parallel: the heap is the process's.
func TestCacheRealSize(t *testing.T) {
	if testing.Short() {
		t.Skip("fills a cache many times over")
	}
	const bound = 4 << 20
	ctx := context.Background()
	s, err := Open(ctx, Options{DataDir: t.TempDir(), CacheBytes: bound})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var ids []string
	if _, err := s.Write(ctx, func(tx *Tx) error {
		for i := range 8000 {
			now := model.Now()
			u := model.User{ID: uuid.Must(uuid.NewV7()).String(), Username: fmt.Sprintf("seed%05d", i),
				DisplayName: fmt.Sprintf("Member %d", i), Status: model.StatusActive, CreatedAt: now, UpdatedAt: now}
			if i%2 == 0 {
				e := fmt.Sprintf("seed%05d@example.com", i)
				u.Email = &e
			}
			if _, err := tx.InsertUser(ctx, u); err != nil {
				return err
			}
			if err := tx.InsertToken(ctx, model.Token{ID: uuid.Must(uuid.NewV7()).String(), UserID: u.ID, Name: "t",
				CreatedAt: now}, fmt.Sprintf("hash%05d", i)); err != nil {
				return err
			}
			ids = append(ids, u.ID)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	search := func() error {
		// A prefix of 1 to 5 digits after "seed": pages of 20 full, short
		// and empty; half of them past a position, half matching emails.
		q := "seed" + fmt.Sprintf("%05d", rng.IntN(100000))[:1+rng.IntN(5)]
		after := ""
		if rng.IntN(2) == 0 {
			after = q + "\x00" + ids[rng.IntN(len(ids))] // the position of a user matching q
		}
		_, _, err := s.ListUsers(s.ReadScope(ctx), UserFilter{Prefix: q, MatchEmail: rng.IntN(2) == 0}, after, 20)
		return err
	}
	n := 0
	write := func() error {
		// A user created: every page is dropped, one entry at a time.
		now := model.Now()
		n++
		_, err := s.Write(ctx, func(tx *Tx) error {
			_, err := tx.InsertUser(ctx, model.User{ID: uuid.Must(uuid.NewV7()).String(), Username: fmt.Sprintf("new%05d", n),
				DisplayName: "New", Status: model.StatusActive, CreatedAt: now, UpdatedAt: now})
			return err
		})
		return err
	}
	user := func() error {
		_, err := s.User(s.ReadScope(ctx), ids[rng.IntN(len(ids))])
		return err
	}
	// A user and their credentials: two entries depending on one key.
	userAndCredentials := func() error {
		i := rng.IntN(len(ids))
		if _, err := s.User(s.ReadScope(ctx), ids[i]); err != nil {
			return err
		}
		_, err := s.Credentials(s.ReadScope(ctx), fmt.Sprintf("hash%05d", i))
		return err
	}
	for _, tc := range []struct {
		name  string
		reads []func() error
	}{
		{"search pages", []func() error{search}},
		{"users", []func() error{user}},
		{"users and their credentials", []func() error{userAndCredentials}},
		{"both", []func() error{search, user}},
		{"searches between writes", append(slices.Repeat([]func() error{search, user}, 150), write)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s.cache.Clear()
			empty := liveHeap()
			for i := range 60000 {
				if err := tc.reads[i%len(tc.reads)](); err != nil {
					t.Fatal(err)
				}
			}
			full := liveHeap()
			st := s.CacheStats()
			real := int64(full) - int64(empty)
			t.Logf("%d entries: heap %d bytes (%.0f an entry), estimate %d (%.0f an entry), bound %d",
				st.Entries, real, float64(real)/float64(st.Entries), st.Bytes, float64(st.Bytes)/float64(st.Entries), bound)
			if st.Bytes > bound {
				t.Errorf("the estimate, %d bytes, is over the bound of %d", st.Bytes, bound)
			}
			if real > bound {
				t.Errorf("the cache holds %d bytes of heap, over its bound of %d (its estimate: %d)", real, bound, st.Bytes)
			}
			if st.Entries < 1000 {
				t.Errorf("only %d entries kept", st.Entries)
			}
		})
	}
}
