package store

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"

	"registryd/store/kv"
)

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
	err := s.db.View(func(tx kv.Tx) error {
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
func listByPrefix(b kv.Bucket, upstream int64, prefix string, epoch uint64, offset, limit int) ([]CacheEntry, int) {
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
