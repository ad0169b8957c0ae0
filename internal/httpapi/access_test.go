package httpapi_test

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/guildhall/guildhall/gen/api"
	"github.com/guildhall/guildhall/internal/testenv"
)

// accessWalk walks GET /channels/{id}/access (query: permission, if any)
// a page of limit at a time, and returns the users and the cursors given.
func accessWalk(t *testing.T, e *testenv.Env, token, channelID, query string, limit int) ([]api.User, []string) {
	t.Helper()
	var users []api.User
	var cursors []string
	cursor := ""
	for page := 0; ; page++ {
		if page > 500 {
			t.Fatalf("the walk of %s's access list does not end", channelID)
		}
		q := url.Values{"limit": {fmt.Sprint(limit)}}
		if query != "" {
			q.Set("permission", query)
		}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		var list api.UserList
		e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/channels/" + channelID + "/access?" + q.Encode(), Token: token}).JSON(t, &list)
		if len(list.Items) > limit {
			t.Fatalf("a page of %d users, limit %d", len(list.Items), limit)
		}
		users = append(users, list.Items...)
		if list.NextCursor.IsNull() {
			return users, cursors
		}
		cursor = list.NextCursor.MustGet()
		cursors = append(cursors, cursor)
	}
}

// accessHasEmail says whether an answer shows a user's email (null when
// they have none); a hidden one is absent.
func accessHasEmail(u api.User) bool { return u.Email.IsSpecified() }

func accessIDs(users []api.User) []string {
	out := make([]string, len(users))
	for i, u := range users {
		out[i] = u.Id
	}
	return out
}

// accessOrdered checks the order of an access list: lower-cased usernames,
// each once.
func accessOrdered(t *testing.T, users []api.User) {
	t.Helper()
	for i := 1; i < len(users); i++ {
		if a, b := strings.ToLower(users[i-1].Username), strings.ToLower(users[i].Username); a >= b {
			t.Fatalf("%q listed before %q", users[i-1].Username, users[i].Username)
		}
	}
}

func accessStatus(t *testing.T, e *testenv.Env, token, path string, status int) api.Problem {
	t.Helper()
	res := e.Do(testenv.Req{Method: "GET", Path: path, Token: token})
	if res.Status != status {
		t.Fatalf("GET %s: status %d, want %d: %s", path, res.Status, status, res.Body)
	}
	if status >= 400 {
		return res.Problem(t)
	}
	return api.Problem{}
}

func accessLocation(t *testing.T, p api.Problem, want string) {
	t.Helper()
	if p.Errors == nil || len(*p.Errors) == 0 || (*p.Errors)[0].Location != want {
		t.Fatalf("errors %+v, want one at %s", p.Errors, want)
	}
}

