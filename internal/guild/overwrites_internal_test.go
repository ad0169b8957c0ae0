package guild

import (
	"slices"
	"testing"

	"github.com/guildhall/guildhall/internal/model"
)

// TestSortedOverwrites: everyone first, then roles by their position in
// the snapshot (highest first), then users by ID, byte by byte; the list
// it was given is left as it was (it may be the read cache's).
func TestSortedOverwrites(t *testing.T) {
	snap := &snapshot{roles: map[string]model.Role{
		"low": {ID: "low", Position: 1}, "mid": {ID: "mid", Position: 5}, "top": {ID: "top", Position: 9},
	}}
	ow := func(typ, id string) model.Overwrite {
		return model.Overwrite{ChannelID: "c", TargetType: typ, TargetID: id}
	}
	for _, tc := range []struct {
		name string
		in   []model.Overwrite
		want []string
	}{
		{"empty", []model.Overwrite{}, []string{}},
		{"every kind, shuffled", []model.Overwrite{ow("user", "b"), ow("role", "low"), ow("everyone", ""), ow("role", "top"),
			ow("user", "B"), ow("role", "mid"), ow("user", "a-1")},
			[]string{"everyone:", "role:top", "role:mid", "role:low", "user:B", "user:a-1", "user:b"}},
		{"a role the snapshot does not know sorts as position 0", []model.Overwrite{ow("role", "gone"), ow("role", "low")},
			[]string{"role:low", "role:gone"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := slices.Clone(tc.in)
			got := []string{}
			for _, o := range sortedOverwrites(snap, in) {
				got = append(got, o.TargetType+":"+o.TargetID)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
			if !slices.Equal(in, tc.in) {
				t.Errorf("the list given was changed: %v", in)
			}
		})
	}
}
