package sqldb

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/mattn/go-sqlite3"

	"github.com/guildhall/guildhall/internal/apperr"
)

// Classify turns the errors that say "the database does not answer" into
// apperr.ErrUnavailable (503; a write whose outcome is unknown says so) and
// those that say "the disk is full" into apperr.ErrInsufficientStorage
// (507); every other error comes back as it was. It also remembers the
// last full disk, for Writable.
func (db *DB) Classify(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := apperr.As(err); ok {
		return err
	}
	switch {
	case diskFull(err):
		db.faults.lastFull.Store(time.Now().UnixNano())
		return apperr.InsufficientStorage(err)
	case errors.Is(err, ErrOutcomeUnknown):
		return apperr.UnavailableOutcomeUnknown(err)
	case unavailable(err), db.Postgres() && errors.Is(err, io.ErrUnexpectedEOF):
		// pgx reports a connection that ended in the middle of an answer
		// (the database crashed or restarted, the network was cut) as a
		// bare io.ErrUnexpectedEOF; nothing else a PostgreSQL deployment
		// meets ends that way.
		return apperr.Unavailable(err)
	}
	return err
}

// faultState is what the DB remembers of recent faults.
type faultState struct {
	lastFull    atomic.Int64 // unix nanoseconds of the last write that met a full disk
	lastStalled atomic.Int64 // of the last write that did not finish by its deadline
	lastCommit  atomic.Int64 // of the last write transaction that committed
}

// faultMemory is how long a write's fault keeps Writable failing after the
// write met it (a full disk: unless space is seen free again by the
// caller's own check).
const faultMemory = 5 * time.Second

// Writable reports whether writes can be expected to succeed, from what
// the writes met: not if one met a full disk in the last few seconds, nor
// if one could not finish by its deadline (a frozen database, the write
// lock held elsewhere: reads go on, so a ping does not see it) and no write
// transaction committed since. WritesSucceed also asks the database.
func (db *DB) Writable() error {
	if recent(&db.faults.lastFull) {
		return errors.New("a write met a full disk in the last few seconds")
	}
	if recent(&db.faults.lastStalled) && db.faults.lastCommit.Load() < db.faults.lastStalled.Load() {
		return errors.New("a write could not finish by its deadline in the last few seconds (the database does not answer writes, or the write lock is held elsewhere)")
	}
	return nil
}

func recent(at *atomic.Int64) bool {
	t := at.Load()
	return t != 0 && time.Since(time.Unix(0, t)) < faultMemory
}

// stallWait is how long a write must have waited for the database before
// its failure counts as a stall: a request whose budget was spent
// elsewhere (slow reads, a busy CPU) fails its write sooner, and says
// nothing of the database.
const stallWait = 500 * time.Millisecond

// noteWrite remembers, for Writable, a write that waited at least
// stallWait and did not finish by its deadline. A client that went away
// (context.Canceled) says nothing of the database either.
func (db *DB) noteWrite(err error, waited time.Duration) {
	if err == nil || waited < stallWait || errors.Is(err, context.Canceled) {
		return
	}
	if errors.Is(err, ErrOutcomeUnknown) || unavailable(err) {
		db.faults.lastStalled.Store(time.Now().UnixNano())
	}
}

func diskFull(err error) bool {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return true
	}
	var se sqlite3.Error
	if errors.As(err, &se) && se.Code == sqlite3.ErrFull {
		return true
	}
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "53100" // disk_full
}

func unavailable(err error) bool {
	// Our own deadlines (request and database timeouts); a client that went
	// away is context.Canceled, not this.
	if errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err) {
		return true
	}
	if errors.Is(err, driver.ErrBadConn) || errors.Is(err, sql.ErrConnDone) {
		return true
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return true
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case strings.HasPrefix(pe.Code, "08"): // connection exception
			return true
		case pe.Code == "57P01", pe.Code == "57P02", pe.Code == "57P03": // shutting down, crashed, starting
			return true
		case pe.Code == "25P03", pe.Code == "57P05": // the session ended by idle_in_transaction_session_timeout, idle_session_timeout
			return true
		case pe.Code == "57014": // query_canceled: statement_timeout
			return true
		case pe.Code == "55P03": // lock_not_available: lock_timeout (the write lock held elsewhere)
			return true
		case pe.Code == "53300": // too_many_connections
			return true
		}
		return false
	}
	var se sqlite3.Error
	if errors.As(err, &se) && (se.Code == sqlite3.ErrBusy || se.Code == sqlite3.ErrLocked) {
		return true // the busy timeout passed: the database is held by another process
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	// pgx reports a connection that died mid-statement with these.
	msg := err.Error()
	return strings.Contains(msg, "conn closed") || strings.Contains(msg, "unexpected EOF") && strings.Contains(msg, "pgconn") ||
		strings.Contains(msg, "connection reset by peer") || strings.Contains(msg, "broken pipe")
}

// UniqueViolation names the unique index (SQLite: "table.column";
// PostgreSQL: the constraint) that err violated, or "".
func UniqueViolation(err error) string {
	var se sqlite3.Error
	if errors.As(err, &se) && (se.ExtendedCode == sqlite3.ErrConstraintUnique || se.ExtendedCode == sqlite3.ErrConstraintPrimaryKey) {
		_, cols, _ := strings.Cut(se.Error(), "failed: ")
		return cols
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "23505" { // unique_violation
		return pe.ConstraintName
	}
	return ""
}

// deadlocked reports whether PostgreSQL ended a transaction to break a
// deadlock (SQLSTATE 40P01).
func deadlocked(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "40P01"
}
