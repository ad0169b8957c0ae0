package guild

import (
	"context"
	"errors"

	"github.com/guildhall/guildhall/internal/apperr"
	"github.com/guildhall/guildhall/internal/history"
	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/permissions"
	"github.com/guildhall/guildhall/internal/store"
)

// MinBootstrapToken is the shortest token GUILDHALL_BOOTSTRAP_TOKEN accepts.
const MinBootstrapToken = 32

// Bootstrap prepares a fresh store: the settings row with docs/design.md's default
// global permissions and, when there are no users, the owner and a token for
// them (bootstrapToken, or a fresh one). It returns the owner's token when it
// created one, "" when the store was not empty.
func (s *Service) Bootstrap(ctx context.Context, ownerName, bootstrapToken string) (string, error) {
	if bootstrapToken != "" && len(bootstrapToken) < MinBootstrapToken {
		return "", errors.New("the bootstrap token must be at least 32 characters")
	}
	var token string
	err := s.write(ctx, nil, func(tx *store.Tx, _ *Actor) error {
		token = "" // a write may run twice (store.Write): nothing of a first run stays
		if err := tx.EnsureSettings(ctx, permissions.DefaultGlobal); err != nil {
			return err
		}
		n, err := tx.CountUsers(ctx)
		if err != nil || n > 0 {
			return err
		}
		owner, err := s.insertUser(ctx, tx, UserInput{Username: ownerName}, true)
		if err != nil {
			return err
		}
		token = bootstrapToken
		if token == "" {
			token = NewSecret()
		}
		if _, err := s.insertToken(ctx, tx, owner.ID, "bootstrap", nil, token); err != nil {
			return err
		}
		return emit(ctx, tx, nil, WriteOpts{}, "user.created", "user:"+owner.ID,
			map[string]any{"username": owner.Username, "display_name": owner.DisplayName, "owner": true, "created_at": history.Stamp(owner.CreatedAt)})
	})
	return token, err
}

// IssueToken mints a token for a user named by username, for the CLI.
func (s *Service) IssueToken(ctx context.Context, username, name string) (model.Token, string, error) {
	id, err := s.store.UserByUsername(ctx, username)
	if err != nil {
		return model.Token{}, "", err
	}
	u, err := s.store.User(ctx, id)
	if err != nil {
		return model.Token{}, "", err
	}
	if u.Status != model.StatusActive {
		return model.Token{}, "", apperr.Conflict("User %q is suspended.", username)
	}
	return s.CreateToken(ctx, nil, u.ID, name, nil, WriteOpts{})
}
