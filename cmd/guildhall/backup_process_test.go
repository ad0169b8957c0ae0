package main

import (
	"bytes"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/guildhall/guildhall/internal/testenv"
)

// runCLI runs the binary with args and the environment given (and no other
// GUILDHALL_* variable), returning its output and exit code.
func runCLI(t *testing.T, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(binary(t), args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GUILDHALL_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run %v: %v", args, err)
	}
	return out.String(), errb.String(), code
}

// TestBackupCommands runs `guildhall backup` beside a live `guildhall serve`
// and `guildhall restore` into a new data directory, then serves the
// restored store: the attachment comes back byte for byte.
func TestBackupCommands(t *testing.T) {
	c := newClient(t)
	s := newStore(t, testenv.SQLite)
	in := start(t, "live", s).ready(t, c)
	must(t, c, in.URL, http.StatusCreated, "POST", "/channels/files/create", s.token, map[string]any{"name": "files"})
	body := bytes.Repeat([]byte("guildhall "), 50000)
	req, _ := http.NewRequest("PUT", in.URL+"/api/channels/files/attachment?attachmentID=big.bin", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+s.token)
	req.Header.Set("Content-Type", "application/octet-stream")
	res, err := c.Do(req)
	if err != nil || res.StatusCode != http.StatusCreated {
		t.Fatalf("upload: %v %v", res, err)
	}
	_ = res.Body.Close()

	to := filepath.Join(t.TempDir(), "bk")
	out, errOut, code := runCLI(t, []string{"GUILDHALL_DATA_DIR=" + s.dataDir}, "backup", "--to", to)
	if code != 0 || !strings.Contains(out, "1 attachment blobs") {
		t.Fatalf("backup: exit %d\n%s%s", code, out, errOut)
	}
	if _, errOut, code := runCLI(t, []string{"GUILDHALL_DATA_DIR=" + s.dataDir}, "backup", "--to", to); code == 0 || !strings.Contains(errOut, "not empty") {
		t.Fatalf("a second backup into the same directory: exit %d, %s", code, errOut)
	}
	restored := newStore(t, testenv.SQLite)
	restored.token = s.token
	if out, errOut, code := runCLI(t, nil, "restore", "--from", to, "--data-dir", restored.dataDir); code != 0 {
		t.Fatalf("restore: exit %d\n%s%s", code, out, errOut)
	}
	if _, errOut, code := runCLI(t, nil, "restore", "--from", to, "--data-dir", restored.dataDir); code == 0 || !strings.Contains(errOut, "not empty") {
		t.Fatalf("a restore into a non-empty directory: exit %d, %s", code, errOut)
	}
	r := start(t, "restored", restored).ready(t, c)
	got := must(t, c, r.URL, http.StatusOK, "GET", "/channels/files/attachment?attachmentID=big.bin", s.token, nil)
	if !bytes.Equal(got, body) {
		t.Fatalf("restored attachment: %d bytes, want the %d uploaded", len(got), len(body))
	}
}

// TestCommandsHelp: every command answers --help with its flags and their
// variables, and exits 0.
func TestCommandsHelp(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"serve", "--help"}, {"token", "create", "--help"}, {"backup", "--help"}, {"restore", "--help"}, {"version", "--help"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			out, errOut, code := runCLI(t, nil, args...)
			if code != 0 || !strings.Contains(out, "Usage: guildhall") {
				t.Fatalf("exit %d\n%s%s", code, out, errOut)
			}
			if args[0] == "serve" {
				for _, v := range []string{"GUILDHALL_SHUTDOWN_TIMEOUT", "GUILDHALL_TRUSTED_PROXIES", "GUILDHALL_DATA_DIR", "GUILDHALL_BODY_IDLE_TIMEOUT"} {
					if !strings.Contains(out, v) {
						t.Errorf("serve --help does not name %s", v)
					}
				}
			}
		})
	}
	if _, errOut, code := runCLI(t, []string{"GUILDHALL_RATE_LIMIT=-1"}, "serve"); code == 0 || !strings.Contains(errOut, "rate limit must not be negative") {
		t.Fatalf("a negative rate limit: exit %d, %s", code, errOut)
	}
}

// TestPostgresBackupInstructions runs the pg_dump and pg_restore commands
// that `guildhall backup` and `restore` print for a PostgreSQL store (in a
// schema of its own, the search_path of the URL): the restored schema serves
// the attachment byte for byte.
func TestPostgresBackupInstructions(t *testing.T) {
	testenv.RequirePostgres(t)
	for _, tool := range []string{"pg_dump", "pg_restore"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed", tool)
		}
	}
	c := newClient(t)
	s := newStore(t, testenv.Postgres)
	in := start(t, "pg", s).ready(t, c)
	must(t, c, in.URL, http.StatusCreated, "POST", "/channels/files/create", s.token, map[string]any{"name": "files"})
	body := bytes.Repeat([]byte{0, 1, 2, 254, 255}, 100000) // two chunks
	req, _ := http.NewRequest("PUT", in.URL+"/api/channels/files/attachment?attachmentID=b", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+s.token)
	req.Header.Set("Content-Type", "application/octet-stream")
	if res, err := c.Do(req); err != nil || res.StatusCode != http.StatusCreated {
		t.Fatalf("upload: %v %v", res, err)
	}
	to := filepath.Join(t.TempDir(), "pg")
	env := []string{"GUILDHALL_DATABASE_URL=" + s.dbURL}
	out, errOut, code := runCLI(t, env, "backup", "--to", to)
	if code != 0 || !strings.Contains(out, "pg_dump") {
		t.Fatalf("backup: exit %d\n%s%s", code, out, errOut)
	}
	shell(t, commandLines(out))
	in.kill()
	// Drop the schema, then restore it as the printed command says.
	conn, err := pgx.Connect(t.Context(), testenv.PostgresURL())
	if err != nil {
		t.Fatal(err)
	}
	schema := schemaOf(t, s.dbURL)
	if _, err := conn.Exec(t.Context(), "DROP SCHEMA "+schema+" CASCADE"); err != nil {
		t.Fatal(err)
	}
	_ = conn.Close(t.Context())
	out, errOut, code = runCLI(t, env, "restore", "--from", to)
	if code != 0 || !strings.Contains(out, "pg_restore") {
		t.Fatalf("restore: exit %d\n%s%s", code, out, errOut)
	}
	shell(t, commandLines(out))
	r := start(t, "pg-restored", s).ready(t, c)
	got := must(t, c, r.URL, http.StatusOK, "GET", "/channels/files/attachment?attachmentID=b", s.token, nil)
	if !bytes.Equal(got, body) {
		t.Fatalf("restored attachment: %d bytes, want %d", len(got), len(body))
	}
}

// commandLines picks the indented shell lines (with their continuations)
// out of printed instructions.
func commandLines(text string) string {
	var b strings.Builder
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "  ") {
			b.WriteString(strings.TrimSpace(line) + "\n")
		}
	}
	return b.String()
}

func shell(t *testing.T, script string) {
	t.Helper()
	out, err := exec.Command("sh", "-ec", script).CombinedOutput()
	if err != nil {
		t.Fatalf("%s\n%v\n%s", script, err, out)
	}
}

func schemaOf(t *testing.T, dbURL string) string {
	t.Helper()
	_, q, _ := strings.Cut(dbURL, "search_path=")
	schema, _, _ := strings.Cut(q, "&")
	if schema == "" {
		t.Fatalf("no search_path in %s", dbURL)
	}
	return schema
}
