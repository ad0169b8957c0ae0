package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/guildhall/guildhall/internal/apperr"
	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/permissions"
)

// Tx is a write transaction. Its reads see the state it will commit on:
// writers are serialized (see Write).
type Tx struct {
	queries
	events []model.Event
}

// Write runs fn in a serialized write transaction and returns the events it
// appended, with their sequence numbers, once committed. If fn returns an
// error, nothing it did is kept.
func (s *Store) Write(ctx context.Context, fn func(tx *Tx) error) ([]model.Event, error) {
	var events []model.Event
	err := s.write.WithContext(ctx).Transaction(func(db *gorm.DB) error {
		if lock := s.dialect.lockWrites(); lock != "" {
			if err := db.Exec(lock).Error; err != nil {
				return fmt.Errorf("take write lock: %w", err)
			}
		}
		tx := &Tx{queries: queries{db: db, dialect: s.dialect}}
		if err := fn(tx); err != nil {
			return err
		}
		if len(tx.events) > 0 && s.Postgres() {
			// Delivered to listeners when (and only if) the transaction commits.
			last := tx.events[len(tx.events)-1].Seq
			if err := db.Exec("SELECT pg_notify(?, ?)", EventChannel, fmt.Sprint(last)).Error; err != nil {
				return fmt.Errorf("notify: %w", err)
			}
		}
		events = tx.events
		return nil
	}, s.dialect.writeTx())
	if err != nil {
		return nil, err
	}
	return events, nil
}

// EventChannel is the PostgreSQL NOTIFY channel that carries new event seqs.
const EventChannel = "guildhall_events"

// AppendEvent records an event in the transaction and assigns its seq.
func (tx *Tx) AppendEvent(ctx context.Context, ev model.Event) (model.Event, error) {
	if ev.Data == nil {
		ev.Data = map[string]any{}
	}
	data, err := json.Marshal(ev.Data)
	if err != nil {
		return model.Event{}, fmt.Errorf("encode event data: %w", err)
	}
	if ev.CreatedAt.IsZero() {
		ev.CreatedAt = model.Now()
	}
	row := eventRow{Type: ev.Type, ActorID: ev.ActorID, Subject: ev.Subject, Data: string(data),
		Reason: ev.Reason, CreatedAt: ev.CreatedAt}
	if err := tx.with(ctx).Create(&row).Error; err != nil {
		return model.Event{}, fmt.Errorf("append event: %w", err)
	}
	ev.Seq = row.Seq
	tx.events = append(tx.events, ev)
	return ev, nil
}

// BumpAuthVersion marks the authorization state (roles, overwrites, global
// permissions) as changed, so every instance reloads its snapshot.
func (tx *Tx) BumpAuthVersion(ctx context.Context) error {
	if err := tx.with(ctx).Exec("UPDATE settings SET auth_version = auth_version + 1 WHERE id = 1").Error; err != nil {
		return fmt.Errorf("bump auth version: %w", err)
	}
	return nil
}

// EnsureSettings creates the settings row of a fresh store.
func (tx *Tx) EnsureSettings(ctx context.Context, global permissions.Set) error {
	now := model.Now()
	row := settingsRow{ID: 1, GlobalPermissions: int64(global), GlobalVersion: 1, AuthVersion: 1, CreatedAt: now, UpdatedAt: now}
	if err := tx.with(ctx).Clauses(clause.OnConflict{DoNothing: true}).Create(&row).Error; err != nil {
		return fmt.Errorf("create settings: %w", err)
	}
	return nil
}

// SetGlobal replaces the global permissions.
func (tx *Tx) SetGlobal(ctx context.Context, global permissions.Set) error {
	err := tx.with(ctx).Exec("UPDATE settings SET global_permissions = ?, global_version = global_version + 1, auth_version = auth_version + 1, updated_at = ? WHERE id = 1",
		int64(global), model.Now()).Error
	if err != nil {
		return fmt.Errorf("set global permissions: %w", err)
	}
	return nil
}

// --- channels

// InsertChannel creates a channel; a taken ID is a conflict.
func (tx *Tx) InsertChannel(ctx context.Context, c model.Channel) (model.Channel, error) {
	row := channelRow{ID: c.ID, Name: c.Name, Topic: c.Topic, Version: 1, OverwritesVersion: 1,
		CreatedAt: c.CreatedAt, UpdatedAt: c.UpdatedAt}
	if err := tx.with(ctx).Create(&row).Error; err != nil {
		return model.Channel{}, duplicate(err, "Channel %q already exists.", c.ID)
	}
	return row.model(), nil
}

