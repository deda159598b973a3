package store

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
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

func refsAdd(tx *bolt.Tx, sha string, delta int64) (int64, error) {
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
func (s *Store) PutCacheEntry(e CacheEntry) (CacheEntry, error) {
	now := s.clock()
	err := s.update(false, true, func(tx *bolt.Tx) error { return putCacheEntryTx(tx, &e, now) })
	return e, err
}

func putCacheEntryTx(tx *bolt.Tx, e *CacheEntry, now time.Time) error {
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
	if err := tx.Bucket(bktCacheByTime).Put(cacheTimeKey(e.UpstreamID, e.CreatedAt, e.RelativePath), nil); err != nil {
		return err
	}
	if err := tx.Bucket(bktCacheByUse).Put(cacheUseKey(e), nil); err != nil {
		return err
	}
	return putJSON(b, key, e)
}

// CacheEntry returns the live entry for (upstream, relative path).
func (s *Store) CacheEntry(upstream int64, rel string) (CacheEntry, error) {
	var e CacheEntry
	err := s.db.View(func(tx *bolt.Tx) error {
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
	err = s.db.View(func(tx *bolt.Tx) error {
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
// invalidated entry is valid again.
func (s *Store) TouchCacheEntry(upstream int64, rel string, checkedAt time.Time) error {
	return s.update(false, true, func(tx *bolt.Tx) error {
		b := tx.Bucket(bktCacheEntries)
		key := cacheKey(upstream, rel)
		var e CacheEntry
		if !liveEntryTx(tx, key, &e) {
			return notFound("Cache entry")
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
	err := s.update(false, true, func(tx *bolt.Tx) error {
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
	err := s.update(false, true, func(tx *bolt.Tx) error {
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

// AddDownloads adds batched download counts in one transaction. Counts for
// entries that are gone are dropped.
func (s *Store) AddDownloads(batch []DownloadCount) error {
	if len(batch) == 0 {
		return nil
	}
	return s.db.Update(func(tx *bolt.Tx) error {
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
				if err := use.Put(cacheUseKey(&e), nil); err != nil {
					return err
				}
			}
			if err := putJSON(b, key, e); err != nil {
				return err
			}
		}
		return nil
	})
}

// ListCacheEntries lists an upstream's live entries, newest first, one page
// at a time, with the total count. A blank search lists all; a search starting
// with "/" is a path prefix (a range scan: cost follows the matches); any
// other search is a case-insensitive substring of the relative path, checked
// on index keys without decoding a record, so the cost is one pass over the
// keys plus one decode per entry on the page.
func (s *Store) ListCacheEntries(upstream int64, search string, offset, limit int) ([]CacheEntry, int, error) {
	var page []CacheEntry
	total := 0
	needle := strings.TrimSpace(search)
	err := s.db.View(func(tx *bolt.Tx) error {
		if tx.Bucket(bktUpstreams).Get(itob(upstream)) == nil {
			return notFound("Upstream")
		}
		entries := tx.Bucket(bktCacheEntries)
		// While a purge of the upstream is in progress its purged entries
		// are still indexed, and only their records tell them apart: each
		// match is then decoded, however far down the list.
		epoch := purgeEpochTx(tx, upstream)
		if strings.HasPrefix(needle, "/") {
			page, total = listByPrefix(entries, upstream, needle, epoch, offset, limit)
			return nil
		}
		lowered := []byte(strings.ToLower(needle))
		prefix := itob(upstream)
		c := tx.Bucket(bktCacheByTime).Cursor()
		for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
			rel := k[16:]
			if len(lowered) > 0 && !containsFold(rel, lowered) {
				continue
			}
			onPage := total >= offset && len(page) < limit
			if onPage || epoch != 0 {
				var e CacheEntry
				if !getJSON(entries, cacheKey(upstream, string(rel)), &e) || e.PurgeEpoch < epoch {
					continue
				}
				if onPage {
					page = append(page, e)
				}
			}
			total++
		}
		return nil
	})
	return page, total, err
}

// listByPrefix ranges over the entries whose path starts with prefix and
// orders them newest first.
func listByPrefix(b *bolt.Bucket, upstream int64, prefix string, epoch uint64, offset, limit int) ([]CacheEntry, int) {
	start := cacheKey(upstream, prefix)
	var all []CacheEntry
	c := b.Cursor()
	for k, v := c.Seek(start); k != nil && bytes.HasPrefix(k, start); k, v = c.Next() {
		var e CacheEntry
		if err := json.Unmarshal(v, &e); err == nil && e.PurgeEpoch >= epoch {
			all = append(all, e)
		}
	}
	slices.SortStableFunc(all, func(a, b CacheEntry) int {
		if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.RelativePath, b.RelativePath)
	})
	total := len(all)
	offset = min(offset, total)
	return all[offset:min(total, offset+limit)], total
}

// containsFold reports whether s contains the lower-case ASCII needle,
// ignoring ASCII case in s, without allocating. Candidate positions come from
// bytes.IndexByte (vectorised), which keeps a pass over a million keys short.
func containsFold(s, needle []byte) bool {
	n := len(needle)
	if n == 0 {
		return true
	}
	first, upper := needle[0], needle[0]
	if 'a' <= first && first <= 'z' {
		upper = first - ('a' - 'A')
	}
	for i := 0; i+n <= len(s); i++ {
		j := bytes.IndexByte(s[i:], first)
		if upper != first {
			if k := bytes.IndexByte(s[i:], upper); k >= 0 && (j < 0 || k < j) {
				j = k
			}
		}
		if j < 0 {
			return false
		}
		i += j
		if i+n > len(s) {
			return false
		}
		if equalFoldASCII(s[i:i+n], needle) {
			return true
		}
	}
	return false
}

func equalFoldASCII(s, lower []byte) bool {
	for i, c := range s {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}

// --- destruction ---

// pendingEntry is an entry marked for destruction by a single delete:
// invisible to lookups and lists, still holding its blob reference until the
// collector runs. (Purges mark a whole upstream instead, see cache_purge.go.)
type pendingEntry struct {
	SHA256   string    `json:"sha256"`
	Size     int64     `json:"size"`
	MarkedAt time.Time `json:"marked_at"`
}

func markPendingTx(tx *bolt.Tx, key []byte, e CacheEntry, now time.Time) error {
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
	return s.update(false, true, func(tx *bolt.Tx) error {
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
	err := s.update(false, true, func(tx *bolt.Tx) error {
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
	err := s.update(false, true, func(tx *bolt.Tx) error {
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
}

// CollectPending destroys up to max entries waiting for destruction, in one
// transaction: first those of single deletes, then those of purges in
// progress (visiting at most purgeScanFactor*max keys of them). It reports
// the blobs that lost their last reference and whether work is left. It does
// not move the cache generation: what it destroys was already absent.
func (s *Store) CollectPending(max int) (Collected, error) {
	var out Collected
	err := s.db.Update(func(tx *bolt.Tx) error {
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
	return out, nil
}

// CollectWanted receives a value after a commit that gave the collector work
// (a delete or a purge), so that it need not wait for its next period.
func (s *Store) CollectWanted() <-chan struct{} { return s.collect }

// BlobReferenced reports whether any entry, live or pending, refers to the blob.
func (s *Store) BlobReferenced(sha256 string) bool {
	ref := false
	_ = s.db.View(func(tx *bolt.Tx) error {
		ref = tx.Bucket(bktBlobRefs).Get([]byte(sha256)) != nil
		return nil
	})
	return ref
}

// CacheStats are read at scrape time.
type CacheStats struct {
	Entries, Pending, Blobs int
}

// CacheStats counts live entries, entries waiting for destruction (deleted
// or purged) and referenced blobs.
func (s *Store) CacheStats() CacheStats {
	var st CacheStats
	_ = s.db.View(func(tx *bolt.Tx) error {
		purged := int(purgeRemainingTx(tx))
		st.Entries = tx.Bucket(bktCacheEntries).Stats().KeyN - purged
		st.Pending = tx.Bucket(bktCachePending).Stats().KeyN + purged
		st.Blobs = tx.Bucket(bktBlobRefs).Stats().KeyN
		return nil
	})
	return st
}
