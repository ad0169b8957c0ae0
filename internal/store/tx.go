package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/guildhall/guildhall/internal/apperr"
	"github.com/guildhall/guildhall/internal/fresh"
	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/permissions"
)

// Tx is one request's part of a write transaction (see Write). Its reads
// see the state it will commit on: writers are serialized, and the requests
// before it in the same transaction have already made their changes.
type Tx struct {
	queries
	store     *Store
	events    []model.Event
	eventData []string // the events' data, encoded
	batch     *batchState
}

// own returns what the transaction changed so far, as the change log's
// triggers logged it (fresh.Cache.Own): what the cache holds of it is not
// what the transaction sees. It is read again only after a statement that
// may have written (queries.wrote).
func (tx *Tx) own(ctx context.Context) ([]fresh.Change, error) {
	c := tx.store.cache
	if err := c.Fresh(tx.cacheCtx(ctx)); err != nil {
		return nil, err
	}
	b := tx.batch
	if !b.fromSet {
		// The first question of the transaction: the cache has followed
		// the log under the write lock, so on SQLite what the log holds
		// after its position is the transaction's.
		b.from, b.fromSet = c.Position(), true
	}
	if n := tx.writes.Load(); n != b.ownAt || !b.ownRead {
		changes, err := c.Own(ctx, tx.query, tx.store.freshPG(), b.from)
		if err != nil {
			return nil, err
		}
		b.ownChanges, b.ownAt, b.ownRead = changes, n, true
	}
	return b.ownChanges, nil
}

// cacheCtx is ctx in the batch's read scope: the cache follows the change
// log once per transaction, after the write lock is held, so what it holds
// is what the transaction started from.
func (tx *Tx) cacheCtx(ctx context.Context) context.Context {
	if tx.span != nil { // traced: the cache's work is the write's
		ctx = trace.ContextWithSpan(ctx, tx.span)
	}
	return tx.batch.scope(ctx)
}

// AuthState returns the authorization state as the transaction sees it:
// the cache's, with the parts the transaction changed read again through
// it (and not kept: they are not committed).
func (tx *Tx) AuthState(ctx context.Context) (*AuthState, error) {
	base, err := tx.store.AuthState(tx.cacheCtx(ctx))
	if err != nil {
		return nil, err
	}
	own, err := tx.own(ctx)
	if err != nil {
		return nil, err
	}
	p := tx.store.auth.PartsOf(own)
	if p.Empty() {
		return base, nil
	}
	return buildAuthState(ctx, tx.queries, base, p)
}

// Credentials looks a token up by its hash as the transaction sees it: from
// the cache unless the transaction changed the token or its user.
func (tx *Tx) Credentials(ctx context.Context, tokenHash string) (Credentials, error) {
	own, err := tx.own(ctx)
	if err != nil {
		return Credentials{}, err
	}
	c := tx.store.cache
	v, hit := c.Lookup(fresh.Key{Kind: fresh.Credentials, A: tokenHash})
	if hit {
		cred := v.(Credentials)
		for _, d := range credentialDeps(cred) {
			if changed(own, d) {
				hit = false
			}
		}
	}
	c.Traced(tx.cacheCtx(ctx), fresh.Credentials, hit)
	if hit {
		cred := v.(Credentials)
		cred.Principal.Roles = slices.Clone(cred.Principal.Roles)
		return cred, nil
	}
	return tx.tokenCredentials(ctx, false, tokenHash)
}

// changed reports whether changes reach d: its key, its whole table, or
// everything.
func changed(changes []fresh.Change, d fresh.Dep) bool {
	for _, ch := range changes {
		if ch.Table == "*" || ch.Table == d.Table && (ch.Key == d.Key || ch.Key == "") {
			return true
		}
	}
	return false
}

// CredentialsOf is Store.CredentialsOf as the transaction sees it.
func (tx *Tx) CredentialsOf(ctx context.Context, userID string) (Credentials, error) {
	return tx.credentialsOf(ctx, userID)
}

// Settings returns the global permissions and their version as the
// transaction sees them.
func (tx *Tx) Settings(ctx context.Context) (permissions.Set, int64, error) { return tx.settings(ctx) }

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

// eventChunk bounds the rows of one events INSERT: a transaction's events
// (one or more per request) go in statements of at most this many rows, so
// that at most eventChunk texts are prepared (one per number of rows), and
// a few thousand events (an import, a bulk change) stay far within
// SQLite's and PostgreSQL's bounds on parameters. A group commit of
// creates (a request, an event) fits one statement.
const eventChunk = 64