// UpdateChannel stores a channel's name and topic and moves its version.
func (tx *Tx) UpdateChannel(ctx context.Context, c model.Channel) (model.Channel, error) {
	res := tx.with(ctx).Model(&channelRow{}).Where("id = ?", c.ID).Updates(map[string]any{
		"name": c.Name, "topic": c.Topic, "version": gorm.Expr("version + 1"), "updated_at": c.UpdatedAt})
	if res.Error != nil {
		return model.Channel{}, fmt.Errorf("update channel: %w", res.Error)
	}
	return tx.GetChannel(ctx, c.ID)
}

// DeleteChannel deletes a channel with its overwrites and attachments and
// returns the blob keys that are no longer referenced.
func (tx *Tx) DeleteChannel(ctx context.Context, id string) ([]string, error) {
	var keys []string
	if err := tx.with(ctx).Model(&attachmentRow{}).Where("channel_id = ?", id).Pluck("blob_key", &keys).Error; err != nil {
		return nil, fmt.Errorf("list channel blobs: %w", err)
	}
	for _, stmt := range []string{
		"DELETE FROM overwrites WHERE channel_id = ?",
		"DELETE FROM attachments WHERE channel_id = ?",
		"DELETE FROM channels WHERE id = ?",
	} {
		if err := tx.with(ctx).Exec(stmt, id).Error; err != nil {
			return nil, fmt.Errorf("delete channel: %w", err)
		}
	}
	return keys, nil
}

// --- overwrites

// PutOverwrite creates, replaces or (when empty) removes an overwrite and
// moves the channel's overwrite-list version.
func (tx *Tx) PutOverwrite(ctx context.Context, o model.Overwrite) error {
	db := tx.with(ctx)
	var err error
	if o.Allow.IsEmpty() && o.Deny.IsEmpty() {
		err = db.Where("channel_id = ? AND target_type = ? AND target_id = ?", o.ChannelID, o.TargetType, o.TargetID).
			Delete(&overwriteRow{}).Error
	} else {
		row := overwriteRow{ChannelID: o.ChannelID, TargetType: o.TargetType, TargetID: o.TargetID,
			AllowBits: int64(o.Allow), DenyBits: int64(o.Deny)}
		err = db.Clauses(clause.OnConflict{
			Columns:   []clause.Column{{Name: "channel_id"}, {Name: "target_type"}, {Name: "target_id"}},
			DoUpdates: clause.AssignmentColumns([]string{"allow_bits", "deny_bits"}),
		}).Create(&row).Error
	}
	if err != nil {
		return fmt.Errorf("put overwrite: %w", err)
	}
	if err := db.Exec("UPDATE channels SET overwrites_version = overwrites_version + 1 WHERE id = ?", o.ChannelID).Error; err != nil {
		return fmt.Errorf("put overwrite: %w", err)
	}
	return tx.BumpAuthVersion(ctx)
}

// CountOverwrites counts a channel's overwrites.
func (tx *Tx) CountOverwrites(ctx context.Context, channelID string) (int, error) {
	var n int64
	if err := tx.with(ctx).Model(&overwriteRow{}).Where("channel_id = ?", channelID).Count(&n).Error; err != nil {
		return 0, fmt.Errorf("count overwrites: %w", err)
	}
	return int(n), nil
}

// CountOverwritesOf counts the overwrites of one target (a role or a user)
// across all channels.
func (tx *Tx) CountOverwritesOf(ctx context.Context, targetType, targetID string) (int64, error) {
	var n int64
	if err := tx.with(ctx).Model(&overwriteRow{}).Where("target_type = ? AND target_id = ?", targetType, targetID).Count(&n).Error; err != nil {
		return 0, fmt.Errorf("count overwrites: %w", err)
	}
	return n, nil
}

