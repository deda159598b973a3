package main

import (
	"registryd/config"
	"registryd/osv"
	"registryd/store"
	"registryd/store/kv"
)

// openStore opens the index on engine (nil: bbolt at DIR/registry.db),
// with the group commit bounds of sc.
func openStore(dir string, key []byte, engine kv.DB, sc config.Store) (*store.Store, error) {
	return store.Open(dir, store.Options{SecretKey: key, Engine: engine, Matcher: osv.Matcher{},
		BatchMaxEntries: sc.BatchMaxEntries, BatchMaxHold: sc.BatchMaxHold})
}