// eventsInsert holds the INSERT of n events (index n), RETURNING their
// seqs: built once.
var eventsInsert = func() [eventChunk + 1]string {
	var out [eventChunk + 1]string
	for n := 1; n <= eventChunk; n++ {
		out[n] = "INSERT INTO events (type, actor_id, subject, data, reason, created_at) VALUES " +
			strings.Repeat("(?, ?, ?, ?, ?, ?), ", n-1) + "(?, ?, ?, ?, ?, ?) RETURNING seq"
	}
	return out
}()

// insertEvents writes the events of the requests that succeeded, in their
// order, and assigns their seqs; it returns the last seq (0 when there are
// none). The write lock keeps other transactions from taking seqs
// meanwhile, so the rows are numbered in the order of the statements'
// values; RETURNING is not promised to list them in that order, so the seqs
// are sorted.
//
// It is the other hot write (queries.go): every write appends its events,
// and GORM's builder reflects over each row.
func (q queries) insertEvents(ctx context.Context, results []writeResult) (int64, error) {
	n := 0
	for _, r := range results {
		n += len(r.events)
	}
	if n == 0 {
		return 0, nil
	}
	seqs := make([]int64, 0, n)
	args := make([]any, 0, 6*min(n, eventChunk))
	flush := func() error {
		rows, err := q.query(ctx, eventsInsert[len(args)/6], args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var seq int64
			if err := rows.Scan(&seq); err != nil {
				return err
			}
			seqs = append(seqs, seq)
		}
		args = args[:0]
		return rows.Err()
	}
	for _, r := range results {
		for k, ev := range r.events {
			args = append(args, ev.Type, ev.ActorID, ev.Subject, r.eventData[k], ev.Reason, int64(microsOf(ev.CreatedAt)))
			if len(args) == 6*eventChunk {
				if err := flush(); err != nil {
					return 0, fmt.Errorf("append events: %w", err)
				}
			}
		}
	}
	if len(args) > 0 {
		if err := flush(); err != nil {
			return 0, fmt.Errorf("append events: %w", err)
		}
	}
	if len(seqs) != n {
		return 0, fmt.Errorf("append events: %d seqs returned for %d events", len(seqs), n)
	}
	slices.Sort(seqs)
	i := 0
	for _, r := range results {
		for k := range r.events {
			r.events[k].Seq = seqs[i]
			i++
		}
	}
	return seqs[n-1], nil
}

type settingsRow struct {
	ID                 int64 `gorm:"primaryKey"`
	GlobalPermissions  int64
	GlobalVersion      int64
	AuthVersion        int64 // for instances of earlier versions (changelog.go)
	CredentialsVersion int64
	CreatedAt          micros `gorm:"autoCreateTime:false"`
	UpdatedAt          micros `gorm:"autoUpdateTime:false"`
}

func (settingsRow) TableName() string { return "settings" }

// EnsureSettings creates the settings row of a fresh store.
func (tx *Tx) EnsureSettings(ctx context.Context, global permissions.Set) error {
	now := microsOf(model.Now())
	row := settingsRow{ID: 1, GlobalPermissions: int64(global), GlobalVersion: 1, AuthVersion: 1, CredentialsVersion: 1,
		CreatedAt: now, UpdatedAt: now}
	if err := tx.with(ctx).Clauses(clause.OnConflict{DoNothing: true}).Create(&row).Error; err != nil {
		return fmt.Errorf("create settings: %w", err)
	}
	return nil
}

// SetGlobal replaces the global permissions.
func (tx *Tx) SetGlobal(ctx context.Context, global permissions.Set) error {
	err := tx.with(ctx).Model(&settingsRow{}).Where("id = 1").Updates(map[string]any{
		"global_permissions": int64(global), "global_version": gorm.Expr("global_version + 1"),
		"updated_at": microsOf(model.Now())}).Error
	if err != nil {
		return fmt.Errorf("set global permissions: %w", err)
	}
	return nil
}

// --- channels

// InsertChannel creates a channel; a taken ID is a conflict.
func (tx *Tx) InsertChannel(ctx context.Context, c model.Channel) (model.Channel, error) {
	if c.Kind == "" {
		c.Kind = model.KindText
	}
	row := channelRow{ID: c.ID, Name: c.Name, Topic: c.Topic, Kind: c.Kind, ParentID: c.ParentID, Position: c.Position,
		Version: 1, OverwritesVersion: 1, CreatedAt: microsOf(c.CreatedAt), UpdatedAt: microsOf(c.UpdatedAt)}
	if err := tx.with(ctx).Create(&row).Error; err != nil {
		return model.Channel{}, duplicate(err, "Channel %q already exists.", c.ID)
	}
	return row.model(), nil
}

