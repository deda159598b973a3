package store

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"testing"
	"time"

	"registryd/store/kv"
)

// useKeys lists cache_by_use as "upstream:path" in order.
func useKeys(t *testing.T, s *Store) []string {
	t.Helper()
	var out []string
	noErr(t, s.db.View(func(tx kv.Tx) error {
		return tx.Bucket(bktCacheByUse).ForEach(func(k, _ []byte) error {
			out = append(out, fmt.Sprintf("%d:%s", binary.BigEndian.Uint64(k[8:16]), k[16:]))
			return nil
		})
	}))
	return out
}

// wantUseIndex checks that cache_by_use holds exactly one key per live entry,
// the one of its record.
func wantUseIndex(t *testing.T, s *Store) {
	t.Helper()
	var want, got [][]byte
	noErr(t, s.db.View(func(tx kv.Tx) error {
		if err := tx.Bucket(bktCacheEntries).ForEach(func(k, v []byte) error {
			var e CacheEntry
			getJSONRaw(k, v, &e)
			if !purgedTx(tx, &e) {
				want = append(want, cacheUseKey(&e))
			}
			return nil
		}); err != nil {
			return err
		}
		return tx.Bucket(bktCacheByUse).ForEach(func(k, _ []byte) error {
			got = append(got, slices.Clone(k))
			return nil
		})
	}))
	slices.SortFunc(want, bytes.Compare)
	if !slices.EqualFunc(want, got, bytes.Equal) {
		t.Fatalf("cache_by_use has %d keys, want the %d of the live entries", len(got), len(want))
	}
}

// TestUseIndexFollowsTheEntries: fills, replacements, downloads, deletes,
// purges and the collector keep cache_by_use in last-use order.
func TestUseIndexFollowsTheEntries(t *testing.T) {
	f := newPurgeFixture(t, 3) // big: lib0..lib2 created at t0; other: lib0
	s, c := f.s, f.clock
	if !s.UseIndexReady() {
		if done := ok(s.BuildUseIndex(0))(t); !done {
			t.Fatal("the build of an index of four entries is not done")
		}
	}
	wantUseIndex(t, s)

	// Downloads move entries to the end, in the order of their last use.
	c.Advance(time.Minute)
	noErr(t, s.AddDownloads([]DownloadCount{{UpstreamID: f.big, Rel: purgePath(0), Count: 2, Last: c.Now()}}))
	c.Advance(time.Minute)
	noErr(t, s.AddDownloads([]DownloadCount{{UpstreamID: f.other, Rel: purgePath(0), Count: 1, Last: c.Now()}}))
	// An older download than the recorded one does not move it back.
	noErr(t, s.AddDownloads([]DownloadCount{{UpstreamID: f.big, Rel: purgePath(0), Count: 1, Last: c.Now().Add(-time.Hour)}}))
	big, other := fmt.Sprint(f.big), fmt.Sprint(f.other)
	want := []string{big + ":" + purgePath(1), big + ":" + purgePath(2), big + ":" + purgePath(0), other + ":" + purgePath(0)}
	if got := useKeys(t, s); !slices.Equal(got, want) {
		t.Fatalf("order %v\nwant %v", got, want)
	}
	// A replacement (the upstream changed the file) keeps the last use.
	ok(s.PutCacheEntry(CacheEntry{UpstreamID: f.big, RelativePath: purgePath(0), Size: 11, SHA256: purgeSHA(9)}))(t)
	if got := useKeys(t, s); !slices.Equal(got, want) {
		t.Fatalf("after a replacement %v\nwant %v", got, want)
	}
	noErr(t, s.DeleteCacheEntry(f.big, purgePath(1)))
	wantUseIndex(t, s)
	ok(s.PurgeUpstreamCache(f.big))(t)
	ok(s.CollectPending(100))(t)
	wantUseIndex(t, s)
	if got := useKeys(t, s); !slices.Equal(got, []string{other + ":" + purgePath(0)}) {
		t.Fatalf("after purge and collection %v", got)
	}
}

