package main

import (
	"registryd/config"
	"registryd/osv"
	"registryd/store"
	"registryd/store/kv"
)

// openStore opens the index on engine (openEngine's), with the group
// commit bounds of sc.
func openStore(key []byte, engine kv.DB, sc config.Store) (*store.Store, error) {
	return store.Open(store.Options{SecretKey: key, Engine: engine, Matcher: osv.Matcher{},
		BatchMaxEntries: sc.BatchMaxEntries, BatchMaxHold: sc.BatchMaxHold})
}
