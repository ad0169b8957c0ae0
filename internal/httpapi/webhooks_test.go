package httpapi_test

import (
	"database/sql"
	"encoding/base64"
	"fmt"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/guildhall/guildhall/gen/api"
	"github.com/guildhall/guildhall/internal/config"
	"github.com/guildhall/guildhall/internal/testenv"
)

// whPublicURL is a destination webhooks may reach without resolving a
// name (192.0.2.0/24 is reserved for documentation, not private): the
// tests run without DNS.
const whPublicURL = "https://192.0.2.10/hook"

var whSecret = regexp.MustCompile(`^whsec_[A-Za-z0-9+/]{43}=$`)

// whEnv is an instance with a webhook manager (MANAGE_WEBHOOKS and
// VIEW_AUDIT_LOG through a role) and a user without either.
func whEnv(t *testing.T, kind string, opts ...testenv.Option) (*testenv.Env, testenv.User, testenv.User) {
	t.Helper()
	e := testenv.Start(t, kind, opts...)
	e.NewRole("hooks", "VIEW_AUDIT_LOG", "MANAGE_WEBHOOKS")
	manager := e.NewUser("manager")
	e.Assign(manager.ID, "hooks")
	return e, manager, e.NewUser("plain")
}

func whCreate(t *testing.T, e *testenv.Env, token string, body map[string]any) api.WebhookWithSecret {
	t.Helper()
	res := e.Must(http.StatusCreated, testenv.Req{Method: "POST", Path: "/webhooks", Token: token, Body: body})
	var w api.WebhookWithSecret
	res.JSON(t, &w)
	return w
}

// whCheckSecret: "whsec_" and the standard base64 of 32 bytes.
func whCheckSecret(t *testing.T, s string) {
	t.Helper()
	if !whSecret.MatchString(s) {
		t.Fatalf("secret %q is not whsec_ and base64", s)
	}
	if b, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, "whsec_")); err != nil || len(b) != 32 {
		t.Fatalf("secret %q: %d bytes, %v", s, len(b), err)
	}
}

// whAudit returns the audit log's newest events (up to 200) as the
// owner reads them, and the raw answer.
func whAudit(t *testing.T, e *testenv.Env, query string) ([]api.Event, string) {
	t.Helper()
	res := e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/audit-log?limit=200" + query, Token: e.Owner})
	var l api.EventList
	res.JSON(t, &l)
	return l.Items, string(res.Body)
}

