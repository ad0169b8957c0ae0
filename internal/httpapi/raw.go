package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	"github.com/labstack/echo/v4"
	"github.com/oapi-codegen/runtime"
)

// Raw operations are those a typed strict response cannot answer: the
// attachment download (Range, preconditions, HEAD), the attachment upload (a
// streamed body read under a deadline) and the event stream. They are plain
// Echo handlers, left out of the strict server (gen/api/server.cfg.yaml) and
// registered beside it behind their operation's middlewares (server.go).
// This file holds what they share: their parameters, bound as the generated
// code binds a strict operation's, and serveRaw, which confirms the caller
// as for a strict one before anything is written.
//
// The validator has checked the parameters already (their schema, and one
// value each: singleValues), so the binders' 400s below are a defence only,
// the very errors the generated code would return.

// pathParam binds a path parameter as gen/api's ServerInterfaceWrapper does
// (unescaped when Echo matched the escaped path).
func pathParam(c echo.Context, name string) (string, error) {
	var v string
	err := runtime.BindStyledParameterWithOptions("simple", name, c.Param(name), &v, runtime.BindStyledParameterOptions{
		ParamLocation: runtime.ParamLocationPath, Required: true, Type: "string", ValueIsUnescaped: c.Request().URL.RawPath == ""})
	if err != nil {
		return "", binderError(name, err)
	}
	return v, nil
}

// queryParam binds a query parameter (style form, exploded) of the given
// OpenAPI type and format into dest, as the generated code does.
func queryParam(c echo.Context, name string, required bool, dest any, typ, format string) error {
	err := runtime.BindQueryParameterWithOptions("form", true, required, name, c.QueryParams(), dest,
		runtime.BindQueryParameterOptions{Type: typ, Format: format})
	if err != nil {
		return binderError(name, err)
	}
	return nil
}

// headerParam binds an optional string header, as the generated code does:
// nil when absent.
func headerParam(c echo.Context, name string) (*string, error) {
	values, found := c.Request().Header[http.CanonicalHeaderKey(name)]
	if !found {
		return nil, nil
	}
	if len(values) != 1 {
		return nil, echo.NewHTTPError(http.StatusBadRequest, fmt.Sprintf("Expected one value for %s, got %d", name, len(values)))
	}
	var v string
	err := runtime.BindStyledParameterWithOptions("simple", name, values[0], &v, runtime.BindStyledParameterOptions{
		ParamLocation: runtime.ParamLocationHeader, Type: "string"})
	if err != nil {
		return nil, binderError(name, err)
	}
	return &v, nil
}

// binderError is the generated binder's 400, word for word, so that the
// error handler maps it as it maps a strict operation's (binderProblem).
func binderError(name string, err error) error {
	return echo.NewHTTPError(http.StatusBadRequest, fmt.Sprintf("Invalid format for parameter %s: %s", name, err))
}

// rawAnswer is what a raw operation decided to answer.
type rawAnswer interface {
	write(w http.ResponseWriter) error
}

// serveRaw runs decide as a strict handler runs, under requireActor, and
// then writes its answer. An answer holding something open (the bytes of an
// attachment) is closed once written, or when it is not sent.
func (h *Handler) serveRaw(c echo.Context, operationID string, decide func(ctx context.Context) (rawAnswer, error)) error {
	run := h.requireActor(func(c echo.Context, _ any) (any, error) {
		return decide(c.Request().Context())
	}, operationID)
	res, err := run(c, nil)
	if cl, ok := res.(io.Closer); ok {
		defer cl.Close()
	}
	if err != nil {
		return err
	}
	return res.(rawAnswer).write(c.Response())
}

// reply is a raw answer of a status, headers and an optional body. Its
// headers are set as the generated strict responses set theirs.
type reply struct {
	status int
	header map[string]string
	body   io.Reader // nil: none (HEAD, 304)
}

func (r reply) write(w http.ResponseWriter) error {
	for k, v := range r.header {
		w.Header().Set(k, v)
	}
	w.WriteHeader(r.status)
	if r.body == nil {
		return nil
	}
	_, err := io.Copy(w, r.body)
	return err
}

// Close closes the body, if it has one to close.
func (r reply) Close() error {
	if cl, ok := r.body.(io.Closer); ok {
		return cl.Close()
	}
	return nil
}

// jsonReply answers v as JSON of the given media type, encoded as the
// generated strict responses encode (json.Encoder: one value and a newline).
func jsonReply(status int, mediaType string, v any, header map[string]string) (reply, error) {
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(v); err != nil {
		return reply{}, err
	}
	if header == nil {
		header = map[string]string{}
	}
	header[echo.HeaderContentType] = mediaType
	return reply{status: status, header: header, body: &buf}, nil
}
