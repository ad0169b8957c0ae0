//go:build tools

// Package tools pins the versions of code generators used by `make generate`.
package tools

import (
	_ "github.com/oapi-codegen/oapi-codegen/v2/cmd/oapi-codegen"
)
