package sqldb

import (
	"context"
	"fmt"
	"hash/fnv"

	"gorm.io/gorm"
)

// Namespace is what keeps deployments in different schemas of one
// PostgreSQL database apart: their advisory-lock keys and NOTIFY channel,
// derived from the schema the connection works in (current_schema()).
//
// The public schema keeps the keys and channel of the versions before this
// one, so an upgrade of a deployment in public can replace its instances one
// at a time; a deployment in another schema must be upgraded all at once
// (its instances of the older version would take other keys).
type Namespace struct {
	Schema     string
	WriteKey   int64  // pg_advisory_xact_lock of every write transaction
	MigrateKey int64  // pg_advisory_lock of the migrations
	Channel    string // NOTIFY channel of committed events
	// Tag names the schema's transaction-local settings (the change log's
	// triggers, internal/fresh): a hash, as settings' names must be
	// identifiers.
	Tag string
}

// legacyWriteKey is "guildhal" in ASCII.
const legacyWriteKey int64 = 0x6775696c6468616c

func namespaceOf(schema string) Namespace {
	h := fnv.New64a()
	_, _ = h.Write([]byte(schema))
	tag := fmt.Sprintf("%016x", h.Sum64())
	if schema == "public" {
		return Namespace{Schema: schema, WriteKey: legacyWriteKey, MigrateKey: legacyWriteKey + 1, Channel: "guildhall_events", Tag: tag}
	}
	key := func(purpose string) int64 {
		h := fnv.New64a()
		_, _ = h.Write([]byte("guildhall\x00" + purpose + "\x00" + schema))
		return int64(h.Sum64())
	}
	// A channel is an identifier (at most 63 bytes): a hash, not the name.
	return Namespace{Schema: schema, WriteKey: key("write"), MigrateKey: key("migrate"),
		Channel: "guildhall_events_" + tag, Tag: tag}
}

// loadNamespace reads the connection's schema.
func loadNamespace(ctx context.Context, db *gorm.DB) (Namespace, error) {
	var schema *string
	if err := db.WithContext(ctx).Raw("SELECT current_schema()").Scan(&schema).Error; err != nil {
		return Namespace{}, fmt.Errorf("read the current schema: %w", err)
	}
	if schema == nil || *schema == "" {
		return Namespace{}, fmt.Errorf("the search_path of the database URL names no existing schema: create it first")
	}
	return namespaceOf(*schema), nil
}

// Namespace is the PostgreSQL schema's (the zero Namespace on SQLite).
func (db *DB) Namespace() Namespace { return db.ns }

// EventChannel is the PostgreSQL NOTIFY channel that carries the seqs of
// committed events ("" on SQLite).
func (db *DB) EventChannel() string { return db.ns.Channel }
