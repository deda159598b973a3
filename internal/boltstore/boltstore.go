// Package boltstore opens the index of a single node's data directory on
// bbolt (DIR/registry.db), for the tests of the packages above store and
// for the bench, which seed and read a data directory offline. The daemon
// opens its engines in cmd/registryd; package store opens none.
package boltstore

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"registryd/store"
	"registryd/store/kv/boltkv"
)

// lockTimeout is how long Open waits for another process's lock on the
// file before failing.
const lockTimeout = time.Second

// Open opens (creating when needed) the index DIR/registry.db with o, or,
// when o.Engine is set (a test's PostgreSQL), the index on it.
func Open(dir string, o store.Options) (*store.Store, error) {
	if o.Engine != nil {
		return store.Open(o)
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	db, err := boltkv.Open(filepath.Join(dir, "registry.db"), boltkv.Options{Timeout: lockTimeout, AppendMostly: store.AppendMostly()})
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	o.Engine = db
	return store.Open(o)
}
