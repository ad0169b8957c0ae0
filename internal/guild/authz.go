package guild

import (
	"fmt"
	"maps"

	"github.com/guildhall/guildhall/internal/apperr"
	"github.com/guildhall/guildhall/internal/permissions"
)

// Authorization is declared per operation, here: the table below has one
// row per operation of the contract, keyed by its operationId, saying what
// the contract's x-required-permissions says (a test in internal/httpapi
// holds the two equal). The service checks an operation by its row: each
// method serving one calls authorize or authorizeOn with it, which read the
// row, and the contextual rules a row names (rules.go) read the row too for
// the permissions they check beyond it. A row that requires nothing is
// checked first thing; any other where docs/design.md §11 puts a 403,
// after the 400s and the 404 of the path's resource.
//
// A HEAD operation is served by its GET's method, and legacyAddRoleUser and
// legacyRemoveRoleUser by assignUserRole's and removeUserRole's: they are
// checked by their twin's row, which a test holds equal to theirs. The
// public operations (the contract itself) are served without the service.

// Scope is where an operation's permissions are checked, as the contract
// names it.
type Scope string

const (
	ScopePublic  Scope = "public"  // nothing: no token is needed
	ScopeGlobal  Scope = "global"  // in the caller's base permissions
	ScopeChannel Scope = "channel" // in the caller's effective permissions in the path's channel
)

// Rule is a condition an operation applies beyond its permissions, from
// what it acts on, as the contract names it. Each is checked in rules.go,
// by the functions named beside it.
type Rule string

const (
	RuleFilteredByViewChannel            Rule = "filtered_by_view_channel"              // listing
	RuleGrantHeld                        Rule = "grant_held"                            // canGrantIn
	RuleReplaceOthersNeedsManageMessages Rule = "replace_others_needs_manage_messages"  // canUpload
	RuleOrUploader                       Rule = "or_uploader"                           // canDeleteUpload
	RuleOrSelf                           Rule = "or_self"                               // authorizeOn
	RuleHierarchy                        Rule = "hierarchy"                             // canManageRole, canMoveRoleTo
	RuleHierarchyAndGrantHeld            Rule = "hierarchy_and_grant_held"              // canManageRole, canCreateRole, canChangeRolesOf, canGrant, canDeleteRole
	RuleUserHierarchy                    Rule = "user_hierarchy"                        // canManageUser
	RuleUserHierarchyOrSelfExceptStatus  Rule = "user_hierarchy_or_self_except_status"  // canEditUser
	RuleUserPatch                        Rule = "user_patch"                            // canEditUser, canTimeOut
	RuleMovesNeedDestination             Rule = "moves_need_destination"                // canMove
	RuleOwnerOnly                        Rule = "owner_only"                            // authorize
	RuleSelfOrOwner                      Rule = "self_or_owner"                         // authorizeOn
	RuleEmailVisibleToSelfOrManageUsers  Rule = "email_visible_to_self_or_manage_users" // hideEmail, seesEmails
	RuleAsByHand                         Rule = "as_by_hand"                            // internal/revert, by the operation that makes the change
)

// Requirement is what an operation requires.
type Requirement struct {
	OperationID string          // the contract's
	Permissions permissions.Set // all of them, checked as Scope says
	// AnyOf: when not empty, at least one of them is needed as well, in
	// the base permissions (listChannelAccess: MANAGE_ROLES or
	// VIEW_AUDIT_LOG).
	AnyOf permissions.Set
	Scope Scope
	Rule  Rule // "" for none
	// Fields are the request body's members that need other permissions
	// than Permissions (patchUser's timeout_until).
	Fields map[string]permissions.Set
	// Query are the query parameters that, when given, need permissions
	// besides the operation's, in the base permissions (at, a history
	// answer: VIEW_AUDIT_LOG).
	Query map[string]permissions.Set
}

// Op is an operation of the contract: its row of the table.
type Op struct{ *Requirement }

