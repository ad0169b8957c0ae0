package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"gorm.io/gorm"

	"github.com/guildhall/guildhall/internal/apperr"
	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/permissions"
)

// queries are the reads, shared by the store (read pool) and a write
// transaction (its own handle, so a transaction never waits on itself).
type queries struct {
	db      *gorm.DB
	dialect dialect
	stmts   *stmtCache      // prepared statements of the pool db belongs to
	sqlTx   *sql.Tx         // set inside a write transaction
	txCtx   context.Context // set inside a write transaction: see Tx
	counter *atomic.Int64   // QueryCount
	cache   *readCache      // the read pool's only (readcache.go)
}

// ctx is the context statements run under. Inside a write transaction it is
// the batch's, never the request's: a request that goes away must not
// interrupt a statement of a transaction other requests share (SQLite rolls
// back the whole transaction when a statement is interrupted).
//
// Outside transactions, SQLite statements run without the request's
// cancellation: with a cancellable context, database/sql and the SQLite
// driver each start a goroutine per statement to watch it (a sixth of a
// cheap request), and a local, indexed, bounded SQLite read has nothing to
// cancel. PostgreSQL statements keep the request's context: a database that
// hangs must not hold the request.
func (q queries) ctx(ctx context.Context) context.Context {
	if q.txCtx != nil {
		return q.txCtx
	}
	if q.dialect.name() == "sqlite" {
		return context.WithoutCancel(ctx)
	}
	return ctx
}

func (q queries) with(ctx context.Context) *gorm.DB { return q.db.WithContext(q.ctx(ctx)) }

// Settings are the singleton row: global permissions and versions.
type Settings struct {
	Global        permissions.Set
	GlobalVersion int64
	AuthVersion   int64
}

// Settings reads the singleton row.
func (q queries) Settings(ctx context.Context) (Settings, error) {
	rows, err := q.query(ctx, "SELECT global_permissions, global_version, auth_version FROM settings WHERE id = 1")
	if err != nil {
		return Settings{}, fmt.Errorf("read settings: %w", err)
	}
	defer rows.Close()
	if !rows.Next() {
		return Settings{}, fmt.Errorf("read settings: %w", errors.Join(errNoSettings, rows.Err()))
	}
	var st Settings
	var global int64
	if err := rows.Scan(&global, &st.GlobalVersion, &st.AuthVersion); err != nil {
		return Settings{}, fmt.Errorf("read settings: %w", err)
	}
	st.Global = permissions.Set(global) & permissions.All
	return st, rows.Close()
}

// GetChannel returns one channel.
func (q queries) GetChannel(ctx context.Context, id string) (model.Channel, error) {
	c, _, err := q.ReadChannel(ctx, id)
	return c, err
}

// ReadChannel is GetChannel with the versions it was read at (see ReadUser).
func (q queries) ReadChannel(ctx context.Context, id string) (model.Channel, Versions, error) {
	return cachedWithVersions(ctx, q, cacheKey{kind: cacheChannel, a: id}, func(c *model.Channel) int { return 256 + len(c.Name) },
		func() (model.Channel, Versions, error) { return q.readChannel(ctx, id) })
}

func (q queries) readChannel(ctx context.Context, id string) (model.Channel, Versions, error) {
	rows, err := q.query(ctx, "SELECT "+versionColumns+", "+channelColumns+" FROM channels c WHERE c.id = ?", id)
	if err != nil {
		return model.Channel{}, Versions{}, fmt.Errorf("read channel %q: %w", id, err)
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return model.Channel{}, Versions{}, fmt.Errorf("read channel %q: %w", id, err)
		}
		return model.Channel{}, Versions{}, apperr.NotFound("Channel %q does not exist.", id)
	}
	var v Versions
	var created, updated micros
	var c model.Channel
	if err := rows.Scan(&v.Auth, &v.Credentials, &c.ID, &c.Name, &c.Topic, &c.Version, &created, &updated); err != nil {
		return model.Channel{}, Versions{}, fmt.Errorf("read channel %q: %w", id, err)
	}
	c.CreatedAt, c.UpdatedAt = created.time(), updated.time()
	return c, v, rows.Close()
}

const channelColumns = "c.id, c.name, c.topic, c.version, c.created_at, c.updated_at"

