package guild

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"time"

	"github.com/google/uuid"

	"github.com/guildhall/guildhall/internal/apperr"
	"github.com/guildhall/guildhall/internal/history"
	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/store"
)

// UserInput is what create and replace take.
type UserInput struct {
	Username    string
	DisplayName *string // create: defaults to the username
	Email       *string
	Status      string // replace only
}

// UserFilter narrows a list of users; the zero value lists everyone.
type UserFilter struct {
	Query  string // a case-insensitive prefix of the username or display name (or email, for MANAGE_USERS)
	RoleID string
	Status string
}

// ListUsers pages through users in creation order, filtered; a search (a
// query) lists its matches in the order of the name they match by. The
// query matches emails only for callers who may see them (seesEmails).
func (s *Service) ListUsers(ctx context.Context, a *Actor, f UserFilter, rawCursor string, limit int) (Page[model.User], error) {
	if err := a.authorize(opListUsers); err != nil {
		return Page[model.User]{}, err
	}
	return s.listUsers(ctx, a, f, rawCursor, limit)
}

// listUsers is ListUsers, for what lists users.
func (s *Service) listUsers(ctx context.Context, a *Actor, f UserFilter, rawCursor string, limit int) (Page[model.User], error) {
	filters := []string{"users"}
	matchEmail := a.seesEmails()
	if f.Query != "" {
		// A search's cursor holds a position in another order: one made
		// for the ID order, before searches had theirs, is refused. It may
		// be at an email: it serves only who searches emails too.
		filters[0] = "users by key"
		if matchEmail {
			filters[0] = "users by key or email"
		}
	}
	if f != (UserFilter{}) {
		filters = append(filters, f.Query, f.RoleID, f.Status)
	}
	after, err := s.cursors.Decode(rawCursor, filters...)
	if err != nil {
		return Page[model.User]{}, err
	}
	sf := store.UserFilter{Prefix: f.Query, RoleID: f.RoleID, Status: f.Status, MatchEmail: matchEmail}
	users, next, err := s.store.ListUsers(ctx, sf, after, pageLimit(limit))
	if err != nil {
		return Page[model.User]{}, err
	}
	return s.userPage(a, users, next, filters), nil
}

// Me returns the caller's own user, email included: what a client holding only
// a token needs to learn who it is.
func (s *Service) Me(ctx context.Context, a *Actor) (model.User, error) {
	if a == nil {
		return model.User{}, apperr.Unauthenticated("A bearer token is required.")
	}
	if err := a.authorize(opGetMe); err != nil {
		return model.User{}, err
	}
	return s.user(ctx, a, a.UserID)
}

// GetUser returns one user.
func (s *Service) GetUser(ctx context.Context, a *Actor, id string) (model.User, error) {
	if err := a.authorize(opGetUser); err != nil {
		return model.User{}, err
	}
	return s.user(ctx, a, id)
}

// user is a user as the caller may see them.
func (s *Service) user(ctx context.Context, a *Actor, id string) (model.User, error) {
	u, err := s.store.User(ctx, id)
	if err != nil {
		return model.User{}, err
	}
	hideEmail(a, &u)
	return u, nil
}

// CreateUser creates an active user with no roles.
func (s *Service) CreateUser(ctx context.Context, a *Actor, in UserInput, o WriteOpts) (model.User, error) {
	if err := checkName("display_name", in.DisplayName); err != nil {
		return model.User{}, err
	}
	var out model.User
	err := s.write(ctx, a, func(tx *store.Tx, a *Actor) error {
		if a != nil {
			if err := a.authorize(opCreateUser); err != nil {
				return err
			}
			if err := a.canCreateUser(); err != nil {
				return err
			}
		}
		var err error
		out, err = s.insertUser(ctx, tx, in, false)
		if err != nil {
			return err
		}
		return emit(ctx, tx, a, o, "user.created", "user:"+out.ID, map[string]any{
			"username": out.Username, "display_name": out.DisplayName, "created_at": history.Stamp(out.CreatedAt)})
	})
	return out, err
}