// deleteOverwritesOf removes every overwrite of a target and moves the
// versions of the channels concerned.
func (tx *Tx) deleteOverwritesOf(ctx context.Context, targetType, targetID string) error {
	db := tx.with(ctx)
	err := db.Exec(`UPDATE channels SET overwrites_version = overwrites_version + 1
WHERE id IN (SELECT channel_id FROM overwrites WHERE target_type = ? AND target_id = ?)`, targetType, targetID).Error
	if err == nil {
		err = db.Exec("DELETE FROM overwrites WHERE target_type = ? AND target_id = ?", targetType, targetID).Error
	}
	if err != nil {
		return fmt.Errorf("delete overwrites of %s %s: %w", targetType, targetID, err)
	}
	return nil
}

// --- roles

// InsertRole creates a role at position 1, moving every other role up one.
func (tx *Tx) InsertRole(ctx context.Context, r model.Role) (model.Role, error) {
	if _, err := tx.GetRole(ctx, r.ID); err == nil {
		return model.Role{}, apperr.Conflict("Role %q already exists.", r.ID)
	} else if !errors.Is(err, apperr.ErrNotFound) {
		return model.Role{}, err
	}
	if err := tx.shiftRoles(ctx, 1, 1<<30, +1, r.CreatedAt); err != nil {
		return model.Role{}, err
	}
	row := roleRow{ID: r.ID, Name: r.Name, Position: 1, Color: r.Color, Permissions: int64(r.Permissions),
		Version: 1, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}
	if err := tx.with(ctx).Create(&row).Error; err != nil {
		return model.Role{}, duplicate(err, "Role %q already exists.", r.ID)
	}
	return row.model(), tx.BumpAuthVersion(ctx)
}

// UpdateRole stores a role's name, color and permissions and moves its version.
func (tx *Tx) UpdateRole(ctx context.Context, r model.Role) (model.Role, error) {
	err := tx.with(ctx).Model(&roleRow{}).Where("id = ?", r.ID).Updates(map[string]any{
		"name": r.Name, "color": r.Color, "permissions": int64(r.Permissions),
		"version": gorm.Expr("version + 1"), "updated_at": r.UpdatedAt}).Error
	if err != nil {
		return model.Role{}, fmt.Errorf("update role: %w", err)
	}
	if err := tx.BumpAuthVersion(ctx); err != nil {
		return model.Role{}, err
	}
	return tx.GetRole(ctx, r.ID)
}

// MoveRole places a role at a position, shifting the roles in between.
func (tx *Tx) MoveRole(ctx context.Context, id string, from, to int, now time.Time) (model.Role, error) {
	db := tx.with(ctx)
	if err := db.Exec("UPDATE roles SET position = 0 WHERE id = ?", id).Error; err != nil {
		return model.Role{}, fmt.Errorf("move role: %w", err)
	}
	var err error
	if from < to {
		err = tx.shiftRoles(ctx, from+1, to, -1, now)
	} else {
		err = tx.shiftRoles(ctx, to, from-1, +1, now)
	}
	if err != nil {
		return model.Role{}, err
	}
	err = db.Exec("UPDATE roles SET position = ?, version = version + 1, updated_at = ? WHERE id = ?", to, now, id).Error
	if err != nil {
		return model.Role{}, fmt.Errorf("move role: %w", err)
	}
	// Lists ordered by role position change when the moved role passes
	// another one they hold: a channel's overwrites and a user's roles. Their
	// versions (ETags) must move with their representation.
	lo, hi := min(from, to), max(from, to)
	passed := "SELECT id FROM roles WHERE position >= ? AND position <= ? AND id <> ?"
	err = db.Exec(`UPDATE channels SET overwrites_version = overwrites_version + 1
WHERE id IN (SELECT channel_id FROM overwrites WHERE target_type = 'role' AND target_id = ?)
AND id IN (SELECT channel_id FROM overwrites WHERE target_type = 'role' AND target_id IN (`+passed+`))`, id, lo, hi, id).Error
	if err == nil {
		err = db.Exec(`UPDATE users SET version = version + 1, updated_at = ?
WHERE id IN (SELECT user_id FROM user_roles WHERE role_id = ?)
AND id IN (SELECT user_id FROM user_roles WHERE role_id IN (`+passed+`))`, now, id, lo, hi, id).Error
	}
	if err != nil {
		return model.Role{}, fmt.Errorf("move role: %w", err)
	}
	if err := tx.BumpAuthVersion(ctx); err != nil {
		return model.Role{}, err
	}
	return tx.GetRole(ctx, id)
}