// whQuery reads one value from an instance's database behind its back.
func whQuery(t *testing.T, e *testenv.Env, query string, dest ...any) {
	t.Helper()
	driver, dsn := "sqlite3", "file:"+filepath.Join(e.Config.DataDir, "guildhall.db")+"?_busy_timeout=10000"
	if e.Kind == testenv.Postgres {
		driver, dsn = "pgx", e.Config.DatabaseURL
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.QueryRowContext(t.Context(), query).Scan(dest...); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

// The life of a webhook over HTTP: created with its secret shown once,
// listed and read without it, patched (url and events make the caller its
// creator, a description does not), disabled and enabled again, rotated
// (a new secret; the previous one kept 24 hours), deleted; each change an
// event of the audit log that never holds a secret.
func TestWebhooks(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e, manager, _ := whEnv(t, kind)
		before := e2eSeq(t, e)
		res := e.Must(http.StatusCreated, testenv.Req{Method: "POST", Path: "/webhooks", Token: manager.Token,
			Body: map[string]any{"url": whPublicURL + "?key=k1", "events": []string{"role.*", "user.timeout"}, "description": "Moderation bot"}})
		var w api.WebhookWithSecret
		res.JSON(t, &w)
		whCheckSecret(t, w.Secret)
		if !e2eUUIDv7.MatchString(w.Id) || w.Url != whPublicURL+"?key=k1" || strings.Join(w.Events, ",") != "role.*,user.timeout" ||
			w.Description != "Moderation bot" || !w.Enabled || !w.DisabledReason.IsNull() || w.CreatorId != manager.ID ||
			!w.PreviousSecretUntil.IsNull() {
			t.Fatalf("created %s", res.Body)
		}
		e2eCheckTimestamps(t, w.CreatedAt.Time(), w.UpdatedAt.Time())
		if loc := res.Header.Get("Location"); loc != "/api/webhooks/"+w.Id {
			t.Errorf("Location %q", loc)
		}
		if tag := res.Header.Get("ETag"); tag != `"1"` {
			t.Errorf("ETag %q", tag)
		}
		path := "/webhooks/" + w.Id

		// It receives the events after its own webhook.created.
		events, _ := whAudit(t, e, "&type=webhook.*")
		if len(events) != 1 || events[0].Type != "webhook.created" || events[0].Subject != "webhook:"+w.Id || events[0].Seq <= before {
			t.Fatalf("events after the creation: %+v", events)
		}
		var afterSeq int64
		whQuery(t, e, "SELECT after_seq FROM webhooks WHERE id = '"+w.Id+"'", &afterSeq)
		if afterSeq != events[0].Seq {
			t.Errorf("after_seq %d, want the seq of its webhook.created, %d", afterSeq, events[0].Seq)
		}
		if d := events[0].Data; d["destination"] != "https://192.0.2.10" || d["creator_id"] != manager.ID || d["enabled"] != true {
			t.Errorf("webhook.created data %v", d)
		}

		t.Run("get and list never show a secret", func(t *testing.T) {
			for _, p := range []string{path, "/webhooks"} {
				for _, tok := range []string{manager.Token, e.Owner} {
					res := e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: p, Token: tok})
					if strings.Contains(string(res.Body), "secret\"") || strings.Contains(string(res.Body), "whsec_") {
						t.Errorf("GET %s shows a secret: %s", p, res.Body)
					}
				}
			}
			res := e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: path, Token: manager.Token})
			var got api.Webhook
			res.JSON(t, &got)
			if got.Id != w.Id || got.Url != w.Url || got.CreatorId != manager.ID || res.Header.Get("ETag") != `"1"` {
				t.Errorf("get %s", res.Body)
			}
		})

		t.Run("patch", func(t *testing.T) {
			patch := func(tok string, body map[string]any, headers map[string]string) *testenv.Response {
				return e.Do(testenv.Req{Method: "PATCH", Path: path, Token: tok, Body: body, Type: "application/merge-patch+json", Headers: headers})
			}
			get := func() api.Webhook {
				var got api.Webhook
				e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: path, Token: e.Owner}).JSON(t, &got)
				return got
			}
			// A description leaves the creator as it is.
			res := patch(e.Owner, map[string]any{"description": "Bot"}, nil)
			var got api.Webhook
			res.JSON(t, &got)
			if res.Status != http.StatusOK || got.Description != "Bot" || got.CreatorId != manager.ID || res.Header.Get("ETag") != `"2"` {
				t.Fatalf("description: %s", res)
			}
			// A stale If-Match is a 412, and changes nothing.
			seq := e2eSeq(t, e)
			e2eProblem(t, patch(e.Owner, map[string]any{"url": whPublicURL + "/x"}, map[string]string{"If-Match": `"1"`}),
				http.StatusPreconditionFailed, "precondition_failed")
			e2eNoEvent(t, e, seq)
			// The url makes the caller the creator.
			res = patch(e.Owner, map[string]any{"url": whPublicURL + "/x"}, map[string]string{"If-Match": `"2"`})
			res.JSON(t, &got)
			owner := e2eGet(t, e, "/me")["id"].(string)
			if res.Status != http.StatusOK || got.Url != whPublicURL+"/x" || got.CreatorId != owner {
				t.Fatalf("url: %s", res)
			}
			// So do the events.
			res = patch(manager.Token, map[string]any{"events": []string{"channel.*"}}, nil)
			res.JSON(t, &got)
			if res.Status != http.StatusOK || strings.Join(got.Events, ",") != "channel.*" || got.CreatorId != manager.ID {
				t.Fatalf("events: %s", res)
			}
			// Disabled by the owner: the creator stays; enabled by the
			// manager again: the manager is the creator.
			res = patch(e.Owner, map[string]any{"enabled": false}, nil)
			res.JSON(t, &got)
			if got.Enabled || got.DisabledReason.MustGet() != "disabled" || got.CreatorId != manager.ID {
				t.Fatalf("disable: %s", res)
			}
			res = patch(manager.Token, map[string]any{"enabled": true}, nil)
			res.JSON(t, &got)
			if !got.Enabled || !got.DisabledReason.IsNull() || got.CreatorId != manager.ID {
				t.Fatalf("enable: %s", res)
			}
			// A patch that changes nothing writes no event.
			seq = e2eSeq(t, e)
			res = patch(e.Owner, map[string]any{"enabled": true, "events": []string{"channel.*"}}, nil)
			if res.Status != http.StatusOK || get().CreatorId != manager.ID {
				t.Fatalf("no-op: %s", res)
			}
			e2eNoEvent(t, e, seq)
			events, _ := whAudit(t, e, "&type=webhook.updated")
			if len(events) != 5 {
				t.Fatalf("%d webhook.updated events, want 5", len(events))
			}
			url := events[3].Data // newest first: enable, disable, events, url, description
			if url["before"].(map[string]any)["creator_id"] != manager.ID || url["after"].(map[string]any)["creator_id"] != owner ||
				url["after"].(map[string]any)["destination"] != "https://192.0.2.10" {
				t.Errorf("the url's event: %v", url)
			}
		})

		t.Run("rotate", func(t *testing.T) {
			old, err := e.App.Store.GetWebhook(t.Context(), w.Id)
			if err != nil {
				t.Fatal(err)
			}
			res := e.Must(http.StatusOK, testenv.Req{Method: "POST", Path: path + "/rotate", Token: e.Owner})
			var r api.WebhookWithSecret
			res.JSON(t, &r)
			whCheckSecret(t, r.Secret)
			owner := e2eGet(t, e, "/me")["id"].(string)
			until := r.PreviousSecretUntil.MustGet()
			if r.Secret == w.Secret || r.Secret == old.Secret || r.CreatorId != owner ||
				until.Before(time.Now().Add(23*time.Hour)) || until.After(time.Now().Add(25*time.Hour)) {
				t.Fatalf("rotated %s", res.Body)
			}
			now, err := e.App.Store.GetWebhook(t.Context(), w.Id)
			if err != nil {
				t.Fatal(err)
			}
			if now.Secret != r.Secret || now.PreviousSecret != old.Secret || !now.PreviousUntil.Equal(until) {
				t.Errorf("stored: secret %v, previous kept %v until %v", now.Secret == r.Secret, now.PreviousSecret == old.Secret, now.PreviousUntil)
			}
			got := e2eGet(t, e, path)
			if _, ok := got["secret"]; ok || got["previous_secret_until"] == nil {
				t.Errorf("get after a rotation: %v", got)
			}
			events, _ := whAudit(t, e, "&type=webhook.updated")
			if events[0].Data["secret_rotated"] != true {
				t.Errorf("rotation event %v", events[0].Data)
			}
		})

		t.Run("delete", func(t *testing.T) {
			e.Must(http.StatusNoContent, testenv.Req{Method: "DELETE", Path: path, Token: manager.Token})
			for _, p := range []string{path, path + "/deliveries"} {
				e2eProblem(t, e.Do(testenv.Req{Method: "GET", Path: p, Token: manager.Token}), http.StatusNotFound, "not_found")
			}
			e2eProblem(t, e.Do(testenv.Req{Method: "DELETE", Path: path, Token: manager.Token}), http.StatusNotFound, "not_found")
			e2eProblem(t, e.Do(testenv.Req{Method: "POST", Path: path + "/rotate", Token: manager.Token}), http.StatusNotFound, "not_found")
		})

		// Every change is in the audit log, and no secret ever is.
		events, raw := whAudit(t, e, "&type=webhook.*")
		var types []string
		for i := len(events) - 1; i >= 0; i-- {
			types = append(types, string(events[i].Type))
		}
		want := "webhook.created," + strings.Repeat("webhook.updated,", 6) + "webhook.deleted"
		if strings.Join(types, ",") != want {
			t.Errorf("events %v, want %s", types, want)
		}
		if strings.Contains(raw, "whsec_") || strings.Contains(raw, "k1") || strings.Contains(raw, "/hook") {
			t.Errorf("the audit log shows a secret or a URL's path: %s", raw)
		}
	})
}

