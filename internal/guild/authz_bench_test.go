package guild_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/guildhall/guildhall/internal/apperr"
	"github.com/guildhall/guildhall/internal/blob"
	"github.com/guildhall/guildhall/internal/guild"
	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/permissions"
	"github.com/guildhall/guildhall/internal/store"
	"github.com/guildhall/guildhall/internal/testenv"
)

// authzEnv is a service over a real store with a small community: the owner,
// alice (role mods: MANAGE_CHANNELS, MANAGE_MESSAGES, VIEW_CHANNEL,
// SEND_MESSAGES) and channel ops, where an overwrite denies mods
// MANAGE_MESSAGES and one allows alice MENTION_EVERYONE.
type authzEnv struct {
	svc   *guild.Service
	st    *store.Store
	owner *guild.Actor
	alice string // alice's token
}

var mods = permissions.Of(permissions.ManageChannels, permissions.ManageMessages, permissions.ViewChannel, permissions.SendMessages)

func newAuthzEnv(tb testing.TB, kind string) *authzEnv {
	tb.Helper()
	ctx := context.Background()
	opts := store.Options{DataDir: tb.TempDir()}
	if kind == testenv.Postgres {
		opts.DatabaseURL = testenv.FreshPostgres(tb)
	}
	st, err := store.Open(ctx, opts)
	if err != nil {
		tb.Fatalf("open %s store: %v", kind, err)
	}
	tb.Cleanup(func() { _ = st.Close() })
	blobs, err := blob.NewDir(filepath.Join(tb.TempDir(), "blobs"))
	if err != nil {
		tb.Fatal(err)
	}
	svc := guild.New(guild.Options{Store: st, Blobs: blobs, Limits: guild.DefaultLimits()})
	ownerToken, err := svc.Bootstrap(ctx, "owner", "")
	if err != nil {
		tb.Fatalf("bootstrap: %v", err)
	}
	owner, err := svc.Authenticate(ctx, ownerToken)
	if err != nil {
		tb.Fatalf("authenticate owner: %v", err)
	}
	must := func(what string, err error) {
		tb.Helper()
		if err != nil {
			tb.Fatalf("%s: %v", what, err)
		}
	}
	var o guild.WriteOpts
	_, err = svc.CreateRole(ctx, owner, "mods", "Moderators", mods, nil, o)
	must("create role", err)
	alice, err := svc.CreateUser(ctx, owner, guild.UserInput{Username: "alice"}, o)
	must("create user", err)
	must("assign role", svc.AssignRole(ctx, owner, alice.ID, "mods", o))
	_, secret, err := svc.CreateToken(ctx, owner, alice.ID, "bench", nil, o)
	must("create token", err)
	_, err = svc.CreateChannel(ctx, owner, "ops", guild.ChannelInput{Name: "Operations"}, o)
	must("create channel", err)
	_, _, err = svc.SetOverwrite(ctx, owner, model.Overwrite{ChannelID: "ops", TargetType: model.TargetRole, TargetID: "mods",
		Deny: permissions.Of(permissions.ManageMessages)}, o)
	must("set role overwrite", err)
	_, _, err = svc.SetOverwrite(ctx, owner, model.Overwrite{ChannelID: "ops", TargetType: model.TargetUser, TargetID: alice.ID,
		Allow: permissions.Of(permissions.MentionEveryone)}, o)
	must("set user overwrite", err)
	return &authzEnv{svc: svc, st: st, owner: owner, alice: secret}
}

// authorize is what a request to a channel-scoped operation does that reads
// nothing else: authenticate the token in the request's read scope, then
// check effective permissions in the channel.
func (e *authzEnv) authorize(ctx context.Context, channelID string, need permissions.Set) (*guild.Actor, error) {
	a, err := e.svc.Authenticate(e.svc.Request(ctx), e.alice)
	if err != nil {
		return nil, err
	}
	if missing := need.Minus(a.In(channelID)); !missing.IsEmpty() {
		return a, apperr.MissingPermissions(channelID, missing.Names())
	}
	return a, nil
}

