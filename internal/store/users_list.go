package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/guildhall/guildhall/internal/fresh"
	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/sqldb"
)

// UserFilter selects users; the zero value selects everyone.
type UserFilter struct {
	// Prefix matches a prefix of the lower-cased username or display name
	// (and of the email when MatchEmail is set); it is lower-cased here.
	Prefix     string
	MatchEmail bool
	RoleID     string
	Status     string
}

// ListUsers returns up to limit users after the position after that pass
// the filter, and the position to go on from when more may follow ("" when
// none do), as of the request's scope, role IDs included. A page reads a
// bounded number of index entries, never a scan of every user:
//
//   - Without a prefix, users are in ID order and a position is the last
//     ID; a filter is an index range (the role's holders, the status
//     index): one statement. A role and a status: the holders' range, the
//     status checked on each (listHoldersByStatus), bounded as a search.
//   - With a prefix, users are in the order of the key they match it by
//     (lower-cased username, display name, or email when MatchEmail is
//     set; a user matching by two keys is listed once, by the least), then
//     by ID, and a position is that key and the ID. Each key's index range
//     is read from the position on, and the ranges are merged
//     (searchUsers): a page reads its own users, plus the entries it
//     passes over (a user's other keys, users the role and status filters
//     leave out), in one statement unless many in a row are passed over,
//     and at most maxSearchRead entries of each range: there it stops,
//     short or even empty where few were kept, with the position it
//     reached. Where the cache keeps the users the entries are of, the
//     statement reads the entries alone (searchKept).
//
// A position is the store's own; callers pass back what it returned.
func (s *Store) ListUsers(ctx context.Context, f UserFilter, after string, limit int) ([]model.User, string, error) {
	key := fresh.Key{Kind: fresh.UserPage, A: f.Prefix, B: f.RoleID, C: f.Status, D: after, N: limit, Flag: f.MatchEmail}
	return s.cache.Page(ctx, key, func() ([]model.User, string, error) {
		q := s.queries
		if f.Prefix != "" {
			q = s.searches // PostgreSQL: generic plans (sqldb.DB.Searches)
			users, next, err := s.searchKept(ctx, q, f, after, limit)
			if err == nil {
				s.cache.NoteKeptSearch()
			}
			if !errors.Is(err, errNotKept) {
				return users, next, err
			}
		}
		return q.listUsers(ctx, f, after, limit)
	})
}

func (q queries) listUsers(ctx context.Context, f UserFilter, after string, limit int) ([]model.User, string, error) {
	if f.Prefix != "" {
		return q.searchUsers(ctx, f, after, limit)
	}
	// The plan is chosen here, not left to the planner's guesses (SQLite
	// has no statistics): a role drives the query from its holders in ID
	// order, else the status index, else the primary key. Each combination
	// of filters is one constant statement, prepared once.
	if f.RoleID != "" && f.Status != "" {
		return q.listHoldersByStatus(ctx, f, after, limit)
	}
	text, args := q.lists().listUsers(f, "", after, limit+1)
	out, err := q.readUsers(ctx, text, args, limit+1, nil, nil)
	if err != nil || len(out) <= limit {
		return out, "", err
	}
	return out[:limit], out[limit-1].ID, nil
}

// listHoldersByStatus reads a page of a role's holders with a status. The
// holders' index gives their order, and the status is checked on each
// holder read (filteredPage): where a role is held widely and the status
// is rare, the page ends short, even empty, with the last holder read as
// its position.
func (q queries) listHoldersByStatus(ctx context.Context, f UserFilter, after string, limit int) ([]model.User, string, error) {
	return filteredPage(limit, maxSearchRead, after, func(u model.User) string { return u.ID },
		func(after string, n int) ([]model.User, []bool, error) {
			text, args := q.lists().listUsers(f, "", after, n)
			var passes []bool
			var p bool
			users, err := q.readUsers(ctx, text, args, n, []any{&p}, func(model.User) { passes = append(passes, p) })
			return users, passes, err
		})
}

// errNotKept says that a search's entries are of users the cache does not
// keep as the entries found them: the page is read with its users.
var errNotKept = errors.New("a search's users are not kept")