// Webhooks page like every list: limit and cursor, oldest first.
func TestWebhooksPaging(t *testing.T) {
	t.Parallel()
	e, manager, _ := whEnv(t, testenv.SQLite)
	var ids []string
	for i := range 5 {
		ids = append(ids, whCreate(t, e, manager.Token, map[string]any{"url": fmt.Sprintf("%s/%d", whPublicURL, i), "events": []string{"role.*"}}).Id)
	}
	var got []string
	path := "/webhooks?limit=2"
	for range 5 {
		var l api.WebhookList
		e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: path, Token: manager.Token}).JSON(t, &l)
		for _, w := range l.Items {
			got = append(got, w.Id)
		}
		if l.NextCursor.IsNull() {
			break
		}
		path = "/webhooks?limit=2&cursor=" + l.NextCursor.MustGet()
	}
	if strings.Join(got, ",") != strings.Join(ids, ",") {
		t.Errorf("paged %v, want %v", got, ids)
	}
	e2eField(t, e2eProblem(t, e.Do(testenv.Req{Method: "GET", Path: "/webhooks?cursor=bogus", Token: manager.Token}),
		http.StatusBadRequest, "validation"), "query.cursor")
}

// At most 25 webhooks: the 26th is a 409 limit_exceeded (limit:
// webhooks), whoever asks, and deleting one frees its place.
func TestWebhookLimit(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e, manager, _ := whEnv(t, kind)
		var first string
		for i := range 25 {
			w := whCreate(t, e, manager.Token, map[string]any{"url": fmt.Sprintf("%s/%d", whPublicURL, i), "events": []string{"role.*"}})
			if i == 0 {
				first = w.Id
			}
		}
		seq := e2eSeq(t, e)
		for _, tok := range []string{manager.Token, e.Owner} {
			p := e2eProblem(t, e.Do(testenv.Req{Method: "POST", Path: "/webhooks", Token: tok,
				Body: map[string]any{"url": whPublicURL, "events": []string{"role.*"}}}), http.StatusConflict, "limit_exceeded")
			if p.Limit == nil || *p.Limit != "webhooks" {
				t.Errorf("limit %v", p.Limit)
			}
		}
		e2eNoEvent(t, e, seq)
		e.Must(http.StatusNoContent, testenv.Req{Method: "DELETE", Path: "/webhooks/" + first, Token: manager.Token})
		whCreate(t, e, manager.Token, map[string]any{"url": whPublicURL, "events": []string{"role.*"}})
	})
}

