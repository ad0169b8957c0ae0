package httpapi_test

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/guildhall/guildhall/internal/guild"
	"github.com/guildhall/guildhall/internal/httpapi"
	"github.com/guildhall/guildhall/internal/permissions"
)

// authzRequirement is an operation's x-required-permissions.
type authzRequirement struct {
	Permissions []string
	// AnyOf: permissions at least one of which is needed besides (nil when
	// the operation declares none).
	AnyOf []string
	Scope string // global, channel or public
	Rule  string // "" or one of authzRules
	// Fields maps a request body member to the permissions it needs instead
	// of Permissions (patchUser's timeout_until: MODERATE_MEMBERS).
	Fields map[string][]string
	// Query maps a query parameter to the permissions it needs, when
	// given, besides Permissions (at, a history answer: VIEW_AUDIT_LOG).
	Query map[string][]string
}

// authzRule is what a rule of x-required-permissions obliges the operation's
// **Permission:** paragraph to say, and which permissions beyond the
// required ones the paragraph may then name.
type authzRule struct {
	phrases []string
	extra   []string
}

// authzRules is the vocabulary of x-required-permissions.rule; the contract's
// info.description documents each.
var authzRules = map[string]authzRule{
	"filtered_by_view_channel":              {phrases: []string{"filtered by `VIEW_CHANNEL`"}, extra: []string{"VIEW_CHANNEL"}},
	"grant_held":                            {phrases: []string{"held in the channel", "cannot_grant_unheld"}},
	"replace_others_needs_manage_messages":  {phrases: []string{"someone else's attachment also needs `MANAGE_MESSAGES`"}, extra: []string{"MANAGE_MESSAGES"}},
	"or_uploader":                           {phrases: []string{"the uploader, or"}, extra: []string{"VIEW_CHANNEL"}},
	"or_self":                               {phrases: []string{"the user themself, or"}},
	"hierarchy":                             {phrases: []string{"strictly below the caller's top role"}},
	"hierarchy_and_grant_held":              {phrases: []string{"below", "held by the caller"}},
	"user_hierarchy":                        {phrases: []string{"top role strictly below the caller's"}},
	"user_hierarchy_or_self_except_status":  {phrases: []string{"top role strictly below the caller's", "their own `username` or `display_name` needs", "their own `email` needs `MANAGE_USERS`", "never their own `status`"}},
	"self_or_owner":                         {phrases: []string{"the user themself, or the owner"}},
	"user_patch":                            {phrases: []string{"for `timeout_until`, `MODERATE_MEMBERS`", "their own `username` or", "their own `email` needs `MANAGE_USERS`", "never their own `status`"}},
	"moves_need_destination":                {phrases: []string{"in the destination category", "`lock_permissions`"}, extra: []string{"MANAGE_ROLES"}},
	"owner_only":                            {phrases: []string{"the owner alone"}},
	"email_visible_to_self_or_manage_users": {phrases: []string{"`email` is shown only"}, extra: []string{"MANAGE_USERS"}},
	"as_by_hand":                            {phrases: []string{"what making the change by hand needs"}},
}

var (
	authzPermissionParagraph = regexp.MustCompile(`(?s)\*\*Permission:\*\*(.*?)(?:\n\s*\n|$)`)
	authzBackticked          = regexp.MustCompile("`([A-Za-z_]+)`")
)

// authzContractOps lists the contract's operations, sorted by operationId.
func authzContractOps(t *testing.T) (*openapi3.T, []authzContractOp) {
	t.Helper()
	doc, err := httpapi.LoadContract()
	if err != nil {
		t.Fatal(err)
	}
	var ops []authzContractOp
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			ops = append(ops, authzContractOp{method: method, path: path, op: op})
		}
	}
	sort.Slice(ops, func(i, j int) bool { return ops[i].op.OperationID < ops[j].op.OperationID })
	return doc, ops
}

type authzContractOp struct {
	method, path string
	op           *openapi3.Operation
}

