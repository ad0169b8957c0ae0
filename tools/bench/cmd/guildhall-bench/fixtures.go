package main

import (
	"fmt"

	"github.com/guildhall/guildhall/internal/permissions"
)

// The permission setups the scenarios ask about. The real servers get them
// through the API (setup.go); the ceiling builds the same shapes in memory
// (ceiling.go), so both answer with bodies of the same size.

// channelPerms are the channel-scoped permissions in catalog order, as the
// product's catalog has them.
var channelPerms = permissions.ChannelScoped.Names()

// defaultGlobal are a fresh store's global permissions, in catalog order.
var defaultGlobal = permissions.DefaultGlobal.Names()

const (
	benchChannel = "bench" // get_channel, get_perms_channel: a channel with a couple of overwrites
	// listChannelCount more channels, with no overwrites, make the
	// list of list_channels.
	listChannelCount = 20
	benchRole        = "bench"
	heavyChannel     = "heavy" // perms_heavy, list_overwrites_heavy
	lightChannel     = "light" // perms_light, list_overwrites_light: no overwrites
	// docs/design.md's limits are 250 roles and 500 overwrites per channel; the bench
	// role and the 248 heavy roles make 249 roles, and the heavy channel gets
	// everyone + 248 roles + 250 users = 499 overwrites.
	heavyRoles     = 248
	heavyUserOvers = 250
)

// Who has access (GET /channels/{id}/access): a community of 250 roles,
// channels everyone can view, that one role held by 1% of the members can
// view, and that a few user overwrites open.
const (
	accessOpenChannel  = "access-open"  // no overwrites: everyone can view it
	accessRole         = "access"       // held by 1% of the seeded users
	accessRoleChannel  = "access-role"  // everyone denied VIEW_CHANNEL, the access role allowed it
	accessUsersChannel = "access-users" // everyone denied VIEW_CHANNEL, accessUserOvers users allowed it
	accessUserOvers    = 5
	accessRoles        = 250 // the roles an instance holds in all: docs/design.md's limit
)

// accessOverwrites are the overwrites of the access channels: everyone
// denied VIEW_CHANNEL, and the role or the users allowed it.
func accessOverwrites(role string, users []string) []overwriteSpec {
	ows := []overwriteSpec{{targetType: "everyone", allow: []string{}, deny: []string{"VIEW_CHANNEL"}}}
	if role != "" {
		ows = append(ows, overwriteSpec{targetType: "role", targetID: role, allow: []string{"VIEW_CHANNEL"}, deny: []string{}})
	}
	for _, u := range users {
		ows = append(ows, overwriteSpec{targetType: "user", targetID: u, allow: []string{"VIEW_CHANNEL"}, deny: []string{}})
	}
	return ows
}

type overwriteSpec struct {
	targetType  string // everyone, role, user
	targetID    string // role ID or user ID; empty for everyone
	allow, deny []string
}

func heavyRoleID(i int) string { return fmt.Sprintf("hr%03d", i) }

// heavyRolePerms are the permissions of heavy role i (1-based).
func heavyRolePerms(i int) []string { return []string{channelPerms[i%len(channelPerms)]} }

// benchOverwrites are the bench channel's overwrites.
func benchOverwrites() []overwriteSpec {
	return []overwriteSpec{
		{targetType: "everyone", allow: []string{}, deny: []string{"ADD_REACTIONS"}},
		{targetType: "role", targetID: benchRole, allow: []string{"MANAGE_MESSAGES"}, deny: []string{}},
	}
}

// heavyOverwrites are the heavy channel's overwrites: everyone, one per
// heavy role, and one per user of users (users[0] is the heavy user).
func heavyOverwrites(users []string) []overwriteSpec {
	n := len(channelPerms)
	ows := []overwriteSpec{{targetType: "everyone", allow: []string{}, deny: []string{"VIEW_CHANNEL"}}}
	for i := 1; i <= heavyRoles; i++ {
		ows = append(ows, overwriteSpec{targetType: "role", targetID: heavyRoleID(i),
			allow: []string{channelPerms[(i+1)%n]}, deny: []string{channelPerms[(i+4)%n]}})
	}
	for k, u := range users {
		if k == 0 {
			ows = append(ows, overwriteSpec{targetType: "user", targetID: u, allow: []string{"VIEW_CHANNEL"}, deny: []string{}})
			continue
		}
		ows = append(ows, overwriteSpec{targetType: "user", targetID: u,
			allow: []string{channelPerms[k%n]}, deny: []string{channelPerms[(k+5)%n]}})
	}
	return ows
}

// compactCount names a count of users in a target's name: 10k, 1m, 500.
func compactCount(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return fmt.Sprintf("%dm", n/1_000_000)
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	default:
		return fmt.Sprint(n)
	}
}

// searchPrefixes are the search prefixes of an instance of n users named
// prefix<i, 7 digits>: prefix and the first five digits, which 100 users
// share on every instance alike (0000000..0000099 share prefix00000), so
// a search finds as many on the smaller instance as on the bigger, and
// its page of 20 is full. Fewer than 100 users: the prefix alone.
// million_search_flood searches them all; million_search_users a sample
// (sampleSearches).
func searchPrefixes(prefix string, n int) []string {
	if n < 100 {
		return []string{prefix}
	}
	out := make([]string, n/100)
	for k := range out {
		out[k] = fmt.Sprintf("%s%05d", prefix, k)
	}
	return out
}

// searchSample is how many of an instance's prefixes million_search_users
// draws from: every prefix of the smaller instance, evenly spread over
// the bigger one's. Both instances then answer the same number of
// different searches, each matching 100 users, and what differs is the
// community searched; the flood, where the bigger instance has 100 times
// as many different searches to answer, is million_search_flood.
const searchSample = 100

// sampleSearches returns k of prefixes, evenly spread (all, when there
// are no more than k).
func sampleSearches(prefixes []string, k int) []string {
	if len(prefixes) <= k {
		return prefixes
	}
	out := make([]string, k)
	for i := range out {
		out[i] = prefixes[i*len(prefixes)/k]
	}
	return out
}

// listChannels are the IDs of the channels created beside the bench
// channel for list_channels.
func listChannels() []string {
	ids := make([]string, listChannelCount)
	for i := range ids {
		ids[i] = fmt.Sprintf("list-%02d", i+1)
	}
	return ids
}
