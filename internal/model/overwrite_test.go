package model_test

import (
	"slices"
	"testing"

	"github.com/guildhall/guildhall/internal/model"
)

// TestSortedOverwrites: everyone first, then roles by their position
// (highest first), then users by ID, byte by byte; the list it was given is
// left as it was.
func TestSortedOverwrites(t *testing.T) {
	positions := map[string]int{"low": 1, "mid": 5, "top": 9}
	position := func(id string) int { return positions[id] }
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
		{"a role that does not exist sorts as position 0", []model.Overwrite{ow("role", "gone"), ow("role", "low")},
			[]string{"role:low", "role:gone"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := slices.Clone(tc.in)
			got := []string{}
			for _, o := range model.SortedOverwrites(position, in) {
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
