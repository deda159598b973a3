package proxy

import (
	"time"

	lru "github.com/hashicorp/golang-lru/v2"

	"registryd/proxy/maven"
	"registryd/store"
)

// The negative cache remembers, per (upstream, path), that the upstream
// answered 404 or 410: until the mark expires, a miss does not ask that
// upstream for that path again, and a path every upstream of a registry is
// remembered not to have is answered 404 with no upstream traffic at all.
// Builds ask for many files that do not exist (Gradle's .module files,
// coursier's probes, every build's SNAPSHOT metadata), the same ones on
// every build.
//
// Only a definite answer about the file is remembered: 5xx, 429, timeouts,
// connection errors and refused answers never are. A mark is void once the
// file is stored for that upstream (a fill, an upload), or after anything
// that ran a cache-delete or invalidate endpoint of the upstream or of a
// registry it belongs to, or edited the upstream (store.ForgetEpoch). The
// cache is in memory and bounded (negativeCacheSize marks, least recently
// used out): a restart asks again.
const negativeCacheSize = 1 << 17

type negativeCache struct {
	c *lru.Cache[flightKey, negativeMark]
}

type negativeMark struct {
	until time.Time
	epoch uint64 // store.ForgetEpoch of the upstream when its request started
}

func newNegativeCache() (*negativeCache, error) {
	c, err := lru.New[flightKey, negativeMark](negativeCacheSize)
	if err != nil {
		return nil, err
	}
	return &negativeCache{c: c}, nil
}

// ttl is how long up's absence of rel is remembered: the upstream's own
// setting, else the global one, for metadata or for other files; 0 = not at all.
func (u *upstreamView) absenceTTL(rel string) time.Duration {
	if maven.IsMetadata(rel) {
		return u.metaNotFoundTTL
	}
	return u.notFoundTTL
}

// remember records that up answered 404/410 for rel, to a request that
// started at epoch.
func (n *negativeCache) remember(st *store.Store, up *upstreamView, rel string, epoch uint64, now time.Time) {
	ttl := up.absenceTTL(rel)
	if ttl <= 0 || st.ForgetEpoch(up.id) != epoch {
		return
	}
	n.c.Add(flightKey{up.id, rel}, negativeMark{until: now.Add(ttl), epoch: epoch})
}

// absent reports whether up is remembered not to have rel.
func (n *negativeCache) absent(st *store.Store, up *upstreamView, rel string, now time.Time) bool {
	m, ok := n.c.Peek(flightKey{up.id, rel})
	if !ok {
		return false
	}
	if !now.Before(m.until) || m.epoch != st.ForgetEpoch(up.id) {
		n.c.Remove(flightKey{up.id, rel})
		return false
	}
	return true
}

// forget drops the mark of (upstream, rel): the file was stored.
func (n *negativeCache) forget(upstream int64, rel string) {
	n.c.Remove(flightKey{upstream, rel})
}

func (n *negativeCache) len() int { return n.c.Len() }
