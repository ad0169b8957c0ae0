package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/guildhall/guildhall/internal/apperr"
	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/sqldb"
	"gorm.io/gorm"
)

type userRow struct {
	ID          string `gorm:"primaryKey"`
	Username    string
	UsernameKey string
	DisplayName string
	// DisplayNameKey is the lower-cased display name, for search.
	DisplayNameKey string
	Email          *string
	EmailKey       *string
	Status         string
	IsOwner        bool
	TimeoutUntil   *micros
	Version        int64
	CreatedAt      micros `gorm:"autoCreateTime:false"`
	UpdatedAt      micros `gorm:"autoUpdateTime:false"`
}

func (userRow) TableName() string { return "users" }

// InsertUser creates a user; a taken username or email is a conflict,
// found by the unique indexes themselves (no query before the insert).
func (tx *Tx) InsertUser(ctx context.Context, u model.User) (model.User, error) {
	// Constant SQL, a hot write (queries.go): every member who joins
	// makes it, and GORM's builder cost it as much CPU as the INSERT.
	// The row may be held and written with the batch's others, or with
	// its events (sqldb.Tx.InsertRow): a name taken then fails the batch,
	// which runs again with each row inserted at once, and the 409 is
	// found here.
	if err := tx.sqlTx.InsertRow(ctx, userInsert, u.ID, u.Username, strings.ToLower(u.Username), u.DisplayName,
		strings.ToLower(u.DisplayName), u.Email, lowerPtr(u.Email), u.Status, u.IsOwner,
		int64(microsOf(u.CreatedAt)), int64(microsOf(u.UpdatedAt))); err != nil {
		return model.User{}, userConflict(err, u)
	}
	u.Version = 1
	if u.Roles == nil {
		u.Roles = []string{}
	}
	return u, nil
}

// UpdateUser stores a user's fields (their timeout included) and moves
// their version.
func (tx *Tx) UpdateUser(ctx context.Context, u model.User) (model.User, error) {
	err := tx.with(ctx).Model(&userRow{}).Where("id = ?", u.ID).Updates(map[string]any{
		"username": u.Username, "username_key": strings.ToLower(u.Username),
		"display_name": u.DisplayName, "display_name_key": strings.ToLower(u.DisplayName),
		"email": u.Email, "email_key": lowerPtr(u.Email), "status": u.Status,
		"timeout_until": microsPtr(u.TimeoutUntil),
		"version":       gorm.Expr("version + 1"), "updated_at": microsOf(u.UpdatedAt)}).Error
	if err != nil {
		return model.User{}, userConflict(err, u)
	}
	return tx.GetUser(ctx, u.ID)
}

// userConflict turns a unique-index violation on users into the 409 that
// names what is taken; other errors pass through.
func userConflict(err error, u model.User) error {
	switch idx := sqldb.UniqueViolation(err); {
	case strings.Contains(idx, "username_key"):
		return apperr.Conflict("The username %q is taken (usernames are unique ignoring case).", u.Username)
	case strings.Contains(idx, "email_key") && u.Email != nil:
		return apperr.Conflict("The email %q is taken.", *u.Email)
	}
	return duplicate(err, "The username or email is taken.")
}

// DeleteUser deletes a user, and returns what went with them. The schema's
// foreign keys take their roles, tokens, event tickets and profile links
// (ON DELETE CASCADE) and clear them from attachments (SET NULL); their
// overwrites, whose target is not a foreign key, are deleted here.
func (tx *Tx) DeleteUser(ctx context.Context, id string) (map[string]int64, error) {
	db := tx.with(ctx)
	gone := map[string]int64{}
	for _, c := range []struct {
		name  string
		model any
		where string
	}{
		{"roles", &userRoleRow{}, "user_id = ?"},
		{"tokens", &tokenRow{}, "user_id = ?"},
		{"overwrites", &overwriteRow{}, "target_type = 'user' AND target_id = ?"},
	} {
		var n int64
		if err := db.Model(c.model).Where(c.where, id).Count(&n).Error; err != nil {
			return nil, fmt.Errorf("delete user: %w", err)
		}
		gone[c.name] = n
	}
	if err := tx.deleteOverwritesOf(ctx, model.TargetUser, id); err != nil {
		return nil, err
	}
	if err := db.Where("id = ?", id).Delete(&userRow{}).Error; err != nil {
		return nil, fmt.Errorf("delete user: %w", err)
	}
	return gone, nil
}