// OverwritesVersion is the version of a channel's overwrite list.
func (q queries) OverwritesVersion(ctx context.Context, channelID string) (int64, error) {
	var r channelRow
	if err := q.with(ctx).Select("overwrites_version").Where("id = ?", channelID).Take(&r).Error; err != nil {
		return 0, notFound(err, "Channel %q does not exist.", channelID)
	}
	return r.OverwritesVersion, nil
}

// ListChannels returns up to limit channels with IDs after the given one,
// and whether more follow.
func (q queries) ListChannels(ctx context.Context, after string, limit int) ([]model.Channel, bool, error) {
	var rows []channelRow
	if err := q.with(ctx).Where("id > ?", after).Order("id").Limit(limit + 1).Find(&rows).Error; err != nil {
		return nil, false, fmt.Errorf("list channels: %w", err)
	}
	more := len(rows) > limit
	if more {
		rows = rows[:limit]
	}
	out := make([]model.Channel, len(rows))
	for i, r := range rows {
		out[i] = r.model()
	}
	return out, more, nil
}

// ChannelOverwrites lists a channel's overwrites (unordered).
func (q queries) ChannelOverwrites(ctx context.Context, channelID string) ([]model.Overwrite, error) {
	rows, err := q.query(ctx, q.sql().overwrites, channelID)
	if err != nil {
		return nil, fmt.Errorf("list overwrites: %w", err)
	}
	defer rows.Close()
	var out []model.Overwrite
	var o overwriteScan
	for rows.Next() {
		if err := rows.Scan(o.dest()...); err != nil {
			return nil, fmt.Errorf("list overwrites: %w", err)
		}
		out = append(out, o.model(channelID))
	}
	if err := rows.Close(); err != nil {
		return nil, fmt.Errorf("list overwrites: %w", err)
	}
	return out, nil
}

// OverwriteList is a channel's overwrites as the API lists them, with the
// list's version and the versions it was read at (see ReadUser).
type OverwriteList struct {
	Version  int64
	Items    []model.Overwrite
	Versions Versions
}

// ReadOverwrites reads a channel's overwrite list in one statement: the
// versions, the list's version and the overwrites (unordered). Its Items
// are shared with the read cache: callers must not change them (sort a
// copy).
func (q queries) ReadOverwrites(ctx context.Context, channelID string) (OverwriteList, error) {
	return cachedRead(ctx, q, cacheKey{kind: cacheOverwrites, a: channelID},
		func(l OverwriteList) int { return 128 + 96*len(l.Items) },
		func() (OverwriteList, error) { return q.readOverwrites(ctx, channelID) })
}

func (q queries) readOverwrites(ctx context.Context, channelID string) (OverwriteList, error) {
	rows, err := q.query(ctx, q.sql().readOverwrites, channelID)
	if err != nil {
		return OverwriteList{}, fmt.Errorf("read overwrites of %q: %w", channelID, err)
	}
	defer rows.Close()
	var l OverwriteList
	var o overwriteScan
	dest := append([]any{&l.Versions.Auth, &l.Versions.Credentials, &l.Version}, o.dest()...)
	found := false
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return OverwriteList{}, fmt.Errorf("read overwrites of %q: %w", channelID, err)
		}
		found = true
		if o.targetType.Valid {
			l.Items = append(l.Items, o.model(channelID))
		}
	}
	if err := rows.Close(); err != nil {
		return OverwriteList{}, fmt.Errorf("read overwrites of %q: %w", channelID, err)
	}
	if !found {
		return OverwriteList{}, apperr.NotFound("Channel %q does not exist.", channelID)
	}
	if l.Items == nil {
		l.Items = []model.Overwrite{}
	}
	return l, nil
}

// overwriteScan reads the overwrite columns (NULL on the row of a channel
// without overwrites).
type overwriteScan struct {
	targetType, targetID sql.NullString
	allow, deny          sql.NullInt64
}

func (o *overwriteScan) dest() []any { return []any{&o.targetType, &o.targetID, &o.allow, &o.deny} }

func (o *overwriteScan) model(channelID string) model.Overwrite {
	return model.Overwrite{ChannelID: channelID, TargetType: o.targetType.String, TargetID: o.targetID.String,
		Allow: permissions.Set(o.allow.Int64) & permissions.All, Deny: permissions.Set(o.deny.Int64) & permissions.All}
}

