package proxy

import (
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"

	"registryd/store"
)

// uncachedSums remembers, for a short while, the digests of the files that
// were streamed to their clients without being cached (a full disk,
// passthrough.go). Maven asks for a file's .sha1 (or .md5) right after the
// file: without this, each such request would fetch the whole file from the
// upstream again, since only its digests answer a sidecar, doubling the
// upstream traffic exactly while the machine is short of disk.
type uncachedSums struct {
	mu  sync.Mutex
	lru *simplelru.LRU[uncachedKey, uncachedSum]
}

type uncachedKey struct {
	up  int64
	rel string
}

type uncachedSum struct {
	e     store.CacheEntry // the digests and size of the file as it was sent
	until time.Time
}

const (
	// uncachedSumsTTL is how long the digests of an uncached file answer
	// its sidecars: the sidecar requests of a build follow the file within
	// moments, and the upstream may change the file later.
	uncachedSumsTTL = time.Minute
	// uncachedSumsMax bounds the memo (about 400 bytes an entry).
	uncachedSumsMax = 4096
)

func newUncachedSums() *uncachedSums {
	lru, _ := simplelru.NewLRU[uncachedKey, uncachedSum](uncachedSumsMax, nil) // errors only on a size <= 0
	return &uncachedSums{lru: lru}
}

// remember records the digests of an uncached file of upstream up.
func (u *uncachedSums) remember(up int64, rel string, e store.CacheEntry, now time.Time) {
	u.mu.Lock()
	u.lru.Add(uncachedKey{up, rel}, uncachedSum{e: e, until: now.Add(uncachedSumsTTL)})
	u.mu.Unlock()
}

// recall returns the digests of an uncached file of upstream up, if it was
// streamed less than uncachedSumsTTL ago.
func (u *uncachedSums) recall(up int64, rel string, now time.Time) (store.CacheEntry, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	k := uncachedKey{up, rel}
	s, ok := u.lru.Get(k)
	if !ok {
		return store.CacheEntry{}, false
	}
	if !now.Before(s.until) {
		u.lru.Remove(k)
		return store.CacheEntry{}, false
	}
	return s.e, true
}
