package proxy

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"registryd/store"
	"registryd/store/kv"
	"registryd/store/kv/boltkv"
)

// heldDB is an index engine whose write transactions can be held back, as
// a disk that cannot keep up holds them: hold makes every Update wait until
// release.
type heldDB struct {
	kv.DB
	mu      sync.Mutex
	gate    chan struct{} // nil: writes go through
	waiting chan struct{} // a value each time a write starts waiting (dropped when full)
}

func newHeldDB(t testing.TB) *heldDB {
	db, err := boltkv.Open(filepath.Join(t.TempDir(), "registry.db"), boltkv.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return &heldDB{DB: db, waiting: make(chan struct{}, 64)}
}

func (d *heldDB) hold() {
	d.mu.Lock()
	d.gate = make(chan struct{})
	d.mu.Unlock()
}

func (d *heldDB) release() {
	d.mu.Lock()
	if d.gate != nil {
		close(d.gate)
		d.gate = nil
	}
	d.mu.Unlock()
}

func (d *heldDB) Update(fn func(kv.Tx) error) error {
	d.mu.Lock()
	g := d.gate
	d.mu.Unlock()
	if g != nil {
		select {
		case d.waiting <- struct{}{}:
		default:
		}
		<-g
	}
	return d.DB.Update(fn)
}

// pendingEnv is an env on a heldDB with cache.max_pending_stores 4, whose
// store slot takes are reported on the returned channel.
func pendingEnv(t *testing.T) (*env, *heldDB, chan bool) {
	t.Helper()
	db := newHeldDB(t)
	e := newEnvStore(t, store.Options{Engine: db}, func(o *envOptions) { o.Cache.MaxPendingStores = 4 })
	t.Cleanup(db.release) // before the env's cleanup, which stores what waits
	taken := make(chan bool, 256)
	e.hooks.OnStoreTake = func(ok bool) { taken <- ok }
	return e, db, taken
}

// TestPendingStoresBound: while the index holds its commits, the fills
// waiting to be stored stop at cache.max_pending_stores; every miss past it
// is answered whole (with its checksums, and its sidecar from memory) but
// not stored, so neither waiting stores nor goroutines pile up; once the
// commits resume, the waiting stores drain and misses are stored again.
func TestPendingStoresBound(t *testing.T) {
	e, db, taken := pendingEnv(t)
	up := newFakeUpstream(t)
	uid := e.upstream(up.URL, nil, nil)
	const files = 54
	path := func(i int) string { return fmt.Sprintf("org/ex/a%d/1.0/a%d-1.0.pom", i, i) }
	body := func(i int) []byte { return jarBytes(path(i), 1<<10) }
	for i := range files {
		up.set(path(i), fakeFile{body: body(i)})
	}

	db.hold()
	for i := range 4 {
		e.getNow(path(i)).expect(t, 200).expectBody(t, string(body(i)))
		if !<-taken {
			t.Fatalf("fill %d found no store slot with %d of 4 taken", i, i)
		}
	}
	if got := e.srv.stores.pending(); got != 4 {
		t.Fatalf("%d stores pending, want 4", got)
	}
	goroutines := runtime.NumGoroutine()
	for i := 4; i < files; i++ {
		r := e.getNow(path(i)).expect(t, 200).expectBody(t, string(body(i)))
		sum := sha1.Sum(body(i))
		if got := r.header.Get("X-Checksum-Sha1"); got != hex.EncodeToString(sum[:]) {
			t.Fatalf("file %d: X-Checksum-Sha1 %q", i, got)
		}
		if <-taken {
			t.Fatalf("fill %d took a store slot past the bound", i)
		}
	}
	if got := e.srv.stores.pending(); got != 4 {
		t.Fatalf("%d stores pending past the bound, want 4", got)
	}
	// Each miss past the bound left nothing behind: without the bound each
	// would still hold its fill's goroutine.
	if grown := runtime.NumGoroutine() - goroutines; grown >= (files-4)/2 {
		t.Fatalf("%d goroutines more after %d misses past the bound", grown, files-4)
	}
	if got := e.metric("registryd_cache_stores_turned_away_total", "kind", turnedAwayFill); got != files-4 {
		t.Fatalf("turned away = %v, want %d", got, files-4)
	}
	if got := e.metric("registryd_cache_pending_stores"); got != 4 {
		t.Fatalf("registryd_cache_pending_stores = %v, want 4", got)
	}
	// Maven's .sha1 after the file: answered from the digests kept in
	// memory, without fetching the file again (and without waiting for a
	// store: the sidecar of a file whose store waited would wait with it).
	sum := sha1.Sum(body(4))
	e.getNow(path(4)+".sha1").expect(t, 200).expectBody(t, hex.EncodeToString(sum[:]))
	if n := up.calls(path(4)); n != 1 {
		t.Fatalf("the sidecar of an unstored file fetched it again: %d GETs", n)
	}

	db.release()
	e.waitFills()
	if got := e.srv.stores.pending(); got != 0 {
		t.Fatalf("%d stores pending after the commits resumed", got)
	}
	for i := range files {
		_, stored := e.entry(uid, "/"+path(i))
		if stored != (i < 4) {
			t.Fatalf("file %d: stored %v", i, stored)
		}
	}
	// With room again, the next miss of an unstored file stores it.
	e.get(path(4)).expect(t, 200).expectBody(t, string(body(4)))
	if !<-taken {
		t.Fatal("no store slot after the drain")
	}
	if _, ok := e.entry(uid, "/"+path(4)); !ok {
		t.Fatal("the miss after the drain was not stored")
	}
	e.noBrokenState()
}

// TestPendingStoresRevalidation: past the bound, a revalidation the
// upstream confirms (304) serves the stored copy without recording the
// check, so the copy stays stale and the next request revalidates again.
func TestPendingStoresRevalidation(t *testing.T) {
	e, db, taken := pendingEnv(t)
	up := newFakeUpstream(t)
	uid := e.upstream(up.URL, hours(1), nil)
	up.set(jarPath, fakeFile{body: []byte("version 1"), etag: `"v1"`})
	e.get(jarPath).expect(t, 200)
	<-taken
	checked, _ := e.entry(uid, "/"+jarPath)

	db.hold()
	for i := range 4 {
		p := fmt.Sprintf("org/ex/b%d/1.0/b%d-1.0.pom", i, i)
		up.set(p, fakeFile{body: []byte(p)})
		e.getNow(p).expect(t, 200)
		<-taken
	}
	e.clock.Advance(2 * time.Hour)
	e.getNow(jarPath).expect(t, 200).expectBody(t, "version 1")
	if <-taken {
		t.Fatal("the revalidation took a store slot past the bound")
	}
	if got := e.metric("registryd_cache_stores_turned_away_total", "kind", turnedAwayCheck); got != 1 {
		t.Fatalf("turned away revalidations = %v, want 1", got)
	}
	db.release()
	e.waitFills()
	if ce, _ := e.entry(uid, "/"+jarPath); !ce.CheckedAt.Equal(checked.CheckedAt) {
		t.Fatalf("the check was recorded: %v, was %v", ce.CheckedAt, checked.CheckedAt)
	}
	// Still stale: revalidated again, recorded this time.
	e.get(jarPath).expect(t, 200).expectBody(t, "version 1")
	if !<-taken {
		t.Fatal("no store slot for the second revalidation")
	}
	if up.calls(jarPath) != 3 {
		t.Fatalf("upstream GETs = %d, want 3 (fill, two revalidations)", up.calls(jarPath))
	}
	if ce, _ := e.entry(uid, "/"+jarPath); !ce.CheckedAt.Equal(e.clock.Now().UTC().Truncate(time.Millisecond)) {
		t.Fatalf("the second check was not recorded: %v", ce.CheckedAt)
	}
}