// GetRole returns one role.
func (q queries) GetRole(ctx context.Context, id string) (model.Role, error) {
	var r roleRow
	if err := q.with(ctx).Where("id = ?", id).Take(&r).Error; err != nil {
		return model.Role{}, notFound(err, "Role %q does not exist.", id)
	}
	return r.model(), nil
}

// ListRoles returns every role by position descending.
func (q queries) ListRoles(ctx context.Context) ([]model.Role, error) {
	var rows []roleRow
	if err := q.with(ctx).Order("position DESC").Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("list roles: %w", err)
	}
	out := make([]model.Role, len(rows))
	for i, r := range rows {
		out[i] = r.model()
	}
	return out, nil
}

// CountRoles counts the roles.
func (q queries) CountRoles(ctx context.Context) (int, error) {
	var n int64
	if err := q.with(ctx).Model(&roleRow{}).Count(&n).Error; err != nil {
		return 0, fmt.Errorf("count roles: %w", err)
	}
	return int(n), nil
}

// UserRoles returns a user's roles by position descending.
func (q queries) UserRoles(ctx context.Context, userID string) ([]model.Role, error) {
	var rows []roleRow
	err := q.with(ctx).Table("roles").
		Joins("JOIN user_roles ON user_roles.role_id = roles.id AND user_roles.user_id = ?", userID).
		Order("roles.position DESC").Select("roles.*").Find(&rows).Error
	if err != nil {
		return nil, fmt.Errorf("list user roles: %w", err)
	}
	out := make([]model.Role, len(rows))
	for i, r := range rows {
		out[i] = r.model()
	}
	return out, nil
}

// GetUser returns one user with their role IDs, in one statement.
func (q queries) GetUser(ctx context.Context, id string) (model.User, error) {
	u, _, err := q.ReadUser(ctx, id)
	return u, err
}

// ReadUser is GetUser with the versions the user was read at (see
// Versions): a request that reads through it learns, in the same
// statement, whether the credentials it was authenticated with are current.
func (q queries) ReadUser(ctx context.Context, id string) (model.User, Versions, error) {
	return cachedWithVersions(ctx, q, cacheKey{kind: cacheUser, a: id}, userBytes,
		func() (model.User, Versions, error) { return q.readUser(ctx, id) })
}

func (q queries) readUser(ctx context.Context, id string) (model.User, Versions, error) {
	rows, err := q.query(ctx, q.sql().getUser, id)
	if err != nil {
		return model.User{}, Versions{}, fmt.Errorf("read user %q: %w", id, err)
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return model.User{}, Versions{}, fmt.Errorf("read user %q: %w", id, err)
		}
		return model.User{}, Versions{}, apperr.NotFound("User %q does not exist.", id)
	}
	u, v, err := newUserScanner().scan(rows)
	if err != nil {
		return model.User{}, Versions{}, fmt.Errorf("read user %q: %w", id, err)
	}
	return u, v, rows.Close()
}

// userColumns are what a user's representation needs, with their role IDs
// by position descending as one comma-separated column (a role ID never
// holds a comma).
//
// The versions come with every row (scalar subqueries on the settings row).
func userColumns(d dialect) string {
	return versionColumns + ", " +
		"u.id, u.username, u.display_name, u.email, u.status, u.is_owner, u.version, u.created_at, u.updated_at, " +
		// The ordered aggregate costs SQLite a join and a sorter per user;
		// a user with no role (most of a community) skips both after one
		// probe of user_roles' primary key.
		"CASE WHEN EXISTS (SELECT 1 FROM user_roles x WHERE x.user_id = u.id) THEN (SELECT " +
		d.groupConcatOrdered("ur.role_id", "r.position DESC") +
		" FROM user_roles ur JOIN roles r ON r.id = ur.role_id WHERE ur.user_id = u.id) END"
}

// fromUsers is the FROM clause userColumns needs.
const fromUsers = " FROM users u"

// versions reads the versions from the settings row, by scalar subqueries
// (uncorrelated: evaluated once per statement). Joining settings instead
// costs SQLite 3.54 more than the rest of a point read (a user read by key:
// 2.9 µs with these subqueries, 7.3 µs joined).
const versions = "(SELECT auth_version FROM settings WHERE id = 1), (SELECT credentials_version FROM settings WHERE id = 1)"

