package main

// The upgrade test: data written by each released binary, built from this
// repository's history at the commit openapi/releases/<version>.commit
// records, is served by the current binary within the current contract.

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/guildhall/guildhall/internal/guild"
	"github.com/guildhall/guildhall/internal/names"
	"github.com/guildhall/guildhall/internal/testenv"
	"github.com/guildhall/guildhall/openapi"
)

// firstUpgradeRelease is the oldest release the upgrade test starts from.
const firstUpgradeRelease = "1.1.0"

// skipUpgrade skips the upgrade test, or with GUILDHALL_TEST_UPGRADE=require
// (as in .ci/run) fails it, when what it needs is missing.
func skipUpgrade(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("GUILDHALL_TEST_UPGRADE") == "require" {
		t.Fatalf("the upgrade test is required (GUILDHALL_TEST_UPGRADE=require): %s", msg)
	}
	t.Skipf("%s: skipping the upgrade test; set GUILDHALL_TEST_UPGRADE=require to make this fail", msg)
}

// release is one recorded release.
type release struct {
	version string // 1.1.0
	commit  string
	dir     string // openapi/releases
}

// releases lists the recorded releases from firstUpgradeRelease on.
func releases(t *testing.T) []release {
	t.Helper()
	dir := filepath.Join("..", "..", "openapi", "releases")
	files, err := filepath.Glob(filepath.Join(dir, "*.commit"))
	if err != nil || len(files) == 0 {
		skipUpgrade(t, "no release commits in %s", dir)
	}
	var out []release
	for _, f := range files {
		v := strings.TrimSuffix(filepath.Base(f), ".commit")
		if compareVersions(v, firstUpgradeRelease) < 0 {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, release{version: v, commit: strings.TrimSpace(string(data)), dir: dir})
	}
	slices.SortFunc(out, func(a, b release) int { return compareVersions(a.version, b.version) })
	return out
}

// compareVersions orders release versions (major.minor.patch).
func compareVersions(a, b string) int {
	pa, pb := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(pa) && i < len(pb); i++ {
		x, _ := strconv.Atoi(pa[i])
		y, _ := strconv.Atoi(pb[i])
		if x != y {
			return cmp.Compare(x, y)
		}
	}
	return cmp.Compare(len(pa), len(pb))
}

var (
	releaseMu     sync.Mutex
	releaseBuilds = map[string]*build{} // by commit
)

// releaseBinary builds the guildhall binary of a commit of this
// repository's history, once per commit and machine: it is kept under the
// user's cache directory, so later runs cost nothing.
func releaseBinary(t *testing.T, r release) string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		skipUpgrade(t, "git is not installed")
	}
	if out, err := exec.Command("git", "cat-file", "-e", r.commit+"^{commit}").CombinedOutput(); err != nil {
		skipUpgrade(t, "commit %s of release %s is not in this clone's history (a shallow clone? git fetch --unshallow): %v %s",
			r.commit, r.version, err, out)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	path := filepath.Join(cache, "guildhall-upgrade-test", r.commit, "guildhall")
	releaseMu.Lock()
	b := releaseBuilds[r.commit]
	if b == nil {
		b = &build{path: path}
		releaseBuilds[r.commit] = b
	}
	releaseMu.Unlock()
	b.once.Do(func() {
		if _, err := os.Stat(path); err == nil {
			return
		}
		b.err = buildCommit(r.commit, path)
	})
	if b.err != nil {
		t.Fatalf("build release %s (%s): %v", r.version, r.commit, b.err)
	}
	return b.path
}

// buildCommit extracts a commit's tree (git archive) and builds its
// cmd/guildhall into path, atomically.
func buildCommit(commit, path string) error {
	src, err := os.MkdirTemp("", "guildhall-release-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(src)
	archive := exec.Command("git", "archive", commit)
	archive.Dir = filepath.Join("..", "..") // from a subdirectory, git archive takes only its subtree
	untar := exec.Command("tar", "-x", "-C", src)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		return err
	}
	untar.Stdin = pipe
	var errs bytes.Buffer
	archive.Stderr, untar.Stderr = &errs, &errs
	if err := untar.Start(); err != nil {
		return err
	}
	if err := archive.Run(); err != nil {
		return fmt.Errorf("git archive: %v %s", err, errs.String())
	}
	if err := untar.Wait(); err != nil {
		return fmt.Errorf("tar: %v %s", err, errs.String())
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	cmd := exec.Command("go", "build", "-o", tmp, "./cmd/guildhall")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1") // the SQLite driver needs cgo
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build: %v\n%s", err, out)
	}
	return os.Rename(tmp, path)
}

// stop ends an instance with SIGTERM (a clean shutdown), or SIGKILL after
// 20 seconds.
func (in *instance) stop(t *testing.T) {
	t.Helper()
	_ = in.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-in.exited:
	case <-time.After(20 * time.Second):
		t.Errorf("%s did not stop within 20 s of SIGTERM", in.name)
		in.kill()
	}
}