// Every operation needs MANAGE_WEBHOOKS and VIEW_AUDIT_LOG: without
// either, or with one of them only, a 403 naming what is missing, and
// nothing changes.
func TestWebhookPermissions(t *testing.T) {
	t.Parallel()
	e, manager, plain := whEnv(t, testenv.SQLite)
	e.NewRole("auditor", "VIEW_AUDIT_LOG")
	e.NewRole("half", "MANAGE_WEBHOOKS")
	auditor, half := e.NewUser("auditor"), e.NewUser("half")
	e.Assign(auditor.ID, "auditor")
	e.Assign(half.ID, "half")
	w := whCreate(t, e, manager.Token, map[string]any{"url": whPublicURL, "events": []string{"role.*"}})
	path := "/webhooks/" + w.Id
	reqs := []testenv.Req{
		{Method: "GET", Path: "/webhooks"},
		{Method: "POST", Path: "/webhooks", Body: map[string]any{"url": whPublicURL, "events": []string{"role.*"}}},
		// A private destination: a 403, not what the name resolves to.
		{Method: "POST", Path: "/webhooks", Body: map[string]any{"url": "http://127.0.0.1/", "events": []string{"role.*"}}},
		{Method: "GET", Path: path},
		{Method: "PATCH", Path: path, Body: map[string]any{"enabled": false}, Type: "application/merge-patch+json"},
		{Method: "DELETE", Path: path},
		{Method: "POST", Path: path + "/rotate"},
		{Method: "GET", Path: path + "/deliveries"},
	}
	for _, u := range []struct {
		user    testenv.User
		missing string
	}{{plain, "VIEW_AUDIT_LOG,MANAGE_WEBHOOKS"}, {auditor, "MANAGE_WEBHOOKS"}, {half, "VIEW_AUDIT_LOG"}} {
		for _, r := range reqs {
			t.Run(u.user.Username+" "+r.Method+" "+r.Path, func(t *testing.T) {
				seq := e2eSeq(t, e)
				before := e2eGet(t, e, path)
				r.Token = u.user.Token
				p := e2eProblem(t, e.Do(r), http.StatusForbidden, "forbidden")
				var missing []string
				for _, m := range *p.MissingPermissions {
					missing = append(missing, string(m))
				}
				if strings.Join(missing, ",") != u.missing {
					t.Errorf("missing %v, want %s", missing, u.missing)
				}
				e2eNoEvent(t, e, seq)
				if after := e2eGet(t, e, path); e2eJSON(after) != e2eJSON(before) {
					t.Errorf("changed: %v -> %v", before, after)
				}
			})
		}
	}
}