func (s *Service) insertUser(ctx context.Context, tx *store.Tx, in UserInput, owner bool) (model.User, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return model.User{}, err
	}
	display := in.Username
	if in.DisplayName != nil {
		display = *in.DisplayName
	}
	now := s.now()
	return tx.InsertUser(ctx, model.User{ID: id.String(), Username: in.Username, DisplayName: display,
		Email: in.Email, Status: model.StatusActive, IsOwner: owner, CreatedAt: now, UpdatedAt: now})
}

// ReplaceUser replaces a user's fields. A user changing only their own
// username and display name needs no permission.
func (s *Service) ReplaceUser(ctx context.Context, a *Actor, id string, in UserInput, o WriteOpts) (model.User, error) {
	if err := checkName("display_name", in.DisplayName); err != nil {
		return model.User{}, err
	}
	var out model.User
	err := s.write(ctx, a, func(tx *store.Tx, a *Actor) error {
		u, err := tx.GetUser(ctx, id)
		if err != nil {
			return err
		}
		next := u
		next.Username, next.Email, next.Status = in.Username, in.Email, in.Status
		if in.DisplayName != nil {
			next.DisplayName = *in.DisplayName
		}
		if err := a.canEditUser(opUpdateUser, u, next); err != nil {
			return err
		}
		if err := o.IfMatch.check(Tag(u.Version)); err != nil {
			return err
		}
		if u.IsOwner && next.Status != model.StatusActive {
			return apperr.Conflict("The owner cannot be suspended.")
		}
		if next.Username == u.Username && next.DisplayName == u.DisplayName && eqPtr(next.Email, u.Email) && next.Status == u.Status {
			out = u
			return nil
		}
		next.UpdatedAt = s.now()
		if out, err = tx.UpdateUser(ctx, next); err != nil {
			return err
		}
		return emit(ctx, tx, a, o, "user.updated", "user:"+id, map[string]any{
			"before": userAudit(u), "after": userAudit(out), "email_changed": !eqPtr(u.Email, out.Email)})
	})
	return out, err
}

// MaxTimeout is how far ahead a timeout may end.
const MaxTimeout = 28 * 24 * time.Hour

// UserPatch is a merge patch of a user: nil fields stay.
type UserPatch struct {
	Username     *string
	DisplayName  *string
	SetEmail     bool
	Email        *string
	Status       *string
	SetTimeout   bool
	TimeoutUntil *time.Time // nil, or a time past: no timeout
}

// PatchUser applies a merge patch: the fields ReplaceUser replaces, by its
// rules, and the timeout (docs/design.md §13).
func (s *Service) PatchUser(ctx context.Context, a *Actor, id string, p UserPatch, o WriteOpts) (model.User, error) {
	if err := checkName("display_name", p.DisplayName); err != nil {
		return model.User{}, err
	}
	now := s.now()
	until := p.TimeoutUntil
	if until != nil && !until.After(now) {
		until = nil // a time past ends a timeout
	}
	if until != nil && until.After(now.Add(MaxTimeout)) {
		return model.User{}, apperr.Invalid("timeout_until", "a timeout may end at most 28 days ahead (before %s)",
			now.Add(MaxTimeout).Format(time.RFC3339))
	}
	var out model.User
	err := s.write(ctx, a, func(tx *store.Tx, a *Actor) error {
		u, err := tx.GetUser(ctx, id)
		if err != nil {
			return err
		}
		next := u
		if p.Username != nil {
			next.Username = *p.Username
		}
		if p.DisplayName != nil {
			next.DisplayName = *p.DisplayName
		}
		if p.SetEmail {
			next.Email = p.Email
		}
		if p.Status != nil {
			next.Status = *p.Status
		}
		profile := p.Username != nil || p.DisplayName != nil || p.SetEmail || p.Status != nil
		if profile {
			if err := a.canEditUser(opPatchUser, u, next); err != nil {
				return err
			}
		}
		before := activeTimeout(u.TimeoutUntil, a.now)
		if p.SetTimeout {
			if err := a.canTimeOut(opPatchUser, u); err != nil {
				return err
			}
			next.TimeoutUntil = until
		}
		if err := o.IfMatch.check(Tag(u.Version)); err != nil {
			return err
		}
		if u.IsOwner && next.Status != model.StatusActive {
			return apperr.Conflict("The owner cannot be suspended.")
		}
		profileChanged := next.Username != u.Username || next.DisplayName != u.DisplayName || !eqPtr(next.Email, u.Email) ||
			next.Status != u.Status
		timeoutChanged := p.SetTimeout && !eqTime(until, before)
		if !profileChanged && !timeoutChanged {
			out = u
			return nil
		}
		if !timeoutChanged {
			next.TimeoutUntil = u.TimeoutUntil
		}
		next.UpdatedAt = s.now()
		if out, err = tx.UpdateUser(ctx, next); err != nil {
			return err
		}
		if profileChanged {
			if err := emit(ctx, tx, a, o, "user.updated", "user:"+id, map[string]any{
				"before": userAudit(u), "after": userAudit(out), "email_changed": !eqPtr(u.Email, out.Email)}); err != nil {
				return err
			}
		}
		if timeoutChanged {
			return emit(ctx, tx, a, o, "user.timeout", "user:"+id, map[string]any{
				"before": timeValue(before), "after": timeValue(until)})
		}
		return nil
	})
	// A moderator who may time a user out may not see their email.
	hideEmail(a, &out)
	return out, err
}

