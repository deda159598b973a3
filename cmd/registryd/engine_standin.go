//go:build !merged

// STAND-IN until store.Options.Engine is merged (helper "kv"): DELETE this
// file at the merge, and the build line of engine.go.

package main

import (
	"errors"

	"registryd/store"
	"registryd/store/kv"
)

func openStore(dir string, key []byte, engine kv.DB) (*store.Store, error) {
	if engine != nil {
		return nil, errors.New("stand-in: store.Options.Engine is not merged yet")
	}
	return store.Open(dir, store.Options{SecretKey: key})
}
