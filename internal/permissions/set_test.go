package permissions_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/guildhall/guildhall/internal/permissions"
)

func TestCatalog(t *testing.T) {
	global := []permissions.Scope{permissions.ScopeGlobal}
	both := []permissions.Scope{permissions.ScopeGlobal, permissions.ScopeChannel}
	want := []struct {
		name   string
		scopes []permissions.Scope
	}{
		{"ADMINISTRATOR", global},
		{"MANAGE_USERS", global},
		{"MANAGE_ROLES", both},
		{"MANAGE_CHANNELS", both},
		{"VIEW_AUDIT_LOG", global},
		{"VIEW_CHANNEL", both},
		{"SEND_MESSAGES", both},
		{"READ_MESSAGE_HISTORY", both},
		{"ATTACH_FILES", both},
		{"MANAGE_MESSAGES", both},
		{"EMBED_LINKS", both},
		{"MENTION_EVERYONE", both},
		{"ADD_REACTIONS", both},
		{"MODERATE_MEMBERS", global},
		{"MANAGE_WEBHOOKS", global},
	}
	cat := permissions.Catalog()
	if len(cat) != len(want) || len(cat) != permissions.NumPermissions {
		t.Fatalf("catalog has %d entries, want %d", len(cat), len(want))
	}
	var channel permissions.Set
	for i, w := range want {
		t.Run(w.name, func(t *testing.T) {
			info := cat[i]
			if info.Permission != permissions.Permission(i) || info.Name != w.name {
				t.Errorf("entry %d = %v %q, want %d %q", i, info.Permission, info.Name, i, w.name)
			}
			if info.Permission.String() != w.name {
				t.Errorf("String() = %q, want %q", info.Permission.String(), w.name)
			}
			if !slices.Equal(info.Scopes, w.scopes) {
				t.Errorf("scopes = %v, want %v", info.Scopes, w.scopes)
			}
			d := info.Description
			if !strings.HasSuffix(d, ".") || strings.Count(d, ".") != 1 || d[0] < 'A' || d[0] > 'Z' {
				t.Errorf("description %q is not one sentence", d)
			}
			if p, ok := permissions.ByName(w.name); !ok || p != info.Permission {
				t.Errorf("ByName(%q) = %v, %v", w.name, p, ok)
			}
		})
		if slices.Contains(cat[i].Scopes, permissions.ScopeChannel) {
			channel |= permissions.Of(cat[i].Permission)
		}
	}
	if channel != permissions.ChannelScoped {
		t.Errorf("channel-scoped entries %v, ChannelScoped %v", channel, permissions.ChannelScoped)
	}
	if got := permissions.All.Len(); got != len(want) {
		t.Errorf("All holds %d permissions, want %d", got, len(want))
	}

	// Each call is a fresh copy.
	cat[0].Name, cat[2].Scopes[0] = "CHANGED", "changed"
	again := permissions.Catalog()
	if again[0].Name != "ADMINISTRATOR" || again[2].Scopes[0] != permissions.ScopeGlobal {
		t.Errorf("Catalog shares memory between calls")
	}
}

