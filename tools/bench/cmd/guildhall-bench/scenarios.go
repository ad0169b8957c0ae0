package main

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
)

// A scenario is one request shape, driven against every target of its
// group: the ceiling and Guildhall on each store, or (needs "million") the
// pairs of bulk-seeded instances, or (needs "history") the instances with
// a long audit log.
type scenario struct {
	name   string
	method string
	// path and body are templates: {id} (or {prefix}) and {uniq} change per
	// request; {heavy_user}, {light_user}, {cursor}, {hist_user} and {at}
	// are the target's fixtures.
	path, body string
	open       bool   // open loop at -rate, for latency; else closed loop with -conns
	needs      string // "perms", "access", "deep", "million" or "history": fixtures beyond the seeded users
	// conns, when set, is the closed loop's connections instead of -conns:
	// 1 measures what one answer costs, without queueing behind others.
	conns int
	// access: a million scenario that needs the access community too.
	access bool
	// keys is what {id} is drawn from: "" the seeded users' IDs,
	// "prefixes" the target's search prefixes, "searches" the sample of
	// them million_search_users draws from.
	keys string
	// skew, when set, draws the keys from a Zipf distribution of this
	// exponent (client.Source.Skewed) rather than uniformly.
	skew float64
	// writes, when set, is a request sent beside the scenario's in an open
	// loop at -mixed-rate on one connection; the scenario is then measured
	// alone and with the writes, round by round.
	writes *scenario
	// beside, when set, names a scenario measured on each target in every
	// round next to this one (before it in even rounds, after it in odd
	// ones): the million summary compares the two on the same instance,
	// round by round, so that a drift over the run (the machine, what
	// earlier scenarios left the server holding) weighs on both alike.
	beside string
	// variant is written into each record's variant: set on a scenario
	// measured beside another.
	variant string
}

// zipfSkew is the exponent of the skewed million scenarios. Among a
// million members the 1% most read take about four fifths of the reads
// (among ten thousand, two thirds), and the 20,000 most read 85%.
// Activity in online communities is commonly modelled with Zipf exponents
// near 1.
const zipfSkew = 1.1

const createBody = `{"username":"u{uniq}","display_name":"Bench {uniq}"}`

var createUser = scenario{name: "create_user", method: "POST", path: "/api/users", body: createBody}

var scenarios = []scenario{
	{name: "get_user", method: "GET", path: "/api/users/{id}"},
	{name: "get_perms", method: "GET", path: "/api/users/{id}/permissions"},
	{name: "get_perms_channel", method: "GET", path: "/api/users/{id}/permissions?channelID=" + benchChannel},
	{name: "get_channel", method: "GET", path: "/api/channels/" + benchChannel},
	{name: "list_users", method: "GET", path: "/api/users?limit=50"},
	// needs the perms setup: the ceiling lists the heavy and light channels too.
	{name: "list_channels", method: "GET", path: "/api/channels", needs: "perms"},
	{name: "perms_heavy", method: "GET", path: "/api/users/{heavy_user}/permissions?channelID=" + heavyChannel, needs: "perms"},
	{name: "perms_light", method: "GET", path: "/api/users/{light_user}/permissions?channelID=" + lightChannel, needs: "perms"},
	{name: "perms_heavy_explain", method: "GET", path: "/api/users/{heavy_user}/permissions?channelID=" + heavyChannel + "&explain=true", needs: "perms"},
	{name: "perms_light_explain", method: "GET", path: "/api/users/{light_user}/permissions?channelID=" + lightChannel + "&explain=true", needs: "perms"},
	{name: "list_overwrites_heavy", method: "GET", path: "/api/channels/" + heavyChannel + "/permissions", needs: "perms"},
	{name: "list_overwrites_light", method: "GET", path: "/api/channels/" + lightChannel + "/permissions", needs: "perms"},
	// need the perms setup and the access community beside it.
	{name: "access_open", method: "GET", path: "/api/channels/" + accessOpenChannel + "/access?limit=50", needs: "access"},
	{name: "access_role", method: "GET", path: "/api/channels/" + accessRoleChannel + "/access?limit=50", needs: "access"},
	{name: "access_users", method: "GET", path: "/api/channels/" + accessUsersChannel + "/access?limit=50", needs: "access"},
	{name: "mixed_get_user", method: "GET", path: "/api/users/{id}", writes: &createUser},
	createUser,
	{name: "latency_get_user", method: "GET", path: "/api/users/{id}", open: true},
	{name: "latency_create_user", method: "POST", path: "/api/users", body: createBody, open: true},
	{name: "page_1", method: "GET", path: "/api/users?limit=50", needs: "deep"},
	{name: "page_1000", method: "GET", path: "/api/users?limit=50&cursor={cursor}", needs: "deep"},
	{name: "million_get_user", method: "GET", path: "/api/users/{id}", needs: "million"},
	{name: "million_get_perms", method: "GET", path: "/api/users/{id}/permissions", needs: "million"},
	{name: "million_get_user_zipf", method: "GET", path: "/api/users/{id}", needs: "million", skew: zipfSkew},
	{name: "million_get_perms_zipf", method: "GET", path: "/api/users/{id}/permissions", needs: "million", skew: zipfSkew},
	{name: "million_list_users", method: "GET", path: "/api/users?limit=50", needs: "million"},
	{name: "million_search_users", method: "GET", path: "/api/users?limit=20&q={prefix}", needs: "million", keys: "searches"},
	{name: "million_search_flood", method: "GET", path: "/api/users?limit=20&q={prefix}", needs: "million", keys: "prefixes"},
	{name: "million_page_1000", method: "GET", path: "/api/users?limit=50&cursor={cursor}", needs: "million", beside: "million_list_users"},
	{name: "million_access_open", method: "GET", path: "/api/channels/" + accessOpenChannel + "/access?limit=50", needs: "million", access: true},
	{name: "million_access_role", method: "GET", path: "/api/channels/" + accessRoleChannel + "/access?limit=50", needs: "million", access: true},
	{name: "million_access_users", method: "GET", path: "/api/channels/" + accessUsersChannel + "/access?limit=50", needs: "million", access: true},
	// History answers (?at=) over a log of 100,000 events (history.go), one
	// request at a time: docs/performance.md's goal is each answer's median.
	{name: "history_perms_explain", method: "GET", path: "/api/users/{hist_user}/permissions?channelID=" + historyChannel + "&explain=true&at={at}", needs: "history", conns: 1},
	{name: "history_overwrites", method: "GET", path: "/api/channels/" + historyChannel + "/permissions?at={at}", needs: "history", conns: 1},
	{name: "history_roles", method: "GET", path: "/api/roles?at={at}", needs: "history", conns: 1},
}