// versionColumns read the versions, 0 before the store is bootstrapped.
const versionColumns = "COALESCE((SELECT auth_version FROM settings WHERE id = 1), 0), " +
	"COALESCE((SELECT credentials_version FROM settings WHERE id = 1), 0)"

// userScanner reads rows of userColumns. One serves every row of a
// statement: its destinations escape to the heap once, not once per row,
// and the timestamps are scanned as plain int64s, which database/sql
// assigns directly (reflect.Value.Set) instead of converting to micros,
// which allocated.
type userScanner struct {
	u                model.User
	v                Versions
	created, updated int64
	roles            sql.NullString
	dest             []any
}

func newUserScanner() *userScanner {
	s := &userScanner{}
	s.dest = []any{&s.v.Auth, &s.v.Credentials, &s.u.ID, &s.u.Username, &s.u.DisplayName, &s.u.Email, &s.u.Status,
		&s.u.IsOwner, &s.u.Version, &s.created, &s.updated, &s.roles}
	return s
}

// scan reads the current row. Every destination is assigned by each scan
// (NULL included), so nothing of the row before carries over.
func (s *userScanner) scan(rows *sql.Rows) (model.User, Versions, error) {
	if err := rows.Scan(s.dest...); err != nil {
		return model.User{}, Versions{}, err
	}
	u := s.u
	u.CreatedAt, u.UpdatedAt = micros(s.created).time(), micros(s.updated).time()
	u.Roles = splitIDs(s.roles.String)
	return u, s.v, nil
}

// splitIDs splits a comma-separated list of IDs ("" is none).
func splitIDs(s string) []string {
	if s == "" {
		return []string{}
	}
	return strings.Split(s, ",")
}

// PermissionSubject is what computing a user's permissions reads: whether
// the user exists, is the owner, and their role IDs (unordered); and
// whether the channel asked about (if any) exists.
type PermissionSubject struct {
	Versions      Versions // as of the read
	UserExists    bool
	IsOwner       bool
	Roles         []string
	RolesRead     bool // Roles were read (asked for, or from the read cache)
	ChannelExists bool
}

// PermissionSubject reads a user and a channel's existence in one statement
// (channelID "" asks about no channel).
//
// Without roles, it may leave Roles empty and skip reading them (a caller
// that has them cached at the credentials version the read returns); from
// the read cache they come anyway.
func (q queries) PermissionSubject(ctx context.Context, userID, channelID string, withRoles bool) (PermissionSubject, error) {
	if q.cache == nil {
		return q.permissionSubject(ctx, userID, channelID, withRoles)
	}
	// Cached, the roles cost nothing: one entry serves both kinds of caller.
	withRoles = true
	return cachedRead(ctx, q, cacheKey{kind: cacheSubject, a: userID, b: channelID},
		func(p PermissionSubject) int { return 256 + 32*len(p.Roles) },
		func() (PermissionSubject, error) { return q.permissionSubject(ctx, userID, channelID, withRoles) })
}

func (q queries) permissionSubject(ctx context.Context, userID, channelID string, withRoles bool) (PermissionSubject, error) {
	text := q.sql().permissionSubject
	if !withRoles {
		text = q.sql().permissionSubjectNoRoles
	}
	rows, err := q.query(ctx, text, channelID, userID)
	if err != nil {
		return PermissionSubject{}, fmt.Errorf("read user %q: %w", userID, err)
	}
	defer rows.Close()
	if !rows.Next() {
		return PermissionSubject{}, fmt.Errorf("read user %q: %w", userID, errors.Join(errNoSettings, rows.Err()))
	}
	var channel sql.NullInt64
	var id, roles sql.NullString
	var owner sql.NullBool
	var v Versions
	if err := rows.Scan(&v.Auth, &v.Credentials, &channel, &id, &owner, &roles); err != nil {
		return PermissionSubject{}, fmt.Errorf("read user %q: %w", userID, err)
	}
	return PermissionSubject{Versions: v, UserExists: id.Valid, IsOwner: owner.Bool, Roles: splitIDs(roles.String),
		RolesRead: withRoles, ChannelExists: channel.Valid && channelID != ""}, rows.Close()
}