// UpdateChannel stores a channel's name, topic, category and position, and
// moves its version. One prepared statement, which answers the channel as
// stored: an import changes hundreds of channels one by one.
func (tx *Tx) UpdateChannel(ctx context.Context, c model.Channel) (model.Channel, error) {
	rows, err := tx.query(ctx, "UPDATE channels SET name = ?, topic = ?, parent_id = ?, position = ?, version = version + 1, "+
		"updated_at = ? WHERE id = ? RETURNING "+channelColumns,
		c.Name, c.Topic, c.ParentID, c.Position, int64(microsOf(c.UpdatedAt)), c.ID)
	if err != nil {
		return model.Channel{}, fmt.Errorf("update channel: %w", err)
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return model.Channel{}, fmt.Errorf("update channel: %w", err)
		}
		return model.Channel{}, notFound(gorm.ErrRecordNotFound, "Channel %q does not exist.", c.ID)
	}
	var r channelRow
	if err := rows.Scan(r.fields()...); err != nil {
		return model.Channel{}, fmt.Errorf("update channel: %w", err)
	}
	if err := rows.Close(); err != nil {
		return model.Channel{}, fmt.Errorf("update channel: %w", err)
	}
	return r.model(), nil
}

// channelUpdates is the subquery of UpdateChannels' list.
var channelUpdates = []jsonColumn{{"id", "text"}, {"name", "text"}, {"topic", "text"}, {"parent_id", "text"},
	{"position", "integer"}, {"updated_at", "bigint"}}

// UpdateChannels is UpdateChannel for many channels, in one statement (the
// list as one JSON parameter), without reading them back.
func (tx *Tx) UpdateChannels(ctx context.Context, cs []model.Channel) error {
	if len(cs) == 0 {
		return nil
	}
	type row struct {
		ID        string  `json:"id"`
		Name      string  `json:"name"`
		Topic     *string `json:"topic"`
		ParentID  *string `json:"parent_id"`
		Position  int     `json:"position"`
		UpdatedAt int64   `json:"updated_at"`
	}
	rows := make([]row, len(cs))
	for i, c := range cs {
		rows[i] = row{ID: c.ID, Name: c.Name, Topic: c.Topic, ParentID: c.ParentID, Position: c.Position, UpdatedAt: int64(microsOf(c.UpdatedAt))}
	}
	list, err := json.Marshal(rows)
	if err != nil {
		return fmt.Errorf("update channels: %w", err)
	}
	res, err := tx.exec(ctx, "UPDATE channels SET name = m.name, topic = m.topic, parent_id = m.parent_id, position = m.position, "+
		"version = version + 1, updated_at = m.updated_at FROM ("+tx.dialect.jsonRecords(channelUpdates...)+") AS m WHERE channels.id = m.id",
		string(list))
	if err != nil {
		return fmt.Errorf("update channels: %w", err)
	}
	if n, err := res.RowsAffected(); err == nil && int(n) != len(cs) {
		return fmt.Errorf("update channels: %d of %d channels found", n, len(cs))
	}
	return nil
}

