// Package web holds the admin console: its TypeScript sources (src/), the
// script that builds them (build.sh, run by `make generate` when the npm
// tools are installed) and the built bundle (dist/), which is committed and
// embedded here so that the binary serves the console with no Node at run
// time (internal/httpapi serves it at /console/).
package web

import (
	"embed"
	"io/fs"
)

//go:embed dist
var dist embed.FS

// Dist is the built console: index.html and the content-hashed assets it names.
func Dist() fs.FS {
	sub, err := fs.Sub(dist, "dist")
	if err != nil { // only for an invalid literal path, which "dist" is not
		panic(err)
	}
	return sub
}
