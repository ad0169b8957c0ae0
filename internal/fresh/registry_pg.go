package fresh

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// PostgreSQL's logging (see "When a PostgreSQL change is logged" in
// registry.go). Each logged table has <table>_log, a deferred row trigger
// fired ALWAYS (in replica sessions too), and <table>_log_truncate: a
// TRUNCATE logs the whole store as changed. The service's own write
// transactions fire the pending row triggers themselves, when they read
// what they changed (own_changes) and before they commit (commit_changes).
// The functions name their schema, so a session with any search_path logs
// into the right one.

// changeSetting is the name of the setting that remembers a transaction's
// bump.
func changeSetting(tag string) string { return "guildhall.change_" + tag }

// The row triggers stay deferred in the service's own writes too, fired
// in one pass when the transaction asks: a constraint trigger made
// immediate costs PostgreSQL its after-trigger setup at the end of every
// statement (~20 µs of its CPU per created user in a batch of 30, measured
// with pgbench against firing them once before the commit). Statement
// triggers over transition tables, which would log a statement's rows in
// one insert, were measured: they did not make the writes at the limits
// faster, and the conditions (WHEN) that kept them apart from the row
// triggers made every single-row write cost the database more.

// ownChangesBody fires the transaction's pending logging triggers, defers
// the later ones again, and returns the changes logged under its version
// (none when it bumped none: the check of the transaction's ID keeps a
// setting of another transaction, or an empty one, from being read).
func ownChangesBody(schema, tag string) string {
	return `
DECLARE
  s TEXT;
BEGIN
  SET CONSTRAINTS ALL IMMEDIATE;
  SET CONSTRAINTS ALL DEFERRED;
  s := current_setting('` + changeSetting(tag) + `', true);
  IF s IS NOT NULL AND split_part(s, ':', 1) = txid_current()::text THEN
    RETURN QUERY SELECT c.tbl::text, c.key::text FROM ` + quoteIdent(schema) + `.change_log c WHERE c.v = split_part(s, ':', 2)::bigint;
  END IF;
END
`
}

// ownFollowedMax bounds the changes commit_changes hands back: a
// transaction that logged more makes the cache ask, as another's would.
const ownFollowedMax = 256

// commitChangesBody fires the transaction's pending logging triggers and
// returns its version and nonce, NULLs when it bumped none, and what the
// cache needs to follow it without a question (Cache.Ended): a JSON
// object with the nonce before it (prev, as the bump read it) and the
// changes logged under it, [table, key] each; NULL past ownFollowedMax.
// The changes are read here, by a statement of the function: the
// statement that calls it would not see rows its triggers logged.
func commitChangesBody(schema, tag string) string {
	return `
DECLARE
  s TEXT;
  n BIGINT;
  own TEXT;
BEGIN
  SET CONSTRAINTS ALL IMMEDIATE;
  s := current_setting('` + changeSetting(tag) + `', true);
  IF s IS NOT NULL AND split_part(s, ':', 1) = txid_current_if_assigned()::text THEN
    SELECT json_build_object('prev', NULLIF(split_part(s, ':', 4), '')::bigint,
        'changes', json_agg(json_build_array(c.tbl, c.key)))::text, count(*)
      INTO own, n
      FROM (SELECT c.tbl, c.key FROM ` + quoteIdent(schema) + `.change_log c
        WHERE c.v = split_part(s, ':', 2)::bigint LIMIT ` + fmt.Sprint(ownFollowedMax+1) + `) c;
    IF n > ` + fmt.Sprint(ownFollowedMax) + ` THEN
      own := NULL;
    END IF;
    RETURN QUERY SELECT split_part(s, ':', 2)::bigint, split_part(s, ':', 3)::bigint, own;
  ELSE
    RETURN QUERY SELECT NULL::bigint, NULL::bigint, NULL::text;
  END IF;
END
`
}

// lockWritesBody bounds the transaction (lock_timeout and
// statement_timeout, local to it), takes the write lock, and then reads
// the data version: a plpgsql statement after the lock, under a snapshot
// taken once the lock is held (a function's statements each take their
// own in READ COMMITTED), so the version covers every commit before the
// lock, which one statement reading it beside the lock would not. One row,
// NULLs without a version row.
func lockWritesBody(schema string) string {
	return `
BEGIN
  PERFORM set_config('lock_timeout', lock_ms::text, true);
  PERFORM set_config('statement_timeout', statement_ms::text, true);
  PERFORM pg_advisory_xact_lock(k);
  RETURN QUERY SELECT d.v, d.nonce FROM (SELECT 1) o LEFT JOIN ` + quoteIdent(schema) + `.data_version d ON d.id = 1;
END
`
}