// searchKept reads a page of a prefix search whose users are kept: the
// database gives each round's entries alone (IDs, keys and versions: the
// keys' indexes and the rows they point to), and the packed users give
// the users, each at the version its entry was read with. A user's version
// moves with everything their representation shows (their row, their
// roles, the order of their roles), so the page is the database's at the
// moment its statement read, as searchUsers would have read it, without
// reading, scanning and decoding every user's columns and roles. Where
// one entry's user is not kept at its version (never read, given way,
// changed since), it returns errNotKept.
func (s *Store) searchKept(ctx context.Context, q queries, f UserFilter, after string, limit int) ([]model.User, string, error) {
	return searchPage(f, after, limit, func(at searchPos, want int) ([]searchEntry, []model.User, error) {
		text, args := q.lists().searchEntries(f, at.key, at.id, want)
		rows, err := q.query(ctx, text, args...)
		if err != nil {
			return nil, nil, fmt.Errorf("list users: %w", err)
		}
		defer rows.Close()
		entries := make([]searchEntry, 0, min(want, 64))
		var ids []string
		var versions []int64
		var e searchEntry
		var v int64
		for rows.Next() {
			if err := rows.Scan(&e.pos.id, &e.pos.key, &e.s, &v); err != nil {
				return nil, nil, fmt.Errorf("list users: %w", err)
			}
			entries = append(entries, e)
			ids = append(ids, e.pos.id)
			versions = append(versions, v)
		}
		if err := errors.Join(rows.Err(), rows.Close()); err != nil {
			return nil, nil, fmt.Errorf("list users: %w", err)
		}
		users, ok := s.cache.KeptUsers(ids, versions)
		if !ok {
			return nil, nil, errNotKept
		}
		for i, u := range users {
			e := &entries[i]
			e.username, e.display = strings.ToLower(u.Username), strings.ToLower(u.DisplayName)
			if u.Email != nil {
				e.email = sql.NullString{String: strings.ToLower(*u.Email), Valid: true}
			}
			// The keys are the names lower-cased as a write stores them;
			// a row whose key says otherwise (written by other means)
			// is read as the database has it.
			if [3]string{e.username, e.display, e.email.String}[e.s] != e.pos.key {
				return nil, nil, errNotKept
			}
			e.passes = (f.Status == "" || u.Status == f.Status) && (f.RoleID == "" || slices.Contains(u.Roles, f.RoleID))
		}
		return entries, users, nil
	})
}

// searchUsers reads a page of a prefix search in the database: each
// round's entries with their users, in one statement (searchPage).
func (q queries) searchUsers(ctx context.Context, f UserFilter, after string, limit int) ([]model.User, string, error) {
	nkeys := len(f.keys())
	return searchPage(f, after, limit, func(at searchPos, want int) ([]searchEntry, []model.User, error) {
		text, args := q.lists().listUsers(f, at.key, at.id, want)
		var entries []searchEntry
		var e searchEntry
		users, err := q.readUsers(ctx, text, args, nkeys*want,
			[]any{&e.pos.key, &e.s, &e.username, &e.display, &e.email, &e.passes},
			func(u model.User) {
				e.pos.id = u.ID
				entries = append(entries, e)
			})
		return entries, users, err
	})
}

// searchRound reads the next entries of every key's range of a search from
// at on, want of each, in the search's order, and the users they are of.
type searchRound func(at searchPos, want int) ([]searchEntry, []model.User, error)

