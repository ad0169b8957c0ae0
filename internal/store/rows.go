package store

import (
	"encoding/json"

	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/permissions"
)

// Row types: the tables as GORM sees them. They never leave this package.

type channelRow struct {
	ID                string `gorm:"primaryKey"`
	Name              string
	Topic             *string
	Kind              string
	ParentID          *string
	Position          int
	Version           int64
	OverwritesVersion int64
	CreatedAt         micros `gorm:"autoCreateTime:false"`
	UpdatedAt         micros `gorm:"autoUpdateTime:false"`
}

func (channelRow) TableName() string { return "channels" }

// channelColumns are the columns of a channelRow, in the order of fields.
const channelColumns = "id, name, topic, kind, parent_id, position, version, overwrites_version, created_at, updated_at"

// fields are the destinations of a row of channelColumns.
func (r *channelRow) fields() []any {
	return []any{&r.ID, &r.Name, &r.Topic, &r.Kind, &r.ParentID, &r.Position, &r.Version, &r.OverwritesVersion, &r.CreatedAt, &r.UpdatedAt}
}

func (r channelRow) model() model.Channel {
	return model.Channel{ID: r.ID, Name: r.Name, Topic: r.Topic, Kind: r.Kind, ParentID: r.ParentID, Position: r.Position,
		Version: r.Version, CreatedAt: r.CreatedAt.time(), UpdatedAt: r.UpdatedAt.time()}
}

type roleRow struct {
	ID          string `gorm:"primaryKey"`
	Name        string
	Position    int
	Color       *string
	Permissions int64
	Version     int64
	CreatedAt   micros `gorm:"autoCreateTime:false"`
	UpdatedAt   micros `gorm:"autoUpdateTime:false"`
}

func (roleRow) TableName() string { return "roles" }

func (r roleRow) model() model.Role {
	return model.Role{ID: r.ID, Name: r.Name, Position: r.Position, Color: r.Color,
		Permissions: permissions.Set(r.Permissions) & permissions.All, Version: r.Version,
		CreatedAt: r.CreatedAt.time(), UpdatedAt: r.UpdatedAt.time()}
}

type userRow struct {
	ID          string `gorm:"primaryKey"`
	Username    string
	UsernameKey string
	DisplayName string
	// DisplayNameKey is the lower-cased display name, for search.
	DisplayNameKey string
	Email          *string
	EmailKey       *string
	Status         string
	IsOwner        bool
	TimeoutUntil   *micros
	Version        int64
	CreatedAt      micros `gorm:"autoCreateTime:false"`
	UpdatedAt      micros `gorm:"autoUpdateTime:false"`
}

func (userRow) TableName() string { return "users" }

type userRoleRow struct {
	UserID    string `gorm:"primaryKey"`
	RoleID    string `gorm:"primaryKey"`
	CreatedAt micros `gorm:"autoCreateTime:false"`
}

func (userRoleRow) TableName() string { return "user_roles" }

type overwriteRow struct {
	ChannelID  string `gorm:"primaryKey"`
	TargetType string `gorm:"primaryKey"`
	TargetID   string `gorm:"primaryKey"`
	AllowBits  int64
	DenyBits   int64
}

func (overwriteRow) TableName() string { return "overwrites" }

func (r overwriteRow) model() model.Overwrite {
	return model.Overwrite{ChannelID: r.ChannelID, TargetType: r.TargetType, TargetID: r.TargetID,
		Allow: permissions.Set(r.AllowBits) & permissions.All, Deny: permissions.Set(r.DenyBits) & permissions.All}
}

type tokenRow struct {
	ID        string `gorm:"primaryKey"`
	UserID    string
	Name      string
	Hash      string
	CreatedAt micros `gorm:"autoCreateTime:false"`
	ExpiresAt *micros
}

func (tokenRow) TableName() string { return "tokens" }

func (r tokenRow) model() model.Token {
	t := model.Token{ID: r.ID, UserID: r.UserID, Name: r.Name, CreatedAt: r.CreatedAt.time()}
	t.ExpiresAt = timePtr(r.ExpiresAt)
	return t
}

type attachmentRow struct {
	ChannelID   string `gorm:"primaryKey"`
	ID          string `gorm:"primaryKey"`
	ContentType string
	Size        int64
	SHA256      string `gorm:"column:sha256"`
	BlobKey     string
	CreatedBy   *string
	UpdatedBy   *string
	CreatedAt   micros `gorm:"autoCreateTime:false"`
	UpdatedAt   micros `gorm:"autoUpdateTime:false"`
}

func (attachmentRow) TableName() string { return "attachments" }

func (r attachmentRow) model() model.Attachment {
	return model.Attachment{ChannelID: r.ChannelID, ID: r.ID, ContentType: r.ContentType, Size: r.Size,
		SHA256: r.SHA256, BlobKey: r.BlobKey, CreatedBy: r.CreatedBy, UpdatedBy: r.UpdatedBy,
		CreatedAt: r.CreatedAt.time(), UpdatedAt: r.UpdatedAt.time()}
}

type profileRow struct {
	UserID    string `gorm:"primaryKey"`
	Links     string
	Version   int64
	UpdatedAt micros `gorm:"autoUpdateTime:false"`
}

func (profileRow) TableName() string { return "profiles" }

type eventRow struct {
	Seq       int64 `gorm:"primaryKey;autoIncrement"`
	Type      string
	ActorID   *string
	Subject   string
	Data      string
	Reason    *string
	CreatedAt micros `gorm:"autoCreateTime:false"`
}

func (eventRow) TableName() string { return "events" }

func (r eventRow) model() model.Event {
	ev := model.Event{Seq: r.Seq, Type: r.Type, ActorID: r.ActorID, Subject: r.Subject,
		Reason: r.Reason, CreatedAt: r.CreatedAt.time(), Data: map[string]any{}}
	_ = json.Unmarshal([]byte(r.Data), &ev.Data) // written by us as a JSON object
	return ev
}