// pgFunction is a function of the log: its signature with its return
// type, and its body as pg_proc.prosrc keeps it.
type pgFunction struct{ sig, body string }

// pgFunctionList are the functions of the log: log_change, which bumps
// the data version once per transaction and logs one change; log_truncate;
// a trigger function per logged table; and what the service's writes call,
// lock_writes, own_changes and commit_changes.
func (r Registry) pgFunctionList(pg *Postgres) []pgFunction {
	q := quoteIdent(pg.Schema)
	out := []pgFunction{
		{q + ".log_change(t TEXT, k TEXT) RETURNS void", LogChangeBody(pg.Schema, pg.Tag)},
		{q + ".log_truncate() RETURNS trigger", "\nBEGIN\n  PERFORM " + q + ".log_change('*', '');\n  RETURN NULL;\nEND\n"},
		{q + ".own_changes() RETURNS TABLE (tbl TEXT, key TEXT)", ownChangesBody(pg.Schema, pg.Tag)},
		{q + ".commit_changes() RETURNS TABLE (v BIGINT, nonce BIGINT, own TEXT)", commitChangesBody(pg.Schema, pg.Tag)},
		{q + ".lock_writes(k BIGINT, lock_ms BIGINT, statement_ms BIGINT) RETURNS TABLE (v BIGINT, nonce BIGINT)", lockWritesBody(pg.Schema)},
	}
	for _, t := range r.Logged {
		out = append(out, pgFunction{q + ".log_" + t.Name + "() RETURNS trigger", pgRowBody(pg, t)})
	}
	return out
}

// pgFunctions are the statements that create the functions. One that
// returns a table is dropped first: CREATE OR REPLACE cannot change a
// function's result columns, and a later build may. (Install runs them in
// the migrations' transaction, so no writer finds it missing meanwhile.)
func (r Registry) pgFunctions(pg *Postgres) []string {
	var out []string
	for _, f := range r.pgFunctionList(pg) {
		if i := strings.Index(f.sig, " RETURNS TABLE"); i >= 0 {
			out = append(out, "DROP FUNCTION IF EXISTS "+f.sig[:i])
		}
		out = append(out, "CREATE OR REPLACE FUNCTION "+f.sig+" LANGUAGE plpgsql AS $$"+f.body+"$$")
	}
	return out
}

// pgRowBody logs one row's change: its key before and, when it moved,
// after.
func pgRowBody(pg *Postgres, t Table) string {
	q := quoteIdent(pg.Schema)
	body := "\nBEGIN\n"
	if t.Key == "" {
		body += "  PERFORM " + q + ".log_change('" + t.LogAs + "', '');\n"
	} else {
		body += "  IF TG_OP <> 'INSERT' THEN PERFORM " + q + ".log_change('" + t.LogAs + "', OLD." + t.Key + "::text); END IF;\n" +
			"  IF TG_OP = 'INSERT' OR (TG_OP = 'UPDATE' AND NEW." + t.Key + " IS DISTINCT FROM OLD." + t.Key + ") THEN\n" +
			"    PERFORM " + q + ".log_change('" + t.LogAs + "', NEW." + t.Key + "::text);\n  END IF;\n"
	}
	return body + "  RETURN NULL;\nEND\n"
}

// LogChangeBody is the body of log_change, as pg_proc.prosrc keeps it.
//
// The first change of a transaction bumps data_version (upserting the
// row, so that a row deleted by hand comes back, with a prev of 0 that
// matches no cache) and remembers the bump in a setting local to the
// transaction, keyed by its ID: a savepoint rolled back takes the bump and
// the setting back together. The bump notifies the change channel of the
// version and its nonce, delivered at commit (lease.go). It also moves the
// version counters of
// settings that instances of earlier versions key their caches by, so
// that they stay right during a rolling upgrade.
func LogChangeBody(schema, tag string) string {
	q := quoteIdent(schema)
	setting := "'" + changeSetting(tag) + "'"
	return `
DECLARE
  cur TEXT := current_setting(` + setting + `, true);
  me TEXT := txid_current()::text;
  nv BIGINT;
  nn BIGINT;
  np BIGINT;
BEGIN
  IF cur IS NOT NULL AND split_part(cur, ':', 1) = me THEN
    nv := split_part(cur, ':', 2)::bigint;
    nn := split_part(cur, ':', 3)::bigint;
    np := split_part(cur, ':', 4)::bigint;
  ELSE
    SELECT d.nonce INTO np FROM ` + q + `.data_version d WHERE d.id = 1 FOR UPDATE;
    nn := ` + RandomNonce + `;
    INSERT INTO ` + q + `.data_version AS d (id, v, nonce) VALUES (1, 1, nn)
      ON CONFLICT (id) DO UPDATE SET v = d.v + 1, nonce = excluded.nonce RETURNING d.v INTO nv;
    np := COALESCE(np, 0);
    UPDATE ` + q + `.settings SET auth_version = auth_version + 1, credentials_version = credentials_version + 1 WHERE id = 1;
    PERFORM set_config(` + setting + `, me || ':' || nv || ':' || nn || ':' || np, true);
    PERFORM pg_notify('` + ChangeChannel(tag) + `', nv || ' ' || nn);
  END IF;
  INSERT INTO ` + q + `.change_log (v, nonce, prev, tbl, key) VALUES (nv, nn, np, t, k) ON CONFLICT DO NOTHING;
END
`
}

