package httpapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
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

// GetAttachment serves GET /channels/{channelID}/attachment and its HEAD
// twin: the bytes, with the preconditions and the single byte range of RFC
// 9110 (conditional.go) answered as the contract declares them. A raw
// operation (raw.go): a typed strict response cannot serve a range.
func (h *Handler) GetAttachment(c echo.Context) error {
	channelID, err := pathParam(c, "channelID")
	if err != nil {
		return err
	}
	var p api.GetAttachmentParams
	if err := queryParam(c, "attachmentID", true, &p.AttachmentID, "string", ""); err != nil {
		return err
	}
	for _, hp := range []struct {
		name string
		dest **string
	}{{"Range", &p.Range}, {"If-Range", &p.IfRange}, {"If-Match", &p.IfMatch}, {"If-None-Match", &p.IfNoneMatch},
		{"If-Modified-Since", &p.IfModifiedSince}, {"If-Unmodified-Since", &p.IfUnmodifiedSince}} {
		if *hp.dest, err = headerParam(c, hp.name); err != nil {
			return err
		}
	}
	head := c.Request().Method == http.MethodHead
	requestID := c.Response().Header().Get(echo.HeaderXRequestID)
	return h.serveRaw(c, "GetAttachment", func(ctx context.Context) (rawAnswer, error) {
		return h.readAttachment(ctx, channelID, p, head, requestID)
	})
}

// readAttachment decides the answer of GetAttachment.
func (h *Handler) readAttachment(ctx context.Context, channelID string, p api.GetAttachmentParams, head bool, requestID string) (rawAnswer, error) {
	a := actorOf(ctx)
	// Opening is bounded by a database budget (faults.go); the bytes then
	// come at the client's pace, each read with its own deadline.
	octx, cancel := h.budget(ctx)
	defer cancel()
	att, body, err := h.svc.OpenAttachment(octx, a, channelID, p.AttachmentID)
	if err != nil {
		return nil, err
	}
	rr := readRequest{IfMatch: deref(p.IfMatch), IfNoneMatch: deref(p.IfNoneMatch),
		IfModifiedSince: deref(p.IfModifiedSince), IfUnmodifiedSince: deref(p.IfUnmodifiedSince)}
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
		return reply{status: http.StatusNotModified, header: map[string]string{
			"ETag": etag, "Last-Modified": lastModified, "Cache-Control": attachmentCacheControl}}, nil
	case rangeNotSatisfiable:
		p := newProblem(api.ProblemCodeRangeNotSatisfiable, fmt.Sprintf("The range is outside the %d bytes of the attachment.", att.Size))
		p.Instance = ptr("/api/channels/" + channelID + "/attachment")
		p.RequestId = requestID
		return jsonReply(http.StatusRequestedRangeNotSatisfiable, "application/problem+json", p,
			map[string]string{"Content-Range": fmt.Sprintf("bytes */%d", att.Size)})
	}
	header := map[string]string{echo.HeaderContentType: att.ContentType, "ETag": etag, "Last-Modified": lastModified,
		"Cache-Control": attachmentCacheControl, "Content-Disposition": contentDisposition(att),
		"X-Content-Type-Options": "nosniff", "Accept-Ranges": "bytes"}
	if outcome == servePart {
		if _, err := body.Seek(rng.first, io.SeekStart); err != nil {
			_ = body.Close()
			return nil, fmt.Errorf("seek attachment %s/%s: %w", att.ChannelID, att.ID, err)
		}
		header["Content-Range"] = fmt.Sprintf("bytes %d-%d/%d", rng.first, rng.last, att.Size)
		header[echo.HeaderContentLength] = strconv.FormatInt(rng.length(), 10)
		return reply{status: http.StatusPartialContent, header: header, body: readCloser{io.LimitReader(body, rng.length()), body}}, nil
	}
	if att.Size != 0 { // an empty body's length is net/http's to say (none for HEAD)
		header[echo.HeaderContentLength] = strconv.FormatInt(att.Size, 10)
	}
	r := reply{status: http.StatusOK, header: header}
	if body != nil { // HEAD: the length, not the bytes
		r.body = body
	}
	return r, nil
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

// PutAttachment serves PUT /channels/{channelID}/attachment: the body is
// streamed to the blob store, never held whole in memory, under a read
// deadline (a stalled body is a 408). A raw operation (raw.go): it needs the
// connection for the deadline and the request's Content-Length.
func (h *Handler) PutAttachment(c echo.Context) error {
	channelID, err := pathParam(c, "channelID")
	if err != nil {
		return err
	}
	var p api.PutAttachmentParams
	if err := queryParam(c, "attachmentID", true, &p.AttachmentID, "string", ""); err != nil {
		return err
	}
	if p.IfMatch, err = headerParam(c, "If-Match"); err != nil {
		return err
	}
	if p.XAuditReason, err = headerParam(c, "X-Audit-Reason"); err != nil {
		return err
	}
	return h.serveRaw(c, "PutAttachment", func(ctx context.Context) (rawAnswer, error) {
		req := c.Request()
		up := guild.Upload{ContentType: req.Header.Get(echo.HeaderContentType), Body: h.boundBody(c.Response(), uploadBody{req.Body}),
			Size: req.ContentLength} // -1 when unknown (chunked)
		return h.storeAttachment(ctx, channelID, p, up)
	})
}

// storeAttachment decides the answer of PutAttachment.
func (h *Handler) storeAttachment(ctx context.Context, channelID string, p api.PutAttachmentParams, up guild.Upload) (rawAnswer, error) {
	a := actorOf(ctx)
	att, created, err := h.svc.PutAttachment(ctx, a, channelID, p.AttachmentID, up, opts(p.IfMatch, p.XAuditReason))
	if err != nil {
		return nil, err
	}
	header := map[string]string{"ETag": attachmentETag(att)}
	if created {
		header["Location"] = "/api/channels/" + att.ChannelID + "/attachment?attachmentID=" + url.QueryEscape(att.ID)
		return jsonReply(http.StatusCreated, "application/json", toAttachment(att), header)
	}
	return jsonReply(http.StatusOK, "application/json", toAttachment(att), header)
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
