package httpapi

import (
	"encoding/json"
	"io"
	"testing"

	"github.com/guildhall/guildhall/gen/api"
	"github.com/guildhall/guildhall/internal/model"
)

// BenchmarkEncodeUserPage is what a page of 50 users costs to convert and
// encode as the generated strict response does (json.Encoder), with every
// email null and with every email set: the part of GET /users a bare Echo
// server pays too, but for the field types.
func BenchmarkEncodeUserPage(b *testing.B) {
	for _, tc := range []struct {
		name  string
		email *string
	}{{"null emails", nil}, {"emails", new("alice.liddell@example.com")}} {
		users := make([]model.User, 50)
		for i := range users {
			now := model.Now()
			users[i] = model.User{ID: "01936f4e-8d2a-7c3b-9a4e-5f6a7b8c9d0e", Username: "alice", DisplayName: "Alice Liddell",
				Email: tc.email, Status: model.StatusActive, Roles: []string{}, CreatedAt: now, UpdatedAt: now}
		}
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				page := api.UserList{Items: make([]api.User, len(users))}
				for i, u := range users {
					page.Items[i] = toUser(u)
				}
				if err := json.NewEncoder(io.Discard).Encode(page); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
