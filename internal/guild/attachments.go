package guild

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"mime"
	"strings"

	"github.com/guildhall/guildhall/internal/apperr"
	"github.com/guildhall/guildhall/internal/blob"
	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/store"
)

// AttachmentTag is the version of an attachment as a precondition names it
// (and its ETag quotes it): the sha256 of its bytes and the first 8 hex
// digits of the sha256 of its Content-Type, so that it changes whenever the
// bytes or the media type change (and only then: the same bytes and type
// uploaded again are the same representation).
func AttachmentTag(a model.Attachment) string {
	typ := sha256.Sum256([]byte(a.ContentType))
	return a.SHA256 + "." + hex.EncodeToString(typ[:4])
}

// ListAttachments pages through a channel's attachment metadata.
func (s *Service) ListAttachments(ctx context.Context, a *Actor, channelID, rawCursor string, limit int) (Page[model.Attachment], error) {
	after, err := s.cursors.Decode(rawCursor, "attachments", channelID)
	if err != nil {
		return Page[model.Attachment]{}, err
	}
	if _, err := s.store.GetChannel(ctx, channelID); err != nil {
		return Page[model.Attachment]{}, err
	}
	if err := a.authorizeOn(opListAttachments, channelID); err != nil {
		return Page[model.Attachment]{}, err
	}
	items, more, err := s.store.ListAttachments(ctx, channelID, after, pageLimit(limit))
	if err != nil {
		return Page[model.Attachment]{}, err
	}
	page := Page[model.Attachment]{Items: items}
	if more {
		page.NextCursor = s.cursors.Encode(items[len(items)-1].ID, "attachments", channelID)
	}
	return page, nil
}

// AttachmentMeta returns an attachment's metadata.
func (s *Service) AttachmentMeta(ctx context.Context, a *Actor, channelID, id string) (model.Attachment, error) {
	if _, err := s.store.GetChannel(ctx, channelID); err != nil {
		return model.Attachment{}, err
	}
	if err := a.hideChannel(channelID); err != nil {
		return model.Attachment{}, err
	}
	att, err := s.store.GetAttachment(ctx, channelID, id)
	if err != nil {
		return model.Attachment{}, err
	}
	if err := a.authorizeOn(opGetAttachment, channelID); err != nil {
		return model.Attachment{}, err
	}
	return att, nil
}

// OpenAttachment returns an attachment's metadata and its bytes.
func (s *Service) OpenAttachment(ctx context.Context, a *Actor, channelID, id string) (model.Attachment, blob.Reader, error) {
	att, err := s.AttachmentMeta(ctx, a, channelID, id)
	if err != nil {
		return model.Attachment{}, nil, err
	}
	r, err := s.blobs.Open(ctx, att.BlobKey, att.Size)
	if errors.Is(err, blob.ErrNotFound) {
		// Replaced between the two reads: the old blob is gone, read again.
		if att, err = s.store.GetAttachment(ctx, channelID, id); err != nil {
			return model.Attachment{}, nil, err
		}
		r, err = s.blobs.Open(ctx, att.BlobKey, att.Size)
	}
	if err != nil {
		return model.Attachment{}, nil, fmt.Errorf("open attachment %s/%s: %w", channelID, id, err)
	}
	return att, r, nil
}

// Upload is the body of an attachment PUT.
type Upload struct {
	ContentType string    // the request's Content-Type
	Body        io.Reader // the bytes, streamed
	Size        int64     // the declared length, or -1 when unknown
}

// PutAttachment streams the upload into a new blob and then points the
// attachment at it; the previous blob is removed only after the commit, so a
// failed or interrupted upload keeps the previous version. Everything that can
// be refused before the bytes are read (media type, 404, 403, If-Match, a
// declared length past the limit) is refused first. It reports whether the
// attachment is new.
func (s *Service) PutAttachment(ctx context.Context, a *Actor, channelID, id string, up Upload, o WriteOpts) (model.Attachment, bool, error) {
	contentType, err := normalizeMediaType(up.ContentType)
	if err != nil {
		return model.Attachment{}, false, err
	}
	prev, err := checkPut(ctx, s.store, a, channelID, id)
	if err != nil {
		return model.Attachment{}, false, err
	}
	if err := checkPutIfMatch(o.IfMatch, prev); err != nil {
		return model.Attachment{}, false, err
	}
	if up.Size > s.limits.MaxAttachmentBytes {
		return model.Attachment{}, false, apperr.TooLarge(s.limits.MaxAttachmentBytes)
	}
	info, err := s.blobs.Put(ctx, up.Body, s.limits.MaxAttachmentBytes)
	if err != nil {
		return model.Attachment{}, false, err
	}
	var out model.Attachment
	var created bool
	var oldKey string
	err = s.write(ctx, a, func(tx *store.Tx, a *Actor) error {
		oldKey = "" // a write may run twice (store.Write): nothing of a first run stays
		prev, err := checkPut(ctx, tx, a, channelID, id)
		if err != nil {
			return err
		}
		if err := checkPutIfMatch(o.IfMatch, prev); err != nil {
			return err
		}
		now := s.now()
		uid := a.UserID
		out = model.Attachment{ChannelID: channelID, ID: id, ContentType: contentType, Size: info.Size, SHA256: info.SHA256,
			BlobKey: info.Key, CreatedBy: &uid, UpdatedBy: &uid, CreatedAt: now, UpdatedAt: now}
		typ := "channel.attachment.created"
		if prev != nil {
			out.CreatedBy, out.CreatedAt, oldKey = prev.CreatedBy, prev.CreatedAt, prev.BlobKey
			typ = "channel.attachment.updated"
		}
		created = prev == nil
		if err := tx.PutAttachment(ctx, out); err != nil {
			return err
		}
		return emit(ctx, tx, a, o, typ, "attachment:"+channelID+"/"+id, map[string]any{
			"channel_id": channelID, "attachment_id": id, "content_type": contentType, "size": info.Size, "sha256": info.SHA256})
	})
	if err != nil {
		if !errors.Is(err, store.ErrOutcomeUnknown) {
			s.deleteBlobs(ctx, []string{info.Key})
		} // else the commit may have pointed the attachment at it: the orphan sweep removes it if not
		return model.Attachment{}, false, err
	}
	if oldKey != "" {
		s.deleteBlobs(ctx, []string{oldKey})
	}
	return out, created, nil
}

