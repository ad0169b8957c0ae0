package store

import (
	"context"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
	"gorm.io/gorm"

	"github.com/guildhall/guildhall/internal/apperr"
	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/permissions"
)

// How the store runs SQL, one rule:
//
//   - The hot reads, the ones a request makes on every call and the cache
//     answers (credentials, a user, a page of users), the change log's
//     questions, and the two hot writes, a new user (every member who
//     joins makes it) and the audit events (every write appends them:
//     insertEvents), are constant SQL in hot.go and tx.go, run as
//     statements prepared once per pool (sql.go) and scanned by hand into
//     the model, without reflection. A parameter SQLite's planner reads
//     (a LIMIT) would have it prepare the statement again at every run:
//     a LIMIT's count is dialect.limit's.
//   - Everything else, the writes, the reads of a write transaction that
//     are not hot, the cold reads and the authorization state's parts
//     (authstate.go), goes through GORM's builder on the row types of
//     rows.go; SQL text appears only in the migrations and, for a
//     statement the builder cannot say (an UPDATE ... WHERE id IN
//     (SELECT ...)), as gorm.Expr or a named constant beside its function.
//
// No function does both. There is one read path per question: outside a
// transaction the Store's cached reads (User, ListUsers, Credentials,
// AuthState), inside one the Tx's (GetUser, Credentials, AuthState), which
// share the SQL and the scanners of the hot reads.

// queries are the reads, shared by the store (read pool) and a write
// transaction (its own handle, so a transaction never waits on itself).
type queries struct {
	db      *gorm.DB
	dialect dialect
	stmts   *stmtCache      // prepared statements of the pool db belongs to
	sqlTx   *sql.Tx         // set inside a write transaction
	txCtx   context.Context // set inside a write transaction: see Tx
	counter *atomic.Int64   // QueryCount
	// writes, inside a write transaction, counts its statements that may
	// have written (Tx.own reads what the transaction changed again only
	// after one).
	writes *atomic.Int64
	tracer *tracer // nil: tracing off
	// span, inside a write transaction, is the span of the write whose
	// part of the batch q runs (nil: not traced): its statements run under
	// the batch's context, and belong to that span.
	span trace.Span
}

// ctx is the context statements run under. Inside a write transaction it is
// the batch's, never the request's: a request that goes away must not
// interrupt a statement of a transaction other requests share (SQLite rolls
// back the whole transaction when a statement is interrupted).
//
// Outside transactions, SQLite statements run without the request's
// cancellation: with a cancellable context, database/sql and the SQLite
// driver each start a goroutine per statement to watch it (a measurable
// share of a cheap request), and a local, indexed, bounded SQLite read has
// nothing to cancel. PostgreSQL statements keep the request's context: a database that
// hangs must not hold the request.
func (q queries) ctx(ctx context.Context) context.Context {
	if q.txCtx != nil {
		if q.span != nil {
			return trace.ContextWithSpan(q.txCtx, q.span)
		}
		return q.txCtx
	}
	if q.dialect.name() == "sqlite" {
		return context.WithoutCancel(ctx)
	}
	return ctx
}

func (q queries) with(ctx context.Context) *gorm.DB { return q.db.WithContext(q.ctx(ctx)) }

// GetChannel returns one channel: a prepared statement, as an import
// reads hundreds of channels one by one under the write lock.
func (q queries) GetChannel(ctx context.Context, id string) (model.Channel, error) {
	var r channelRow
	found := false
	err := scanAll(ctx, q, "SELECT "+channelColumns+" FROM channels WHERE id = ?", []any{id}, func(rows *sql.Rows) error {
		found = true
		return rows.Scan(r.fields()...)
	})
	if err != nil {
		return model.Channel{}, fmt.Errorf("read channel %q: %w", id, err)
	}
	if !found {
		return model.Channel{}, notFound(gorm.ErrRecordNotFound, "Channel %q does not exist.", id)
	}
	return r.model(), nil
}

// OverwritesVersion is the version of a channel's overwrite list.
func (q queries) OverwritesVersion(ctx context.Context, channelID string) (int64, error) {
	var r channelRow
	if err := q.with(ctx).Select("overwrites_version").Where("id = ?", channelID).Take(&r).Error; err != nil {
		return 0, notFound(err, "Channel %q does not exist.", channelID)
	}
	return r.OverwritesVersion, nil
}

// ChannelOverwrites lists a channel's overwrites (unordered).
func (q queries) ChannelOverwrites(ctx context.Context, channelID string) ([]model.Overwrite, error) {
	var rows []overwriteRow
	if err := q.with(ctx).Where("channel_id = ?", channelID).Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("list overwrites: %w", err)
	}
	out := make([]model.Overwrite, len(rows))
	for i, r := range rows {
		out[i] = r.model()
	}
	return out, nil
}

