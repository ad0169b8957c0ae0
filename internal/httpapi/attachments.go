package httpapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/guildhall/guildhall/gen/api"
	"github.com/guildhall/guildhall/internal/apperr"
	"github.com/guildhall/guildhall/internal/guild"
	"github.com/guildhall/guildhall/internal/model"
)

// inlineTypes are served inline; everything else is a download, so a
// browser never renders (or runs) uploaded HTML, SVG or scripts.
var inlineTypes = map[string]bool{"image/png": true, "image/jpeg": true, "image/gif": true, "image/webp": true, "text/plain": true}

func disposition(contentType string) string {
	mt, _, err := mime.ParseMediaType(contentType)
	if err == nil && inlineTypes[strings.ToLower(mt)] {
		return "inline"
	}
	return "attachment"
}

// ListAttachments implements GET /channels/{channelID}/attachments.
func (h *Handler) ListAttachments(ctx context.Context, req api.ListAttachmentsRequestObject) (api.ListAttachmentsResponseObject, error) {
	a := actorOf(ctx)
	page, err := h.svc.ListAttachments(ctx, a, req.ChannelID, deref(req.Params.Cursor), deref(req.Params.Limit))
	if err != nil {
		return nil, err
	}
	out := api.AttachmentList{Items: make([]api.Attachment, len(page.Items)), NextCursor: cursorOf(page.NextCursor)}
	for i, at := range page.Items {
		out.Items[i] = toAttachment(at)
	}
	return api.ListAttachments200JSONResponse{Body: out}, nil
}

// GetAttachment implements GET /channels/{channelID}/attachment, and its HEAD
// twin: the bytes, with the preconditions and the single byte range of RFC
// 9110 (conditional.go) answered as the contract declares them.
func (h *Handler) GetAttachment(ctx context.Context, req api.GetAttachmentRequestObject) (api.GetAttachmentResponseObject, error) {
	a := actorOf(ctx)
	att, body, err := h.svc.OpenAttachment(ctx, a, req.ChannelID, req.Params.AttachmentID)
	if err != nil {
		return nil, err
	}
	p := req.Params
	rr := readRequest{IfMatch: deref(p.IfMatch), IfNoneMatch: deref(p.IfNoneMatch),
		IfModifiedSince: deref(p.IfModifiedSince), IfUnmodifiedSince: deref(p.IfUnmodifiedSince)}
	head := isHead(ctx)
	if !head {
		rr.Range, rr.IfRange = deref(p.Range), deref(p.IfRange)
	}
	etag := attachmentETag(att)
	lastModified := att.UpdatedAt.UTC().Format(http.TimeFormat)
	outcome, rng := decideRead(rr, etag, att.UpdatedAt, att.Size)
	if outcome != serveWhole && outcome != servePart || head {
		_ = body.Close() // no bytes are sent
		body = nil
	}
	switch outcome {
	case preconditionFailed:
		return nil, apperr.Precondition(guild.AttachmentTag(att))
	case notModified:
		return api.GetAttachment304Response{Headers: api.GetAttachment304ResponseHeaders{
			ETag: &etag, LastModified: &lastModified, CacheControl: ptr(attachmentCacheControl)}}, nil
	case rangeNotSatisfiable:
		p := newProblem(api.ProblemCodeRangeNotSatisfiable, fmt.Sprintf("The range is outside the %d bytes of the attachment.", att.Size))
		p.Instance = ptr("/api/channels/" + req.ChannelID + "/attachment")
		if w := responseOf(ctx); w != nil {
			p.RequestId = w.Header().Get(echo.HeaderXRequestID)
		}
		return api.GetAttachment416ApplicationProblemPlusJSONResponse{RangeNotSatisfiableApplicationProblemPlusJSONResponse: api.RangeNotSatisfiableApplicationProblemPlusJSONResponse{
			Body: p, Headers: api.RangeNotSatisfiableResponseHeaders{ContentRange: ptr(fmt.Sprintf("bytes */%d", att.Size))}}}, nil
	case servePart:
		if _, err := body.Seek(rng.first, io.SeekStart); err != nil {
			_ = body.Close()
			return nil, fmt.Errorf("seek attachment %s/%s: %w", att.ChannelID, att.ID, err)
		}
		return api.GetAttachment206AsteriskResponse{Body: readCloser{io.LimitReader(body, rng.length()), body},
			ContentType: att.ContentType, ContentLength: rng.length(), Headers: api.GetAttachment206ResponseHeaders{
				ETag: &etag, LastModified: &lastModified, CacheControl: ptr(attachmentCacheControl),
				ContentRange:       ptr(fmt.Sprintf("bytes %d-%d/%d", rng.first, rng.last, att.Size)),
				ContentDisposition: ptr(contentDisposition(att)), XContentTypeOptions: ptr("nosniff"), AcceptRanges: ptr("bytes")}}, nil
	}
	var bytes io.Reader = body
	if body == nil { // HEAD: the length, not the bytes
		bytes = http.NoBody
	}
	return api.GetAttachment200AsteriskResponse{Body: bytes, ContentType: att.ContentType, ContentLength: att.Size,
		Headers: api.GetAttachment200ResponseHeaders{ETag: &etag, LastModified: &lastModified, CacheControl: ptr(attachmentCacheControl),
			ContentDisposition: ptr(contentDisposition(att)), XContentTypeOptions: ptr("nosniff"), AcceptRanges: ptr("bytes")}}, nil
}