// UserByUsername finds a user by username, ignoring case.
func (q queries) UserByUsername(ctx context.Context, username string) (model.User, error) {
	var r userRow
	if err := q.with(ctx).Where("username_key = ?", strings.ToLower(username)).Take(&r).Error; err != nil {
		return model.User{}, notFound(err, "User %q does not exist.", username)
	}
	return q.GetUser(ctx, r.ID)
}

// CountUsers counts the users.
func (q queries) CountUsers(ctx context.Context) (int64, error) {
	var n int64
	if err := q.with(ctx).Model(&userRow{}).Count(&n).Error; err != nil {
		return 0, fmt.Errorf("count users: %w", err)
	}
	return n, nil
}

// UserFilter selects users; the zero value selects everyone.
type UserFilter struct {
	// Prefix matches a prefix of the lower-cased username or display name
	// (and of the email when MatchEmail is set); it is lower-cased here.
	Prefix     string
	MatchEmail bool
	RoleID     string
	Status     string
}

// ListUsers returns up to limit users with IDs after the given one that pass
// the filter, in ID order, and whether more follow: one statement, role IDs
// included. Every filter is an index range: the prefix is one range per key,
// so a search costs what its matches cost, never a scan of every user.
//
// ok reports whether versions is set: it is when the page has a user.
func (q queries) ListUsers(ctx context.Context, f UserFilter, after string, limit int) (users []model.User, more bool, versions Versions, ok bool, err error) {
	key := cacheKey{kind: cacheUserPage, a: f.Prefix, b: f.RoleID, c: f.Status, d: after, n: limit, flag: f.MatchEmail}
	p, err := cachedRead(ctx, q, key, userPage.bytes, func() (userPage, error) {
		var p userPage
		var err error
		p.users, p.more, p.versions, p.ok, err = q.listUsers(ctx, f, after, limit)
		return p, err
	})
	if err != nil || q.cache == nil {
		return p.users, p.more, p.versions, p.ok, err
	}
	// The page is shared with every request that reads it; the caller may
	// change its users (a hidden email).
	return append([]model.User(nil), p.users...), p.more, p.versions, p.ok, nil
}

type userPage struct {
	users    []model.User
	more, ok bool
	versions Versions
}

func (p userPage) bytes() int {
	n := 64
	for i := range p.users {
		n += userBytes(&p.users[i])
	}
	return n
}

func (q queries) listUsers(ctx context.Context, f UserFilter, after string, limit int) (users []model.User, more bool, versions Versions, ok bool, err error) {
	// The plan is chosen here, not left to the planner's guesses (SQLite
	// has no statistics): a prefix drives the query from its index ranges,
	// else a role from its holders in ID order, else the status index, else
	// the primary key. Each combination of filters is one constant
	// statement, prepared once.
	text, args := q.sql().listUsers(f, after, limit)
	rows, err := q.query(ctx, text, args...)
	if err != nil {
		return nil, false, Versions{}, false, fmt.Errorf("list users: %w", err)
	}
	defer rows.Close()
	out := make([]model.User, 0, min(limit+1, 64))
	scan := newUserScanner()
	for rows.Next() {
		u, v, err := scan.scan(rows)
		if err != nil {
			return nil, false, Versions{}, false, fmt.Errorf("list users: %w", err)
		}
		out = append(out, u)
		versions, ok = v, true
	}
	if err := rows.Close(); err != nil {
		return nil, false, Versions{}, false, fmt.Errorf("list users: %w", err)
	}
	more = len(out) > limit
	if more {
		out = out[:limit]
	}
	return out, more, versions, ok, nil
}