// TestAuthorizeWarmCost: on a warm instance, authenticating a token and
// checking permissions in a channel costs the question to the change log
// (has anything changed?) and nothing else: one statement on PostgreSQL,
// none on SQLite while the wal-index header shows no commit; a permission change
// is seen by the very next authorization, which reads the roles again and
// nothing else, and a change of credentials (a role taken away) by the very
// next authentication, which reads the token again and nothing else.
func TestAuthorizeWarmCost(t *testing.T) {
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := newAuthzEnv(t, kind)
		ctx := context.Background()
		manage := permissions.Of(permissions.ManageChannels)

		// cost returns what an authorization cost in statements, and what
		// it should cost warm: on PostgreSQL the freshness questions the
		// cache asked for it, one statement each, none while the instance
		// holds its lease (internal/fresh's lease.go); on SQLite none while
		// the wal-index header shows no commit.
		cost := func(what string, want error) (n, warm int64) {
			t.Helper()
			before, asked := e.st.QueryCount(), e.st.CacheStats().Questions
			_, err := e.authorize(ctx, "ops", manage)
			if !errors.Is(err, want) && !(want == nil && err == nil) {
				t.Fatalf("%s: authorize: %v, want %v", what, err, want)
			}
			if kind == testenv.Postgres {
				warm = e.st.CacheStats().Questions - asked
			}
			return e.st.QueryCount() - before, warm
		}
		// What a question costs once something changed: one statement that
		// reads the change log (on SQLite; PostgreSQL's instance follows its
		// own commits by itself, below).
		followed := int64(1)
		cost("warm-up", nil)
		for i := range 3 {
			if n, warm := cost("warm", nil); n != warm {
				t.Fatalf("warm authorization %d cost %d statements, want %d", i, n, warm)
			}
		}
		if kind == testenv.Postgres {
			// Measured under the lease at least once, or the warm costs
			// above were only the questions'.
			for deadline := time.Now().Add(10 * time.Second); e.st.CacheStats().Leased == 0; {
				if time.Now().After(deadline) {
					t.Fatal("no authorization was answered under the lease within 10 s")
				}
				if n, warm := cost("warm", nil); n != warm {
					t.Fatalf("warm authorization cost %d statements, want %d", n, warm)
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
		// The effective set is the engine's: global ∪ mods, minus the role
		// overwrite's MANAGE_MESSAGES, plus alice's MENTION_EVERYONE.
		a, err := e.authorize(ctx, "ops", manage)
		if err != nil {
			t.Fatal(err)
		}
		want := permissions.DefaultGlobal.Union(mods).Intersect(permissions.ChannelScoped).
			Minus(permissions.Of(permissions.ManageMessages)).Union(permissions.Of(permissions.MentionEveryone))
		if got := a.In("ops"); got != want {
			t.Fatalf("effective in ops = %v, want %v", got.Names(), want.Names())
		}

		// The owner takes MANAGE_CHANNELS from mods: the next authorization
		// sees it, reading the global permissions and the roles again (two
		// statements), and nothing else; the one after is warm.
		if _, err := e.svc.SetRolePermissions(ctx, e.owner, "mods", mods.Minus(manage), guild.WriteOpts{}); err != nil {
			t.Fatal(err)
		}
		if kind == testenv.Postgres {
			// The instance follows its own commit without a question
			// (internal/fresh's Cache.Ended).
			followed = 0
		}
		if n, _ := cost("after the change", apperr.ErrForbidden); n != followed+2 {
			t.Fatalf("the first authorization after a change of role cost %d statements, want %d", n, followed+2)
		}
		if n, warm := cost("warm again", apperr.ErrForbidden); n != warm {
			t.Fatalf("warm authorization after the change cost %d statements, want %d", n, warm)
		}

		// A write judges its caller again inside its serialized transaction,
		// from the cache, which asks nothing when it stands at the version
		// read with PostgreSQL's write lock (on SQLite the header answers,
		// since the writer holds the only write lock): a refused write
		// costs nothing more than the lock.
		a, err = e.svc.Authenticate(e.svc.Request(ctx), e.alice)
		if err != nil {
			t.Fatal(err)
		}
		before := e.st.QueryCount()
		if _, _, err := e.svc.SetGlobalPermissions(ctx, a, 0, guild.WriteOpts{}); !errors.Is(err, apperr.ErrForbidden) {
			t.Fatalf("alice replacing the global permissions: %v, want 403", err)
		}
		writeCost := int64(0)
		if kind == testenv.Postgres {
			writeCost = 1 // lock_writes(), which reads the data version the cache already stands at
		}
		if n := e.st.QueryCount() - before; n != writeCost {
			t.Fatalf("a refused write cost %d statements, want %d", n, writeCost)
		}

		// A role taken away: the next authentication reads the token again
		// (its user changed), and not the authorization state.
		if err := e.svc.RemoveRole(ctx, e.owner, e.aliceID(t), "mods", guild.WriteOpts{}); err != nil {
			t.Fatal(err)
		}
		before = e.st.QueryCount()
		a, err = e.svc.Authenticate(e.svc.Request(ctx), e.alice)
		if err != nil {
			t.Fatal(err)
		}
		if n := e.st.QueryCount() - before; n != followed+1 {
			t.Fatalf("authentication after a role removal cost %d statements, want %d", n, followed+1)
		}
		if len(a.Roles) != 0 || a.In("ops").Has(permissions.ManageChannels) {
			t.Fatalf("after removing mods alice still has roles %v / permissions %v", a.Roles, a.In("ops").Names())
		}
	})
}

func (e *authzEnv) aliceID(t *testing.T) string {
	t.Helper()
	a, err := e.svc.Authenticate(context.Background(), e.alice)
	if err != nil {
		t.Fatal(err)
	}
	return a.UserID
}

func benchStores(b *testing.B, fn func(b *testing.B, e *authzEnv)) {
	for _, kind := range []string{testenv.SQLite, testenv.Postgres} {
		b.Run(kind, func(b *testing.B) {
			if kind == testenv.Postgres {
				testenv.RequirePostgres(b)
			}
			e := newAuthzEnv(b, kind)
			if _, err := e.svc.Authenticate(context.Background(), e.alice); err != nil { // warm the snapshot
				b.Fatal(err)
			}
			start := e.st.QueryCount()
			b.ReportAllocs()
			b.ResetTimer()
			fn(b, e)
			b.StopTimer()
			b.ReportMetric(float64(e.st.QueryCount()-start)/float64(b.N), "statements/op")
		})
	}
}

// BenchmarkAuthenticate is the cost of resolving a bearer token to an actor
// on a warm instance, a request's whole: its question to the change log
// and two answers from the cache.
func BenchmarkAuthenticate(b *testing.B) {
	benchStores(b, func(b *testing.B, e *authzEnv) {
		ctx := context.Background()
		for b.Loop() {
			if _, err := e.svc.Authenticate(e.svc.Request(ctx), e.alice); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkAuthorizeInChannel is the whole authorization of a request to a
// channel-scoped operation on a warm instance: authenticate, then compute
// the effective permissions in the channel (global, roles, three kinds of
// overwrite) from the cached authorization state and check them.
func BenchmarkAuthorizeInChannel(b *testing.B) {
	need := permissions.Of(permissions.ManageChannels, permissions.ViewChannel)
	benchStores(b, func(b *testing.B, e *authzEnv) {
		ctx := context.Background()
		for b.Loop() {
			if _, err := e.authorize(ctx, "ops", need); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkCheckedRead is a read that the service authorizes from the
// caller's state and answers without a statement, for a caller already
// authenticated: what the service adds to a request's authorization. A
// channel-scoped check (getChannel) and a check that exempts the caller's
// own data (getUserPermissions of oneself).
func BenchmarkCheckedRead(b *testing.B) {
	for _, tc := range []struct {
		name string
		read func(ctx context.Context, e *authzEnv, a *guild.Actor) error
	}{
		{"getChannel", func(ctx context.Context, e *authzEnv, a *guild.Actor) error {
			_, err := e.svc.GetChannel(ctx, a, "ops")
			return err
		}},
		{"getUserPermissions", func(ctx context.Context, e *authzEnv, a *guild.Actor) error {
			_, err := e.svc.UserPermissions(ctx, a, a.UserID, nil, false)
			return err
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			benchStores(b, func(b *testing.B, e *authzEnv) {
				// One request's scope, as a handler has it; its one question to
				// the change log is the fraction of a statement per op.
				ctx := e.svc.Request(context.Background())
				a, err := e.svc.Authenticate(ctx, e.alice)
				if err != nil {
					b.Fatal(err)
				}
				for b.Loop() {
					if err := tc.read(ctx, e, a); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}
