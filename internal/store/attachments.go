package store

import (
	"context"
	"fmt"

	"github.com/guildhall/guildhall/internal/model"
	"gorm.io/gorm/clause"
)

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
