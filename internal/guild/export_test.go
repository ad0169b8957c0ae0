package guild

import (
	"testing"

	"github.com/guildhall/guildhall/internal/permissions"
)

// SetRequirement makes the row of an operation require need, with rule,
// until the test ends: a test of the service changes a row to see that the
// service checks by it. The test must not run in parallel.
func SetRequirement(t *testing.T, operationID string, need permissions.Set, rule Rule) {
	t.Helper()
	for _, r := range requirements {
		if r.OperationID == operationID {
			before := *r
			r.Permissions, r.Rule = need, rule
			t.Cleanup(func() { *r = before })
			return
		}
	}
	t.Fatalf("no row for %s", operationID)
}
