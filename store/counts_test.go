package store

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"registryd/internal/testclock"
	"registryd/store/kv"
)

// countDrift describes every count that differs from its bucket's number
// of keys (KeyN), "" when none does. err is the View's: a closed store.
func countDrift(s *Store) (drift string, err error) {
	err = s.db.View(func(tx kv.Tx) error {
		drift = ""
		n := keyCounts(tx)
		for i, name := range countedBuckets {
			if keys := int64(tx.Bucket(name).KeyN()); n[i] != keys {
				drift += fmt.Sprintf("count of %s = %d, its bucket has %d keys; ", name, n[i], keys)
			}
		}
		return nil
	})
	return drift, err
}

// wantCounts fails t unless every key count equals its bucket's number of
// keys.
func wantCounts(t testing.TB, s *Store) {
	t.Helper()
	drift, err := countDrift(s)
	noErr(t, err)
	if drift != "" {
		t.Fatal(drift)
	}
}

// TestKeyCountsFollowWrites: every write path that adds or removes keys of
// the counted buckets (fills through group commit, concurrent and
// replacing, bulk fills, deletes, purges and fills over a purge, the
// collector, eviction, a cleanup run, deleted upstreams and registries,
// users, advisory imports that add, replace, move and remove) keeps the
// counts equal to the number of keys; the counts are what CacheStats,
// ListUsers and AdvisoryStatus report. On a shared engine (PostgreSQL, or
// bbolt posing as one) the counts are split in shards.
func TestKeyCountsFollowWrites(t *testing.T) {
	t.Run("engine", func(t *testing.T) {
		c := newClock()
		s, err := openAt(t, t.TempDir(), Options{SecretKey: testKey, Now: c.Now, Matcher: versionsMatcher{}})
		noErr(t, err)
		t.Cleanup(func() { s.Close() })
		mixedWrites(t, s, c)
	})
	t.Run("shared", func(t *testing.T) {
		boltOnly(t, "bbolt posing as a shared engine; PostgreSQL's run shards its counts already")
		db, err := boltAt(t.TempDir(), time.Second)
		noErr(t, err)
		c := newClock()
		s, err := Open(Options{SecretKey: testKey, Now: c.Now, Matcher: versionsMatcher{},
			Engine: &clusterEngine{DB: db}})
		noErr(t, err)
		t.Cleanup(func() { s.Close() })
		if d := s.db.(*keyCountDB); d.shards != countShards {
			t.Fatalf("%d shards on a shared engine", d.shards)
		}
		mixedWrites(t, s, c)
		shards := 0
		noErr(t, s.db.View(func(tx kv.Tx) error {
			return tx.Bucket(bktCounts).ForEach(func(k, _ []byte) error {
				if k[len(k)-1] != 0 {
					shards++
				}
				return nil
			})
		}))
		if shards == 0 {
			t.Fatal("every count is in shard 0")
		}
	})
}

