// Package openapi embeds the contract, openapi.yaml: the server validates
// every request against these bytes and serves them at /api/openapi.yaml.
package openapi

import _ "embed"

// YAML is the contract exactly as authored.
//
//go:embed openapi.yaml
var YAML []byte
