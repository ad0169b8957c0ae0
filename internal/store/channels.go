package store

import (
	"context"
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

// channelUpdates is the subquery of UpdateChannels' list.
var channelUpdates = []sqldb.JSONColumn{{Name: "id", Type: "text"}, {Name: "name", Type: "text"},
	{Name: "topic", Type: "text"}, {Name: "parent_id", Type: "text"}, {Name: "position", Type: "integer"},
	{Name: "updated_at", Type: "bigint"}}

// channelMoves is the subquery of MoveChannels' list.
var channelMoves = []sqldb.JSONColumn{{Name: "id", Type: "text"}, {Name: "parent_id", Type: "text"},
	{Name: "position", Type: "integer"}, {Name: "updated_at", Type: "bigint"}}