// TestBuildUseIndex: a database from before the index gets it in batches
// that resume across a restart, while fills and download counts go on.
func TestBuildUseIndex(t *testing.T) {
	f := newPurgeFixture(t, 9)
	s := f.s
	// As schema 4 left it: entries, no index.
	noErr(t, s.db.Update(func(tx kv.Tx) error {
		use := tx.Bucket(bktCacheByUse)
		var keys [][]byte
		c := use.Cursor()
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			keys = append(keys, bytes.Clone(k))
		}
		for _, k := range keys {
			if err := use.Delete(k); err != nil {
				return err
			}
		}
		return tx.Bucket(bktMeta).Delete(metaUseBuilt)
	}))
	s.useBuilt.Store(false)
	if s.UseIndexReady() {
		t.Fatal("ready without an index")
	}
	if done := ok(s.BuildUseIndex(4))(t); done {
		t.Fatal("done after 4 of 10 entries")
	}
	// Writers meanwhile: a download of an entry the build has not reached,
	// a new entry, a delete.
	f.clock.Advance(time.Minute)
	noErr(t, s.AddDownloads([]DownloadCount{{UpstreamID: f.big, Rel: purgePath(8), Count: 1, Last: f.clock.Now()}}))
	ok(s.PutCacheEntry(CacheEntry{UpstreamID: f.big, RelativePath: "/new/1/new-1.jar", Size: 5, SHA256: purgeSHA(50)}))(t)
	noErr(t, s.DeleteCacheEntry(f.big, purgePath(7)))
	// A restart between two batches.
	noErr(t, s.Close())
	s2, err := openAt(t, f.dir, Options{SecretKey: testKey, Now: f.clock.Now})
	noErr(t, err)
	t.Cleanup(func() { s2.Close() })
	batches := 0
	for {
		done := ok(s2.BuildUseIndex(4))(t)
		batches++
		if done {
			break
		}
	}
	if batches != 2 || !s2.UseIndexReady() {
		t.Fatalf("%d more batches, ready %v", batches, s2.UseIndexReady())
	}
	wantUseIndex(t, s2)
}

// TestEvictLeastUsed: eviction marks the least recently used entries (never
// downloaded ones by their creation) up to a count or a byte goal, skips
// purged entries, drops keys no entry has, and leaves the blobs to the
// collector.
func TestEvictLeastUsed(t *testing.T) {
	f := newPurgeFixture(t, 0)
	s, c := f.s, f.clock
	ok(s.BuildUseIndex(0))(t)
	noErr(t, s.DeleteCacheEntry(f.other, purgePath(0))) // the fixture's
	ok(s.CollectPending(10))(t)
	put := func(i int, size int64) {
		ok(s.PutCacheEntry(CacheEntry{UpstreamID: f.big, RelativePath: purgePath(i), Size: size, SHA256: purgeSHA(i)}))(t)
		c.Advance(time.Second)
	}
	for i := range 6 {
		put(i, 100)
	}
	// lib0 was downloaded last: it goes last. lib5 shares lib1's blob.
	noErr(t, s.AddDownloads([]DownloadCount{{UpstreamID: f.big, Rel: purgePath(0), Count: 1, Last: c.Now()}}))
	ok(s.PutCacheEntry(CacheEntry{UpstreamID: f.other, RelativePath: "/shared.jar", Size: 100, SHA256: purgeSHA(1)}))(t)

	// A key no entry has (left by a writer that forgot it) is dropped.
	noErr(t, s.db.Update(func(tx kv.Tx) error {
		k := make([]byte, 16, 32)
		binary.BigEndian.PutUint64(k[8:], uint64(f.big))
		return tx.Bucket(bktCacheByUse).Put(append(k, "/ghost.jar"...), emptyValue)
	}))
	gen := s.CacheGeneration()
	// 150 bytes to free: lib1 frees nothing (its blob is shared), lib2
	// and lib3 free 100 each.
	ev := ok(s.EvictLeastUsed(100, 150))(t)
	if ev.Entries != 3 || ev.Bytes != 300 || ev.Freed != 200 || s.CacheGeneration() == gen {
		t.Fatalf("evicted %+v", ev)
	}
	for i, gone := range []bool{false, true, true, true, false, false} {
		if _, err := s.CacheEntry(f.big, purgePath(i)); (err != nil) != gone {
			t.Fatalf("lib%d: %v, want gone %v", i, err, gone)
		}
	}
	if slices.ContainsFunc(useKeys(t, s), func(k string) bool { return bytes.Contains([]byte(k), []byte("ghost")) }) {
		t.Fatal("the stale key is still there")
	}
	wantUseIndex(t, s)
	// Pending, not destroyed: the collector reports the blobs of lib2 and
	// lib3, lib1's being shared.
	col := ok(s.CollectPending(100))(t)
	if col.Entries != 3 || fmt.Sprint(col.Unreferenced) != fmt.Sprint([]string{purgeSHA(2), purgeSHA(3)}) {
		t.Fatalf("collected %+v", col)
	}

	// Purged entries are skipped (the collector destroys them); a limit of
	// entries stops a batch.
	ok(s.PurgeUpstreamCache(f.other))(t)
	ev = ok(s.EvictLeastUsed(2, 1<<40))(t)
	if ev.Entries != 2 {
		t.Fatalf("evicted %+v", ev)
	}
	for _, i := range []int{4, 5} {
		if _, err := s.CacheEntry(f.big, purgePath(i)); err == nil {
			t.Fatalf("lib%d not evicted", i)
		}
	}
	ev = ok(s.EvictLeastUsed(100, 1<<40))(t)
	if ev.Entries != 1 { // lib0; the purged entry is not counted
		t.Fatalf("evicted %+v", ev)
	}
	if ev = ok(s.EvictLeastUsed(100, 1<<40))(t); ev.Entries != 0 {
		t.Fatalf("evicted %+v from an empty cache", ev)
	}
}