// activeTimeout is a timeout's end while it lasts, nil once over.
func activeTimeout(until *time.Time, now time.Time) *time.Time {
	if until == nil || !until.After(now) {
		return nil
	}
	return until
}

func eqTime(a, b *time.Time) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Equal(*b)
}

// timeValue is a time as an event's data holds it (null for none).
func timeValue(t *time.Time) any {
	if t == nil {
		return nil
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// userAudit is what the audit log keeps of a user: not the email, which only
// the user and MANAGE_USERS may see (the log records that it changed).
func userAudit(u model.User) map[string]any {
	return map[string]any{"username": u.Username, "display_name": u.DisplayName, "status": u.Status}
}

// DeleteUser deletes a user with their roles, overwrites, tokens and links.
func (s *Service) DeleteUser(ctx context.Context, a *Actor, id string, o WriteOpts) error {
	return s.write(ctx, a, func(tx *store.Tx, a *Actor) error {
		u, err := tx.GetUser(ctx, id)
		if err != nil {
			return err
		}
		if err := a.authorize(opDeleteUser); err != nil {
			return err
		}
		if err := a.canManageUser(u); err != nil {
			return err
		}
		if err := o.IfMatch.check(Tag(u.Version)); err != nil {
			return err
		}
		if u.IsOwner {
			return apperr.Conflict("The owner cannot be deleted.")
		}
		links, err := tx.GetProfile(ctx, id)
		if err != nil {
			return err
		}
		overwrites, err := tx.OverwritesOf(ctx, model.TargetUser, id)
		if err != nil {
			return err
		}
		gone, err := tx.DeleteUser(ctx, id)
		if err != nil {
			return err
		}
		return emit(ctx, tx, a, o, "user.deleted", "user:"+id, history.UserDeleted(map[string]any{"username": u.Username, "roles": u.Roles,
			"tokens": gone["tokens"], "overwrites": gone["overwrites"], "profile_links": len(links.Links)}, u, overwrites))
	})
}

// --- tokens

// TokenPrefix starts every token, so leaked ones are easy to scan for.
const TokenPrefix = "gh_"

// NewSecret returns a fresh token secret of 256 random bits.
func NewSecret() string {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return TokenPrefix + base64.RawURLEncoding.EncodeToString(b[:])
}

// CreateToken mints a token for a user and returns it with its secret.
func (s *Service) CreateToken(ctx context.Context, a *Actor, userID, name string, expires *time.Time, o WriteOpts) (model.Token, string, error) {
	if err := checkName("name", &name); err != nil {
		return model.Token{}, "", err
	}
	if expires != nil && !expires.After(s.now()) {
		return model.Token{}, "", apperr.Invalid("expires_at", "must be in the future")
	}
	var tok model.Token
	secret := NewSecret()
	err := s.write(ctx, a, func(tx *store.Tx, a *Actor) error {
		if _, err := tx.GetUser(ctx, userID); err != nil {
			return err
		}
		if a != nil {
			if err := a.authorizeOn(opCreateToken, userID); err != nil {
				return err
			}
		}
		if err := s.checkTokenLimit(ctx, tx, userID); err != nil {
			return err
		}
		var err error
		tok, err = s.insertToken(ctx, tx, userID, name, expires, secret)
		if err != nil {
			return err
		}
		return emit(ctx, tx, a, o, "user.token.created", "user:"+userID, map[string]any{"token_id": tok.ID, "name": name})
	})
	return tok, secret, err
}

// checkTokenLimit refuses a token past the user's limit. It first deletes
// the user's expired tokens, so that they neither count nor pile up (a
// user minting tokens that expire a second later would otherwise grow
// their rows and listTokens without bound); revoked ones are gone already.
// The purge writes no event: a token ends at its expiry, by no one's act,
// and an event per purged token would grow the log as the rows no longer
// do. It runs inside the serialized write, so
// two concurrent creates cannot both take the last place.
func (s *Service) checkTokenLimit(ctx context.Context, tx *store.Tx, userID string) error {
	now := s.now()
	if err := tx.DeleteExpiredTokens(ctx, userID, now); err != nil {
		return err
	}
	n, err := tx.CountLiveTokens(ctx, userID, now)
	if err != nil {
		return err
	}
	if max := s.limits.MaxTokensPerUser; max > 0 && n >= int64(max) {
		return apperr.LimitExceeded("tokens", max, "tokens a user holds")
	}
	return nil
}

func (s *Service) insertToken(ctx context.Context, tx *store.Tx, userID, name string, expires *time.Time, secret string) (model.Token, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return model.Token{}, err
	}
	if expires != nil {
		e := expires.UTC().Truncate(time.Microsecond)
		expires = &e
	}
	t := model.Token{ID: id.String(), UserID: userID, Name: name, CreatedAt: s.now(), ExpiresAt: expires}
	return t, tx.InsertToken(ctx, t, HashToken(secret))
}

// ListTokens lists a user's tokens.
func (s *Service) ListTokens(ctx context.Context, a *Actor, userID string) ([]model.Token, error) {
	if _, err := s.store.User(ctx, userID); err != nil {
		return nil, err
	}
	if err := a.authorizeOn(opListTokens, userID); err != nil {
		return nil, err
	}
	return s.store.ListTokens(ctx, userID)
}

// GetToken returns one token's metadata.
func (s *Service) GetToken(ctx context.Context, a *Actor, userID, tokenID string) (model.Token, error) {
	if _, err := s.store.User(ctx, userID); err != nil {
		return model.Token{}, err
	}
	t, err := s.store.GetToken(ctx, userID, tokenID) // 404 before 403
	if err != nil {
		return model.Token{}, err
	}
	if err := a.authorizeOn(opGetToken, userID); err != nil {
		return model.Token{}, err
	}
	return t, nil
}

// DeleteToken revokes a token.
func (s *Service) DeleteToken(ctx context.Context, a *Actor, userID, tokenID string, o WriteOpts) error {
	return s.write(ctx, a, func(tx *store.Tx, a *Actor) error {
		if _, err := tx.GetUser(ctx, userID); err != nil {
			return err
		}
		if _, err := tx.GetToken(ctx, userID, tokenID); err != nil {
			return err
		}
		if err := a.authorizeOn(opDeleteToken, userID); err != nil {
			return err
		}
		if err := tx.DeleteToken(ctx, userID, tokenID); err != nil {
			return err
		}
		return emit(ctx, tx, a, o, "user.token.deleted", "user:"+userID, map[string]any{"token_id": tokenID})
	})
}

// userPage is a page of users as the caller may see them (emails by the
// usual rule), with the cursor of what follows next.
func (s *Service) userPage(a *Actor, users []model.User, next string, filters []string) Page[model.User] {
	page := Page[model.User]{Items: users}
	for i := range page.Items {
		hideEmail(a, &page.Items[i])
	}
	if next != "" {
		page.NextCursor = s.cursors.Encode(next, filters...)
	}
	return page
}