// The permissions of the rows.
var (
	none            permissions.Set
	administrator   = permissions.Of(permissions.Administrator)
	attachFiles     = permissions.Of(permissions.AttachFiles)
	manageChannels  = permissions.Of(permissions.ManageChannels)
	manageMessages  = permissions.Of(permissions.ManageMessages)
	manageRoles     = permissions.Of(permissions.ManageRoles)
	manageUsers     = permissions.Of(permissions.ManageUsers)
	moderateMembers = permissions.Of(permissions.ModerateMembers)
	viewAuditLog    = permissions.Of(permissions.ViewAuditLog)
	viewChannel     = permissions.Of(permissions.ViewChannel)
	// A webhook delivers the audit log: managing one needs reading it.
	manageWebhooks = permissions.Of(permissions.ViewAuditLog, permissions.ManageWebhooks)
)

// The table: operationId, permissions, scope, rule (and fields).
var (
	opGetOpenAPIYAML  = row("getOpenAPIYAML", none, ScopePublic, "")
	opHeadOpenAPIYAML = row("headOpenAPIYAML", none, ScopePublic, "")
	opGetOpenAPIJSON  = row("getOpenAPIJSON", none, ScopePublic, "")
	opHeadOpenAPIJSON = row("headOpenAPIJSON", none, ScopePublic, "")

	opListChannels          = row("listChannels", none, ScopeGlobal, RuleFilteredByViewChannel)
	opHeadChannels          = row("headChannels", none, ScopeGlobal, RuleFilteredByViewChannel)
	opReorderChannels       = row("reorderChannels", manageChannels, ScopeGlobal, "")
	opGetChannel            = row("getChannel", viewChannel, ScopeChannel, "")
	opHeadChannel           = row("headChannel", viewChannel, ScopeChannel, "")
	opUpdateChannel         = row("updateChannel", manageChannels, ScopeChannel, RuleMovesNeedDestination)
	opCreateChannel         = row("createChannel", manageChannels, ScopeGlobal, "")
	opRenameChannel         = row("renameChannel", manageChannels, ScopeChannel, "")
	opDeleteChannel         = row("deleteChannel", manageChannels, ScopeChannel, "")
	OpListChannelAccess     = row("listChannelAccess", none, ScopeGlobal, RuleEmailVisibleToSelfOrManageUsers).anyOf(manageRoles|viewAuditLog).query("at", viewAuditLog)
	opHeadChannelAccess     = row("headChannelAccess", none, ScopeGlobal, RuleEmailVisibleToSelfOrManageUsers).anyOf(manageRoles|viewAuditLog).query("at", viewAuditLog)
	OpListChannelOverwrites = row("listChannelOverwrites", viewChannel, ScopeChannel, "").query("at", viewAuditLog)
	opHeadChannelOverwrites = row("headChannelOverwrites", viewChannel, ScopeChannel, "").query("at", viewAuditLog)
	opSetChannelOverwrite   = row("setChannelOverwrite", manageRoles, ScopeChannel, RuleGrantHeld)

	opListAttachments  = row("listAttachments", viewChannel, ScopeChannel, "")
	opHeadAttachments  = row("headAttachments", viewChannel, ScopeChannel, "")
	opGetAttachment    = row("getAttachment", viewChannel, ScopeChannel, "")
	opHeadAttachment   = row("headAttachment", viewChannel, ScopeChannel, "")
	opPutAttachment    = row("putAttachment", attachFiles, ScopeChannel, RuleReplaceOthersNeedsManageMessages)
	opDeleteAttachment = row("deleteAttachment", manageMessages, ScopeChannel, RuleOrUploader)

	opListPermissions          = row("listPermissions", none, ScopeGlobal, "")
	opHeadPermissions          = row("headPermissions", none, ScopeGlobal, "")
	opGetGlobalPermissions     = row("getGlobalPermissions", none, ScopeGlobal, "")
	opHeadGlobalPermissions    = row("headGlobalPermissions", none, ScopeGlobal, "")
	opReplaceGlobalPermissions = row("replaceGlobalPermissions", administrator, ScopeGlobal, "")
	opPreviewPermissions       = row("previewPermissions", manageRoles, ScopeGlobal, RuleHierarchy)
	OpGetUserPermissions       = row("getUserPermissions", manageRoles, ScopeGlobal, RuleOrSelf).query("at", viewAuditLog)
	opHeadUserPermissions      = row("headUserPermissions", manageRoles, ScopeGlobal, RuleOrSelf).query("at", viewAuditLog)

	opExportTemplate     = row("exportTemplate", none, ScopeGlobal, RuleOwnerOnly)
	opHeadExportTemplate = row("headExportTemplate", none, ScopeGlobal, RuleOwnerOnly)
	opImportTemplate     = row("importTemplate", none, ScopeGlobal, RuleOwnerOnly)

	OpListRoles                   = row("listRoles", none, ScopeGlobal, "").query("at", viewAuditLog)
	opHeadRoles                   = row("headRoles", none, ScopeGlobal, "").query("at", viewAuditLog)
	opGetRole                     = row("getRole", none, ScopeGlobal, "")
	opHeadRole                    = row("headRole", none, ScopeGlobal, "")
	opUpdateRole                  = row("updateRole", manageRoles, ScopeGlobal, RuleHierarchy)
	opCreateRole                  = row("createRole", manageRoles, ScopeGlobal, RuleHierarchyAndGrantHeld)
	opRenameRole                  = row("renameRole", manageRoles, ScopeGlobal, RuleHierarchy)
	opMoveRole                    = row("moveRole", manageRoles, ScopeGlobal, RuleHierarchy)
	opListRoleMembers             = row("listRoleMembers", none, ScopeGlobal, RuleEmailVisibleToSelfOrManageUsers)
	opHeadRoleMembers             = row("headRoleMembers", none, ScopeGlobal, RuleEmailVisibleToSelfOrManageUsers)
	opChangeRoleMembers           = row("changeRoleMembers", manageRoles, ScopeGlobal, RuleHierarchyAndGrantHeld)
	opDeleteRole                  = row("deleteRole", manageRoles, ScopeGlobal, RuleHierarchyAndGrantHeld)
	opGetRolePermissions          = row("getRolePermissions", none, ScopeGlobal, "")
	opHeadRolePermissions         = row("headRolePermissions", none, ScopeGlobal, "")
	opReplaceRolePermissions      = row("replaceRolePermissions", manageRoles, ScopeGlobal, RuleHierarchyAndGrantHeld)
	opLegacyAddRolePermissions    = row("legacyAddRolePermissions", manageRoles, ScopeGlobal, RuleHierarchyAndGrantHeld)
	opLegacyRemoveRolePermissions = row("legacyRemoveRolePermissions", manageRoles, ScopeGlobal, RuleHierarchyAndGrantHeld)
	opLegacyAddRoleUser           = row("legacyAddRoleUser", manageRoles, ScopeGlobal, RuleHierarchyAndGrantHeld)
	opLegacyRemoveRoleUser        = row("legacyRemoveRoleUser", manageRoles, ScopeGlobal, RuleHierarchyAndGrantHeld)

	opGetMe          = row("getMe", none, ScopeGlobal, "")
	opHeadMe         = row("headMe", none, ScopeGlobal, "")
	opListUsers      = row("listUsers", none, ScopeGlobal, RuleEmailVisibleToSelfOrManageUsers)
	opHeadUsers      = row("headUsers", none, ScopeGlobal, RuleEmailVisibleToSelfOrManageUsers)
	opCreateUser     = row("createUser", manageUsers, ScopeGlobal, "")
	opGetUser        = row("getUser", none, ScopeGlobal, RuleEmailVisibleToSelfOrManageUsers)
	opHeadUser       = row("headUser", none, ScopeGlobal, RuleEmailVisibleToSelfOrManageUsers)
	opUpdateUser     = row("updateUser", manageUsers, ScopeGlobal, RuleUserHierarchyOrSelfExceptStatus)
	opPatchUser      = row("patchUser", manageUsers, ScopeGlobal, RuleUserPatch).field("timeout_until", moderateMembers)
	opDeleteUser     = row("deleteUser", manageUsers, ScopeGlobal, RuleUserHierarchy)
	opListUserRoles  = row("listUserRoles", none, ScopeGlobal, "")
	opHeadUserRoles  = row("headUserRoles", none, ScopeGlobal, "")
	opAssignUserRole = row("assignUserRole", manageRoles, ScopeGlobal, RuleHierarchyAndGrantHeld)
	opRemoveUserRole = row("removeUserRole", manageRoles, ScopeGlobal, RuleHierarchyAndGrantHeld)
	opListTokens     = row("listTokens", none, ScopeGlobal, RuleSelfOrOwner)
	opHeadTokens     = row("headTokens", none, ScopeGlobal, RuleSelfOrOwner)
	opCreateToken    = row("createToken", none, ScopeGlobal, RuleSelfOrOwner)
	opGetToken       = row("getToken", none, ScopeGlobal, RuleSelfOrOwner)
	opHeadToken      = row("headToken", none, ScopeGlobal, RuleSelfOrOwner)
	opDeleteToken    = row("deleteToken", none, ScopeGlobal, RuleSelfOrOwner)

	opGetProfileLinks     = row("getProfileLinks", none, ScopeGlobal, "")
	opHeadProfileLinks    = row("headProfileLinks", none, ScopeGlobal, "")
	opReplaceProfileLinks = row("replaceProfileLinks", none, ScopeGlobal, "")
	opUpdateProfileLinks  = row("updateProfileLinks", none, ScopeGlobal, "")
	opDeleteProfileLinks  = row("deleteProfileLinks", none, ScopeGlobal, "")

	opListAuditLog      = row("listAuditLog", viewAuditLog, ScopeGlobal, "")
	opHeadAuditLog      = row("headAuditLog", viewAuditLog, ScopeGlobal, "")
	opStreamEvents      = row("streamEvents", viewAuditLog, ScopeGlobal, "")
	opHeadEvents        = row("headEvents", viewAuditLog, ScopeGlobal, "")
	opCreateEventTicket = row("createEventTicket", viewAuditLog, ScopeGlobal, "")
	// A revert also needs what its change needs: the operation that makes
	// it checks that.
	opRevertAuditLogEntry = row("revertAuditLogEntry", viewAuditLog, ScopeGlobal, RuleAsByHand)

	OpListWebhooks             = row("listWebhooks", manageWebhooks, ScopeGlobal, "")
	opHeadWebhooks             = row("headWebhooks", manageWebhooks, ScopeGlobal, "")
	OpCreateWebhook            = row("createWebhook", manageWebhooks, ScopeGlobal, "")
	OpGetWebhook               = row("getWebhook", manageWebhooks, ScopeGlobal, "")
	opHeadWebhook              = row("headWebhook", manageWebhooks, ScopeGlobal, "")
	OpUpdateWebhook            = row("updateWebhook", manageWebhooks, ScopeGlobal, "")
	OpDeleteWebhook            = row("deleteWebhook", manageWebhooks, ScopeGlobal, "")
	OpRotateWebhookSecret      = row("rotateWebhookSecret", manageWebhooks, ScopeGlobal, "")
	OpListWebhookDeliveries    = row("listWebhookDeliveries", manageWebhooks, ScopeGlobal, "")
	opHeadWebhookDeliveries    = row("headWebhookDeliveries", manageWebhooks, ScopeGlobal, "")
	OpRedeliverWebhookDelivery = row("redeliverWebhookDelivery", manageWebhooks, ScopeGlobal, "")
)

