package httpapi_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/guildhall/guildhall/gen/api"
	"github.com/guildhall/guildhall/internal/testenv"
)

func TestTokens(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		alice := e.NewUser("alice")
		bob := e.NewUser("bob")
		tokens := "/users/" + alice.ID + "/tokens"

		// Created by alice herself: the secret is in this answer only.
		expires := time.Now().Add(48 * time.Hour).UTC().Truncate(time.Second)
		res := e.Do(testenv.Req{Method: "POST", Path: tokens, Token: alice.Token, Body: map[string]any{"name": "CI deploy", "expires_at": expires}})
		if res.Status != http.StatusCreated {
			t.Fatalf("create: %s", res)
		}
		var created api.TokenCreated
		res.JSON(t, &created)
		if !strings.HasPrefix(created.Token, "gh_") || len(created.Token) < 43 || created.Name != "CI deploy" || created.UserId != alice.ID ||
			!e2eUUIDv7.MatchString(created.Id) || !created.ExpiresAt.MustGet().Equal(expires) {
			t.Errorf("created %s", res.Body)
		}
		e2eCheckTimestamps(t, created.CreatedAt.Time())
		if loc := res.Header.Get("Location"); loc != "/api"+tokens+"/"+created.Id {
			t.Errorf("Location %q", loc)
		}
		if s := e.Do(testenv.Req{Method: "GET", Path: "/roles", Token: created.Token}).Status; s != http.StatusOK {
			t.Errorf("the new token does not work: %d", s)
		}

		// Owner-made token without expiry.
		res = e.Must(http.StatusCreated, testenv.Req{Method: "POST", Path: tokens, Token: e.Owner, Body: map[string]any{"name": "by owner", "expires_at": nil}})
		var byOwner api.TokenCreated
		res.JSON(t, &byOwner)
		if !byOwner.ExpiresAt.IsNull() {
			t.Errorf("expires_at %s", res.Body)
		}

		t.Run("list and get show metadata without the secret", func(t *testing.T) {
			for _, tok := range []string{alice.Token, e.Owner} {
				res := e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: tokens, Token: tok})
				if strings.Contains(string(res.Body), `"token"`) || strings.Contains(string(res.Body), created.Token) {
					t.Errorf("the list shows a secret: %s", res.Body)
				}
				var l api.TokenList
				res.JSON(t, &l)
				var ids []string
				for _, x := range l.Items {
					ids = append(ids, x.Id)
				}
				// newest first: the owner's, then the CI one, then testenv's
				if len(ids) != 3 || ids[0] != byOwner.Id || ids[1] != created.Id || !l.NextCursor.IsNull() {
					t.Errorf("list %s", res.Body)
				}
				res = e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: tokens + "/" + created.Id, Token: tok})
				var got api.Token
				res.JSON(t, &got)
				if strings.Contains(string(res.Body), `"token"`) || got.Id != created.Id || got.Name != "CI deploy" ||
					!got.CreatedAt.Time().Equal(created.CreatedAt.Time()) || !got.ExpiresAt.MustGet().Equal(expires) {
					t.Errorf("get %s", res.Body)
				}
			}
		})
		t.Run("errors", func(t *testing.T) {
			seq := e2eSeq(t, e)
			ghost := "0192f1a0-0000-7000-8000-000000000000"
			p := e2eProblem(t, e.Do(testenv.Req{Method: "POST", Path: tokens, Token: alice.Token,
				Body: map[string]any{"name": "old", "expires_at": time.Now().Add(-time.Minute).UTC()}}), http.StatusBadRequest, "validation")
			e2eField(t, p, "body.expires_at")
			p = e2eProblem(t, e.Do(testenv.Req{Method: "POST", Path: tokens, Token: alice.Token,
				Body: map[string]any{"name": "x", "expires_at": "tomorrow"}}), http.StatusBadRequest, "validation")
			e2eField(t, p, "body.expires_at")
			p = e2eProblem(t, e.Do(testenv.Req{Method: "POST", Path: tokens, Token: alice.Token, Body: map[string]any{}}), http.StatusBadRequest, "validation")
			e2eField(t, p, "body.name")
			p = e2eProblem(t, e.Do(testenv.Req{Method: "POST", Path: tokens, Token: alice.Token, Body: map[string]any{"name": "x", "token": "gh_mine"}}),
				http.StatusBadRequest, "validation")
			e2eField(t, p, "body.token")
			e2eProblem(t, e.Do(testenv.Req{Method: "POST", Path: tokens, Token: alice.Token, Body: `{"name":"x"}`, Type: "text/plain"}),
				http.StatusUnsupportedMediaType, "unsupported_media_type")
			e2eProblem(t, e.Do(testenv.Req{Method: "POST", Path: tokens, Token: alice.Token, Body: map[string]any{"name": strings.Repeat("x", 1<<20)}}),
				http.StatusRequestEntityTooLarge, "payload_too_large")
			// Bob is neither alice nor the owner.
			for _, r := range []testenv.Req{
				{Method: "POST", Path: tokens, Body: map[string]any{"name": "x"}},
				{Method: "GET", Path: tokens},
				{Method: "GET", Path: tokens + "/" + created.Id},
				{Method: "DELETE", Path: tokens + "/" + created.Id},
			} {
				r.Token = bob.Token
				p := e2eProblem(t, e.Do(r), http.StatusForbidden, "forbidden")
				if p.Reason == nil || *p.Reason != api.SelfOrOwnerOnly || p.MissingPermissions == nil || len(*p.MissingPermissions) != 0 {
					t.Errorf("%s %s: 403 %+v", r.Method, r.Path, p)
				}
				r.Token = ""
				e2eProblem(t, e.Do(r), http.StatusUnauthorized, "unauthenticated")
				r.Token = e.Owner
				r.Path = strings.Replace(r.Path, alice.ID, ghost, 1)
				e2eProblem(t, e.Do(r), http.StatusNotFound, "not_found")
				r.Path = strings.Replace(r.Path, ghost, "nope", 1)
				p = e2eProblem(t, e.Do(r), http.StatusBadRequest, "validation")
				e2eField(t, p, "path.userID")
			}
			// Unknown token IDs, and a token of another user under alice.
			bobTok := e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/users/" + bob.ID + "/tokens", Token: bob.Token}).Map(t)["items"].([]any)[0].(map[string]any)["id"].(string)
			for _, id := range []string{ghost, bobTok} {
				// 404 (the path's resource) before 403, for anybody (docs/design.md §11).
				for _, token := range []string{e.Owner, bob.Token} {
					e2eProblem(t, e.Do(testenv.Req{Method: "GET", Path: tokens + "/" + id, Token: token}), http.StatusNotFound, "not_found")
					e2eProblem(t, e.Do(testenv.Req{Method: "DELETE", Path: tokens + "/" + id, Token: token}), http.StatusNotFound, "not_found")
				}
			}
			p = e2eProblem(t, e.Do(testenv.Req{Method: "GET", Path: tokens + "/X", Token: e.Owner}), http.StatusBadRequest, "validation")
			e2eField(t, p, "path.tokenID")
			if s := e.Do(testenv.Req{Method: "GET", Path: "/roles", Token: bob.Token}).Status; s != http.StatusOK {
				t.Errorf("bob's token was revoked through alice's path: %d", s)
			}
			e2eNoEvent(t, e, seq)
		})
		t.Run("delete revokes at once", func(t *testing.T) {
			seq := e2eSeq(t, e)
			res := e.Do(testenv.Req{Method: "DELETE", Path: tokens + "/" + created.Id, Token: alice.Token})
			if res.Status != http.StatusNoContent || len(res.Body) != 0 {
				t.Fatalf("delete: %s", res)
			}
			e2eProblem(t, e.Do(testenv.Req{Method: "GET", Path: "/roles", Token: created.Token}), http.StatusUnauthorized, "unauthenticated")
			e2eProblem(t, e.Do(testenv.Req{Method: "GET", Path: tokens + "/" + created.Id, Token: alice.Token}), http.StatusNotFound, "not_found")
			if ev := e2eEvents(t, e, seq); !slices.Equal(ev, []string{"user.token.deleted"}) {
				t.Errorf("events %v", ev)
			}
			// Alice's other tokens still work; the owner may revoke hers too.
			if s := e.Do(testenv.Req{Method: "GET", Path: "/roles", Token: byOwner.Token}).Status; s != http.StatusOK {
				t.Errorf("another token of alice: %d", s)
			}
			e.Must(http.StatusNoContent, testenv.Req{Method: "DELETE", Path: tokens + "/" + byOwner.Id, Token: e.Owner})
			e2eProblem(t, e.Do(testenv.Req{Method: "GET", Path: "/roles", Token: byOwner.Token}), http.StatusUnauthorized, "unauthenticated")
			// Revoking the token in use ends it for the next request.
			self := e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: tokens, Token: alice.Token}).Map(t)["items"].([]any)[0].(map[string]any)["id"].(string)
			e.Must(http.StatusNoContent, testenv.Req{Method: "DELETE", Path: tokens + "/" + self, Token: alice.Token})
			e2eProblem(t, e.Do(testenv.Req{Method: "GET", Path: "/roles", Token: alice.Token}), http.StatusUnauthorized, "unauthenticated")
		})
	})
}
