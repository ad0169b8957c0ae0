package permissions

import "time"

// StepKind names the rule of a Step (docs/design.md §11 "Explain").
type StepKind string

// Kinds of steps, in the order the rules apply.
const (
	StepOwner             StepKind = "owner"
	StepAdministrator     StepKind = "administrator"
	StepGlobal            StepKind = "global"
	StepRole              StepKind = "role"
	StepOverwriteEveryone StepKind = "overwrite_everyone"
	StepOverwriteRole     StepKind = "overwrite_role"
	StepOverwriteUser     StepKind = "overwrite_user"
	StepImplicit          StepKind = "implicit"
	StepTimeout           StepKind = "timeout"
)

// Effect says whether a Step grants or removes the permission.
type Effect string

// Effects of a step.
const (
	Allow Effect = "allow"
	Deny  Effect = "deny"
)

// Step is one rule that touched a permission.
type Step struct {
	Kind         StepKind
	Effect       Effect
	RoleID       string    // for StepRole and StepOverwriteRole
	FromCategory string    // for an overwrite step of a synced channel: the category it was copied from
	Until        time.Time // for StepTimeout: when the timeout ends
	Detail       string    // a short human sentence, e.g. "granted by role mods"
}

// Explanation says why a permission is granted or not.
type Explanation struct {
	Permission Permission
	Granted    bool
	Steps      []Step // in the order they apply; never nil
}

// Explain returns one Explanation per catalog permission in catalog order:
// base permissions when c is nil, else the channel-scoped permissions in c.
// Each lists the steps that touched the permission, in the order they apply,
// and Granted, which replays them and equals Base(s) or InChannel(s, *c).
//
//   - Owner: one owner step per permission.
//   - ADMINISTRATOR in base: the global and role steps that granted
//     ADMINISTRATOR itself (listed under ADMINISTRATOR, so only without a
//     channel), then one administrator step per permission.
//   - Otherwise: a global step, one role step per role that holds the
//     permission (in the order of s.Roles), and in a channel the overwrite
//     steps: everyone (deny, then allow); the subject's role overwrites
//     (every deny, then every allow, in the order of c.Roles, as step 4
//     merges them); the user's own (deny, then allow); then, for a subject
//     timed out, a timeout step for each permission the timeout cuts that
//     was held; and an implicit step when step 6 removes the permission.
//
// An overwrite that neither allows nor denies a permission is no step of
// it. The overwrite steps of a synced channel name the category they were
// copied from.
func Explain(s Subject, c *Channel) []Explanation {
	scope := All
	if c != nil {
		scope = ChannelScoped
	}
	out := make([]Explanation, 0, scope.Len())
	for _, p := range scope.Permissions() {
		out = append(out, Explanation{Permission: p, Steps: []Step{}})
	}

	switch {
	case s.IsOwner:
		detail := "the owner has every permission"
		for i := range out {
			out[i].add(Step{Kind: StepOwner, Effect: Allow, Detail: detail})
		}
	case Base(s).Has(Administrator):
		detail := "granted by ADMINISTRATOR"
		if c != nil {
			detail = "granted by ADMINISTRATOR, which bypasses channel overwrites"
		}
		for i := range out {
			if out[i].Permission == Administrator {
				out[i].addBase(s)
			}
			out[i].add(Step{Kind: StepAdministrator, Effect: Allow, Detail: detail})
		}
	default:
		for i := range out {
			out[i].addBase(s)
		}
		if c == nil {
			for i := range out {
				out[i].addTimeout(s)
			}
		} else {
			explainChannel(out, s, c)
		}
	}

	for i := range out {
		out[i].Granted = replay(out[i].Steps)
	}
	return out
}

// explainChannel adds the steps of docs/design.md §5 steps 3–6.
func explainChannel(out []Explanation, s Subject, c *Channel) {
	var roles roleIndex
	roles.init(s.Roles)
	var applicable []*RoleOverwrite
	for i := range c.Roles {
		if roles.contains(c.Roles[i].RoleID) {
			applicable = append(applicable, &c.Roles[i])
		}
	}

	var reached Set // the permissions held after step 5
	for i := range out {
		e := &out[i]
		p := e.Permission
		from := ""
		if c.SyncedFrom != "" {
			from = " (copied from category " + c.SyncedFrom + ")"
		}
		e.addOverwrite(c.Everyone, Step{Kind: StepOverwriteEveryone, FromCategory: c.SyncedFrom}, "the everyone overwrite"+from)
		for _, o := range applicable {
			if o.Deny.Has(p) {
				e.add(Step{Kind: StepOverwriteRole, Effect: Deny, RoleID: o.RoleID, FromCategory: c.SyncedFrom,
					Detail: "denied by the overwrite of role " + o.RoleID + from})
			}
		}
		for _, o := range applicable {
			if o.Allow.Has(p) {
				e.add(Step{Kind: StepOverwriteRole, Effect: Allow, RoleID: o.RoleID, FromCategory: c.SyncedFrom,
					Detail: "allowed by the overwrite of role " + o.RoleID + from})
			}
		}
		e.addOverwrite(c.User, Step{Kind: StepOverwriteUser}, "the user's own overwrite")
		e.addTimeout(s)
		if replay(e.Steps) {
			reached |= Of(p)
		}
	}

	for i := range out {
		if missing, ok := implicitCause(reached, out[i].Permission); ok {
			out[i].add(Step{Kind: StepImplicit, Effect: Deny,
				Detail: "removed: " + missing.String() + " is missing"})
		}
	}
}

func (e *Explanation) add(st Step) { e.Steps = append(e.Steps, st) }

// addTimeout adds the timeout step of a subject timed out, when the
// timeout cuts a permission the steps so far hold.
func (e *Explanation) addTimeout(s Subject) {
	if !s.TimedOut || TimeoutKeeps.Has(e.Permission) || !replay(e.Steps) {
		return
	}
	e.add(Step{Kind: StepTimeout, Effect: Deny, Until: s.TimeoutUntil,
		Detail: "removed: timed out until " + s.TimeoutUntil.UTC().Format(time.RFC3339)})
}

// addBase adds the global and role steps of e's permission.
func (e *Explanation) addBase(s Subject) {
	if s.Global.Has(e.Permission) {
		e.add(Step{Kind: StepGlobal, Effect: Allow, Detail: "granted by the global permissions"})
	}
	for _, r := range s.Roles {
		if r.Permissions.Has(e.Permission) {
			e.add(Step{Kind: StepRole, Effect: Allow, RoleID: r.ID, Detail: "granted by role " + r.ID})
		}
	}
}

// addOverwrite adds the deny and then the allow step of o, if any, to the
// template st.
func (e *Explanation) addOverwrite(o Overwrite, st Step, what string) {
	if o.Deny.Has(e.Permission) {
		st.Effect, st.Detail = Deny, "denied by "+what
		e.add(st)
	}
	if o.Allow.Has(e.Permission) {
		st.Effect, st.Detail = Allow, "allowed by "+what
		e.add(st)
	}
}

// replay applies steps in order: allow grants, deny removes.
func replay(steps []Step) bool {
	granted := false
	for _, st := range steps {
		granted = st.Effect == Allow
	}
	return granted
}
