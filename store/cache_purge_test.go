package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"registryd/internal/testclock"
	"registryd/store/kv"
	"registryd/store/kv/boltkv"
)

// purgeFixture is a registry with two upstreams: big, with n entries each
// with its own blob, and other, with one entry. Both exclusive to the
// registry.
type purgeFixture struct {
	s          *Store
	clock      *testclock.Clock
	dir        string
	reg        int64
	big, other int64
	n          int
}

func newPurgeFixture(t *testing.T, n int) *purgeFixture {
	t.Helper()
	dir := t.TempDir()
	c := newClock()
	s, err := openAt(t, dir, Options{SecretKey: testKey, Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	closeChecked(t, s)
	g := topGroup(t, s, "acme")
	r := ok(s.CreateRegistry(g.ID, "main", ""))(t)
	f := &purgeFixture{s: s, clock: c, dir: dir, reg: r.ID, n: n,
		big:   up(t, s, r.ID, "https://big.example/m").ID,
		other: up(t, s, r.ID, "https://other.example/m").ID}
	var es []CacheEntry
	for i := range n {
		es = append(es, CacheEntry{UpstreamID: f.big, RelativePath: purgePath(i), Size: 10, SHA256: purgeSHA(i)})
	}
	noErr(t, s.PutCacheEntries(es))
	ok(s.PutCacheEntry(CacheEntry{UpstreamID: f.other, RelativePath: purgePath(0), Size: 7, SHA256: "other"}))(t)
	c.Advance(time.Second)
	return f
}

func purgePath(i int) string { return fmt.Sprintf("/org/p/lib%d/1.0/lib%d-1.0.jar", i, i) }
func purgeSHA(i int) string  { return fmt.Sprintf("%064x", i+1) }

// refs is the blob reference count of sha.
func refs(t *testing.T, s *Store, sha string) int64 {
	t.Helper()
	var n int64
	noErr(t, s.db.View(func(tx kv.Tx) error {
		if v := tx.Bucket(bktBlobRefs).Get([]byte(sha)); v != nil {
			n = btoi(v)
		}
		return nil
	}))
	return n
}

// wantPurged checks that no read of the store sees the entry at path i of
// the big upstream.
func (f *purgeFixture) wantPurged(t *testing.T, i int) {
	t.Helper()
	s, rel := f.s, purgePath(i)
	if _, err := s.CacheEntry(f.big, rel); !errors.Is(err, ErrNotFound) {
		t.Fatalf("CacheEntry of a purged entry: %v", err)
	}
	if e, found := ok2(s.FirstCacheEntry([]int64{f.big}, rel))(t); found {
		t.Fatalf("FirstCacheEntry found a purged entry: %+v", e)
	}
	for name, err := range map[string]error{
		"TouchCacheEntry":  s.TouchCacheEntry(f.big, rel, f.clock.Now()),
		"DeleteCacheEntry": s.DeleteCacheEntry(f.big, rel),
	} {
		if !errors.Is(err, ErrNotFound) {
			t.Fatalf("%s of a purged entry: %v", name, err)
		}
	}
	if _, err := s.InvalidateCacheEntry(f.big, rel); !errors.Is(err, ErrNotFound) {
		t.Fatalf("InvalidateCacheEntry of a purged entry: %v", err)
	}
	for _, search := range []string{"", fmt.Sprintf("lib%d-", i), rel} {
		list, _ := ok2(s.ListCacheEntries(f.big, search, 0, f.n+10))(t)
		for _, e := range list {
			if e.RelativePath == rel {
				t.Fatalf("search %q lists a purged entry", search)
			}
		}
	}
}

// collectAll runs CollectPending(batch) until no work is left and returns the
// batches.
func collectAll(t *testing.T, s *Store, batch int) []Collected {
	t.Helper()
	var out []Collected
	for range 100000 {
		c := ok(s.CollectPending(batch))(t)
		if c.Entries > batch {
			t.Fatalf("a batch of %d destroyed %d entries", batch, c.Entries)
		}
		out = append(out, c)
		if !c.More {
			return out
		}
	}
	t.Fatal("the collector never finished")
	return nil
}

func TestPurgeMarksThenCollectsInBatches(t *testing.T) {
	f := newPurgeFixture(t, 1000)
	s := f.s
	gen := s.CacheGeneration()
	if n := ok(s.PurgeRegistryCache(f.reg))(t); n != f.n+1 {
		t.Fatalf("purged %d, want %d", n, f.n+1)
	}
	if s.CacheGeneration() != gen+1 {
		t.Fatalf("generation moved by %d, want exactly 1 for the whole purge", s.CacheGeneration()-gen)
	}
	// The purge is one mark per upstream, not a move of every entry: the
	// records are still there, and invisible.
	if st := s.CacheStats(); st.Entries != 0 || st.Pending != f.n+1 || st.Blobs != f.n+1 {
		t.Fatalf("after the purge: %+v", st)
	}
	for _, i := range []int{0, 1, 499, 999} {
		f.wantPurged(t, i)
	}
	if _, total := allCacheEntries(t, s, f.big); total != 0 {
		t.Fatalf("lists %d entries", total)
	}
	noErr(t, s.AddDownloads([]DownloadCount{{UpstreamID: f.big, Rel: purgePath(3), Count: 5, Last: f.clock.Now()}}))

	gen = s.CacheGeneration()
	batches := collectAll(t, s, 100)
	if len(batches) < 10 {
		t.Fatalf("%d batches of at most 100 for %d entries", len(batches), f.n+1)
	}
	seen := map[string]bool{}
	entries := 0
	for _, b := range batches {
		entries += b.Entries
		for _, sha := range b.Unreferenced {
			if seen[sha] {
				t.Fatalf("blob %s reported twice", sha)
			}
			seen[sha] = true
		}
	}
	if entries != f.n+1 || len(seen) != f.n+1 {
		t.Fatalf("collected %d entries, %d blobs; want %d of each", entries, len(seen), f.n+1)
	}
	if s.CacheGeneration() != gen {
		t.Fatal("collecting moved the generation: what it destroys was already absent")
	}
	if st := s.CacheStats(); st != (CacheStats{}) {
		t.Fatalf("after collection: %+v", st)
	}
	noErr(t, s.db.View(func(tx kv.Tx) error {
		for _, b := range [][]byte{bktCachePurges, bktCacheEntries, bktCacheByTime, bktBlobRefs} {
			if k, _ := tx.Bucket(b).Cursor().First(); k != nil {
				t.Errorf("bucket %s not empty after collection: %x", b, k)
			}
		}
		return nil
	}))
}

// TestPurgeCrashBetweenBatches: a crash leaves the index as of the last
// commit, so a copy taken between two batches (bbolt's consistent snapshot)
// is what a restart sees. Purged entries stay unserved there, and the
// collector of the restarted store finishes the work.
func TestPurgeCrashBetweenBatches(t *testing.T) {
	boltOnly(t, "the crash is simulated by copying the bbolt file between two commits")
	f := newPurgeFixture(t, 600)
	s := f.s
	ok(s.PurgeUpstreamCache(f.big))(t)
	done := 0
	for range 3 {
		c := ok(s.CollectPending(64))(t)
		done += c.Entries
	}
	crash := filepath.Join(t.TempDir(), "crash")
	noErr(t, s.engine.(*boltkv.DB).CopyFile(filepath.Join(mkdir(t, crash), "registry.db")))

	r, err := openAt(t, crash, Options{SecretKey: testKey, Now: f.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	f2 := *f
	f2.s = r
	if st := r.CacheStats(); st.Entries != 1 || st.Pending != f.n-done {
		t.Fatalf("after the restart: %+v, want 1 live and %d pending", st, f.n-done)
	}
	for i := range f.n {
		if _, err := r.CacheEntry(f.big, purgePath(i)); !errors.Is(err, ErrNotFound) {
			t.Fatalf("entry %d served after the restart: %v", i, err)
		}
	}
	f2.wantPurged(t, f.n-1)
	if e := ok(r.CacheEntry(f.other, purgePath(0)))(t); e.SHA256 != "other" {
		t.Fatalf("the other upstream's entry: %+v", e)
	}
	rest := 0
	for _, c := range collectAll(t, r, 64) {
		rest += c.Entries
	}
	if rest != f.n-done {
		t.Fatalf("the restart collected %d, want the %d left", rest, f.n-done)
	}
	for i := range f.n {
		if n := refs(t, r, purgeSHA(i)); n != 0 {
			t.Fatalf("blob %d keeps %d references", i, n)
		}
	}
	if st := r.CacheStats(); st.Entries != 1 || st.Pending != 0 || st.Blobs != 1 {
		t.Fatalf("after the restart's collection: %+v", st)
	}
}

func mkdir(t *testing.T, dir string) string {
	t.Helper()
	noErr(t, os.MkdirAll(dir, 0o750))
	return dir
}

// TestFillDuringPurge: entries written while a purge is in progress are
// live; one that replaces a purged entry starts afresh; the collector
// destroys only what the purge covers, and a second purge covers both.
func TestFillDuringPurge(t *testing.T) {
	f := newPurgeFixture(t, 300)
	s := f.s
	noErr(t, s.AddDownloads([]DownloadCount{{UpstreamID: f.big, Rel: purgePath(7), Count: 9, Last: f.clock.Now()}}))
	before := ok(s.CacheEntry(f.big, purgePath(7)))(t)
	ok(s.PurgeUpstreamCache(f.big))(t)
	ok(s.CollectPending(50))(t) // part of the way

	f.clock.Advance(time.Hour)
	refill := ok(s.PutCacheEntry(CacheEntry{UpstreamID: f.big, RelativePath: purgePath(7), Size: 3, SHA256: "fresh"}))(t)
	if !refill.CreatedAt.After(before.CreatedAt) || refill.DownloadsCount != 0 || refill.DownloadedAt != nil {
		t.Fatalf("a refill of a purged entry inherited from it: %+v", refill)
	}
	ok(s.PutCacheEntry(CacheEntry{UpstreamID: f.big, RelativePath: "/new/1/new-1.jar", Size: 4, SHA256: "new"}))(t)
	if n := refs(t, s, purgeSHA(7)); n != 0 {
		t.Fatalf("the replaced purged entry still holds its blob (%d)", n)
	}
	for _, rel := range []string{purgePath(7), "/new/1/new-1.jar"} {
		if _, err := s.CacheEntry(f.big, rel); err != nil {
			t.Fatalf("%s written during the purge: %v", rel, err)
		}
	}
	if got, total := allCacheEntries(t, s, f.big); total != 2 || len(got) != 2 {
		t.Fatalf("lists %v (total %d), want the 2 written during the purge", relPaths(got), total)
	}
	if got, _ := ok2(s.ListCacheEntries(f.big, "/new/", 0, 10))(t); len(got) != 1 {
		t.Fatalf("prefix search: %v", relPaths(got))
	}
	if st := s.CacheStats(); st.Entries != 3 || st.Pending != 300-50-1 {
		t.Fatalf("stats during the purge: %+v", st)
	}

	// A second purge before the first is done covers the new entries too,
	// and counts only what was live.
	if n := ok(s.PurgeUpstreamCache(f.big))(t); n != 2 {
		t.Fatalf("second purge: %d, want 2", n)
	}
	if _, err := s.CacheEntry(f.big, purgePath(7)); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the second purge left the refill: %v", err)
	}
	collectAll(t, s, 50)
	if st := s.CacheStats(); st.Entries != 1 || st.Pending != 0 || st.Blobs != 1 {
		t.Fatalf("after both purges: %+v", st)
	}
}

// TestPurgeBatchBounded: a batch visits a bounded number of keys even when
// nearly every entry of a purged upstream was filled again since.
func TestPurgeBatchBounded(t *testing.T) {
	f := newPurgeFixture(t, 200)
	s := f.s
	ok(s.PurgeUpstreamCache(f.big))(t)
	var es []CacheEntry
	for i := range 199 {
		es = append(es, CacheEntry{UpstreamID: f.big, RelativePath: purgePath(i), Size: 1, SHA256: "again"})
	}
	noErr(t, s.PutCacheEntries(es))
	batches := collectAll(t, s, 5) // at most 20 keys a batch
	if len(batches) < 200/(purgeScanFactor*5) {
		t.Fatalf("%d batches walked 200 keys", len(batches))
	}
	if st := s.CacheStats(); st.Entries != 200 || st.Pending != 0 {
		t.Fatalf("after collection: %+v, want the 199 refills and the other upstream's entry", st)
	}
}

// TestFirstCacheEntrySkipsPurged: a purged entry of the first upstream gives
// way to the next upstream's.
func TestFirstCacheEntrySkipsPurged(t *testing.T) {
	f := newPurgeFixture(t, 3)
	ok(f.s.PurgeUpstreamCache(f.big))(t)
	e, found := ok2(f.s.FirstCacheEntry([]int64{f.big, f.other}, purgePath(0)))(t)
	if !found || e.UpstreamID != f.other || e.SHA256 != "other" || e.PurgeEpoch != 0 {
		t.Fatalf("FirstCacheEntry = %+v, %v", e, found)
	}
}

func TestDeleteUpstreamPurgesItsCache(t *testing.T) {
	f := newPurgeFixture(t, 50)
	noErr(t, f.s.DeleteUpstream(f.big))
	if st := f.s.CacheStats(); st.Entries != 1 || st.Pending != 50 {
		t.Fatalf("after deleting the upstream: %+v", st)
	}
	collectAll(t, f.s, 16)
	if st := f.s.CacheStats(); st.Entries != 1 || st.Pending != 0 || st.Blobs != 1 {
		t.Fatalf("after collection: %+v", st)
	}
}

// TestCollectWanted: a delete or a purge wakes the collector; a fill does not.
func TestCollectWanted(t *testing.T) {
	f := newPurgeFixture(t, 2)
	woken := func() bool {
		select {
		case <-f.s.CollectWanted():
			return true
		default:
			return false
		}
	}
	woken()
	ok(f.s.PutCacheEntry(CacheEntry{UpstreamID: f.big, RelativePath: "/a.jar", SHA256: "a"}))(t)
	if woken() {
		t.Fatal("a fill woke the collector")
	}
	noErr(t, f.s.DeleteCacheEntry(f.big, "/a.jar"))
	if !woken() {
		t.Fatal("a delete did not wake the collector")
	}
	ok(f.s.PurgeUpstreamCache(f.big))(t)
	if !woken() {
		t.Fatal("a purge did not wake the collector")
	}
	if _, err := f.s.PurgeUpstreamCache(f.big + 100); !errors.Is(err, ErrNotFound) {
		t.Fatalf("purge of an unknown upstream: %v", err)
	}
	if woken() {
		t.Fatal("a failed purge woke the collector")
	}
}

// TestPurgePublishCollectConcurrently runs fills, purges and the collector
// at once and checks the invariants afterwards: every live entry's blob file
// exists, every reference count equals the entries that point at the blob,
// and once the collector is done no blob file is left that nothing refers to.
func TestPurgePublishCollectConcurrently(t *testing.T) {
	e := newBlobEnv(t)
	const rounds = 80
	var wg sync.WaitGroup
	fail := func(err error) {
		if err != nil {
			t.Error(err)
		}
	}
	wg.Add(3)
	go func() {
		defer wg.Done()
		for i := range rounds {
			rel := fmt.Sprintf("/g/a/%d/a-%d.jar", i%5, i%5)
			_, err := e.tryPublish(rel, fmt.Sprintf("bytes %d", i%7))
			fail(err)
		}
	}()
	go func() {
		defer wg.Done()
		for range rounds / 4 {
			_, err := e.s.PurgeUpstreamCache(e.up)
			fail(err)
		}
	}()
	go func() {
		defer wg.Done()
		for range rounds {
			_, err := e.s.CollectBlobs(e.b, 2)
			fail(err)
		}
	}()
	wg.Wait()
	check := func() {
		t.Helper()
		counts := map[string]int64{}
		noErr(t, e.s.db.View(func(tx kv.Tx) error {
			return tx.Bucket(bktCacheEntries).ForEach(func(k, v []byte) error {
				var ce CacheEntry
				getJSON(tx.Bucket(bktCacheEntries), k, &ce)
				counts[ce.SHA256]++
				if !purgedTx(tx, &ce) && !exists(e.b.Path(ce.SHA256)) {
					t.Errorf("live entry %s has no blob file", ce.RelativePath)
				}
				return nil
			})
		}))
		for sha, n := range counts {
			if got := refs(t, e.s, sha); got != n {
				t.Errorf("blob %s: %d references, %d entries", sha[:8], got, n)
			}
		}
	}
	check()
	for {
		r, err := e.s.CollectBlobs(e.b, 2)
		noErr(t, err)
		if !r.More {
			break
		}
	}
	check()
	if st := e.s.CacheStats(); st.Pending != 0 {
		t.Fatalf("after collection: %+v", st)
	}
	sweep, err := e.s.SweepBlobs(e.b)
	noErr(t, err)
	if sweep.Removed != 0 {
		t.Fatalf("the collector left %d blob files nothing refers to", sweep.Removed)
	}
}