// authzRequirementOf decodes an operation's x-required-permissions.
func authzRequirementOf(op *openapi3.Operation) (authzRequirement, error) {
	raw, ok := op.Extensions["x-required-permissions"]
	if !ok {
		return authzRequirement{}, fmt.Errorf("no x-required-permissions")
	}
	m, ok := raw.(map[string]any)
	if !ok {
		return authzRequirement{}, fmt.Errorf("x-required-permissions is %T, want an object", raw)
	}
	var r authzRequirement
	for k, v := range m {
		switch k {
		case "permissions":
			list, ok := v.([]any)
			if !ok {
				return r, fmt.Errorf("permissions is %T, want an array", v)
			}
			r.Permissions = []string{}
			for _, p := range list {
				s, ok := p.(string)
				if !ok {
					return r, fmt.Errorf("permissions holds %T", p)
				}
				r.Permissions = append(r.Permissions, s)
			}
		case "any_of":
			list, ok := v.([]any)
			if !ok || len(list) < 2 {
				return r, fmt.Errorf("any_of is %v, want an array of at least two names", v)
			}
			for _, p := range list {
				s, ok := p.(string)
				if !ok {
					return r, fmt.Errorf("any_of holds %T", p)
				}
				r.AnyOf = append(r.AnyOf, s)
			}
		case "scope":
			r.Scope, _ = v.(string)
		case "rule":
			r.Rule, _ = v.(string)
		case "fields":
			fm, ok := v.(map[string]any)
			if !ok {
				return r, fmt.Errorf("fields is %T, want an object", v)
			}
			r.Fields = map[string][]string{}
			for field, list := range fm {
				perms, ok := list.([]any)
				if !ok || len(perms) == 0 {
					return r, fmt.Errorf("fields.%s is %v, want a non-empty array of names", field, list)
				}
				for _, p := range perms {
					name, ok := p.(string)
					if !ok {
						return r, fmt.Errorf("fields.%s holds %T", field, p)
					}
					r.Fields[field] = append(r.Fields[field], name)
				}
			}
		case "query":
			qm, ok := v.(map[string]any)
			if !ok {
				return r, fmt.Errorf("query is %T, want an object", v)
			}
			r.Query = map[string][]string{}
			for param, list := range qm {
				perms, ok := list.([]any)
				if !ok || len(perms) == 0 {
					return r, fmt.Errorf("query.%s is %v, want a non-empty array of names", param, list)
				}
				for _, p := range perms {
					name, ok := p.(string)
					if !ok {
						return r, fmt.Errorf("query.%s holds %T", param, p)
					}
					r.Query[param] = append(r.Query[param], name)
				}
			}
		default:
			return r, fmt.Errorf("unknown member %q", k)
		}
	}
	if r.Permissions == nil {
		return r, fmt.Errorf("permissions is missing")
	}
	return r, nil
}

// authzBodyHasMember says whether op's JSON request body has the member.
func authzBodyHasMember(op *openapi3.Operation, member string) bool {
	if op.RequestBody == nil || op.RequestBody.Value == nil {
		return false
	}
	for _, mt := range op.RequestBody.Value.Content {
		if mt.Schema != nil && mt.Schema.Value != nil && mt.Schema.Value.Properties[member] != nil {
			return true
		}
	}
	return false
}