// DeleteRole deletes a role, takes it from every user and overwrite, and
// moves the roles above it down one. It returns how many users had it.
func (tx *Tx) DeleteRole(ctx context.Context, r model.Role, now time.Time) (int64, error) {
	db := tx.with(ctx)
	var holders int64
	if err := db.Model(&userRoleRow{}).Where("role_id = ?", r.ID).Count(&holders).Error; err != nil {
		return 0, fmt.Errorf("delete role: %w", err)
	}
	// The users' representation (their role list) changes.
	if err := db.Exec("UPDATE users SET version = version + 1, updated_at = ? WHERE id IN (SELECT user_id FROM user_roles WHERE role_id = ?)", now, r.ID).Error; err != nil {
		return 0, fmt.Errorf("delete role: %w", err)
	}
	if err := db.Exec("DELETE FROM user_roles WHERE role_id = ?", r.ID).Error; err != nil {
		return 0, fmt.Errorf("delete role: %w", err)
	}
	if err := tx.deleteOverwritesOf(ctx, model.TargetRole, r.ID); err != nil {
		return 0, err
	}
	if err := db.Exec("DELETE FROM roles WHERE id = ?", r.ID).Error; err != nil {
		return 0, fmt.Errorf("delete role: %w", err)
	}
	if err := tx.shiftRoles(ctx, r.Position+1, 1<<30, -1, now); err != nil {
		return 0, err
	}
	return holders, tx.BumpAuthVersion(ctx)
}

// shiftRoles moves the roles at positions lo..hi by delta in two steps
// (negate, then renumber) so the unique index on position holds after every
// single-row update, on SQLite and PostgreSQL alike.
func (tx *Tx) shiftRoles(ctx context.Context, lo, hi, delta int, now time.Time) error {
	if lo > hi {
		return nil
	}
	db := tx.with(ctx)
	if err := db.Exec("UPDATE roles SET position = -(position + ?) WHERE position >= ? AND position <= ?", delta, lo, hi).Error; err != nil {
		return fmt.Errorf("shift roles: %w", err)
	}
	if err := db.Exec("UPDATE roles SET position = -position, version = version + 1, updated_at = ? WHERE position < 0", now).Error; err != nil {
		return fmt.Errorf("shift roles: %w", err)
	}
	return nil
}

// --- users

// InsertUser creates a user; a taken username or email is a conflict.
func (tx *Tx) InsertUser(ctx context.Context, u model.User) (model.User, error) {
	row := userRow{ID: u.ID, Username: u.Username, UsernameKey: strings.ToLower(u.Username), DisplayName: u.DisplayName,
		DisplayNameKey: strings.ToLower(u.DisplayName), Email: u.Email, EmailKey: lowerPtr(u.Email), Status: u.Status, IsOwner: u.IsOwner, Version: 1,
		CreatedAt: u.CreatedAt, UpdatedAt: u.UpdatedAt}
	if err := tx.checkUnique(ctx, u); err != nil {
		return model.User{}, err
	}
	if err := tx.with(ctx).Create(&row).Error; err != nil {
		return model.User{}, duplicate(err, "The username or email is taken.")
	}
	return row.model(nil), nil
}

// UpdateUser stores a user's fields and moves their version.
func (tx *Tx) UpdateUser(ctx context.Context, u model.User) (model.User, error) {
	if err := tx.checkUnique(ctx, u); err != nil {
		return model.User{}, err
	}
	err := tx.with(ctx).Model(&userRow{}).Where("id = ?", u.ID).Updates(map[string]any{
		"username": u.Username, "username_key": strings.ToLower(u.Username), "display_name": u.DisplayName,
		"display_name_key": strings.ToLower(u.DisplayName),
		"email":            u.Email, "email_key": lowerPtr(u.Email), "status": u.Status,
		"version": gorm.Expr("version + 1"), "updated_at": u.UpdatedAt}).Error
	if err != nil {
		return model.User{}, duplicate(err, "The username or email is taken.")
	}
	return tx.GetUser(ctx, u.ID)
}

