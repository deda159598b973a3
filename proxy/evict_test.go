package proxy

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"
)

// evictFiles fills n files of size bytes, one second apart on the test
// clock, and returns their paths and bodies.
func (e *env) evictFiles(up *fakeUpstream, n, size int) ([]string, [][]byte) {
	e.t.Helper()
	var paths []string
	var bodies [][]byte
	for i := range n {
		p := fmt.Sprintf("org/example/f%02d/1.0/f%02d-1.0.jar", i, i)
		b := jarBytes(p, size)
		up.set(p, fakeFile{body: b})
		e.get(p).expect(e.t, 200)
		e.clock.Advance(time.Second)
		paths, bodies = append(paths, p), append(bodies, b)
	}
	return paths, bodies
}

// TestEvictUnderBudget: past cache.max_bytes, entries go least recently
// downloaded first until the blobs take 90% of the budget; a file
// downloaded again is recent, whenever it was filled.
func TestEvictUnderBudget(t *testing.T) {
	const size = 200 << 10
	e := newEnv(t, func(o *envOptions) { o.Cache.MaxBytes = 1 << 20; o.Cache.MinFreeFraction = 0 })
	up := newFakeUpstream(t)
	uid := e.upstream(up.URL, nil, nil)
	paths, bodies := e.evictFiles(up, 10, size)
	e.get(paths[0]).expect(t, 200) // a hit: f00 is now the most recent
	if r, err := e.srv.EvictOnce(); err != nil || r.Reason != evictBudget || r.Entries != 6 || r.Freed != 6*size {
		t.Fatalf("eviction %+v, %v; want 6 entries of %d bytes", r, err, size)
	}
	for i, p := range paths {
		_, kept := e.entry(uid, "/"+p)
		if want := i == 0 || i >= 7; kept != want {
			t.Fatalf("%s kept %v, want %v", p, kept, want)
		}
	}
	if n, b := e.blobs.Stats(); n != 4 || b != 4*size || b > 9*(1<<20)/10 {
		t.Fatalf("%d blobs of %d bytes left", n, b)
	}
	if got := e.metric("registryd_cache_evictions_total"); got != 6 {
		t.Fatalf("evictions %v", got)
	}
	if got := e.metric("registryd_cache_evicted_bytes_total"); got != 6*size {
		t.Fatalf("evicted bytes %v", got)
	}
	if got := e.metric("registryd_cache_budget_bytes"); got != 1<<20 {
		t.Fatalf("budget %v", got)
	}
	// Under the budget: nothing more goes.
	if r, err := e.srv.EvictOnce(); err != nil || r.Entries != 0 || r.Reason != "" {
		t.Fatalf("second eviction %+v, %v", r, err)
	}
	// An evicted file is fetched again.
	e.get(paths[1]).expect(t, 200).expectBody(t, string(bodies[1]))
	e.noBrokenState()
	e.lint()
}

// TestEvictFreeFraction: below cache.min_free_fraction of the volume,
// entries go until 2 points more of it would be free.
func TestEvictFreeFraction(t *testing.T) {
	const size = 200 << 10
	e := newEnv(t, func(o *envOptions) { o.Cache.MinFreeFraction = 0.05 })
	vol := e.fakeVolume(50 * gib)
	up := newFakeUpstream(t)
	uid := e.upstream(up.URL, nil, nil)
	paths, _ := e.evictFiles(up, 5, size)
	// 10 MiB volume with 400 KiB free (3.9%): 7% is 734 KiB, 334 KiB to free.
	vol.total.Store(10 << 20)
	e.setFree(vol, 400<<10)
	r, err := e.srv.EvictOnce()
	if err != nil || r.Reason != evictFree || r.Entries != 2 || r.Freed != 2*size {
		t.Fatalf("eviction %+v, %v", r, err)
	}
	for i, p := range paths {
		if _, kept := e.entry(uid, "/"+p); kept != (i >= 2) {
			t.Fatalf("%s kept %v", p, kept)
		}
	}
	// A volume filled by others: everything goes, then a warning.
	e.setFree(vol, 0)
	if r, err := e.srv.EvictOnce(); err != nil || r.Entries != 3 {
		t.Fatalf("eviction %+v, %v", r, err)
	}
	if n, _ := e.blobs.Stats(); n != 0 {
		t.Fatalf("%d blobs left", n)
	}
	// Still below the mark (others' data, not ours): a miss is served
	// uncached rather than written and evicted at the next check.
	e.setFree(vol, 450<<10) // 4.4%: above the 1% reserve, below the 5% mark
	e.get(paths[0]).expect(t, 200)
	e.expectUncached(uid, paths[0])
	if st := e.blobs.DiskStatus(); st.Filling || !strings.Contains(st.Reason, "cache.min_free_fraction") {
		t.Fatalf("disk status %+v, want not filling below cache.min_free_fraction", st)
	}
	// Room again above the mark: fills cache by themselves.
	e.setFree(vol, 1<<20)
	e.get(paths[0]).expect(t, 200)
	if _, ok := e.entry(uid, "/"+paths[0]); !ok {
		t.Fatal("not cached with the volume back above the mark")
	}
}

// TestEvictWhileStreaming: a cached file evicted while a client is
// downloading it: its blob is unlinked, and the client gets every byte
// from the descriptor it holds.
func TestEvictWhileStreaming(t *testing.T) {
	e := newEnv(t, func(o *envOptions) { o.Cache.MaxBytes = 1 << 20; o.Cache.MinFreeFraction = 0 })
	up := newFakeUpstream(t)
	// Larger than loopback's socket buffers can hold: most of it is still
	// to be sent from the file when the blob goes.
	body := jarBytes(jarPath, 32<<20)
	up.set(jarPath, fakeFile{body: body})
	uid := e.upstream(up.URL, nil, nil)
	e.get(jarPath).expect(t, 200)
	res := e.startHeld(jarPath) // a hit, from the blob
	first := make([]byte, 64<<10)
	if _, err := io.ReadFull(res.Body, first); err != nil {
		t.Fatal(err)
	}
	if r, err := e.srv.EvictOnce(); err != nil || r.Entries != 1 {
		t.Fatalf("eviction %+v, %v", r, err)
	}
	if n, _ := e.blobs.Stats(); n != 0 {
		t.Fatal("the blob was not removed")
	}
	if _, kept := e.entry(uid, "/"+jarPath); kept {
		t.Fatal("the entry was not evicted")
	}
	rest, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil || !bytes.Equal(append(first, rest...), body) {
		t.Fatalf("the streaming client got %d bytes, %v", len(first)+len(rest), err)
	}
}
