package history

import (
	"fmt"
	"time"

	"github.com/guildhall/guildhall/internal/permissions"
)

// data reads an event's data as the store decodes it from JSON: strings,
// float64 numbers, []any lists, map[string]any objects, nil for null.
type data map[string]any

func (d data) str(k string) string {
	s, _ := d[k].(string)
	return s
}

func (d data) strPtr(k string) *string {
	s, ok := d[k].(string)
	if !ok {
		return nil
	}
	return &s
}

func (d data) num(k string) int {
	f, _ := d[k].(float64)
	return int(f)
}

func (d data) has(k string) bool {
	_, ok := d[k]
	return ok
}

func (d data) obj(k string) data {
	m, _ := d[k].(map[string]any)
	return m
}

func (d data) list(k string) []any {
	l, _ := d[k].([]any)
	return l
}

func (d data) strs(k string) []string {
	var out []string
	for _, v := range d.list(k) {
		if s, ok := v.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

func (d data) set(k string) permissions.Set {
	var out permissions.Set
	for _, name := range d.strs(k) {
		if p, ok := permissions.ByName(name); ok {
			out |= permissions.Of(p)
		}
	}
	return out
}

func (d data) time(k string) *time.Time {
	s, ok := d[k].(string)
	if !ok {
		return nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return nil
	}
	return &t
}

// shifts reads whether a change of role positions shifted the roles
// between (a single create, move or delete) or set positions as given (an
// import); events written before it was told did shift, but for imports.
func (d data) shifts() bool {
	b, ok := d["shifts"].(bool)
	return b || !ok
}

// overwrite reads {"allow": [...], "deny": [...]}; ok is false for null.
func (d data) overwrite(k string) (permissions.Overwrite, bool) {
	o := d.obj(k)
	if o == nil {
		return permissions.Overwrite{}, false
	}
	return permissions.Overwrite{Allow: o.set("allow"), Deny: o.set("deny")}, true
}

// Incomplete is the error of an event that lacks what undoing it needs
// (written by a release before history answers).
type Incomplete struct {
	Seq  int64
	Type string
	Key  string
}

func (e *Incomplete) Error() string {
	return fmt.Sprintf("event %d (%s) lacks data.%s", e.Seq, e.Type, e.Key)
}
