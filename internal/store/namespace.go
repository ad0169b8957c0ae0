package store

import (
	"context"
	"fmt"
	"hash/fnv"

	"gorm.io/gorm"
)

// namespace is what keeps deployments in different schemas of one
// PostgreSQL database apart: their advisory-lock keys and NOTIFY channel,
// derived from the schema the connection works in (current_schema()).
//
// The public schema keeps the keys and channel of the versions before this
// one, so an upgrade of a deployment in public can replace its instances one
// at a time; a deployment in another schema must be upgraded all at once
// (its instances of the older version would take other keys).
type namespace struct {
	schema     string
	writeKey   int64  // pg_advisory_xact_lock of every write transaction
	migrateKey int64  // pg_advisory_lock of the migrations
	channel    string // NOTIFY channel of committed events
	// tag names the schema's transaction-local settings (dataversion.go):
	// a hash, as settings' names must be identifiers.
	tag string
}

// legacyWriteKey is "guildhal" in ASCII.
const legacyWriteKey int64 = 0x6775696c6468616c

func namespaceOf(schema string) namespace {
	h := fnv.New64a()
	_, _ = h.Write([]byte(schema))
	tag := fmt.Sprintf("%016x", h.Sum64())
	if schema == "public" {
		return namespace{schema: schema, writeKey: legacyWriteKey, migrateKey: legacyWriteKey + 1, channel: "guildhall_events", tag: tag}
	}
	key := func(purpose string) int64 {
		h := fnv.New64a()
		_, _ = h.Write([]byte("guildhall\x00" + purpose + "\x00" + schema))
		return int64(h.Sum64())
	}
	// A channel is an identifier (at most 63 bytes): a hash, not the name.
	return namespace{schema: schema, writeKey: key("write"), migrateKey: key("migrate"),
		channel: "guildhall_events_" + tag, tag: tag}
}

// loadNamespace reads the connection's schema.
func loadNamespace(ctx context.Context, db *gorm.DB) (namespace, error) {
	var schema *string
	if err := db.WithContext(ctx).Raw("SELECT current_schema()").Scan(&schema).Error; err != nil {
		return namespace{}, fmt.Errorf("read the current schema: %w", err)
	}
	if schema == nil || *schema == "" {
		return namespace{}, fmt.Errorf("the search_path of the database URL names no existing schema: create it first")
	}
	return namespaceOf(*schema), nil
}

// EventChannel is the PostgreSQL NOTIFY channel that carries the seqs of
// committed events ("" on SQLite).
func (s *Store) EventChannel() string { return s.ns.channel }