// touchUser moves a user's version: their representation changed.
func (tx *Tx) touchUser(ctx context.Context, userID string, now time.Time) error {
	err := tx.with(ctx).Model(&userRow{}).Where("id = ?", userID).
		Updates(map[string]any{"version": gorm.Expr("version + 1"), "updated_at": microsOf(now)}).Error
	if err != nil {
		return fmt.Errorf("touch user: %w", err)
	}
	return nil
}

// UsersByID reads the users of ids; an unknown ID is absent from the map.
func (q queries) UsersByID(ctx context.Context, ids []string) (map[string]model.User, error) {
	out := make(map[string]model.User, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	list, err := json.Marshal(ids)
	if err != nil {
		return nil, fmt.Errorf("read users: %w", err)
	}
	rows, err := q.query(ctx, "SELECT "+userColumns(q.dialect())+" FROM users u WHERE u.id IN ("+q.dialect().JSONTexts()+")", string(list))
	if err != nil {
		return nil, fmt.Errorf("read users: %w", err)
	}
	defer rows.Close()
	scan := newUserScanner()
	for rows.Next() {
		u, err := scan.scan(rows)
		if err != nil {
			return nil, fmt.Errorf("read users: %w", err)
		}
		out[u.ID] = u
	}
	if err := rows.Close(); err != nil {
		return nil, fmt.Errorf("read users: %w", err)
	}
	return out, nil
}

// TouchUsers moves the versions of users whose representation changed.
func (tx *Tx) TouchUsers(ctx context.Context, userIDs []string, now time.Time) error {
	if len(userIDs) == 0 {
		return nil
	}
	list, _ := json.Marshal(userIDs)
	_, err := tx.exec(ctx, "UPDATE users SET version = version + 1, updated_at = ? WHERE id IN ("+tx.dialect().JSONTexts()+")",
		int64(microsOf(now)), string(list))
	if err != nil {
		return fmt.Errorf("touch users: %w", err)
	}
	return nil
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

// User returns one user with their role IDs (by position descending), as
// of the request's scope: the caller's own value (a long list of role IDs
// shared and read-only, model.User.Roles), decoded afresh from the cache's
// packed users (packed.go) or read from the database.
func (s *Store) User(ctx context.Context, id string) (model.User, error) {
	return s.cache.User(ctx, id, func() (model.User, error) { return s.readUser(ctx, id) })
}

// readUser reads one user from the database: on PostgreSQL in a batch with
// the misses that arrive with it (batch.go).
func (s *Store) readUser(ctx context.Context, id string) (model.User, error) {
	if s.userBatches == nil {
		return s.queries.getUser(ctx, id)
	}
	u, ok, err := s.userBatches.Get(ctx, id)
	switch {
	case err != nil:
		return model.User{}, fmt.Errorf("read user %q: %w", id, err)
	case !ok:
		return model.User{}, apperr.NotFound("User %q does not exist.", id)
	}
	return copyUser(u), nil // the batch's value is every reader's of it
}

// GetUser returns one user with their role IDs, as the transaction sees it.
func (tx *Tx) GetUser(ctx context.Context, id string) (model.User, error) { return tx.getUser(ctx, id) }

func copyUser(u model.User) model.User {
	u.Roles = slices.Clone(u.Roles)
	return u
}

// nullTime is a nullable micros column as a time.
func nullTime(n sql.NullInt64) *time.Time {
	if !n.Valid {
		return nil
	}
	t := micros(n.Int64).time()
	return &t
}

func (q queries) getUser(ctx context.Context, id string) (model.User, error) {
	rows, err := q.query(ctx, q.users().get, id)
	if err != nil {
		return model.User{}, fmt.Errorf("read user %q: %w", id, err)
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return model.User{}, fmt.Errorf("read user %q: %w", id, err)
		}
		return model.User{}, apperr.NotFound("User %q does not exist.", id)
	}
	u, err := newUserScanner().scan(rows)
	if err != nil {
		return model.User{}, fmt.Errorf("read user %q: %w", id, err)
	}
	return u, rows.Close()
}

// getUsers reads the users of ids (distinct) in one statement, by ID.
func (q queries) getUsers(ctx context.Context, ids []string) (map[string]model.User, error) {
	rows, err := q.query(ctx, q.users().getMany, ids)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make(map[string]model.User, len(ids))
	scan := newUserScanner()
	for rows.Next() {
		u, err := scan.scan(rows)
		if err != nil {
			return nil, err
		}
		out[u.ID] = u
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return nil, err // a user left out would read as missing
	}
	return out, nil
}

// userColumns are what a user's representation needs, with their role IDs
// by position descending as one comma-separated column (a role ID never
// holds a comma).
func userColumns(d sqldb.Dialect) string {
	roles := "(SELECT " + d.GroupConcatOrdered("ur.role_id", "r.position DESC") +
		" FROM user_roles ur JOIN roles r ON r.id = ur.role_id WHERE ur.user_id = u.id)"
	if d.Name() != "postgres" {
		// The ordered aggregate costs SQLite a join and a sorter per
		// user; a user with no role (most of a community) skips both after
		// one probe of user_roles' primary key. PostgreSQL gets the
		// aggregate alone, a probe of that key as well: it costs an
		// EXISTS for the rows the scan under a page's LIMIT could give
		// (every user), and for that many it reads the EXISTS as a hash of
		// every membership, built for each page.
		roles = "CASE WHEN EXISTS (SELECT 1 FROM user_roles x WHERE x.user_id = u.id) THEN " + roles + " END"
	}
	return "u.id, u.username, u.display_name, u.email, u.status, u.is_owner, u.timeout_until, u.version, u.created_at, u.updated_at, " + roles
}

// userScanner reads rows of userColumns. One serves every row of a
// statement: its destinations escape to the heap once, not once per row,
// and the timestamps are scanned as plain int64s, which database/sql
// assigns directly instead of converting them through reflection.
type userScanner struct {
	u                model.User
	created, updated int64
	timeout          sql.NullInt64
	roles            sql.NullString
	dest             []any
}

func newUserScanner() *userScanner {
	s := &userScanner{}
	s.dest = []any{&s.u.ID, &s.u.Username, &s.u.DisplayName, &s.u.Email, &s.u.Status,
		&s.u.IsOwner, &s.timeout, &s.u.Version, &s.created, &s.updated, &s.roles}
	return s
}

// scan reads the current row. Every destination is assigned by each scan
// (NULL included), so nothing of the row before carries over.
func (s *userScanner) scan(rows *sql.Rows) (model.User, error) {
	if err := rows.Scan(s.dest...); err != nil {
		return model.User{}, err
	}
	u := s.u
	u.CreatedAt, u.UpdatedAt = micros(s.created).time(), micros(s.updated).time()
	u.TimeoutUntil = nullTime(s.timeout)
	u.Roles = splitIDs(s.roles.String)
	return u, nil
}

// splitIDs splits a comma-separated list of IDs ("" is none).
func splitIDs(s string) []string {
	if s == "" {
		return []string{}
	}
	return strings.Split(s, ",")
}

// userStatements are the text of a user's hot statements (queries.go) in
// one dialect.
type userStatements struct {
	get     string
	getMany string // PostgreSQL: by an array of IDs
}

// userInsert is a user's INSERT, the same in both dialects.
var userInsert = sqldb.NewRowInsert("INSERT INTO users (id, username, username_key, display_name, display_name_key, email, email_key, "+
	"status, is_owner, version, created_at, updated_at) VALUES", "(?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?)")

var userSQL = sqldb.ByDialect(func(d sqldb.Dialect) userStatements {
	return userStatements{
		get:     "SELECT " + userColumns(d) + " FROM users u WHERE u.id = ?",
		getMany: "SELECT " + userColumns(d) + " FROM users u WHERE u.id = ANY(?)",
	}
})

func (q queries) users() userStatements { return userSQL[q.dialect().Name()] }