// ChannelsByID reads the channels of ids as the transaction sees them; an
// unknown ID is absent from the map.
func (tx *Tx) ChannelsByID(ctx context.Context, ids []string) (map[string]model.Channel, error) {
	out := make(map[string]model.Channel, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	list, err := json.Marshal(ids)
	if err != nil {
		return nil, fmt.Errorf("read channels: %w", err)
	}
	err = scanAll(ctx, tx.queries, "SELECT "+channelColumns+" FROM channels WHERE id IN ("+tx.dialect.jsonTexts()+")",
		[]any{string(list)}, func(rows *sql.Rows) error {
			var r channelRow
			if err := rows.Scan(r.fields()...); err != nil {
				return err
			}
			out[r.ID] = r.model()
			return nil
		})
	if err != nil {
		return nil, fmt.Errorf("read channels: %w", err)
	}
	return out, nil
}

// ChannelMove is where MoveChannels puts a channel.
type ChannelMove struct {
	ID        string
	ParentID  *string
	Position  int
	UpdatedAt time.Time
}

// channelMoves is the subquery of MoveChannels' list.
var channelMoves = []jsonColumn{{"id", "text"}, {"parent_id", "text"}, {"position", "integer"}, {"updated_at", "bigint"}}

// MoveChannels stores the category and position of many channels, and
// moves their versions, in one statement: a reorder of hundreds of
// channels costs one round trip, not one per channel (the list travels as
// one JSON parameter, so the statement is one constant text).
func (tx *Tx) MoveChannels(ctx context.Context, moves []ChannelMove) error {
	if len(moves) == 0 {
		return nil
	}
	type row struct {
		ID        string  `json:"id"`
		ParentID  *string `json:"parent_id"`
		Position  int     `json:"position"`
		UpdatedAt int64   `json:"updated_at"`
	}
	rows := make([]row, len(moves))
	for i, m := range moves {
		rows[i] = row{ID: m.ID, ParentID: m.ParentID, Position: m.Position, UpdatedAt: int64(microsOf(m.UpdatedAt))}
	}
	list, err := json.Marshal(rows)
	if err != nil {
		return fmt.Errorf("move channels: %w", err)
	}
	res, err := tx.exec(ctx, "UPDATE channels SET parent_id = m.parent_id, position = m.position, version = version + 1, "+
		"updated_at = m.updated_at FROM ("+tx.dialect.jsonRecords(channelMoves...)+") AS m WHERE channels.id = m.id", string(list))
	if err != nil {
		return fmt.Errorf("move channels: %w", err)
	}
	if n, err := res.RowsAffected(); err == nil && int(n) != len(moves) {
		return fmt.Errorf("move channels: %d of %d channels found", n, len(moves))
	}
	return nil
}

// CountChannels counts the channels, and the channels of a category when
// parentID is not "".
func (tx *Tx) CountChannels(ctx context.Context, parentID string) (int, error) {
	var n int64
	db := tx.with(ctx).Model(&channelRow{})
	if parentID != "" {
		db = db.Where("parent_id = ?", parentID)
	}
	if err := db.Count(&n).Error; err != nil {
		return 0, fmt.Errorf("count channels: %w", err)
	}
	return int(n), nil
}

// NextPosition is the position after the last of the channels in a
// category (parentID nil: outside any), 0 when there are none.
func (tx *Tx) NextPosition(ctx context.Context, parentID *string) (int, error) {
	var last *int
	db := tx.with(ctx).Model(&channelRow{}).Select("MAX(position)")
	if parentID == nil {
		db = db.Where("parent_id IS NULL")
	} else {
		db = db.Where("parent_id = ?", *parentID)
	}
	if err := db.Scan(&last).Error; err != nil {
		return 0, fmt.Errorf("read positions: %w", err)
	}
	if last == nil {
		return 0, nil
	}
	return *last + 1, nil
}

// overwriteRecords is the subquery of ReplaceOverwriteLists' rows.
var overwriteRecords = []jsonColumn{{"channel_id", "text"}, {"target_type", "text"}, {"target_id", "text"},
	{"allow_bits", "bigint"}, {"deny_bits", "bigint"}}

// ReplaceOverwrites makes a channel's overwrites exactly the list given
// (their channel is taken to be channelID), and moves the list's version.
func (tx *Tx) ReplaceOverwrites(ctx context.Context, channelID string, list []model.Overwrite) error {
	return tx.ReplaceOverwriteLists(ctx, []OverwriteList{{ChannelID: channelID, List: list}})
}

// OverwriteList is a channel's whole list of overwrites.
type OverwriteList struct {
	ChannelID string
	List      []model.Overwrite // their channel is taken to be ChannelID
}

// ReplaceOverwriteLists is ReplaceOverwrites for many channels (a
// channel listed twice gets its last list): three statements whatever the
// number of channels and overwrites (each list travels as one JSON
// parameter), as an import replaces hundreds of lists under the write lock.
func (tx *Tx) ReplaceOverwriteLists(ctx context.Context, lists []OverwriteList) error {
	if len(lists) == 0 {
		return nil
	}
	type row struct {
		ChannelID  string `json:"channel_id"`
		TargetType string `json:"target_type"`
		TargetID   string `json:"target_id"`
		Allow      int64  `json:"allow_bits"`
		Deny       int64  `json:"deny_bits"`
	}
	last := make(map[string]int, len(lists))
	for i, l := range lists {
		last[l.ChannelID] = i
	}
	ids := make([]string, 0, len(last))
	var rows []row
	for i, l := range lists {
		if last[l.ChannelID] != i {
			continue
		}
		ids = append(ids, l.ChannelID)
		for _, o := range l.List {
			rows = append(rows, row{ChannelID: l.ChannelID, TargetType: o.TargetType, TargetID: o.TargetID, Allow: int64(o.Allow), Deny: int64(o.Deny)})
		}
	}
	idList, err := json.Marshal(ids)
	if err != nil {
		return fmt.Errorf("replace overwrites: %w", err)
	}
	if _, err := tx.exec(ctx, "DELETE FROM overwrites WHERE channel_id IN ("+tx.dialect.jsonTexts()+")", string(idList)); err != nil {
		return fmt.Errorf("replace overwrites: %w", err)
	}
	if len(rows) > 0 {
		data, err := json.Marshal(rows)
		if err != nil {
			return fmt.Errorf("replace overwrites: %w", err)
		}
		if _, err := tx.exec(ctx, "INSERT INTO overwrites (channel_id, target_type, target_id, allow_bits, deny_bits) "+
			"SELECT o.channel_id, o.target_type, o.target_id, o.allow_bits, o.deny_bits FROM ("+
			tx.dialect.jsonRecords(overwriteRecords...)+") AS o", string(data)); err != nil {
			return fmt.Errorf("replace overwrites: %w", err)
		}
	}
	if _, err := tx.exec(ctx, "UPDATE channels SET overwrites_version = overwrites_version + 1 WHERE id IN ("+
		tx.dialect.jsonTexts()+")", string(idList)); err != nil {
		return fmt.Errorf("move the overwrite lists' versions: %w", err)
	}
	return nil
}

// DeleteChannel deletes a channel with its overwrites and attachments and
// returns the blob keys that are no longer referenced. The channels of a
// category it deletes stay, outside any category, changed at now.
func (tx *Tx) DeleteChannel(ctx context.Context, id string, now time.Time) ([]string, error) {
	var children []string
	if err := tx.with(ctx).Model(&channelRow{}).Where("parent_id = ?", id).Pluck("id", &children).Error; err != nil {
		return nil, fmt.Errorf("list a category's channels: %w", err)
	}
	db := tx.with(ctx)
	if len(children) > 0 {
		// A category's channels leave it: they change, so their versions
		// (ETags) and updated_at move, which ON DELETE SET NULL would not do.
		if err := db.Model(&channelRow{}).Where("parent_id = ?", id).Updates(map[string]any{
			"parent_id": nil, "version": gorm.Expr("version + 1"), "updated_at": microsOf(now)}).Error; err != nil {
			return nil, fmt.Errorf("take channels out of a category: %w", err)
		}
	}
	var keys []string
	if err := db.Model(&attachmentRow{}).Where("channel_id = ?", id).Pluck("blob_key", &keys).Error; err != nil {
		return nil, fmt.Errorf("list channel blobs: %w", err)
	}
	// Its overwrites and attachments go with it (ON DELETE CASCADE).
	if err := db.Where("id = ?", id).Delete(&channelRow{}).Error; err != nil {
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
	return tx.bumpOverwriteLists(ctx, []string{o.ChannelID})
}

// bumpOverwriteLists moves the versions of channels' overwrite lists.
func (tx *Tx) bumpOverwriteLists(ctx context.Context, channelIDs []string) error {
	if len(channelIDs) == 0 {
		return nil
	}
	err := tx.with(ctx).Model(&channelRow{}).Where("id IN ?", channelIDs).
		Update("overwrites_version", gorm.Expr("overwrites_version + 1")).Error
	if err != nil {
		return fmt.Errorf("move overwrite list versions: %w", err)
	}
	return nil
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
	var channels []string
	if err := db.Model(&overwriteRow{}).Where("target_type = ? AND target_id = ?", targetType, targetID).
		Pluck("channel_id", &channels).Error; err != nil {
		return fmt.Errorf("delete overwrites of %s %s: %w", targetType, targetID, err)
	}
	if len(channels) == 0 {
		return nil
	}
	if err := db.Where("target_type = ? AND target_id = ?", targetType, targetID).Delete(&overwriteRow{}).Error; err != nil {
		return fmt.Errorf("delete overwrites of %s %s: %w", targetType, targetID, err)
	}
	return tx.bumpOverwriteLists(ctx, channels)
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
	return row.model(), nil
}

// InsertRolesOnTop creates roles above all the others, in the order given
// (the first lowest), in one statement and without moving any role; the
// positions they are given are ignored. An import creates its roles so and
// then puts every role in place with one SetRolePositions.
func (tx *Tx) InsertRolesOnTop(ctx context.Context, rs []model.Role) error {
	if len(rs) == 0 {
		return nil
	}
	var top int
	if err := tx.with(ctx).Model(&roleRow{}).Select("COALESCE(MAX(position), 0)").Scan(&top).Error; err != nil {
		return fmt.Errorf("read role positions: %w", err)
	}
	rows := make([]roleRow, len(rs))
	for i, r := range rs {
		rows[i] = roleRow{ID: r.ID, Name: r.Name, Position: top + 1 + i, Color: r.Color, Permissions: int64(r.Permissions),
			Version: 1, CreatedAt: microsOf(r.CreatedAt), UpdatedAt: microsOf(r.UpdatedAt)}
	}
	if err := tx.with(ctx).Create(&rows).Error; err != nil {
		return duplicate(err, "A role of the import already exists.")
	}
	return nil
}

// UpdateRole stores a role's name, color and permissions and moves its version.
func (tx *Tx) UpdateRole(ctx context.Context, r model.Role) (model.Role, error) {
	err := tx.with(ctx).Model(&roleRow{}).Where("id = ?", r.ID).Updates(map[string]any{
		"name": r.Name, "color": r.Color, "permissions": int64(r.Permissions),
		"version": gorm.Expr("version + 1"), "updated_at": microsOf(r.UpdatedAt)}).Error
	if err != nil {
		return model.Role{}, fmt.Errorf("update role: %w", err)
	}
	return tx.GetRole(ctx, r.ID)
}

// MoveRole places a role at a position, shifting the roles in between.
func (tx *Tx) MoveRole(ctx context.Context, id string, from, to int, now time.Time) (model.Role, error) {
	db := tx.with(ctx)
	if err := db.Model(&roleRow{}).Where("id = ?", id).Update("position", 0).Error; err != nil {
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
	err = db.Model(&roleRow{}).Where("id = ?", id).Updates(map[string]any{
		"position": to, "version": gorm.Expr("version + 1"), "updated_at": microsOf(now)}).Error
	if err != nil {
		return model.Role{}, fmt.Errorf("move role: %w", err)
	}
	// Lists ordered by role position change when the moved role passes
	// another one they hold: a channel's overwrites and a user's roles. Their
	// versions (ETags) must move with their representation.
	lo, hi := min(from, to), max(from, to)
	passed := db.Model(&roleRow{}).Select("id").Where("position >= ? AND position <= ? AND id <> ?", lo, hi, id)
	var channels []string
	err = db.Model(&overwriteRow{}).Distinct("channel_id").
		Where("target_type = 'role' AND target_id = ?", id).
		Where("channel_id IN (?)", db.Model(&overwriteRow{}).Select("channel_id").
			Where("target_type = 'role' AND target_id IN (?)", passed)).
		Pluck("channel_id", &channels).Error
	if err == nil {
		err = tx.bumpOverwriteLists(ctx, channels)
	}
	if err == nil {
		err = db.Model(&userRow{}).
			Where("id IN (?)", db.Model(&userRoleRow{}).Select("user_id").Where("role_id = ?", id)).
			Where("id IN (?)", db.Model(&userRoleRow{}).Select("user_id").Where("role_id IN (?)", passed)).
			Updates(map[string]any{"version": gorm.Expr("version + 1"), "updated_at": microsOf(now)}).Error
	}
	if err != nil {
		return model.Role{}, fmt.Errorf("move role: %w", err)
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
	if holders > 0 {
		// The users' representation (their role list) changes.
		err := db.Model(&userRow{}).Where("id IN (?)", db.Model(&userRoleRow{}).Select("user_id").Where("role_id = ?", r.ID)).
			Updates(map[string]any{"version": gorm.Expr("version + 1"), "updated_at": microsOf(now)}).Error
		if err != nil {
			return 0, fmt.Errorf("delete role: %w", err)
		}
	}
	if err := tx.deleteOverwritesOf(ctx, model.TargetRole, r.ID); err != nil {
		return 0, err
	}
	// user_roles rows go with the role (ON DELETE CASCADE).
	if err := db.Where("id = ?", r.ID).Delete(&roleRow{}).Error; err != nil {
		return 0, fmt.Errorf("delete role: %w", err)
	}
	if err := tx.shiftRoles(ctx, r.Position+1, 1<<30, -1, now); err != nil {
		return 0, err
	}
	return holders, nil
}

// holderAtOrAbove is the condition on a user (row of users) who holds a
// role (the first parameter), is not a given user (the second), and is the
// owner or holds a role at a position (the third) or above.
const holderAtOrAbove = "id IN (SELECT user_id FROM user_roles WHERE role_id = ?) AND id <> ? AND " +
	"(is_owner OR EXISTS (SELECT 1 FROM user_roles ur JOIN roles r ON r.id = ur.role_id WHERE ur.user_id = users.id AND r.position >= ?))"

// RoleHolderAtOrAbove finds a holder of role roleID, other than exceptUserID,
// who is the owner or holds a role at position top or above: one whom a
// caller of that top position may not take the role from. The owner is
// named first. found is false when there is none.
func (tx *Tx) RoleHolderAtOrAbove(ctx context.Context, roleID, exceptUserID string, top int) (u model.User, found bool, err error) {
	var rows []userRow
	err = tx.with(ctx).Model(&userRow{}).Select("id", "username", "is_owner").
		Where(holderAtOrAbove, roleID, exceptUserID, top).
		Order("is_owner DESC").Order("id").Limit(1).Find(&rows).Error
	if err != nil {
		return model.User{}, false, fmt.Errorf("read role holders: %w", err)
	}
	if len(rows) == 0 {
		return model.User{}, false, nil
	}
	return model.User{ID: rows[0].ID, Username: rows[0].Username, IsOwner: rows[0].IsOwner}, true, nil
}

// RolePositions is every role's position.
func (tx *Tx) RolePositions(ctx context.Context) (map[string]int, error) {
	var rows []roleRow
	if err := tx.with(ctx).Model(&roleRow{}).Select("id", "position").Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("read role positions: %w", err)
	}
	out := make(map[string]int, len(rows))
	for _, r := range rows {
		out[r.ID] = r.Position
	}
	return out, nil
}

// SetRolePositions moves roles to new positions at once (the positions of
// all roles after it must be 1..N, each once), in two steps like
// shiftRoles. The lists ordered by role position that hold a moved role
// move their versions: the overwrite lists with an overwrite of one, and
// the users holding one among other roles.
func (tx *Tx) SetRolePositions(ctx context.Context, to map[string]int, now time.Time) error {
	if len(to) == 0 {
		return nil
	}
	db := tx.with(ctx)
	// Each role is parked at its negated position, so the unique index on
	// position holds throughout, by one statement of constant text (one
	// prepared statement however many roles move; a statement naming them
	// all would take a place in the statement cache per call).
	ids := make([]string, 0, len(to))
	for id, p := range to {
		ids = append(ids, id)
		if err := db.Model(&roleRow{}).Where("id = ?", id).Update("position", -p).Error; err != nil {
			return fmt.Errorf("move roles: %w", err)
		}
	}
	err := db.Model(&roleRow{}).Where("position < 0").
		Updates(map[string]any{"position": gorm.Expr("-position"), "version": gorm.Expr("version + 1"), "updated_at": microsOf(now)}).Error
	if err != nil {
		return fmt.Errorf("move roles: %w", err)
	}
	var channels []string
	err = db.Model(&overwriteRow{}).Distinct("channel_id").Where("target_type = 'role' AND target_id IN ?", ids).
		Pluck("channel_id", &channels).Error
	if err == nil {
		err = tx.bumpOverwriteLists(ctx, channels)
	}
	if err == nil {
		err = db.Model(&userRow{}).
			Where("id IN (?)", db.Model(&userRoleRow{}).Select("user_id").Where("role_id IN ?", ids)).
			Where("id IN (?)", db.Model(&userRoleRow{}).Select("user_id").Group("user_id").Having("COUNT(*) > 1")).
			Updates(map[string]any{"version": gorm.Expr("version + 1"), "updated_at": microsOf(now)}).Error
	}
	if err != nil {
		return fmt.Errorf("move roles: %w", err)
	}
	return nil
}

// shiftRoles moves the roles at positions lo..hi by delta in two steps
// (negate, then renumber) so the unique index on position holds after every
// single-row update, on SQLite and PostgreSQL alike.
func (tx *Tx) shiftRoles(ctx context.Context, lo, hi, delta int, now time.Time) error {
	if lo > hi {
		return nil
	}
	db := tx.with(ctx)
	err := db.Model(&roleRow{}).Where("position >= ? AND position <= ?", lo, hi).
		Update("position", gorm.Expr("-(position + ?)", delta)).Error
	if err == nil {
		err = db.Model(&roleRow{}).Where("position < 0").
			Updates(map[string]any{"position": gorm.Expr("-position"), "version": gorm.Expr("version + 1"), "updated_at": microsOf(now)}).Error
	}
	if err != nil {
		return fmt.Errorf("shift roles: %w", err)
	}
	return nil
}

// --- users

// InsertUser creates a user; a taken username or email is a conflict,
// found by the unique indexes themselves (no query before the insert).
func (tx *Tx) InsertUser(ctx context.Context, u model.User) (model.User, error) {
	// Constant SQL, a hot write (queries.go): every member who joins
	// makes it, and GORM's builder cost it as much CPU as the INSERT.
	if _, err := tx.exec(ctx, tx.sql().insertUser, u.ID, u.Username, strings.ToLower(u.Username), u.DisplayName,
		strings.ToLower(u.DisplayName), u.Email, lowerPtr(u.Email), u.Status, u.IsOwner,
		int64(microsOf(u.CreatedAt)), int64(microsOf(u.UpdatedAt))); err != nil {
		return model.User{}, userConflict(err, u)
	}
	u.Version = 1
	if u.Roles == nil {
		u.Roles = []string{}
	}
	return u, nil
}

// UpdateUser stores a user's fields (their timeout included) and moves
// their version.
func (tx *Tx) UpdateUser(ctx context.Context, u model.User) (model.User, error) {
	err := tx.with(ctx).Model(&userRow{}).Where("id = ?", u.ID).Updates(map[string]any{
		"username": u.Username, "username_key": strings.ToLower(u.Username),
		"display_name": u.DisplayName, "display_name_key": strings.ToLower(u.DisplayName),
		"email": u.Email, "email_key": lowerPtr(u.Email), "status": u.Status,
		"timeout_until": microsPtr(u.TimeoutUntil),
		"version":       gorm.Expr("version + 1"), "updated_at": microsOf(u.UpdatedAt)}).Error
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
	for _, c := range []struct {
		name  string
		model any
		where string
	}{
		{"roles", &userRoleRow{}, "user_id = ?"},
		{"tokens", &tokenRow{}, "user_id = ?"},
		{"overwrites", &overwriteRow{}, "target_type = 'user' AND target_id = ?"},
	} {
		var n int64
		if err := db.Model(c.model).Where(c.where, id).Count(&n).Error; err != nil {
			return nil, fmt.Errorf("delete user: %w", err)
		}
		gone[c.name] = n
	}
	if err := tx.deleteOverwritesOf(ctx, model.TargetUser, id); err != nil {
		return nil, err
	}
	if err := db.Where("id = ?", id).Delete(&userRow{}).Error; err != nil {
		return nil, fmt.Errorf("delete user: %w", err)
	}
	return gone, nil
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
	res := tx.with(ctx).Where("user_id = ? AND role_id = ?", userID, roleID).Delete(&userRoleRow{})
	if res.Error != nil {
		return false, fmt.Errorf("remove role: %w", res.Error)
	}
	if res.RowsAffected == 0 {
		return false, nil
	}
	return true, tx.touchUser(ctx, userID, now)
}

// touchUser moves a user's version: their representation changed.
func (tx *Tx) touchUser(ctx context.Context, userID string, now time.Time) error {
	err := tx.with(ctx).Model(&userRow{}).Where("id = ?", userID).
		Updates(map[string]any{"version": gorm.Expr("version + 1"), "updated_at": microsOf(now)}).Error
	if err != nil {
		return fmt.Errorf("touch user: %w", err)
	}
	return nil
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
	if err := tx.with(ctx).Where("id = ? AND user_id = ?", tokenID, userID).Delete(&tokenRow{}).Error; err != nil {
		return fmt.Errorf("delete token: %w", err)
	}
	return nil
}

// RenameToken stores a token's name.
func (tx *Tx) RenameToken(ctx context.Context, userID, tokenID, name string) error {
	err := tx.with(ctx).Model(&tokenRow{}).Where("id = ? AND user_id = ?", tokenID, userID).Update("name", name).Error
	if err != nil {
		return fmt.Errorf("rename token: %w", err)
	}
	return nil
}

// DeleteExpiredTokens removes a user's tokens that expired by now: they
// no longer authenticate, and removing them before a token is counted
// keeps a user's rows, and the list of them, within the token limit.
func (tx *Tx) DeleteExpiredTokens(ctx context.Context, userID string, now time.Time) error {
	err := tx.with(ctx).Where("user_id = ? AND expires_at IS NOT NULL AND expires_at <= ?", userID, microsOf(now)).
		Delete(&tokenRow{}).Error
	if err != nil {
		return fmt.Errorf("delete expired tokens: %w", err)
	}
	return nil
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
	if err := tx.with(ctx).Where("channel_id = ? AND id = ?", channelID, id).Delete(&attachmentRow{}).Error; err != nil {
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
	if errors.Is(err, gorm.ErrDuplicatedKey) || uniqueViolation(err) != "" {
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
