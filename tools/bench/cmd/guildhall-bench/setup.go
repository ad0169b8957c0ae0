package main

import (
	"context"
	"fmt"
	"net/http"
	"strconv"

	"github.com/guildhall/guildhall/tools/bench/internal/client"
)

// The set-up calls (fixtures) go through the tools' one client as the
// owner; none of them is measured.

type overwriteBody struct {
	TargetType string   `json:"target_type"`
	TargetID   string   `json:"target_id,omitempty"`
	Allow      []string `json:"allow"`
	Deny       []string `json:"deny"`
}

func setOverwrites(ctx context.Context, a *client.Client, channel string, ows []overwriteSpec, conns int) error {
	return client.Parallel(ctx, len(ows), conns, func(ctx context.Context, i int) error {
		o := ows[i]
		return a.Call(ctx, http.MethodPost, "/channels/"+channel+"/permissions",
			overwriteBody{TargetType: o.targetType, TargetID: o.targetID, Allow: o.allow, Deny: o.deny}, http.StatusOK, nil)
	})
}

type nameBody struct {
	Name        string   `json:"name"`
	Permissions []string `json:"permissions,omitempty"`
}

// setupBench creates the bench role, the bench channel with its couple
// of overwrites, and the channels of list_channels.
func setupBench(ctx context.Context, a *client.Client) error {
	if err := a.Call(ctx, http.MethodPost, "/roles/"+benchRole+"/create", nameBody{Name: "Bench", Permissions: []string{"MANAGE_MESSAGES"}}, http.StatusCreated, nil); err != nil {
		return err
	}
	if err := a.Call(ctx, http.MethodPost, "/channels/"+benchChannel+"/create", nameBody{Name: "Bench"}, http.StatusCreated, nil); err != nil {
		return err
	}
	for _, id := range listChannels() {
		if err := a.Call(ctx, http.MethodPost, "/channels/"+id+"/create", nameBody{Name: id}, http.StatusCreated, nil); err != nil {
			return err
		}
	}
	return setOverwrites(ctx, a, benchChannel, benchOverwrites(), 1)
}

// setupHeavy creates the heavy user (holding the 248 heavy roles), the
// light user (no roles), the heavy channel (499 overwrites, of which 249
// name users of seeded) and the bare light channel.
func setupHeavy(ctx context.Context, a *client.Client, seeded []string, prefix string, conns int) (heavy, light string, err error) {
	var u client.Created
	if err = a.Call(ctx, http.MethodPost, "/users", client.UserCreate{Username: prefix + "heavy", DisplayName: "Heavy"}, http.StatusCreated, &u); err != nil {
		return
	}
	heavy = u.ID
	if err = a.Call(ctx, http.MethodPost, "/users", client.UserCreate{Username: prefix + "light", DisplayName: "Light"}, http.StatusCreated, &u); err != nil {
		return
	}
	light = u.ID
	// Roles one at a time: each new role takes position 1 and moves the others up.
	for i := 1; i <= heavyRoles; i++ {
		if err = a.Call(ctx, http.MethodPost, "/roles/"+heavyRoleID(i)+"/create",
			nameBody{Name: "Heavy " + strconv.Itoa(i), Permissions: heavyRolePerms(i)}, http.StatusCreated, nil); err != nil {
			return
		}
	}
	if err = client.Parallel(ctx, heavyRoles, conns, func(ctx context.Context, i int) error {
		return a.Call(ctx, http.MethodPost, "/users/"+heavy+"/roles/"+heavyRoleID(i+1), nil, http.StatusNoContent, nil)
	}); err != nil {
		return
	}
	for _, ch := range []string{heavyChannel, lightChannel} {
		if err = a.Call(ctx, http.MethodPost, "/channels/"+ch+"/create", nameBody{Name: ch}, http.StatusCreated, nil); err != nil {
			return
		}
	}
	users := append([]string{heavy}, seeded[:min(len(seeded), heavyUserOvers-1)]...)
	err = setOverwrites(ctx, a, heavyChannel, heavyOverwrites(users), conns)
	return
}

type membersBody struct {
	Add []string `json:"add"`
}

// setupAccess makes the access scenarios' community on an instance that
// holds roles already: roles up to accessRoles in all (filler roles with
// no permission), the access role given to every hundredth user of seeded
// (1,000 at a time, the limit of one request), and the access channels
// with their overwrites.
func setupAccess(ctx context.Context, a *client.Client, seeded []string, roles, conns int) error {
	for i := roles + 1; i < accessRoles; i++ {
		if err := a.Call(ctx, http.MethodPost, "/roles/"+fmt.Sprintf("filler%03d", i)+"/create", nameBody{Name: "Filler"}, http.StatusCreated, nil); err != nil {
			return err
		}
	}
	if err := a.Call(ctx, http.MethodPost, "/roles/"+accessRole+"/create", nameBody{Name: "Access"}, http.StatusCreated, nil); err != nil {
		return err
	}
	var holders []string
	for i := 0; i < len(seeded); i += 100 {
		holders = append(holders, seeded[i])
	}
	for len(holders) > 0 {
		n := min(len(holders), 1000)
		if err := a.Call(ctx, http.MethodPost, "/roles/"+accessRole+"/members", membersBody{Add: holders[:n]}, http.StatusOK, nil); err != nil {
			return err
		}
		holders = holders[n:]
	}
	opened := seeded[len(seeded)/2 : len(seeded)/2+min(accessUserOvers, len(seeded)/2)]
	for ch, ows := range map[string][]overwriteSpec{
		accessOpenChannel:  nil,
		accessRoleChannel:  accessOverwrites(accessRole, nil),
		accessUsersChannel: accessOverwrites("", opened),
	} {
		if err := a.Call(ctx, http.MethodPost, "/channels/"+ch+"/create", nameBody{Name: ch}, http.StatusCreated, nil); err != nil {
			return err
		}
		if err := setOverwrites(ctx, a, ch, ows, conns); err != nil {
			return err
		}
	}
	return nil
}