// Destinations that resolve to loopback, private, link-local, shared or
// unspecified addresses are a 400 at body.url, on create and on patch,
// unless GUILDHALL_WEBHOOK_ALLOW_PRIVATE=true; a URL that is not http or
// https, or holds a password, is refused either way.
func TestWebhookDestinations(t *testing.T) {
	t.Parallel()
	private := []string{"http://127.0.0.1/", "http://127.0.0.1:8080/hook", "http://localhost/", "http://10.1.2.3/",
		"http://192.168.0.1/", "http://172.16.0.1/", "http://169.254.169.254/latest", "http://100.64.0.1/",
		"http://0.0.0.0/", "http://[::1]/", "http://[fe80::1]/", "http://[::ffff:127.0.0.1]/", "http://[fc00::1]/"}
	never := []string{"ftp://192.0.2.1/", "https://user:pw@192.0.2.1/", "https:///nohost", "gopher://192.0.2.1/", "https://192.0.2.1:0/"}
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e, manager, _ := whEnv(t, kind)
		w := whCreate(t, e, manager.Token, map[string]any{"url": whPublicURL, "events": []string{"role.*"}})
		seq := e2eSeq(t, e)
		for _, u := range append(private, never...) {
			t.Run(u, func(t *testing.T) {
				p := e2eProblem(t, e.Do(testenv.Req{Method: "POST", Path: "/webhooks", Token: manager.Token,
					Body: map[string]any{"url": u, "events": []string{"role.*"}}}), http.StatusBadRequest, "validation")
				e2eField(t, p, "body.url")
				p = e2eProblem(t, e.Do(testenv.Req{Method: "PATCH", Path: "/webhooks/" + w.Id, Token: manager.Token,
					Body: map[string]any{"url": u}, Type: "application/merge-patch+json"}), http.StatusBadRequest, "validation")
				e2eField(t, p, "body.url")
			})
		}
		e2eNoEvent(t, e, seq)
		if got := e2eGet(t, e, "/webhooks/"+w.Id)["url"]; got != whPublicURL {
			t.Errorf("url %v after refused patches", got)
		}
		var l api.WebhookList
		e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/webhooks", Token: manager.Token}).JSON(t, &l)
		if len(l.Items) != 1 {
			t.Errorf("%d webhooks after refused creates", len(l.Items))
		}
	})
	t.Run("allowed by the setting", func(t *testing.T) {
		t.Parallel()
		e, manager, _ := whEnv(t, testenv.SQLite, testenv.WithConfig(func(c *config.Config) { c.WebhookAllowPrivate = true }))
		for _, u := range private {
			w := whCreate(t, e, manager.Token, map[string]any{"url": u, "events": []string{"role.*"}})
			if w.Url != u {
				t.Errorf("url %q, want %q", w.Url, u)
			}
			e.Must(http.StatusNoContent, testenv.Req{Method: "DELETE", Path: "/webhooks/" + w.Id, Token: manager.Token})
		}
		for _, u := range never {
			e2eField(t, e2eProblem(t, e.Do(testenv.Req{Method: "POST", Path: "/webhooks", Token: manager.Token,
				Body: map[string]any{"url": u, "events": []string{"role.*"}}}), http.StatusBadRequest, "validation"), "body.url")
		}
	})
}

