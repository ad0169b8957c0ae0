package httpapi

import (
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/labstack/echo/v4"

	"github.com/guildhall/guildhall/internal/apperr"
)

// The domain names an invalid input by the name it knows it under
// (apperr.FieldError.Field: "position", "links.gh", "cursor"); where that
// input travels is the contract's business. locate turns the name into the
// location a client reads ("body.position", "query.cursor"), from the
// operation's declared parameters and body.

// operationIndex finds an operation by its route or its operationId.
type operationIndex struct {
	byRoute map[string]*operation // "GET /api/users/:userID"
	byName  map[string]*operation // the generated code's name: "GetUser"
}

func indexOperations(ops []*operation) operationIndex {
	idx := operationIndex{byRoute: make(map[string]*operation, len(ops)), byName: make(map[string]*operation, len(ops))}
	for _, op := range ops {
		idx.byRoute[op.method+" "+echoPath(op.path)] = op
		idx.byName[strings.ToUpper(op.id[:1])+op.id[1:]] = op
	}
	return idx
}

// byID returns the operation the generated code names operationID (the
// contract's operationId, capitalized), or nil.
func (idx operationIndex) byID(operationID string) *operation { return idx.byName[operationID] }

// of returns the operation of the request c routed to, or nil.
func (idx operationIndex) of(c echo.Context) *operation {
	return idx.byRoute[c.Request().Method+" "+c.Path()]
}

// locate is the wire location of a domain input name in op's request.
func (op *operation) locate(field string) string {
	if field == "content_type" { // the media type of a raw body
		return "header.Content-Type"
	}
	if op == nil {
		return field
	}
	name := field
	if i := strings.IndexAny(name, ".["); i >= 0 {
		name = name[:i]
	}
	params := append(openapi3.Parameters{}, op.route.PathItem.Parameters...)
	params = append(params, op.route.Operation.Parameters...)
	for _, p := range params {
		if p.Value != nil && p.Value.Name == name {
			return p.Value.In + "." + field
		}
	}
	if op.jsonBody {
		return "body." + field
	}
	return field
}

// locateFields fills the Location of the domain's field errors.
func (op *operation) locateFields(fields []apperr.FieldError) []apperr.FieldError {
	for i, f := range fields {
		if f.Location == "" {
			fields[i].Location = op.locate(f.Field)
		}
	}
	return fields
}
