package httpapi

import (
	"bytes"
	"net/http/httptest"
	"strconv"
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
		o := op.route.Operation
		reads := o.RequestBody != nil || op.jsonBody || op.rawBody || o.Security == nil || len(*o.Security) != 0
		params := 0
		for _, ps := range []openapi3.Parameters{op.route.PathItem.Parameters, o.Parameters} {
			for _, p := range ps {
				params++
				if p.Value == nil || p.Value.In == openapi3.ParameterInHeader || p.Value.In == openapi3.ParameterInCookie {
					reads = true
				}
			}
		}
		if got := memoizable(op); got != (!reads && params > 0) {
			t.Errorf("%s: memoizable %v; its check reads a body, a header or a credential: %v; parameters: %d", op.id, got, reads, params)
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

// TestValidatedKeyKeepsRequestsApart: two requests of operations with the
// same number of path parameters (an operation has one route) never share
// a key when they differ in the operation, a path parameter (whatever
// bytes it holds) or the query.
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
	for _, cases := range [][][]byte{
		{
			key("getUser", "", "a"),
			key("getUser", "", "b"),
			key("getUser", "x=1", "a"),
			key("getUsers", "", "a"),
			key("getUse", "", "ra"),
			key("getUser", "", "a\x00"),
			key("getUser", "", "a\x01"),
			key("getUser", "", "a\x01\x00"),
			key("getUser", "\x00", "a"),
			key("getUser", "a", ""),
		},
		{
			key("getRole", "", "a", ""),
			key("getRole", "", "a\x00", ""),
			key("getRole", "", "", "a"),
			key("getRole", "", "a", "\x00"),
			key("getRole", "\x00", "a", ""),
		},
	} {
		for i := range cases {
			for j := range i {
				if bytes.Equal(cases[i], cases[j]) {
					t.Errorf("requests %d and %d share the key %q", j, i, cases[i])
				}
			}
		}
	}
}

// TestValidatedRequestsBounded: a key longer than the bound is never kept,
// and the set never holds more than its bound.
func TestValidatedRequestsBounded(t *testing.T) {
	var v validatedRequests
	long := bytes.Repeat([]byte("q"), validatedKeyMax+1)
	v.add(long)
	if v.seen(long) || v.len() != 0 {
		t.Fatalf("a key of %d bytes was kept", len(long))
	}
	for i := range validatedMax + 10 {
		k := []byte(strconv.Itoa(i))
		v.add(k)
		if !v.seen(k) {
			t.Fatalf("key %d not kept", i)
		}
		if v.len() > validatedMax {
			t.Fatalf("%d keys kept, bound %d", v.len(), validatedMax)
		}
	}
}
