package httpapi

import (
	"bytes"
	"net/http/httptest"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/labstack/echo/v4"
)

// TestMemoizableOperations: a validation is remembered only for operations
// whose check reads nothing but the path and the query.
func TestMemoizableOperations(t *testing.T) {
	doc, err := LoadContract()
	if err != nil {
		t.Fatal(err)
	}
	ops, err := operations(doc)
	if err != nil {
		t.Fatal(err)
	}
	var kept, checked int
	for _, op := range ops {
		reads := op.route.Operation.RequestBody != nil
		for _, params := range []openapi3.Parameters{op.route.PathItem.Parameters, op.route.Operation.Parameters} {
			for _, p := range params {
				if p.Value.In == openapi3.ParameterInHeader || p.Value.In == openapi3.ParameterInCookie {
					reads = true
				}
			}
		}
		if got := memoizable(op); got == reads {
			t.Errorf("%s: memoizable %v, though its check reads a body or a header: %v", op.id, got, reads)
		}
		if memoizable(op) {
			kept++
		} else {
			checked++
		}
	}
	for _, name := range []string{"GetUser", "GetUserPermissions", "ListUsers"} {
		if op := indexOperations(ops).byName[name]; op == nil || !memoizable(op) {
			t.Errorf("%s is not remembered", name)
		}
	}
	t.Logf("%d operations remembered, %d always checked", kept, checked)
}

// TestValidatedKeyKeepsRequestsApart: two requests that differ in an
// operation, a path parameter (whatever bytes it holds) or the query never
// share a key.
func TestValidatedKeyKeepsRequestsApart(t *testing.T) {
	e := echo.New()
	key := func(id string, query string, values ...string) []byte {
		c := e.NewContext(httptest.NewRequest("GET", "/", nil), httptest.NewRecorder())
		names := make([]string, len(values))
		for i := range names {
			names[i] = "p"
		}
		c.SetParamNames(names...)
		c.SetParamValues(values...)
		return bytes.Clone(validatedKey(nil, &operation{id: id}, c, query))
	}
	cases := [][]byte{
		key("getUser", "", "a"),
		key("getUser", "", "b"),
		key("getUser", "x=1", "a"),
		key("getUsers", "", "a"),
		key("getUser", "", "a\x00"),
		key("getUser", "", "a\x01"),
		key("getUser", "", "a\x01\x00"),
		key("getUser", "", "a", ""),
		key("getUser", "", "a\x00", ""),
		key("getUser", "\x00a", ""),
		key("getUser", "", "", "a"),
	}
	for i := range cases {
		for j := range i {
			if bytes.Equal(cases[i], cases[j]) {
				t.Errorf("requests %d and %d share the key %q", j, i, cases[i])
			}
		}
	}
}
