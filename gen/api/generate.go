// Package api holds the code oapi-codegen generates from openapi/openapi.yaml,
// in three files from three configurations: the request and response models
// (models.gen.go), the Echo strict-server interface internal/httpapi
// implements (server.gen.go; it leaves out the HEAD operations and those
// the server answers with plain Echo handlers, see server.cfg.yaml), and a
// typed client of every operation (client.gen.go), used by the contract
// tests and the examples. Nothing here is edited by hand but example_test.go
// and overlay.yaml, which changes Go types of the models (never the
// contract) where oapi-codegen's default costs too much.
package api

//go:generate go run github.com/oapi-codegen/oapi-codegen/v2/cmd/oapi-codegen -config models.cfg.yaml ../../openapi/openapi.yaml
//go:generate go run github.com/oapi-codegen/oapi-codegen/v2/cmd/oapi-codegen -config server.cfg.yaml ../../openapi/openapi.yaml
//go:generate go run github.com/oapi-codegen/oapi-codegen/v2/cmd/oapi-codegen -config client.cfg.yaml ../../openapi/openapi.yaml