// requirements are the rows, in the table's order.
var requirements []*Requirement

// row adds a row to the table.
func row(id string, need permissions.Set, scope Scope, rule Rule) Op {
	r := &Requirement{OperationID: id, Permissions: need, Scope: scope, Rule: rule}
	requirements = append(requirements, r)
	return Op{r}
}

// field declares the permissions a member of the request body needs.
func (op Op) field(name string, need permissions.Set) Op {
	if op.Fields == nil {
		op.Fields = map[string]permissions.Set{}
	}
	op.Fields[name] = need
	return op
}

// query declares the permissions a query parameter needs, when given,
// besides the operation's.
func (op Op) query(name string, need permissions.Set) Op {
	if op.Query == nil {
		op.Query = map[string]permissions.Set{}
	}
	op.Query[name] = need
	return op
}

// anyOf declares permissions at least one of which the operation needs
// besides its Permissions.
func (op Op) anyOf(need permissions.Set) Op {
	op.AnyOf = need
	return op
}

// ownerOnlyActs say what an owner_only operation's refusal says the caller
// may not do.
var ownerOnlyActs = map[Op]string{
	opExportTemplate: "export the community's template",
	opImportTemplate: "import a template",
}

// Requirements is the table, a row per operation of the contract.
func Requirements() []Requirement {
	out := make([]Requirement, len(requirements))
	for i, r := range requirements {
		out[i] = *r
		out[i].Fields = maps.Clone(r.Fields)
		out[i].Query = maps.Clone(r.Query)
	}
	return out
}