// kinPattern compiles a contract pattern as kin-openapi does.
func kinPattern(t *testing.T, p string) *regexp.Regexp {
	t.Helper()
	re, err := regexp.Compile(regexp.MustCompile(`\\u([0-9A-F]{4})`).ReplaceAllString(p, `\x{$1}`))
	if err != nil {
		t.Fatalf("pattern %q: %v", p, err)
	}
	return re
}

// loosely finds a character a release's contract let names hold that the
// current rule refuses, "" when there is none: what its users may have
// stored.
func loosely(t *testing.T, r release) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(r.dir, r.version+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := openapi3.NewLoader().LoadFromData(data)
	if err != nil {
		t.Fatalf("release %s contract: %v", r.version, err)
	}
	name := kinPattern(t, doc.Components.Schemas["Name"].Value.Pattern)
	display := kinPattern(t, doc.Components.Schemas["DisplayName"].Value.Pattern)
	for _, c := range []string{"\u200B", "\u00AD", "\u3164", "\u2028", "\U000E0020", "\u180E"} {
		if name.MatchString(c) && display.MatchString(c) && names.Check(c) != "" {
			return c
		}
	}
	return ""
}

// TestUpgradeFromReleases starts each recorded release's binary on a fresh
// store (SQLite and PostgreSQL), writes a sample of every resource through
// its API (with names its contract allowed and the current one refuses),
// stops it, and starts the current binary on the same store: every answer
// of a walk of the current contract's reads matches the current contract
// (checked by the client and by the server itself), the names are cleaned
// and each change is an event by the system, the export imports back with
// no change, and a user PUT back as read is 200.
func TestUpgradeFromReleases(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs released binaries")
	}
	if _, err := exec.LookPath("git"); err != nil {
		skipUpgrade(t, "git is not installed")
	}
	for _, r := range releases(t) {
		t.Run(r.version, func(t *testing.T) {
			old := releaseBinary(t, r)
			bad := loosely(t, r)
			for _, kind := range []string{testenv.SQLite, testenv.Postgres} {
				t.Run(kind, func(t *testing.T) {
					if kind == testenv.Postgres {
						testenv.RequirePostgres(t)
					}
					t.Parallel()
					upgradeFrom(t, r, old, bad, kind)
				})
			}
		})
	}
}

// sample is what upgradeFrom wrote with the old binary.
type sample struct {
	alice, bob, tokenID string
	bad                 string
	categories          bool
}

func upgradeFrom(t *testing.T, r release, old, bad, kind string) {
	s := newStore(t, kind)
	plain := &http.Client{Timeout: 20 * time.Second} // the old binary answers by its own contract
	in := startBinary(t, old, kind+"-"+r.version, s).ready(t, plain)
	smp := writeSample(t, plain, in.URL, s.token, r, bad)
	in.stop(t)

	c := newClient(t) // every answer checked against the current contract
	cur := start(t, kind+"-current", s, "GUILDHALL_CONTRACT_CHECK=true").ready(t, c)
	base, tok := cur.URL, s.token
	walkReads(t, c, base, tok, smp)

	if bad != "" {
		for _, w := range []struct{ path, field, want string }{
			{"/channels/ops", "name", "admin"},
			{"/channels/void", "name", "void"},
			{"/roles/mods", "name", "Moderator"},
			{"/users/" + smp.alice, "display_name", "Alice"},
		} {
			got := decode[map[string]any](t, must(t, c, base, http.StatusOK, "GET", w.path, tok, nil))[w.field]
			if got != w.want {
				t.Errorf("%s %s = %+q, want %+q", w.path, w.field, got, w.want)
			}
		}
		toks := decode[page](t, must(t, c, base, http.StatusOK, "GET", "/users/"+smp.alice+"/tokens", tok, nil))
		if i := slices.IndexFunc(toks.Items, func(it item) bool { return it.ID == smp.tokenID }); i < 0 || toks.Items[i].Name != "laptop" {
			t.Errorf("alice's tokens %+v, want %s named laptop", toks.Items, smp.tokenID)
		}
		// Each cleaned name is an event by the system.
		got := map[string]bool{}
		for _, ev := range auditAll(t, c, base, tok) {
			if ev.Reason != nil && *ev.Reason == guild.CleanReason {
				if ev.ActorID != nil {
					t.Errorf("cleaning event %s %s has actor %s, want the system's (null)", ev.Type, ev.Subject, *ev.ActorID)
				}
				got[ev.Type+" "+ev.Subject] = true
			}
		}
		for _, w := range []string{"channel.renamed channel:ops", "channel.renamed channel:void", "role.renamed role:mods",
			"user.updated user:" + smp.alice, "user.token.renamed user:" + smp.alice} {
			if !got[w] {
				t.Errorf("no cleaning event %s; got %v", w, got)
			}
		}
	}

	// What was just exported imports back with no change.
	exported := must(t, c, base, http.StatusOK, "GET", "/export", tok, nil)
	res := decode[struct {
		Changes []any `json:"changes"`
	}](t, mustRaw(t, c, base, http.StatusOK, "POST", "/import?dry_run=true", tok, exported))
	if len(res.Changes) != 0 {
		t.Errorf("importing the export lists changes: %v", res.Changes)
	}
	// A user PUT back as read is 200.
	u := decode[map[string]any](t, must(t, c, base, http.StatusOK, "GET", "/users/"+smp.alice, tok, nil))
	put := map[string]any{"username": u["username"], "display_name": u["display_name"], "status": u["status"]}
	if e, ok := u["email"]; ok && e != nil {
		put["email"] = e
	}
	must(t, c, base, http.StatusOK, "PUT", "/users/"+smp.alice, tok, put)

	cur.stop(t)
	if strings.Contains(cur.stderr.String(), "contract violation") {
		t.Errorf("the current binary logged contract violations:\n%s", cur.stderr.String())
	}
}

