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
//
// A memo is void once its upstream's forget epoch moves (store.ForgetEpoch:
// an entry of the upstream deleted or invalidated, its cache purged, the
// upstream edited), on this node or, on a cluster, on any node: what the
// upstream sent a moment ago is then not to be trusted for its sidecars.
type uncachedSums struct {
	mu    sync.Mutex
	lru   *simplelru.LRU[uncachedKey, uncachedSum]
	epoch func(upstream int64) uint64 // store.ForgetEpoch
}

type uncachedKey struct {
	up  int64
	rel string
}

type uncachedSum struct {
	e     store.CacheEntry // the digests and size of the file as it was sent
	until time.Time
	epoch uint64 // the upstream's forget epoch when remembered
}

const (
	// uncachedSumsTTL is how long the digests of an uncached file answer
	// its sidecars: the sidecar requests of a build follow the file within
	// moments, and the upstream may change the file later.
	uncachedSumsTTL = time.Minute
	// uncachedSumsMax bounds the memo (about 400 bytes an entry).
	uncachedSumsMax = 4096
)

func newUncachedSums(epoch func(upstream int64) uint64) *uncachedSums {
	lru, _ := simplelru.NewLRU[uncachedKey, uncachedSum](uncachedSumsMax, nil) // errors only on a size <= 0
	return &uncachedSums{lru: lru, epoch: epoch}
}

// remember records the digests of an uncached file of upstream up. rel is
// kept as a key: owned memory (the flight's key), never a view of a
// request. The epoch is read as the flight ends (a change during the fill
// is missed, for at most uncachedSumsTTL, as it would be by a fill a moment
// later).
func (u *uncachedSums) remember(up int64, rel string, e store.CacheEntry, now time.Time) {
	ep := u.epoch(up)
	u.mu.Lock()
	u.lru.Add(uncachedKey{up, rel}, uncachedSum{e: e, until: now.Add(uncachedSumsTTL), epoch: ep})
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
	if !now.Before(s.until) || s.epoch != u.epoch(up) {
		u.lru.Remove(k)
		return store.CacheEntry{}, false
	}
	return s.e, true
}
