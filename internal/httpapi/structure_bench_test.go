package httpapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/guildhall/guildhall/internal/testenv"
)

// The structure operations at the scale an admin of a large community
// works at (their goals: docs/performance.md, "Admin work at scale"):
//
//	go test -run '^$' -bench 'Stack(BulkMembers|Preview|CategoryOverwrite)' -benchmem ./internal/httpapi

// BenchmarkStackBulkMembers1000 adds 1,000 users to a role, then removes
// them, by turns: each request changes 1,000 memberships and writes 1,000
// events in one transaction.
func BenchmarkStackBulkMembers1000(b *testing.B) {
	benchStackSeq(b, func(e *testenv.Env) func(int) (string, string, string) {
		e.NewRole("crowd")
		ids := make([]string, 1000)
		for i := range ids {
			res := e.Must(http.StatusCreated, testenv.Req{Method: "POST", Path: "/users", Token: e.Owner, Body: map[string]any{"username": fmt.Sprintf("m%04d", i)}})
			ids[i] = res.Map(b)["id"].(string)
		}
		list, _ := json.Marshal(ids)
		add, remove := `{"add":`+string(list)+`}`, `{"remove":`+string(list)+`}`
		return func(n int) (string, string, string) {
			if n%2 == 0 {
				return "POST", "/api/roles/crowd/members", add
			}
			return "POST", "/api/roles/crowd/members", remove
		}
	})
}

// BenchmarkStackPreview500Channels previews two roles over 500 channels
// (10 categories of 49, each with 11 overwrites), with explain off.
func BenchmarkStackPreview500Channels(b *testing.B) {
	benchStackSeq(b, func(e *testenv.Env) func(int) (string, string, string) {
		e.Must(http.StatusOK, testenv.Req{Method: "POST", Path: "/import", Token: e.Owner, Body: bigTemplate(10, 49, 20)})
		body := `{"roles":["r000","r007"]}`
		return func(int) (string, string, string) { return "POST", "/api/permissions/preview", body }
	})
}

// BenchmarkStackCategoryOverwrite50Synced changes a role overwrite of a
// category whose 50 channels are synced with it: each change is written to
// the category and its 50 channels in one transaction.
func BenchmarkStackCategoryOverwrite50Synced(b *testing.B) {
	benchStackSeq(b, func(e *testenv.Env) func(int) (string, string, string) {
		e.Must(http.StatusOK, testenv.Req{Method: "POST", Path: "/import", Token: e.Owner, Body: bigTemplate(1, 50, 3)})
		bodies := [2]string{
			`{"target_type":"role","target_id":"r001","allow":["SEND_MESSAGES"],"deny":[]}`,
			`{"target_type":"role","target_id":"r001","allow":["EMBED_LINKS"],"deny":[]}`,
		}
		return func(n int) (string, string, string) { return "POST", "/api/channels/cat0/permissions", bodies[n%2] }
	})
}

// bigTemplate is a template document with roles, categories each holding
// perCategory channels, and on every channel (synced with its category)
// an everyone overwrite and one for up to 10 of the roles.
func bigTemplate(categories, perCategory, roles int) map[string]any {
	rs := make([]map[string]any, roles)
	for i := range rs { // r000 highest
		rs[i] = map[string]any{"id": fmt.Sprintf("r%03d", i), "name": "r", "position": roles - i, "color": nil, "permissions": []string{"VIEW_CHANNEL"}}
	}
	overwrites := []map[string]any{{"target_type": "everyone", "allow": []string{}, "deny": []string{"SEND_MESSAGES"}}}
	for i := 0; i < roles && i < 10*7; i += 7 {
		overwrites = append(overwrites, map[string]any{"target_type": "role", "target_id": fmt.Sprintf("r%03d", i),
			"allow": []string{"SEND_MESSAGES"}, "deny": []string{}})
	}
	var channels []map[string]any
	for c := range categories {
		cat := fmt.Sprintf("cat%d", c)
		channels = append(channels, map[string]any{"id": cat, "kind": "category", "name": cat, "parent_id": nil, "position": c, "topic": nil, "overwrites": overwrites})
		for i := range perCategory {
			channels = append(channels, map[string]any{"id": fmt.Sprintf("%s-%02d", cat, i), "kind": "text", "name": "c", "parent_id": cat,
				"position": i, "topic": nil, "overwrites": overwrites})
		}
	}
	return map[string]any{"format": "guildhall-template/1", "global_permissions": []string{}, "roles": rs, "channels": channels}
}