// searchPage reads a page of a prefix search (ListUsers says in what
// order). Each round reads the next entries of every key's range (limit+1,
// then twice, four times as many … while the page is unfinished), merged in
// key order, and keeps, of those it has read every entry before, the ones
// that list their user and pass the filters: the user's least matching
// key. An entry passed over was listed (or will be) at its user's lesser
// key, so a page reads its own users, plus the other keys of users near it
// in the order; more rounds only where many entries in a row are passed
// over, and at most maxSearchRead entries of each range a page.
func searchPage(f UserFilter, after string, limit int, read searchRound) ([]model.User, string, error) {
	lo := strings.ToLower(f.Prefix)
	at := searchPos{key: lo}
	if after != "" {
		i := strings.LastIndexByte(after, 0)
		if i < 0 {
			return nil, "", fmt.Errorf("list users: a search's position without its key: %q", after)
		}
		at = searchPos{key: after[:i], id: after[i+1:]}
	}
	out := make([]model.User, 0, min(limit+1, 64))
	var outPos []searchPos
	nkeys := len(f.keys())
	grow := 1  // doubles after each round that leaves the page unfinished
	asked := 0 // entries of each key's range the page has asked for
	for len(out) <= limit {
		if asked == maxSearchRead {
			// The page's bound: what it found, and its place, where the
			// next page goes on (a short page is not the end).
			return out, at.key + "\x00" + at.id, nil
		}
		want := min((limit+1)*grow, maxSearchRead-asked)
		asked += want
		entries, users, err := read(at, want)
		if err != nil {
			return nil, "", err
		}
		// Every entry up to the least of the last entries of the ranges
		// that filled their share has been read, of every range.
		horizon, full := searchPos{}, false
		var last [3]searchPos
		var count [3]int
		for _, e := range entries {
			last[e.s] = e.pos
			count[e.s]++
		}
		for s := range nkeys {
			if count[s] == want && (!full || last[s].less(horizon)) {
				horizon, full = last[s], true
			}
		}
		from := at
		for i, e := range entries {
			if full && horizon.less(e.pos) {
				break
			}
			at = e.pos
			if e.passes && e.listed(lo, f.MatchEmail) {
				out = append(out, users[i])
				outPos = append(outPos, e.pos)
			}
		}
		if !full {
			break // every range read to its end
		}
		if at == from {
			// Every range's order is the store's string order (the keys
			// and IDs compare byte by byte on both databases), so the
			// horizon is always past the position. Were it not, the next
			// round would read the same entries again.
			return nil, "", fmt.Errorf("list users: a search made no progress at %q", at.key)
		}
		grow *= 2
	}
	if len(out) <= limit {
		return out, "", nil
	}
	p := outPos[limit-1]
	return out[:limit], p.key + "\x00" + p.id, nil
}

// maxSearchRead bounds the entries a page of a search reads of each key's
// range, over all its rounds (and the holders a page of a role's holders
// with a status reads): where the filters pass few users, or many
// entries in a row are passed over, a page ends short (even empty) with a
// position to go on from, rather than reading a range to its end.
const maxSearchRead = 1000

// searchPos is a place in a search's order: a key, then an ID.
type searchPos struct{ key, id string }

func (p searchPos) less(o searchPos) bool {
	return p.key < o.key || p.key == o.key && p.id < o.id
}

// searchEntry is a row of a search's read: a user's entry in one key's
// range (s, the index of the key in searchKeys), the user's keys, and
// whether the user passes the search's other filters.
type searchEntry struct {
	pos               searchPos
	s                 int
	username, display string
	email             sql.NullString
	passes            bool
}

// listed says whether e is the entry its user is listed by: the least of
// the user's keys that start with the prefix lo, the earlier key of two
// equal ones.
func (e searchEntry) listed(lo string, matchEmail bool) bool {
	keys := [3]string{e.username, e.display, e.email.String}
	n := 2
	if matchEmail && e.email.Valid {
		n = 3
	}
	for s := range n {
		if s == e.s || !strings.HasPrefix(keys[s], lo) {
			continue
		}
		if keys[s] < e.pos.key || keys[s] == e.pos.key && s < e.s {
			return false
		}
	}
	return true
}

// readUsers runs a statement of userColumns and returns its users, at most
// n. Columns after userColumns are scanned into extra, and row, when set,
// runs after each row is scanned (to keep what extra holds).
func (q queries) readUsers(ctx context.Context, text string, args []any, n int, extra []any, row func(model.User)) ([]model.User, error) {
	rows, err := q.query(ctx, text, args...)
	if err != nil {
		return nil, fmt.Errorf("list users: %w", err)
	}
	defer rows.Close()
	out := make([]model.User, 0, min(n, 64))
	scan := newUserScanner()
	scan.dest = append(scan.dest, extra...)
	for rows.Next() {
		u, err := scan.scan(rows)
		if err != nil {
			return nil, fmt.Errorf("list users: %w", err)
		}
		out = append(out, u)
		if row != nil {
			row(u)
		}
	}
	// Rows that end on an error (a deadline, a connection lost) close
	// themselves: the error is Err's, not Close's.
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return nil, fmt.Errorf("list users: %w", err)
	}
	return out, nil
}

