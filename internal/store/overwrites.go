package store

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/permissions"
	"github.com/guildhall/guildhall/internal/sqldb"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

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
	if _, err := tx.exec(ctx, "DELETE FROM overwrites WHERE channel_id IN ("+tx.dialect().JSONTexts()+")", string(idList)); err != nil {
		return fmt.Errorf("replace overwrites: %w", err)
	}
	if len(rows) > 0 {
		data, err := json.Marshal(rows)
		if err != nil {
			return fmt.Errorf("replace overwrites: %w", err)
		}
		if _, err := tx.exec(ctx, "INSERT INTO overwrites (channel_id, target_type, target_id, allow_bits, deny_bits) "+
			"SELECT o.channel_id, o.target_type, o.target_id, o.allow_bits, o.deny_bits FROM ("+
			tx.dialect().JSONRecords(overwriteRecords...)+") AS o", string(data)); err != nil {
			return fmt.Errorf("replace overwrites: %w", err)
		}
	}
	if _, err := tx.exec(ctx, "UPDATE channels SET overwrites_version = overwrites_version + 1 WHERE id IN ("+
		tx.dialect().JSONTexts()+")", string(idList)); err != nil {
		return fmt.Errorf("move the overwrite lists' versions: %w", err)
	}
	return nil
}

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

// overwriteRecords is the subquery of ReplaceOverwriteLists' rows.
var overwriteRecords = []sqldb.JSONColumn{{Name: "channel_id", Type: "text"}, {Name: "target_type", Type: "text"},
	{Name: "target_id", Type: "text"}, {Name: "allow_bits", Type: "bigint"}, {Name: "deny_bits", Type: "bigint"}}
