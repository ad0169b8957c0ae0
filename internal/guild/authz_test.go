package guild_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/guildhall/guildhall/internal/apperr"
	"github.com/guildhall/guildhall/internal/guild"
	"github.com/guildhall/guildhall/internal/permissions"
	"github.com/guildhall/guildhall/internal/testenv"
)

// TestServiceChecksByTheTable: the service authorizes an operation by its
// row of the table, not by a copy of it: a row changed, the service refuses
// (or allows) what the new row says, for each way a row is checked (in a
// channel, in the base permissions, a read and a write, owner_only,
// self_or_owner). Alice holds mods (MANAGE_CHANNELS, MANAGE_MESSAGES,
// VIEW_CHANNEL, SEND_MESSAGES), less MANAGE_MESSAGES in channel ops.
func TestServiceChecksByTheTable(t *testing.T) {
	e := newAuthzEnv(t, testenv.SQLite)
	ctx := context.Background()
	alice, err := e.svc.Authenticate(ctx, e.alice)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name          string
		op            string
		need          permissions.Set
		rule          guild.Rule
		call          func() error
		before, after string // the refusal, as reason[missing]@channel; "" when allowed
	}{
		{"a channel's row", "getChannel", permissions.Of(permissions.ViewChannel, permissions.ManageMessages), "",
			func() error { _, err := e.svc.GetChannel(ctx, alice, "ops"); return err },
			"", "missing_permissions[MANAGE_MESSAGES]@ops"},
		{"a global row that required nothing", "getRole", permissions.Of(permissions.ManageUsers), "",
			func() error { _, err := e.svc.GetRole(ctx, alice, "mods"); return err },
			"", "missing_permissions[MANAGE_USERS]@"},
		{"a write's row, checked in its transaction", "replaceGlobalPermissions", permissions.Of(permissions.ManageChannels), "",
			func() error {
				global, _, err := e.svc.GlobalPermissions(ctx, alice)
				if err != nil {
					return err
				}
				_, _, err = e.svc.SetGlobalPermissions(ctx, alice, global, guild.WriteOpts{})
				return err
			},
			"missing_permissions[ADMINISTRATOR]@", ""},
		{"owner_only taken away", "exportTemplate", permissions.Of(permissions.ManageChannels), "",
			func() error { _, err := e.svc.ExportTemplate(ctx, alice); return err },
			"owner_only[]@", ""},
		{"self_or_owner become or_self", "listTokens", permissions.Of(permissions.ManageUsers), guild.RuleOrSelf,
			func() error { _, err := e.svc.ListTokens(ctx, alice, e.owner.UserID); return err },
			"self_or_owner_only[]@", "missing_permissions[MANAGE_USERS]@"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := refusal(tc.call()); got != tc.before {
				t.Fatalf("with the contract's row: %q, want %q", got, tc.before)
			}
			guild.SetRequirement(t, tc.op, tc.need, tc.rule)
			if got := refusal(tc.call()); got != tc.after {
				t.Errorf("with the row changed to %v %q: %q, want %q", tc.need.Names(), tc.rule, got, tc.after)
			}
		})
	}
}

// refusal is a 403 as reason[missing]@channel, "" for no error.
func refusal(err error) string {
	if err == nil {
		return ""
	}
	e, ok := apperr.As(err)
	if !ok || e.Forbidden == nil {
		return "not a 403: " + err.Error()
	}
	return fmt.Sprintf("%s%v@%s", e.Forbidden.Reason, e.Forbidden.Missing, e.Forbidden.Channel)
}