// Bad input is a 400 problem at the member concerned, on create and on
// patch, and changes nothing.
func TestWebhookBadInput(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e, manager, _ := whEnv(t, kind)
		w := whCreate(t, e, manager.Token, map[string]any{"url": whPublicURL, "events": []string{"role.*"}})
		before := e2eJSON(e2eGet(t, e, "/webhooks/"+w.Id))
		seq := e2eSeq(t, e)
		ok := map[string]any{"url": whPublicURL, "events": []string{"role.*"}}
		with := func(k string, v any) map[string]any {
			m := map[string]any{}
			for a, b := range ok {
				m[a] = b
			}
			if v == nil {
				delete(m, k)
			} else {
				m[k] = v
			}
			return m
		}
		cases := []struct {
			name     string
			body     any
			location string
		}{
			{"a pattern with a wildcard inside", with("events", []string{"role.*.x"}), "body.events[0]"},
			{"a bare wildcard", with("events", []string{"*"}), "body.events[0]"},
			{"a pattern in capitals", with("events", []string{"Role.*"}), "body.events[0]"},
			{"a pattern ending in a dot", with("events", []string{"role."}), "body.events[0]"},
			{"a second pattern malformed", with("events", []string{"role.*", "user timeout"}), "body.events[1]"},
			{"a pattern too long", with("events", []string{strings.Repeat("a", 65)}), "body.events[0]"},
			{"no pattern", with("events", []string{}), "body.events"},
			{"a pattern twice", with("events", []string{"role.*", "role.*"}), "body.events[1]"},
			{"events not an array", with("events", "role.*"), "body.events"},
			{"no events", with("events", nil), "body.events"},
			{"no url", with("url", nil), "body.url"},
			{"a url without a scheme", with("url", "192.0.2.1/hook"), "body.url"},
			{"a url too long", with("url", whPublicURL+"/"+strings.Repeat("a", 2048)), "body.url"},
			{"a description with a control character", with("description", "bot\u0007"), "body.description"},
			{"a description too long", with("description", strings.Repeat("d", 401)), "body.description"},
			{"an unknown member", with("secret", "whsec_x"), "body.secret"},
			{"an unknown member enabled", with("enabled", false), "body.enabled"},
		}
		for _, tc := range cases {
			t.Run("create: "+tc.name, func(t *testing.T) {
				p := e2eProblem(t, e.Do(testenv.Req{Method: "POST", Path: "/webhooks", Token: manager.Token, Body: tc.body}),
					http.StatusBadRequest, "validation")
				e2eField(t, p, tc.location)
			})
			body, _ := tc.body.(map[string]any)
			if tc.location == "body.url" && body["url"] == nil || tc.location == "body.events" && body["events"] == nil ||
				tc.location == "body.enabled" {
				continue // absent is fine in a patch, and enabled is one of its members
			}
			t.Run("patch: "+tc.name, func(t *testing.T) {
				p := e2eProblem(t, e.Do(testenv.Req{Method: "PATCH", Path: "/webhooks/" + w.Id, Token: manager.Token, Body: tc.body,
					Type: "application/merge-patch+json"}), http.StatusBadRequest, "validation")
				e2eField(t, p, tc.location)
			})
		}
		for _, body := range []string{`{"enabled": "no"}`, `{"url": null}`, `{"events": null}`, `[]`} {
			t.Run("patch "+body, func(t *testing.T) {
				e2eProblem(t, e.Do(testenv.Req{Method: "PATCH", Path: "/webhooks/" + w.Id, Token: manager.Token, Body: body,
					Type: "application/merge-patch+json"}), http.StatusBadRequest, "validation")
			})
		}
		for _, p := range []string{"/webhooks/not-a-uuid", "/webhooks/not-a-uuid/deliveries", "/webhooks/" + w.Id + "/deliveries/a.b/redeliver"} {
			method := "GET"
			if strings.HasSuffix(p, "redeliver") {
				method = "POST"
			}
			e2eProblem(t, e.Do(testenv.Req{Method: method, Path: p, Token: manager.Token}), http.StatusBadRequest, "validation")
		}
		e2eNoEvent(t, e, seq)
		if after := e2eJSON(e2eGet(t, e, "/webhooks/"+w.Id)); after != before {
			t.Errorf("changed:\n%s\n%s", before, after)
		}
	})
}