func TestByName(t *testing.T) {
	tests := []struct {
		name   string
		in     string
		want   permissions.Permission
		wantOK bool
	}{
		{"exact", "SEND_MESSAGES", permissions.SendMessages, true},
		{"first", "ADMINISTRATOR", permissions.Administrator, true},
		{"last", "MANAGE_WEBHOOKS", permissions.ManageWebhooks, true},
		{"lower case", "send_messages", 0, false},
		{"padded", " SEND_MESSAGES", 0, false},
		{"empty", "", 0, false},
		{"unknown", "FLY", 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := permissions.ByName(tc.in)
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("ByName(%q) = %v, %v; want %v, %v", tc.in, got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

func TestPermissionOutsideCatalog(t *testing.T) {
	p := permissions.Permission(permissions.NumPermissions)
	if p.Valid() || p.String() != "Permission(15)" || p.Scopes() != nil {
		t.Errorf("Permission(15): Valid %v, String %q, Scopes %v", p.Valid(), p.String(), p.Scopes())
	}
	if permissions.All.Has(p) || permissions.Set(^uint64(0)).Has(200) {
		t.Errorf("Has reports a permission outside the catalog")
	}
	if got := permissions.Of(p, 64, 255, permissions.ViewChannel); got != permissions.Of(permissions.ViewChannel) {
		t.Errorf("Of keeps permissions outside the catalog: %#x", uint64(got))
	}
}

func TestSetOperations(t *testing.T) {
	a := permissions.Of(view, send, react)
	b := permissions.Of(send, attach)
	stray := permissions.Set(1 << 40)
	tests := []struct {
		name string
		got  any
		want any
	}{
		{"Union", a.Union(b), permissions.Of(view, send, react, attach)},
		{"Minus", a.Minus(b), permissions.Of(view, react)},
		{"Intersect", a.Intersect(b), permissions.Of(send)},
		{"Has member", a.Has(view), true},
		{"Has non-member", a.Has(attach), false},
		{"HasAll subset", a.HasAll(permissions.Of(view, send)), true},
		{"HasAll not subset", a.HasAll(b), false},
		{"HasAll empty", permissions.Set(0).HasAll(0), true},
		{"HasAll ignores stray bits", a.HasAll(permissions.Of(view) | stray), true},
		{"IsEmpty empty", permissions.Set(0).IsEmpty(), true},
		{"IsEmpty non-empty", a.IsEmpty(), false},
		{"IsEmpty stray bits only", stray.IsEmpty(), true},
		{"Len", a.Len(), 3},
		{"Len ignores stray bits", (a | stray).Len(), 3},
		{"Len All", permissions.All.Len(), 15},
		{"Len ChannelScoped", permissions.ChannelScoped.Len(), 10},
		{"Permissions catalog order", permissions.Of(react, view, send).Permissions(), []permissions.Permission{view, send, react}},
		{"Permissions empty", permissions.Set(0).Permissions(), []permissions.Permission{}},
		{"String", permissions.Of(send, view).String(), "[VIEW_CHANNEL SEND_MESSAGES]"},
		{"Overwrite IsEmpty zero", permissions.Overwrite{}.IsEmpty(), true},
		{"Overwrite IsEmpty deny", permissions.Overwrite{Deny: a}.IsEmpty(), false},
		{"Overwrite IsEmpty stray", permissions.Overwrite{Allow: stray}.IsEmpty(), true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if !equal(tc.got, tc.want) {
				t.Errorf("got %v, want %v", tc.got, tc.want)
			}
		})
	}
}

func equal(a, b any) bool {
	switch a := a.(type) {
	case []permissions.Permission:
		b, ok := b.([]permissions.Permission)
		return ok && a != nil && slices.Equal(a, b)
	default:
		return a == b
	}
}

func TestNames(t *testing.T) {
	tests := []struct {
		name string
		set  permissions.Set
		want []string
	}{
		{"empty is an empty slice", 0, []string{}},
		{"stray bits only", 1<<15 | 1<<63, []string{}},
		{"catalog order, not insertion order", permissions.Of(react, admin, view, send), []string{"ADMINISTRATOR", "VIEW_CHANNEL", "SEND_MESSAGES", "ADD_REACTIONS"}},
		{"DefaultGlobal", permissions.DefaultGlobal, []string{"VIEW_CHANNEL", "SEND_MESSAGES", "READ_MESSAGE_HISTORY", "ATTACH_FILES", "EMBED_LINKS", "ADD_REACTIONS"}},
		{"All", permissions.All, refCatalog},
		{"ChannelScoped", permissions.ChannelScoped, []string{
			"MANAGE_ROLES", "MANAGE_CHANNELS", "VIEW_CHANNEL", "SEND_MESSAGES", "READ_MESSAGE_HISTORY",
			"ATTACH_FILES", "MANAGE_MESSAGES", "EMBED_LINKS", "MENTION_EVERYONE", "ADD_REACTIONS",
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.set.Names()
			if got == nil || !slices.Equal(got, tc.want) {
				t.Errorf("Names = %#v, want %#v", got, tc.want)
			}
		})
	}
}

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		in      []string
		want    permissions.Set        // of Parse when fine; of ParseAll always
		wantErr *permissions.NameError // first offender, for Parse
		wantAll []permissions.NameError
		message string
	}{
		{name: "nil", in: nil, want: 0},
		{name: "empty", in: []string{}, want: 0},
		{name: "any order", in: []string{"SEND_MESSAGES", "VIEW_CHANNEL"}, want: permissions.Of(view, send)},
		{name: "whole catalog", in: refCatalog, want: permissions.All},
		{
			name:    "unknown",
			in:      []string{"VIEW_CHANNEL", "FLY"},
			want:    permissions.Of(view),
			wantErr: &permissions.NameError{Index: 1, Name: "FLY", Reason: "unknown"},
			wantAll: []permissions.NameError{{Index: 1, Name: "FLY", Reason: "unknown"}},
			message: `unknown permission "FLY"`,
		},
		{
			name:    "case-sensitive",
			in:      []string{"view_channel"},
			wantErr: &permissions.NameError{Index: 0, Name: "view_channel", Reason: "unknown"},
			wantAll: []permissions.NameError{{Index: 0, Name: "view_channel", Reason: "unknown"}},
			message: `unknown permission "view_channel"`,
		},
		{
			name:    "empty name",
			in:      []string{""},
			wantErr: &permissions.NameError{Index: 0, Name: "", Reason: "unknown"},
			wantAll: []permissions.NameError{{Index: 0, Name: "", Reason: "unknown"}},
			message: `unknown permission ""`,
		},
		{
			name:    "duplicate points at the second occurrence",
			in:      []string{"VIEW_CHANNEL", "SEND_MESSAGES", "VIEW_CHANNEL"},
			want:    permissions.Of(view, send),
			wantErr: &permissions.NameError{Index: 2, Name: "VIEW_CHANNEL", Reason: "duplicate"},
			wantAll: []permissions.NameError{{Index: 2, Name: "VIEW_CHANNEL", Reason: "duplicate"}},
			message: `duplicate permission "VIEW_CHANNEL"`,
		},
		{
			name:    "several offenders: Parse names the first, ParseAll all in order",
			in:      []string{"ADD_REACTIONS", "FLY", "ADD_REACTIONS", "SEND_MESSAGES", "ADD_REACTIONS", "SWIM"},
			want:    permissions.Of(react, send),
			wantErr: &permissions.NameError{Index: 1, Name: "FLY", Reason: "unknown"},
			wantAll: []permissions.NameError{
				{Index: 1, Name: "FLY", Reason: "unknown"},
				{Index: 2, Name: "ADD_REACTIONS", Reason: "duplicate"},
				{Index: 4, Name: "ADD_REACTIONS", Reason: "duplicate"},
				{Index: 5, Name: "SWIM", Reason: "unknown"},
			},
			message: `unknown permission "FLY"`,
		},
		{
			name:    "a repeated unknown name stays unknown",
			in:      []string{"FLY", "FLY"},
			wantErr: &permissions.NameError{Index: 0, Name: "FLY", Reason: "unknown"},
			wantAll: []permissions.NameError{
				{Index: 0, Name: "FLY", Reason: "unknown"},
				{Index: 1, Name: "FLY", Reason: "unknown"},
			},
			message: `unknown permission "FLY"`,
		},
		{
			name:    "quoting of odd names",
			in:      []string{"A\"B\n"},
			wantErr: &permissions.NameError{Index: 0, Name: "A\"B\n", Reason: "unknown"},
			wantAll: []permissions.NameError{{Index: 0, Name: "A\"B\n", Reason: "unknown"}},
			message: `unknown permission "A\"B\n"`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := permissions.Parse(tc.in)
			if tc.wantErr == nil {
				if err != nil || got != tc.want {
					t.Fatalf("Parse = %v, %v; want %v, nil", got, err, tc.want)
				}
			} else {
				var ne *permissions.NameError
				if !errors.As(err, &ne) || *ne != *tc.wantErr {
					t.Fatalf("Parse error = %#v, want %#v", err, tc.wantErr)
				}
				if err.Error() != tc.message {
					t.Errorf("message = %q, want %q", err.Error(), tc.message)
				}
				if got != 0 {
					t.Errorf("Parse returned %v with an error", got)
				}
			}

			all, errs := permissions.ParseAll(tc.in)
			if all != tc.want {
				t.Errorf("ParseAll set = %v, want %v", all, tc.want)
			}
			if (errs == nil) != (tc.wantAll == nil) || len(errs) != len(tc.wantAll) {
				t.Fatalf("ParseAll errors = %v, want %v", errs, tc.wantAll)
			}
			for i := range errs {
				if *errs[i] != tc.wantAll[i] {
					t.Errorf("ParseAll error %d = %+v, want %+v", i, *errs[i], tc.wantAll[i])
				}
			}
		})
	}
}
