package proxy

import (
	"context"
	"sync"
	"testing"
	"time"

	"registryd/internal/testsvc"
	"registryd/store"
	"registryd/store/blob"
	"registryd/store/kv/pgkv"
)

// TestClusterLockPoolNotExhausted: with as many concurrent misses of
// distinct files on one node as the engine has lock connections, each fill
// would hold its fill lease and wait in Publish for a second connection
// (the blob's lock), and none could commit before the publish timeout.
// Fill leases take at most half of the pool, so both commit at once.
func TestClusterLockPoolNotExhausted(t *testing.T) {
	srv := testsvc.MinIO(t)
	obj := srv.NewObjects(t, "")
	dsn := testsvc.Postgres(t).NewDatabase(t)
	db, err := pgkv.Open(context.Background(), pgkv.Options{DSN: dsn, MaxConns: 8, MaxLocks: 2})
	if err != nil {
		t.Fatal(err)
	}
	var st *store.Store
	envBlobOpeners.Store(t, func(dir string) (*blob.Store, error) {
		return blob.OpenTiered(dir, blob.TieredOptions{Objects: obj, LocalCacheBytes: 64 << 20,
			Lock: func(ctx context.Context, key string) (func(), error) { return st.Lease(ctx, key) }})
	})
	e := newEnvStore(t, store.Options{Engine: db}, func(o *envOptions) { o.Cache.MaxLocks = 2 })
	envBlobOpeners.Delete(t)
	st = e.st
	up := newFakeUpstream(t)
	paths := []string{"org/example/a/1.0/a-1.0.jar", "org/example/b/1.0/b-1.0.jar"}
	for _, p := range paths {
		up.set(p, fakeFile{body: jarBytes(p, 300<<10)})
	}
	uid := e.upstream(up.URL, nil, nil)
	start := time.Now()
	var wg sync.WaitGroup
	for _, p := range paths {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := e.getNow(p)
			t.Logf("%s: %d after %v", p, r.status, time.Since(start))
		}()
	}
	wg.Wait()
	deadline := time.Now().Add(20 * time.Second)
	for _, p := range paths {
		for {
			if _, ok := e.entry(uid, "/"+p); ok {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: no entry committed %v after the misses (locks held %d)", p, time.Since(start), db.LocksHeld())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	t.Logf("both committed after %v", time.Since(start))
}