// TestContractRequiredPermissionsAgreeWithDescriptions checks, for every
// operation, that x-required-permissions is well formed and that the
// description's **Permission:** paragraph says the same thing.
func TestContractRequiredPermissionsAgreeWithDescriptions(t *testing.T) {
	doc, ops := authzContractOps(t)
	if len(ops) < 40 {
		t.Fatalf("the contract has %d operations; expected the whole API", len(ops))
	}
	usedRules := map[string]bool{}
	for _, c := range ops {
		t.Run(c.op.OperationID, func(t *testing.T) {
			req, err := authzRequirementOf(c.op)
			if err != nil {
				t.Fatalf("%s %s: %v", c.method, c.path, err)
			}
			usedRules[req.Rule] = true
			paras := authzPermissionParagraph.FindAllStringSubmatch(c.op.Description, -1)
			if len(paras) != 1 {
				t.Fatalf("the description has %d **Permission:** paragraphs, want 1:\n%s", len(paras), c.op.Description)
			}
			para := strings.Join(strings.Fields(paras[0][1]), " ") // unwrap lines
			security := doc.Security
			if c.op.Security != nil {
				security = *c.op.Security
			}

			// Scope.
			switch req.Scope {
			case "public":
				if len(security) != 0 {
					t.Errorf("scope public but the operation declares security %v", security)
				}
				if len(req.Permissions) != 0 || req.Rule != "" {
					t.Errorf("scope public with permissions %v / rule %q", req.Permissions, req.Rule)
				}
				if !strings.HasPrefix(para, "none") || !strings.Contains(para, "no token") {
					t.Errorf("scope public: the paragraph should say no token is needed: %q", para)
				}
			case "global", "channel":
				if len(security) == 0 {
					t.Errorf("scope %s but the operation needs no token (security: [])", req.Scope)
				}
				inChannel := strings.Contains(para, "in the channel")
				if req.Scope == "channel" {
					if !strings.Contains(c.path, "{channelID}") {
						t.Errorf("scope channel on a path without {channelID}")
					}
					if !inChannel {
						t.Errorf("scope channel: the paragraph should say the check is made in the channel: %q", para)
					}
					for _, p := range req.Permissions {
						if perm, ok := permissions.ByName(p); ok && !permissions.ChannelScoped.Has(perm) {
							t.Errorf("scope channel requires %s, which is not channel-scoped", p)
						}
					}
				} else if inChannel {
					t.Errorf("scope global but the paragraph speaks of a check in the channel: %q", para)
				}
			default:
				t.Errorf("scope %q, want global, channel or public", req.Scope)
			}

			// Permissions: known, in catalog order, each named in the paragraph.
			var set permissions.Set
			for _, p := range req.Permissions {
				perm, ok := permissions.ByName(p)
				if !ok {
					t.Errorf("x-required-permissions names unknown permission %q", p)
					continue
				}
				set = set.Union(permissions.Of(perm))
				if !strings.Contains(para, "`"+p+"`") {
					t.Errorf("requires %s but the paragraph does not name it: %q", p, para)
				}
			}
			if got := set.Names(); !slices.Equal(got, req.Permissions) {
				t.Errorf("permissions %v are not in catalog order without duplicates (want %v)", req.Permissions, got)
			}
			// AnyOf: known, in catalog order, each named in the paragraph,
			// which says that one of them will do.
			var anyOf permissions.Set
			for _, p := range req.AnyOf {
				perm, ok := permissions.ByName(p)
				if !ok {
					t.Errorf("any_of names unknown permission %q", p)
					continue
				}
				anyOf = anyOf.Union(permissions.Of(perm))
				if !strings.Contains(para, "`"+p+"`") {
					t.Errorf("any_of holds %s but the paragraph does not name it: %q", p, para)
				}
			}
			if got := anyOf.Names(); len(req.AnyOf) > 0 && !slices.Equal(got, req.AnyOf) {
				t.Errorf("any_of %v is not in catalog order without duplicates (want %v)", req.AnyOf, got)
			}
			if len(req.AnyOf) > 0 && !strings.Contains(para, "either `") && !strings.Contains(para, "one of `") {
				t.Errorf("any_of: the paragraph should say that either permission will do: %q", para)
			}
			if req.Scope == "public" && len(req.AnyOf) > 0 {
				t.Errorf("scope public with any_of %v", req.AnyOf)
			}
			if len(req.Permissions) == 0 && len(req.AnyOf) == 0 && req.Scope != "public" && !strings.HasPrefix(para, "any authenticated user") &&
				!strings.HasPrefix(para, "the user themself") && !strings.HasPrefix(para, "the owner alone") {
				t.Errorf("requires no permission, so the paragraph should start with who may call: %q", para)
			}

			// Fields: members of the request body, their permissions known
			// and named in the paragraph beside the member.
			allowed := slices.Concat(req.Permissions, req.AnyOf)
			for field, perms := range req.Fields {
				if !authzBodyHasMember(c.op, field) {
					t.Errorf("fields names %q, which the request body does not take", field)
				}
				if !strings.Contains(para, "`"+field+"`") {
					t.Errorf("fields names %q but the paragraph does not: %q", field, para)
				}
				for _, p := range perms {
					if _, ok := permissions.ByName(p); !ok {
						t.Errorf("fields.%s names unknown permission %q", field, p)
					}
					if !strings.Contains(para, "`"+p+"`") {
						t.Errorf("fields.%s requires %s but the paragraph does not name it: %q", field, p, para)
					}
					allowed = append(allowed, p)
				}
			}

			// Query: parameters of the operation, their permissions known
			// and named in the paragraph beside the parameter.
			for param, perms := range req.Query {
				if !authzHasQueryParam(c.op, param) {
					t.Errorf("query names %q, which the operation does not take", param)
				}
				if !strings.Contains(para, "`"+param+"`") {
					t.Errorf("query names %q but the paragraph does not: %q", param, para)
				}
				for _, p := range perms {
					if _, ok := permissions.ByName(p); !ok {
						t.Errorf("query.%s names unknown permission %q", param, p)
					}
					if !strings.Contains(para, "`"+p+"`") {
						t.Errorf("query.%s requires %s but the paragraph does not name it: %q", param, p, para)
					}
					allowed = append(allowed, p)
				}
			}

			// Rule: known, its phrases present; no other permission named.
			if req.Rule != "" {
				rule, ok := authzRules[req.Rule]
				if !ok {
					t.Fatalf("unknown rule %q", req.Rule)
				}
				for _, ph := range rule.phrases {
					if !strings.Contains(para, ph) {
						t.Errorf("rule %s: the paragraph should say %q: %q", req.Rule, ph, para)
					}
				}
				allowed = append(allowed, rule.extra...)
			}
			for _, m := range authzBackticked.FindAllStringSubmatch(para, -1) {
				if _, isPerm := permissions.ByName(m[1]); isPerm && !slices.Contains(allowed, m[1]) {
					t.Errorf("the paragraph names %s, which neither x-required-permissions nor its rule %q accounts for: %q",
						m[1], req.Rule, para)
				}
			}
			if strings.Contains(para, "(global)") && req.Scope != "global" {
				t.Errorf("the paragraph says (global) but the scope is %s", req.Scope)
			}
		})
	}
	// Every rule in use is documented for the contract's readers.
	for rule := range usedRules {
		if rule != "" && !strings.Contains(doc.Info.Description, "`"+rule+"`") {
			t.Errorf("rule %q is used but info.description does not explain it", rule)
		}
	}
	for rule := range authzRules {
		if !usedRules[rule] {
			t.Errorf("rule %q is known to this test but no operation uses it", rule)
		}
	}
}