// A webhook's deliveries (made by the delivery engine; here written into
// the database) are listed newest first, a page at a time; redelivering
// one makes it pending again, due now, a lapsed lease released (a live
// one kept: its attempt is in flight) and its attempts kept; another
// webhook's delivery, or an unknown one, is a 404.
func TestWebhookDeliveries(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e, manager, _ := whEnv(t, kind)
		w := whCreate(t, e, manager.Token, map[string]any{"url": whPublicURL, "events": []string{"role.*"}})
		other := whCreate(t, e, manager.Token, map[string]any{"url": whPublicURL, "events": []string{"user.*"}})
		base := time.Now().Add(-time.Hour).UnixMicro()
		row := func(id, webhook string, seq int64, state string, attempts int, status, next, lease string, at int64) string {
			return fmt.Sprintf("INSERT INTO webhook_deliveries (id, webhook_id, event_seq, state, attempts, last_status, last_error, "+
				"next_attempt_at, lease_owner, lease_until, created_at, updated_at) VALUES ('%s', '%s', %d, '%s', %d, %s, NULL, %s, %s, %s, %d, %d)",
				id, webhook, seq, state, attempts, status, next, lease, map[bool]string{true: fmt.Sprint(base + 1e9), false: "NULL"}[lease != "NULL"], at, at)
		}
		later := fmt.Sprint(time.Now().Add(5 * time.Minute).UnixMicro())
		operatorExec(t, e,
			row("msg_a", w.Id, 11, "delivered", 1, "200", "NULL", "NULL", base+1),
			row("msg_b", w.Id, 12, "failed", 8, "500", "NULL", "NULL", base+2),
			row("msg_c", w.Id, 13, "pending", 2, "503", later, "'instance-1'", base+3),
			row("msg_d", w.Id, 14, "pending", 0, "NULL", later, "NULL", base+3),
			row("msg_x", other.Id, 11, "delivered", 1, "204", "NULL", "NULL", base+4))
		deliveries := "/webhooks/" + w.Id + "/deliveries"

		var all []api.WebhookDelivery
		path := deliveries + "?limit=3"
		for range 3 {
			var l api.WebhookDeliveryList
			e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: path, Token: manager.Token}).JSON(t, &l)
			all = append(all, l.Items...)
			if l.NextCursor.IsNull() {
				break
			}
			path = deliveries + "?limit=3&cursor=" + l.NextCursor.MustGet()
		}
		var ids []string
		for _, d := range all {
			ids = append(ids, d.Id)
		}
		if strings.Join(ids, ",") != "msg_d,msg_c,msg_b,msg_a" {
			t.Fatalf("deliveries %v, want newest first", ids)
		}
		d, c, b := all[0], all[1], all[2]
		if !d.LastStatus.IsNull() || d.Attempts != 0 || d.State != "pending" || d.NextAttemptAt.IsNull() || d.EventSeq != 14 {
			t.Errorf("msg_d %+v", d)
		}
		if c.LastStatus.MustGet() != 503 || c.Attempts != 2 {
			t.Errorf("msg_c %+v", c)
		}
		if b.State != "failed" || !b.NextAttemptAt.IsNull() || b.LastStatus.MustGet() != 500 || b.Attempts != 8 {
			t.Errorf("msg_b %+v", b)
		}
		e2eCheckTimestamps(t, b.CreatedAt.Time())

		seq := e2eSeq(t, e)
		for _, id := range []string{"msg_b", "msg_c"} {
			start := time.Now().Add(-time.Second)
			res := e.Must(http.StatusAccepted, testenv.Req{Method: "POST", Path: deliveries + "/" + id + "/redeliver", Token: manager.Token})
			var got api.WebhookDelivery
			res.JSON(t, &got)
			next := got.NextAttemptAt.MustGet()
			if got.Id != id || got.State != "pending" || next.Before(start) || next.After(time.Now().Add(time.Second)) {
				t.Errorf("redelivered %s", res.Body)
			}
			var state string
			var attempts int
			var owner, until sql.NullString
			whQuery(t, e, "SELECT state, attempts, lease_owner, CAST(lease_until AS VARCHAR(32)) FROM webhook_deliveries WHERE id = '"+id+"'",
				&state, &attempts, &owner, &until)
			if state != "pending" || owner.Valid || until.Valid || attempts != map[string]int{"msg_b": 8, "msg_c": 2}[id] {
				t.Errorf("%s stored: %s, %d attempts, lease %v %v", id, state, attempts, owner, until)
			}
		}
		// An attempt in flight (its lease live) is not doubled: the
		// delivery is due now, and the lease stays.
		live := time.Now().Add(time.Minute).UnixMicro()
		operatorExec(t, e, fmt.Sprintf("INSERT INTO webhook_deliveries (id, webhook_id, event_seq, state, attempts, last_status, "+
			"last_error, next_attempt_at, lease_owner, lease_until, created_at, updated_at) VALUES "+
			"('msg_e', '%s', 15, 'pending', 1, 503, NULL, %s, 'instance-2', %d, %d, %d)", w.Id, later, live, base, base))
		e.Must(http.StatusAccepted, testenv.Req{Method: "POST", Path: deliveries + "/msg_e/redeliver", Token: manager.Token})
		var owner sql.NullString
		var until int64
		var next int64
		whQuery(t, e, "SELECT lease_owner, lease_until, next_attempt_at FROM webhook_deliveries WHERE id = 'msg_e'", &owner, &until, &next)
		if owner.String != "instance-2" || until != live || next > time.Now().UnixMicro() {
			t.Errorf("msg_e after a redelivery: lease %v until %d, next attempt %d", owner, until, next)
		}
		e2eNoEvent(t, e, seq) // a redelivery is no event of the audit log

		for _, p := range []string{
			deliveries + "/msg_x/redeliver",                                             // another webhook's
			deliveries + "/msg_zz/redeliver",                                            // none
			"/webhooks/0192f1a0-0000-7000-8000-000000000000/deliveries/msg_a/redeliver", // no such webhook
		} {
			e2eProblem(t, e.Do(testenv.Req{Method: "POST", Path: p, Token: manager.Token}), http.StatusNotFound, "not_found")
		}
		e2eProblem(t, e.Do(testenv.Req{Method: "GET", Path: "/webhooks/0192f1a0-0000-7000-8000-000000000000/deliveries", Token: manager.Token}),
			http.StatusNotFound, "not_found")
		var l api.WebhookDeliveryList
		e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/webhooks/" + other.Id + "/deliveries", Token: manager.Token}).JSON(t, &l)
		if len(l.Items) != 1 || l.Items[0].Id != "msg_x" || l.Items[0].State != "delivered" {
			t.Errorf("the other webhook's deliveries: %+v", l.Items)
		}

		// Deleting the webhook deletes its deliveries.
		e.Must(http.StatusNoContent, testenv.Req{Method: "DELETE", Path: "/webhooks/" + w.Id, Token: manager.Token})
		var n int
		whQuery(t, e, "SELECT COUNT(*) FROM webhook_deliveries WHERE webhook_id = '"+w.Id+"'", &n)
		if n != 0 {
			t.Errorf("%d deliveries left of a deleted webhook", n)
		}
	})
}

