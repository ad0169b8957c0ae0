package store

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/guildhall/guildhall/internal/apperr"
	"github.com/guildhall/guildhall/internal/fresh"
	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/sqldb"
)

type tokenRow struct {
	ID        string `gorm:"primaryKey"`
	UserID    string
	Name      string
	Hash      string
	CreatedAt micros `gorm:"autoCreateTime:false"`
	ExpiresAt *micros
}

func (tokenRow) TableName() string { return "tokens" }

func (r tokenRow) model() model.Token {
	t := model.Token{ID: r.ID, UserID: r.UserID, Name: r.Name, CreatedAt: r.CreatedAt.time()}
	t.ExpiresAt = timePtr(r.ExpiresAt)
	return t
}

// InsertToken stores a token's metadata and hash.
func (tx *Tx) InsertToken(ctx context.Context, t model.Token, hash string) error {
	row := tokenRow{ID: t.ID, UserID: t.UserID, Name: t.Name, Hash: hash, CreatedAt: microsOf(t.CreatedAt), ExpiresAt: microsPtr(t.ExpiresAt)}
	if err := tx.with(ctx).Create(&row).Error; err != nil {
		return duplicate(err, "The token already exists.")
	}
	return nil
}

// DeleteToken revokes a token.
func (tx *Tx) DeleteToken(ctx context.Context, userID, tokenID string) error {
	if err := tx.with(ctx).Where("id = ? AND user_id = ?", tokenID, userID).Delete(&tokenRow{}).Error; err != nil {
		return fmt.Errorf("delete token: %w", err)
	}
	return nil
}

// RenameToken stores a token's name.
func (tx *Tx) RenameToken(ctx context.Context, userID, tokenID, name string) error {
	err := tx.with(ctx).Model(&tokenRow{}).Where("id = ? AND user_id = ?", tokenID, userID).Update("name", name).Error
	if err != nil {
		return fmt.Errorf("rename token: %w", err)
	}
	return nil
}

// DeleteExpiredTokens removes a user's tokens that expired by now: they
// no longer authenticate, and removing them before a token is counted
// keeps a user's rows, and the list of them, within the token limit.
func (tx *Tx) DeleteExpiredTokens(ctx context.Context, userID string, now time.Time) error {
	err := tx.with(ctx).Where("user_id = ? AND expires_at IS NOT NULL AND expires_at <= ?", userID, microsOf(now)).
		Delete(&tokenRow{}).Error
	if err != nil {
		return fmt.Errorf("delete expired tokens: %w", err)
	}
	return nil
}

// GetToken returns one token of a user.
func (q queries) GetToken(ctx context.Context, userID, tokenID string) (model.Token, error) {
	var r tokenRow
	if err := q.with(ctx).Where("id = ? AND user_id = ?", tokenID, userID).Take(&r).Error; err != nil {
		return model.Token{}, notFound(err, "Token %q does not exist.", tokenID)
	}
	return r.model(), nil
}

// ListTokens returns a user's tokens, newest first.
func (q queries) ListTokens(ctx context.Context, userID string) ([]model.Token, error) {
	var rows []tokenRow
	if err := q.with(ctx).Where("user_id = ?", userID).Order("id DESC").Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("list tokens: %w", err)
	}
	out := make([]model.Token, len(rows))
	for i, r := range rows {
		out[i] = r.model()
	}
	return out, nil
}

// CountLiveTokens counts a user's tokens that still authenticate at now:
// those without an expiry or expiring later (a revoked token is deleted).
func (q queries) CountLiveTokens(ctx context.Context, userID string, now time.Time) (int64, error) {
	var n int64
	err := q.with(ctx).Model(&tokenRow{}).Where("user_id = ? AND (expires_at IS NULL OR expires_at > ?)", userID, microsOf(now)).
		Count(&n).Error
	if err != nil {
		return 0, fmt.Errorf("count tokens: %w", err)
	}
	return n, nil
}

// Credentials are what authenticating a token learns: whose it is (their
// status, whether they own the community, their roles) and until when it
// holds.
type Credentials struct {
	Principal model.Principal
	TokenHash string
	Status    string
	ExpiresAt *time.Time
}