// listUsers returns the statement of a page of users for the filter's shape
// (built once per shape) and its arguments.
func (h *hotSQL) listUsers(f UserFilter, after string, limit int) (string, []any) {
	shape := 0
	if f.Prefix != "" {
		shape |= 1
		if f.MatchEmail {
			shape |= 2
		}
	}
	if f.RoleID != "" {
		shape |= 4
	}
	if f.Status != "" {
		shape |= 8
	}
	args := make([]any, 0, 10)
	if f.Prefix != "" {
		lo := strings.ToLower(f.Prefix)
		hi := prefixEnd(lo)
		n := 2
		if f.MatchEmail {
			n = 3
		}
		for range n {
			args = append(args, lo, hi)
		}
		if f.Status != "" {
			args = append(args, f.Status)
		}
		if f.RoleID != "" {
			args = append(args, f.RoleID)
		}
	} else {
		if f.RoleID != "" {
			args = append(args, f.RoleID)
		}
		if f.Status != "" {
			args = append(args, f.Status)
		}
	}
	args = append(args, after, limit+1)
	if text, ok := h.listUsersByShape.Load(shape); ok {
		return text.(string), args
	}
	text := buildListUsers(h.dialect, f)
	h.listUsersByShape.Store(shape, text)
	return text, args
}

func buildListUsers(d dialect, f UserFilter) string {
	var b strings.Builder
	b.WriteString("SELECT " + userColumns(d) + fromUsers)
	order := "u.id"
	switch {
	case f.Prefix != "":
		keys := []string{"username_key", "display_name_key"}
		if f.MatchEmail {
			keys = append(keys, "email_key")
		}
		b.WriteString(" WHERE u.id IN (")
		for i, k := range keys {
			if i > 0 {
				b.WriteString(" UNION ")
			}
			b.WriteString("SELECT id FROM users WHERE " + k + " >= ? AND " + k + " < ?")
		}
		b.WriteString(")")
		if f.Status != "" {
			// "|| ''" keeps SQLite, which has no statistics to tell, from
			// preferring the status index to the prefix ranges.
			b.WriteString(" AND u.status || '' = ?")
		}
		if f.RoleID != "" {
			b.WriteString(" AND EXISTS (SELECT 1 FROM user_roles x WHERE x.user_id = u.id AND x.role_id = ?)")
		}
		b.WriteString(" AND")
	case f.RoleID != "":
		b.WriteString(" JOIN user_roles h ON h.user_id = u.id AND h.role_id = ? WHERE")
		order = "h.user_id" // the order of the role's index
		if f.Status != "" {
			b.WriteString(" u.status = ? AND")
		}
	case f.Status != "":
		b.WriteString(" WHERE u.status = ? AND")
	default:
		b.WriteString(" WHERE")
	}
	b.WriteString(" " + order + " > ? ORDER BY " + order + " LIMIT ?")
	return b.String()
}

// hotSQL is the text of the hottest statements for one dialect, built once.
type hotSQL struct {
	dialect                               dialect
	getUser, permissionSubject            string
	permissionSubjectNoRoles              string
	tokenByHash, tokenByID, credentialsOf string
	overwrites, readOverwrites            string
	listUsersByShape                      sync.Map // int -> string
}

func newHotSQL(d dialect) *hotSQL {
	token := "SELECT t.id, t.hash, t.expires_at, " + credentialColumns(d) +
		" FROM tokens t JOIN users u ON u.id = t.user_id WHERE "
	return &hotSQL{
		dialect: d,
		getUser: "SELECT " + userColumns(d) + fromUsers + " WHERE u.id = ?",
		// One row whether or not the user exists: the asked-for ID is the
		// driving row (p). No COALESCE on the versions: without a settings
		// row they are NULL, and the scan fails.
		permissionSubjectNoRoles: "SELECT " + versions + ", (SELECT 1 FROM channels WHERE id = ?), u.id, u.is_owner, NULL" +
			" FROM (SELECT CAST(? AS TEXT) AS id) p LEFT JOIN users u ON u.id = p.id",
		permissionSubject: "SELECT " + versions + ", (SELECT 1 FROM channels WHERE id = ?), u.id, u.is_owner, (SELECT " + d.groupConcat("ur.role_id") +
			" FROM user_roles ur WHERE ur.user_id = u.id) FROM (SELECT CAST(? AS TEXT) AS id) p LEFT JOIN users u ON u.id = p.id",
		overwrites: "SELECT o.target_type, o.target_id, o.allow_bits, o.deny_bits FROM overwrites o WHERE o.channel_id = ?",
		// One row for a channel without overwrites (NULL overwrite columns),
		// none for a channel that does not exist. The roles' positions, by
		// which the list is ordered, come from the authorization snapshot:
		// joining roles made PostgreSQL probe its index once per overwrite,
		// which cost more than the rest of the statement.
		readOverwrites: "SELECT " + versionColumns + ", c.overwrites_version, o.target_type, o.target_id, o.allow_bits, o.deny_bits" +
			" FROM channels c LEFT JOIN overwrites o ON o.channel_id = c.id WHERE c.id = ?",
		tokenByHash:   token + "t.hash = ?",
		tokenByID:     token + "t.id = ?",
		credentialsOf: "SELECT " + credentialColumns(d) + " FROM users u WHERE u.id = ?",
	}
}

