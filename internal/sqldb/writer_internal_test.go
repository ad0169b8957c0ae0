package sqldb

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A write whose request gave up on it before its transaction took it is
// skipped, also when the batch runs again with a savepoint per write: the
// others' savepoints still open and close in order (a skipped first write
// must not make the next one release a savepoint never opened).
func TestBatchSkipsAGivenUpWriteAlsoWithSavepoints(t *testing.T) {
	bg := context.Background()
	db, err := Open(bg, Options{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.WritePool().Exec("CREATE TABLE kept (id TEXT PRIMARY KEY)").Error; err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	job := func(fn func(*Tx) error) *writeJob {
		return &writeJob{ctx: bg, fn: fn, done: make(chan writeResult, 1), deadline: deadline}
	}
	givenUp := job(func(*Tx) error {
		t.Error("a write given up ran")
		return nil
	})
	givenUp.state.Store(jobAbandoned)
	refused := errors.New("refused")
	failing := job(func(*Tx) error { return refused })
	kept := job(func(tx *Tx) error {
		_, err := tx.Exec(bg, "INSERT INTO kept (id) VALUES (?)", "kept")
		return err
	})
	live := []*writeJob{givenUp, failing, kept}
	if _, err := db.writer.attempt(live, false, deadline); !errors.Is(err, errRerun) {
		t.Fatalf("the batch without savepoints: %v, want it run again", err)
	}
	results, err := db.writer.attempt(live, true, deadline)
	if err != nil {
		t.Fatalf("the batch with savepoints: %v", err)
	}
	if !errors.Is(results[0].err, errAbandoned) || !errors.Is(results[1].err, refused) || results[2].err != nil {
		t.Fatalf("results %v, %v, %v; want given up, refused, done", results[0].err, results[1].err, results[2].err)
	}
	var n int64
	if err := db.ReadPool().Table("kept").Where("id = ?", "kept").Count(&n).Error; err != nil || n != 1 {
		t.Fatalf("the write beside a given-up one and a failed one: %d rows, %v", n, err)
	}
}