// GetRole returns one role.
func (q queries) GetRole(ctx context.Context, id string) (model.Role, error) {
	var r roleRow
	if err := q.with(ctx).Where("id = ?", id).Take(&r).Error; err != nil {
		return model.Role{}, notFound(err, "Role %q does not exist.", id)
	}
	return r.model(), nil
}

// CountRoles counts the roles.
func (q queries) CountRoles(ctx context.Context) (int, error) {
	var n int64
	if err := q.with(ctx).Model(&roleRow{}).Count(&n).Error; err != nil {
		return 0, fmt.Errorf("count roles: %w", err)
	}
	return int(n), nil
}

// UserByUsername finds a user's ID by username, ignoring case.
func (q queries) UserByUsername(ctx context.Context, username string) (string, error) {
	var r userRow
	if err := q.with(ctx).Select("id").Where("username_key = ?", strings.ToLower(username)).Take(&r).Error; err != nil {
		return "", notFound(err, "User %q does not exist.", username)
	}
	return r.ID, nil
}

// CountUsers counts the users.
func (q queries) CountUsers(ctx context.Context) (int64, error) {
	var n int64
	if err := q.with(ctx).Model(&userRow{}).Count(&n).Error; err != nil {
		return 0, fmt.Errorf("count users: %w", err)
	}
	return n, nil
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

// GetAttachment returns one attachment's metadata.
func (q queries) GetAttachment(ctx context.Context, channelID, id string) (model.Attachment, error) {
	var r attachmentRow
	if err := q.with(ctx).Where("channel_id = ? AND id = ?", channelID, id).Take(&r).Error; err != nil {
		return model.Attachment{}, notFound(err, "Attachment %q does not exist in channel %q.", id, channelID)
	}
	return r.model(), nil
}

// ListAttachments returns up to limit attachments of a channel with IDs
// after the given one, and whether more follow.
func (q queries) ListAttachments(ctx context.Context, channelID, after string, limit int) ([]model.Attachment, bool, error) {
	var rows []attachmentRow
	err := q.with(ctx).Where("channel_id = ? AND id > ?", channelID, after).Order("id").Limit(limit + 1).Find(&rows).Error
	if err != nil {
		return nil, false, fmt.Errorf("list attachments: %w", err)
	}
	more := len(rows) > limit
	if more {
		rows = rows[:limit]
	}
	out := make([]model.Attachment, len(rows))
	for i, r := range rows {
		out[i] = r.model()
	}
	return out, more, nil
}

// GetProfile returns a user's links (empty, version 0, when they have none).
func (q queries) GetProfile(ctx context.Context, userID string) (model.ProfileLinks, error) {
	var r profileRow
	err := q.with(ctx).Where("user_id = ?", userID).Take(&r).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return model.ProfileLinks{UserID: userID, Links: map[string]string{}}, nil
	}
	if err != nil {
		return model.ProfileLinks{}, fmt.Errorf("read profile: %w", err)
	}
	p := model.ProfileLinks{UserID: userID, Version: r.Version, Links: map[string]string{}}
	if err := jsonUnmarshal(r.Links, &p.Links); err != nil {
		return model.ProfileLinks{}, fmt.Errorf("decode profile links: %w", err)
	}
	return p, nil
}

// settings reads the global permissions and their version in a
// transaction.
func (q queries) settings(ctx context.Context) (permissions.Set, int64, error) {
	var st struct {
		GlobalPermissions int64
		GlobalVersion     int64
	}
	if err := q.with(ctx).Table("settings").Select("global_permissions, global_version").Where("id = 1").Scan(&st).Error; err != nil {
		return 0, 0, fmt.Errorf("read settings: %w", err)
	}
	return permissions.Set(st.GlobalPermissions) & permissions.All, st.GlobalVersion, nil
}

// deploymentKey reads one of the deployment's secret keys.
func (q queries) deploymentKey(ctx context.Context, name string) ([]byte, error) {
	var row struct{ KeyHex string }
	if err := q.with(ctx).Table("deployment_keys").Select("key_hex").Where("name = ?", name).Take(&row).Error; err != nil {
		return nil, fmt.Errorf("read the %s key: %w", name, err)
	}
	return hex.DecodeString(row.KeyHex)
}

// notFound turns gorm's record-not-found into a 404 with the detail given.
func notFound(err error, format string, args ...any) error {
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return apperr.NotFound(format, args...)
	}
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), err)
}
