package main

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"time"

	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/tools/bench/internal/bulk"
	"github.com/guildhall/guildhall/tools/bench/internal/client"
)

// The history scenarios ask ?at= questions of an instance whose audit log
// has the scale of docs/performance.md's goal: historyEvents events in
// all, of which at least historyRelevant permission-relevant changes
// after the instant asked about (the shape of the Go benchmark
// BenchmarkStackHistory in internal/httpapi).
const (
	historyEvents   = 100_000
	historyRelevant = 5000
	// historyBefore is the log's length at the instant: the rest, the
	// relevant changes and filler, comes after it.
	historyBefore = historyEvents - 2*historyRelevant
	// historyRoles roles and as many channels, and historyUsers users
	// each holding one of the roles.
	historyRoles   = 20
	historyUsers   = 50
	historyChannel = "c07"
	// historyBatch changes are made at a time between two counts of the
	// log, none of them toggling the same membership twice.
	historyBatch = 300
)

func historyRoleID(i int) string    { return fmt.Sprintf("r%02d", i%historyRoles) }
func historyChannelID(i int) string { return fmt.Sprintf("c%02d", i%historyRoles) }

// prepareHistory starts, once, an instance per store with the history
// scenarios' log.
func (b *bench) prepareHistory(ctx context.Context, stores []string) error {
	if len(b.group("history")) > 0 {
		return nil
	}
	for _, store := range stores {
		if err := b.startHistory(ctx, store); err != nil {
			return err
		}
	}
	if b.pg != nil {
		if err := b.pg.checkpoint(ctx); err != nil {
			progress("postgres: CHECKPOINT after seeding: %v\n", err)
		}
	}
	return nil
}

// startHistory starts Guildhall on store and builds the log: the community
// through the API; the server stopped, filler events straight into the
// database up to historyBefore (bulk.Events); started again, the instant,
// then historyRelevant permission changes or a few more through the API;
// stopped, filler up to historyEvents; and started again to be measured.
func (b *bench) startHistory(ctx context.Context, store string) error {
	addr, err := freeAddr()
	if err != nil {
		return err
	}
	name := store + "-history"
	t := &target{name: name, group: "history", addr: addr, token: randomToken(), logPath: filepath.Join(b.dir, name+".log")}
	dbURL, err := b.guildhallEnv(ctx, t, store, "_history")
	if err != nil {
		return err
	}
	dataDir := filepath.Join(b.dir, name+"-data")
	start := time.Now()
	if err := b.launch(ctx, t); err != nil {
		return err
	}
	users, err := historyCommunity(ctx, client.New(addr, t.token), "h"+b.tag+"_")
	if err != nil {
		return fmt.Errorf("%s: community: %w", name, err)
	}
	seq, err := newestSeq(ctx, client.New(addr, t.token))
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	t.proc.stop()
	// What the Go benchmark writes as filler: not a permission change.
	filler := model.Event{Type: "user.token.created", Subject: "user:" + users[0], Data: map[string]any{"token_id": "t", "name": "filler"}}
	if _, err := bulk.Events(ctx, dataDir, dbURL, max(0, historyBefore-int(seq)), filler); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if err := b.launch(ctx, t); err != nil {
		return err
	}
	time.Sleep(2 * time.Millisecond)
	at := time.Now().UTC()
	time.Sleep(2 * time.Millisecond)
	if seq, err = historyChanges(ctx, client.New(addr, t.token), users); err != nil {
		return fmt.Errorf("%s: changes: %w", name, err)
	}
	t.proc.stop()
	total, err := bulk.Events(ctx, dataDir, dbURL, max(0, historyEvents-int(seq)), filler)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	relevant, err := bulk.HistoryEvents(ctx, dataDir, dbURL, at)
	switch {
	case err != nil:
		return fmt.Errorf("%s: %w", name, err)
	case relevant < historyRelevant:
		return fmt.Errorf("%s: %d permission-relevant events after the instant, want %d", name, relevant, historyRelevant)
	}
	if t.pg != nil {
		if err := t.pg.settle(ctx, dbURL); err != nil {
			return fmt.Errorf("%s: VACUUM ANALYZE: %w", name, err)
		}
	}
	t.seedTime = time.Since(start)
	if err := b.launch(ctx, t); err != nil {
		return err
	}
	t.api = client.New(addr, t.token)
	t.histUser, t.histAt = users[7], at.Format(time.RFC3339Nano)
	t.histLog = fmt.Sprintf("%s events in all, %s of them permission-relevant after the instant", thousands(total), thousands(int64(relevant)))
	progress("%s: pid %d on %s; %s; built in %v\n", name, t.proc.pid(), addr, t.histLog, t.seedTime.Round(time.Millisecond))
	return nil
}

