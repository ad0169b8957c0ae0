package httpapi

import (
	"sync"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/labstack/echo/v4"
)

// validatedRequests remembers the requests that passed kin-openapi's check
// and whose outcome depends on nothing else than the operation, its path
// parameters and its raw query (memoizable): the same request again is not
// checked again. Reads repeat (the same user, the same channel), and the
// check of their parameters (decoding them, matching their patterns) was
// about a tenth of a warm read's CPU. Only successes are kept, so a request
// the contract refuses is always checked and answered the same way; the
// set is emptied when it is full.
type validatedRequests struct {
	mu sync.RWMutex
	m  map[string]struct{} // by validatedKey
}

// validatedMax bounds the set: at ~100 bytes a key, a few MB.
const validatedMax = 1 << 15

// memoizable reports whether kin-openapi's check of op depends only on its
// path parameters and its query: no body, no header or cookie parameters.
// (Security is the gate's: the validator's authentication is a no-op.)
func memoizable(op *operation) bool {
	o := op.route.Operation
	if o.RequestBody != nil || op.jsonBody || op.rawBody {
		return false
	}
	for _, params := range []openapi3.Parameters{op.route.PathItem.Parameters, o.Parameters} {
		for _, p := range params {
			if p.Value == nil || (p.Value.In != openapi3.ParameterInPath && p.Value.In != openapi3.ParameterInQuery) {
				return false
			}
		}
	}
	return true
}

// validatedKey is op's ID, each path parameter's value and the raw query,
// apart by a byte no URL holds unescaped (Echo's path values are unescaped:
// a NUL in one is escaped before it goes in).
func validatedKey(buf []byte, op *operation, c echo.Context, rawQuery string) []byte {
	buf = append(buf[:0], op.id...)
	for _, v := range c.ParamValues() {
		buf = append(buf, 0)
		for i := 0; i < len(v); i++ {
			if v[i] == 0 || v[i] == 1 {
				buf = append(buf, 1)
			}
			buf = append(buf, v[i])
		}
	}
	buf = append(buf, 0, 0)
	return append(buf, rawQuery...)
}

func (v *validatedRequests) seen(key []byte) bool {
	v.mu.RLock()
	_, ok := v.m[string(key)]
	v.mu.RUnlock()
	return ok
}

func (v *validatedRequests) add(key []byte) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.m == nil || len(v.m) >= validatedMax {
		v.m = make(map[string]struct{})
	}
	v.m[string(key)] = struct{}{}
}

// keyBufs are the buffers keys are built in.
var keyBufs = sync.Pool{New: func() any { b := make([]byte, 0, 128); return &b }}
