package permissions

import "strconv"

// Permission is a bit index in catalog order.
type Permission uint8

// The catalog, in order. The order is part of the wire: names are always
// listed in it.
const (
	Administrator      Permission = iota // ADMINISTRATOR
	ManageUsers                          // MANAGE_USERS
	ManageRoles                          // MANAGE_ROLES
	ManageChannels                       // MANAGE_CHANNELS
	ViewAuditLog                         // VIEW_AUDIT_LOG
	ViewChannel                          // VIEW_CHANNEL
	SendMessages                         // SEND_MESSAGES
	ReadMessageHistory                   // READ_MESSAGE_HISTORY
	AttachFiles                          // ATTACH_FILES
	ManageMessages                       // MANAGE_MESSAGES
	EmbedLinks                           // EMBED_LINKS
	MentionEveryone                      // MENTION_EVERYONE
	AddReactions                         // ADD_REACTIONS
	ModerateMembers                      // MODERATE_MEMBERS
	ManageWebhooks                       // MANAGE_WEBHOOKS

	// NumPermissions is the size of the catalog; every Permission below it
	// is valid.
	NumPermissions = iota
)

// Scope says where a permission can be granted.
type Scope string

// Scopes of the catalog.
const (
	ScopeGlobal  Scope = "global"
	ScopeChannel Scope = "channel"
)

// Info describes one catalog entry, as GET /api/permissions shows it.
type Info struct {
	Permission  Permission
	Name        string
	Description string
	Scopes      []Scope
}

type entry struct {
	name        string
	description string
	channel     bool // scopes are global and channel, else global only
}

// catalog is indexed by Permission. It is never modified.
var catalog = [NumPermissions]entry{
	Administrator:      {"ADMINISTRATOR", "Allows everything and bypasses channel overwrites.", false},
	ManageUsers:        {"MANAGE_USERS", "Allows creating, updating, suspending and deleting users below one's top role.", false},
	ManageRoles:        {"MANAGE_ROLES", "Allows managing roles below one's top role and setting channel overwrites.", true},
	ManageChannels:     {"MANAGE_CHANNELS", "Allows creating, renaming and deleting channels.", true},
	ViewAuditLog:       {"VIEW_AUDIT_LOG", "Allows reading the audit log and the event stream.", false},
	ViewChannel:        {"VIEW_CHANNEL", "Allows seeing a channel, its overwrites and its attachments.", true},
	SendMessages:       {"SEND_MESSAGES", "Allows posting in a channel.", true},
	ReadMessageHistory: {"READ_MESSAGE_HISTORY", "Allows reading past messages.", true},
	AttachFiles:        {"ATTACH_FILES", "Allows uploading and replacing attachments.", true},
	ManageMessages:     {"MANAGE_MESSAGES", "Allows deleting others' attachments.", true},
	EmbedLinks:         {"EMBED_LINKS", "Allows links to show previews.", true},
	MentionEveryone:    {"MENTION_EVERYONE", "Allows mentioning everyone.", true},
	AddReactions:       {"ADD_REACTIONS", "Allows adding reactions.", true},
	ModerateMembers:    {"MODERATE_MEMBERS", "Allows timing out members below one's top role.", false},
	ManageWebhooks:     {"MANAGE_WEBHOOKS", "Allows managing webhooks, which also needs VIEW_AUDIT_LOG.", false},
}

// Valid reports whether p is in the catalog.
func (p Permission) Valid() bool { return p < NumPermissions }

// String returns the catalog name of p, or "Permission(n)" outside the
// catalog.
func (p Permission) String() string {
	if !p.Valid() {
		return "Permission(" + strconv.Itoa(int(p)) + ")"
	}
	return catalog[p].name
}

// Scopes returns where p can be granted, global first; nil outside the
// catalog. The slice is fresh.
func (p Permission) Scopes() []Scope {
	if !p.Valid() {
		return nil
	}
	if catalog[p].channel {
		return []Scope{ScopeGlobal, ScopeChannel}
	}
	return []Scope{ScopeGlobal}
}

// ByName returns the permission called name (exact, case-sensitive).
func ByName(name string) (Permission, bool) {
	for p := range Permission(NumPermissions) {
		if catalog[p].name == name {
			return p, true
		}
	}
	return 0, false
}

// Catalog returns every permission in catalog order. Each call returns a
// fresh copy that the caller may modify.
func Catalog() []Info {
	out := make([]Info, NumPermissions)
	for p := range Permission(NumPermissions) {
		out[p] = Info{
			Permission:  p,
			Name:        catalog[p].name,
			Description: catalog[p].description,
			Scopes:      p.Scopes(),
		}
	}
	return out
}