// listUsers returns the statement of a page of users for the filter's shape
// (built once per shape) and its arguments: n rows (of each key's range,
// for a search) from the position on (atKey is a search's).
func (h *listSQL) listUsers(f UserFilter, atKey, atID string, n int) (string, []any) {
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
	return h.statement(f, shape, buildListUsers, atKey, atID, n)
}

// searchEntries returns the statement of a search's entries from the
// position on (buildSearchEntries), n of each key's range, and its
// arguments.
func (h *listSQL) searchEntries(f UserFilter, atKey, atID string, n int) (string, []any) {
	shape := 16 | 1 // the filters are not the statement's
	if f.MatchEmail {
		shape |= 2
	}
	return h.statement(f, shape, buildSearchEntries, atKey, atID, n)
}

// statement returns the statement of a shape (built once) and its
// arguments.
func (h *listSQL) statement(f UserFilter, shape int, build func(sqldb.Dialect, UserFilter) (string, []slot),
	atKey, atID string, n int) (string, []any) {
	st, ok := h.byShape.Load(shape)
	if !ok {
		text, slots := build(h.dialect, f)
		st, _ = h.byShape.LoadOrStore(shape, listStatement{text, slots})
	}
	ls := st.(listStatement)
	hi := ""
	if f.Prefix != "" {
		hi = prefixEnd(strings.ToLower(f.Prefix))
	}
	args := make([]any, len(ls.slots))
	for i, sl := range ls.slots {
		switch sl {
		case slotHi:
			args[i] = hi
		case slotAtKey:
			args[i] = atKey
		case slotAtID:
			args[i] = atID
		case slotStatus:
			args[i] = f.Status
		case slotRole:
			args[i] = f.RoleID
		case slotLimit:
			args[i] = n
		}
	}
	return ls.text, args
}

// listStatement is a page of users' statement for one shape of filter, and
// what each of its parameters is.
type listStatement struct {
	text  string
	slots []slot
}

type slot uint8

const (
	slotHi     slot = iota // prefixEnd of the prefix, lower-cased
	slotAtKey              // the position's key (a search's first page: the prefix)
	slotAtID               // the position's ID ("" on a first page)
	slotStatus             // the status filter
	slotRole               // the role filter
	slotLimit              // how many rows (of each key's range)
)

// searchKeys are the keys a prefix matches, in the order that breaks a tie
// between two keys of one user: a user is listed by the least key that
// matches, the earlier of two equal ones.
var searchKeys = []string{"username_key", "display_name_key", "email_key"}

// keys are the keys f's prefix matches.
func (f UserFilter) keys() []string {
	if f.MatchEmail {
		return searchKeys
	}
	return searchKeys[:2]
}

