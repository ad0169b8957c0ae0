package httpapi

import (
	"encoding/json"
	"fmt"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/guildhall/guildhall/openapi"
)

// The contract is parsed and validated once per process: every server built
// by New shares the result, which nothing modifies after loading.
var contract = sync.OnceValues(func() (parsed, error) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(openapi.YAML)
	if err != nil {
		return parsed{}, fmt.Errorf("load contract: %w", err)
	}
	if err := doc.Validate(loader.Context, openapi3.EnableExamplesValidation()); err != nil {
		return parsed{}, fmt.Errorf("invalid contract: %w", err)
	}
	asJSON, err := json.Marshal(doc)
	if err != nil {
		return parsed{}, fmt.Errorf("contract as JSON: %w", err)
	}
	return parsed{doc: doc, json: asJSON}, nil
})

type parsed struct {
	doc  *openapi3.T
	json []byte
}

// LoadContract returns the embedded contract, parsed and validated (once per
// process). The document is shared: callers must not modify it.
func LoadContract() (*openapi3.T, error) {
	p, err := contract()
	return p.doc, err
}

func loadContract() (*openapi3.T, []byte, error) {
	p, err := contract()
	return p.doc, p.json, err
}

// SchemaOptions are the schema checks the server applies to requests (the
// formats kin-openapi leaves unchecked by default); response checks use them
// too.
func SchemaOptions() []openapi3.SchemaValidationOption {
	return []openapi3.SchemaValidationOption{openapi3.EnableFormatValidation(), formatValidators}
}
