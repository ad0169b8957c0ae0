package sqldb_test

import (
	"context"
	"testing"

	"github.com/guildhall/guildhall/internal/sqldb"
	"github.com/guildhall/guildhall/internal/testenv"
)

// TestUncountedStatementsLeaveQueryCount: a statement sent for a request
// moves QueryCount by one; one sent with an Uncounted context (background
// work) does not.
func TestUncountedStatementsLeaveQueryCount(t *testing.T) {
	testenv.Stores(t, func(t *testing.T, kind string) {
		db := openDB(t, kind)
		var one int
		for _, c := range []struct {
			ctx  context.Context
			want int64
		}{{context.Background(), 1}, {sqldb.Uncounted(context.Background()), 0}} {
			before := db.QueryCount()
			if err := db.ReadPool().WithContext(c.ctx).Raw("SELECT 1").Scan(&one).Error; err != nil {
				t.Fatal(err)
			}
			if got := db.QueryCount() - before; got != c.want {
				t.Errorf("%d statements counted, want %d", got, c.want)
			}
		}
	})
}
