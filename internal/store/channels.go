package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/sqldb"
	"gorm.io/gorm"
)

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
		"version = version + 1, updated_at = m.updated_at FROM ("+tx.dialect().JSONRecords(channelUpdates...)+") AS m WHERE channels.id = m.id",
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
	err = scanAll(ctx, tx.queries, "SELECT "+channelColumns+" FROM channels WHERE id IN ("+tx.dialect().JSONTexts()+")",
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
		"updated_at = m.updated_at FROM ("+tx.dialect().JSONRecords(channelMoves...)+") AS m WHERE channels.id = m.id", string(list))
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

// GetChannel returns one channel: a prepared statement, as an import
// reads hundreds of channels one by one under the write lock.
func (q queries) GetChannel(ctx context.Context, id string) (model.Channel, error) {
	var r channelRow
	found := false
	err := scanAll(ctx, q, "SELECT "+channelColumns+" FROM channels WHERE id = ?", []any{id}, func(rows *sql.Rows) error {
		found = true
		return rows.Scan(r.fields()...)
	})
	if err != nil {
		return model.Channel{}, fmt.Errorf("read channel %q: %w", id, err)
	}
	if !found {
		return model.Channel{}, notFound(gorm.ErrRecordNotFound, "Channel %q does not exist.", id)
	}
	return r.model(), nil
}

// ExistingChannels returns which of the given channel IDs exist.
func (q queries) ExistingChannels(ctx context.Context, ids []string) (map[string]bool, error) {
	out := make(map[string]bool, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	var found []string
	if err := q.with(ctx).Model(&channelRow{}).Where("id IN ?", ids).Pluck("id", &found).Error; err != nil {
		return nil, fmt.Errorf("find channels: %w", err)
	}
	for _, id := range found {
		out[id] = true
	}
	return out, nil
}

// channelUpdates is the subquery of UpdateChannels' list.
var channelUpdates = []sqldb.JSONColumn{{Name: "id", Type: "text"}, {Name: "name", Type: "text"},
	{Name: "topic", Type: "text"}, {Name: "parent_id", Type: "text"}, {Name: "position", Type: "integer"},
	{Name: "updated_at", Type: "bigint"}}

// channelMoves is the subquery of MoveChannels' list.
var channelMoves = []sqldb.JSONColumn{{Name: "id", Type: "text"}, {Name: "parent_id", Type: "text"},
	{Name: "position", Type: "integer"}, {Name: "updated_at", Type: "bigint"}}
