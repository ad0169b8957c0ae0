// Command pgprobe tells, before `make test` runs, whether the PostgreSQL tests
// will run or skip: a skipped test says so only under `go test -v`, so
// without this line a machine without PostgreSQL would print a green run
// that never touched it.
package main

import (
	"fmt"
	"os"

	"github.com/guildhall/guildhall/internal/testenv"
)

func main() {
	url := testenv.PostgresURL()
	if err := testenv.PostgresReachable(); err != nil {
		if os.Getenv("GUILDHALL_TEST_POSTGRES") == "require" {
			fmt.Fprintf(os.Stderr, "PostgreSQL is required (GUILDHALL_TEST_POSTGRES=require) but unreachable at %s: %v\n", url, err)
			os.Exit(1)
		}
		fmt.Printf("NOTE: PostgreSQL unreachable at %s (%v):\n"+
			"      its tests will SKIP. Set GUILDHALL_TEST_DATABASE_URL to a database you may create schemas in,\n"+
			"      or GUILDHALL_TEST_POSTGRES=require to make them fail instead.\n", url, err)
		return
	}
	fmt.Printf("PostgreSQL reachable at %s: its tests run.\n", url)
}
