package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"gorm.io/gorm/clause"

	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/sqldb"
)

// Statements over a list of users of any length: the list travels as one
// JSON array parameter (sqldb.Dialect.JSONTexts), so each is one constant
// statement, prepared once, whatever the list's length.

// ChangeRoleMembers gives a role to the users of add and takes it from
// those of remove, moving each changed user's version. It reports how many
// of each changed (a user of add who holds the role, or of remove who does
// not, is no change).
func (tx *Tx) ChangeRoleMembers(ctx context.Context, roleID string, add, remove []string, now time.Time) (added, removed int, err error) {
	ids := tx.dialect().JSONTexts()
	at := int64(microsOf(now))
	if len(add) > 0 {
		list, _ := json.Marshal(add)
		// Each with its username's key (schema/migration0019.go): a key
		// read here costs an index lookup, the trigger that would fill it
		// a call.
		res, err := tx.exec(ctx, "INSERT INTO user_roles (user_id, role_id, created_at, username_key) SELECT x.id, ?, ?, "+
			"COALESCE((SELECT u.username_key FROM users u WHERE u.id = x.id), '') FROM ("+
			ids+") x WHERE true ON CONFLICT DO NOTHING", roleID, at, string(list))
		if err != nil {
			return 0, 0, fmt.Errorf("assign role: %w", err)
		}
		n, _ := res.RowsAffected()
		added = int(n)
	}
	if len(remove) > 0 {
		list, _ := json.Marshal(remove)
		res, err := tx.exec(ctx, "DELETE FROM user_roles WHERE role_id = ? AND user_id IN ("+ids+")", roleID, string(list))
		if err != nil {
			return 0, 0, fmt.Errorf("remove role: %w", err)
		}
		n, _ := res.RowsAffected()
		removed = int(n)
	}
	return added, removed, nil
}

type userRoleRow struct {
	UserID    string `gorm:"primaryKey"`
	RoleID    string `gorm:"primaryKey"`
	CreatedAt micros `gorm:"autoCreateTime:false"`
}

func (userRoleRow) TableName() string { return "user_roles" }

// AddUserRole gives a user a role; it reports whether anything changed.
func (tx *Tx) AddUserRole(ctx context.Context, userID, roleID string, now time.Time) (bool, error) {
	res := tx.with(ctx).Clauses(clause.OnConflict{DoNothing: true}).Create(&userRoleRow{UserID: userID, RoleID: roleID, CreatedAt: microsOf(now)})
	if res.Error != nil {
		return false, fmt.Errorf("assign role: %w", res.Error)
	}
	if res.RowsAffected == 0 {
		return false, nil
	}
	return true, tx.touchUser(ctx, userID, now)
}

// RemoveUserRole takes a role from a user; it reports whether anything changed.
func (tx *Tx) RemoveUserRole(ctx context.Context, userID, roleID string, now time.Time) (bool, error) {
	res := tx.with(ctx).Where("user_id = ? AND role_id = ?", userID, roleID).Delete(&userRoleRow{})
	if res.Error != nil {
		return false, fmt.Errorf("remove role: %w", res.Error)
	}
	if res.RowsAffected == 0 {
		return false, nil
	}
	return true, tx.touchUser(ctx, userID, now)
}

// Holders says whose users a page of holders reads: every user (Everyone),
// or the holders of Roles, the users of Users and the owner.
type Holders struct {
	Everyone bool
	Roles    []string
	Users    []string
}

// HoldersPage returns up to n of the users h names, in the order of their
// lower-cased usernames, after the one whose key is after ("" from the
// start), as of the request's scope, role IDs included, and the key of
// each (where the next page goes on from). A page reads the users' index
// (Everyone), or each role's holders by name (user_roles_role_username),
// the users of Users and the owner (users_owner), n of each at most, never
// every user: its cost grows with the number of roles, not of users.
func (s *Store) HoldersPage(ctx context.Context, h Holders, after string, n int) (users []model.User, keys []string, err error) {
	text, args := holdersStatement(s.queries.dialect(), h, after, n)
	var key string
	users, err = s.queries.readUsers(ctx, text, args, n, []any{&key}, func(model.User) { keys = append(keys, key) })
	return users, keys, err
}

// holdersStatement is the statement of a page of HoldersPage, with the
// users' columns and each user's key, and its arguments. With roles, its
// text depends on their number alone.
func holdersStatement(d sqldb.Dialect, h Holders, after string, n int) (string, []any) {
	if h.Everyone {
		return "SELECT " + userColumns(d) + ", u.username_key FROM users u WHERE u.username_key > ? ORDER BY u.username_key LIMIT " + d.Limit("?"),
			[]any{after, n}
	}
	// Each role's first n holders after the position, the users' first
	// n, and the owner: the page's users are among them (a user among the
	// page's first n is among the first n of each role they hold). Their
	// union drives the join, so that no plan walks the users' index
	// instead: the page's n are chosen before any user is read, so that
	// every plan reads those n by ID.
	var b strings.Builder
	var args []any
	b.WriteString("SELECT " + userColumns(d) + ", m.k FROM (SELECT m0.id, m0.k FROM (")
	for _, r := range h.Roles {
		b.WriteString("SELECT * FROM (SELECT h.user_id AS id, h.username_key AS k FROM user_roles h WHERE h.role_id = ? AND h.username_key > ? " +
			"ORDER BY h.username_key LIMIT " + d.Limit("?") + ") r" + strconv.Itoa(len(args)) + " UNION ")
		args = append(args, r, after, n)
	}
	// The users by ID: on PostgreSQL an array, which its planner reads by
	// the primary key whatever it guesses of the users' keys (a list
	// joined as a set it may hash against a scan of every user).
	var list any = h.Users
	byID := "c.id = ANY(?)"
	if h.Users == nil {
		list = []string{}
	}
	if d.Name() != "postgres" {
		text, _ := json.Marshal(list)
		list, byID = string(text), "c.id IN ("+d.JSONTexts()+")"
	}
	b.WriteString("SELECT * FROM (SELECT c.id, c.username_key AS k FROM users c WHERE " + byID + " AND c.username_key > ? " +
		"ORDER BY c.username_key LIMIT " + d.Limit("?") + ") x UNION " +
		"SELECT o.id, o.username_key AS k FROM users o WHERE o.is_owner AND o.username_key > ?" +
		") m0 ORDER BY m0.k LIMIT " + d.Limit("?") + ") m CROSS JOIN users u WHERE u.id = m.id ORDER BY m.k")
	args = append(args, list, after, n, after, n)
	return b.String(), args
}