var scenarioGroups = map[string][]string{
	"reads":   {"get_user", "get_perms", "get_perms_channel", "get_channel", "list_users", "list_channels"},
	"perms":   {"perms_heavy", "perms_light", "perms_heavy_explain", "perms_light_explain", "list_overwrites_heavy", "list_overwrites_light"},
	"latency": {"latency_get_user", "latency_create_user"},
	"access": {"access_open", "access_role", "access_users",
		"million_access_open", "million_access_role", "million_access_users"},
	"page_deep": {"page_1", "page_1000"},
	"million": {"million_get_user", "million_get_perms", "million_get_user_zipf", "million_get_perms_zipf",
		"million_list_users", "million_search_users", "million_search_flood", "million_page_1000"},
	"history": {"history_perms_explain", "history_overwrites", "history_roles"},
}

// groupNames lists the groups for messages.
const groupNames = "default, all, reads, perms, latency, page_deep, million, access, history"

// defaultScenarios is everything but page_deep, million, access and
// history (slow to seed).
const defaultScenarios = "reads,perms,mixed_get_user,create_user,latency"

// selectScenarios expands a comma-separated list of scenario and group
// names ("default" and "all" too) into scenarios, in the bench's order
// (reads, writes, then the deep pages, which seed more users, then the
// million and the history, on instances of their own).
func selectScenarios(list string) ([]scenario, error) {
	want := map[string]bool{}
	var expand func(name string, depth int) error
	expand = func(name string, depth int) error {
		name = strings.TrimSpace(name)
		switch {
		case name == "":
			return nil
		case depth > 3:
			return fmt.Errorf("scenario groups nest too deep at %q", name)
		case name == "default":
			for _, n := range strings.Split(defaultScenarios, ",") {
				if err := expand(n, depth+1); err != nil {
					return err
				}
			}
		case name == "all":
			for _, s := range scenarios {
				want[s.name] = true
			}
		case scenarioGroups[name] != nil:
			for _, n := range scenarioGroups[name] {
				want[n] = true
			}
		default:
			if !slices.ContainsFunc(scenarios, func(s scenario) bool { return s.name == name }) {
				return fmt.Errorf("unknown scenario %q (scenarios: %s; groups: %s)", name, scenarioNames(), groupNames)
			}
			want[name] = true
		}
		return nil
	}
	for _, n := range strings.Split(list, ",") {
		if err := expand(n, 0); err != nil {
			return nil, err
		}
	}
	var out []scenario
	for _, s := range scenarios {
		if want[s.name] {
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no scenario selected")
	}
	return out, nil
}

// scenarioNamed returns the scenario of that name.
func scenarioNamed(name string) (scenario, bool) {
	i := slices.IndexFunc(scenarios, func(s scenario) bool { return s.name == name })
	if i < 0 {
		return scenario{}, false
	}
	return scenarios[i], true
}

func scenarioNames() string {
	var names []string
	for _, s := range scenarios {
		names = append(names, s.name)
	}
	return strings.Join(names, ", ")
}

// fill puts the target's fixtures into a scenario's template, and returns
// the keys {id} is drawn from.
func (s scenario) fill(t *target) (path, body string, keys []string, err error) {
	r := strings.NewReplacer("{heavy_user}", t.heavyUser, "{light_user}", t.lightUser, "{cursor}", url.QueryEscape(t.deepCursor),
		"{hist_user}", t.histUser, "{at}", url.QueryEscape(t.histAt))
	switch {
	case s.needs == "history" && (t.histUser == "" || t.histAt == ""):
		return "", "", nil, fmt.Errorf("%s has no history fixtures", t.name)
	case (s.needs == "perms" || s.needs == "access") && (t.heavyUser == "" || t.lightUser == ""):
		return "", "", nil, fmt.Errorf("%s has no heavy/light fixtures", t.name)
	case strings.Contains(s.path, "{cursor}") && !t.deepReady:
		return "", "", nil, fmt.Errorf("%s has no deep cursor", t.name)
	case (s.keys == "prefixes" || s.keys == "searches") && len(t.prefixes) == 0:
		return "", "", nil, fmt.Errorf("%s has no search prefixes", t.name)
	}
	switch s.keys {
	case "prefixes":
		keys = t.prefixes
	case "searches":
		keys = t.searches
	default:
		keys = t.ids
	}
	return r.Replace(s.path), r.Replace(s.body), keys, nil
}
