package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/guildhall/guildhall/internal/apperr"
	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/permissions"
)

// Tx is one request's part of a write transaction (see Write). Its reads
// see the state it will commit on: writers are serialized, and the requests
// before it in the same transaction have already made their changes.
type Tx struct {
	queries
	events    []model.Event
	eventData []string // the events' data, encoded
	batch     *batchState
}

// AuthStateUncommitted reports whether authorization state read through tx
// may include changes not yet committed (a request of this transaction moved
// a version): such state must not be cached beyond the transaction.
func (tx *Tx) AuthStateUncommitted() bool { return tx.batch.bumped }

// AppendEvent records an event of the request. Its seq is assigned when
// the transaction writes the events of all its requests, after the last
// (insertEvents): Write returns them with it.
func (tx *Tx) AppendEvent(_ context.Context, ev model.Event) error {
	if ev.Data == nil {
		ev.Data = map[string]any{}
	}
	data, err := json.Marshal(ev.Data)
	if err != nil {
		return fmt.Errorf("encode event data: %w", err)
	}
	if ev.CreatedAt.IsZero() {
		ev.CreatedAt = model.Now()
	}
	tx.events = append(tx.events, ev)
	tx.eventData = append(tx.eventData, string(data))
	return nil
}

// insertEvents writes the events of the requests that succeeded, in their
// order, and assigns their seqs; it returns the last seq (0 when there are
// none). SQLite runs one prepared INSERT per event and takes the rowid from
// its result (reading a RETURNING row costs SQLite writes a quarter of their
// time); PostgreSQL inserts them all in one statement, one round trip for
// the batch, its identity column numbering the rows in the order of the
// ORDER BY (the write lock keeps other transactions from taking numbers
// meanwhile).
func (q queries) insertEvents(ctx context.Context, results []writeResult) (int64, error) {
	var n int
	for _, r := range results {
		n += len(r.events)
	}
	if n == 0 {
		return 0, nil
	}
	cols := eventColumns{
		types: make([]string, 0, n), actors: make([]*string, 0, n), subjects: make([]string, 0, n),
		data: make([]string, 0, n), reasons: make([]*string, 0, n), created: make([]int64, 0, n),
	}
	for _, r := range results {
		for k, ev := range r.events {
			cols.add(ev, r.eventData[k])
		}
	}
	seqs, err := q.insertEventRows(ctx, cols)
	if err != nil {
		return 0, fmt.Errorf("append events: %w", err)
	}
	i := 0
	for _, r := range results {
		for k := range r.events {
			r.events[k].Seq = seqs[i]
			i++
		}
	}
	return seqs[n-1], nil
}

type eventColumns struct {
	types, subjects, data []string
	actors, reasons       []*string
	created               []int64
}

func (c *eventColumns) add(ev model.Event, data string) {
	c.types = append(c.types, ev.Type)
	c.actors = append(c.actors, ev.ActorID)
	c.subjects = append(c.subjects, ev.Subject)
	c.data = append(c.data, data)
	c.reasons = append(c.reasons, ev.Reason)
	c.created = append(c.created, int64(microsOf(ev.CreatedAt)))
}