// checkUnique gives a precise 409 before the unique indexes would.
func (tx *Tx) checkUnique(ctx context.Context, u model.User) error {
	var n int64
	if err := tx.with(ctx).Model(&userRow{}).Where("username_key = ? AND id <> ?", strings.ToLower(u.Username), u.ID).Count(&n).Error; err != nil {
		return fmt.Errorf("check username: %w", err)
	}
	if n > 0 {
		return apperr.Conflict("The username %q is taken (usernames are unique ignoring case).", u.Username)
	}
	if u.Email != nil {
		if err := tx.with(ctx).Model(&userRow{}).Where("email_key = ? AND id <> ?", strings.ToLower(*u.Email), u.ID).Count(&n).Error; err != nil {
			return fmt.Errorf("check email: %w", err)
		}
		if n > 0 {
			return apperr.Conflict("The email %q is taken.", *u.Email)
		}
	}
	return nil
}

// DeleteUser deletes a user with their roles, overwrites, tokens, tickets and
// profile links, and returns what went with them.
func (tx *Tx) DeleteUser(ctx context.Context, id string) (map[string]int64, error) {
	db := tx.with(ctx)
	gone := map[string]int64{}
	for _, c := range []struct{ name, table, where string }{
		{"roles", "user_roles", "user_id = ?"},
		{"tokens", "tokens", "user_id = ?"},
		{"overwrites", "overwrites", "target_type = 'user' AND target_id = ?"},
	} {
		var n int64
		if err := db.Table(c.table).Where(c.where, id).Count(&n).Error; err != nil {
			return nil, fmt.Errorf("delete user: %w", err)
		}
		gone[c.name] = n
	}
	if err := tx.deleteOverwritesOf(ctx, model.TargetUser, id); err != nil {
		return nil, err
	}
	for _, stmt := range []string{
		"DELETE FROM user_roles WHERE user_id = ?",
		"DELETE FROM tokens WHERE user_id = ?",
		"DELETE FROM event_tickets WHERE user_id = ?",
		"DELETE FROM profiles WHERE user_id = ?",
		"UPDATE attachments SET created_by = NULL WHERE created_by = ?",
		"UPDATE attachments SET updated_by = NULL WHERE updated_by = ?",
		"DELETE FROM users WHERE id = ?",
	} {
		if err := db.Exec(stmt, id).Error; err != nil {
			return nil, fmt.Errorf("delete user: %w", err)
		}
	}
	return gone, tx.BumpAuthVersion(ctx)
}

// AddUserRole gives a user a role; it reports whether anything changed.
func (tx *Tx) AddUserRole(ctx context.Context, userID, roleID string, now time.Time) (bool, error) {
	res := tx.with(ctx).Clauses(clause.OnConflict{DoNothing: true}).Create(&userRoleRow{UserID: userID, RoleID: roleID, CreatedAt: now})
	if res.Error != nil {
		return false, fmt.Errorf("assign role: %w", res.Error)
	}
	if res.RowsAffected == 0 {
		return false, nil
	}
	return true, tx.touchUser(ctx, userID, now)
}

// RemoveUserRole takes a role from a user; it reports whether anything changed.
func (tx *Tx) RemoveUserRole(ctx context.Context, userID, roleID string, now time.Time) (bool, error) {
	res := tx.with(ctx).Exec("DELETE FROM user_roles WHERE user_id = ? AND role_id = ?", userID, roleID)
	if res.Error != nil {
		return false, fmt.Errorf("remove role: %w", res.Error)
	}
	if res.RowsAffected == 0 {
		return false, nil
	}
	return true, tx.touchUser(ctx, userID, now)
}

func (tx *Tx) touchUser(ctx context.Context, userID string, now time.Time) error {
	if err := tx.with(ctx).Exec("UPDATE users SET version = version + 1, updated_at = ? WHERE id = ?", now, userID).Error; err != nil {
		return fmt.Errorf("touch user: %w", err)
	}
	return nil
}

// --- tokens

// InsertToken stores a token's metadata and hash.
func (tx *Tx) InsertToken(ctx context.Context, t model.Token, hash string) error {
	row := tokenRow{ID: t.ID, UserID: t.UserID, Name: t.Name, Hash: hash, CreatedAt: t.CreatedAt, ExpiresAt: t.ExpiresAt}
	if err := tx.with(ctx).Create(&row).Error; err != nil {
		return duplicate(err, "The token already exists.")
	}
	return nil
}

