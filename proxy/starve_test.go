package proxy

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"registryd/store"
)

// TestCollectorRestIgnoresWriterWait: a collector batch that waited for the
// index's writer (held here for writerWait, as a backlog of commits would
// hold it) rests after its own work only, not after the wait: a rest as
// long as the wait made a collector behind a busy writer fall ever further
// behind, and a purge under load was never destroyed.
func TestCollectorRestIgnoresWriterWait(t *testing.T) {
	const writerWait = time.Second // the injected slow writer; the batches' own work is milliseconds
	db := newHeldDB(t)
	e := newEnvStore(t, store.Options{Engine: db})
	t.Cleanup(db.release)
	up := newFakeUpstream(t)
	uid := e.upstream(up.URL, nil, nil)
	// Two collector batches' worth of entries (no blob files: the
	// collector only finds nothing to unlink), then a purge.
	var es []store.CacheEntry
	for i := range collectBatch + collectBatch/2 {
		es = append(es, store.CacheEntry{UpstreamID: uid, RelativePath: fmt.Sprintf("/g/%d.jar", i),
			SHA256: fmt.Sprintf("%064x", i+1), Size: 1})
	}
	if err := e.st.PutCacheEntries(es); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.PurgeUpstreamCache(uid); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var rests []time.Duration
	e.hooks.OnRest = func(d time.Duration) { mu.Lock(); rests = append(rests, d); mu.Unlock() }

	db.hold()
	done := make(chan error, 1)
	go func() {
		r, err := e.srv.CollectOnce()
		if err == nil && r.Entries != len(es) {
			err = fmt.Errorf("collected %d entries, want %d", r.Entries, len(es))
		}
		done <- err
	}()
	<-db.waiting // the first batch waits for the writer
	time.Sleep(writerWait)
	db.release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(rests) != 1 {
		t.Fatalf("rests %v, want one between the two batches", rests)
	}
	if rests[0] >= writerWait {
		t.Fatalf("the collector rested %v after a batch that waited %v for the writer: it counted the wait as work",
			rests[0], writerWait)
	}
	if st := e.st.CacheStats(); st.Pending != 0 || st.Entries != 0 {
		t.Fatalf("CacheStats %+v after the collection", st)
	}
}

// TestEvictPassesPurgedEntries: with a purge in progress at the head of the
// least-recently-used order and the collector not running (a collector
// starved by a busy writer), eviction hands the purged entries to the
// collector and frees their space first: the budget holds, and no live
// entry is evicted while purged ones hold the space.
func TestEvictPassesPurgedEntries(t *testing.T) {
	const size, n = 10 << 10, 10
	e := newEnv(t, func(o *envOptions) { o.Cache.MaxBytes = 15 * size; o.Cache.MinFreeFraction = 0 })
	old, live := newFakeUpstream(t), newFakeUpstream(t)
	oldID := e.upstream(old.URL, nil, nil) // first in the registry's order: its fills come first
	liveID := e.upstream(live.URL, nil, nil)
	fill := func(up *fakeUpstream, prefix string) []string {
		var paths []string
		for i := range n {
			p := fmt.Sprintf("org/%s/f%02d/1.0/f%02d-1.0.jar", prefix, i, i)
			up.set(p, fakeFile{body: jarBytes(p, size)})
			paths = append(paths, p)
		}
		return paths
	}
	oldPaths, livePaths := fill(old, "old"), fill(live, "live")
	for _, p := range oldPaths {
		e.get(p).expect(t, 200)
	}
	e.clock.Advance(time.Second)
	// The live upstream serves these (the old one answers 404 for them).
	for _, p := range livePaths {
		e.get(p).expect(t, 200)
	}
	if _, err := e.st.PurgeUpstreamCache(oldID); err != nil {
		t.Fatal(err)
	}
	if _, b := e.blobs.Stats(); b != 2*n*size {
		t.Fatalf("%d bytes of blobs, want %d", b, 2*n*size)
	}
	r, err := e.srv.EvictOnce()
	if err != nil || r.Reason != evictBudget {
		t.Fatalf("eviction %+v, %v", r, err)
	}
	if r.Entries != 0 || r.Purged == 0 || r.Freed < r.Want {
		t.Fatalf("eviction %+v: want purged entries only, freeing what it set out to", r)
	}
	if _, b := e.blobs.Stats(); b > 15*size {
		t.Fatalf("%d bytes of blobs after the eviction, budget %d", b, 15*size)
	}
	for _, p := range livePaths {
		if _, ok := e.entry(liveID, "/"+p); !ok {
			t.Fatalf("%s was evicted while purged entries held the space", p)
		}
	}
	if got := e.metric("registryd_cache_evictions_total"); got != 0 {
		t.Fatalf("evictions %v, want none of a live entry", got)
	}
	e.noBrokenState()
}