func (q queries) insertEventRows(ctx context.Context, c eventColumns) ([]int64, error) {
	seqs := make([]int64, 0, len(c.types))
	if q.dialect.name() == "sqlite" {
		const insert = "INSERT INTO events (type, actor_id, subject, data, reason, created_at) VALUES (?, ?, ?, ?, ?, ?)"
		for i := range c.types {
			res, err := q.exec(ctx, insert, c.types[i], c.actors[i], c.subjects[i], c.data[i], c.reasons[i], c.created[i])
			if err != nil {
				return nil, err
			}
			seq, err := res.LastInsertId()
			if err != nil {
				return nil, err
			}
			seqs = append(seqs, seq)
		}
		return seqs, nil
	}
	rows, err := q.query(ctx, `INSERT INTO events (type, actor_id, subject, data, reason, created_at)
SELECT e.type, e.actor_id, e.subject, e.data, e.reason, e.created_at
FROM unnest(?::varchar[], ?::varchar[], ?::varchar[], ?::text[], ?::text[], ?::bigint[])
  WITH ORDINALITY AS e(type, actor_id, subject, data, reason, created_at, n)
ORDER BY e.n RETURNING seq`,
		c.types, c.actors, c.subjects, c.data, c.reasons, c.created)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var seq int64
		if err := rows.Scan(&seq); err != nil {
			return nil, err
		}
		seqs = append(seqs, seq)
	}
	if err := rows.Close(); err != nil {
		return nil, err
	}
	if len(seqs) != len(c.types) {
		return nil, fmt.Errorf("%d seqs returned for %d events", len(seqs), len(c.types))
	}
	// The identity numbers the rows in insertion order; RETURNING is not
	// promised to list them in that order.
	slices.Sort(seqs)
	return seqs, nil
}

// BumpAuthVersion marks the authorization state (roles, overwrites, global
// permissions) as changed, so every instance reloads its snapshot.
func (tx *Tx) BumpAuthVersion(ctx context.Context) error {
	tx.batch.bumped = true
	if _, err := tx.exec(ctx, "UPDATE settings SET auth_version = auth_version + 1 WHERE id = 1"); err != nil {
		return fmt.Errorf("bump auth version: %w", err)
	}
	return nil
}

// BumpCredentials marks credentials (tokens, a user's status or roles) as
// changed, so every instance re-reads the credentials it cached.
func (tx *Tx) BumpCredentials(ctx context.Context) error {
	tx.batch.bumped = true
	if _, err := tx.exec(ctx, "UPDATE settings SET credentials_version = credentials_version + 1 WHERE id = 1"); err != nil {
		return fmt.Errorf("bump credentials version: %w", err)
	}
	return nil
}

// EnsureSettings creates the settings row of a fresh store.
func (tx *Tx) EnsureSettings(ctx context.Context, global permissions.Set) error {
	tx.batch.bumped = true // the versions exist from now on
	now := microsOf(model.Now())
	_, err := tx.exec(ctx, `INSERT INTO settings (id, global_permissions, global_version, auth_version, credentials_version, created_at, updated_at)
VALUES (1, ?, 1, 1, 1, ?, ?) ON CONFLICT (id) DO NOTHING`, int64(global), now, now)
	if err != nil {
		return fmt.Errorf("create settings: %w", err)
	}
	return nil
}

// SetGlobal replaces the global permissions.
func (tx *Tx) SetGlobal(ctx context.Context, global permissions.Set) error {
	tx.batch.bumped = true
	err := tx.with(ctx).Exec("UPDATE settings SET global_permissions = ?, global_version = global_version + 1, auth_version = auth_version + 1, updated_at = ? WHERE id = 1",
		int64(global), microsOf(model.Now())).Error
	if err != nil {
		return fmt.Errorf("set global permissions: %w", err)
	}
	return nil
}

// --- channels

// InsertChannel creates a channel; a taken ID is a conflict.
func (tx *Tx) InsertChannel(ctx context.Context, c model.Channel) (model.Channel, error) {
	row := channelRow{ID: c.ID, Name: c.Name, Topic: c.Topic, Version: 1, OverwritesVersion: 1,
		CreatedAt: microsOf(c.CreatedAt), UpdatedAt: microsOf(c.UpdatedAt)}
	if err := tx.with(ctx).Create(&row).Error; err != nil {
		return model.Channel{}, duplicate(err, "Channel %q already exists.", c.ID)
	}
	return row.model(), nil
}

