package httpapi

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"regexp"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
)

// consoleCSP is the admin console's Content-Security-Policy: its own scripts
// and styles only (no inline code, no other origin), requests to this server
// only, and no framing.
const consoleCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; " +
	"connect-src 'self'; font-src 'self'; manifest-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// hashedAsset matches the content-hashed names esbuild gives the bundle
// (console-ABCD1234.js): they never change, so they are cached for good.
var hashedAsset = regexp.MustCompile(`-[A-Z0-9]{8}\.(js|css)$`)

type consoleFile struct {
	body  []byte
	etag  string
	ctype string
	cache string
}

// consoleHandler serves the built admin console (web.Dist) under /console/:
// index.html for /console/, with a strict CSP, nosniff, a strong ETag, and
// Cache-Control that suits each file (no-cache for index.html, immutable for
// hashed assets). Anything else is a 404 problem.
func consoleHandler(fsys fs.FS) (echo.HandlerFunc, error) {
	files := map[string]consoleFile{}
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		body, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(body)
		f := consoleFile{body: body, etag: `"` + hex.EncodeToString(sum[:16]) + `"`, cache: "no-cache",
			ctype: mime.TypeByExtension(path.Ext(p))}
		if f.ctype == "" {
			f.ctype = "application/octet-stream"
		}
		if hashedAsset.MatchString(p) {
			f.cache = "public, max-age=31536000, immutable"
		}
		files[p] = f
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("console assets: %w", err)
	}
	if _, ok := files["index.html"]; !ok {
		return nil, fmt.Errorf("console assets: no index.html")
	}
	return func(c echo.Context) error {
		name := strings.TrimPrefix(c.Request().URL.Path, "/console/")
		if name == "" {
			name = "index.html"
		}
		f, ok := files[name]
		if !ok {
			return echo.ErrNotFound
		}
		h := c.Response().Header()
		h.Set("Content-Security-Policy", consoleCSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", f.cache)
		h.Set("Content-Type", f.ctype)
		h.Set("ETag", f.etag)
		http.ServeContent(c.Response(), c.Request(), name, time.Time{}, bytes.NewReader(f.body))
		return nil
	}, nil
}