// Credentials looks a token up by its hash, as of the request's scope. An
// unknown or revoked token is a 401 (never kept: the next request asks
// again).
func (s *Store) Credentials(ctx context.Context, tokenHash string) (Credentials, error) {
	return fresh.Read(ctx, s.cache, fresh.Key{Kind: fresh.Credentials, A: tokenHash}, credentialDeps,
		func(c Credentials) int { return 256 + 40*len(c.Principal.Roles) },
		func(c Credentials) Credentials {
			c.Principal.Roles = slices.Clone(c.Principal.Roles)
			return c
		},
		func() (Credentials, error) { return s.queries.tokenCredentials(ctx, false, tokenHash) })
}

// CredentialsOfToken is Credentials for a token already authenticated, by
// its ID, read now: requests that outlive their start (event streams) use
// it to learn that their token was revoked or has expired since.
func (s *Store) CredentialsOfToken(ctx context.Context, tokenID string) (Credentials, error) {
	return s.queries.tokenCredentials(ctx, true, tokenID)
}

// CredentialsOf is what Credentials learns, for a user rather than a token
// (no token, no expiry): their status and roles, read now. An unknown user
// is a 404.
func (s *Store) CredentialsOf(ctx context.Context, userID string) (Credentials, error) {
	return s.queries.credentialsOf(ctx, userID)
}

func credentialColumns(d sqldb.Dialect) string {
	return "u.id, u.status, u.is_owner, u.timeout_until, (SELECT " + d.GroupConcat("ur.role_id") +
		" FROM user_roles ur WHERE ur.user_id = u.id)"
}

func (q queries) tokenCredentials(ctx context.Context, byID bool, arg string) (Credentials, error) {
	text := q.tokens().byHash
	if byID {
		text = q.tokens().byID
	}
	rows, err := q.query(ctx, text, arg)
	if err != nil {
		return Credentials{}, fmt.Errorf("authenticate: %w", err)
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return Credentials{}, fmt.Errorf("authenticate: %w", err)
		}
		return Credentials{}, apperr.Unauthenticated("The bearer token is unknown or revoked.")
	}
	var c Credentials
	var expires *micros
	var roles sql.NullString
	var timeout sql.NullInt64
	if err := rows.Scan(append([]any{&c.Principal.TokenID, &c.TokenHash, &expires}, c.scanTargets(&timeout, &roles)...)...); err != nil {
		return Credentials{}, fmt.Errorf("authenticate: %w", err)
	}
	c.ExpiresAt = timePtr(expires)
	c.finish(timeout, roles)
	return c, rows.Close()
}

func (q queries) credentialsOf(ctx context.Context, userID string) (Credentials, error) {
	rows, err := q.query(ctx, q.tokens().credentialsOf, userID)
	if err != nil {
		return Credentials{}, fmt.Errorf("read credentials of %s: %w", userID, err)
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return Credentials{}, fmt.Errorf("read credentials of %s: %w", userID, err)
		}
		return Credentials{}, apperr.NotFound("User %q does not exist.", userID)
	}
	var c Credentials
	var roles sql.NullString
	var timeout sql.NullInt64
	if err := rows.Scan(c.scanTargets(&timeout, &roles)...); err != nil {
		return Credentials{}, fmt.Errorf("read credentials of %s: %w", userID, err)
	}
	c.finish(timeout, roles)
	return c, rows.Close()
}

// scanTargets are the destinations of credentialColumns; finish completes
// what they hold.
func (c *Credentials) scanTargets(timeout *sql.NullInt64, roles *sql.NullString) []any {
	return []any{&c.Principal.UserID, &c.Status, &c.Principal.IsOwner, timeout, roles}
}

func (c *Credentials) finish(timeout sql.NullInt64, roles sql.NullString) {
	c.Principal.TimeoutUntil = nullTime(timeout)
	c.Principal.Roles = splitIDs(roles.String)
	sort.Strings(c.Principal.Roles)
}

// tokenStatements are the text of the credentials' hot statements
// (queries.go) in one dialect.
type tokenStatements struct{ byHash, byID, credentialsOf string }

var tokenSQL = sqldb.ByDialect(func(d sqldb.Dialect) tokenStatements {
	token := "SELECT t.id, t.hash, t.expires_at, " + credentialColumns(d) +
		" FROM tokens t JOIN users u ON u.id = t.user_id WHERE "
	return tokenStatements{byHash: token + "t.hash = ?", byID: token + "t.id = ?",
		credentialsOf: "SELECT " + credentialColumns(d) + " FROM users u WHERE u.id = ?"}
})

func (q queries) tokens() tokenStatements { return tokenSQL[q.dialect().Name()] }
