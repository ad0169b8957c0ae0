package fresh

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// PostgreSQL's logging (see "When a PostgreSQL change is logged" in
// registry.go). Each logged table has
//
//   - <table>_log: a deferred row trigger, fired ALWAYS (in replica
//     sessions too), for every transaction but the service's own writes;
//   - <table>_log_own_insert, _update, _delete: statement triggers with
//     the rows they wrote (transition tables), for the service's own
//     writes (a table logged as a whole, or by columns, logs without
//     them);
//   - <table>_log_truncate: a TRUNCATE logs the whole store as changed.
//
// Their functions name their schema, so a session with any search_path
// logs into the right one.

// changeSetting is the name of the setting that remembers a transaction's
// bump.
func changeSetting(tag string) string { return "guildhall.change_" + tag }

// ownWriterSetting marks a transaction as one of the service's own writes.
const ownWriterSetting = "guildhall.writer"

// OwnWriterSQL marks the service's write transaction as its own, after it
// took the write lock: its statements log as they end.
const OwnWriterSQL = "SET LOCAL " + ownWriterSetting + " = 'on'"

// whenOwn and whenOther are the triggers' conditions.
const (
	whenOwn   = "(current_setting('" + ownWriterSetting + "', true) = 'on')"
	whenOther = "(current_setting('" + ownWriterSetting + "', true) IS DISTINCT FROM 'on')"
)

// pgFunction is a function of the log: its signature with its return
// type, and its body as pg_proc.prosrc keeps it.
type pgFunction struct{ sig, body string }

// pgFunctionList are the functions the PostgreSQL triggers call:
// log_changes, which bumps the data version once per transaction and logs
// changes; log_change, one change; log_truncate; and a row and a
// statement trigger function per logged table.
func (r Registry) pgFunctionList(pg *Postgres) []pgFunction {
	q := quoteIdent(pg.Schema)
	out := []pgFunction{
		{q + ".log_changes(t TEXT, ks TEXT[]) RETURNS void", LogChangesBody(pg.Schema, pg.Tag)},
		{q + ".log_change(t TEXT, k TEXT) RETURNS void", "\nBEGIN\n  PERFORM " + q + ".log_changes(t, ARRAY[k]);\nEND\n"},
		{q + ".log_truncate() RETURNS trigger", "\nBEGIN\n  PERFORM " + q + ".log_change('*', '');\n  RETURN NULL;\nEND\n"},
	}
	for _, t := range r.Logged {
		out = append(out, pgFunction{q + ".log_" + t.Name + "() RETURNS trigger", pgRowBody(pg, t)},
			pgFunction{q + ".log_" + t.Name + "_own() RETURNS trigger", pgStatementBody(pg, t)})
	}
	return out
}

