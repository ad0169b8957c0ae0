package store

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"gorm.io/gorm"

	"github.com/guildhall/guildhall/internal/apperr"
	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/permissions"
)

// queries are the reads, shared by the store (read pool) and a write
// transaction (its own handle, so a transaction never waits on itself).
type queries struct {
	db      *gorm.DB
	dialect dialect
}

func (q queries) with(ctx context.Context) *gorm.DB { return q.db.WithContext(ctx) }

// Settings are the singleton row: global permissions and versions.
type Settings struct {
	Global        permissions.Set
	GlobalVersion int64
	AuthVersion   int64
}

// Settings reads the singleton row.
func (q queries) Settings(ctx context.Context) (Settings, error) {
	var r settingsRow
	if err := q.with(ctx).Where("id = 1").Take(&r).Error; err != nil {
		return Settings{}, fmt.Errorf("read settings: %w", err)
	}
	return Settings{Global: permissions.Set(r.GlobalPermissions) & permissions.All,
		GlobalVersion: r.GlobalVersion, AuthVersion: r.AuthVersion}, nil
}

// GetChannel returns one channel and the version of its overwrite list.
func (q queries) GetChannel(ctx context.Context, id string) (model.Channel, error) {
	var r channelRow
	if err := q.with(ctx).Where("id = ?", id).Take(&r).Error; err != nil {
		return model.Channel{}, notFound(err, "Channel %q does not exist.", id)
	}
	return r.model(), nil
}

// OverwritesVersion is the version of a channel's overwrite list.
func (q queries) OverwritesVersion(ctx context.Context, channelID string) (int64, error) {
	var r channelRow
	if err := q.with(ctx).Select("overwrites_version").Where("id = ?", channelID).Take(&r).Error; err != nil {
		return 0, notFound(err, "Channel %q does not exist.", channelID)
	}
	return r.OverwritesVersion, nil
}

// ListChannels returns up to limit channels with IDs after the given one,
// and whether more follow.
func (q queries) ListChannels(ctx context.Context, after string, limit int) ([]model.Channel, bool, error) {
	var rows []channelRow
	if err := q.with(ctx).Where("id > ?", after).Order("id").Limit(limit + 1).Find(&rows).Error; err != nil {
		return nil, false, fmt.Errorf("list channels: %w", err)
	}
	more := len(rows) > limit
	if more {
		rows = rows[:limit]
	}
	out := make([]model.Channel, len(rows))
	for i, r := range rows {
		out[i] = r.model()
	}
	return out, more, nil
}

// ChannelOverwrites lists a channel's overwrites (unordered).
func (q queries) ChannelOverwrites(ctx context.Context, channelID string) ([]model.Overwrite, error) {
	var rows []overwriteRow
	if err := q.with(ctx).Where("channel_id = ?", channelID).Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("list overwrites: %w", err)
	}
	out := make([]model.Overwrite, len(rows))
	for i, r := range rows {
		out[i] = r.model()
	}
	return out, nil
}

// GetRole returns one role.
func (q queries) GetRole(ctx context.Context, id string) (model.Role, error) {
	var r roleRow
	if err := q.with(ctx).Where("id = ?", id).Take(&r).Error; err != nil {
		return model.Role{}, notFound(err, "Role %q does not exist.", id)
	}
	return r.model(), nil
}

// ListRoles returns every role by position descending.
func (q queries) ListRoles(ctx context.Context) ([]model.Role, error) {
	var rows []roleRow
	if err := q.with(ctx).Order("position DESC").Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("list roles: %w", err)
	}
	out := make([]model.Role, len(rows))
	for i, r := range rows {
		out[i] = r.model()
	}
	return out, nil
}

// CountRoles counts the roles.
func (q queries) CountRoles(ctx context.Context) (int, error) {
	var n int64
	if err := q.with(ctx).Model(&roleRow{}).Count(&n).Error; err != nil {
		return 0, fmt.Errorf("count roles: %w", err)
	}
	return int(n), nil
}

// UserRoles returns a user's roles by position descending.
func (q queries) UserRoles(ctx context.Context, userID string) ([]model.Role, error) {
	var rows []roleRow
	err := q.with(ctx).Table("roles").
		Joins("JOIN user_roles ON user_roles.role_id = roles.id AND user_roles.user_id = ?", userID).
		Order("roles.position DESC").Select("roles.*").Find(&rows).Error
	if err != nil {
		return nil, fmt.Errorf("list user roles: %w", err)
	}
	out := make([]model.Role, len(rows))
	for i, r := range rows {
		out[i] = r.model()
	}
	return out, nil
}