func buildListUsers(d sqldb.Dialect, f UserFilter) (string, []slot) {
	var b strings.Builder
	var slots []slot
	arg := func(sl slot) string {
		slots = append(slots, sl)
		return "?"
	}
	if f.Prefix != "" {
		// The users of each key's first entries (every match of the key,
		// also those listed by a lesser key or that the filters leave out:
		// searchPage passes over them), in key order. The keys come along:
		// they say which entry of a user is the one listed. The filters are
		// a column, not a condition of the ranges: a LIMIT then bounds what
		// a range reads, where a condition few rows pass would read the
		// whole range.
		b.WriteString("SELECT " + userColumns(d) + ", m.k, m.s, u.username_key, u.display_name_key, u.email_key, ")
		var passes []string
		if f.Status != "" {
			passes = append(passes, "u.status = "+arg(slotStatus))
		}
		if f.RoleID != "" {
			passes = append(passes, "EXISTS (SELECT 1 FROM user_roles x WHERE x.user_id = u.id AND x.role_id = "+arg(slotRole)+")")
		}
		if len(passes) == 0 {
			passes = append(passes, "1 = 1")
		}
		b.WriteString("(" + strings.Join(passes, " AND ") + ") FROM (")
		writeSearchRanges(&b, d, f, false, arg)
		b.WriteString(") m JOIN users u ON u.id = m.id ORDER BY m.k, " + d.Bytewise("m.id") + ", m.s")
		return b.String(), slots
	}
	b.WriteString("SELECT " + userColumns(d))
	if f.RoleID != "" && f.Status != "" {
		// A column, not a condition: the LIMIT bounds the holders read
		// (listHoldersByStatus).
		b.WriteString(", u.status = " + arg(slotStatus))
	}
	b.WriteString(" FROM users u")
	order := "u.id"
	switch {
	case f.RoleID != "":
		b.WriteString(" JOIN user_roles h ON h.user_id = u.id AND h.role_id = " + arg(slotRole) + " WHERE")
		order = "h.user_id" // the order of the role's index
	case f.Status != "":
		b.WriteString(" WHERE u.status = " + arg(slotStatus) + " AND")
	default:
		b.WriteString(" WHERE")
	}
	b.WriteString(" " + order + " > " + arg(slotAtID) + " ORDER BY " + order + " LIMIT " + d.Limit(arg(slotLimit)))
	return b.String(), slots
}

// buildSearchEntries is the statement of a search's entries alone: each
// key's range from the position on, its first entries as IDs, keys and
// versions, in the search's order (searchKept): of each entry's user only
// the row's ID and version, no other column and no roles.
func buildSearchEntries(d sqldb.Dialect, f UserFilter) (string, []slot) {
	var b strings.Builder
	var slots []slot
	arg := func(sl slot) string {
		slots = append(slots, sl)
		return "?"
	}
	b.WriteString("SELECT m.id, m.k, m.s, m.v FROM (")
	writeSearchRanges(&b, d, f, true, arg)
	b.WriteString(") m ORDER BY m.k, " + d.Bytewise("m.id") + ", m.s")
	return b.String(), slots
}

// writeSearchRanges writes each of f's keys' index range from the position
// on, its first entries (ID, key as k, the key's index in searchKeys as s,
// and with versions the user's version as v), one after the other.
func writeSearchRanges(b *strings.Builder, d sqldb.Dialect, f UserFilter, versions bool, arg func(slot) string) {
	v := ""
	if versions {
		v = ", c.version AS v"
	}
	for i, k := range f.keys() {
		if i > 0 {
			b.WriteString(" UNION ALL ")
		}
		b.WriteString("SELECT * FROM (SELECT c.id, c." + k + " AS k, " + strconv.Itoa(i) + " AS s" + v + " FROM users c WHERE ")
		order := "c." + k
		id := d.Bytewise("c.id")
		if k == "display_name_key" {
			// Display names repeat: the index holds (key, id), and the
			// range starts right after the position.
			b.WriteString("(c." + k + ", " + id + ") > (" + arg(slotAtKey) + ", " + arg(slotAtID) + ")")
			order += ", " + id
		} else {
			// Unique: at most one row has the position's key.
			b.WriteString("c." + k + " >= " + arg(slotAtKey) + " AND (c." + k + " > " + arg(slotAtKey) + " OR " + id + " > " + arg(slotAtID) + ")")
		}
		b.WriteString(" AND c." + k + " < " + arg(slotHi))
		b.WriteString(" ORDER BY " + order + " LIMIT " + d.Limit(arg(slotLimit)) + ") s" + strconv.Itoa(i))
	}
}

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

// listSQL is the text of the pages' statements in one dialect, built once
// per shape of filter.
type listSQL struct {
	dialect sqldb.Dialect
	byShape sync.Map // int -> listStatement
}

var listSQLs = sqldb.ByDialect(func(d sqldb.Dialect) *listSQL { return &listSQL{dialect: d} })

func (q queries) lists() *listSQL { return listSQLs[q.dialect().Name()] }
