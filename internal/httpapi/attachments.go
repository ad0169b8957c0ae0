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

	"github.com/guildhall/guildhall/gen/api"
	"github.com/guildhall/guildhall/internal/apperr"
	"github.com/guildhall/guildhall/internal/blob"
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
	a, err := actorOf(ctx)
	if err != nil {
		return nil, err
	}
	page, err := h.svc.ListAttachments(ctx, a, req.ChannelID, deref(req.Params.Cursor), deref(req.Params.Limit))
	if err != nil {
		return nil, err
	}
	out := api.ListAttachments200JSONResponse{Items: make([]api.Attachment, len(page.Items)), NextCursor: cursorOf(page.NextCursor)}
	for i, at := range page.Items {
		out.Items[i] = toAttachment(at)
	}
	return out, nil
}

// GetAttachment implements GET /channels/{channelID}/attachment: the bytes,
// through http.ServeContent for Range, If-None-Match and HEAD.
func (h *Handler) GetAttachment(ctx context.Context, req api.GetAttachmentRequestObject) (api.GetAttachmentResponseObject, error) {
	return h.serveAttachment(ctx, req.ChannelID, req.Params.AttachmentID)
}

// HeadAttachment implements HEAD /channels/{channelID}/attachment.
func (h *Handler) HeadAttachment(ctx context.Context, req api.HeadAttachmentRequestObject) (api.HeadAttachmentResponseObject, error) {
	return h.serveAttachment(ctx, req.ChannelID, req.Params.AttachmentID)
}

func (h *Handler) serveAttachment(ctx context.Context, channelID, id string) (*attachmentResponse, error) {
	a, err := actorOf(ctx)
	if err != nil {
		return nil, err
	}
	r := requestOf(ctx)
	if r == nil {
		return nil, fmt.Errorf("no request in context")
	}
	att, body, err := h.svc.OpenAttachment(ctx, a, channelID, id)
	if err != nil {
		return nil, err
	}
	return &attachmentResponse{req: r, att: att, body: body}, nil
}

// attachmentResponse writes the bytes with http.ServeContent, which answers
// Range (206/416), If-None-Match (304) and HEAD from the request.
type attachmentResponse struct {
	req  *http.Request
	att  model.Attachment
	body blob.Reader
}

func (r *attachmentResponse) visit(w http.ResponseWriter) error {
	defer r.body.Close()
	hd := w.Header()
	hd.Set("Content-Type", r.att.ContentType)
	hd.Set("ETag", guild.AttachmentETag(r.att))
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Content-Disposition", disposition(r.att.ContentType)+"; filename*=UTF-8''"+url.PathEscape(r.att.ID))
	hd.Set("Cache-Control", "private, no-cache")
	rw := &rangeProblemWriter{ResponseWriter: w, req: r.req}
	http.ServeContent(rw, r.req, "", r.att.UpdatedAt, r.body)
	return nil
}

func (r *attachmentResponse) VisitGetAttachmentResponse(w http.ResponseWriter) error {
	return r.visit(w)
}

func (r *attachmentResponse) VisitHeadAttachmentResponse(w http.ResponseWriter) error {
	return r.visit(w)
}

// rangeProblemWriter replaces ServeContent's plain-text 416 with a problem.
type rangeProblemWriter struct {
	http.ResponseWriter
	req     *http.Request
	swallow bool
}

func (w *rangeProblemWriter) WriteHeader(code int) {
	if code == http.StatusRequestedRangeNotSatisfiable {
		w.swallow = true
		p := newProblem(api.ProblemCodeRangeNotSatisfiable, "The range is outside the attachment's bytes.")
		instance := w.req.URL.EscapedPath()
		p.Instance = &instance
		p.RequestId = w.Header().Get("X-Request-Id")
		w.Header().Set("Content-Type", "application/problem+json")
		w.Header().Del("Content-Disposition")
		w.Header().Del("X-Content-Type-Options")
		body := problemJSON(p)
		w.Header().Set("Content-Length", fmt.Sprint(len(body)))
		w.ResponseWriter.WriteHeader(code)
		if w.req.Method != http.MethodHead {
			_, _ = w.ResponseWriter.Write(body)
		}
		return
	}
	w.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the connection.
func (w *rangeProblemWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *rangeProblemWriter) Write(b []byte) (int, error) {
	if w.swallow {
		return len(b), nil
	}
	return w.ResponseWriter.Write(b)
}

// PutAttachment implements PUT /channels/{channelID}/attachment: the body is
// streamed to the blob store, never held whole in memory.
func (h *Handler) PutAttachment(ctx context.Context, req api.PutAttachmentRequestObject) (api.PutAttachmentResponseObject, error) {
	a, err := actorOf(ctx)
	if err != nil {
		return nil, err
	}
	id := req.Params.AttachmentID
	up := guild.Upload{ContentType: req.ContentType, Body: h.boundBody(responseOf(ctx), uploadBody{req.Body}), Size: -1}
	if r := requestOf(ctx); r != nil {
		up.Size = r.ContentLength // -1 when unknown (chunked)
	}
	att, created, err := h.svc.PutAttachment(ctx, a, req.ChannelID, id, up, opts(req.Params.IfMatch, req.Params.XAuditReason))
	if err != nil {
		return nil, err
	}
	etag := guild.AttachmentETag(att)
	if created {
		loc := "/api/channels/" + att.ChannelID + "/attachment?attachmentID=" + url.QueryEscape(att.ID)
		return api.PutAttachment201JSONResponse{Body: toAttachment(att), Headers: api.PutAttachment201ResponseHeaders{ETag: &etag, Location: &loc}}, nil
	}
	return api.PutAttachment200JSONResponse{Body: toAttachment(att), Headers: api.PutAttachment200ResponseHeaders{ETag: &etag}}, nil
}

// DeleteAttachment implements DELETE /channels/{channelID}/attachment.
func (h *Handler) DeleteAttachment(ctx context.Context, req api.DeleteAttachmentRequestObject) (api.DeleteAttachmentResponseObject, error) {
	a, err := actorOf(ctx)
	if err != nil {
		return nil, err
	}
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