// attachmentCacheControl lets browsers keep a copy but revalidate it (with
// If-None-Match) before each use: access can be revoked at any time.
const attachmentCacheControl = "private, no-cache"

func contentDisposition(att model.Attachment) string {
	return disposition(att.ContentType) + "; filename*=UTF-8''" + url.PathEscape(att.ID)
}

// readCloser reads a part of a blob and closes the blob.
type readCloser struct {
	io.Reader
	io.Closer
}

// PutAttachment implements PUT /channels/{channelID}/attachment: the body is
// streamed to the blob store, never held whole in memory.
func (h *Handler) PutAttachment(ctx context.Context, req api.PutAttachmentRequestObject) (api.PutAttachmentResponseObject, error) {
	a := actorOf(ctx)
	id := req.Params.AttachmentID
	up := guild.Upload{ContentType: req.ContentType, Body: h.boundBody(responseOf(ctx), uploadBody{req.Body}), Size: -1}
	if r := requestOf(ctx); r != nil {
		up.Size = r.ContentLength // -1 when unknown (chunked)
	}
	att, created, err := h.svc.PutAttachment(ctx, a, req.ChannelID, id, up, opts(req.Params.IfMatch, req.Params.XAuditReason))
	if err != nil {
		return nil, err
	}
	etag := attachmentETag(att)
	if created {
		loc := "/api/channels/" + att.ChannelID + "/attachment?attachmentID=" + url.QueryEscape(att.ID)
		return api.PutAttachment201JSONResponse{Body: toAttachment(att), Headers: api.PutAttachment201ResponseHeaders{ETag: &etag, Location: &loc}}, nil
	}
	return api.PutAttachment200JSONResponse{Body: toAttachment(att), Headers: api.PutAttachment200ResponseHeaders{ETag: &etag}}, nil
}

// DeleteAttachment implements DELETE /channels/{channelID}/attachment.
func (h *Handler) DeleteAttachment(ctx context.Context, req api.DeleteAttachmentRequestObject) (api.DeleteAttachmentResponseObject, error) {
	a := actorOf(ctx)
	if err := h.svc.DeleteAttachment(ctx, a, req.ChannelID, req.Params.AttachmentID, opts(req.Params.IfMatch, req.Params.XAuditReason)); err != nil {
		return nil, err
	}
	return api.DeleteAttachment204Response{}, nil
}

// uploadBody reports a request body that cannot be read to its end (the
// client went away or sent a malformed chunked body) as a 400 rather than an
// unexpected error: the fault is the request's, and nothing is stored.
type uploadBody struct{ r io.Reader }

func (b uploadBody) Read(p []byte) (int, error) {
	if b.r == nil {
		return 0, io.EOF
	}
	n, err := b.r.Read(p)
	var mbe *http.MaxBytesError
	if err != nil && err != io.EOF && !errors.As(err, &mbe) { // io.EOF itself, unwrapped (the io.Reader contract)
		return n, &apperr.Error{Kind: apperr.ErrInvalid, Detail: "The request body could not be read to its end.",
			Fields: []apperr.FieldError{{Location: "body", Message: "ends before its declared length or is malformed"}}, Cause: err}
	}
	return n, err
}

// attachmentETag is an attachment's entity tag (see guild.AttachmentTag).
func attachmentETag(a model.Attachment) string { return quoteTag(guild.AttachmentTag(a)) }
