// Package model holds Guildhall's domain types. They carry no HTTP or
// database concerns: internal/store fills them, internal/guild applies the
// rules to them, and internal/httpapi converts them to the contract's types.
package model

import (
	"time"

	"github.com/guildhall/guildhall/internal/permissions"
)

// User statuses.
const (
	StatusActive    = "active"
	StatusSuspended = "suspended"
)

// Channel kinds.
const (
	KindText     = "text"
	KindCategory = "category"
)

// Channel is a chat channel, or a category that holds channels.
type Channel struct {
	ID        string
	Name      string
	Topic     *string
	Kind      string
	ParentID  *string // the category it is in; never set on a category
	Position  int     // among its siblings (ties by ID)
	Synced    bool    // in a category, with the category's overwrites (as sets)
	Version   int64
	CreatedAt time.Time
	UpdatedAt time.Time

	// Unviewable marks, in a list, a channel the caller knows of (they
	// manage channels or roles) but cannot view.
	Unviewable bool
}

// reservedChannelIDs are the IDs a channel cannot have: /channels/{id}
// would be another operation's path.
var reservedChannelIDs = map[string]bool{"reorder": true}

// ReservedChannelID says whether id is one a channel cannot have.
func ReservedChannelID(id string) bool { return reservedChannelIDs[id] }

// Role is a named set of permissions at a position in the hierarchy.
type Role struct {
	ID          string
	Name        string
	Position    int
	Color       *string
	Permissions permissions.Set
	Version     int64
	CreatedAt   time.Time
	UpdatedAt   time.Time
}

// User is a member of the community.
type User struct {
	ID          string
	Username    string
	DisplayName string
	Email       *string
	EmailHidden bool // the caller may not see Email
	Status      string
	IsOwner     bool
	// Roles: role IDs, by position descending. Read-only: the read cache
	// hands one slice to every user who holds the same many roles (with no
	// room past its end, so an append copies); copy it before changing it
	// in place.
	Roles []string
	// TimeoutUntil: while it is in the future, the user is timed out.
	TimeoutUntil *time.Time
	Version      int64
	CreatedAt    time.Time
	UpdatedAt    time.Time
}

// TimedOut reports whether the user is timed out at now.
func (u User) TimedOut(now time.Time) bool { return u.TimeoutUntil != nil && u.TimeoutUntil.After(now) }

// Token is an API token's metadata; the secret is never stored.
type Token struct {
	ID        string
	UserID    string
	Name      string
	CreatedAt time.Time
	ExpiresAt *time.Time
}

// Attachment is the metadata of a channel attachment; its bytes live in a blob.
type Attachment struct {
	ChannelID   string
	ID          string
	ContentType string
	Size        int64
	SHA256      string
	BlobKey     string
	CreatedBy   *string
	UpdatedBy   *string
	CreatedAt   time.Time
	UpdatedAt   time.Time
}

// ProfileLinks are a user's links by label.
type ProfileLinks struct {
	UserID  string
	Links   map[string]string
	Version int64 // 0 when the user never had links
}

// Event is one entry of the audit log.
type Event struct {
	Seq       int64
	Type      string
	ActorID   *string
	Subject   string
	Data      map[string]any
	Reason    *string
	CreatedAt time.Time
}

// Principal is the authenticated caller of a request.
type Principal struct {
	UserID       string
	TokenID      string
	IsOwner      bool
	Roles        []string   // role IDs
	TimeoutUntil *time.Time // see User.TimeoutUntil
}

// Now is the wall clock as the API shows it: UTC, truncated to microseconds
// (what PostgreSQL keeps), so a value read back equals the value written.
func Now() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }
