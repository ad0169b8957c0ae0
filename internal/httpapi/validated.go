package httpapi

import (
	"sync"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/labstack/echo/v4"
)

// validatedRequests remembers the requests that passed the contract's
// check (kin-openapi's, and singleValues) and whose outcome depends on
// nothing else than the operation, its path parameters and its raw query
// (memoizable): the same request again is not checked again. Reads repeat
// (the same user, the same channel), and the check of their parameters
// (decoding them, matching their patterns) was about a tenth of a warm
// read's CPU. Only requests that passed are kept, so a request the
// contract refuses is always checked and answered the same way. The set
// holds at most validatedMax keys of at most validatedKeyMax bytes (a
// longer request is checked every time), and is emptied when it is full.
type validatedRequests struct {
	mu sync.RWMutex
	m  map[string]struct{} // by validatedKey
}

// The bounds of the set: at most 32,768 keys of 256 bytes, 8 MB of keys.
// An ID is 36 bytes; a query longer than a few filters is not worth it.
const (
	validatedMax    = 1 << 15
	validatedKeyMax = 256
)

// memoizable reports whether the contract's check of op depends only on
// its path parameters and its query: it has some, no body, no header or
// cookie parameter, and no security requirement for the validator to
// check (operations gives it none: the gate authenticates).
func memoizable(op *operation) bool {
	o := op.route.Operation
	if o.RequestBody != nil || op.jsonBody || op.rawBody || o.Security == nil || len(*o.Security) != 0 {
		return false
	}
	n := 0
	for _, params := range []openapi3.Parameters{op.route.PathItem.Parameters, o.Parameters} {
		for _, p := range params {
			if p.Value == nil || (p.Value.In != openapi3.ParameterInPath && p.Value.In != openapi3.ParameterInQuery) {
				return false
			}
			n++
		}
	}
	return n > 0
}

// validatedKey is op's ID, each path parameter's value (as Echo matched
// it, which is what the check reads) and the raw query. Each value ends
// with a NUL, a NUL or \x01 in it escaped by a \x01: an operation has one
// route, so one count of values, and the query follows the last.
func validatedKey(buf []byte, op *operation, c echo.Context, rawQuery string) []byte {
	buf = append(buf[:0], op.id...)
	buf = append(buf, 0)
	for _, v := range c.ParamValues() {
		for i := 0; i < len(v); i++ {
			if v[i] == 0 || v[i] == 1 {
				buf = append(buf, 1)
			}
			buf = append(buf, v[i])
		}
		buf = append(buf, 0)
	}
	return append(buf, rawQuery...)
}

func (v *validatedRequests) seen(key []byte) bool {
	if len(key) > validatedKeyMax {
		return false
	}
	v.mu.RLock()
	_, ok := v.m[string(key)]
	v.mu.RUnlock()
	return ok
}

func (v *validatedRequests) add(key []byte) {
	if len(key) > validatedKeyMax {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.m == nil || len(v.m) >= validatedMax {
		v.m = make(map[string]struct{})
	}
	v.m[string(key)] = struct{}{}
}

func (v *validatedRequests) len() int {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return len(v.m)
}

// keyBufs are the buffers keys are built in (keys past validatedKeyMax
// are never kept, so neither are their buffers).
var keyBufs = sync.Pool{New: func() any { b := make([]byte, 0, validatedKeyMax); return &b }}