// A page of deliveries goes on from the last delivery of the page before
// even when that one is gone since (deleted as hidden from the webhook's
// creator), and when every delivery listed before is gone: nothing is
// listed twice or skipped. Deliveries made in one dispatch share their
// creation time, and are listed by event, newest first.
func TestWebhookDeliveriesAfterACursorsDeliveryIsGone(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e, manager, _ := whEnv(t, kind)
		w := whCreate(t, e, manager.Token, map[string]any{"url": whPublicURL, "events": []string{"role.*"}})
		base := time.Now().Add(-time.Hour).UnixMicro()
		var rows []string
		for i, id := range []string{"msg_01", "msg_02", "msg_03", "msg_04", "msg_05", "msg_06"} {
			rows = append(rows, fmt.Sprintf("INSERT INTO webhook_deliveries (id, webhook_id, event_seq, state, attempts, "+
				"created_at, updated_at) VALUES ('%s', '%s', %d, 'delivered', 1, %d, %d)", id, w.Id, 100+i, base+int64(i/2), base))
		}
		operatorExec(t, e, rows...)
		deliveries := "/webhooks/" + w.Id + "/deliveries?limit=2"
		page := func(cursor string) ([]string, string) {
			t.Helper()
			path := deliveries
			if cursor != "" {
				path += "&cursor=" + cursor
			}
			var l api.WebhookDeliveryList
			e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: path, Token: manager.Token}).JSON(t, &l)
			var ids []string
			for _, d := range l.Items {
				ids = append(ids, d.Id)
			}
			next := ""
			if !l.NextCursor.IsNull() {
				next = l.NextCursor.MustGet()
			}
			return ids, next
		}
		first, cursor := page("")
		if strings.Join(first, ",") != "msg_06,msg_05" || cursor == "" {
			t.Fatalf("first page %v (next %q); want msg_06,msg_05 and more", first, cursor)
		}
		operatorExec(t, e, "DELETE FROM webhook_deliveries WHERE id = 'msg_05'")
		second, cursor2 := page(cursor)
		if strings.Join(second, ",") != "msg_04,msg_03" {
			t.Fatalf("after the cursor's delivery went: %v; want msg_04,msg_03", second)
		}
		if again, _ := page(cursor2); strings.Join(again, ",") != "msg_02,msg_01" {
			t.Fatalf("third page %v; want msg_02,msg_01", again)
		}
		operatorExec(t, e, "DELETE FROM webhook_deliveries WHERE id IN ('msg_06', 'msg_04', 'msg_03')")
		if rest, next := page(cursor2); strings.Join(rest, ",") != "msg_02,msg_01" || next != "" {
			t.Fatalf("after every delivery listed went: %v (next %q); want msg_02,msg_01 and no more", rest, next)
		}
		if rest, _ := page(cursor); strings.Join(rest, ",") != "msg_02,msg_01" {
			t.Fatalf("from the first page's cursor, all listed before gone: %v; want msg_02,msg_01", rest)
		}
	})
}