// The rules of GET /channels/{channelID}/access: its default permission,
// the 400 of a permission that is not channel-scoped, the 403 without
// MANAGE_ROLES or VIEW_AUDIT_LOG, the 404 of a channel unknown or hidden,
// pages in the order of lower-cased usernames with stable cursors, and
// emails shown only as user answers show them.
func TestChannelAccessRules(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		e.NewRole("auditors", "VIEW_AUDIT_LOG")
		e.NewRole("managers", "MANAGE_ROLES")
		e.NewRole("hr", "MANAGE_USERS")
		e.NewRole("staff")
		auditor := e.NewUser("Auditor")
		e.Assign(auditor.ID, "auditors")
		manager := e.NewUser("manager")
		e.Assign(manager.ID, "managers")
		hr := e.NewUser("hr-auditor")
		e.Assign(hr.ID, "auditors")
		e.Assign(hr.ID, "hr")
		plain := e.NewUser("plain")
		var members []testenv.User
		for _, name := range []string{"Zed", "bob", "Carol", "alice", "dave", "Erin", "frank"} {
			u := e.NewUser(name)
			members = append(members, u)
			e.Must(http.StatusOK, testenv.Req{Method: "PUT", Path: "/users/" + u.ID, Token: e.Owner,
				Body: map[string]any{"username": name, "display_name": name, "email": strings.ToLower(name) + "@example.com", "status": "active"}})
		}
		e.NewChannel("lobby")
		e.NewChannel("secret")
		e.SetOverwrite("secret", "everyone", "", nil, []string{"VIEW_CHANNEL"})
		e.NewRole("ops")
		e.SetOverwrite("secret", "role", "ops", []string{"VIEW_CHANNEL"}, nil)
		e.Assign(members[1].ID, "ops")                                                 // bob
		e.Assign(members[3].ID, "ops")                                                 // alice
		e.SetOverwrite("secret", "user", members[5].ID, []string{"VIEW_CHANNEL"}, nil) // Erin

		// The default permission is VIEW_CHANNEL; everyone views lobby.
		all, _ := accessWalk(t, e, auditor.Token, "lobby", "", 200)
		byName, _ := accessWalk(t, e, auditor.Token, "lobby", "VIEW_CHANNEL", 200)
		if !slices.Equal(accessIDs(all), accessIDs(byName)) {
			t.Fatalf("without permission %v, with VIEW_CHANNEL %v", accessIDs(all), accessIDs(byName))
		}
		if len(all) != 12 { // the owner, 4 callers, 7 members
			t.Fatalf("lobby lists %d users, want 12", len(all))
		}
		accessOrdered(t, all)

		// secret: the owner, the ops role's holders, Erin by her own overwrite.
		secret, _ := accessWalk(t, e, manager.Token, "secret", "", 200)
		var names []string
		for _, u := range secret {
			names = append(names, u.Username)
		}
		if want := []string{"alice", "bob", "Erin", "owner"}; !slices.Equal(names, want) {
			t.Fatalf("secret lists %v, want %v", names, want)
		}

		// A permission that is not channel-scoped, or unknown: 400 at
		// query.permission.
		for _, p := range []string{"ADMINISTRATOR", "VIEW_AUDIT_LOG", "MANAGE_USERS", "MODERATE_MEMBERS", "FLY", "view_channel"} {
			accessLocation(t, accessStatus(t, e, auditor.Token, "/channels/lobby/access?permission="+p, http.StatusBadRequest), "query.permission")
		}
		// Bad limits and cursors: 400.
		accessLocation(t, accessStatus(t, e, auditor.Token, "/channels/lobby/access?limit=0", http.StatusBadRequest), "query.limit")
		accessLocation(t, accessStatus(t, e, auditor.Token, "/channels/lobby/access?cursor=AAAA", http.StatusBadRequest), "query.cursor")

		// Neither MANAGE_ROLES nor VIEW_AUDIT_LOG: 403 naming both.
		p := accessStatus(t, e, plain.Token, "/channels/lobby/access", http.StatusForbidden)
		if p.Reason == nil || *p.Reason != "missing_permissions" || p.MissingPermissions == nil ||
			fmt.Sprint(*p.MissingPermissions) != "[MANAGE_ROLES VIEW_AUDIT_LOG]" {
			t.Fatalf("403 %+v, want missing_permissions [MANAGE_ROLES VIEW_AUDIT_LOG]", p)
		}
		// Unknown, or hidden from the caller: 404, the same answer; a
		// holder of MANAGE_ROLES knows every channel.
		missing := accessStatus(t, e, auditor.Token, "/channels/nowhere/access", http.StatusNotFound)
		hidden := accessStatus(t, e, auditor.Token, "/channels/secret/access", http.StatusNotFound)
		if missing.Detail == nil || hidden.Detail == nil ||
			strings.ReplaceAll(*missing.Detail, "nowhere", "secret") != *hidden.Detail {
			t.Fatalf("a hidden channel's 404 %v differs from a missing one's %v", hidden.Detail, missing.Detail)
		}
		accessStatus(t, e, plain.Token, "/channels/secret/access", http.StatusNotFound)
		accessStatus(t, e, plain.Token, "/channels/nowhere/access", http.StatusNotFound)
		accessStatus(t, e, manager.Token, "/channels/secret/access?permission=SEND_MESSAGES", http.StatusOK)
		e.NewRole("channel-admins", "MANAGE_CHANNELS") // knows every channel too
		e.Assign(auditor.ID, "channel-admins")
		accessStatus(t, e, auditor.Token, "/channels/secret/access", http.StatusOK)
		e.Must(http.StatusNoContent, testenv.Req{Method: "DELETE", Path: "/users/" + auditor.ID + "/roles/channel-admins", Token: e.Owner})

		// Pages of 2 list what one page lists, with the same cursors on
		// every walk; a cursor serves only its channel and permission.
		paged, cursors := accessWalk(t, e, auditor.Token, "lobby", "", 2)
		if !slices.Equal(accessIDs(paged), accessIDs(all)) {
			t.Fatalf("pages of 2 list %v, one page %v", accessIDs(paged), accessIDs(all))
		}
		_, again := accessWalk(t, e, auditor.Token, "lobby", "", 2)
		if !slices.Equal(cursors, again) {
			t.Fatalf("a second walk gave other cursors")
		}
		accessLocation(t, accessStatus(t, e, auditor.Token, "/channels/lobby/access?permission=SEND_MESSAGES&cursor="+cursors[0],
			http.StatusBadRequest), "query.cursor")
		accessLocation(t, accessStatus(t, e, manager.Token, "/channels/secret/access?cursor="+cursors[0],
			http.StatusBadRequest), "query.cursor")

		// Emails: the caller's own, or all for MANAGE_USERS.
		for _, u := range all {
			if accessHasEmail(u) != (u.Id == auditor.ID) {
				t.Fatalf("the auditor sees %s's email: %v", u.Username, u.Email)
			}
		}
		withEmails, _ := accessWalk(t, e, hr.Token, "lobby", "", 200)
		for _, u := range withEmails {
			if slices.ContainsFunc(members, func(m testenv.User) bool { return m.ID == u.Id }) && !accessHasEmail(u) {
				t.Fatalf("a holder of MANAGE_USERS does not see %s's email", u.Username)
			}
		}

		// HEAD answers as GET does.
		for path, status := range map[string]int{"/channels/lobby/access": 200, "/channels/secret/access": 404,
			"/channels/lobby/access?permission=ADMINISTRATOR": 400} {
			if res := e.Do(testenv.Req{Method: "HEAD", Path: path, Token: auditor.Token}); res.Status != status {
				t.Fatalf("HEAD %s: %d, want %d", path, res.Status, status)
			}
		}
	})
}

