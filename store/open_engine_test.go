package store

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"registryd/store/kv"
	"registryd/store/kv/boltkv"
)

// clusterEngine is a bbolt engine that claims to be shared, recording the
// locks Open takes and whether it was closed.
type clusterEngine struct {
	*boltkv.DB
	locks    []string
	held     bool
	inSchema bool // a transaction ran while the schema lock was held
	closed   bool
}

func (c *clusterEngine) View(fn func(kv.Tx) error) error {
	c.inSchema = c.inSchema || c.held
	return c.DB.View(fn)
}

func (c *clusterEngine) Close() error { c.closed = true; return c.DB.Close() }

func (c *clusterEngine) Publish(context.Context, []byte) error     { return nil }
func (c *clusterEngine) Subscribe(func(msg []byte), time.Duration) {}
func (c *clusterEngine) Lock(_ context.Context, key string) (func(), error) {
	c.locks = append(c.locks, key)
	c.held = true
	return func() { c.held = false }, nil
}
func (c *clusterEngine) TryLock(ctx context.Context, key string) (func(), bool, error) {
	unlock, err := c.Lock(ctx, key)
	return unlock, err == nil, err
}

var _ kv.Cluster = (*clusterEngine)(nil)

// TestOpenEngine: Open uses the given engine (no registry.db), sets the
// schema up under the cluster's schema lock when the engine is shared, and
// closes the engine on Close and on a failed Open.
func TestOpenEngine(t *testing.T) {
	boltOnly(t, "the engine under test is a bbolt file in disguise")
	path := filepath.Join(t.TempDir(), "shared.db")
	engine := func() *clusterEngine {
		db, err := boltkv.Open(path, boltkv.Options{Timeout: time.Second})
		noErr(t, err)
		return &clusterEngine{DB: db}
	}
	dir := t.TempDir()
	e := engine()
	s, err := Open(Options{SecretKey: testKey, Engine: e})
	noErr(t, err)
	if len(e.locks) != 1 || e.locks[0] != schemaLockKey || e.held || !e.inSchema {
		t.Fatalf("locks %q, held after Open %v, schema checked under the lock %v", e.locks, e.held, e.inSchema)
	}
	if matches, _ := filepath.Glob(filepath.Join(dir, "*")); len(matches) != 0 {
		t.Fatalf("Open with an engine wrote %v", matches)
	}
	topGroup(t, s, "acme")
	noErr(t, s.Close())
	if !e.closed {
		t.Fatal("Close left the engine open")
	}

	e = engine()
	if _, err := Open(Options{SecretKey: otherKey, Engine: e}); !errors.Is(err, ErrWrongKey) {
		t.Fatalf("another key: %v", err)
	}
	if !e.closed || e.held {
		t.Fatalf("after a failed Open: closed %v, lock held %v", e.closed, e.held)
	}
}
