package httpapi_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/guildhall/guildhall/gen/api"
	"github.com/guildhall/guildhall/internal/config"
	"github.com/guildhall/guildhall/internal/store"
	"github.com/guildhall/guildhall/internal/testenv"
)

// ---------------------------------------------------------------- helpers

// attPath is the URL (under /api) of one attachment.
func attPath(channel, id string) string {
	return "/channels/" + channel + "/attachment?attachmentID=" + url.QueryEscape(id)
}

// attMeta is an attachment's metadata as the API shows it.
type attMeta struct {
	ChannelID   string    `json:"channel_id"`
	ID          string    `json:"id"`
	ContentType string    `json:"content_type"`
	Size        int64     `json:"size"`
	SHA256      string    `json:"sha256"`
	CreatedBy   *string   `json:"created_by"`
	UpdatedBy   *string   `json:"updated_by"`
	CreatedAt   time.Time `json:"created_at"`
	UpdatedAt   time.Time `json:"updated_at"`
}

func attSum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// attETag is the ETag of an attachment with these bytes (their sha256) and
// this Content-Type: it changes when either does.
func attETag(sum, contentType string) string {
	return `"` + sum + "." + attSum([]byte(contentType))[:8] + `"`
}

func (m attMeta) etag() string { return attETag(m.SHA256, m.ContentType) }

// attBytes returns n bytes that differ from position to position (and from
// seed to seed), so a shifted or mixed-up range shows.
func attBytes(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i) ^ byte(i>>8)*31 ^ byte(i>>16)*7 ^ seed
	}
	return b
}

// attPut uploads body as the attachment.
func attPut(e *testenv.Env, token, channel, id, contentType string, body []byte, headers map[string]string) *testenv.Response {
	return e.Do(testenv.Req{Method: "PUT", Path: attPath(channel, id), Token: token, Body: body, Type: contentType, Headers: headers})
}

// attMustPut uploads body and checks that the answer is want.
func attMustPut(t testing.TB, e *testenv.Env, token, channel, id, contentType string, body []byte, want int) attMeta {
	t.Helper()
	res := attPut(e, token, channel, id, contentType, body, nil)
	if res.Status != want {
		t.Fatalf("PUT %s/%s: %d, want %d: %s", channel, id, res.Status, want, res.Body)
	}
	var m attMeta
	res.JSON(t, &m)
	return m
}

// attGet downloads an attachment.
func attGet(e *testenv.Env, token, channel, id string, headers map[string]string) *testenv.Response {
	return e.Do(testenv.Req{Method: "GET", Path: attPath(channel, id), Token: token, Headers: headers})
}

// attList reads a whole attachment list of a channel (one page of 200).
func attList(t testing.TB, e *testenv.Env, channel string) []attMeta {
	t.Helper()
	res := e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/channels/" + channel + "/attachments?limit=200", Token: e.Owner})
	var l struct {
		Items      []attMeta `json:"items"`
		NextCursor *string   `json:"next_cursor"`
	}
	res.JSON(t, &l)
	if l.NextCursor != nil {
		t.Fatalf("more than 200 attachments in %s", channel)
	}
	return l.Items
}

// attIntact checks that an attachment still has the bytes and metadata given.
func attIntact(t testing.TB, e *testenv.Env, channel string, want attMeta, data []byte) {
	t.Helper()
	res := attGet(e, e.Owner, channel, want.ID, nil)
	if res.Status != http.StatusOK || !bytes.Equal(res.Body, data) {
		t.Fatalf("%s/%s: %d with %d bytes, want 200 with the %d previous bytes", channel, want.ID, res.Status, len(res.Body), len(data))
	}
	if got := res.Header.Get("ETag"); got != want.etag() {
		t.Fatalf("%s/%s: ETag %s, want %s", channel, want.ID, got, want.etag())
	}
	for _, m := range attList(t, e, channel) {
		if m.ID == want.ID {
			if attJSON(m) != attJSON(want) {
				t.Fatalf("metadata %s, want %s", attJSON(m), attJSON(want))
			}
			return
		}
	}
	t.Fatalf("%s/%s is not listed any more", channel, want.ID)
}

// attStorage is what the blob store holds: blob keys (files under
// <DataDir>/blobs on SQLite, distinct keys of blob_chunks not in the trash on
// PostgreSQL) and temporary files.
type attStorage struct {
	Blobs []string
	Tmp   []string
}

func attStored(t testing.TB, e *testenv.Env) attStorage {
	t.Helper()
	var s attStorage
	root := filepath.Join(e.Config.DataDir, "blobs")
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if strings.HasPrefix(filepath.ToSlash(rel), "tmp/") {
			s.Tmp = append(s.Tmp, rel)
		} else {
			s.Blobs = append(s.Blobs, d.Name())
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walk blobs: %v", err)
	}
	if e.Kind == testenv.Postgres {
		if len(s.Blobs) != 0 {
			t.Fatalf("blob files on PostgreSQL: %v", s.Blobs)
		}
		// Deleted blobs wait in the trash for the sweep (TestAttachmentsDownloadDuringReplace).
		// A blob an attachment points at is live even in the trash: the
		// instance's first AdoptOrphans, at start, may trash an upload's
		// blob between storing it and committing its metadata, and Sweep
		// never removes it (store.DBBlobs.AdoptOrphans).
		s.Blobs = attQueryStrings(t, e, `SELECT DISTINCT blob_key FROM blob_chunks
WHERE blob_key IN (SELECT blob_key FROM attachments) OR blob_key NOT IN (SELECT blob_key FROM blob_trash)`)
	}
	slices.Sort(s.Blobs)
	if len(s.Blobs) == 0 {
		s.Blobs = nil
	}
	return s
}

// attQueryStrings runs a query on the instance's PostgreSQL schema.
func attQueryStrings(t testing.TB, e *testenv.Env, query string, args ...any) []string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, e.Config.DatabaseURL)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, query, args...)
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return out
}

// attWaitStored waits until the blob store holds exactly want (the server
// may still be cleaning up after a client that went away).
func attWaitStored(t testing.TB, e *testenv.Env, want attStorage) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := attStored(t, e)
		if attJSON(got) == attJSON(want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("blob store holds %s, want %s", attJSON(got), attJSON(want))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// attTree lists every path under dir (directories with a trailing /).
func attTree(t testing.TB, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if d.IsDir() {
			rel += "/"
		}
		out = append(out, filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func attLimit(n int64) testenv.Option {
	return testenv.WithConfig(func(c *config.Config) { c.MaxAttachmentBytes = n })
}

func attJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("<%v>", err)
	}
	return string(b)
}

// attSweep removes the deleted database blobs as if their grace had passed.
func attSweep(t testing.TB, e *testenv.Env) {
	t.Helper()
	if _, err := e.App.Store.Blobs().Sweep(context.Background(), time.Now().Add(time.Minute)); err != nil {
		t.Fatalf("sweep: %v", err)
	}
}

func attIfMatch(tag string) map[string]string { return map[string]string{"If-Match": tag} }

// attMember creates a user holding a fresh role "<name>-role" with perms.
func attMember(t testing.TB, e *testenv.Env, name string, perms ...string) testenv.User {
	t.Helper()
	u := e.NewUser(name)
	e.NewRole(name+"-role", perms...)
	e.Assign(u.ID, name+"-role")
	return u
}

func attHasField(p api.Problem, location string) bool {
	if p.Errors == nil {
		return false
	}
	for _, f := range *p.Errors {
		if f.Location == location {
			return true
		}
	}
	return false
}

// ---------------------------------------------------------------- tests

// Upload, read, replace and delete, with the typed client for the contract.
func TestAttachmentsLifecycle(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		e.NewChannel("ops")
		alice := e.NewUser("alice")
		bob := attMember(t, e, "bob", "MANAGE_MESSAGES")
		ctx := t.Context()
		png := append([]byte("\x89PNG\r\n\x1a\n"), attBytes(3000, 1)...)

		created, err := e.Client(alice.Token).PutAttachmentWithBodyWithResponse(ctx, "ops",
			&api.PutAttachmentParams{AttachmentID: "logo.png"}, "image/png", bytes.NewReader(png))
		if err != nil {
			t.Fatal(err)
		}
		if created.StatusCode() != http.StatusCreated || created.JSON201 == nil {
			t.Fatalf("create: %d %s", created.StatusCode(), created.Body)
		}
		a := created.JSON201
		if a.ChannelId != "ops" || a.Id != "logo.png" || a.ContentType != "image/png" || a.Size != int64(len(png)) ||
			a.Sha256 != attSum(png) || a.CreatedBy.MustGet() != alice.ID || a.UpdatedBy.MustGet() != alice.ID {
			t.Errorf("created %s", attJSON(a))
		}
		for _, ts := range []time.Time{a.CreatedAt.Time(), a.UpdatedAt.Time()} {
			if ts.Location() != time.UTC || ts.Nanosecond()%1000 != 0 || time.Since(ts) > time.Minute {
				t.Errorf("timestamp %v is not a recent UTC time with microsecond precision", ts)
			}
		}
		if !a.CreatedAt.Time().Equal(a.UpdatedAt.Time()) {
			t.Errorf("new attachment: created_at %v != updated_at %v", a.CreatedAt, a.UpdatedAt)
		}
		h := created.HTTPResponse.Header
		if h.Get("ETag") != attETag(attSum(png), "image/png") {
			t.Errorf("ETag %s, want the sha256 %s and the type's digest", h.Get("ETag"), attSum(png))
		}
		loc := h.Get("Location")
		if loc != "/api/channels/ops/attachment?attachmentID=logo.png" {
			t.Errorf("Location %q", loc)
		}
		stored := attStored(t, e)
		if len(stored.Blobs) != 1 || len(stored.Tmp) != 0 {
			t.Fatalf("after the first upload the blob store holds %s", attJSON(stored))
		}
		firstBlob := stored.Blobs[0]

		// GET at the Location.
		res := e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: strings.TrimPrefix(loc, "/api"), Token: alice.Token})
		if !bytes.Equal(res.Body, png) {
			t.Errorf("GET served %d bytes, not the %d uploaded", len(res.Body), len(png))
		}
		for k, v := range map[string]string{
			"Content-Type": "image/png", "Content-Length": strconv.Itoa(len(png)), "ETag": attETag(attSum(png), "image/png"),
			"X-Content-Type-Options": "nosniff", "Accept-Ranges": "bytes",
		} {
			if got := res.Header.Get(k); got != v {
				t.Errorf("GET %s: %q, want %q", k, got, v)
			}
		}
		if d := res.Header.Get("Content-Disposition"); !strings.HasPrefix(d, "inline") {
			t.Errorf("GET Content-Disposition %q, want inline for image/png", d)
		}

		// HEAD: the same headers, no body.
		head := e.Must(http.StatusOK, testenv.Req{Method: "HEAD", Path: attPath("ops", "logo.png"), Token: alice.Token})
		if len(head.Body) != 0 {
			t.Errorf("HEAD sent %d bytes of body", len(head.Body))
		}
		for _, k := range []string{"Content-Type", "Content-Length", "ETag", "X-Content-Type-Options", "Content-Disposition", "Accept-Ranges"} {
			if head.Header.Get(k) != res.Header.Get(k) {
				t.Errorf("HEAD %s %q != GET %q", k, head.Header.Get(k), res.Header.Get(k))
			}
		}

		// Replace, by someone else holding MANAGE_MESSAGES.
		text := []byte("now it is text\n")
		replaced, err := e.Client(bob.Token).PutAttachmentWithBodyWithResponse(ctx, "ops",
			&api.PutAttachmentParams{AttachmentID: "logo.png"}, "text/plain; charset=utf-8", bytes.NewReader(text))
		if err != nil {
			t.Fatal(err)
		}
		if replaced.StatusCode() != http.StatusOK || replaced.JSON200 == nil {
			t.Fatalf("replace: %d %s", replaced.StatusCode(), replaced.Body)
		}
		r := replaced.JSON200
		if r.CreatedBy.MustGet() != alice.ID || r.UpdatedBy.MustGet() != bob.ID || !r.CreatedAt.Time().Equal(a.CreatedAt.Time()) ||
			r.UpdatedAt.Time().Before(a.UpdatedAt.Time()) || r.Size != int64(len(text)) || r.Sha256 != attSum(text) ||
			r.ContentType != "text/plain; charset=utf-8" {
			t.Errorf("replaced %s (created %s)", attJSON(r), attJSON(a))
		}
		if replaced.HTTPResponse.Header.Get("Location") != "" {
			t.Errorf("a replacement has a Location: %q", replaced.HTTPResponse.Header.Get("Location"))
		}
		if replaced.HTTPResponse.Header.Get("ETag") != attETag(attSum(text), "text/plain; charset=utf-8") {
			t.Errorf("replace ETag %q", replaced.HTTPResponse.Header.Get("ETag"))
		}
		res = attGet(e, alice.Token, "ops", "logo.png", nil)
		if res.Status != http.StatusOK || !bytes.Equal(res.Body, text) || res.Header.Get("Content-Type") != "text/plain; charset=utf-8" {
			t.Errorf("after replace: %d %q %q", res.Status, res.Header.Get("Content-Type"), res.Body)
		}
		// The old blob went after the commit; only the new one is left.
		stored = attStored(t, e)
		if len(stored.Blobs) != 1 || stored.Blobs[0] == firstBlob || len(stored.Tmp) != 0 {
			t.Errorf("after replacing, the blob store holds %s (first blob %s)", attJSON(stored), firstBlob)
		}

		// One event per change, naming the attachment.
		audit := e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/audit-log?type=channel.attachment.*", Token: e.Owner})
		var events struct {
			Items []struct {
				Type    string  `json:"type"`
				Subject string  `json:"subject"`
				ActorID *string `json:"actor_id"`
			} `json:"items"`
		}
		audit.JSON(t, &events)
		if len(events.Items) != 2 || events.Items[0].Type != "channel.attachment.updated" || events.Items[1].Type != "channel.attachment.created" ||
			events.Items[0].Subject != "attachment:ops/logo.png" || *events.Items[0].ActorID != bob.ID || *events.Items[1].ActorID != alice.ID {
			t.Errorf("events %s", audit.Body)
		}

		// The uploader deletes it (without MANAGE_MESSAGES).
		e.Must(http.StatusNoContent, testenv.Req{Method: "DELETE", Path: attPath("ops", "logo.png"), Token: alice.Token})
		for _, m := range []string{"GET", "HEAD", "DELETE"} {
			res := e.Do(testenv.Req{Method: m, Path: attPath("ops", "logo.png"), Token: alice.Token})
			if res.Status != http.StatusNotFound {
				t.Errorf("%s after delete: %d", m, res.Status)
			}
			if m != "HEAD" && res.Problem(t).Code != api.ProblemCodeNotFound {
				t.Errorf("%s after delete: %s", m, res.Body)
			}
		}
		if got := attList(t, e, "ops"); len(got) != 0 {
			t.Errorf("list after delete: %s", attJSON(got))
		}
		attWaitStored(t, e, attStorage{})
	})
}

// Only a safe list is served inline; everything a browser could run or
// render as a page is a download, and nothing is sniffed.
func TestAttachmentsDisposition(t *testing.T) {
	t.Parallel()
	cases := []struct {
		sent, served string
		inline       bool
	}{
		{"image/png", "image/png", true},
		{"image/jpeg", "image/jpeg", true},
		{"image/gif", "image/gif", true},
		{"image/webp", "image/webp", true},
		{"text/plain", "text/plain", true},
		{"text/plain; charset=utf-8", "text/plain; charset=utf-8", true},
		{"TEXT/Plain;Charset=UTF-8", "text/plain; charset=UTF-8", true},
		{"IMAGE/PNG", "image/png", true},
		{"text/html", "text/html", false},
		{"text/html; charset=utf-8", "text/html; charset=utf-8", false},
		{"application/xhtml+xml", "application/xhtml+xml", false},
		{"image/svg+xml", "image/svg+xml", false},
		{"application/javascript", "application/javascript", false},
		{"text/javascript", "text/javascript", false},
		{"application/octet-stream", "application/octet-stream", false},
		{"application/pdf", "application/pdf", false},
		{"text/xml", "text/xml", false},
		{"application/json", "application/json", false},
		{"image/bmp", "image/bmp", false},
		{"video/mp4", "video/mp4", false},
	}
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		e.NewChannel("files")
		for i, tc := range cases {
			t.Run(tc.sent, func(t *testing.T) {
				id := "f" + strconv.Itoa(i)
				body := []byte("<script>alert(1)</script>")
				m := attMustPut(t, e, e.Owner, "files", id, tc.sent, body, http.StatusCreated)
				if m.ContentType != tc.served {
					t.Errorf("stored content_type %q, want %q", m.ContentType, tc.served)
				}
				for _, method := range []string{"GET", "HEAD"} {
					res := e.Must(http.StatusOK, testenv.Req{Method: method, Path: attPath("files", id), Token: e.Owner})
					if ct := res.Header.Get("Content-Type"); ct != tc.served {
						t.Errorf("%s Content-Type %q, want %q", method, ct, tc.served)
					}
					if res.Header.Get("X-Content-Type-Options") != "nosniff" {
						t.Errorf("%s X-Content-Type-Options %q", method, res.Header.Get("X-Content-Type-Options"))
					}
					d := res.Header.Get("Content-Disposition")
					want := "attachment"
					if tc.inline {
						want = "inline"
					}
					if disp, _, _ := strings.Cut(d, ";"); disp != want {
						t.Errorf("%s Content-Disposition %q, want %s", method, d, want)
					}
					if !strings.Contains(d, "filename*=UTF-8''"+id) {
						t.Errorf("%s Content-Disposition %q names no file", method, d)
					}
				}
			})
		}
	})
}

// Range, If-None-Match and zero-byte attachments.
func TestAttachmentsRangeAndConditional(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		e.NewChannel("ops")
		data := attBytes(1000, 3)
		m := attMustPut(t, e, e.Owner, "ops", "data.bin", "application/octet-stream", data, http.StatusCreated)
		tag := m.etag()

		// RFC 9110 §14: one satisfiable range is a 206, an unsatisfiable one
		// a 416; anything else is ignored (docs/design.md §12): 200 with every byte.
		for _, tc := range []struct {
			name, method, rng string
			want              int
			from, to          int // inclusive, for 206
		}{
			{"first bytes", "GET", "bytes=0-9", 206, 0, 9},
			{"middle", "GET", "bytes=2-5", 206, 2, 5},
			{"open end", "GET", "bytes=990-", 206, 990, 999},
			{"suffix", "GET", "bytes=-3", 206, 997, 999},
			{"suffix longer than the bytes", "GET", "bytes=-5000", 206, 0, 999},
			{"end past the size is clamped", "GET", "bytes=995-5000", 206, 995, 999},
			{"end far past any size is clamped", "GET", "bytes=995-99999999999999999999999", 206, 995, 999},
			{"last byte", "GET", "bytes=999-999", 206, 999, 999},
			{"unit in capitals", "GET", "BYTES=0-0", 206, 0, 0},
			{"start at the size", "GET", "bytes=1000-", 416, 0, 0},
			{"start past the size", "GET", "bytes=5000-6000", 416, 0, 0},
			{"empty suffix", "GET", "bytes=-0", 416, 0, 0},
			{"unparseable", "GET", "bytes=abc", 200, 0, 0},
			{"no dash", "GET", "bytes=5", 200, 0, 0},
			{"end before start", "GET", "bytes=5-3", 200, 0, 0},
			{"another unit", "GET", "items=0-5", 200, 0, 0},
			{"no unit", "GET", "0-5", 200, 0, 0},
			{"several ranges", "GET", "bytes=0-1,5-6", 200, 0, 0},
			{"several ranges, one unsatisfiable", "GET", "bytes=0-1,5000-6000", 200, 0, 0},
			{"HEAD ignores a range", "HEAD", "bytes=0-9", 200, 0, 0},
			{"HEAD ignores an unsatisfiable range", "HEAD", "bytes=5000-", 200, 0, 0},
		} {
			t.Run(tc.name, func(t *testing.T) {
				res := e.Do(testenv.Req{Method: tc.method, Path: attPath("ops", "data.bin"), Token: e.Owner,
					Headers: map[string]string{"Range": tc.rng}})
				if res.Status != tc.want {
					t.Fatalf("%s %s: %d, want %d", tc.method, tc.rng, res.Status, tc.want)
				}
				switch tc.want {
				case http.StatusRequestedRangeNotSatisfiable:
					if p := res.Problem(t); p.Code != api.ProblemCodeRangeNotSatisfiable {
						t.Errorf("%s: problem %s", tc.rng, res.Body)
					}
					if cr := res.Header.Get("Content-Range"); cr != "bytes */1000" {
						t.Errorf("%s: Content-Range %q, want bytes */1000", tc.rng, cr)
					}
					if res.Header.Get("Content-Disposition") != "" {
						t.Errorf("%s: a problem with Content-Disposition %q", tc.rng, res.Header.Get("Content-Disposition"))
					}
					return
				case http.StatusOK:
					want := data
					if tc.method == "HEAD" {
						want = nil
					}
					if !bytes.Equal(res.Body, want) || res.Header.Get("Content-Length") != "1000" || res.Header.Get("Content-Range") != "" {
						t.Errorf("%s %s: %d bytes, Content-Length %q, Content-Range %q; want the whole 1000 bytes",
							tc.method, tc.rng, len(res.Body), res.Header.Get("Content-Length"), res.Header.Get("Content-Range"))
					}
					return
				}
				if !bytes.Equal(res.Body, data[tc.from:tc.to+1]) {
					t.Errorf("%s: %x, want %x", tc.rng, res.Body, data[tc.from:tc.to+1])
				}
				if cr := res.Header.Get("Content-Range"); cr != fmt.Sprintf("bytes %d-%d/1000", tc.from, tc.to) {
					t.Errorf("%s: Content-Range %q", tc.rng, cr)
				}
				if cl := res.Header.Get("Content-Length"); cl != strconv.Itoa(tc.to-tc.from+1) {
					t.Errorf("%s: Content-Length %q", tc.rng, cl)
				}
				if res.Header.Get("ETag") != tag || res.Header.Get("X-Content-Type-Options") != "nosniff" {
					t.Errorf("%s: headers %v", tc.rng, res.Header)
				}
			})
		}

		// If-Range: the range only while the validator is current.
		lastModified := m.UpdatedAt.UTC().Format(http.TimeFormat)
		for _, tc := range []struct {
			name, ifRange string
			want          int
		}{
			{"current ETag", tag, 206},
			{"another ETag", `"` + attSum([]byte("x")) + `"`, 200},
			{"weak current ETag", "W/" + tag, 200},
			{"Last-Modified", lastModified, 206},
			{"an older date", m.UpdatedAt.Add(-time.Hour).UTC().Format(http.TimeFormat), 200},
			{"not a validator", "yesterday", 200},
		} {
			t.Run("If-Range "+tc.name, func(t *testing.T) {
				res := attGet(e, e.Owner, "ops", "data.bin", map[string]string{"Range": "bytes=0-9", "If-Range": tc.ifRange})
				if res.Status != tc.want {
					t.Fatalf("%d, want %d", res.Status, tc.want)
				}
			})
		}

		// Preconditions on a read (RFC 9110 §13.2.2): If-Match, else
		// If-Unmodified-Since, answer 412 as a problem; If-None-Match, else
		// If-Modified-Since, answer 304.
		before := m.UpdatedAt.Add(-time.Hour).UTC().Format(http.TimeFormat)
		after := m.UpdatedAt.Add(time.Hour).UTC().Format(http.TimeFormat)
		for _, tc := range []struct {
			name    string
			headers map[string]string
			want    int
		}{
			{"If-Match current", map[string]string{"If-Match": tag}, 200},
			{"If-Match star", map[string]string{"If-Match": "*"}, 200},
			{"If-Match one of several", map[string]string{"If-Match": `"a", ` + tag}, 200},
			{"If-Match stale", map[string]string{"If-Match": `"` + attSum([]byte("x")) + `"`}, 412},
			{"If-Match weak current", map[string]string{"If-Match": "W/" + tag}, 412},
			{"If-Match unparseable", map[string]string{"If-Match": "nonsense"}, 412},
			{"If-Unmodified-Since later", map[string]string{"If-Unmodified-Since": after}, 200},
			{"If-Unmodified-Since Last-Modified", map[string]string{"If-Unmodified-Since": lastModified}, 200},
			{"If-Unmodified-Since earlier", map[string]string{"If-Unmodified-Since": before}, 412},
			{"If-Unmodified-Since unparseable is ignored", map[string]string{"If-Unmodified-Since": "soon"}, 200},
			{"If-Match wins over If-Unmodified-Since", map[string]string{"If-Match": tag, "If-Unmodified-Since": before}, 200},
			{"If-Modified-Since Last-Modified", map[string]string{"If-Modified-Since": lastModified}, 304},
			{"If-Modified-Since later", map[string]string{"If-Modified-Since": after}, 304},
			{"If-Modified-Since earlier", map[string]string{"If-Modified-Since": before}, 200},
			{"If-None-Match wins over If-Modified-Since", map[string]string{"If-None-Match": `"x"`, "If-Modified-Since": after}, 200},
			{"412 before 304", map[string]string{"If-Match": `"x"`, "If-None-Match": tag}, 412},
			{"304 before 416", map[string]string{"If-None-Match": tag, "Range": "bytes=5000-"}, 304},
		} {
			for _, method := range []string{"GET", "HEAD"} {
				t.Run(method+" "+tc.name, func(t *testing.T) {
					res := e.Do(testenv.Req{Method: method, Path: attPath("ops", "data.bin"), Token: e.Owner, Headers: tc.headers})
					if res.Status != tc.want {
						t.Fatalf("%d, want %d; %s", res.Status, tc.want, res.Body)
					}
					switch tc.want {
					case http.StatusPreconditionFailed:
						if method == "GET" {
							if p := res.Problem(t); p.Code != api.ProblemCodePreconditionFailed || !strings.Contains(*p.Detail, tag) {
								t.Errorf("problem %s, want precondition_failed naming %s", res.Body, tag)
							}
						} else if ct := res.Header.Get("Content-Type"); ct != "application/problem+json" {
							t.Errorf("HEAD 412 Content-Type %q", ct)
						}
					case http.StatusNotModified:
						if len(res.Body) != 0 || res.Header.Get("ETag") != tag || res.Header.Get("Last-Modified") != lastModified ||
							res.Header.Get("Cache-Control") != "private, no-cache" {
							t.Errorf("304 with %d bytes and headers %v", len(res.Body), res.Header)
						}
					case http.StatusOK:
						if res.Header.Get("Last-Modified") != lastModified || res.Header.Get("Cache-Control") != "private, no-cache" {
							t.Errorf("200 headers %v", res.Header)
						}
					}
				})
			}
		}

		for _, tc := range []struct {
			name, method, inm string
			want              int
		}{
			{"current ETag", "GET", tag, http.StatusNotModified},
			{"one of several", "GET", `"nope", ` + tag, http.StatusNotModified},
			{"star", "GET", "*", http.StatusNotModified},
			{"weak form of the current ETag", "GET", "W/" + tag, http.StatusNotModified},
			{"another ETag", "GET", `"` + attSum([]byte("x")) + `"`, http.StatusOK},
			{"HEAD with the current ETag", "HEAD", tag, http.StatusNotModified},
			{"HEAD with another ETag", "HEAD", `"other"`, http.StatusOK},
		} {
			t.Run("If-None-Match "+tc.name, func(t *testing.T) {
				res := e.Do(testenv.Req{Method: tc.method, Path: attPath("ops", "data.bin"), Token: e.Owner,
					Headers: map[string]string{"If-None-Match": tc.inm}})
				if res.Status != tc.want {
					t.Fatalf("%d, want %d", res.Status, tc.want)
				}
				if res.Header.Get("ETag") != tag {
					t.Errorf("ETag %q", res.Header.Get("ETag"))
				}
				wantBody := data
				if tc.want == http.StatusNotModified || tc.method == "HEAD" {
					wantBody = nil
				}
				if !bytes.Equal(res.Body, wantBody) {
					t.Errorf("body of %d bytes, want %d", len(res.Body), len(wantBody))
				}
			})
		}

		t.Run("zero bytes", func(t *testing.T) {
			m := attMustPut(t, e, e.Owner, "ops", "empty.txt", "text/plain", []byte{}, http.StatusCreated)
			if m.Size != 0 || m.SHA256 != attSum(nil) {
				t.Fatalf("empty upload: %s", attJSON(m))
			}
			res := e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: attPath("ops", "empty.txt"), Token: e.Owner})
			if len(res.Body) != 0 || res.Header.Get("Content-Length") != "0" || res.Header.Get("ETag") != m.etag() {
				t.Errorf("empty download: %q %v", res.Body, res.Header)
			}
			// Range is ignored on empty content (RFC 9110 allows a server to
			// ignore Range; no range of nothing can be served).
			res = attGet(e, e.Owner, "ops", "empty.txt", map[string]string{"Range": "bytes=0-0"})
			if res.Status != http.StatusOK || len(res.Body) != 0 {
				t.Errorf("range of an empty attachment: %d %q", res.Status, res.Body)
			}
			// Replacing with bytes and back to empty.
			attMustPut(t, e, e.Owner, "ops", "empty.txt", "text/plain", []byte("x"), http.StatusOK)
			m = attMustPut(t, e, e.Owner, "ops", "empty.txt", "text/plain", nil, http.StatusOK)
			attIntact(t, e, "ops", m, nil)
		})
	})
}

// Refused uploads answer a problem and change nothing: neither the previous
// version (bytes and metadata) nor the blob store nor the data directory.
func TestAttachmentsRefusedUploads(t *testing.T) {
	t.Parallel()
	const limit = 1024
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind, attLimit(limit))
		e.NewChannel("ops")
		prevData := []byte("the previous version")
		prev := attMustPut(t, e, e.Owner, "ops", "doc.txt", "text/plain", prevData, http.StatusCreated)
		staleTag := strconv.Quote(attSum([]byte("something else")))
		storedBefore := attStored(t, e)
		// The data directory and its parent (the test's own temporary
		// directory), where an escaping path would land.
		outer := filepath.Dir(e.Config.DataDir)
		treeBefore := attTree(t, outer)

		for _, tc := range []struct {
			name     string
			id       string
			ctype    string
			body     io.Reader // nil: no body
			chunked  bool      // send without Content-Length
			headers  map[string]string
			channel  string
			status   int
			code     api.ProblemCode
			location string // of the field error, for 400s
		}{
			{name: "no Content-Type", id: "doc.txt", body: strings.NewReader("new"), status: 415, code: api.ProblemCodeUnsupportedMediaType},
			{name: "malformed Content-Type", id: "doc.txt", ctype: "text", body: strings.NewReader("new"), status: 400, code: api.ProblemCodeValidation, location: "header.Content-Type"},
			{name: "wildcard Content-Type", id: "doc.txt", ctype: "image/*", body: strings.NewReader("new"), status: 415, code: api.ProblemCodeUnsupportedMediaType},
			{name: "any Content-Type", id: "doc.txt", ctype: "*/*", body: strings.NewReader("new"), status: 415, code: api.ProblemCodeUnsupportedMediaType},
			{name: "gzip Content-Encoding", id: "doc.txt", ctype: "text/plain", body: strings.NewReader("new"), headers: map[string]string{"Content-Encoding": "gzip"}, status: 415, code: api.ProblemCodeUnsupportedMediaType},
			{name: "identity then gzip Content-Encoding", id: "doc.txt", ctype: "text/plain", body: strings.NewReader("new"), headers: map[string]string{"Content-Encoding": "identity, gzip"}, status: 415, code: api.ProblemCodeUnsupportedMediaType},
			{name: "one byte past the limit", id: "doc.txt", ctype: "text/plain", body: bytes.NewReader(attBytes(limit+1, 0)), status: 413, code: api.ProblemCodePayloadTooLarge},
			{name: "far past the limit", id: "doc.txt", ctype: "text/plain", body: bytes.NewReader(attBytes(64*limit, 0)), status: 413, code: api.ProblemCodePayloadTooLarge},
			{name: "past the limit, chunked", id: "doc.txt", ctype: "text/plain", body: bytes.NewReader(attBytes(limit+1, 0)), chunked: true, status: 413, code: api.ProblemCodePayloadTooLarge},
			{name: "far past the limit, chunked", id: "doc.txt", ctype: "text/plain", body: bytes.NewReader(attBytes(300*limit, 0)), chunked: true, status: 413, code: api.ProblemCodePayloadTooLarge},
			{name: "megabytes past the limit", id: "doc.txt", ctype: "text/plain", body: bytes.NewReader(attBytes(8<<20, 0)), status: 413, code: api.ProblemCodePayloadTooLarge},
			{name: "megabytes past the limit, chunked", id: "doc.txt", ctype: "text/plain", body: bytes.NewReader(attBytes(8<<20, 0)), chunked: true, status: 413, code: api.ProblemCodePayloadTooLarge},
			{name: "new attachment past the limit", id: "new.txt", ctype: "text/plain", body: bytes.NewReader(attBytes(limit+1, 0)), chunked: true, status: 413, code: api.ProblemCodePayloadTooLarge},
			{name: "stale If-Match", id: "doc.txt", ctype: "text/plain", body: strings.NewReader("new"), headers: map[string]string{"If-Match": staleTag}, status: 412, code: api.ProblemCodePreconditionFailed},
			{name: "If-Match on a new attachment", id: "new.txt", ctype: "text/plain", body: strings.NewReader("new"), headers: map[string]string{"If-Match": strconv.Quote(prev.SHA256)}, status: 412, code: api.ProblemCodePreconditionFailed},
			{name: "If-Match star on a new attachment", id: "new.txt", ctype: "text/plain", body: strings.NewReader("new"), headers: map[string]string{"If-Match": "*"}, status: 412, code: api.ProblemCodePreconditionFailed},
			{name: "no such channel", channel: "nope", id: "doc.txt", ctype: "text/plain", body: strings.NewReader("new"), status: 404, code: api.ProblemCodeNotFound},
			{name: "parent directory", id: "../doc.txt", ctype: "text/plain", body: strings.NewReader("evil"), status: 400, code: api.ProblemCodeValidation, location: "query.attachmentID"},
			{name: "deep parent directory", id: "../../../../tmp/evil", ctype: "text/plain", body: strings.NewReader("evil"), status: 400, code: api.ProblemCodeValidation, location: "query.attachmentID"},
			{name: "slash", id: "a/b", ctype: "text/plain", body: strings.NewReader("evil"), status: 400, code: api.ProblemCodeValidation, location: "query.attachmentID"},
			{name: "absolute path", id: "/etc/passwd", ctype: "text/plain", body: strings.NewReader("evil"), status: 400, code: api.ProblemCodeValidation, location: "query.attachmentID"},
			{name: "backslash", id: `..\evil`, ctype: "text/plain", body: strings.NewReader("evil"), status: 400, code: api.ProblemCodeValidation, location: "query.attachmentID"},
			{name: "leading dot", id: ".hidden", ctype: "text/plain", body: strings.NewReader("evil"), status: 400, code: api.ProblemCodeValidation, location: "query.attachmentID"},
			{name: "dot dot", id: "..", ctype: "text/plain", body: strings.NewReader("evil"), status: 400, code: api.ProblemCodeValidation, location: "query.attachmentID"},
			{name: "leading dash", id: "-x", ctype: "text/plain", body: strings.NewReader("evil"), status: 400, code: api.ProblemCodeValidation, location: "query.attachmentID"},
			{name: "NUL", id: "a\x00b", ctype: "text/plain", body: strings.NewReader("evil"), status: 400, code: api.ProblemCodeValidation, location: "query.attachmentID"},
			{name: "space", id: "a b", ctype: "text/plain", body: strings.NewReader("evil"), status: 400, code: api.ProblemCodeValidation, location: "query.attachmentID"},
			{name: "empty", id: "", ctype: "text/plain", body: strings.NewReader("evil"), status: 400, code: api.ProblemCodeValidation, location: "query.attachmentID"},
			{name: "129 characters", id: strings.Repeat("a", 129), ctype: "text/plain", body: strings.NewReader("evil"), status: 400, code: api.ProblemCodeValidation, location: "query.attachmentID"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				channel := tc.channel
				if channel == "" {
					channel = "ops"
				}
				res := attSend(t, e, "PUT", attPath(channel, tc.id), e.Owner, tc.ctype, tc.headers, tc.body, tc.chunked)
				if res.Status != tc.status {
					t.Fatalf("%d, want %d: %s", res.Status, tc.status, res.Body)
				}
				p := res.Problem(t)
				if p.Code != tc.code {
					t.Errorf("code %s, want %s", p.Code, tc.code)
				}
				if tc.location != "" && !attHasField(p, tc.location) {
					t.Errorf("no error at %s: %s", tc.location, res.Body)
				}
				attIntact(t, e, "ops", prev, prevData)
				if got := attList(t, e, "ops"); len(got) != 1 {
					t.Errorf("attachments after a refused upload: %s", attJSON(got))
				}
				attWaitStored(t, e, storedBefore)
			})
		}
		// Reads and deletes refuse bad IDs the same way.
		for _, m := range []string{"GET", "HEAD", "DELETE"} {
			res := e.Do(testenv.Req{Method: m, Path: attPath("ops", "../doc.txt"), Token: e.Owner})
			if res.Status != http.StatusBadRequest {
				t.Errorf("%s ../doc.txt: %d, want 400", m, res.Status)
			}
		}
		// Nothing appeared anywhere in the data directory (the SQLite files,
		// if any, were already there).
		if after := attTree(t, outer); !slices.Equal(after, treeBefore) {
			t.Errorf("data dir changed:\nbefore %v\nafter  %v", treeBefore, after)
		}
		attIntact(t, e, "ops", prev, prevData)

		// Exactly the limit passes, with and without Content-Length.
		full := attBytes(limit, 9)
		for _, chunked := range []bool{false, true} {
			res := attSend(t, e, "PUT", attPath("ops", "doc.txt"), e.Owner, "application/octet-stream", nil, bytes.NewReader(full), chunked)
			if res.Status != http.StatusOK {
				t.Fatalf("exactly the limit (chunked %v): %d %s", chunked, res.Status, res.Body)
			}
			if got := attGet(e, e.Owner, "ops", "doc.txt", nil); !bytes.Equal(got.Body, full) {
				t.Fatalf("exactly the limit (chunked %v): read back %d bytes", chunked, len(got.Body))
			}
		}
	})
}

// attSend sends a request with a streamed body (chunked: no Content-Length)
// and reads the answer.
func attSend(t testing.TB, e *testenv.Env, method, path, token, ctype string, headers map[string]string, body io.Reader, chunked bool) *testenv.Response {
	t.Helper()
	if chunked && body != nil {
		body = struct{ io.Reader }{body} // hide the length from net/http
	}
	req, err := http.NewRequest(method, e.URL+"/api"+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if chunked {
		req.ContentLength = -1
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := e.HTTP.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return &testenv.Response{Status: resp.StatusCode, Header: resp.Header, Body: data}
}

// If-Match on PUT and DELETE: stale is 412 and changes nothing.
func TestAttachmentsIfMatch(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		e.NewChannel("ops")
		v1 := []byte("version one")
		m1 := attMustPut(t, e, e.Owner, "ops", "a.txt", "text/plain", v1, http.StatusCreated)
		tag1 := m1.etag()

		v2 := []byte("version two")
		res := attPut(e, e.Owner, "ops", "a.txt", "text/plain", v2, attIfMatch(tag1))
		if res.Status != http.StatusOK {
			t.Fatalf("PUT with the current ETag: %d %s", res.Status, res.Body)
		}
		var m2 attMeta
		res.JSON(t, &m2)
		tag2 := res.Header.Get("ETag")

		res = attPut(e, e.Owner, "ops", "a.txt", "text/plain", []byte("lost update"), attIfMatch(tag1))
		if res.Status != http.StatusPreconditionFailed || res.Problem(t).Code != api.ProblemCodePreconditionFailed {
			t.Fatalf("PUT with a stale ETag: %d %s", res.Status, res.Body)
		}
		attIntact(t, e, "ops", m2, v2)

		res = e.Do(testenv.Req{Method: "DELETE", Path: attPath("ops", "a.txt"), Token: e.Owner, Headers: attIfMatch(tag1)})
		if res.Status != http.StatusPreconditionFailed || res.Problem(t).Code != api.ProblemCodePreconditionFailed {
			t.Fatalf("DELETE with a stale ETag: %d %s", res.Status, res.Body)
		}
		attIntact(t, e, "ops", m2, v2)

		res = attPut(e, e.Owner, "ops", "a.txt", "text/plain", v2, attIfMatch("*"))
		if res.Status != http.StatusOK {
			t.Fatalf("PUT with If-Match *: %d %s", res.Status, res.Body)
		}
		if got := res.Header.Get("ETag"); got != tag2 {
			t.Errorf("the same bytes and type again: ETag %s, want %s unchanged", got, tag2)
		}

		// docs/design.md §12: the ETag changes with the Content-Type alone, so a
		// write based on the old type is refused, and a cached copy is not
		// revalidated as current.
		res = attPut(e, e.Owner, "ops", "a.txt", "text/markdown", v2, attIfMatch(tag2))
		if res.Status != http.StatusOK {
			t.Fatalf("PUT of a new type with the current ETag: %d %s", res.Status, res.Body)
		}
		tag3 := res.Header.Get("ETag")
		if tag3 == tag2 {
			t.Fatalf("the Content-Type changed but the ETag stayed %s", tag2)
		}
		for _, method := range []string{"GET", "HEAD"} {
			if got := e.Do(testenv.Req{Method: method, Path: attPath("ops", "a.txt"), Token: e.Owner,
				Headers: map[string]string{"If-None-Match": tag2}}); got.Status != http.StatusOK || got.Header.Get("ETag") != tag3 {
				t.Errorf("%s with If-None-Match of the old type: %d, ETag %s; want 200 with %s", method, got.Status, got.Header.Get("ETag"), tag3)
			}
		}
		res = attPut(e, e.Owner, "ops", "a.txt", "text/plain", v2, attIfMatch(tag2))
		if res.Status != http.StatusPreconditionFailed {
			t.Fatalf("PUT with the ETag of the old type: %d %s", res.Status, res.Body)
		}
		res = e.Do(testenv.Req{Method: "DELETE", Path: attPath("ops", "a.txt"), Token: e.Owner, Headers: attIfMatch(tag2)})
		if res.Status != http.StatusPreconditionFailed {
			t.Fatalf("DELETE with the ETag of the old type: %d %s", res.Status, res.Body)
		}
		tag2 = tag3
		// A missing attachment is 404 before 412.
		res = e.Do(testenv.Req{Method: "DELETE", Path: attPath("ops", "nope"), Token: e.Owner, Headers: attIfMatch(tag1)})
		if res.Status != http.StatusNotFound {
			t.Fatalf("DELETE of a missing attachment with If-Match: %d", res.Status)
		}
		e.Must(http.StatusNoContent, testenv.Req{Method: "DELETE", Path: attPath("ops", "a.txt"), Token: e.Owner, Headers: attIfMatch(tag2)})
		e.Must(http.StatusNotFound, testenv.Req{Method: "GET", Path: attPath("ops", "a.txt"), Token: e.Owner})
	})
}

// The list is paged by attachment ID: a walk sees every attachment that
// existed throughout exactly once, also while others are added.
func TestAttachmentsList(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		e.NewChannel("ops")
		e.NewChannel("other")
		var ids []string
		for i := range 11 {
			id := fmt.Sprintf("f%02d.txt", i*2)
			ids = append(ids, id)
			attMustPut(t, e, e.Owner, "ops", id, "text/plain", []byte(id), http.StatusCreated)
		}
		attMustPut(t, e, e.Owner, "other", "x.txt", "text/plain", []byte("x"), http.StatusCreated)

		type page struct {
			Items      []attMeta `json:"items"`
			NextCursor *string   `json:"next_cursor"`
		}
		walk := func(limit int, during func(pageNo int)) []string {
			var seen []string
			cursor := ""
			for n := 0; ; n++ {
				if n > 50 {
					t.Fatal("the walk does not end")
				}
				path := "/channels/ops/attachments?limit=" + strconv.Itoa(limit)
				if cursor != "" {
					path += "&cursor=" + url.QueryEscape(cursor)
				}
				var p page
				e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: path, Token: e.Owner}).JSON(t, &p)
				if len(p.Items) > limit {
					t.Fatalf("page of %d items with limit %d", len(p.Items), limit)
				}
				for _, it := range p.Items {
					if it.ChannelID != "ops" {
						t.Fatalf("item of channel %s in the list of ops", it.ChannelID)
					}
					seen = append(seen, it.ID)
				}
				if during != nil {
					during(n)
				}
				if p.NextCursor == nil {
					return seen
				}
				cursor = *p.NextCursor
			}
		}

		for _, limit := range []int{1, 3, 11, 200} {
			if got := walk(limit, nil); !slices.Equal(got, ids) {
				t.Errorf("walk with limit %d: %v, want %v", limit, got, ids)
			}
		}

		// Insert before and after the cursor while walking.
		added := 0
		got := walk(3, func(n int) {
			for _, id := range []string{fmt.Sprintf("f%02d.txt", n*4+1), fmt.Sprintf("a%02d.txt", n), fmt.Sprintf("z%02d.txt", n)} {
				attMustPut(t, e, e.Owner, "ops", id, "text/plain", []byte(id), http.StatusCreated)
				added++
			}
		})
		count := map[string]int{}
		for _, id := range got {
			count[id]++
			if count[id] > 1 {
				t.Errorf("%s seen twice: %v", id, got)
			}
		}
		for _, id := range ids {
			if count[id] != 1 {
				t.Errorf("%s seen %d times during inserts: %v", id, count[id], got)
			}
		}
		if !slices.IsSorted(got) {
			t.Errorf("walk not in ID order: %v", got)
		}
		if n := len(attList(t, e, "ops")); n != len(ids)+added {
			t.Errorf("%d attachments after the walk, want %d", n, len(ids)+added)
		}

		// A cursor belongs to its channel; a bad one is a 400.
		var p page
		e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/channels/ops/attachments?limit=2", Token: e.Owner}).JSON(t, &p)
		for _, path := range []string{
			"/channels/other/attachments?cursor=" + url.QueryEscape(*p.NextCursor),
			"/channels/ops/attachments?cursor=bm90LWEtY3Vyc29y",
			"/channels/ops/attachments?limit=0",
			"/channels/ops/attachments?limit=201",
		} {
			res := e.Do(testenv.Req{Method: "GET", Path: path, Token: e.Owner})
			if res.Status != http.StatusBadRequest || res.Problem(t).Code != api.ProblemCodeValidation {
				t.Errorf("%s: %d %s", path, res.Status, res.Body)
			}
		}
		e.Must(http.StatusNotFound, testenv.Req{Method: "GET", Path: "/channels/nope/attachments", Token: e.Owner})
	})
}

// Deleting a channel removes its attachments and their bytes, and only theirs.
func TestAttachmentsDeletedWithChannel(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		e.NewChannel("doomed")
		e.NewChannel("kept")
		for i := range 3 {
			attMustPut(t, e, e.Owner, "doomed", fmt.Sprintf("d%d", i), "application/octet-stream", attBytes(1000*(i+1), byte(i)), http.StatusCreated)
		}
		// A multi-chunk blob too (several rows on PostgreSQL).
		attMustPut(t, e, e.Owner, "doomed", "big", "application/octet-stream", attBytes(store.ChunkSize*2+5, 1), http.StatusCreated)
		keptData := []byte("kept")
		kept := attMustPut(t, e, e.Owner, "kept", "k", "text/plain", keptData, http.StatusCreated)
		if s := attStored(t, e); len(s.Blobs) != 5 {
			t.Fatalf("before: blob store holds %s, want 5 blobs", attJSON(s))
		}
		e.Must(http.StatusNoContent, testenv.Req{Method: "POST", Path: "/channels/doomed/delete", Token: e.Owner})
		s := attStored(t, e)
		if len(s.Blobs) != 1 || len(s.Tmp) != 0 {
			t.Fatalf("after deleting the channel the blob store holds %s, want only the kept channel's blob", attJSON(s))
		}
		if kind == testenv.Postgres {
			attSweep(t, e)
			if rows := attQueryStrings(t, e, "SELECT blob_key FROM blob_chunks"); len(rows) != 1 {
				t.Errorf("blob_chunks rows after the delete and a sweep: %d, want 1", len(rows))
			}
		}
		attIntact(t, e, "kept", kept, keptData)
		e.Must(http.StatusNotFound, testenv.Req{Method: "GET", Path: attPath("doomed", "d0"), Token: e.Owner})
		e.NewChannel("doomed")
		if got := attList(t, e, "doomed"); len(got) != 0 {
			t.Errorf("a re-created channel has attachments: %s", attJSON(got))
		}
		e.Must(http.StatusNotFound, testenv.Req{Method: "GET", Path: attPath("doomed", "d0"), Token: e.Owner})
	})
}

// Who may read, upload, replace and delete.
func TestAttachmentsPermissions(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		e.NewChannel("ops")
		alice := e.NewUser("alice")                                  // everyone's permissions: ATTACH_FILES, no MANAGE_MESSAGES
		bob := e.NewUser("bob")                                      // the same
		mod := attMember(t, e, "mod", "MANAGE_MESSAGES")             // may replace and delete others'
		blind := e.NewUser("blind")                                  // no VIEW_CHANNEL in ops
		noattach := e.NewUser("noattach")                            // no ATTACH_FILES in ops
		mute := e.NewUser("mute")                                    // no SEND_MESSAGES in ops, which drops ATTACH_FILES
		elsewhere := attMember(t, e, "elsewhere", "MANAGE_MESSAGES") // MANAGE_MESSAGES denied in ops
		e.SetOverwrite("ops", "user", blind.ID, nil, []string{"VIEW_CHANNEL"})
		e.SetOverwrite("ops", "user", noattach.ID, nil, []string{"ATTACH_FILES"})
		e.SetOverwrite("ops", "user", mute.ID, nil, []string{"SEND_MESSAGES"})
		e.SetOverwrite("ops", "user", elsewhere.ID, nil, []string{"MANAGE_MESSAGES"})

		aData := []byte("alice's file")
		a := attMustPut(t, e, alice.Token, "ops", "a.txt", "text/plain", aData, http.StatusCreated)

		forbidden := func(t *testing.T, res *testenv.Response, missing ...string) {
			t.Helper()
			if res.Status != http.StatusForbidden {
				t.Fatalf("%d, want 403: %s", res.Status, res.Body)
			}
			if len(res.Body) == 0 && res.Header.Get("Content-Type") == "application/problem+json" {
				return // HEAD: the problem's headers without its body
			}
			p := res.Problem(t)
			if p.Code != api.ProblemCodeForbidden || p.Reason == nil || *p.Reason != "missing_permissions" ||
				p.ChannelId == nil || *p.ChannelId != "ops" || p.MissingPermissions == nil || attJSON(*p.MissingPermissions) != attJSON(missing) {
				t.Errorf("problem %s, want missing %v in ops", res.Body, missing)
			}
		}

		for _, tc := range []struct {
			name    string
			run     func() *testenv.Response
			status  int
			missing []string
		}{
			// A channel blind cannot view is, to blind, a missing one
			// (docs/design.md §12), whether the attachment exists or not.
			{"blind cannot read", func() *testenv.Response { return attGet(e, blind.Token, "ops", "a.txt", nil) }, 404, nil},
			{"blind cannot read a missing one", func() *testenv.Response { return attGet(e, blind.Token, "ops", "nope.txt", nil) }, 404, nil},
			{"blind cannot HEAD", func() *testenv.Response {
				return e.Do(testenv.Req{Method: "HEAD", Path: attPath("ops", "a.txt"), Token: blind.Token})
			}, 404, nil},
			{"blind cannot list", func() *testenv.Response {
				return e.Do(testenv.Req{Method: "GET", Path: "/channels/ops/attachments", Token: blind.Token})
			}, 404, nil},
			{"blind cannot upload", func() *testenv.Response {
				return attPut(e, blind.Token, "ops", "b.txt", "text/plain", []byte("x"), nil)
			}, 404, nil},
			{"blind cannot replace", func() *testenv.Response {
				return attPut(e, blind.Token, "ops", "a.txt", "text/plain", []byte("x"), nil)
			}, 404, nil},
			{"blind cannot delete", func() *testenv.Response {
				return e.Do(testenv.Req{Method: "DELETE", Path: attPath("ops", "a.txt"), Token: blind.Token})
			}, 404, nil},
			{"blind cannot delete a missing one", func() *testenv.Response {
				return e.Do(testenv.Req{Method: "DELETE", Path: attPath("ops", "nope.txt"), Token: blind.Token})
			}, 404, nil},
			{"noattach can read", func() *testenv.Response { return attGet(e, noattach.Token, "ops", "a.txt", nil) }, 200, nil},
			{"noattach cannot upload", func() *testenv.Response {
				return attPut(e, noattach.Token, "ops", "n.txt", "text/plain", []byte("x"), nil)
			}, 403, []string{"ATTACH_FILES"}},
			{"mute cannot upload", func() *testenv.Response {
				return attPut(e, mute.Token, "ops", "m.txt", "text/plain", []byte("x"), nil)
			}, 403, []string{"ATTACH_FILES"}},
			{"bob cannot replace alice's", func() *testenv.Response {
				return attPut(e, bob.Token, "ops", "a.txt", "text/plain", []byte("bob was here"), nil)
			}, 403, []string{"MANAGE_MESSAGES"}},
			{"bob cannot delete alice's", func() *testenv.Response {
				return e.Do(testenv.Req{Method: "DELETE", Path: attPath("ops", "a.txt"), Token: bob.Token})
			}, 403, []string{"MANAGE_MESSAGES"}},
			{"MANAGE_MESSAGES denied in the channel cannot replace", func() *testenv.Response {
				return attPut(e, elsewhere.Token, "ops", "a.txt", "text/plain", []byte("x"), nil)
			}, 403, []string{"MANAGE_MESSAGES"}},
			{"MANAGE_MESSAGES denied in the channel cannot delete", func() *testenv.Response {
				return e.Do(testenv.Req{Method: "DELETE", Path: attPath("ops", "a.txt"), Token: elsewhere.Token})
			}, 403, []string{"MANAGE_MESSAGES"}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				res := tc.run()
				if tc.status == http.StatusForbidden {
					forbidden(t, res, tc.missing...)
				} else if res.Status != tc.status {
					t.Fatalf("%d, want %d: %s", res.Status, tc.status, res.Body)
				} else if tc.status == http.StatusNotFound && len(res.Body) > 0 {
					if p := res.Problem(t); *p.Detail != `Channel "ops" does not exist.` {
						t.Errorf("detail %q, want what a missing channel answers", *p.Detail)
					}
				} else if res.Status != tc.status {
					t.Fatalf("%d, want %d: %s", res.Status, tc.status, res.Body)
				}
				attIntact(t, e, "ops", a, aData)
				if got := attList(t, e, "ops"); len(got) != 1 {
					t.Errorf("attachments: %s", attJSON(got))
				}
			})
		}

		// Allowed: bob uploads his own, alice replaces her own, the
		// moderator replaces alice's (created_by stays), bob deletes his own,
		// the moderator deletes alice's.
		b := attMustPut(t, e, bob.Token, "ops", "b.txt", "text/plain", []byte("bob's"), http.StatusCreated)
		if *b.CreatedBy != bob.ID {
			t.Errorf("b.txt created_by %v", *b.CreatedBy)
		}
		res := attPut(e, alice.Token, "ops", "b.txt", "text/plain", []byte("alice on bob's"), nil)
		forbidden(t, res, "MANAGE_MESSAGES")
		a2 := attMustPut(t, e, alice.Token, "ops", "a.txt", "text/plain", []byte("alice again"), http.StatusOK)
		if *a2.CreatedBy != alice.ID || *a2.UpdatedBy != alice.ID {
			t.Errorf("alice's own replacement: %s", attJSON(a2))
		}
		a3 := attMustPut(t, e, mod.Token, "ops", "a.txt", "text/plain", []byte("moderated"), http.StatusOK)
		if *a3.CreatedBy != alice.ID || *a3.UpdatedBy != mod.ID {
			t.Errorf("moderator's replacement: %s", attJSON(a3))
		}
		// Alice is still the uploader after the moderator's replacement.
		attMustPut(t, e, alice.Token, "ops", "a.txt", "text/plain", []byte("mine still"), http.StatusOK)
		e.Must(http.StatusNoContent, testenv.Req{Method: "DELETE", Path: attPath("ops", "b.txt"), Token: bob.Token})
		e.Must(http.StatusNoContent, testenv.Req{Method: "DELETE", Path: attPath("ops", "a.txt"), Token: mod.Token})
		if got := attList(t, e, "ops"); len(got) != 0 {
			t.Errorf("attachments after deletes: %s", attJSON(got))
		}
		attWaitStored(t, e, attStorage{})
	})
}

// A client that goes away mid-body leaves the previous version intact and
// no temporary file or partial blob behind.
func TestAttachmentsInterruptedUpload(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		e.NewChannel("ops")
		prevData := attBytes(5000, 42)
		prev := attMustPut(t, e, e.Owner, "ops", "doc.bin", "application/octet-stream", prevData, http.StatusCreated)
		before := attStored(t, e)
		if len(before.Blobs) != 1 {
			t.Fatalf("blob store %s", attJSON(before))
		}
		host := strings.TrimPrefix(e.URL, "http://")
		head := func(extra string) string {
			return "PUT /api" + attPath("ops", "doc.bin") + " HTTP/1.1\r\nHost: " + host + "\r\nAuthorization: Bearer " + e.Owner +
				"\r\nContent-Type: application/octet-stream\r\n" + extra + "\r\n"
		}
		// rawSend writes the request and closes the connection without
		// waiting for an answer.
		rawSend := func(t *testing.T, parts ...[]byte) {
			conn, err := net.Dial("tcp", host)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range parts {
				if _, err := conn.Write(p); err != nil {
					t.Fatal(err)
				}
				time.Sleep(20 * time.Millisecond) // let the server start on the body
			}
			_ = conn.Close()
		}

		for _, tc := range []struct {
			name string
			run  func(t *testing.T)
		}{
			{"client body fails midway", func(t *testing.T) {
				body := io.MultiReader(bytes.NewReader(attBytes(10<<10, 1)), iotest.ErrReader(errors.New("disk on fire")))
				req, err := http.NewRequest("PUT", e.URL+"/api"+attPath("ops", "doc.bin"), body)
				if err != nil {
					t.Fatal(err)
				}
				req.ContentLength = 64 << 10
				req.Header.Set("Content-Type", "application/octet-stream")
				req.Header.Set("Authorization", "Bearer "+e.Owner)
				if resp, err := e.HTTP.Do(req); err == nil {
					resp.Body.Close()
					if resp.StatusCode < 400 {
						t.Fatalf("a failed body was answered %d", resp.StatusCode)
					}
				}
			}},
			{"connection closed before Content-Length", func(t *testing.T) {
				rawSend(t, []byte(head("Content-Length: 100000\r\n")), attBytes(5000, 2))
			}},
			{"connection closed past a database chunk", func(t *testing.T) {
				rawSend(t, []byte(head(fmt.Sprintf("Content-Length: %d\r\n", 4*store.ChunkSize))), attBytes(store.ChunkSize+1000, 3), attBytes(1000, 4))
			}},
			{"chunked body cut off", func(t *testing.T) {
				chunk := attBytes(4000, 5)
				rawSend(t, []byte(head("Transfer-Encoding: chunked\r\n")), fmt.Appendf(nil, "%x\r\n%s\r\n", len(chunk), chunk), []byte("fa0\r\nonly a few"))
			}},
			{"malformed chunked body", func(t *testing.T) {
				rawSend(t, []byte(head("Transfer-Encoding: chunked\r\n")), []byte("10\r\n0123456789abcdef\r\nzz\r\n"))
			}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				tc.run(t)
				attWaitStored(t, e, before)
				attIntact(t, e, "ops", prev, prevData)
			})
		}

		// The answer to a malformed body, when the client still listens, is a 400.
		conn, err := net.Dial("tcp", host)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := conn.Write([]byte(head("Transfer-Encoding: chunked\r\nConnection: close\r\n") + "10\r\n0123456789abcdef\r\nzz\r\n")); err != nil {
			t.Fatal(err)
		}
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("read answer: %v", err)
		}
		data, _ := io.ReadAll(resp.Body)
		res := &testenv.Response{Status: resp.StatusCode, Header: resp.Header, Body: data}
		if res.Status != http.StatusBadRequest || res.Problem(t).Code != api.ProblemCodeValidation {
			t.Errorf("malformed chunked body: %d %s", res.Status, data)
		}
		attWaitStored(t, e, before)
		attIntact(t, e, "ops", prev, prevData)

		if kind == testenv.Postgres {
			// The database blob store itself: a source that ends with
			// io.ErrUnexpectedEOF (how net/http reports a body cut short)
			// is a failure, not the end of the bytes.
			src := io.MultiReader(bytes.NewReader(attBytes(store.ChunkSize+10, 6)), iotest.ErrReader(io.ErrUnexpectedEOF))
			if info, err := e.App.Store.Blobs().Put(t.Context(), src, 1<<30); !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("Put of a body cut short: %+v %v, want io.ErrUnexpectedEOF", info, err)
			}
			attWaitStored(t, e, before)
		}
	})
}

// A blob of several database chunks round-trips, and ranges that cross chunk
// boundaries come back right.
func TestAttachmentsMultiChunk(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		e.NewChannel("ops")
		const size = 1<<20 + 3
		data := attBytes(size, 77)
		m := attMustPut(t, e, e.Owner, "ops", "big.bin", "application/octet-stream", data, http.StatusCreated)
		if m.Size != size || m.SHA256 != attSum(data) {
			t.Fatalf("metadata %s", attJSON(m))
		}
		if kind == testenv.Postgres {
			s := attStored(t, e)
			chunks := attQueryStrings(t, e, "SELECT chunk::text FROM blob_chunks WHERE blob_key = $1 ORDER BY chunk", s.Blobs[0])
			if want := []string{"0", "1", "2", "3", "4"}; !slices.Equal(chunks, want) {
				t.Errorf("chunks %v, want %v (chunks of %d bytes)", chunks, want, store.ChunkSize)
			}
		}
		res := e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: attPath("ops", "big.bin"), Token: e.Owner})
		if !bytes.Equal(res.Body, data) || res.Header.Get("Content-Length") != strconv.Itoa(size) {
			t.Fatalf("whole download: %d bytes (sha %s), want %d", len(res.Body), attSum(res.Body), size)
		}
		c := store.ChunkSize
		for _, r := range [][2]int{
			{c - 4, c + 4},         // across the first boundary
			{c - 1, c},             // the two bytes around it
			{c, c},                 // the first byte of a chunk
			{c - 1, c - 1},         // the last byte of a chunk
			{c/2 + 1, 3*c + 17},    // several whole chunks
			{4*c - 2, size - 1},    // into the short last chunk
			{size - 3, size - 1},   // the short last chunk alone
			{0, size - 1},          // everything
			{2*c - 100, 2*c + 100}, // across the middle boundary
		} {
			res := attGet(e, e.Owner, "ops", "big.bin", map[string]string{"Range": fmt.Sprintf("bytes=%d-%d", r[0], r[1])})
			if res.Status != http.StatusPartialContent || !bytes.Equal(res.Body, data[r[0]:r[1]+1]) {
				t.Errorf("range %d-%d: %d, %d bytes, equal %v", r[0], r[1], res.Status, len(res.Body), bytes.Equal(res.Body, data[r[0]:r[1]+1]))
			}
			if cr := res.Header.Get("Content-Range"); cr != fmt.Sprintf("bytes %d-%d/%d", r[0], r[1], size) {
				t.Errorf("range %d-%d: Content-Range %q", r[0], r[1], cr)
			}
		}
		res = attGet(e, e.Owner, "ops", "big.bin", map[string]string{"Range": "bytes=-5"})
		if res.Status != http.StatusPartialContent || !bytes.Equal(res.Body, data[size-5:]) {
			t.Errorf("suffix range: %d %x", res.Status, res.Body)
		}
		// Replacing a multi-chunk blob removes all its chunks.
		small := attMustPut(t, e, e.Owner, "ops", "big.bin", "application/octet-stream", []byte("small"), http.StatusOK)
		attIntact(t, e, "ops", small, []byte("small"))
		if kind == testenv.Postgres {
			attSweep(t, e)
			if rows := attQueryStrings(t, e, "SELECT blob_key FROM blob_chunks"); len(rows) != 1 {
				t.Errorf("blob_chunks rows after replacing and a sweep: %d, want 1", len(rows))
			}
		}
		if s := attStored(t, e); len(s.Blobs) != 1 {
			t.Errorf("blob store after replacing: %s", attJSON(s))
		}
	})
}

// Concurrent replacements of one attachment: every answer is a whole
// version, and exactly one blob is left at the end.
func TestAttachmentsConcurrentReplace(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		e.NewChannel("ops")
		versions := make([][]byte, 6)
		sums := map[string]bool{}
		for i := range versions {
			versions[i] = attBytes(20000+i, byte(i))
			sums[attSum(versions[i])] = true
		}
		errs := make(chan error, len(versions))
		for _, v := range versions {
			go func() {
				req, err := http.NewRequest("PUT", e.URL+"/api"+attPath("ops", "hot.bin"), bytes.NewReader(v))
				if err != nil {
					errs <- err
					return
				}
				req.Header.Set("Content-Type", "application/octet-stream")
				req.Header.Set("Authorization", "Bearer "+e.Owner)
				resp, err := e.HTTP.Do(req)
				if err != nil {
					errs <- err
					return
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusCreated {
					errs <- fmt.Errorf("status %d", resp.StatusCode)
					return
				}
				errs <- nil
			}()
		}
		for range versions {
			if err := <-errs; err != nil {
				t.Error(err)
			}
		}
		res := e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: attPath("ops", "hot.bin"), Token: e.Owner})
		if !sums[attSum(res.Body)] || res.Header.Get("ETag") != attETag(attSum(res.Body), "application/octet-stream") {
			t.Errorf("served %d bytes that are no uploaded version (ETag %s)", len(res.Body), res.Header.Get("ETag"))
		}
		// Each answer came after its commit and the removal of the blob it
		// replaced: one blob is left.
		if s := attStored(t, e); len(s.Blobs) != 1 || len(s.Tmp) != 0 {
			t.Errorf("blob store after concurrent replacements: %s", attJSON(s))
		}
	})
}

// A token revoked while its upload streams commits nothing: the write
// re-reads the caller's token, not just their user, before it commits.
func TestAttachmentsTokenRevokedDuringUpload(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind, attLimit(64<<20))
		e.NewChannel("ops")
		u := attMember(t, e, "uploader", "VIEW_CHANNEL", "SEND_MESSAGES", "ATTACH_FILES")
		tok := e.Must(201, testenv.Req{Method: "POST", Path: "/users/" + u.ID + "/tokens", Token: e.Owner,
			Body: map[string]any{"name": "upload"}}).Map(t)
		token, tokenID := tok["token"].(string), tok["id"].(string)
		before := attStored(t, e)

		pr, pw := io.Pipe()
		done := make(chan *testenv.Response, 1)
		go func() {
			done <- attSend(t, e, "PUT", attPath("ops", "big.bin"), token, "application/octet-stream", nil, pr, true)
		}()
		// 32 MiB is far more than the sockets buffer: once written, the
		// server is streaming the body, long past authentication.
		chunk := attBytes(1<<20, 7)
		for range 32 {
			if _, err := pw.Write(chunk); err != nil {
				t.Fatalf("write body: %v", err)
			}
		}
		e.Must(204, testenv.Req{Method: "DELETE", Path: "/users/" + u.ID + "/tokens/" + tokenID, Token: e.Owner})
		_, _ = pw.Write(chunk)
		_ = pw.Close()

		res := <-done
		if res.Status != http.StatusUnauthorized {
			t.Fatalf("upload with a token revoked midway: %s", res)
		}
		res.Problem(t)
		if l := attList(t, e, "ops"); len(l) != 0 {
			t.Errorf("listed after the refused upload: %s", attJSON(l))
		}
		attWaitStored(t, e, before)
	})
}

// A download that started before its attachment was replaced (or deleted)
// gets every byte of the version it started on: on disk the open file
// outlives its unlinking; in PostgreSQL the old chunks stay for a grace
// period, and the sweep removes them after it.
func TestAttachmentsDownloadDuringReplace(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		e.NewChannel("ops")
		old := attBytes(16<<20, 3)
		attMustPut(t, e, e.Owner, "ops", "big.bin", "application/octet-stream", old, http.StatusCreated)

		req, err := http.NewRequest("GET", e.URL+"/api"+attPath("ops", "big.bin"), nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+e.Owner)
		resp, err := e.HTTP.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		head := make([]byte, 100)
		if _, err := io.ReadFull(resp.Body, head); err != nil {
			t.Fatalf("start the download: %v", err)
		}

		attMustPut(t, e, e.Owner, "ops", "big.bin", "application/octet-stream", attBytes(1000, 9), http.StatusOK)
		rest, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("the download broke off after %d bytes: %v", 100+len(rest), err)
		}
		if got := append(head, rest...); !bytes.Equal(got, old) {
			t.Fatalf("downloaded %d bytes, not the %d of the version it started on", len(got), len(old))
		}

		if kind != testenv.Postgres {
			return
		}
		// The replaced blob is in the trash, its chunks still stored; the
		// sweep keeps it within the grace period and removes it after.
		live := attStored(t, e).Blobs
		all := attQueryStrings(t, e, "SELECT DISTINCT blob_key FROM blob_chunks")
		if len(live) != 1 || len(all) != 2 {
			t.Fatalf("after the replace: live blobs %v, stored %v", live, all)
		}
		ctx := context.Background()
		if n, err := e.App.Store.Blobs().Sweep(ctx, time.Now().Add(-store.BlobGrace)); err != nil || n != 0 {
			t.Fatalf("a sweep within the grace period removed %d (%v)", n, err)
		}
		if n, err := e.App.Store.Blobs().Sweep(ctx, time.Now().Add(time.Minute)); err != nil || n != 1 {
			t.Fatalf("a sweep past the grace period removed %d (%v), want 1", n, err)
		}
		if all := attQueryStrings(t, e, "SELECT DISTINCT blob_key FROM blob_chunks"); !slices.Equal(all, live) {
			t.Errorf("after the sweep: stored %v, want only the live %v", all, live)
		}
		if left := attQueryStrings(t, e, "SELECT blob_key FROM blob_trash"); len(left) != 0 {
			t.Errorf("trash after the sweep: %v", left)
		}
		attIntact(t, e, "ops", attList(t, e, "ops")[0], attBytes(1000, 9))
	})
}

// Clients that stall their uploads slow only themselves: with as many of
// them stalled as the database blob store copies at once, another upload
// still goes through (they spool locally, holding no database connection).
func TestAttachmentsStalledUploadsBlockNoOne(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		e.NewChannel("ops")
		var writers []*io.PipeWriter
		done := make(chan struct{})
		defer func() {
			for _, pw := range writers {
				_ = pw.CloseWithError(errors.New("test over"))
			}
			for range writers {
				<-done
			}
		}()
		chunk := attBytes(1<<20, 5)
		for i := range 4 { // store.maxDBUploads
			pr, pw := io.Pipe()
			writers = append(writers, pw)
			go func() {
				defer func() { done <- struct{}{} }()
				req, err := http.NewRequest("PUT", e.URL+"/api"+attPath("ops", "slow"+strconv.Itoa(i)), struct{ io.Reader }{pr})
				if err != nil {
					return
				}
				req.ContentLength = -1
				req.Header.Set("Content-Type", "application/octet-stream")
				req.Header.Set("Authorization", "Bearer "+e.Owner)
				if resp, err := e.HTTP.Do(req); err == nil {
					resp.Body.Close()
				}
			}()
			// 16 MiB is more than the sockets buffer: once written, the
			// server is reading this body. Then the client stalls.
			for range 16 {
				if _, err := pw.Write(chunk); err != nil {
					t.Fatal(err)
				}
			}
		}

		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second) // turns a hang into a failure
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, "PUT", e.URL+"/api"+attPath("ops", "quick"), strings.NewReader("quick"))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "text/plain")
		req.Header.Set("Authorization", "Bearer "+e.Owner)
		resp, err := e.HTTP.Do(req)
		if err != nil {
			t.Fatalf("an upload beside four stalled ones: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("an upload beside four stalled ones: %d", resp.StatusCode)
		}
	})
}