// GetUser returns one user with their role IDs.
func (q queries) GetUser(ctx context.Context, id string) (model.User, error) {
	var r userRow
	if err := q.with(ctx).Where("id = ?", id).Take(&r).Error; err != nil {
		return model.User{}, notFound(err, "User %q does not exist.", id)
	}
	roles, err := q.roleIDsOf(ctx, []string{id})
	if err != nil {
		return model.User{}, err
	}
	return r.model(roles[id]), nil
}

// UserByUsername finds a user by username, ignoring case.
func (q queries) UserByUsername(ctx context.Context, username string) (model.User, error) {
	var r userRow
	if err := q.with(ctx).Where("username_key = ?", strings.ToLower(username)).Take(&r).Error; err != nil {
		return model.User{}, notFound(err, "User %q does not exist.", username)
	}
	return q.GetUser(ctx, r.ID)
}

// CountUsers counts the users.
func (q queries) CountUsers(ctx context.Context) (int64, error) {
	var n int64
	if err := q.with(ctx).Model(&userRow{}).Count(&n).Error; err != nil {
		return 0, fmt.Errorf("count users: %w", err)
	}
	return n, nil
}

// UserFilter selects users; the zero value selects everyone.
type UserFilter struct {
	// Prefix matches a prefix of the lower-cased username or display name
	// (and of the email when MatchEmail is set); it is lower-cased here.
	Prefix     string
	MatchEmail bool
	RoleID     string
	Status     string
}

// ListUsers returns up to limit users with IDs after the given one that pass
// the filter, in ID order, and whether more follow. Every filter is an index
// range: the prefix is one range per key, so a search costs what its matches
// cost, never a scan of every user.
func (q queries) ListUsers(ctx context.Context, f UserFilter, after string, limit int) ([]model.User, bool, error) {
	// The plan is chosen here, not left to the planner's guesses (SQLite
	// has no statistics): a prefix drives the query from its index ranges,
	// else a role from its holders in ID order, else the status index, else
	// the primary key.
	db := q.with(ctx).Table("users").Select("users.*")
	order := "users.id"
	switch {
	case f.Prefix != "":
		lo := strings.ToLower(f.Prefix)
		hi := prefixEnd(lo)
		keys := []string{"username_key", "display_name_key"}
		if f.MatchEmail {
			keys = append(keys, "email_key")
		}
		parts := make([]string, len(keys))
		args := make([]any, 0, 2*len(keys))
		for i, k := range keys {
			parts[i] = "SELECT id FROM users WHERE " + k + " >= ? AND " + k + " < ?"
			args = append(args, lo, hi)
		}
		db = db.Where("users.id IN ("+strings.Join(parts, " UNION ")+")", args...)
		if f.Status != "" {
			// "|| ''" keeps SQLite, which has no statistics to tell, from
			// preferring the status index to the prefix ranges.
			db = db.Where("users.status || '' = ?", f.Status)
		}
		if f.RoleID != "" {
			db = db.Where("EXISTS (SELECT 1 FROM user_roles WHERE user_roles.user_id = users.id AND user_roles.role_id = ?)", f.RoleID)
		}
	case f.RoleID != "":
		db = db.Joins("JOIN user_roles ON user_roles.user_id = users.id AND user_roles.role_id = ?", f.RoleID)
		order = "user_roles.user_id" // the order of the role's index
		if f.Status != "" {
			db = db.Where("users.status = ?", f.Status)
		}
	case f.Status != "":
		db = db.Where("users.status = ?", f.Status)
	}
	db = db.Where(order+" > ?", after)
	var rows []userRow
	if err := db.Order(order).Limit(limit + 1).Find(&rows).Error; err != nil {
		return nil, false, fmt.Errorf("list users: %w", err)
	}
	more := len(rows) > limit
	if more {
		rows = rows[:limit]
	}
	ids := make([]string, len(rows))
	for i, r := range rows {
		ids[i] = r.ID
	}
	roles, err := q.roleIDsOf(ctx, ids)
	if err != nil {
		return nil, false, err
	}
	out := make([]model.User, len(rows))
	for i, r := range rows {
		out[i] = r.model(roles[r.ID])
	}
	return out, more, nil
}

// prefixEnd is the least string greater than every string that starts with
// prefix: its last rune incremented (a rune already at the maximum is
// dropped and the one before it incremented). "" has no end: it is returned
// as the largest string there is.
func prefixEnd(prefix string) string {
	r := []rune(prefix)
	for i := len(r) - 1; i >= 0; i-- {
		switch {
		case r[i] == 0xD7FF: // skip the surrogates, which no string holds
			r[i] = 0xE000
			return string(r[:i+1])
		case r[i] < utf8.MaxRune:
			r[i]++
			return string(r[:i+1])
		}
	}
	return string(utf8.MaxRune)
}

