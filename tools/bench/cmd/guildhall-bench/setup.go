package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// apiClient makes the set-up calls (seeding, fixtures, cursor walks) as the
// owner. It is plain net/http: none of it is measured.
type apiClient struct {
	base  string // http://127.0.0.1:port/api
	token string
	hc    *http.Client
}

func newAPIClient(addr, token string, conns int) *apiClient {
	return &apiClient{base: "http://" + addr + "/api", token: token,
		hc: &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: conns}}}
}

// call sends method path with in as its JSON body (nil: none), expects the
// status want, and decodes the answer into out (nil: discarded).
func (a *apiClient) call(ctx context.Context, method, path string, in any, want int, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+a.token)
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := a.hc.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	if resp.StatusCode != want {
		return fmt.Errorf("%s %s: HTTP %d, want %d: %s", method, path, resp.StatusCode, want, trunc(string(raw), 400))
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return fmt.Errorf("%s %s: %w", method, path, err)
		}
	}
	return nil
}

type userCreate struct {
	Username    string `json:"username"`
	DisplayName string `json:"display_name"`
}

type idOnly struct {
	ID string `json:"id"`
}

// parallel runs f(i) for i in [0, n) on conns goroutines and returns the
// first error (after which no new calls start).
func parallel(ctx context.Context, n, conns int, f func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var next atomic.Int64
	var once sync.Once
	var first error
	var wg sync.WaitGroup
	for range min(conns, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := f(ctx, i); err != nil {
					once.Do(func() { first = err; cancel() })
					return
				}
			}
		}()
	}
	wg.Wait()
	if first == nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return first
}

// seedUsers creates n users named prefix<from..from+n-1> through POST
// /api/users, conns at a time, and returns their IDs.
func seedUsers(ctx context.Context, a *apiClient, prefix string, from, n, conns int) ([]string, error) {
	ids := make([]string, n)
	err := parallel(ctx, n, conns, func(ctx context.Context, i int) error {
		k := strconv.Itoa(from + i)
		var u idOnly
		if err := a.call(ctx, http.MethodPost, "/users", userCreate{Username: prefix + k, DisplayName: "Seed user " + k}, http.StatusCreated, &u); err != nil {
			return err
		}
		ids[i] = u.ID
		return nil
	})
	return ids, err
}

type overwriteBody struct {
	TargetType string   `json:"target_type"`
	TargetID   string   `json:"target_id,omitempty"`
	Allow      []string `json:"allow"`
	Deny       []string `json:"deny"`
}

func setOverwrites(ctx context.Context, a *apiClient, channel string, ows []overwriteSpec, conns int) error {
	return parallel(ctx, len(ows), conns, func(ctx context.Context, i int) error {
		o := ows[i]
		return a.call(ctx, http.MethodPost, "/channels/"+channel+"/permissions",
			overwriteBody{TargetType: o.targetType, TargetID: o.targetID, Allow: o.allow, Deny: o.deny}, http.StatusOK, nil)
	})
}

type nameBody struct {
	Name        string   `json:"name"`
	Permissions []string `json:"permissions,omitempty"`
}

// setupBench creates the bench role and the bench channel with its couple
// of overwrites.
func setupBench(ctx context.Context, a *apiClient) error {
	if err := a.call(ctx, http.MethodPost, "/roles/"+benchRole+"/create", nameBody{Name: "Bench", Permissions: []string{"MANAGE_MESSAGES"}}, http.StatusCreated, nil); err != nil {
		return err
	}
	if err := a.call(ctx, http.MethodPost, "/channels/"+benchChannel+"/create", nameBody{Name: "Bench"}, http.StatusCreated, nil); err != nil {
		return err
	}
	return setOverwrites(ctx, a, benchChannel, benchOverwrites(), 1)
}

// setupHeavy creates the heavy user (holding the 248 heavy roles), the
// light user (no roles), the heavy channel (499 overwrites, of which 249
// name users of seeded) and the bare light channel.
func setupHeavy(ctx context.Context, a *apiClient, seeded []string, prefix string, conns int) (heavy, light string, err error) {
	var u idOnly
	if err = a.call(ctx, http.MethodPost, "/users", userCreate{Username: prefix + "heavy", DisplayName: "Heavy"}, http.StatusCreated, &u); err != nil {
		return
	}
	heavy = u.ID
	if err = a.call(ctx, http.MethodPost, "/users", userCreate{Username: prefix + "light", DisplayName: "Light"}, http.StatusCreated, &u); err != nil {
		return
	}
	light = u.ID
	// Roles one at a time: each new role takes position 1 and moves the others up.
	for i := 1; i <= heavyRoles; i++ {
		if err = a.call(ctx, http.MethodPost, "/roles/"+heavyRoleID(i)+"/create",
			nameBody{Name: "Heavy " + strconv.Itoa(i), Permissions: heavyRolePerms(i)}, http.StatusCreated, nil); err != nil {
			return
		}
	}
	if err = parallel(ctx, heavyRoles, conns, func(ctx context.Context, i int) error {
		return a.call(ctx, http.MethodPost, "/users/"+heavy+"/roles/"+heavyRoleID(i+1), nil, http.StatusNoContent, nil)
	}); err != nil {
		return
	}
	for _, ch := range []string{heavyChannel, lightChannel} {
		if err = a.call(ctx, http.MethodPost, "/channels/"+ch+"/create", nameBody{Name: ch}, http.StatusCreated, nil); err != nil {
			return
		}
	}
	users := append([]string{heavy}, seeded[:min(len(seeded), heavyUserOvers-1)]...)
	err = setOverwrites(ctx, a, heavyChannel, heavyOverwrites(users), conns)
	return
}

type pageBody struct {
	Items      []json.RawMessage `json:"items"`
	NextCursor *string           `json:"next_cursor"`
}

// cursorOfPage walks ?limit=50 from page 1 and returns the cursor that
// fetches page n.
func cursorOfPage(ctx context.Context, a *apiClient, n int) (string, error) {
	cursor := ""
	for page := 1; page < n; page++ {
		path := "/users?limit=50"
		if cursor != "" {
			path += "&cursor=" + url.QueryEscape(cursor)
		}
		var p pageBody
		if err := a.call(ctx, http.MethodGet, path, nil, http.StatusOK, &p); err != nil {
			return "", err
		}
		if p.NextCursor == nil {
			return "", fmt.Errorf("the list ends at page %d, before page %d", page, n)
		}
		cursor = *p.NextCursor
	}
	if cursor == "" {
		return "", errors.New("page 1 has no cursor")
	}
	return cursor, nil
}
