package store

import (
	"slices"
	"time"

	"registryd/store/kv"
)

// pendingEntry is an entry marked for destruction by a single delete:
// invisible to lookups and lists, still holding its blob reference until the
// collector runs. (Purges mark a whole upstream instead, see cache_purge.go.)
type pendingEntry struct {
	SHA256   string    `json:"sha256"`
	Size     int64     `json:"size"`
	MarkedAt time.Time `json:"marked_at"`
}

func markPendingTx(tx kv.Tx, key []byte, e CacheEntry, now time.Time) error {
	p := tx.Bucket(bktCachePending)
	seq, err := p.NextSequence()
	if err != nil {
		return err
	}
	if err := putJSON(p, itob(int64(seq)), pendingEntry{SHA256: e.SHA256, Size: e.Size, MarkedAt: now}); err != nil {
		return err
	}
	if err := tx.Bucket(bktCacheByTime).Delete(cacheTimeKey(e.UpstreamID, e.CreatedAt, e.RelativePath)); err != nil {
		return err
	}
	if err := tx.Bucket(bktCacheByUse).Delete(cacheUseKey(&e)); err != nil {
		return err
	}
	return tx.Bucket(bktCacheEntries).Delete(key)
}

// DeleteCacheEntry marks one entry for destruction.
func (s *Store) DeleteCacheEntry(upstream int64, rel string) error {
	defer s.forget.bump(upstream)
	return s.update(false, true, func(tx kv.Tx) error {
		key := cacheKey(upstream, rel)
		var e CacheEntry
		if !liveEntryTx(tx, key, &e) {
			return notFound("Cache entry")
		}
		return markPendingTx(tx, key, e, s.clock())
	})
}

// PurgeUpstreamCache purges every entry of the upstream and returns how
// many. It is one small transaction whatever the size of the cache: the
// entries are absent from its commit on, and the collector destroys them
// afterwards in batches (see cache_purge.go).
func (s *Store) PurgeUpstreamCache(upstream int64) (int, error) {
	n := 0
	defer s.forget.bump(upstream)
	err := s.update(false, true, func(tx kv.Tx) error {
		if tx.Bucket(bktUpstreams).Get(itob(upstream)) == nil {
			return notFound("Upstream")
		}
		var err error
		n, err = markUpstreamPendingTx(tx, upstream, s.clock())
		return err
	})
	return n, err
}

// PurgeRegistryCache purges every entry of the registry's exclusive upstreams
// (those in no other registry), in one transaction, as PurgeUpstreamCache
// does for one upstream.
func (s *Store) PurgeRegistryCache(registry int64) (int, error) {
	n := 0
	defer s.forgetRegistry(registry)
	err := s.update(false, true, func(tx kv.Tx) error {
		n = 0 // kv may run the function again
		if _, ok := registryTx(tx, registry); !ok {
			return notFound("Registry")
		}
		for _, a := range assocsOfRegistryTx(tx, registry) {
			if len(childIDs(tx.Bucket(bktUpAssocs), a.UpstreamID)) != 1 {
				continue
			}
			c, err := markUpstreamPendingTx(tx, a.UpstreamID, s.clock())
			if err != nil {
				return err
			}
			n += c
		}
		return nil
	})
	return n, err
}

// Collected is what one collector batch destroyed.
type Collected struct {
	Entries int
	Bytes   int64
	// Unreferenced lists blobs no entry refers to any more; the caller removes
	// their files.
	Unreferenced []string
	// More says that entries wait for destruction after this batch.
	More bool
	// Busy is how long the transaction took from its start to its commit,
	// without the wait for the engine's writer.
	Busy time.Duration
}

// nothingToCollect says whether no entry waits for destruction and no
// purge is in progress. A delete committed after it answers wakes the
// collector again (CollectWanted).
func (s *Store) nothingToCollect() (bool, error) {
	idle := false
	err := s.db.View(func(tx kv.Tx) error {
		pending, _ := tx.Bucket(bktCachePending).Cursor().First()
		purge, _ := tx.Bucket(bktCachePurges).Cursor().First()
		idle = pending == nil && purge == nil
		return nil
	})
	return idle, err
}

// CollectPending destroys up to max entries waiting for destruction, in one
// transaction: first those of single deletes, then those of purges in
// progress (visiting at most purgeScanFactor*max keys of them). It reports
// the blobs that lost their last reference and whether work is left. It does
// not move the cache generation: what it destroys was already absent.
func (s *Store) CollectPending(max int) (Collected, error) {
	// The collector asks every collect_interval; usually nothing waits.
	// A read transaction says so: a write transaction that changes
	// nothing still commits (on bbolt, a meta page and two fdatasyncs).
	if idle, err := s.nothingToCollect(); err != nil || idle {
		return Collected{}, err
	}
	var out Collected
	busy, err := ownTime(s.db.Update, func(tx kv.Tx) error {
		out = Collected{} // kv may run the function again
		p := tx.Bucket(bktCachePending)
		c := p.Cursor()
		var keys [][]byte
		for k, _ := c.First(); k != nil && len(keys) < max; k, _ = c.Next() {
			keys = append(keys, slices.Clone(k))
		}
		for _, k := range keys {
			var e pendingEntry
			getJSON(p, k, &e)
			n, err := refsAdd(tx, e.SHA256, -1)
			if err != nil {
				return err
			}
			if n == 0 && e.SHA256 != "" {
				out.Unreferenced = append(out.Unreferenced, e.SHA256)
			}
			out.Entries++
			out.Bytes += e.Size
			if err := p.Delete(k); err != nil {
				return err
			}
		}
		if out.Entries < max {
			if err := collectPurgesTx(tx, max-out.Entries, &out); err != nil {
				return err
			}
		}
		first, _ := p.Cursor().First()
		mark, _ := tx.Bucket(bktCachePurges).Cursor().First()
		out.More = first != nil || mark != nil
		return nil
	})
	if err != nil {
		return Collected{}, err
	}
	out.Busy = busy
	return out, nil
}

// CollectWanted receives a value after a commit that gave the collector work
// (a delete or a purge), so that it need not wait for its next period.
func (s *Store) CollectWanted() <-chan struct{} { return s.collect }

// BlobReferenced reports whether any entry, live or pending, refers to the blob.
func (s *Store) BlobReferenced(sha256 string) bool {
	ref := false
	_ = s.db.View(func(tx kv.Tx) error {
		ref = tx.Bucket(bktBlobRefs).Get([]byte(sha256)) != nil
		return nil
	})
	return ref
}