// historyCommunity makes historyRoles roles (VIEW_CHANNEL each), as many
// channels and historyUsers users, user i holding role i%historyRoles, and
// returns the users' IDs.
func historyCommunity(ctx context.Context, a *client.Client, prefix string) ([]string, error) {
	// Roles one at a time: each new role takes position 1 and moves the others up.
	for i := range historyRoles {
		if err := a.Call(ctx, http.MethodPost, "/roles/"+historyRoleID(i)+"/create",
			nameBody{Name: "History " + historyRoleID(i), Permissions: []string{"VIEW_CHANNEL"}}, http.StatusCreated, nil); err != nil {
			return nil, err
		}
		if err := a.Call(ctx, http.MethodPost, "/channels/"+historyChannelID(i)+"/create", nameBody{Name: historyChannelID(i)}, http.StatusCreated, nil); err != nil {
			return nil, err
		}
	}
	users, err := a.SeedUsers(ctx, prefix, 0, historyUsers, 8)
	if err != nil {
		return nil, err
	}
	err = client.Parallel(ctx, len(users), 8, func(ctx context.Context, i int) error {
		return a.Call(ctx, http.MethodPost, "/users/"+users[i]+"/roles/"+historyRoleID(i), nil, http.StatusNoContent, nil)
	})
	return users, err
}

// historyChanges makes permission changes through the API, as the Go
// benchmark does (a role's overwrite in a channel, a role's permissions,
// a membership added or removed, in turn), historyBatch at a time, until
// the log holds historyRelevant events more than when it began (the
// setting of what is already set writes none); it returns the newest seq.
func historyChanges(ctx context.Context, a *client.Client, users []string) (int64, error) {
	from, err := newestSeq(ctx, a)
	if err != nil {
		return 0, err
	}
	perms := [][]string{{"SEND_MESSAGES"}, {"VIEW_CHANNEL", "ADD_REACTIONS"}, {}}
	held := map[string]bool{}
	for i0 := 0; ; i0 += historyBatch {
		// Within a batch no membership comes twice (one role per 150
		// changes, a user each), so the batch may run in parallel.
		adds := make([]bool, historyBatch)
		for k := range adds {
			i := i0 + k
			if i%3 == 2 {
				pair := users[(i/3)%len(users)] + "/" + historyRoleID(i/150)
				adds[k] = !held[pair]
				held[pair] = !held[pair]
			}
		}
		err := client.Parallel(ctx, historyBatch, 8, func(ctx context.Context, k int) error {
			i := i0 + k
			switch i % 3 {
			case 0:
				return a.Call(ctx, http.MethodPost, "/channels/"+historyChannelID(i/3)+"/permissions",
					overwriteBody{TargetType: "role", TargetID: historyRoleID(i / 60), Allow: perms[(i/3)%3], Deny: perms[(i/3+1)%3]}, http.StatusOK, nil)
			case 1:
				return a.Call(ctx, http.MethodPut, "/roles/"+historyRoleID(i/3)+"/permissions",
					map[string][]string{"permissions": perms[(i/60)%2]}, http.StatusOK, nil)
			}
			path := "/users/" + users[(i/3)%len(users)] + "/roles/" + historyRoleID(i/150)
			if adds[k] {
				return a.Call(ctx, http.MethodPost, path, nil, http.StatusNoContent, nil)
			}
			return a.Call(ctx, http.MethodDelete, path, nil, http.StatusNoContent, nil)
		})
		if err != nil {
			return 0, err
		}
		last, err := newestSeq(ctx, a)
		if err != nil {
			return 0, err
		}
		if last-from >= historyRelevant {
			return last, nil
		}
	}
}

// newestSeq is the seq of the newest event in the audit log.
func newestSeq(ctx context.Context, a *client.Client) (int64, error) {
	var page struct {
		Items []struct {
			Seq int64 `json:"seq"`
		} `json:"items"`
	}
	if err := a.Call(ctx, http.MethodGet, "/audit-log?limit=1", nil, http.StatusOK, &page); err != nil {
		return 0, err
	}
	if len(page.Items) == 0 {
		return 0, nil
	}
	return page.Items[0].Seq, nil
}