// DeleteToken revokes a token.
func (tx *Tx) DeleteToken(ctx context.Context, userID, tokenID string) error {
	if err := tx.with(ctx).Exec("DELETE FROM tokens WHERE id = ? AND user_id = ?", tokenID, userID).Error; err != nil {
		return fmt.Errorf("delete token: %w", err)
	}
	return nil
}

// InsertTicket stores an event-stream ticket's hash.
func (tx *Tx) InsertTicket(ctx context.Context, hash, userID string, expires time.Time) error {
	now := model.Now()
	if err := tx.with(ctx).Exec("DELETE FROM event_tickets WHERE expires_at < ?", now).Error; err != nil {
		return fmt.Errorf("purge tickets: %w", err)
	}
	if err := tx.with(ctx).Create(&ticketRow{Hash: hash, UserID: userID, ExpiresAt: expires}).Error; err != nil {
		return fmt.Errorf("create ticket: %w", err)
	}
	return nil
}

// ConsumeTicket deletes a ticket and returns its user if it was valid.
func (tx *Tx) ConsumeTicket(ctx context.Context, hash string, now time.Time) (string, error) {
	var row ticketRow
	err := tx.with(ctx).Where("hash = ?", hash).Take(&row).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return "", apperr.Unauthenticated("The event ticket is unknown, used or expired.")
	}
	if err != nil {
		return "", fmt.Errorf("read ticket: %w", err)
	}
	if err := tx.with(ctx).Exec("DELETE FROM event_tickets WHERE hash = ?", hash).Error; err != nil {
		return "", fmt.Errorf("consume ticket: %w", err)
	}
	if !row.ExpiresAt.After(now) {
		return "", apperr.Unauthenticated("The event ticket is unknown, used or expired.")
	}
	return row.UserID, nil
}

// --- attachments

// PutAttachment creates or replaces an attachment's metadata.
func (tx *Tx) PutAttachment(ctx context.Context, a model.Attachment) error {
	row := attachmentRow{ChannelID: a.ChannelID, ID: a.ID, ContentType: a.ContentType, Size: a.Size, SHA256: a.SHA256,
		BlobKey: a.BlobKey, CreatedBy: a.CreatedBy, UpdatedBy: a.UpdatedBy, CreatedAt: a.CreatedAt, UpdatedAt: a.UpdatedAt}
	err := tx.with(ctx).Clauses(clause.OnConflict{
		Columns:   []clause.Column{{Name: "channel_id"}, {Name: "id"}},
		DoUpdates: clause.AssignmentColumns([]string{"content_type", "size", "sha256", "blob_key", "updated_by", "updated_at"}),
	}).Create(&row).Error
	if err != nil {
		return fmt.Errorf("put attachment: %w", err)
	}
	return nil
}

// DeleteAttachment deletes an attachment's metadata.
func (tx *Tx) DeleteAttachment(ctx context.Context, channelID, id string) error {
	if err := tx.with(ctx).Exec("DELETE FROM attachments WHERE channel_id = ? AND id = ?", channelID, id).Error; err != nil {
		return fmt.Errorf("delete attachment: %w", err)
	}
	return nil
}

// --- profile links

// PutProfile replaces a user's links and returns the new version. The row
// stays when the links are emptied, so versions never repeat.
func (tx *Tx) PutProfile(ctx context.Context, p model.ProfileLinks, now time.Time) (int64, error) {
	db := tx.with(ctx)
	if p.Links == nil {
		p.Links = map[string]string{}
	}
	links, err := json.Marshal(p.Links)
	if err != nil {
		return 0, fmt.Errorf("encode links: %w", err)
	}
	row := profileRow{UserID: p.UserID, Links: string(links), Version: p.Version + 1, UpdatedAt: now}
	err = db.Clauses(clause.OnConflict{
		Columns:   []clause.Column{{Name: "user_id"}},
		DoUpdates: clause.AssignmentColumns([]string{"links", "version", "updated_at"}),
	}).Create(&row).Error
	if err != nil {
		return 0, fmt.Errorf("put profile: %w", err)
	}
	return row.Version, nil
}

// --- helpers

func duplicate(err error, format string, args ...any) error {
	if errors.Is(err, gorm.ErrDuplicatedKey) {
		return apperr.Conflict(format, args...)
	}
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), err)
}

func lowerPtr(s *string) *string {
	if s == nil {
		return nil
	}
	l := strings.ToLower(*s)
	return &l
}

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }
