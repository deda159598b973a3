package store

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"slices"
	"time"

	"registryd/store/kv"
)

// Purges. Purging an upstream's cache (directly, through its registry, or by
// deleting the upstream) used to move every entry to cache_pending in one
// write transaction: for 100k entries a second and more of decoding and page
// writes under bbolt's writer lock, with every fill's commit waiting behind
// it and a burst of garbage that made the GC slow every request (measured in
// bench scenario h).
//
// Now a purge is one small transaction that writes a purge mark for the
// upstream: purgeMark.Epoch, drawn from cache_purges' sequence, so marks only
// grow. From the commit of the mark on, every entry of the upstream whose
// PurgeEpoch is below the mark's Epoch is purged: every read treats it as
// absent (purgedTx). Entries written while the mark stands carry its Epoch
// and are live. The collector then destroys the purged entries in bounded
// batches, one transaction each (collectPurgesTx), and drops the mark with the
// last batch. Every commit leaves a consistent index, whatever the crash
// point: the mark and the entries it covers are durable together, and a
// restart resumes the batches where the last committed one left off
// (purgeMark.Next).

// purgeMark is a purge in progress of one upstream's entries.
type purgeMark struct {
	// Epoch: entries whose PurgeEpoch is below it are purged.
	Epoch uint64
	// Remaining counts the purged entries not destroyed yet (for the
	// pending gauge and for the count of a second purge).
	Remaining int64
	// MarkedAt is when the purge was asked for.
	MarkedAt time.Time
	// Next is the cache_entries key at which the collector resumes its walk
	// of the upstream's entries; nil: from the first.
	Next []byte
}

// The mark's binary form: epoch, remaining, marked-at in ms (8 bytes each,
// big-endian), then Next. Read on every lookup of an upstream that has one,
// so it is not JSON.
func (m purgeMark) encode() []byte {
	b := make([]byte, 24+len(m.Next))
	binary.BigEndian.PutUint64(b, m.Epoch)
	binary.BigEndian.PutUint64(b[8:], uint64(m.Remaining))
	binary.BigEndian.PutUint64(b[16:], uint64(m.MarkedAt.UnixMilli()))
	copy(b[24:], m.Next)
	return b
}

func decodePurgeMark(b []byte) purgeMark {
	if len(b) < 24 {
		panic("store: corrupt purge mark")
	}
	m := purgeMark{
		Epoch:     binary.BigEndian.Uint64(b),
		Remaining: int64(binary.BigEndian.Uint64(b[8:])),
		MarkedAt:  time.UnixMilli(int64(binary.BigEndian.Uint64(b[16:]))).UTC(),
	}
	if len(b) > 24 {
		m.Next = slices.Clone(b[24:])
	}
	return m
}

func purgeMarkTx(tx kv.Tx, upstream int64) (purgeMark, bool) {
	v := tx.Bucket(bktCachePurges).Get(itob(upstream))
	if v == nil {
		return purgeMark{}, false
	}
	return decodePurgeMark(v), true
}

// purgeEpochTx is the epoch of the upstream's purge in progress, 0 if none.
// It reads only the first 8 bytes of the mark, for lookups.
func purgeEpochTx(tx kv.Tx, upstream int64) uint64 {
	v := tx.Bucket(bktCachePurges).Get(itob(upstream))
	if len(v) < 8 {
		return 0
	}
	return binary.BigEndian.Uint64(v)
}

// purgedTx reports whether e, as stored, is covered by its upstream's purge
// in progress: such an entry is absent for every reader.
func purgedTx(tx kv.Tx, e *CacheEntry) bool {
	return e.PurgeEpoch < purgeEpochTx(tx, e.UpstreamID)
}

// liveEntryTx reads the live entry at key into e.
func liveEntryTx(tx kv.Tx, key []byte, e *CacheEntry) bool {
	return getJSON(tx.Bucket(bktCacheEntries), key, e) && !purgedTx(tx, e)
}

// markUpstreamPendingTx purges every entry of the upstream: one mark, whatever
// the number of entries. It returns how many live entries that purges. The
// count walks the upstream's keys without decoding a record (about 10 ms for
// 100k entries), the only part of a purge's transaction that grows with the
// cache.
func markUpstreamPendingTx(tx kv.Tx, upstream int64, now time.Time) (int, error) {
	prefix := itob(upstream)
	var keys int64
	c := tx.Bucket(bktCacheEntries).Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		keys++
	}
	old, had := purgeMarkTx(tx, upstream)
	live := keys
	if had {
		// The entries of the earlier purge not destroyed yet are in the
		// range but were no longer live.
		live -= old.Remaining
	}
	if keys == 0 {
		return 0, nil
	}
	p := tx.Bucket(bktCachePurges)
	epoch, err := p.NextSequence()
	if err != nil {
		return 0, err
	}
	// A new mark covers the earlier one's entries too; the walk starts over
	// so that it also meets the entries written under the earlier mark.
	m := purgeMark{Epoch: epoch, Remaining: keys, MarkedAt: now}
	return int(live), p.Put(prefix, m.encode())
}

// purgeScanFactor bounds how many keys one collector transaction visits, as
// a multiple of the entries it may destroy: entries filled again since the
// mark are live and skipped, and must not make a batch unbounded.
const purgeScanFactor = 4

// collectPurgesTx destroys up to budget purged entries of the purges in
// progress, visiting at most purgeScanFactor*budget keys, and drops each mark
// whose walk reached the end of its upstream. It adds to out.
func collectPurgesTx(tx kv.Tx, budget int, out *Collected) error {
	marks := tx.Bucket(bktCachePurges)
	entries := tx.Bucket(bktCacheEntries)
	visits := purgeScanFactor * budget
	type mark struct {
		key []byte
		m   purgeMark
	}
	var todo []mark
	c := marks.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		todo = append(todo, mark{slices.Clone(k), decodePurgeMark(v)})
	}
	for _, mk := range todo {
		if budget <= 0 || visits <= 0 {
			break
		}
		prefix := mk.key
		start := mk.m.Next
		if start == nil {
			start = prefix
		}
		type victim struct {
			key []byte
			e   CacheEntry
		}
		var dead []victim
		var next []byte
		cur := entries.Cursor()
		k, v := cur.Seek(start)
		for ; k != nil && bytes.HasPrefix(k, prefix); k, v = cur.Next() {
			if len(dead) == budget || visits == 0 {
				next = slices.Clone(k)
				break
			}
			visits--
			var e CacheEntry
			if err := json.Unmarshal(v, &e); err != nil {
				return err
			}
			if e.PurgeEpoch < mk.m.Epoch {
				dead = append(dead, victim{slices.Clone(k), e})
			}
		}
		// Deleted after the walk: a bucket must not change under its cursor.
		for _, d := range dead {
			if err := destroyEntryTx(tx, d.key, d.e, out); err != nil {
				return err
			}
		}
		budget -= len(dead)
		mk.m.Remaining = max(0, mk.m.Remaining-int64(len(dead)))
		if next == nil {
			if err := marks.Delete(mk.key); err != nil {
				return err
			}
			continue
		}
		mk.m.Next = next
		if err := marks.Put(mk.key, mk.m.encode()); err != nil {
			return err
		}
	}
	return nil
}

// destroyEntryTx removes a purged entry and its reference to its blob, and
// records the blob in out when that was the last reference.
func destroyEntryTx(tx kv.Tx, key []byte, e CacheEntry, out *Collected) error {
	if err := tx.Bucket(bktCacheByTime).Delete(cacheTimeKey(e.UpstreamID, e.CreatedAt, e.RelativePath)); err != nil {
		return err
	}
	if err := tx.Bucket(bktCacheByUse).Delete(cacheUseKey(&e)); err != nil {
		return err
	}
	if err := tx.Bucket(bktCacheEntries).Delete(key); err != nil {
		return err
	}
	n, err := refsAdd(tx, e.SHA256, -1)
	if err != nil {
		return err
	}
	if n == 0 && e.SHA256 != "" {
		out.Unreferenced = append(out.Unreferenced, e.SHA256)
	}
	out.Entries++
	out.Bytes += e.Size
	return nil
}

// purgeRemainingTx is how many purged entries wait for the collector.
func purgeRemainingTx(tx kv.Tx) int64 {
	var n int64
	_ = tx.Bucket(bktCachePurges).ForEach(func(_, v []byte) error {
		n += decodePurgeMark(v).Remaining
		return nil
	})
	return n
}