// pgTriggers put t's triggers on it, dropping those of a build that had
// others first.
func pgTriggers(pg *Postgres, t Table) []string {
	q := quoteIdent(pg.Schema)
	events := "INSERT OR UPDATE OR DELETE"
	if t.Columns != "" {
		events = "INSERT OR UPDATE OF " + t.Columns + " OR DELETE"
	}
	var out []string
	for _, n := range []string{"_log", "_log_truncate", "_log_own_insert", "_log_own_update", "_log_own_delete"} {
		out = append(out, "DROP TRIGGER IF EXISTS "+t.Name+n+" ON "+t.Name)
	}
	return append(out,
		"CREATE CONSTRAINT TRIGGER "+t.Name+"_log AFTER "+events+" ON "+t.Name+
			" DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION "+q+".log_"+t.Name+"()",
		"CREATE TRIGGER "+t.Name+"_log_truncate AFTER TRUNCATE ON "+t.Name+" FOR EACH STATEMENT EXECUTE FUNCTION "+q+".log_truncate()",
		"ALTER TABLE "+t.Name+" ENABLE ALWAYS TRIGGER "+t.Name+"_log",
		"ALTER TABLE "+t.Name+" ENABLE ALWAYS TRIGGER "+t.Name+"_log_truncate")
}

// pgTriggersInstalled reports whether t has this version's triggers, and
// no others of the log.
func pgTriggersInstalled(ctx context.Context, c Conn, pg *Postgres, t Table) (bool, error) {
	rows, err := c.QueryContext(ctx, "SELECT tgname, pg_get_triggerdef(oid) FROM pg_trigger WHERE tgrelid = to_regclass($1)",
		quoteIdent(pg.Schema)+"."+quoteIdent(t.Name))
	if err != nil {
		return false, fmt.Errorf("read the triggers of %s: %w", t.Name, err)
	}
	defer rows.Close()
	have := map[string]string{}
	for rows.Next() {
		var name, def string
		if err := rows.Scan(&name, &def); err != nil {
			return false, fmt.Errorf("read the triggers of %s: %w", t.Name, err)
		}
		have[name] = def
	}
	if err := rows.Close(); err != nil {
		return false, fmt.Errorf("read the triggers of %s: %w", t.Name, err)
	}
	_, own := have[t.Name+"_log_own_insert"]
	_, truncate := have[t.Name+"_log_truncate"]
	def, row := have[t.Name+"_log"]
	return row && truncate && !own && !strings.Contains(def, " WHEN "), nil
}

// pgFunctionsInstalled reports whether every function is the one this
// version writes.
func (r Registry) pgFunctionsInstalled(ctx context.Context, c Conn, pg *Postgres) (bool, error) {
	for _, f := range r.pgFunctionList(pg) {
		sig, body := f.sig[:strings.Index(f.sig, " RETURNS")], f.body
		rows, err := c.QueryContext(ctx, "SELECT prosrc FROM pg_proc WHERE oid = to_regprocedure($1)", regprocedure(sig))
		if err != nil {
			return false, fmt.Errorf("read the change log's functions: %w", err)
		}
		var have string
		found := rows.Next()
		if found {
			err = rows.Scan(&have)
		}
		if err := errors.Join(err, rows.Close()); err != nil {
			return false, fmt.Errorf("read the change log's functions: %w", err)
		}
		if !found || have != body {
			return false, nil
		}
	}
	return true, nil
}

// regprocedure turns a signature with argument names ("s.f(t TEXT, k
// TEXT)") into one to_regprocedure reads ("s.f(TEXT, TEXT)").
func regprocedure(sig string) string {
	open := strings.IndexByte(sig, '(')
	args := strings.Split(strings.TrimSuffix(sig[open+1:], ")"), ",")
	for i, a := range args {
		f := strings.Fields(a)
		if len(f) > 0 {
			args[i] = f[len(f)-1]
		}
	}
	if strings.TrimSpace(sig[open+1:len(sig)-1]) == "" {
		args = nil
	}
	return sig[:open+1] + strings.Join(args, ",") + ")"
}
