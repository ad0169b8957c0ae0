package backup_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/guildhall/guildhall/internal/backup"
	"github.com/guildhall/guildhall/internal/testenv"
)

// ledger records what the writers did, with when it was acknowledged.
type ledger struct {
	mu       sync.Mutex
	channels map[string]time.Time            // channel ID -> acknowledged at
	puts     map[string]map[string]time.Time // attachment ID -> sha256 of a version -> acknowledged at
	bodies   map[string][]byte               // sha256 -> bytes
	deleted  map[string]time.Time            // attachment ID -> first delete attempted at
}

func (l *ledger) lock() func() { l.mu.Lock(); return l.mu.Unlock }

// send makes one request from a writer goroutine (no t.Fatal there).
func send(c *http.Client, base, method, path, token, ctype string, body []byte) (int, error) {
	req, err := http.NewRequest(method, base+"/api"+path, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	res, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, res.Body)
	return res.StatusCode, nil
}

// TestBackupUnderWriteLoad proves that `guildhall backup` of a live SQLite
// store is a consistent snapshot: writers create channels, upload, replace
// and delete attachments all through the backup; the restored instance has
// every write acknowledged before the backup began, and serves every
// attachment it lists byte for byte as it was uploaded.
func TestBackupUnderWriteLoad(t *testing.T) {
	e := testenv.Start(t, testenv.SQLite)
	e.NewChannel("files")
	l := &ledger{channels: map[string]time.Time{}, puts: map[string]map[string]time.Time{},
		bodies: map[string][]byte{}, deleted: map[string]time.Time{}}
	c := &http.Client{Timeout: 30 * time.Second}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var writes, failures atomic.Int64
	var lastErr atomic.Value
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				var status int
				var err error
				switch i % 4 {
				case 0: // a new channel
					id := fmt.Sprintf("c-%d-%d", w, i)
					status, err = send(c, e.URL, "POST", "/channels/"+id+"/create", e.Owner, "application/json", []byte(`{"name":"x"}`))
					if err == nil && status == http.StatusCreated {
						unlock := l.lock()
						l.channels[id] = time.Now()
						unlock()
					}
				case 1, 2: // a new attachment, or a replacement of one of a few
					id := fmt.Sprintf("a-%d-%d", w, i)
					if i%4 == 2 {
						id = fmt.Sprintf("r-%d-%d", w, i%12)
					}
					body := make([]byte, 1024+i%7*4096)
					_, _ = rand.Read(body)
					sum := sha256.Sum256(body)
					sha := hex.EncodeToString(sum[:])
					func() {
						defer l.lock()()
						l.bodies[sha] = body
					}()
					status, err = send(c, e.URL, "PUT", "/channels/files/attachment?attachmentID="+id, e.Owner, "application/octet-stream", body)
					if err == nil && (status == http.StatusCreated || status == http.StatusOK) {
						func() {
							defer l.lock()()
							if l.puts[id] == nil {
								l.puts[id] = map[string]time.Time{}
							}
							l.puts[id][sha] = time.Now()
						}()
					}
				case 3: // delete an attachment made a while ago
					id := fmt.Sprintf("a-%d-%d", w, i-10)
					func() {
						defer l.lock()()
						l.deleted[id] = time.Now()
					}()
					status, err = send(c, e.URL, "DELETE", "/channels/files/attachment?attachmentID="+id, e.Owner, "", nil)
					if status == http.StatusNotFound {
						status = http.StatusNoContent // a delete of one never made
					}
				}
				if err != nil || status >= 300 {
					lastErr.Store(fmt.Sprintf("case %d: status %d, %v", i%4, status, err))
					failures.Add(1)
					continue
				}
				writes.Add(1)
			}
		}()
	}
	// Let the store fill a little, then back up while the writers go on.
	deadline := time.Now().Add(30 * time.Second)
	for writes.Load() < 400 {
		if failures.Load() > 0 || time.Now().After(deadline) {
			close(stop)
			wg.Wait()
			t.Fatalf("the writers did not get going: %d writes, %d failures (%v)", writes.Load(), failures.Load(), lastErr.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	to := filepath.Join(t.TempDir(), "backup")
	began := time.Now()
	before := writes.Load()
	m, err := backup.SQLite(context.Background(), e.Config.DataDir, to)
	took := time.Since(began)
	during := writes.Load() - before
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatalf("backup: %v", err)
	}
	if n := failures.Load(); n > 0 {
		t.Fatalf("%d writes failed during the test", n)
	}
	t.Logf("backup took %v with %d writes acknowledged during it; %d blobs, %d bytes", took, during, m.BlobCount(), m.BlobBytes())

	// Restore into a new data directory and serve it.
	dataDir := filepath.Join(t.TempDir(), "restored")
	if _, err := backup.Restore(context.Background(), to, dataDir); err != nil {
		t.Fatalf("restore: %v", err)
	}
	cfg := testenv.Config(t, testenv.SQLite)
	cfg.DataDir = dataDir
	cfg.BootstrapToken = e.Owner // the owner's token is in the restored store
	r := testenv.StartWith(t, testenv.SQLite, cfg)

	for id, at := range l.channels {
		if at.Before(began) {
			r.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/channels/" + id, Token: r.Owner})
		}
	}
	// Every attachment acknowledged before the backup began and not deleted
	// is there, in a version that was uploaded.
	listed := map[string]string{} // id -> sha256
	cursor := ""
	for {
		p := "/channels/files/attachments?limit=200"
		if cursor != "" {
			p += "&cursor=" + cursor
		}
		var pg struct {
			Items []struct {
				ID     string `json:"id"`
				SHA256 string `json:"sha256"`
				Size   int64  `json:"size"`
			} `json:"items"`
			NextCursor *string `json:"next_cursor"`
		}
		res := r.Must(http.StatusOK, testenv.Req{Method: "GET", Path: p, Token: r.Owner})
		if err := json.Unmarshal(res.Body, &pg); err != nil {
			t.Fatal(err)
		}
		for _, it := range pg.Items {
			listed[it.ID] = it.SHA256
		}
		if pg.NextCursor == nil {
			break
		}
		cursor = *pg.NextCursor
	}
	checked := 0
	for id, versions := range l.puts {
		first := time.Time{}
		for _, at := range versions {
			if first.IsZero() || at.Before(first) {
				first = at
			}
		}
		if _, del := l.deleted[id]; del || !first.Before(began) {
			continue
		}
		if _, ok := listed[id]; !ok {
			t.Errorf("attachment %s, acknowledged before the backup began, is missing", id)
		}
	}
	for id, sha := range listed {
		if _, ok := l.puts[id][sha]; !ok {
			t.Errorf("attachment %s has sha256 %s, never uploaded", id, sha)
			continue
		}
		res := r.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/channels/files/attachment?attachmentID=" + id, Token: r.Owner})
		if !bytes.Equal(res.Body, l.bodies[sha]) {
			t.Errorf("attachment %s: the restored bytes differ from the uploaded ones (%d bytes, want %d)", id, len(res.Body), len(l.bodies[sha]))
		}
		checked++
	}
	if checked != m.BlobCount() {
		t.Errorf("served %d attachments, the backup holds %d blobs", checked, m.BlobCount())
	}
	t.Logf("restored %d channels and %d attachments, each byte for byte", len(l.channels), checked)
}

// The commands refuse what would lose or mix up data, and a damaged backup
// is caught before anything is restored.
func TestBackupRefusals(t *testing.T) {
	e := testenv.Start(t, testenv.SQLite)
	e.NewChannel("files")
	e.Must(http.StatusCreated, testenv.Req{Method: "PUT", Path: "/channels/files/attachment?attachmentID=a", Token: e.Owner,
		Type: "text/plain", Body: "some bytes"})
	good := filepath.Join(t.TempDir(), "good")
	m, err := backup.SQLite(context.Background(), e.Config.DataDir, good)
	if err != nil {
		t.Fatal(err)
	}
	if m.BlobCount() != 1 {
		t.Fatalf("the backup holds %d blobs, want 1", m.BlobCount())
	}
	nonEmpty := t.TempDir()
	if err := os.WriteFile(filepath.Join(nonEmpty, "x"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	damaged := filepath.Join(t.TempDir(), "damaged")
	if err := os.CopyFS(damaged, os.DirFS(good)); err != nil {
		t.Fatal(err)
	}
	blobPath := filepath.Join(damaged, filepath.FromSlash(m.Blobs[0].Path))
	data, _ := os.ReadFile(blobPath)
	data[0] ^= 1
	if err := os.WriteFile(blobPath, data, 0o600); err != nil {
		t.Fatal(err)
	}
	incomplete := filepath.Join(t.TempDir(), "incomplete")
	if err := os.CopyFS(incomplete, os.DirFS(good)); err != nil {
		t.Fatal(err)
	}
	_ = os.Remove(filepath.Join(incomplete, backup.ManifestName))

	cases := []struct {
		name string
		run  func() error
		want string
	}{
		{"backup into a non-empty directory", func() error {
			_, err := backup.SQLite(context.Background(), e.Config.DataDir, nonEmpty)
			return err
		}, "not empty"},
		{"backup of a directory with no store", func() error {
			_, err := backup.SQLite(context.Background(), t.TempDir(), filepath.Join(t.TempDir(), "b"))
			return err
		}, "no SQLite store"},
		{"restore into a non-empty data directory", func() error {
			_, err := backup.Restore(context.Background(), good, nonEmpty)
			return err
		}, "not empty"},
		{"restore of a damaged blob", func() error {
			_, err := backup.Restore(context.Background(), damaged, filepath.Join(t.TempDir(), "d"))
			return err
		}, "is damaged"},
		{"restore without a manifest", func() error {
			_, err := backup.Restore(context.Background(), incomplete, filepath.Join(t.TempDir(), "d"))
			return err
		}, "incomplete"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.run()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one saying %q", err, tc.want)
			}
		})
	}
	// The refused restore left the non-empty directory as it was.
	if entries, _ := os.ReadDir(nonEmpty); len(entries) != 1 {
		t.Fatalf("the non-empty directory now holds %d entries", len(entries))
	}
}
