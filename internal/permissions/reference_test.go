package permissions_test

import (
	"maps"
	"slices"
	"testing"

	"github.com/guildhall/guildhall/internal/permissions"
)

// A naive reference implementation of docs/design.md §5 over sets of names, written
// apart from the package so that it shares none of its bit logic. Inputs are
// made of raw uint64 masks: the engine receives them as Sets, and the
// reference decodes them into names with its own copy of the catalog.

// refCatalog is the catalog in docs/design.md §5 order.
var refCatalog = []string{
	"ADMINISTRATOR", "MANAGE_USERS", "MANAGE_ROLES", "MANAGE_CHANNELS",
	"VIEW_AUDIT_LOG", "VIEW_CHANNEL", "SEND_MESSAGES", "READ_MESSAGE_HISTORY",
	"ATTACH_FILES", "MANAGE_MESSAGES", "EMBED_LINKS", "MENTION_EVERYONE",
	"ADD_REACTIONS", "MODERATE_MEMBERS", "MANAGE_WEBHOOKS",
}

// refGlobalOnly are the names whose only scope is global.
var refGlobalOnly = nameSet{"ADMINISTRATOR": true, "MANAGE_USERS": true, "VIEW_AUDIT_LOG": true, "MODERATE_MEMBERS": true, "MANAGE_WEBHOOKS": true}

// refTimeoutKeeps is what a member timed out keeps at most.
var refTimeoutKeeps = nameSet{"VIEW_CHANNEL": true, "READ_MESSAGE_HISTORY": true}

// cut keeps in p only what keep holds.
func (p nameSet) cut(keep nameSet) {
	for n := range p {
		if !keep[n] {
			delete(p, n)
		}
	}
}

type nameSet map[string]bool

// names decodes a raw mask: bit i is refCatalog[i]; other bits mean nothing.
func names(mask uint64) nameSet {
	out := nameSet{}
	for i, n := range refCatalog {
		if mask&(1<<i) != 0 {
			out[n] = true
		}
	}
	return out
}

func (s nameSet) sorted() []string {
	return slices.Sorted(maps.Keys(s))
}

func refAll() nameSet { return names(^uint64(0)) }

func refChannelScoped() nameSet {
	out := nameSet{}
	for _, n := range refCatalog {
		if !refGlobalOnly[n] {
			out[n] = true
		}
	}
	return out
}

type rawRole struct {
	id    string
	perms uint64
}

type rawOverwrite struct {
	roleID      string
	allow, deny uint64
}

// rawCase is one input to both implementations.
type rawCase struct {
	owner          bool
	timedOut       bool
	global         uint64
	roles          []rawRole
	everyone, user rawOverwrite
	overwrites     []rawOverwrite // of roles, held or not
}

func (rc rawCase) subject() permissions.Subject {
	s := permissions.Subject{IsOwner: rc.owner, Global: permissions.Set(rc.global), TimedOut: rc.timedOut}
	for _, r := range rc.roles {
		s.Roles = append(s.Roles, permissions.Role{ID: r.id, Permissions: permissions.Set(r.perms)})
	}
	return s
}

func (rc rawCase) channel() permissions.Channel {
	ow := func(o rawOverwrite) permissions.Overwrite {
		return permissions.Overwrite{Allow: permissions.Set(o.allow), Deny: permissions.Set(o.deny)}
	}
	c := permissions.Channel{Everyone: ow(rc.everyone), User: ow(rc.user)}
	for _, o := range rc.overwrites {
		c.Roles = append(c.Roles, permissions.RoleOverwrite{RoleID: o.roleID, Overwrite: ow(o)})
	}
	return c
}

// refBase: global ∪ each role's permissions; everything for the owner and
// for holders of ADMINISTRATOR; for anyone else timed out, at most
// VIEW_CHANNEL and READ_MESSAGE_HISTORY.
func refBase(rc rawCase) nameSet {
	if rc.owner {
		return refAll()
	}
	p := names(rc.global)
	for _, r := range rc.roles {
		maps.Copy(p, names(r.perms))
	}
	if p["ADMINISTRATOR"] {
		return refAll()
	}
	if rc.timedOut {
		p.cut(refTimeoutKeeps)
	}
	return p
}

