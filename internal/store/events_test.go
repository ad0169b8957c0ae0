package store_test

import (
	"context"
	"fmt"
	"math/bits"
	"slices"
	"testing"
	"time"

	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/store"
	"github.com/guildhall/guildhall/internal/testenv"
)

// TestEventsReadABoundedPage: a page of the audit log checks at most
// 1,000 events against the filters its index does not serve. Among 2,500
// events, of which four alone are role events by "boss" (the oldest, the
// 1,000th and 1,001st newest, where a page's bound falls, and the newest),
// a filter checked on each event (a type prefix, a time range) walks the
// log in pages that end short, or empty, with a cursor, in few statements
// each (rounds of limit+1 events, doubling while the page is unfinished:
// at most 2 + log2(1,000/(limit+1))); a filter an index serves (the
// actor) reads only its own events. Every walk, at every page size, lists
// exactly the events the filter passes, newest first, once each.
func TestEventsReadABoundedPage(t *testing.T) {
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		ctx := context.Background()
		s := openStore(t, kind)
		const n = 2500
		boss := "boss"
		special := map[int]bool{0: true, n - 1000: true, n - 1001: true, n - 1: true}
		if _, err := s.Write(ctx, func(tx *store.Tx) error {
			for i := range n {
				ev := model.Event{Type: "user.created", Subject: fmt.Sprintf("user:u%d", i)}
				if special[i] {
					ev = model.Event{Type: "role.created", Subject: fmt.Sprintf("role:r%d", i), ActorID: &boss}
				}
				if err := tx.AppendEvent(ctx, ev); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		roles := []string{"role:r2499", "role:r1500", "role:r1499", "role:r0"}
		future := time.Now().Add(time.Hour)
		for _, tc := range []struct {
			name  string
			f     store.EventFilter
			want  []string // subjects, newest first
			pages int      // at 50 a page
		}{
			{"a type prefix: three pages of 1,000 checked", store.EventFilter{TypePrefix: "role."}, roles, 3},
			{"an actor's own events: one page", store.EventFilter{ActorID: boss, TypePrefix: "role."}, roles, 1},
			{"an exact type: one page", store.EventFilter{Type: "role.created"}, roles, 1},
			{"a subject and a prefix it fails", store.EventFilter{Subject: "role:r0", TypePrefix: "user."}, nil, 1},
			{"a subject and an actor it has not (NULL)", store.EventFilter{Subject: "user:u5", ActorID: boss}, nil, 1},
			{"a time range nobody is in", store.EventFilter{Since: &future}, nil, 3},
		} {
			t.Run(tc.name, func(t *testing.T) {
				for _, limit := range []int{1, 50, 200} {
					var got []string
					f, pages := tc.f, 0
					for {
						before := s.QueryCount()
						evs, next, err := s.ListEvents(ctx, f, limit)
						if err != nil {
							t.Fatal(err)
						}
						if st, most := s.QueryCount()-before, int64(2+bits.Len(uint(1000/(limit+1)))); st > most {
							t.Errorf("%d a page: page %d took %d statements, want at most %d", limit, pages+1, st, most)
						}
						pages++
						for _, ev := range evs {
							got = append(got, ev.Subject)
						}
						if next == 0 {
							break
						}
						if pages > 20 {
							t.Fatalf("%d a page: the pages never end", limit)
						}
						f.BeforeSeq = next
					}
					if !slices.Equal(got, tc.want) || limit == 50 && pages != tc.pages {
						t.Errorf("%d a page: %v in %d pages, want %v (in %d at 50 a page)", limit, got, pages, tc.want, tc.pages)
					}
				}
			})
		}
		// No filter fills a page in one statement, one most events pass in
		// two (the newest event fails it): 50 events, newest first.
		for _, tc := range []struct {
			f          store.EventFilter
			first      string
			statements int64
		}{{store.EventFilter{}, "role:r2499", 1}, {store.EventFilter{TypePrefix: "user."}, "user:u2498", 2}} {
			before := s.QueryCount()
			page, next, err := s.ListEvents(ctx, tc.f, 50)
			if err != nil || len(page) != 50 || next != page[49].Seq || page[0].Subject != tc.first {
				t.Errorf("%+v: %d events, next %d; %v", tc.f, len(page), next, err)
			}
			if st := s.QueryCount() - before; st > tc.statements {
				t.Errorf("%+v: %d statements, want at most %d", tc.f, st, tc.statements)
			}
		}
	})
}
