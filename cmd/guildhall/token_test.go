package main

import (
	"strings"
	"testing"

	"github.com/guildhall/guildhall/internal/testenv"
)

// `guildhall token create` holds the server's token limit (the owner's
// first token counted): past it, it exits 1 saying what to do, and prints
// no token; an operator who raises the limit for one run gets one more.
func TestTokenCreateLimit(t *testing.T) {
	testenv.Stores(t, func(t *testing.T, kind string) {
		s := newStore(t, kind)
		env := []string{"GUILDHALL_DATA_DIR=" + s.dataDir, "GUILDHALL_BOOTSTRAP_TOKEN=" + s.token, "GUILDHALL_MAX_TOKENS_PER_USER=3"}
		if s.dbURL != "" {
			env = append(env, "GUILDHALL_DATABASE_URL="+s.dbURL)
		}
		// The first run bootstraps the store: the owner's token, then this one.
		for i := range 2 {
			if out, errOut, code := runCLI(t, env, "token", "create", "--user", "owner"); code != 0 || !strings.HasPrefix(out, "gh_") {
				t.Fatalf("token %d: exit %d\n%s%s", i+2, code, out, errOut)
			}
		}
		out, errOut, code := runCLI(t, env, "token", "create", "--user", "owner")
		if code != 1 || out != "" || !strings.Contains(errOut, `user "owner" already holds the most tokens allowed (3`) ||
			!strings.Contains(errOut, "revoke one first") {
			t.Fatalf("the 4th token: exit %d, stdout %q, stderr %s", code, out, errOut)
		}
		if out, errOut, code := runCLI(t, env, "token", "create", "--user", "owner", "--max-tokens-per-user", "4"); code != 0 || !strings.HasPrefix(out, "gh_") {
			t.Fatalf("with the limit raised: exit %d\n%s%s", code, out, errOut)
		}
	})
}

// `guildhall token create --name` holds the contract's length of a token's
// name (1 to 100 characters, counted as characters, not bytes): a longer
// one exits 1 naming the flag and prints no token.
func TestTokenCreateNameLength(t *testing.T) {
	testenv.Stores(t, func(t *testing.T, kind string) {
		s := newStore(t, kind)
		env := []string{"GUILDHALL_DATA_DIR=" + s.dataDir, "GUILDHALL_BOOTSTRAP_TOKEN=" + s.token}
		if s.dbURL != "" {
			env = append(env, "GUILDHALL_DATABASE_URL="+s.dbURL)
		}
		for _, tc := range []struct {
			name string
			ok   bool
		}{
			{strings.Repeat("é", 100), true}, // 200 bytes
			{strings.Repeat("é", 101), false},
			{strings.Repeat("x", 500), false},
		} {
			out, errOut, code := runCLI(t, env, "token", "create", "--user", "owner", "--name", tc.name)
			switch {
			case tc.ok && (code != 0 || !strings.HasPrefix(out, "gh_")):
				t.Errorf("a name of %d characters: exit %d\n%s%s", len([]rune(tc.name)), code, out, errOut)
			case !tc.ok && (code != 1 || out != "" || !strings.Contains(errOut, "--name: must be at most 100 characters long")):
				t.Errorf("a name of %d characters: exit %d, stdout %q, stderr %s", len([]rune(tc.name)), code, out, errOut)
			}
		}
	})
}
