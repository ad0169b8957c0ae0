package guild

import (
	"context"
	"fmt"
	"strconv"

	"github.com/guildhall/guildhall/internal/apperr"
	"github.com/guildhall/guildhall/internal/permissions"
)

// PreviewRequest asks what a member holding @everyone and exactly Roles
// would have.
type PreviewRequest struct {
	Roles      []string
	ChannelIDs []string // nil: every channel the caller can view
	Explain    bool
}

// A preview with explanations covers at most MaxExplainedChannels
// channels, and its explanations hold at most MaxExplainSteps steps in all
// (the base's included). An explanation grows with the roles times the
// overwrites of each channel, so without the second bound fifty channels
// of a community at the default limits would explain themselves in tens of
// megabytes; with it, the answer stays under 8 MiB whatever the IDs (a step
// encodes in at most about 400 bytes), and one channel always fits (at
// most 10 × 503 steps, and 14 × 251 for the base).
const (
	MaxExplainedChannels = 50
	MaxExplainSteps      = 20000
)

// Preview is what such a member would have.
type Preview struct {
	Base        permissions.Set
	BaseExplain []permissions.Explanation // with Explain
	Channels    []ChannelPreview          // in tree order
}

// ChannelPreview is the effective permissions in one channel.
type ChannelPreview struct {
	ChannelID   string
	Permissions permissions.Set
	Explain     []permissions.Explanation // with Explain
}

// PreviewPermissions computes the permissions of a member holding the
// given roles (and no overwrite of their own), from the request's view of
// the community; nothing is written. Unknown roles and unknown or hidden
// channels are 400 at their index; each role must be below the caller's top.
func (s *Service) PreviewPermissions(_ context.Context, a *Actor, req PreviewRequest) (Preview, error) {
	var bad []apperr.FieldError
	for i, id := range req.Roles {
		if _, ok := a.auth.Role(id); !ok {
			bad = append(bad, apperr.FieldError{Location: "body.roles[" + strconv.Itoa(i) + "]", Message: "no role with ID " + quote(id)})
		}
	}
	for i, id := range req.ChannelIDs {
		if _, ok := a.known(id); !ok {
			bad = append(bad, apperr.FieldError{Location: "body.channel_ids[" + strconv.Itoa(i) + "]", Message: "no channel with ID " + quote(id)})
		}
	}
	if req.Explain && (req.ChannelIDs == nil || len(req.ChannelIDs) > MaxExplainedChannels) {
		bad = append(bad, apperr.FieldError{Location: "body.channel_ids", Message: fmt.Sprintf(
			"with explain, name at most %d channels in channel_ids and ask for the others in further requests", MaxExplainedChannels)})
	}
	if len(bad) > 0 {
		return Preview{}, apperr.InvalidFields(bad)
	}
	if err := a.authorize(opPreviewPermissions); err != nil {
		return Preview{}, err
	}
	for _, id := range req.Roles {
		r, _ := a.auth.Role(id)
		if err := a.canManageRole(r); err != nil {
			return Preview{}, err
		}
	}
	sub := subjectOf(a.auth, false, req.Roles, nil, a.now)
	out := Preview{Base: permissions.Base(sub), Channels: []ChannelPreview{}}
	steps := 0
	if req.Explain {
		out.BaseExplain = permissions.Explain(sub, nil)
		steps += countSteps(out.BaseExplain)
	}
	wanted := map[string]bool{}
	for _, id := range req.ChannelIDs {
		wanted[id] = true
	}
	for _, c := range a.auth.Channels() { // tree order
		if req.ChannelIDs != nil && !wanted[c.ID] || !a.knows(c.ID) {
			continue
		}
		ch := a.auth.ChannelFor(c.ID, "")
		p := ChannelPreview{ChannelID: c.ID, Permissions: permissions.InChannel(sub, ch)}
		if req.Explain {
			p.Explain = permissions.Explain(sub, &ch)
			if steps += countSteps(p.Explain); steps > MaxExplainSteps {
				// Known only from the state, hence checked after the
				// permission: it tells nothing to a caller who may not ask.
				return Preview{}, apperr.InvalidAt("body.channel_ids", "the explanations of these %d channels hold more than %d steps; "+
					"ask for fewer channels at a time (in tree order, the first %d fit)", len(req.ChannelIDs), MaxExplainSteps, len(out.Channels))
			}
		}
		out.Channels = append(out.Channels, p)
	}
	return out, nil
}

func countSteps(list []permissions.Explanation) int {
	n := 0
	for _, e := range list {
		n += len(e.Steps)
	}
	return n
}
