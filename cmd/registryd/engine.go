package main

import (
	"registryd/osv"
	"registryd/store"
	"registryd/store/kv"
)

// openStore opens the index on engine (nil: bbolt at DIR/registry.db).
func openStore(dir string, key []byte, engine kv.DB) (*store.Store, error) {
	return store.Open(dir, store.Options{SecretKey: key, Engine: engine, Matcher: osv.Matcher{}})
}
