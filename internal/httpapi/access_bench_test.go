package httpapi_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"testing"

	"github.com/google/uuid"

	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/store"
	"github.com/guildhall/guildhall/internal/testenv"
)

// BenchmarkStackChannelAccess10k is who has access at the scale the goal
// names (docs/performance.md): 10,000 members and 250 roles, the first
// page of 50 of a channel everyone can view (open), of one only a role
// held by 1% of the members can view (role), and of one 5 user overwrites
// open (users). Goal: ≤ 50 ms each.
//
//	go test -run '^$' -bench StackChannelAccess -benchtime 50x ./internal/httpapi
func BenchmarkStackChannelAccess10k(b *testing.B) {
	for _, ch := range []string{"open", "role", "users"} {
		b.Run(ch, func(b *testing.B) {
			benchStackSeq(b, func(e *testenv.Env) func(int) (string, string, string) {
				accessBenchCommunity(b, e, 10_000)
				return func(int) (string, string, string) { return "GET", "/api/channels/" + ch + "/access?limit=50", "" }
			})
		})
	}
}

// accessBenchCommunity seeds n members straight into the store (the API
// would take minutes), 249 roles through it and the access role held by
// every hundredth member, and the channels open, role and users.
func accessBenchCommunity(b *testing.B, e *testenv.Env, n int) {
	ctx := context.Background()
	var ids []string
	for len(ids) < n {
		_, err := e.App.Store.Write(ctx, func(tx *store.Tx) error {
			for range min(5000, n-len(ids)) {
				now := model.Now()
				name := fmt.Sprintf("member%06d", len(ids))
				u := model.User{ID: uuid.Must(uuid.NewV7()).String(), Username: name, DisplayName: name,
					Status: model.StatusActive, CreatedAt: now, UpdatedAt: now}
				if _, err := tx.InsertUser(ctx, u); err != nil {
					return err
				}
				ids = append(ids, u.ID)
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	_, err := e.App.Store.Write(ctx, func(tx *store.Tx) error {
		roles := make([]model.Role, 249)
		for i := range roles {
			now := model.Now()
			roles[i] = model.Role{ID: fmt.Sprintf("r%03d", i), Name: "r", Version: 1, CreatedAt: now, UpdatedAt: now}
		}
		return tx.InsertRolesOnTop(ctx, roles)
	})
	if err != nil {
		b.Fatal(err)
	}
	e.NewRole("access")
	var holders []string
	for i := 0; i < len(ids); i += 100 {
		holders = append(holders, ids[i])
	}
	e.Must(http.StatusOK, testenv.Req{Method: "POST", Path: "/roles/access/members", Token: e.Owner, Body: map[string]any{"add": holders}})
	for _, ch := range []string{"open", "role", "users"} {
		e.NewChannel(ch)
	}
	e.SetOverwrite("role", "everyone", "", nil, []string{"VIEW_CHANNEL"})
	e.SetOverwrite("role", "role", "access", []string{"VIEW_CHANNEL"}, nil)
	e.SetOverwrite("users", "everyone", "", nil, []string{"VIEW_CHANNEL"})
	for _, id := range ids[n/2 : n/2+5] {
		e.SetOverwrite("users", "user", id, []string{"VIEW_CHANNEL"}, nil)
	}
	if e.Kind == testenv.Postgres { // as a database seeded in bulk is settled before it is measured
		db, err := sql.Open("pgx", e.Config.DatabaseURL)
		if err != nil {
			b.Fatal(err)
		}
		defer db.Close()
		if _, err := db.Exec("ANALYZE"); err != nil {
			b.Fatal(err)
		}
	}
}