// refApply is p = (p − deny) ∪ allow, limited to channel-scoped names.
func refApply(p, deny, allow nameSet) {
	for n := range deny {
		delete(p, n)
	}
	for n := range allow {
		if !refGlobalOnly[n] {
			p[n] = true
		}
	}
}

func refInChannel(rc rawCase) nameSet {
	base := refBase(rc)
	if rc.owner || base["ADMINISTRATOR"] {
		return refChannelScoped()
	}
	p := nameSet{}
	for n := range base {
		if !refGlobalOnly[n] {
			p[n] = true
		}
	}
	refApply(p, names(rc.everyone.deny), names(rc.everyone.allow))

	held := map[string]bool{}
	for _, r := range rc.roles {
		held[r.id] = true
	}
	deny, allow := nameSet{}, nameSet{}
	for _, o := range rc.overwrites {
		if held[o.roleID] {
			maps.Copy(deny, names(o.deny))
			maps.Copy(allow, names(o.allow))
		}
	}
	refApply(p, deny, allow)

	refApply(p, names(rc.user.deny), names(rc.user.allow))
	if rc.timedOut {
		p.cut(refTimeoutKeeps)
	}

	if !p["VIEW_CHANNEL"] {
		return nameSet{}
	}
	if !p["SEND_MESSAGES"] {
		delete(p, "ATTACH_FILES")
		delete(p, "EMBED_LINKS")
		delete(p, "MENTION_EVERYONE")
	}
	return p
}

// checkAgainstReference compares Base, InChannel and Explain with the
// reference for one case.
func checkAgainstReference(t *testing.T, rc rawCase) {
	t.Helper()
	s, c := rc.subject(), rc.channel()

	base := permissions.Base(s)
	if uint64(base)>>len(refCatalog) != 0 {
		t.Fatalf("Base = %#x holds bits outside the catalog", uint64(base))
	}
	if got, want := names(uint64(base)).sorted(), refBase(rc).sorted(); !slices.Equal(got, want) {
		t.Fatalf("Base = %v, reference %v (case %+v)", got, want, rc)
	}

	in := permissions.InChannel(s, c)
	if uint64(in)>>len(refCatalog) != 0 {
		t.Fatalf("InChannel = %#x holds bits outside the catalog", uint64(in))
	}
	if got, want := names(uint64(in)).sorted(), refInChannel(rc).sorted(); !slices.Equal(got, want) {
		t.Fatalf("InChannel = %v, reference %v (case %+v)", got, want, rc)
	}

	checkExplain(t, permissions.Explain(s, nil), base, permissions.All)
	checkExplain(t, permissions.Explain(s, &c), in, permissions.ChannelScoped)
}

// checkExplain checks that ex covers scope in catalog order and that each
// Granted agrees with want and with a replay of its steps.
func checkExplain(t *testing.T, ex []permissions.Explanation, want, scope permissions.Set) {
	t.Helper()
	if got := len(ex); got != scope.Len() {
		t.Fatalf("Explain gave %d explanations, want %d", got, scope.Len())
	}
	for i, p := range scope.Permissions() {
		e := ex[i]
		if e.Permission != p {
			t.Fatalf("explanation %d is %v, want %v", i, e.Permission, p)
		}
		if e.Granted != want.Has(p) {
			t.Fatalf("%v: Granted = %v, engine says %v (steps %+v)", p, e.Granted, want.Has(p), e.Steps)
		}
		replayed := false
		for _, st := range e.Steps {
			replayed = st.Effect == permissions.Allow
		}
		if replayed != e.Granted {
			t.Fatalf("%v: steps replay to %v, Granted = %v", p, replayed, e.Granted)
		}
		if e.Steps == nil {
			t.Fatalf("%v: Steps is nil", p)
		}
	}
}