// roleIDsOf loads the role IDs of many users in one query, by position descending.
func (q queries) roleIDsOf(ctx context.Context, userIDs []string) (map[string][]string, error) {
	out := make(map[string][]string, len(userIDs))
	if len(userIDs) == 0 {
		return out, nil
	}
	var rows []struct {
		UserID string
		RoleID string
	}
	err := q.with(ctx).Table("user_roles").Select("user_roles.user_id, user_roles.role_id").
		Joins("JOIN roles ON roles.id = user_roles.role_id").
		Where("user_roles.user_id IN ?", userIDs).Order("roles.position DESC").Scan(&rows).Error
	if err != nil {
		return nil, fmt.Errorf("load user roles: %w", err)
	}
	for _, r := range rows {
		out[r.UserID] = append(out[r.UserID], r.RoleID)
	}
	return out, nil
}

// UserOverwrites lists every overwrite that targets the user.
func (q queries) HasUserRole(ctx context.Context, userID, roleID string) (bool, error) {
	var n int64
	err := q.with(ctx).Model(&userRoleRow{}).Where("user_id = ? AND role_id = ?", userID, roleID).Count(&n).Error
	if err != nil {
		return false, fmt.Errorf("read user role: %w", err)
	}
	return n > 0, nil
}

// GetToken returns one token of a user.
func (q queries) GetToken(ctx context.Context, userID, tokenID string) (model.Token, error) {
	var r tokenRow
	if err := q.with(ctx).Where("id = ? AND user_id = ?", tokenID, userID).Take(&r).Error; err != nil {
		return model.Token{}, notFound(err, "Token %q does not exist.", tokenID)
	}
	return r.model(), nil
}

// ListTokens returns a user's tokens, newest first.
func (q queries) ListTokens(ctx context.Context, userID string) ([]model.Token, error) {
	var rows []tokenRow
	if err := q.with(ctx).Where("user_id = ?", userID).Order("id DESC").Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("list tokens: %w", err)
	}
	out := make([]model.Token, len(rows))
	for i, r := range rows {
		out[i] = r.model()
	}
	return out, nil
}

// Credentials is what one round trip learns about a token.
type Credentials struct {
	Principal   model.Principal
	TokenHash   string
	Status      string
	ExpiresAt   *time.Time
	AuthVersion int64
}

// Authenticate looks a token up by its hash and returns its user, their
// roles and the current authorization version, in one round trip.
func (q queries) Authenticate(ctx context.Context, tokenHash string) (Credentials, error) {
	return q.tokenCredentials(ctx, "t.hash = ?", tokenHash)
}

// CredentialsOfToken is Authenticate for a token already authenticated, by
// its ID: requests that outlive their start (writes, event streams) use it to
// learn that their token was revoked or has expired since.
func (q queries) CredentialsOfToken(ctx context.Context, tokenID string) (Credentials, error) {
	return q.tokenCredentials(ctx, "t.id = ?", tokenID)
}

func (q queries) tokenCredentials(ctx context.Context, where string, arg string) (Credentials, error) {
	var row struct {
		TokenID     string
		Hash        string
		UserID      string
		Status      string
		IsOwner     bool
		ExpiresAt   *time.Time
		Roles       *string
		AuthVersion int64
	}
	sql := `SELECT t.id AS token_id, t.hash, u.id AS user_id, u.status, u.is_owner, t.expires_at,
  (SELECT ` + q.dialect.groupConcat("ur.role_id") + ` FROM user_roles ur WHERE ur.user_id = u.id) AS roles,
  (SELECT s.auth_version FROM settings s WHERE s.id = 1) AS auth_version
FROM tokens t JOIN users u ON u.id = t.user_id WHERE ` + where
	res := q.with(ctx).Raw(sql, arg).Scan(&row)
	if res.Error != nil {
		return Credentials{}, fmt.Errorf("authenticate: %w", res.Error)
	}
	if res.RowsAffected == 0 {
		return Credentials{}, apperr.Unauthenticated("The bearer token is unknown or revoked.")
	}
	c := Credentials{Principal: model.Principal{UserID: row.UserID, TokenID: row.TokenID, IsOwner: row.IsOwner, Roles: []string{}},
		TokenHash: row.Hash, Status: row.Status, ExpiresAt: row.ExpiresAt, AuthVersion: row.AuthVersion}
	if row.Roles != nil && *row.Roles != "" {
		c.Principal.Roles = strings.Split(*row.Roles, ",")
		sort.Strings(c.Principal.Roles)
	}
	return c, nil
}

