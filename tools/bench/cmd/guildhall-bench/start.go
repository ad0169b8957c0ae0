package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/guildhall/guildhall/tools/bench/internal/bulk"
	"github.com/guildhall/guildhall/tools/bench/internal/client"
)

// startTargets starts the main group's targets, in the order -targets
// names them.
func (b *bench) startTargets(ctx context.Context, wanted []string, nd needs) error {
	for _, name := range wanted {
		var err error
		switch name {
		case "ceiling":
			err = b.startCeiling(ctx, nd.deep)
		case "sqlite":
			err = b.startGuildhall(ctx, "sqlite", nd)
		case "postgres":
			err = b.startGuildhall(ctx, "postgres", nd)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func randomToken() string {
	buf := make([]byte, 24)
	_, _ = rand.Read(buf)
	return "gh_bench_" + hex.EncodeToString(buf)
}

func (b *bench) startCeiling(ctx context.Context, deep bool) error {
	n := b.cfg.users
	if deep {
		n = max(n, b.cfg.deepUsers)
	}
	ids := make([]string, n+2)
	for i := range ids {
		ids[i] = uuid.Must(uuid.NewV7()).String()
	}
	idsPath := filepath.Join(b.dir, "ceiling-ids.txt")
	if err := os.WriteFile(idsPath, []byte(strings.Join(ids, "\n")+"\n"), 0o644); err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	addr, err := freeAddr()
	if err != nil {
		return err
	}
	t := &target{name: "ceiling", addr: addr, token: randomToken(), logPath: filepath.Join(b.dir, "ceiling.log")}
	t.proc, err = startProcess([]string{exe, "ceiling", "-addr", addr, "-token", t.token, "-ids", idsPath}, nil, t.logPath, b.srvCPUs())
	if err != nil {
		return err
	}
	b.targets = append(b.targets, t)
	if err := t.waitReady(ctx, 30*time.Second); err != nil {
		return err
	}
	t.api = client.New(addr, t.token)
	t.heavyUser, t.lightUser = ids[0], ids[1]
	t.ids = ids[2 : 2+b.cfg.users]
	progress("ceiling: pid %d on %s\n", t.proc.pid(), addr)
	return nil
}

func (b *bench) startGuildhall(ctx context.Context, store string, nd needs) error {
	addr, err := freeAddr()
	if err != nil {
		return err
	}
	t := &target{name: store, addr: addr, token: randomToken(), logPath: filepath.Join(b.dir, store+".log")}
	if _, err := b.guildhallEnv(ctx, t, store, ""); err != nil {
		return err
	}
	if err := b.launch(ctx, t); err != nil {
		return err
	}
	t.api = client.New(addr, t.token)
	progress("%s: pid %d on %s; seeding %d users ...\n", store, t.proc.pid(), addr, b.cfg.users)
	start := time.Now()
	if t.ids, err = t.api.SeedUsers(ctx, "s"+b.tag+"_", 0, b.cfg.users, b.cfg.seedConns); err != nil {
		return fmt.Errorf("%s: seeding: %w", store, err)
	}
	progress("%s: seeded %d users in %v\n", store, len(t.ids), time.Since(start).Round(time.Millisecond))
	if err := setupBench(ctx, t.api); err != nil {
		return fmt.Errorf("%s: bench channel: %w", store, err)
	}
	if nd.perms {
		start := time.Now()
		if t.heavyUser, t.lightUser, err = setupHeavy(ctx, t.api, t.ids, "p"+b.tag+"_", 8); err != nil {
			return fmt.Errorf("%s: heavy permission setup: %w", store, err)
		}
		progress("%s: %d roles and %d overwrites set up in %v\n", store, heavyRoles, 1+heavyRoles+min(len(t.ids)+1, heavyUserOvers), time.Since(start).Round(time.Millisecond))
	}
	if nd.access {
		// The bench role and the heavy ones are there already.
		if err := setupAccess(ctx, t.api, t.ids, 1+heavyRoles, 8); err != nil {
			return fmt.Errorf("%s: access setup: %w", store, err)
		}
	}
	return nil
}

// guildhallEnv sets the environment of Guildhall on store for t: its
// address, no rate limit, the owner's token, its data directory, and on
// PostgreSQL a database of its own (guildhall_bench_<tag><suffix>), whose
// URL it returns. The cluster is pinned with the first such database.
func (b *bench) guildhallEnv(ctx context.Context, t *target, store, suffix string) (dbURL string, err error) {
	t.env = []string{
		"GUILDHALL_ADDR=" + t.addr,
		"GUILDHALL_RATE_LIMIT=0",
		"GUILDHALL_BOOTSTRAP_TOKEN=" + t.token,
		"GUILDHALL_DATA_DIR=" + filepath.Join(b.dir, t.name+"-data"),
	}
	if store != "postgres" {
		return "", nil
	}
	t.pg = b.pg
	t.pgDB = "guildhall_bench_" + b.tag + suffix
	if dbURL, err = b.pg.createDB(ctx, t.pgDB); err != nil {
		return "", err
	}
	t.env = append(t.env, "GUILDHALL_DATABASE_URL="+dbURL)
	if b.pinned && !b.pgPinned {
		b.pgPinned = true
		if err := b.pg.pin(b.srvCPUs()); err != nil {
			b.say("- PostgreSQL not pinned: %v\n\n", err)
		} else if b.pg.postmaster > 0 {
			progress("postgres: postmaster %d and its processes pinned to CPU %d\n", b.pg.postmaster, b.cfg.srvCPU)
		}
	}
	return dbURL, nil
}

// launch starts (or starts again) Guildhall for t and waits until it is
// ready.
func (b *bench) launch(ctx context.Context, t *target) error {
	var err error
	if t.proc, err = startProcess([]string{b.cfg.bin, "serve"}, t.env, t.logPath, b.srvCPUs()); err != nil {
		return err
	}
	if !slices.Contains(b.targets, t) {
		b.targets = append(b.targets, t)
	}
	return t.waitReady(ctx, 120*time.Second)
}

// prepareMillion starts, once, the instances the million scenarios compare:
// for each store, one with -users users and one with -million-users, both
// seeded in bulk.
func (b *bench) prepareMillion(ctx context.Context, stores []string, access bool) error {
	if len(b.group("million")) > 0 {
		return nil
	}
	for _, store := range stores {
		small, err := b.startBulk(ctx, store, b.cfg.users, nil)
		if err != nil {
			return err
		}
		big, err := b.startBulk(ctx, store, b.cfg.millionUsers, small)
		if err != nil {
			return err
		}
		for _, t := range []*target{small, big} {
			if !access {
				continue
			}
			start := time.Now()
			if err := setupAccess(ctx, t.api, t.ids, 0, 8); err != nil {
				return fmt.Errorf("%s: access setup: %w", t.name, err)
			}
			progress("%s: access community set up in %v\n", t.name, time.Since(start).Round(time.Millisecond))
		}
	}
	if b.pg != nil && slices.Contains(stores, "postgres") {
		if err := b.pg.checkpoint(ctx); err != nil {
			progress("postgres: CHECKPOINT after seeding: %v\n", err)
		}
	}
	return nil
}

// missCacheBytes is the read cache of the million instances under
// -million-misses. Its entries' share (8 KiB) keeps the caller's
// credentials (~1.1 KB by the cache's estimate; no entry over a quarter of
// the share is kept); its users' share keeps a 16 KiB arena, about 220
// members, the last read, so that a member read at random is a hit about
// once in 45 reads among 10,000 and almost never among a million. At 16 KiB
// (a 1 KiB limit per entry) the credentials are never kept, and every
// request reads them.
const missCacheBytes = 32 << 10

// startBulk starts Guildhall on store with n users written straight into
// its database (internal/bulk): the server starts once on the empty store,
// which creates the owner and their token, stops, the users are written,
// and it starts again. User i is m<tag>_<i, 7 digits>, "Member <i>".
func (b *bench) startBulk(ctx context.Context, store string, n int, ref *target) (*target, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	name := store + "-" + compactCount(n)
	t := &target{name: name, group: "million", addr: addr, token: randomToken(), logPath: filepath.Join(b.dir, name+".log"), ref: ref, users: n}
	dbURL, err := b.guildhallEnv(ctx, t, store, "_"+compactCount(n))
	if err != nil {
		return nil, err
	}
	if b.cfg.millionMisses {
		t.env = append(t.env, "GUILDHALL_CACHE_BYTES="+strconv.Itoa(missCacheBytes))
	}
	if err := b.launch(ctx, t); err != nil {
		return nil, err
	}
	t.proc.stop()
	progress("%s: seeding %s users in bulk ...\n", name, thousands(int64(n)))
	start := time.Now()
	prefix := "m" + b.tag + "_"
	t.ids, err = bulk.Users(ctx, filepath.Join(b.dir, name+"-data"), dbURL, n, func(i int) (string, string) {
		return fmt.Sprintf("%s%07d", prefix, i), fmt.Sprintf("Member %07d", i)
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if t.pg != nil {
		if err := t.pg.settle(ctx, dbURL); err != nil {
			return nil, fmt.Errorf("%s: VACUUM ANALYZE: %w", name, err)
		}
	}
	t.seedTime = time.Since(start)
	progress("%s: seeded %s users in %v\n", name, thousands(int64(n)), t.seedTime.Round(time.Millisecond))
	if err := b.launch(ctx, t); err != nil {
		return nil, err
	}
	t.api = client.New(addr, t.token)
	t.prefixes = searchPrefixes(prefix, n)
	t.searches = sampleSearches(t.prefixes, searchSample)
	// The deep page: page 1,000, or the last full page of a smaller
	// instance (the owner is one user more).
	if t.deepPage = min(1000, (n+1)/50); t.deepPage >= 2 {
		if t.deepCursor, err = t.api.CursorOfPage(ctx, t.deepPage); err != nil {
			return nil, fmt.Errorf("%s: walking to page %d: %w", name, t.deepPage, err)
		}
		t.deepReady = true
	}
	progress("%s: pid %d on %s; page %d found\n", name, t.proc.pid(), addr, t.deepPage)
	if !b.cfg.millionCold {
		start := time.Now()
		err := client.Parallel(ctx, len(t.ids), b.cfg.conns, func(ctx context.Context, i int) error {
			return t.api.Call(ctx, "GET", "/users/"+t.ids[i], nil, http.StatusOK, nil)
		})
		if err != nil {
			return nil, fmt.Errorf("%s: reading every user once: %w", name, err)
		}
		progress("%s: read every user once in %v\n", name, time.Since(start).Round(time.Millisecond))
	}
	return t, nil
}

// prepareDeep seeds every real target up to -deep-users and walks each
// target's list to the cursor of page 1,000.
func (b *bench) prepareDeep(ctx context.Context) error {
	for _, t := range b.group("") {
		if t.deepReady {
			continue
		}
		if t.name != "ceiling" && len(t.ids) < b.cfg.deepUsers {
			more := b.cfg.deepUsers - len(t.ids)
			progress("%s: seeding %d more users for page_deep ...\n", t.name, more)
			start := time.Now()
			ids, err := t.api.SeedUsers(ctx, "d"+b.tag+"_", 0, more, b.cfg.seedConns)
			if err != nil {
				return fmt.Errorf("%s: seeding: %w", t.name, err)
			}
			progress("%s: seeded %d users in %v\n", t.name, more, time.Since(start).Round(time.Millisecond))
			t.ids = append(t.ids, ids...)
		}
		cur, err := t.api.CursorOfPage(ctx, 1000)
		if err != nil {
			return fmt.Errorf("%s: walking to page 1,000: %w", t.name, err)
		}
		t.deepCursor, t.deepReady = cur, true
	}
	return nil
}
