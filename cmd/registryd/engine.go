package main

import (
	"registryd/config"
	"registryd/store"
	"registryd/store/kv"
)

// openStore opens the index on engine (nil: bbolt at DIR/registry.db),
// with the group commit bounds of sc.
func openStore(dir string, key []byte, engine kv.DB, sc config.Store) (*store.Store, error) {
	return store.Open(dir, store.Options{SecretKey: key, Engine: engine,
		BatchMaxEntries: sc.BatchMaxEntries, BatchMaxHold: sc.BatchMaxHold})
}