var hotSQLs = map[string]*hotSQL{"sqlite": newHotSQL(sqliteDialect{}), "postgres": newHotSQL(postgresDialect{})}

func (q queries) sql() *hotSQL { return hotSQLs[q.dialect.name()] }

// prefixEnd is the least string greater than every string that starts with
// prefix: its last rune incremented (a rune already at the maximum is
// dropped and the one before it incremented). "" has no end: it is returned
// as the largest string there is.
func prefixEnd(prefix string) string {
	r := []rune(prefix)
	for i := len(r) - 1; i >= 0; i-- {
		switch {
		case r[i] == 0xD7FF: // skip the surrogates, which no string holds
			r[i] = 0xE000
			return string(r[:i+1])
		case r[i] < utf8.MaxRune:
			r[i]++
			return string(r[:i+1])
		}
	}
	return string(utf8.MaxRune)
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

// Credentials is what one round trip learns about a token.
type Credentials struct {
	Principal model.Principal
	TokenHash string
	Status    string
	ExpiresAt *time.Time
	// Versions are the versions as of the same read.
	Versions Versions
}

// Authenticate looks a token up by its hash and returns its user, their
// roles and the current versions, in one round trip.
func (q queries) Authenticate(ctx context.Context, tokenHash string) (Credentials, error) {
	return q.tokenCredentials(ctx, false, tokenHash)
}

// CredentialsOfToken is Authenticate for a token already authenticated, by
// its ID: requests that outlive their start (writes, event streams) use it to
// learn that their token was revoked or has expired since.
func (q queries) CredentialsOfToken(ctx context.Context, tokenID string) (Credentials, error) {
	return q.tokenCredentials(ctx, true, tokenID)
}

func credentialColumns(d dialect) string {
	return "u.id, u.status, u.is_owner, (SELECT " + d.groupConcat("ur.role_id") +
		" FROM user_roles ur WHERE ur.user_id = u.id), " + versions
}

func (q queries) tokenCredentials(ctx context.Context, byID bool, arg string) (Credentials, error) {
	text := q.sql().tokenByHash
	if byID {
		text = q.sql().tokenByID
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
	if err := rows.Scan(append([]any{&c.Principal.TokenID, &c.TokenHash, &expires}, c.scanTargets(&roles)...)...); err != nil {
		return Credentials{}, fmt.Errorf("authenticate: %w", err)
	}
	c.ExpiresAt = timePtr(expires)
	c.finish(roles)
	return c, rows.Close()
}

// scanTargets are the destinations of credentialColumns; finish completes
// what they hold.
func (c *Credentials) scanTargets(roles *sql.NullString) []any {
	return []any{&c.Principal.UserID, &c.Status, &c.Principal.IsOwner, roles, &c.Versions.Auth, &c.Versions.Credentials}
}

func (c *Credentials) finish(roles sql.NullString) {
	c.Principal.Roles = splitIDs(roles.String)
	sort.Strings(c.Principal.Roles)
}

// CredentialsOf is what Authenticate learns, for a user rather than a token
// (no token, no expiry): their status, roles and the current versions, in
// one statement. An unknown user is a 404.
func (q queries) CredentialsOf(ctx context.Context, userID string) (Credentials, error) {
	rows, err := q.query(ctx, q.sql().credentialsOf, userID)
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
	if err := rows.Scan(c.scanTargets(&roles)...); err != nil {
		return Credentials{}, fmt.Errorf("read credentials of %s: %w", userID, err)
	}
	c.finish(roles)
	return c, rows.Close()
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

// notFound turns gorm's record-not-found into a 404 with the detail given.
func notFound(err error, format string, args ...any) error {
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return apperr.NotFound(format, args...)
	}
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), err)
}