// UpdateChannel stores a channel's name and topic and moves its version.
func (tx *Tx) UpdateChannel(ctx context.Context, c model.Channel) (model.Channel, error) {
	res := tx.with(ctx).Model(&channelRow{}).Where("id = ?", c.ID).Updates(map[string]any{
		"name": c.Name, "topic": c.Topic, "version": gorm.Expr("version + 1"), "updated_at": microsOf(c.UpdatedAt)})
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
	// Its overwrites and attachments go with it (ON DELETE CASCADE).
	if err := tx.with(ctx).Exec("DELETE FROM channels WHERE id = ?", id).Error; err != nil {
		return nil, fmt.Errorf("delete channel: %w", err)
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

// OverwritesOf lists the overwrites of one target (a role or a user)
// across all channels, by channel ID.
func (tx *Tx) OverwritesOf(ctx context.Context, targetType, targetID string) ([]model.Overwrite, error) {
	var rows []overwriteRow
	err := tx.with(ctx).Where("target_type = ? AND target_id = ?", targetType, targetID).Order("channel_id").Find(&rows).Error
	if err != nil {
		return nil, fmt.Errorf("list overwrites of %s %s: %w", targetType, targetID, err)
	}
	out := make([]model.Overwrite, len(rows))
	for i, r := range rows {
		out[i] = r.model()
	}
	return out, nil
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
		Version: 1, CreatedAt: microsOf(r.CreatedAt), UpdatedAt: microsOf(r.UpdatedAt)}
	if err := tx.with(ctx).Create(&row).Error; err != nil {
		return model.Role{}, duplicate(err, "Role %q already exists.", r.ID)
	}
	return row.model(), tx.BumpAuthVersion(ctx)
}

// UpdateRole stores a role's name, color and permissions and moves its version.
func (tx *Tx) UpdateRole(ctx context.Context, r model.Role) (model.Role, error) {
	err := tx.with(ctx).Model(&roleRow{}).Where("id = ?", r.ID).Updates(map[string]any{
		"name": r.Name, "color": r.Color, "permissions": int64(r.Permissions),
		"version": gorm.Expr("version + 1"), "updated_at": microsOf(r.UpdatedAt)}).Error
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
	err = db.Exec("UPDATE roles SET position = ?, version = version + 1, updated_at = ? WHERE id = ?", to, microsOf(now), id).Error
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
AND id IN (SELECT user_id FROM user_roles WHERE role_id IN (`+passed+`))`, microsOf(now), id, lo, hi, id).Error
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
	if err := db.Exec("UPDATE users SET version = version + 1, updated_at = ? WHERE id IN (SELECT user_id FROM user_roles WHERE role_id = ?)", microsOf(now), r.ID).Error; err != nil {
		return 0, fmt.Errorf("delete role: %w", err)
	}
	if err := tx.deleteOverwritesOf(ctx, model.TargetRole, r.ID); err != nil {
		return 0, err
	}
	// user_roles rows go with the role (ON DELETE CASCADE).
	if err := db.Exec("DELETE FROM roles WHERE id = ?", r.ID).Error; err != nil {
		return 0, fmt.Errorf("delete role: %w", err)
	}
	if err := tx.shiftRoles(ctx, r.Position+1, 1<<30, -1, now); err != nil {
		return 0, err
	}
	if holders > 0 {
		if err := tx.BumpCredentials(ctx); err != nil {
			return 0, err
		}
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
	if err := db.Exec("UPDATE roles SET position = -position, version = version + 1, updated_at = ? WHERE position < 0", microsOf(now)).Error; err != nil {
		return fmt.Errorf("shift roles: %w", err)
	}
	return nil
}

// --- users

// InsertUser creates a user; a taken username or email is a conflict,
// found by the unique indexes themselves (no query before the insert).
func (tx *Tx) InsertUser(ctx context.Context, u model.User) (model.User, error) {
	_, err := tx.exec(ctx, `INSERT INTO users (id, username, username_key, display_name, display_name_key, email, email_key, status, is_owner, version, created_at, updated_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?)`,
		u.ID, u.Username, strings.ToLower(u.Username), u.DisplayName, strings.ToLower(u.DisplayName), u.Email, lowerPtr(u.Email),
		u.Status, u.IsOwner, microsOf(u.CreatedAt), microsOf(u.UpdatedAt))
	if err != nil {
		return model.User{}, userConflict(err, u)
	}
	u.Version = 1
	if u.Roles == nil {
		u.Roles = []string{}
	}
	return u, nil
}

// UpdateUser stores a user's fields and moves their version. A change of
// status is a change of credentials (the caller bumps them).
func (tx *Tx) UpdateUser(ctx context.Context, u model.User) (model.User, error) {
	_, err := tx.exec(ctx, `UPDATE users SET username = ?, username_key = ?, display_name = ?, display_name_key = ?, email = ?, email_key = ?,
status = ?, version = version + 1, updated_at = ? WHERE id = ?`,
		u.Username, strings.ToLower(u.Username), u.DisplayName, strings.ToLower(u.DisplayName), u.Email, lowerPtr(u.Email),
		u.Status, microsOf(u.UpdatedAt), u.ID)
	if err != nil {
		return model.User{}, userConflict(err, u)
	}
	return tx.GetUser(ctx, u.ID)
}

// userConflict turns a unique-index violation on users into the 409 that
// names what is taken; other errors pass through.
func userConflict(err error, u model.User) error {
	switch idx := uniqueViolation(err); {
	case strings.Contains(idx, "username_key"):
		return apperr.Conflict("The username %q is taken (usernames are unique ignoring case).", u.Username)
	case strings.Contains(idx, "email_key") && u.Email != nil:
		return apperr.Conflict("The email %q is taken.", *u.Email)
	}
	return duplicate(err, "The username or email is taken.")
}

// DeleteUser deletes a user, and returns what went with them. The schema's
// foreign keys take their roles, tokens, event tickets and profile links
// (ON DELETE CASCADE) and clear them from attachments (SET NULL); their
// overwrites, whose target is not a foreign key, are deleted here.
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
	if err := db.Exec("DELETE FROM users WHERE id = ?", id).Error; err != nil {
		return nil, fmt.Errorf("delete user: %w", err)
	}
	if err := tx.BumpCredentials(ctx); err != nil {
		return nil, err
	}
	return gone, tx.BumpAuthVersion(ctx)
}

// AddUserRole gives a user a role; it reports whether anything changed.
func (tx *Tx) AddUserRole(ctx context.Context, userID, roleID string, now time.Time) (bool, error) {
	res := tx.with(ctx).Clauses(clause.OnConflict{DoNothing: true}).Create(&userRoleRow{UserID: userID, RoleID: roleID, CreatedAt: microsOf(now)})
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
	if err := tx.with(ctx).Exec("UPDATE users SET version = version + 1, updated_at = ? WHERE id = ?", microsOf(now), userID).Error; err != nil {
		return fmt.Errorf("touch user: %w", err)
	}
	// The user's roles are part of their credentials.
	return tx.BumpCredentials(ctx)
}

// --- tokens

// InsertToken stores a token's metadata and hash.
func (tx *Tx) InsertToken(ctx context.Context, t model.Token, hash string) error {
	row := tokenRow{ID: t.ID, UserID: t.UserID, Name: t.Name, Hash: hash, CreatedAt: microsOf(t.CreatedAt), ExpiresAt: microsPtr(t.ExpiresAt)}
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
	return tx.BumpCredentials(ctx)
}

// --- attachments

// PutAttachment creates or replaces an attachment's metadata.
func (tx *Tx) PutAttachment(ctx context.Context, a model.Attachment) error {
	row := attachmentRow{ChannelID: a.ChannelID, ID: a.ID, ContentType: a.ContentType, Size: a.Size, SHA256: a.SHA256,
		BlobKey: a.BlobKey, CreatedBy: a.CreatedBy, UpdatedBy: a.UpdatedBy, CreatedAt: microsOf(a.CreatedAt), UpdatedAt: microsOf(a.UpdatedAt)}
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
	row := profileRow{UserID: p.UserID, Links: string(links), Version: p.Version + 1, UpdatedAt: microsOf(now)}
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
