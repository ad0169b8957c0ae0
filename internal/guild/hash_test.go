package guild_test

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/guildhall/guildhall/internal/guild"
)

// TestHashToken pins how tokens are stored: the hex of their SHA-256, for
// a token of any length (the stored hashes of existing tokens must keep
// matching), in one allocation, the hash's.
func TestHashToken(t *testing.T) {
	for _, n := range []int{0, 1, 32, 33, 64, 511, 512, 513, 4096} {
		token := strings.Repeat("t", n)
		sum := sha256.Sum256([]byte(token))
		if got, want := guild.HashToken(token), hex.EncodeToString(sum[:]); got != want {
			t.Errorf("length %d: %s, want %s", n, got, want)
		}
	}
	token := "gh_" + strings.Repeat("x", 60)
	if got := testing.AllocsPerRun(10, func() { guild.HashToken(token) }); got > 1 {
		t.Errorf("%.0f allocations per hash", got)
	}
}