// TestRequirementsTableAgreesWithContract checks the domain's table of
// requirements (guild.Requirements), by which the service authorizes every
// operation, against the contract's x-required-permissions: one row per
// operation, none for an operation the contract lacks, and each row saying
// what the contract says (permissions, scope, rule, fields). A HEAD
// operation's row is its GET's: one method serves both.
func TestRequirementsTableAgreesWithContract(t *testing.T) {
	_, ops := authzContractOps(t)
	rows := map[string]guild.Requirement{}
	for _, r := range guild.Requirements() {
		if _, dup := rows[r.OperationID]; dup {
			t.Errorf("the table has two rows for %s", r.OperationID)
		}
		rows[r.OperationID] = r
	}
	byPath := map[string]guild.Requirement{} // the GET rows, by path
	for _, c := range ops {
		if c.method == "GET" {
			byPath[c.path] = rows[c.op.OperationID]
		}
	}
	for _, c := range ops {
		id := c.op.OperationID
		t.Run(id, func(t *testing.T) {
			want, err := authzRequirementOf(c.op)
			if err != nil {
				t.Fatal(err)
			}
			row, ok := rows[id]
			if !ok {
				t.Fatalf("the table has no row for %s %s", c.method, c.path)
			}
			delete(rows, id)
			if got := row.Permissions.Names(); !slices.Equal(got, want.Permissions) {
				t.Errorf("permissions: the table says %v, the contract %v", got, want.Permissions)
			}
			if got := row.AnyOf.Names(); !slices.Equal(got, authzNonNilList(want.AnyOf)) {
				t.Errorf("any_of: the table says %v, the contract %v", got, want.AnyOf)
			}
			if string(row.Scope) != want.Scope {
				t.Errorf("scope: the table says %q, the contract %q", row.Scope, want.Scope)
			}
			if string(row.Rule) != want.Rule {
				t.Errorf("rule: the table says %q, the contract %q", row.Rule, want.Rule)
			}
			if got := authzFieldNames(row); fmt.Sprint(got) != fmt.Sprint(authzNonNil(want.Fields)) {
				t.Errorf("fields: the table says %v, the contract %v", got, want.Fields)
			}
			if got := authzQueryNames(row); fmt.Sprint(got) != fmt.Sprint(authzNonNil(want.Query)) {
				t.Errorf("query: the table says %v, the contract %v", got, want.Query)
			}
			if get := byPath[c.path]; c.method == "HEAD" && authzRowString(row) != authzRowString(get) {
				t.Errorf("the row of HEAD %s differs from its GET's (%s): one method serves both", c.path, get.OperationID)
			}
		})
	}
	for id := range rows {
		t.Errorf("the table has a row for %s, which the contract does not have", id)
	}
}

func authzNonNilList(l []string) []string {
	if l == nil {
		return []string{}
	}
	return l
}

func authzNonNil(m map[string][]string) map[string][]string {
	if m == nil {
		return map[string][]string{}
	}
	return m
}

// authzRowString is what a row requires, without its operation's name.
func authzRowString(r guild.Requirement) string {
	return fmt.Sprint(r.Permissions.Names(), r.AnyOf.Names(), r.Scope, r.Rule, authzFieldNames(r), authzQueryNames(r))
}

func authzQueryNames(r guild.Requirement) map[string][]string {
	out := map[string][]string{}
	for param, need := range r.Query {
		out[param] = need.Names()
	}
	return out
}

// authzHasQueryParam says whether op (or its path) takes the query parameter.
func authzHasQueryParam(op *openapi3.Operation, name string) bool {
	for _, p := range op.Parameters {
		if p.Value != nil && p.Value.In == "query" && p.Value.Name == name {
			return true
		}
	}
	return false
}

func authzFieldNames(r guild.Requirement) map[string][]string {
	out := map[string][]string{}
	for field, need := range r.Fields {
		out[field] = need.Names()
	}
	return out
}
