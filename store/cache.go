package store

import (
	"bytes"
	"encoding/json"
	"slices"
	"time"

	"registryd/store/kv"
)

// CacheEntry is one file cached from one upstream. Its bytes live in the blob
// store under SHA256.
type CacheEntry struct {
	UpstreamID     int64      `json:"upstream_id"`
	GroupID        int64      `json:"group_id"`
	RelativePath   string     `json:"relative_path"` // with a leading "/"
	Size           int64      `json:"size"`
	MD5            string     `json:"file_md5"`
	SHA1           string     `json:"file_sha1"`
	SHA256         string     `json:"file_sha256"`
	SHA512         string     `json:"file_sha512"`
	ContentType    string     `json:"content_type"`
	ETag           string     `json:"upstream_etag,omitempty"`
	CheckedAt      time.Time  `json:"upstream_checked_at"`
	CreatedAt      time.Time  `json:"created_at"`
	UpdatedAt      time.Time  `json:"updated_at"`
	DownloadsCount int64      `json:"downloads_count"`
	DownloadedAt   *time.Time `json:"downloaded_at,omitempty"`
	// Invalidated marks the entry stale whatever its validity: the next
	// request revalidates it (and keeps it when the upstream is down). A
	// successful revalidation (TouchCacheEntry) or a new fill clears it.
	Invalidated bool `json:"invalidated,omitempty"`
	// PurgeEpoch is the epoch of the upstream's purge in progress when the
	// entry was written, 0 when none was: the entry is purged once a mark
	// of a higher epoch stands (see cache_purge.go). Internal to the store.
	PurgeEpoch uint64 `json:"purge_epoch,omitempty"`
}

// Limits of a cache entry.
const (
	MaxRelativePath = 1024
	MaxETag         = 255
	MaxContentType  = 255
)

func refsAdd(tx kv.Tx, sha string, delta int64) (int64, error) {
	b := tx.Bucket(bktBlobRefs)
	var n int64
	if v := b.Get([]byte(sha)); v != nil {
		n = btoi(v)
	}
	n += delta
	if n <= 0 {
		return 0, b.Delete([]byte(sha))
	}
	return n, b.Put([]byte(sha), itob(n))
}

// PutCacheEntry creates or replaces the entry for (upstream, relative path).
// A replaced entry keeps its creation time and download count. The blob must
// already be durable in the blob store.
// It may share its transaction with concurrent entry writes (batch.go).
func (s *Store) PutCacheEntry(e CacheEntry) (CacheEntry, error) {
	out, _, err := s.putEntryReplacing(e)
	return out, err
}

// putEntryReplacing is PutCacheEntry that also returns the digest of the
// blob the replaced entry pointed at, when that blob lost its last reference.
func (s *Store) putEntryReplacing(e CacheEntry) (CacheEntry, string, error) {
	now := s.clock()
	var freed string
	in := e
	err := s.updateBatched(true, func(tx kv.Tx) error {
		// writeCacheEntryTx adds the old entry's downloads to e: each run
		// of the function (kv may run it again, and so may a batch) starts
		// from the caller's entry.
		e, freed = in, ""
		if err := checkCacheEntryTx(tx, &e); err != nil {
			return unwritten(err)
		}
		var old CacheEntry
		had := getJSON(tx.Bucket(bktCacheEntries), cacheKey(e.UpstreamID, e.RelativePath), &old)
		if err := writeCacheEntryTx(tx, &e, now); err != nil {
			return err
		}
		if had && old.SHA256 != e.SHA256 && tx.Bucket(bktBlobRefs).Get([]byte(old.SHA256)) == nil {
			freed = old.SHA256
		}
		return nil
	})
	return e, freed, err
}

func putCacheEntryTx(tx kv.Tx, e *CacheEntry, now time.Time) error {
	if err := checkCacheEntryTx(tx, e); err != nil {
		return err
	}
	return writeCacheEntryTx(tx, e, now)
}

// checkCacheEntryTx validates e and sets its group, writing nothing.
func checkCacheEntryTx(tx kv.Tx, e *CacheEntry) error {
	if e.RelativePath == "" || e.RelativePath[0] != '/' || len(e.RelativePath) > MaxRelativePath {
		return invalid("relative_path", "is invalid")
	}
	if len(e.ETag) > MaxETag {
		e.ETag = ""
	}
	if len(e.ContentType) > MaxContentType {
		e.ContentType = "application/octet-stream"
	}
	var u Upstream
	if !getJSON(tx.Bucket(bktUpstreams), itob(e.UpstreamID), &u) {
		return notFound("Upstream")
	}
	e.GroupID = u.GroupID
	return nil
}

