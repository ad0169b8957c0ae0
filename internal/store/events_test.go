package store_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/store"
	"github.com/guildhall/guildhall/internal/testenv"
)

// TestEventsReadABoundedPage: a page of the audit log reads at most 1,000
// events, whatever its filters pass. Among 2,500 events, of which the
// first and the last alone are role events by "boss", a filter that only
// checks each event read (a type prefix, a time range) walks the log in
// pages that end short, or empty, with a cursor, one statement each; a
// filter an index serves (the actor) reads only its own events. Every walk
// lists exactly the events the filter passes, newest first.
func TestEventsReadABoundedPage(t *testing.T) {
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		ctx := context.Background()
		s := openStore(t, kind)
		const n = 2500
		var written []model.Event
		boss := "boss"
		if _, err := s.Write(ctx, func(tx *store.Tx) error {
			for i := range n {
				ev := model.Event{Type: "user.created", Subject: fmt.Sprintf("user:u%d", i)}
				if i == 0 || i == n-1 {
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
		all, _, err := s.ListEvents(ctx, store.EventFilter{}, 200)
		if err != nil || len(all) != 200 {
			t.Fatalf("%d events, %v", len(all), err)
		}
		written = all
		future := time.Now().Add(time.Hour)
		for _, tc := range []struct {
			name  string
			f     store.EventFilter
			want  []string // subjects, newest first
			pages int
		}{
			{"a type prefix: three pages of 1,000 reads", store.EventFilter{TypePrefix: "role."}, []string{"role:r2499", "role:r0"}, 3},
			{"an actor's own events: one page", store.EventFilter{ActorID: boss, TypePrefix: "role."}, []string{"role:r2499", "role:r0"}, 1},
			{"an exact type: one page", store.EventFilter{Type: "role.created"}, []string{"role:r2499", "role:r0"}, 1},
			{"a subject and a prefix it fails", store.EventFilter{Subject: "role:r0", TypePrefix: "user."}, nil, 1},
			{"a time range nobody is in", store.EventFilter{Since: &future}, nil, 3},
		} {
			t.Run(tc.name, func(t *testing.T) {
				var got []string
				f, pages := tc.f, 0
				for {
					before := s.QueryCount()
					evs, next, err := s.ListEvents(ctx, f, 50)
					if err != nil {
						t.Fatal(err)
					}
					if st := s.QueryCount() - before; st != 1 {
						t.Errorf("page %d took %d statements, want 1", pages+1, st)
					}
					pages++
					for _, ev := range evs {
						got = append(got, ev.Subject)
					}
					if next == 0 {
						break
					}
					if pages > 10 {
						t.Fatal("the pages never end")
					}
					f.BeforeSeq = next
				}
				if !slices.Equal(got, tc.want) || pages != tc.pages {
					t.Errorf("%v in %d pages, want %v in %d", got, pages, tc.want, tc.pages)
				}
			})
		}
		// A filter most events pass fills its pages: 50 a page, in order.
		page, next, err := s.ListEvents(ctx, store.EventFilter{TypePrefix: "user."}, 50)
		if err != nil || len(page) != 50 || next != page[49].Seq || !strings.HasPrefix(page[0].Subject, "user:u2498") ||
			page[0].Seq != written[1].Seq {
			t.Errorf("user.*: %d events, next %d, first %+v; %v", len(page), next, page[0], err)
		}
	})
}