// CredentialsOf is what Authenticate learns, for a user rather than a token
// (no token, no expiry): their status, roles and the current authorization
// version, in one statement. Write transactions use it to re-check their
// caller against the state they commit on; an unknown user is a 404.
func (q queries) CredentialsOf(ctx context.Context, userID string) (Credentials, error) {
	var row struct {
		UserID      string
		Status      string
		IsOwner     bool
		Roles       *string
		AuthVersion int64
	}
	sql := `SELECT u.id AS user_id, u.status, u.is_owner,
  (SELECT ` + q.dialect.groupConcat("ur.role_id") + ` FROM user_roles ur WHERE ur.user_id = u.id) AS roles,
  (SELECT s.auth_version FROM settings s WHERE s.id = 1) AS auth_version
FROM users u WHERE u.id = ?`
	res := q.with(ctx).Raw(sql, userID).Scan(&row)
	if res.Error != nil {
		return Credentials{}, fmt.Errorf("read credentials of %s: %w", userID, res.Error)
	}
	if res.RowsAffected == 0 {
		return Credentials{}, apperr.NotFound("User %q does not exist.", userID)
	}
	c := Credentials{Principal: model.Principal{UserID: row.UserID, IsOwner: row.IsOwner, Roles: []string{}},
		Status: row.Status, AuthVersion: row.AuthVersion}
	if row.Roles != nil && *row.Roles != "" {
		c.Principal.Roles = strings.Split(*row.Roles, ",")
		sort.Strings(c.Principal.Roles)
	}
	return c, nil
}

// PrincipalOf loads a user as a principal (roles included); used inside write
// transactions to authorize against the state the write commits on.
func (q queries) PrincipalOf(ctx context.Context, userID string) (model.Principal, string, error) {
	u, err := q.GetUser(ctx, userID)
	if err != nil {
		return model.Principal{}, "", err
	}
	roles := append([]string(nil), u.Roles...)
	sort.Strings(roles)
	return model.Principal{UserID: u.ID, IsOwner: u.IsOwner, Roles: roles}, u.Status, nil
}

// GetAttachment returns one attachment's metadata.
func (q queries) GetAttachment(ctx context.Context, channelID, id string) (model.Attachment, error) {
	var r attachmentRow
	if err := q.with(ctx).Where("channel_id = ? AND id = ?", channelID, id).Take(&r).Error; err != nil {
		return model.Attachment{}, notFound(err, "Attachment %q does not exist in channel %q.", id, channelID)
	}
	return r.model(), nil
}

// ListAttachments returns up to limit attachments of a channel with IDs
// after the given one, and whether more follow.
func (q queries) ListAttachments(ctx context.Context, channelID, after string, limit int) ([]model.Attachment, bool, error) {
	var rows []attachmentRow
	err := q.with(ctx).Where("channel_id = ? AND id > ?", channelID, after).Order("id").Limit(limit + 1).Find(&rows).Error
	if err != nil {
		return nil, false, fmt.Errorf("list attachments: %w", err)
	}
	more := len(rows) > limit
	if more {
		rows = rows[:limit]
	}
	out := make([]model.Attachment, len(rows))
	for i, r := range rows {
		out[i] = r.model()
	}
	return out, more, nil
}

// BlobKeyInUse reports whether an attachment row points at the blob.
func (q queries) BlobKeyInUse(ctx context.Context, key string) (bool, error) {
	var n int64
	if err := q.with(ctx).Model(&attachmentRow{}).Where("blob_key = ?", key).Count(&n).Error; err != nil {
		return false, fmt.Errorf("read blob reference: %w", err)
	}
	return n > 0, nil
}

// GetProfile returns a user's links (empty, version 0, when they have none).
func (q queries) GetProfile(ctx context.Context, userID string) (model.ProfileLinks, error) {
	var r profileRow
	err := q.with(ctx).Where("user_id = ?", userID).Take(&r).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return model.ProfileLinks{UserID: userID, Links: map[string]string{}}, nil
	}
	if err != nil {
		return model.ProfileLinks{}, fmt.Errorf("read profile: %w", err)
	}
	p := model.ProfileLinks{UserID: userID, Version: r.Version, Links: map[string]string{}}
	if err := jsonUnmarshal(r.Links, &p.Links); err != nil {
		return model.ProfileLinks{}, fmt.Errorf("decode profile links: %w", err)
	}
	return p, nil
}

// notFound turns gorm's record-not-found into a 404 with the detail given.
func notFound(err error, format string, args ...any) error {
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return apperr.NotFound(format, args...)
	}
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), err)
}
