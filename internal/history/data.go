package history

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/guildhall/guildhall/internal/permissions"
)

// Event is an audit event as the store keeps it, its data undecoded: a
// history answer reads thousands, and decodes each into the fields below
// only, not into a map.
type Event struct {
	Seq       int64
	Type      string
	Subject   string
	Data      []byte
	CreatedAt time.Time
}

// fields are the members of events' data that history reads. Before and
// After hold a name, a position, a list of permissions or an object of
// these same fields, by the event's type.
type fields struct {
	Name             string          `json:"name"`
	Color            *string         `json:"color"`
	Topic            *string         `json:"topic"`
	Kind             string          `json:"kind"`
	ParentID         *string         `json:"parent_id"`
	Position         int             `json:"position"`
	Permissions      []string        `json:"permissions"`
	Allow            []string        `json:"allow"`
	Deny             []string        `json:"deny"`
	CreatedAt        *time.Time      `json:"created_at"`
	Shifts           *bool           `json:"shifts"`
	CopiedOverwrites *bool           `json:"copied_overwrites"`
	Owner            bool            `json:"owner"`
	Username         string          `json:"username"`
	DisplayName      string          `json:"display_name"`
	Status           string          `json:"status"`
	Roles            []string        `json:"roles"`
	RoleID           string          `json:"role_id"`
	TargetType       string          `json:"target_type"`
	TargetID         *string         `json:"target_id"`
	TimeoutUntil     *time.Time      `json:"timeout_until"`
	HolderIDs        *[]string       `json:"holder_ids"`
	RoleOverwrites   *[]fields       `json:"role_overwrites"`
	UserOverwrites   *[]fields       `json:"user_overwrites"`
	OverwriteList    *[]fields       `json:"overwrite_list"`
	Children         *[]string       `json:"children"`
	ChannelID        string          `json:"channel_id"`
	Before           json.RawMessage `json:"before"`
	After            json.RawMessage `json:"after"`
}

// decode reads an event's data; a member of another type than history
// expects is left zero (events are the store's own writing).
func decode(raw []byte) fields {
	var f fields
	_ = json.Unmarshal(raw, &f)
	return f
}

// obj decodes Before or After as an object; nil for null or absent.
func obj(raw json.RawMessage) *fields {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	f := decode(raw)
	return &f
}

func str(raw json.RawMessage) string {
	var s string
	_ = json.Unmarshal(raw, &s)
	return s
}

func num(raw json.RawMessage) int {
	var n int
	_ = json.Unmarshal(raw, &n)
	return n
}

func moment(raw json.RawMessage) *time.Time {
	var t *time.Time
	_ = json.Unmarshal(raw, &t)
	return t
}

func setOf(names []string) permissions.Set {
	var out permissions.Set
	for _, name := range names {
		if p, ok := permissions.ByName(name); ok {
			out |= permissions.Of(p)
		}
	}
	return out
}

func set(raw json.RawMessage) permissions.Set {
	var names []string
	_ = json.Unmarshal(raw, &names)
	return setOf(names)
}

// shifts reads whether a change of role positions shifted the roles
// between (a single create, move or delete) or set positions as given (an
// import); events written before it was told did shift, but for imports.
func (f *fields) shifts() bool { return f.Shifts == nil || *f.Shifts }

func (f *fields) overwrite() permissions.Overwrite {
	return permissions.Overwrite{Allow: setOf(f.Allow), Deny: setOf(f.Deny)}
}

func (f *fields) target() Target {
	t := Target{Type: f.TargetType}
	if f.TargetID != nil {
		t.ID = *f.TargetID
	}
	return t
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