// accessPermissionsAsked are the permissions the differential test asks
// about: one of each kind step 6 and the timeout treat differently.
var accessPermissionsAsked = []string{"VIEW_CHANNEL", "SEND_MESSAGES", "READ_MESSAGE_HISTORY", "ATTACH_FILES", "MANAGE_MESSAGES", "MANAGE_ROLES"}

// The access list equals asking each user's effective permissions one by
// one, in random communities: global permissions, roles (ADMINISTRATOR
// among them), everyone, role and user overwrites, a category whose
// channels are synced with it (and one no longer), timeouts, suspended
// users, the owner.
func TestChannelAccessMatchesOneByOne(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		for seed := range uint64(2) {
			t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
				e := testenv.Start(t, kind)
				rng := rand.New(rand.NewPCG(seed, 36))
				channels := accessRandomCommunity(t, e, rng)
				users := accessAllUsers(t, e)
				for _, ch := range channels {
					for _, p := range accessPermissionsAsked {
						var want []string
						for _, u := range users {
							var got api.UserPermissions
							e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/users/" + u.Id + "/permissions?channelID=" + ch,
								Token: e.Owner}).JSON(t, &got)
							if slices.Contains(got.Permissions, api.PermissionName(p)) {
								want = append(want, u.Id)
							}
						}
						listed, _ := accessWalk(t, e, e.Owner, ch, p, 1+rng.IntN(4))
						accessOrdered(t, listed)
						got := accessIDs(listed)
						slices.Sort(got)
						slices.Sort(want)
						if !slices.Equal(got, want) {
							t.Errorf("%s in %s: the access list has %v, one by one %v", p, ch, got, want)
						}
					}
				}
			})
		}
	})
}

// accessAllUsers lists every user.
func accessAllUsers(t *testing.T, e *testenv.Env) []api.User {
	t.Helper()
	var list api.UserList
	e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/users?limit=200", Token: e.Owner}).JSON(t, &list)
	if !list.NextCursor.IsNull() {
		t.Fatal("more than 200 users")
	}
	return list.Items
}