// writeCacheEntryTx writes e, checked by checkCacheEntryTx.
func writeCacheEntryTx(tx kv.Tx, e *CacheEntry, now time.Time) error {
	e.Invalidated = false
	mark, marked := purgeMarkTx(tx, e.UpstreamID)
	e.PurgeEpoch = 0
	if marked {
		e.PurgeEpoch = mark.Epoch
	}
	b := tx.Bucket(bktCacheEntries)
	key := cacheKey(e.UpstreamID, e.RelativePath)
	var old CacheEntry
	e.CreatedAt, e.UpdatedAt = now, now
	switch {
	case !getJSON(b, key, &old):
	case marked && old.PurgeEpoch < mark.Epoch:
		// The old entry is purged: destroyed here as the collector would
		// destroy it, and the new one starts afresh (its own creation
		// time, no inherited downloads). The put below replaces its record.
		var gone Collected
		if err := destroyEntryTx(tx, key, old, &gone); err != nil {
			return err
		}
		mark.Remaining = max(0, mark.Remaining-1)
		if err := tx.Bucket(bktCachePurges).Put(itob(e.UpstreamID), mark.encode()); err != nil {
			return err
		}
	default:
		e.CreatedAt = old.CreatedAt
		e.DownloadsCount += old.DownloadsCount
		if e.DownloadedAt == nil {
			e.DownloadedAt = old.DownloadedAt
		}
		if _, err := refsAdd(tx, old.SHA256, -1); err != nil {
			return err
		}
		if err := tx.Bucket(bktCacheByUse).Delete(cacheUseKey(&old)); err != nil {
			return err
		}
	}
	if _, err := refsAdd(tx, e.SHA256, 1); err != nil {
		return err
	}
	if err := tx.Bucket(bktCacheByTime).Put(cacheTimeKey(e.UpstreamID, e.CreatedAt, e.RelativePath), emptyValue); err != nil {
		return err
	}
	if err := tx.Bucket(bktCacheByUse).Put(cacheUseKey(e), emptyValue); err != nil {
		return err
	}
	return putJSON(b, key, e)
}

// CacheEntry returns the live entry for (upstream, relative path).
func (s *Store) CacheEntry(upstream int64, rel string) (CacheEntry, error) {
	var e CacheEntry
	err := s.db.View(func(tx kv.Tx) error {
		if !liveEntryTx(tx, cacheKey(upstream, rel), &e) {
			e = CacheEntry{}
			return notFound("Cache entry")
		}
		return nil
	})
	return e, err
}

// FirstCacheEntry returns the entry for rel of the first upstream, in the
// given order, that has one. ok is false when none has.
func (s *Store) FirstCacheEntry(upstreams []int64, rel string) (e CacheEntry, ok bool, err error) {
	err = s.db.View(func(tx kv.Tx) error {
		for _, id := range upstreams {
			var c CacheEntry
			if liveEntryTx(tx, cacheKey(id, rel), &c) {
				e, ok = c, true
				return nil
			}
		}
		return nil
	})
	return e, ok, err
}

// TouchCacheEntry records a successful revalidation at checkedAt; an
// invalidated entry is valid again. It may share its transaction with
// concurrent entry writes (batch.go).
func (s *Store) TouchCacheEntry(upstream int64, rel string, checkedAt time.Time) error {
	return s.updateBatched(true, func(tx kv.Tx) error {
		b := tx.Bucket(bktCacheEntries)
		key := cacheKey(upstream, rel)
		var e CacheEntry
		if !liveEntryTx(tx, key, &e) {
			return unwritten(notFound("Cache entry"))
		}
		e.CheckedAt = checkedAt.UTC().Truncate(time.Millisecond)
		e.Invalidated = false
		return putJSON(b, key, e)
	})
}

// InvalidateCacheEntry marks one live entry stale without removing it (Nexus's
// "invalidate cache"): the next request for it revalidates with the upstream.
// Its blob, timestamps and download count are unchanged.
func (s *Store) InvalidateCacheEntry(upstream int64, rel string) (CacheEntry, error) {
	var e CacheEntry
	defer s.forget.bump(upstream)
	err := s.update(false, true, func(tx kv.Tx) error {
		e = CacheEntry{} // decoding into e keeps fields a record omits
		b := tx.Bucket(bktCacheEntries)
		key := cacheKey(upstream, rel)
		if !liveEntryTx(tx, key, &e) {
			e = CacheEntry{}
			return notFound("Cache entry")
		}
		e.Invalidated = true
		return putJSON(b, key, e)
	})
	return e, err
}