func mixedWrites(t *testing.T, s *Store, c *testclock.Clock) {
	t.Helper()
	ok(s.EnsureRoot("glpat-counts-root-token"))(t)
	for i := range 4 {
		user(t, s, fmt.Sprintf("user%d", i))
	}
	wantCounts(t, s)

	g := topGroup(t, s, "acme")
	r := ok(s.CreateRegistry(g.ID, "main", ""))(t)
	a, b := up(t, s, r.ID, "https://a.example/m").ID, up(t, s, r.ID, "https://b.example/m").ID
	r2 := ok(s.CreateRegistry(g.ID, "side", ""))(t)
	side := up(t, s, r2.ID, "https://side.example/m").ID
	put := func(upstream int64, path, blob int) error {
		_, err := s.PutCacheEntry(CacheEntry{UpstreamID: upstream, RelativePath: purgePath(path), Size: 10,
			SHA256: purgeSHA(blob)})
		return err
	}

	// Concurrent fills share transactions (group commit): new entries,
	// blobs shared between paths, and the same path filled with another
	// blob by another writer.
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 30 {
				if err := put([]int64{a, b, side}[w%3], i, (i+w)%17); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	wantCounts(t, s)
	if st := s.CacheStats(); st.Entries != 90 || st.Pending != 0 {
		t.Fatalf("after the fills: %+v", st)
	}

	// Writes that replace keys, bulk fills, deletes.
	noErr(t, s.TouchCacheEntry(a, purgePath(0), c.Now()))
	ok(s.InvalidateCacheEntry(a, purgePath(1)))(t)
	ok(s.InvalidateUpstreamCache(b))(t)
	noErr(t, s.AddDownloads([]DownloadCount{{UpstreamID: a, Rel: purgePath(2), Count: 3, Last: c.Now()}}))
	var bulk []CacheEntry
	for i := 100; i < 110; i++ {
		bulk = append(bulk, CacheEntry{UpstreamID: a, RelativePath: purgePath(i), Size: 1, SHA256: purgeSHA(i)})
	}
	noErr(t, s.PutCacheEntries(bulk))
	for i := 3; i < 8; i++ {
		noErr(t, s.DeleteCacheEntry(a, purgePath(i)))
	}
	wantCounts(t, s)

	// A purge, fills over it (each destroys the purged entry it replaces),
	// and the collector in small batches.
	ok(s.PurgeUpstreamCache(b))(t)
	for i := range 4 {
		noErr(t, put(b, i, 40+i))
	}
	wantCounts(t, s)
	for range 3 {
		ok(s.CollectPending(4))(t)
		wantCounts(t, s)
	}

	// Eviction of the least used, then the collector.
	ok(s.BuildUseIndex(0))(t)
	ok(s.EvictLeastUsed(6, 1<<40))(t)
	wantCounts(t, s)

	// A cleanup run of entries not downloaded for 31 days, beside fresh
	// ones.
	c.Advance(31 * day)
	for i := 200; i < 205; i++ {
		noErr(t, put(a, i, i))
	}
	ok(s.CreateCleanupPolicy(g.ID, CleanupPolicyPatch{}))(t)
	ok(s.StartCleanupRun(g.ID, CleanupStart{}))(t)
	for {
		bt := ok(s.CleanupRunBatch(g.ID, 7))(t)
		wantCounts(t, s)
		if bt.Done {
			break
		}
	}
	_, _, err := s.FinishCleanupRun(g.ID, "")
	noErr(t, err)

	// Deleted upstreams and registries leave their entries to the
	// collector, which destroys them all.
	noErr(t, s.DeleteRegistry(r2.ID, nil))
	noErr(t, s.DeleteUpstream(b))
	wantCounts(t, s)
	for {
		col := ok(s.CollectPending(5))(t)
		wantCounts(t, s)
		if !col.More {
			break
		}
	}
	if st := s.CacheStats(); st.Pending != 0 {
		t.Fatalf("after the collector: %+v", st)
	}

	// Advisory imports: added, one advisory naming a package twice,
	// changed (other packages), moved to another source unchanged, and
	// removed by a full import.
	lodash := adv("GHSA-1", "lodash", "high", nil, "npm/lodash@1.0.0", "npm/lodash@2.0.0")
	ok(s.ImportAdvisories(AdvisoryImport{Source: "db", Full: true}, advisories(
		lodash,
		adv("GHSA-2", "minimist", "low", nil, "npm/minimist@1.2.5", "npm/ms@2.1.3"),
		adv("GHSA-3", "requests", "medium", nil, "PyPI/requests@2.30.0"),
	)))(t)
	wantCounts(t, s)
	ok(s.ImportAdvisories(AdvisoryImport{Source: "db", Full: true, BatchSize: 1}, advisories(
		lodash,
		adv("GHSA-2", "minimist and more", "low", nil, "npm/minimist@1.2.6", "npm/left-pad@1.3.0", "npm/chalk@5.0.0"),
		adv("GHSA-4", "new", "low", nil, "npm/ms@2.1.3"),
	)))(t)
	wantCounts(t, s)
	ok(s.ImportAdvisories(AdvisoryImport{Source: "mirror"}, advisories(lodash)))(t)
	wantCounts(t, s)

	// What the counts answer.
	noErr(t, s.db.View(func(tx kv.Tx) error {
		purged := int(purgeRemainingTx(tx))
		want := CacheStats{Entries: tx.Bucket(bktCacheEntries).KeyN() - purged,
			Pending: tx.Bucket(bktCachePending).KeyN() + purged, Blobs: tx.Bucket(bktBlobRefs).KeyN()}
		if st := s.CacheStats(); st != want {
			t.Errorf("CacheStats %+v, want %+v", st, want)
		}
		if _, total, err := s.ListUsers(0, 1); err != nil || total != 5 || s.countUsers() != 5 {
			t.Errorf("ListUsers total %d, CountUsers %d (%v), want 5", total, s.countUsers(), err)
		}
		st, err := s.AdvisoryStatus()
		// GHSA-1 names lodash twice (one key), GHSA-2 three packages,
		// GHSA-4 one.
		if err != nil || st.Advisories != 3 || st.Packages != tx.Bucket(bktAdvisoryPkgs).KeyN() || st.Packages != 5 {
			t.Errorf("AdvisoryStatus %+v (%v), want 3 advisories, 5 package keys", st, err)
		}
		return nil
	}))
}

// TestKeyCountsOfAnOlderIndex: an index written without counts (by a
// registryd before schema 7, whose writes the counts never saw) gets them
// on open, counted once: a database at this version is not counted again.
func TestKeyCountsOfAnOlderIndex(t *testing.T) {
	f := newPurgeFixture(t, 6) // 7 entries (6 + other's), 7 blobs
	s := f.s
	user(t, s, "alice")
	noErr(t, s.DeleteCacheEntry(f.big, purgePath(1)))
	// As schema 6 leaves it: no counts, and keys the counts did not see.
	noErr(t, s.engine.Update(func(tx kv.Tx) error {
		if err := dropCounts(tx); err != nil {
			return err
		}
		if err := tx.Bucket(bktBlobRefs).Put([]byte(purgeSHA(99)), itob(1)); err != nil {
			return err
		}
		return tx.Bucket(bktMeta).Put(metaSchemaVersion, itob(countsSchema-1))
	}))
	noErr(t, s.Close())

	reopen := func() *Store {
		s, err := openAt(t, f.dir, Options{SecretKey: testKey, Now: f.clock.Now})
		noErr(t, err)
		t.Cleanup(func() { s.Close() })
		return s
	}
	s = reopen()
	wantCounts(t, s)
	if st := s.CacheStats(); st.Entries != 6 || st.Pending != 1 || st.Blobs != 8 {
		t.Fatalf("CacheStats %+v, want 6 entries, 1 pending, 8 blobs", st)
	}
	if s.countUsers() != 1 {
		t.Fatalf("%d users, want 1", s.countUsers())
	}

	// Current: opening does not count again (a count set by hand stays).
	noErr(t, s.engine.Update(func(tx kv.Tx) error {
		return tx.Bucket(bktCounts).Put(countKey(bktUsers, 0), itob(41))
	}))
	noErr(t, s.Close())
	s = reopen()
	if s.countUsers() != 41 {
		t.Fatalf("%d users: the open counted again", s.countUsers())
	}
	// A count missing at this version is taken again.
	noErr(t, s.engine.Update(func(tx kv.Tx) error { return tx.Bucket(bktCounts).Delete(countKey(bktUsers, 0)) }))
	noErr(t, s.Close())
	s = reopen()
	wantCounts(t, s)
	if s.countUsers() != 1 {
		t.Fatalf("%d users after a recount, want 1", s.countUsers())
	}
}

// TestKeyCountsOfAFreshOlderIndex: an older database without the counts
// bucket at all (written by hand, as schema 6 created its buckets) is
// counted on open.
func TestKeyCountsOfAFreshOlderIndex(t *testing.T) {
	dir := t.TempDir()
	var db kv.DB
	if engine := testEngine(t); engine != nil {
		db = engine(t, dir)
	} else {
		var err error
		db, err = boltAt(dir, time.Second)
		noErr(t, err)
	}
	noErr(t, db.Update(func(tx kv.Tx) error {
		for _, name := range allBuckets {
			if string(name) == string(bktCounts) {
				continue
			}
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		for i := range 3 {
			if err := tx.Bucket(bktBlobRefs).Put([]byte(purgeSHA(i)), itob(1)); err != nil {
				return err
			}
		}
		return tx.Bucket(bktMeta).Put(metaSchemaVersion, itob(countsSchema-1))
	}))
	noErr(t, db.Close())
	s, err := openAt(t, dir, Options{SecretKey: testKey})
	noErr(t, err)
	defer s.Close()
	wantCounts(t, s)
	if st := s.CacheStats(); st.Blobs != 3 {
		t.Fatalf("CacheStats %+v, want 3 blobs", st)
	}
}

// TestCountingTx pins the counting of the writes themselves, whatever the
// caller read before: the same key put twice, a Delete of a missing key, a
// failed write, a cursor's Delete and a second one at the same place, a
// transaction that fails.
func TestCountingTx(t *testing.T) {
	s, _ := openTest(t)
	refs := func(tx kv.Tx) kv.Bucket { return tx.Bucket(bktBlobRefs) }
	noErr(t, s.db.Update(func(tx kv.Tx) error {
		b := refs(tx)
		for _, k := range []string{"a", "b", "c", "a"} { // "a" twice: one key
			if err := b.Put([]byte(k), itob(1)); err != nil {
				return err
			}
		}
		if err := b.Delete([]byte("missing")); err != nil {
			return err
		}
		if err := b.Put(nil, itob(1)); err == nil {
			t.Error("a Put of no key succeeded")
		}
		if b.Get([]byte("b")) == nil {
			t.Error("b missing")
		}
		return b.Delete([]byte("b"))
	}))
	wantCounts(t, s)
	noErr(t, s.db.Update(func(tx kv.Tx) error {
		c := refs(tx).Cursor()
		if k, _ := c.Seek([]byte("c")); string(k) != "c" {
			t.Fatalf("Seek c: %q", k)
		}
		if err := c.Delete(); err != nil {
			return err
		}
		if err := c.Delete(); err != nil { // nothing under the cursor any more
			return err
		}
		if k, _ := c.Next(); k != nil {
			t.Errorf("Next after the last key: %q", k)
		}
		return nil
	}))
	wantCounts(t, s)
	if err := s.db.Update(func(tx kv.Tx) error {
		if err := refs(tx).Put([]byte("d"), itob(1)); err != nil {
			return err
		}
		return fmt.Errorf("rolled back")
	}); err == nil {
		t.Fatal("the failing transaction committed")
	}
	wantCounts(t, s)
	if st := s.CacheStats(); st.Blobs != 1 {
		t.Fatalf("%+v, want the one blob a", st)
	}
}

// dropCounts deletes every count, as a database before them had none.
func dropCounts(tx kv.Tx) error {
	counts := tx.Bucket(bktCounts)
	var keys [][]byte
	_ = counts.ForEach(func(k, _ []byte) error { keys = append(keys, append([]byte(nil), k...)); return nil })
	for _, k := range keys {
		if err := counts.Delete(k); err != nil {
			return err
		}
	}
	return nil
}