// accessRandomCommunity makes a random community and returns its channels.
func accessRandomCommunity(t *testing.T, e *testenv.Env, rng *rand.Rand) []string {
	t.Helper()
	channelScoped := []string{"MANAGE_ROLES", "MANAGE_CHANNELS", "VIEW_CHANNEL", "SEND_MESSAGES", "READ_MESSAGE_HISTORY",
		"ATTACH_FILES", "MANAGE_MESSAGES", "EMBED_LINKS", "MENTION_EVERYONE", "ADD_REACTIONS"}
	some := func(list []string, p float64) []string {
		out := []string{}
		for _, n := range list {
			if rng.Float64() < p {
				out = append(out, n)
			}
		}
		return out
	}
	split := func() ([]string, []string) { // disjoint allow and deny
		var allow, deny []string
		for _, n := range channelScoped {
			switch r := rng.Float64(); {
			case r < 0.15:
				allow = append(allow, n)
			case r < 0.3:
				deny = append(deny, n)
			}
		}
		return allow, deny
	}
	e.Must(http.StatusOK, testenv.Req{Method: "PUT", Path: "/permissions/global", Token: e.Owner,
		Body: map[string]any{"permissions": some(channelScoped, 0.6)}})
	var roles []string
	for i := range 8 {
		id := fmt.Sprintf("role-%d", i)
		perms := some(channelScoped, 0.25)
		if i == 0 {
			perms = []string{"ADMINISTRATOR"}
		}
		e.NewRole(id, perms...)
		roles = append(roles, id)
	}
	var users []testenv.User
	for i := range 18 {
		name := fmt.Sprintf("m%02d", i)
		if i%3 == 0 {
			name = fmt.Sprintf("M%02d", i) // capitals sort as their lower case
		}
		u := e.NewUser(name)
		users = append(users, u)
		// Timeouts before roles: an administrator cannot be timed out,
		// but one given the role later is.
		if rng.IntN(4) == 0 {
			until := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
			e.Must(http.StatusOK, testenv.Req{Method: "PATCH", Path: "/users/" + u.ID, Token: e.Owner,
				Type: "application/merge-patch+json", Body: `{"timeout_until": "` + until + `"}`})
		}
		for j, r := range roles {
			if (j == 0 && rng.IntN(8) == 0) || (j > 0 && rng.IntN(4) == 0) {
				e.Assign(u.ID, r)
			}
		}
		if rng.IntN(8) == 0 { // a suspended user holds what they held
			e.Must(http.StatusOK, testenv.Req{Method: "PUT", Path: "/users/" + u.ID, Token: e.Owner,
				Body: map[string]any{"username": name, "display_name": name, "status": "suspended"}})
		}
	}
	overwrite := func(ch string) {
		allow, deny := split()
		e.SetOverwrite(ch, "everyone", "", allow, deny)
		for _, r := range roles[1:] {
			if rng.IntN(3) == 0 {
				allow, deny := split()
				if len(allow)+len(deny) > 0 {
					e.SetOverwrite(ch, "role", r, allow, deny)
				}
			}
		}
		for _, u := range users {
			if rng.IntN(6) == 0 {
				allow, deny := split()
				if len(allow)+len(deny) > 0 {
					e.SetOverwrite(ch, "user", u.ID, allow, deny)
				}
			}
		}
	}
	e.Must(http.StatusCreated, testenv.Req{Method: "POST", Path: "/channels/cat/create", Token: e.Owner,
		Body: map[string]any{"name": "cat", "kind": "category"}})
	overwrite("cat")
	channels := []string{"cat"}
	for _, id := range []string{"in-a", "in-b"} {
		e.Must(http.StatusCreated, testenv.Req{Method: "POST", Path: "/channels/" + id + "/create", Token: e.Owner,
			Body: map[string]any{"name": id, "parent_id": "cat"}})
		channels = append(channels, id)
	}
	// A change on the category reaches its synced channels; one on a
	// channel unsyncs it.
	e.SetOverwrite("cat", "role", roles[1+rng.IntN(len(roles)-1)], []string{"VIEW_CHANNEL", "SEND_MESSAGES"}, nil)
	e.SetOverwrite("in-b", "user", users[rng.IntN(len(users))].ID, nil, []string{"VIEW_CHANNEL"})
	for _, id := range []string{"open", "closed", "mixed"} {
		e.NewChannel(id)
		channels = append(channels, id)
	}
	overwrite("mixed")
	// closed: no one but one role and a few users.
	e.SetOverwrite("closed", "everyone", "", nil, []string{"VIEW_CHANNEL"})
	e.SetOverwrite("closed", "role", roles[1+rng.IntN(len(roles)-1)], []string{"VIEW_CHANNEL", "SEND_MESSAGES", "ATTACH_FILES"}, nil)
	for range 2 {
		e.SetOverwrite("closed", "user", users[rng.IntN(len(users))].ID, []string{"VIEW_CHANNEL", "MANAGE_MESSAGES"}, nil)
	}
	return channels
}
