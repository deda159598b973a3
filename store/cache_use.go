package store

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"registryd/store/kv"
)

// Eviction under a disk budget (proxy/evict.go) removes the entries used
// least recently first: the oldest downloaded_at, or created_at for an entry
// never downloaded. Finding them must not decode every entry of a cache of
// millions at each check, so cache_by_use orders the live entries by last
// use (cacheUseKey). It is kept in the same transactions as the entries:
// a fill or upload writes an entry's key (putCacheEntryTx), the batched
// download counts move it (AddDownloads), and every destruction removes it
// (markPendingTx, destroyEntryTx).
//
// A database written before the index existed has entries without keys.
// BuildUseIndex adds them in batches, one transaction each, resuming from
// the last committed one after a restart (meta: cache_by_use_next), and marks
// the index complete (cache_by_use_built); eviction waits for that. Entries
// written while it runs get their keys from their writers, so the build and
// the writers agree whatever their order: each writes the key of the
// entry's record as it is in its own transaction.
//
// An older registryd maintains no such index: the schema version that comes
// with it (5) keeps it from opening the database.

// useBuildBatch is how many entries one transaction of the build visits:
// decoding 10k records and writing their keys takes tens of milliseconds of
// bbolt's writer lock.
const useBuildBatch = 10000

// UseIndexReady reports whether cache_by_use holds every live entry.
func (s *Store) UseIndexReady() bool {
	if s.useBuilt.Load() {
		return true
	}
	ready := false
	_ = s.db.View(func(tx kv.Tx) error {
		ready = tx.Bucket(bktMeta).Get(metaUseBuilt) != nil
		return nil
	})
	if ready {
		s.useBuilt.Store(true)
	}
	return ready
}

// BuildUseIndex adds the keys of up to batch entries (0: useBuildBatch) to
// cache_by_use in one transaction, from where the last batch stopped, and
// reports whether the index is complete.
func (s *Store) BuildUseIndex(batch int) (done bool, err error) {
	if s.UseIndexReady() {
		return true, nil
	}
	if batch <= 0 {
		batch = useBuildBatch
	}
	err = s.db.Update(func(tx kv.Tx) error {
		done = false // kv may run the function again
		meta := tx.Bucket(bktMeta)
		if meta.Get(metaUseBuilt) != nil {
			done = true
			return nil
		}
		var keys [][]byte
		c := tx.Bucket(bktCacheEntries).Cursor()
		k, v := c.First()
		if next := meta.Get(metaUseNext); next != nil {
			k, v = c.Seek(slices.Clone(next))
		}
		for ; k != nil && len(keys) < batch; k, v = c.Next() {
			var e CacheEntry
			getJSONRaw(k, v, &e)
			keys = append(keys, cacheUseKey(&e))
		}
		// Written after the walk: a cursor's bucket must not change under
		// it (this is another bucket, but meta is written too).
		use := tx.Bucket(bktCacheByUse)
		for _, uk := range keys {
			if err := use.Put(uk, emptyValue); err != nil {
				return err
			}
		}
		if k == nil {
			done = true
			if err := meta.Delete(metaUseNext); err != nil {
				return err
			}
			return meta.Put(metaUseBuilt, []byte{1})
		}
		return meta.Put(metaUseNext, slices.Clone(k))
	})
	if err == nil && done {
		s.useBuilt.Store(true)
	}
	return done, err
}

// Evicted is what one EvictLeastUsed batch marked for destruction.
type Evicted struct {
	Entries int
	Bytes   int64 // the sizes of the entries
	// Freed is the size of the blobs that no entry refers to once these are
	// destroyed: what the collector will remove (a blob shared with an
	// entry that stays is not freed).
	Freed int64
	// Oldest and Newest are the last uses of the first and last entry
	// evicted.
	Oldest, Newest time.Time
	// Purged counts the entries of a purge in progress met among the least
	// recently used and handed to the collector as deletes are (not in
	// Entries nor Bytes; what their blobs free is in Freed).
	Purged int
	// Busy is how long the transaction took from its start to its commit,
	// without the wait for the engine's writer: the work of the batch.
	Busy time.Duration
}

// evictScanFactor bounds the keys one eviction transaction visits, as a
// multiple of the entries it may mark: keys of purged entries are skipped
// (the collector destroys them) and stale keys dropped, and neither may
// make a batch unbounded.
const evictScanFactor = 4