// pgFunctions are the statements that create the functions.
func (r Registry) pgFunctions(pg *Postgres) []string {
	var out []string
	for _, f := range r.pgFunctionList(pg) {
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

// pgStatementBody logs what one statement wrote, in one insert: the keys
// of the rows before and after it (a table logged as a whole: one change,
// whenever the statement ran).
func pgStatementBody(pg *Postgres, t Table) string {
	q := quoteIdent(pg.Schema)
	logAll := "  PERFORM " + q + ".log_changes('" + t.LogAs + "', ARRAY[''])"
	if t.Key == "" {
		return "\nBEGIN\n" + logAll + ";\n  RETURN NULL;\nEND\n"
	}
	keys := func(rows string) string { return "SELECT x." + t.Key + "::text FROM " + rows + " x" }
	log := func(sel string) string { return "PERFORM " + q + ".log_changes('" + t.LogAs + "', ARRAY(" + sel + "))" }
	return "\nBEGIN\n" +
		"  IF TG_OP = 'INSERT' THEN " + log(keys("new_rows")) + ";\n" +
		"  ELSIF TG_OP = 'UPDATE' THEN " + log(keys("old_rows")+" UNION "+keys("new_rows")) + ";\n" +
		"  ELSE " + log(keys("old_rows")) + ";\n  END IF;\n  RETURN NULL;\nEND\n"
}

// LogChangesBody is the body of log_changes, as pg_proc.prosrc keeps it.
//
// A call with no change does nothing. The first change of a transaction
// bumps data_version (upserting the row, so that a row deleted by hand
// comes back, with a prev of 0 that matches no cache) and remembers the
// bump in a setting local to the transaction, keyed by its ID: a savepoint
// rolled back takes the bump and the setting back together. It also moves
// the version counters of settings that instances of earlier versions key
// their caches by, so that they stay right during a rolling upgrade.
func LogChangesBody(schema, tag string) string {
	q := quoteIdent(schema)
	setting := "'" + changeSetting(tag) + "'"
	return `
DECLARE
  cur TEXT;
  me TEXT;
  nv BIGINT;
  nn BIGINT;
  np BIGINT;
BEGIN
  IF cardinality(ks) = 0 THEN
    RETURN;
  END IF;
  cur := current_setting(` + setting + `, true);
  me := txid_current()::text;
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
  END IF;
  INSERT INTO ` + q + `.change_log (v, nonce, prev, tbl, key) SELECT nv, nn, np, t, k FROM unnest(ks) AS k ON CONFLICT DO NOTHING;
END
`
}

// pgTriggers put t's triggers on it (see above), dropping those of an
// earlier version first (its row trigger logged every transaction's
// changes).
func pgTriggers(pg *Postgres, t Table) []string {
	q := quoteIdent(pg.Schema)
	events := "INSERT OR UPDATE OR DELETE"
	if t.Columns != "" {
		events = "INSERT OR UPDATE OF " + t.Columns + " OR DELETE"
	}
	out := []string{
		"DROP TRIGGER IF EXISTS " + t.Name + "_log ON " + t.Name,
		"CREATE CONSTRAINT TRIGGER " + t.Name + "_log AFTER " + events + " ON " + t.Name +
			" DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN " + whenOther + " EXECUTE FUNCTION " + q + ".log_" + t.Name + "()",
		"DROP TRIGGER IF EXISTS " + t.Name + "_log_truncate ON " + t.Name,
		"CREATE TRIGGER " + t.Name + "_log_truncate AFTER TRUNCATE ON " + t.Name +
			" FOR EACH STATEMENT EXECUTE FUNCTION " + q + ".log_truncate()",
	}
	names := []string{t.Name + "_log", t.Name + "_log_truncate"}
	for _, op := range []string{"insert", "update", "delete"} {
		name := t.Name + "_log_own_" + op
		event, rows := strings.ToUpper(op), ""
		switch {
		case t.Key == "" || t.Columns != "":
			if op == "update" && t.Columns != "" {
				event += " OF " + t.Columns
			}
		case op == "insert":
			rows = " REFERENCING NEW TABLE AS new_rows"
		case op == "update":
			rows = " REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows"
		default:
			rows = " REFERENCING OLD TABLE AS old_rows"
		}
		// Dropped and created, not replaced: CREATE OR REPLACE TRIGGER
		// needs PostgreSQL 14.
		out = append(out, "DROP TRIGGER IF EXISTS "+name+" ON "+t.Name, "CREATE TRIGGER "+name+" AFTER "+event+" ON "+t.Name+rows+
			" FOR EACH STATEMENT WHEN "+whenOwn+" EXECUTE FUNCTION "+q+".log_"+t.Name+"_own()")
		names = append(names, name)
	}
	for _, n := range names {
		out = append(out, "ALTER TABLE "+t.Name+" ENABLE ALWAYS TRIGGER "+n)
	}
	return out
}

// pgTriggersInstalled reports whether t has this version's triggers: its
// statement triggers, and a row trigger that leaves the service's own
// writes to them.
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
	for _, n := range []string{"_log_truncate", "_log_own_insert", "_log_own_update", "_log_own_delete"} {
		if _, ok := have[t.Name+n]; !ok {
			return false, nil
		}
	}
	return strings.Contains(have[t.Name+"_log"], ownWriterSetting), nil
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