// attachmentReads are the reads of an upload's checks: the store's, before
// the bytes are read, and the write transaction's, after.
type attachmentReads interface {
	GetChannel(ctx context.Context, id string) (model.Channel, error)
	GetAttachment(ctx context.Context, channelID, id string) (model.Attachment, error)
}

// checkPut applies the rules of an upload, and returns the attachment it
// replaces (nil: none).
func checkPut(ctx context.Context, r attachmentReads, a *Actor, channelID, id string) (*model.Attachment, error) {
	if _, err := r.GetChannel(ctx, channelID); err != nil {
		return nil, err
	}
	if err := a.hideChannel(channelID); err != nil {
		return nil, err
	}
	prev, err := r.GetAttachment(ctx, channelID, id)
	if err != nil && !apperr.IsNotFound(err) {
		return nil, err
	}
	var p *model.Attachment
	if err == nil {
		p = &prev
	}
	return p, a.canUpload(opPutAttachment, channelID, p)
}

// checkPutIfMatch applies If-Match to an upload: any value fails when the
// attachment does not exist yet (RFC 9110: If-Match needs a current
// representation, even for "*").
func checkPutIfMatch(ifMatch *Precondition, prev *model.Attachment) error {
	if prev != nil {
		return ifMatch.check(AttachmentTag(*prev))
	}
	if ifMatch != nil {
		return apperr.PreconditionNone("The attachment does not exist, so no version of it can match.")
	}
	return nil
}

// normalizeMediaType checks an upload's Content-Type and returns it in
// canonical form (lower-case type and parameter names), as it will be served.
func normalizeMediaType(ct string) (string, error) {
	if strings.TrimSpace(ct) == "" {
		return "", apperr.UnsupportedMedia("The upload needs a Content-Type naming the media type of its bytes.")
	}
	mt, params, err := mime.ParseMediaType(ct)
	typ, sub, _ := strings.Cut(mt, "/") // ParseMediaType also takes a lone token
	if err != nil || typ == "" || sub == "" {
		return "", apperr.Invalid("content_type", "is not a valid media type")
	}
	if strings.Contains(mt, "*") {
		// A media range (*/*, image/*) says what a client accepts, not what
		// the bytes are: no type to serve them as.
		return "", apperr.UnsupportedMedia("The upload's Content-Type is a media range (" + mt + "); name the media type of its bytes, such as image/png.")
	}
	out := mime.FormatMediaType(mt, params)
	if out == "" || len(out) > 255 {
		return "", apperr.Invalid("content_type", "is not a valid media type of at most 255 characters")
	}
	return out, nil
}

// DeleteAttachment deletes an attachment (the uploader, or MANAGE_MESSAGES).
func (s *Service) DeleteAttachment(ctx context.Context, a *Actor, channelID, id string, o WriteOpts) error {
	var key string
	err := s.write(ctx, a, func(tx *store.Tx, a *Actor) error {
		if _, err := tx.GetChannel(ctx, channelID); err != nil {
			return err
		}
		if err := a.hideChannel(channelID); err != nil {
			return err
		}
		att, err := tx.GetAttachment(ctx, channelID, id)
		if err != nil {
			return err
		}
		if err := a.canDeleteUpload(opDeleteAttachment, channelID, att); err != nil {
			return err
		}
		if err := o.IfMatch.check(AttachmentTag(att)); err != nil {
			return err
		}
		if err := tx.DeleteAttachment(ctx, channelID, id); err != nil {
			return err
		}
		key = att.BlobKey
		return emit(ctx, tx, a, o, "channel.attachment.deleted", "attachment:"+channelID+"/"+id, map[string]any{
			"channel_id": channelID, "attachment_id": id, "size": att.Size, "sha256": att.SHA256})
	})
	if err == nil {
		s.deleteBlobs(ctx, []string{key})
	}
	return err
}