// writeSample writes one of each resource through a release's API.
func writeSample(t *testing.T, c *http.Client, base, tok string, r release, bad string) sample {
	t.Helper()
	smp := sample{bad: bad}
	data, err := os.ReadFile(filepath.Join(r.dir, r.version+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	smp.categories = bytes.Contains(data, []byte("parent_id"))
	w := func(method, path string, body any) []byte {
		t.Helper()
		return mustAny(t, c, base, method, path, tok, body)
	}
	w("POST", "/roles/admins/create", map[string]any{"name": "Admins", "permissions": []string{"MANAGE_CHANNELS", "MANAGE_ROLES", "VIEW_AUDIT_LOG"}, "color": "#e74c3c"})
	w("POST", "/roles/mods/create", map[string]any{"name": "Mod" + bad + "erator", "permissions": []string{"MANAGE_MESSAGES"}, "color": "#3498db"})
	w("POST", "/channels/ops/create", map[string]any{"name": "ad" + bad + "min", "topic": "Where the moderators meet."})
	voidName := bad
	if voidName == "" {
		voidName = "void"
	}
	w("POST", "/channels/void/create", map[string]any{"name": voidName})
	w("POST", "/channels/general/create", map[string]any{"name": "General"})
	alice := decode[item](t, w("POST", "/users", map[string]any{"username": "alice", "display_name": "Ali" + bad + "ce", "email": "alice@example.com"}))
	bob := decode[item](t, w("POST", "/users", map[string]any{"username": "bob"}))
	smp.alice, smp.bob = alice.ID, bob.ID
	aliceTok := decode[struct {
		ID    string `json:"id"`
		Token string `json:"token"`
	}](t, w("POST", "/users/"+alice.ID+"/tokens", map[string]any{"name": "lap" + bad + "top"}))
	smp.tokenID = aliceTok.ID
	w("POST", "/users/"+alice.ID+"/roles/mods", nil)
	w("POST", "/users/"+bob.ID+"/roles/admins", nil)
	w("POST", "/channels/ops/permissions", map[string]any{"target_type": "everyone", "allow": []string{}, "deny": []string{"VIEW_CHANNEL"}})
	w("POST", "/channels/ops/permissions", map[string]any{"target_type": "role", "target_id": "mods", "allow": []string{"VIEW_CHANNEL"}, "deny": []string{}})
	w("POST", "/channels/ops/permissions", map[string]any{"target_type": "user", "target_id": bob.ID, "allow": []string{"SEND_MESSAGES"}, "deny": []string{}})
	req, _ := http.NewRequest("PUT", base+"/api/channels/ops/attachment?attachmentID=notes.txt", strings.NewReader("minutes of the meeting\n"))
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "text/plain")
	if res, err := c.Do(req); err != nil || res.StatusCode/100 != 2 {
		t.Fatalf("upload an attachment: %v %v", err, res)
	} else {
		_ = res.Body.Close()
	}
	mustAny(t, c, base, "PUT", "/profile/link", aliceTok.Token, map[string]any{"links": map[string]any{"home": "https://example.com/alice"}})
	if smp.categories {
		w("POST", "/channels/staff/create", map[string]any{"name": "Staff", "kind": "category"})
		w("POST", "/channels/logs/create", map[string]any{"name": "Logs", "parent_id": "staff"})
		until := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
		patchMerge(t, c, base, tok, "/users/"+bob.ID, map[string]any{"timeout_until": until})
	}
	return smp
}

// mustAny sends a request and fails unless it answers 2xx.
func mustAny(t *testing.T, c *http.Client, base, method, path, tok string, body any) []byte {
	t.Helper()
	status, data, err := call(c, base, method, path, tok, body)
	if err != nil || status/100 != 2 {
		t.Fatalf("%s %s: %v status %d %s", method, path, err, status, data)
	}
	return data
}

// mustRaw sends a JSON body as it is.
func mustRaw(t *testing.T, c *http.Client, base string, want int, method, path, tok string, body []byte) []byte {
	t.Helper()
	req, err := http.NewRequest(method, base+"/api"+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+tok)
	res, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(res.Body)
	if res.StatusCode != want {
		t.Fatalf("%s %s: status %d, want %d; %s", method, path, res.StatusCode, want, buf.Bytes())
	}
	return buf.Bytes()
}

// patchMerge sends a JSON merge patch and fails unless it answers 2xx.
func patchMerge(t *testing.T, c *http.Client, base, tok, path string, body any) {
	t.Helper()
	data, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest("PATCH", base+"/api"+path, bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/merge-patch+json")
	req.Header.Set("Authorization", "Bearer "+tok)
	res, err := c.Do(req)
	if err != nil {
		t.Fatalf("PATCH %s: %v", path, err)
	}
	defer res.Body.Close()
	if res.StatusCode/100 != 2 {
		var buf bytes.Buffer
		_, _ = buf.ReadFrom(res.Body)
		t.Fatalf("PATCH %s: status %d %s", path, res.StatusCode, buf.Bytes())
	}
}

// event is an audit event as the upgrade test reads it.
type event struct {
	Seq     int64   `json:"seq"`
	Type    string  `json:"type"`
	ActorID *string `json:"actor_id"`
	Subject string  `json:"subject"`
	Reason  *string `json:"reason"`
}

// auditAll reads the whole audit log.
func auditAll(t *testing.T, c *http.Client, base, tok string) []event {
	t.Helper()
	var all []event
	cursor := ""
	for {
		p := "/audit-log?limit=200"
		if cursor != "" {
			p += "&cursor=" + url.QueryEscape(cursor)
		}
		pg := decode[struct {
			Items      []event `json:"items"`
			NextCursor *string `json:"next_cursor"`
		}](t, must(t, c, base, http.StatusOK, "GET", p, tok, nil))
		all = append(all, pg.Items...)
		if pg.NextCursor == nil {
			return all
		}
		cursor = *pg.NextCursor
	}
}

// walkReads asks every read operation of the current contract (GET), with
// the sample's IDs for its path parameters, and follows the pages of the
// users and the audit log: the client checks each answer against the
// contract, and each must succeed.
func walkReads(t *testing.T, c *http.Client, base, tok string, smp sample) {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromData(openapi.YAML)
	if err != nil {
		t.Fatal(err)
	}
	// No recorded release had webhooks: the walk makes one to read.
	hook := decode[map[string]any](t, must(t, c, base, http.StatusCreated, "POST", "/webhooks", tok,
		map[string]any{"url": "https://192.0.2.10/hook", "events": []string{"role.*"}}))["id"].(string)
	ids := map[string]string{"channelID": "ops", "roleID": "mods", "userID": smp.alice, "tokenID": smp.tokenID, "webhookID": hook}
	query := map[string]string{"attachmentID": "notes.txt"}
	asked := 0
	for _, path := range doc.Paths.InMatchingOrder() {
		op := doc.Paths.Value(path).Get
		if op == nil || path == "/events" { // a stream, not an answer
			continue
		}
		p, q := path, url.Values{}
		params := append(openapi3.Parameters{}, doc.Paths.Value(path).Parameters...)
		params = append(params, op.Parameters...)
		skip := false
		for _, pr := range params {
			v := pr.Value
			switch {
			case v.In == "path":
				id, ok := ids[v.Name]
				if !ok {
					t.Errorf("the walk knows no value for path parameter %s of GET %s: add one", v.Name, path)
					skip = true
				}
				p = strings.ReplaceAll(p, "{"+v.Name+"}", url.PathEscape(id))
			case v.In == "query" && v.Required:
				val, ok := query[v.Name]
				if !ok {
					t.Errorf("the walk knows no value for query parameter %s of GET %s: add one", v.Name, path)
					skip = true
				}
				q.Set(v.Name, val)
			}
		}
		if skip {
			continue
		}
		if len(q) > 0 {
			p += "?" + q.Encode()
		}
		status, body, err := call(c, base, "GET", p, tok, nil)
		if err != nil || status/100 != 2 {
			t.Errorf("GET %s: %v status %d %s", p, err, status, body)
		}
		asked++
	}
	for _, p := range []string{"/users", "/channels", "/roles"} {
		listAll(t, c, base, p, tok)
	}
	auditAll(t, c, base, tok)
	if asked < 20 {
		t.Errorf("the walk asked %d read operations only", asked)
	}
}
