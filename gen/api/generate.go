// Package api holds the code oapi-codegen generates from openapi/openapi.yaml:
// the Echo strict-server interface, the request and response models, and a
// typed client used by the contract tests. Nothing here is edited by hand.
package api

//go:generate go run github.com/oapi-codegen/oapi-codegen/v2/cmd/oapi-codegen -config cfg.yaml ../../openapi/openapi.yaml