// EvictLeastUsed marks for destruction, in one transaction, the entries used
// least recently, up to limit of them and until the blobs they free add up
// to goal bytes. As a delete does: they vanish from lookups at the commit, and the
// collector destroys them and removes the blobs that lost their last
// reference (a blob a request is streaming stays readable through its open
// descriptor). It needs the complete index (UseIndexReady).
//
// Entries of a purge in progress among them (invisible already, waiting
// for the collector's walk of their upstream) are marked too, as a delete
// marks an entry, and counted apart (Purged): the collector then destroys
// them first, with the batch. Skipping them instead made eviction stop at a
// head of purged entries and wait for the collector, which a busy index
// could hold back for minutes while the blobs outgrew the budget.
func (s *Store) EvictLeastUsed(limit int, goal int64) (Evicted, error) {
	var out Evicted
	busy, err := ownTime(func(fn func(kv.Tx) error) error { return s.update(false, true, fn) }, func(tx kv.Tx) error {
		out = Evicted{}
		use := tx.Bucket(bktCacheByUse)
		entries := tx.Bucket(bktCacheEntries)
		type victim struct {
			key    []byte
			e      CacheEntry
			purged bool
		}
		var victims []victim
		var stale [][]byte
		refs := tx.Bucket(bktBlobRefs)
		shared := map[string]int64{} // victims per blob
		visits := evictScanFactor * limit
		c := use.Cursor()
		for k, _ := c.First(); k != nil && len(victims) < limit && out.Freed < goal && visits > 0; k, _ = c.Next() {
			visits--
			if len(k) < 16 {
				stale = append(stale, slices.Clone(k))
				continue
			}
			key := cacheKey(int64(binary.BigEndian.Uint64(k[8:16])), string(k[16:]))
			var e CacheEntry
			if !getJSON(entries, key, &e) || !bytes.Equal(cacheUseKey(&e), k) {
				// No entry has this last use any more: a key some writer
				// left behind. Dropped, so it is not visited again.
				stale = append(stale, slices.Clone(k))
				continue
			}
			purged := purgedTx(tx, &e)
			victims = append(victims, victim{key, e, purged})
			if purged {
				out.Purged++
			} else {
				out.Entries++
				out.Bytes += e.Size
			}
			shared[e.SHA256]++
			if v := refs.Get([]byte(e.SHA256)); v != nil && btoi(v) == shared[e.SHA256] {
				out.Freed += e.Size
			}
		}
		if len(victims) == 0 && len(stale) == 0 {
			// Nothing to write: no commit, and the cache generation
			// stays (the proxy's lookups stay cached).
			return errNothingToEvict
		}
		for _, k := range stale {
			if err := use.Delete(k); err != nil {
				return err
			}
		}
		now := s.clock()
		handed := map[int64]int64{} // purged entries marked, per upstream
		for i, v := range victims {
			if err := markPendingTx(tx, v.key, v.e, now); err != nil {
				return err
			}
			if v.purged {
				handed[v.e.UpstreamID]++
			}
			t := v.e.CreatedAt
			if v.e.DownloadedAt != nil {
				t = *v.e.DownloadedAt
			}
			if i == 0 {
				out.Oldest = t
			}
			out.Newest = t
		}
		// The purges no longer wait for these (their walks will not
		// meet them): the count of what they have left goes down, as
		// when a fill replaces a purged entry.
		for up, n := range handed {
			mark, ok := purgeMarkTx(tx, up)
			if !ok {
				continue
			}
			mark.Remaining = max(0, mark.Remaining-n)
			if err := tx.Bucket(bktCachePurges).Put(itob(up), mark.encode()); err != nil {
				return err
			}
		}
		return nil
	})
	if err == errNothingToEvict {
		return Evicted{Busy: busy}, nil
	}
	if err != nil {
		return Evicted{}, err
	}
	out.Busy = busy
	return out, nil
}

// ownTime runs fn through run (an engine's Update, or update) and reports
// how long its last run took from its start to the end of run (the commit):
// the transaction's own work, without the wait for the engine's writer
// before it (bbolt's lock, a PostgreSQL connection), which background jobs
// must not count as work of theirs to rest after.
func ownTime(run func(func(kv.Tx) error) error, fn func(kv.Tx) error) (time.Duration, error) {
	var start time.Time
	err := run(func(tx kv.Tx) error {
		start = time.Now()
		return fn(tx)
	})
	if start.IsZero() {
		return 0, err
	}
	return time.Since(start), err
}

var errNothingToEvict = errors.New("nothing to evict")

// getJSONRaw decodes a record read by a cursor, as getJSON does.
func getJSONRaw(key, raw []byte, v any) {
	if err := json.Unmarshal(raw, v); err != nil {
		panic(fmt.Sprintf("store: corrupt record %x: %v", key, err))
	}
}
