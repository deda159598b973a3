package store

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"registryd/internal/testsvc"
	"registryd/store/kv"
	"registryd/store/kv/pgkv"
)

// REGISTRYD_TEST_STORE=postgres runs package store's tests on the
// PostgreSQL engine: every test store gets a fresh database of the test
// binary's PostgreSQL server (internal/testsvc; skipped without the server
// binaries unless CI=true). A test that reopens the same directory must
// find the same data, so the database is chosen by directory.

// TestMain stops the servers testsvc started (none on the bolt run).
func TestMain(m *testing.M) {
	code := m.Run()
	testsvc.StopAll()
	os.Exit(code)
}

var pgDatabases sync.Map // store dir -> DSN

func init() {
	testEngines["postgres"] = func(t testing.TB, dir string) kv.DB {
		t.Helper()
		dsn, ok := pgDatabases.Load(dir)
		if !ok {
			dsn = testsvc.Postgres(t).NewDatabase(t)
			pgDatabases.Store(dir, dsn)
			t.Cleanup(func() { pgDatabases.Delete(dir) })
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// Small pools: tests may run in parallel against one server.
		db, err := pgkv.Open(ctx, pgkv.Options{DSN: dsn.(string), MaxConns: 8, MaxLocks: 8})
		if err != nil {
			t.Fatalf("pgkv.Open: %v", err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}
}
