package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/store"
	"github.com/guildhall/guildhall/internal/testenv"
)

// BenchmarkStackRevertDryRun is the dry run of a revert of a role's
// permissions with 10,000 later events in the log, 1,000 of them about the
// same role (color changes, which do not stand in the way): the conflict
// check reads the role's events since, through the subject's index, inside
// the write's transaction, and the change is made and undone.
//
//	go test -run '^$' -bench StackRevertDryRun -benchtime 50x ./internal/httpapi
func BenchmarkStackRevertDryRun(b *testing.B) {
	benchStackSeq(b, func(e *testenv.Env) func(int) (string, string, string) {
		e.NewRole("bench", "ADD_REACTIONS")
		e.Must(http.StatusOK, testenv.Req{Method: "PUT", Path: "/roles/bench/permissions", Token: e.Owner,
			Body: map[string]any{"permissions": []string{"ADD_REACTIONS", "EMBED_LINKS"}}})
		seq := e2eSeq(b, e)
		ctx := context.Background()
		_, err := e.App.Store.Write(store.LargeWrite(ctx), func(tx *store.Tx) error {
			for i := range 10_000 {
				ev := model.Event{Type: "role.updated", Subject: fmt.Sprintf("role:other%d", i%50),
					Data: map[string]any{"before": map[string]any{"color": nil}, "after": map[string]any{"color": "#123456"}}}
				if i%10 == 0 {
					ev.Subject = "role:bench"
				}
				if err := tx.AppendEvent(ctx, ev); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		path := fmt.Sprintf("/api/audit-log/%d/revert?dry_run=true", seq)
		return func(int) (string, string, string) { return "POST", path, "" }
	})
}
