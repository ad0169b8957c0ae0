package backup

import (
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
)

// PostgresDumpFile is the dump's name in a backup directory.
const PostgresDumpFile = "guildhall.pgdump"

// libpqParams are the URL query parameters that libpq (pg_dump, pg_restore)
// understands; the others in a Guildhall URL are pgx's own or runtime
// parameters such as search_path, which libpq refuses in a URL.
var libpqParams = map[string]bool{
	"host": true, "hostaddr": true, "port": true, "dbname": true, "user": true, "password": true, "passfile": true,
	"channel_binding": true, "connect_timeout": true, "client_encoding": true, "options": true, "application_name": true,
	"fallback_application_name": true, "keepalives": true, "keepalives_idle": true, "keepalives_interval": true,
	"keepalives_count": true, "tcp_user_timeout": true, "gssencmode": true, "sslmode": true, "sslnegotiation": true,
	"sslcompression": true, "sslcert": true, "sslkey": true, "sslpassword": true, "sslcertmode": true, "sslrootcert": true,
	"sslcrl": true, "sslcrldir": true, "sslsni": true, "requirepeer": true, "require_auth": true,
	"ssl_min_protocol_version": true, "ssl_max_protocol_version": true, "krbsrvname": true, "gsslib": true,
	"gssdelegation": true, "service": true, "target_session_attrs": true, "load_balance_hosts": true,
}

// PostgresTarget is what pg_dump and pg_restore need from a Guildhall URL:
// a URL libpq accepts and the schema the tables live in.
type PostgresTarget struct {
	URL    string // without the parameters libpq refuses
	Schema string // the first schema of search_path; "public" without one
}

// ParsePostgres reads a Guildhall PostgreSQL URL.
func ParsePostgres(databaseURL string) (PostgresTarget, error) {
	u, err := url.Parse(databaseURL)
	if err != nil {
		return PostgresTarget{}, fmt.Errorf("the database URL does not parse: %w", err)
	}
	q := u.Query()
	schema := "public"
	if sp := q.Get("search_path"); sp != "" {
		first, _, _ := strings.Cut(sp, ",")
		schema = strings.Trim(strings.TrimSpace(first), `"`)
	}
	for k := range q {
		if !libpqParams[k] {
			q.Del(k)
		}
	}
	u.RawQuery = q.Encode()
	return PostgresTarget{URL: u.String(), Schema: schema}, nil
}

// PostgresDumpInstructions says how to back up a PostgreSQL store: its
// attachment blobs are rows (blob_chunks), so one pg_dump of the schema is
// the whole backup.
func PostgresDumpInstructions(databaseURL, to string) (string, error) {
	t, err := ParsePostgres(databaseURL)
	if err != nil {
		return "", err
	}
	file := filepath.Join(to, PostgresDumpFile)
	// The schema of a search_path is dumped with its CREATE SCHEMA; the
	// default public schema exists in every database, so that store is
	// dumped as the whole database instead.
	schema := " --schema=" + shellQuote(t.Schema)
	if t.Schema == "public" {
		schema = ""
	}
	return fmt.Sprintf(`The store is PostgreSQL: its attachment blobs live in the database (table
blob_chunks), so pg_dump takes the whole of it, consistently (one snapshot),
while the servers run. Run:

  mkdir -p %s
  pg_dump --format=custom --no-owner --no-privileges%s \
    --file=%s %s

Restore it with: guildhall restore --from %s --database-url ...
`, shellQuote(to), schema, shellQuote(file), shellQuote(t.URL), shellQuote(to)), nil
}

// PostgresRestoreInstructions says how to restore a PostgreSQL store dumped
// as PostgresDumpInstructions says.
func PostgresRestoreInstructions(databaseURL, from string) (string, error) {
	t, err := ParsePostgres(databaseURL)
	if err != nil {
		return "", err
	}
	file := filepath.Join(from, PostgresDumpFile)
	where := fmt.Sprintf("Restore into a database where the schema %s does not exist yet (the dump creates it;\ndrop or rename an old one first)", t.Schema)
	if t.Schema == "public" {
		where = "Restore into a new, empty database (createdb NAME; its empty public schema is\nfilled by the dump)"
	}
	return fmt.Sprintf(`The store is PostgreSQL: restore the pg_dump file with pg_restore. %s,
with no server running on it, then start the servers with the same
GUILDHALL_DATABASE_URL:

  pg_restore --no-owner --no-privileges --exit-on-error --single-transaction \
    --dbname=%s %s
`, where, shellQuote(t.URL), shellQuote(file)), nil
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:=@%+,") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