// InvalidateUpstreamCache marks every live entry of the upstream stale, in one
// transaction, and returns how many there are.
func (s *Store) InvalidateUpstreamCache(upstream int64) (int, error) {
	n := 0
	defer s.forget.bump(upstream)
	err := s.update(false, true, func(tx kv.Tx) error {
		n = 0 // kv may run the function again
		if tx.Bucket(bktUpstreams).Get(itob(upstream)) == nil {
			return notFound("Upstream")
		}
		b := tx.Bucket(bktCacheEntries)
		prefix := itob(upstream)
		epoch := purgeEpochTx(tx, upstream)
		var keys [][]byte
		var entries []CacheEntry
		c := b.Cursor()
		for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			var e CacheEntry
			if err := json.Unmarshal(v, &e); err != nil {
				return err
			}
			if e.PurgeEpoch < epoch {
				continue // purged
			}
			n++
			if e.Invalidated {
				continue
			}
			e.Invalidated = true
			keys = append(keys, slices.Clone(k))
			entries = append(entries, e)
		}
		// Written after the scan: a bucket must not change under its cursor.
		for i, k := range keys {
			if err := putJSON(b, k, entries[i]); err != nil {
				return err
			}
		}
		return nil
	})
	return n, err
}

// DownloadCount is a batch of downloads of one entry.
type DownloadCount struct {
	UpstreamID int64
	Rel        string
	Count      int64
	Last       time.Time
}

// downloadChunk is how many entries' counts one write of AddDownloads
// carries: a flush of many distinct entries must not hold the writer for
// long in one transaction (about 30 µs an entry on bbolt).
const downloadChunk = 256

// AddDownloads adds batched download counts, downloadChunk entries per
// write; each write may share its transaction with concurrent entry writes
// (batch.go). Counts for entries that are gone are dropped. On a failure,
// the counts not written are in the error's *DownloadsNotWritten.
func (s *Store) AddDownloads(batch []DownloadCount) error {
	for len(batch) > 0 {
		chunk := batch[:min(len(batch), downloadChunk)]
		if err := s.updateBatched(false, func(tx kv.Tx) error { return addDownloadsTx(tx, chunk) }); err != nil {
			return &DownloadsNotWritten{Rest: batch, Err: err}
		}
		batch = batch[len(chunk):]
	}
	return nil
}

// DownloadsNotWritten is AddDownloads's failure: Rest are the counts not
// written (the ones before them were).
type DownloadsNotWritten struct {
	Rest []DownloadCount
	Err  error
}

func (e *DownloadsNotWritten) Error() string { return e.Err.Error() }
func (e *DownloadsNotWritten) Unwrap() error { return e.Err }

func addDownloadsTx(tx kv.Tx, batch []DownloadCount) error {
	b := tx.Bucket(bktCacheEntries)
	use := tx.Bucket(bktCacheByUse)
	for _, d := range batch {
		key := cacheKey(d.UpstreamID, d.Rel)
		var e CacheEntry
		if !liveEntryTx(tx, key, &e) {
			continue
		}
		e.DownloadsCount += d.Count
		last := d.Last.UTC().Truncate(time.Millisecond)
		if e.DownloadedAt == nil || last.After(*e.DownloadedAt) {
			// The entry moves in the least-recently-used order.
			if err := use.Delete(cacheUseKey(&e)); err != nil {
				return err
			}
			e.DownloadedAt = &last
			if err := use.Put(cacheUseKey(&e), emptyValue); err != nil {
				return err
			}
		}
		if err := putJSON(b, key, e); err != nil {
			return err
		}
	}
	return nil
}

// CacheStats are read at scrape time.
type CacheStats struct {
	Entries, Pending, Blobs int
}

// CacheStats counts live entries, entries waiting for destruction (deleted
// or purged) and referenced blobs, from the key counts (counts.go) and the
// purge marks: its cost does not grow with the cache.
func (s *Store) CacheStats() CacheStats {
	var st CacheStats
	_ = s.db.View(func(tx kv.Tx) error {
		purged := int(purgeRemainingTx(tx))
		n := keyCounts(tx)
		st.Entries = int(n[countEntries]) - purged
		st.Pending = int(n[countPending]) + purged
		st.Blobs = int(n[countBlobRefs])
		return nil
	})
	return st
}