// TestEvictPassesPurge: entries of a purge in progress at the head of the
// index, more than one batch visits, are handed to the collector with the
// batch (as deletes: pending, their blobs counted in Freed), so eviction
// frees their space and goes on past them however far behind the
// collector's walk of the purge is.
func TestEvictPassesPurge(t *testing.T) {
	const limit = 4
	f := newPurgeFixture(t, 5*evictScanFactor*limit) // more than a batch visits
	s := f.s
	ok(s.PurgeUpstreamCache(f.big))(t)
	ev := ok(s.EvictLeastUsed(limit, 25))(t)
	if ev.Entries != 0 || ev.Bytes != 0 || ev.Purged != 3 || ev.Freed != 30 {
		t.Fatalf("evicted %+v, want 3 purged entries handed over, freeing 30 bytes", ev)
	}
	if st := s.CacheStats(); st.Entries != 1 || st.Pending != f.n {
		t.Fatalf("CacheStats %+v, want the other upstream's entry live and all %d purged pending", st, f.n)
	}
	// The collector takes the handed entries first (lib0, lib1, lib10 in
	// path order).
	col := ok(s.CollectPending(3))(t)
	if col.Entries != 3 || fmt.Sprint(col.Unreferenced) != fmt.Sprint([]string{purgeSHA(0), purgeSHA(1), purgeSHA(10)}) {
		t.Fatalf("collected %+v", col)
	}
	// A batch of the limit: purged entries only, still none live.
	ev = ok(s.EvictLeastUsed(limit, 1<<40))(t)
	if ev.Entries != 0 || ev.Purged != limit {
		t.Fatalf("evicted %+v, want %d purged", ev, limit)
	}
	for {
		ev = ok(s.EvictLeastUsed(100, 1<<40))(t)
		if ev.Entries+ev.Purged == 0 {
			break
		}
		ok(s.CollectPending(100))(t)
	}
	for ok(s.CollectPending(100))(t).More {
	}
	if st := s.CacheStats(); st.Entries != 0 || st.Pending != 0 || st.Blobs != 0 {
		t.Fatalf("CacheStats %+v after evicting everything", st)
	}
	wantUseIndex(t, s)
}