// String is the operation's operationId.
func (op Op) String() string { return op.OperationID }

// authorize checks the caller against op's row, for an operation that acts
// on nothing the row depends on: its permissions in the base permissions
// (none needed: nothing to check, the token sufficed), or, for owner_only,
// that the caller is the owner. A row scoped to a channel, or whose rule
// exempts the caller's own data, is checked with authorizeOn.
func (a *Actor) authorize(op Op) error {
	switch {
	case op.Scope == ScopeChannel || op.Rule == RuleOrSelf || op.Rule == RuleSelfOrOwner:
		panic(fmt.Sprintf("guild: %s is checked on a channel or user (authorizeOn)", op))
	case op.Rule == RuleOwnerOnly:
		if !a.IsOwner {
			return apperr.OwnerOnly(ownerOnlyActs[op])
		}
		return nil
	}
	if !op.Permissions.IsEmpty() {
		if err := a.require(op.Permissions); err != nil {
			return err
		}
	}
	if !op.AnyOf.IsEmpty() {
		return a.requireOneOf(op.AnyOf)
	}
	return nil
}

// authorizeOn checks the caller against op's row for what the operation
// acts on, id: for a row scoped to a channel, its permissions in channel
// id (where a channel the caller may not know of is missing, rules.go);
// for or_self, nothing when id is the caller, else its permissions in the
// base; for self_or_owner, that the caller is user id or the owner.
func (a *Actor) authorizeOn(op Op, id string) error {
	switch {
	case op.Scope == ScopeChannel:
		return a.requireIn(id, op.Permissions)
	case op.Rule == RuleOrSelf:
		if a.UserID == id {
			return nil
		}
		return a.require(op.Permissions)
	case op.Rule == RuleSelfOrOwner:
		if a.UserID == id || a.IsOwner {
			return nil
		}
		return apperr.SelfOrOwnerOnly(id)
	}
	panic(fmt.Sprintf("guild: %s acts on no channel or user (authorize)", op))
}

// authorizeField checks the permissions op's row requires for a member of
// the request body instead of its Permissions.
func (a *Actor) authorizeField(op Op, field string) error {
	need, ok := op.Fields[field]
	if !ok {
		panic(fmt.Sprintf("guild: %s declares nothing for %s", op, field))
	}
	return a.require(need)
}

// authorizeQuery checks the permissions op's row requires for a query
// parameter the request gives.
func (a *Actor) authorizeQuery(op Op, param string) error {
	need, ok := op.Query[param]
	if !ok {
		panic(fmt.Sprintf("guild: %s declares nothing for query parameter %s", op, param))
	}
	return a.require(need)
}
