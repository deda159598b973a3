package proxy

import (
	"time"

	lru "github.com/hashicorp/golang-lru/v2"

	"registryd/maven"
	"registryd/store"
)

// pathMemory remembers, per (upstream, path), an upstream's last answer
// that was definite but not the file, so the upstream is not asked for
// that path again for a while:
//
//   - absent, its 404 or 410 (the negative cache): until the mark expires
//     a miss skips that upstream, and a path every upstream of a registry
//     is remembered not to have is answered 404 with no upstream traffic.
//     Builds ask for many files that do not exist (Gradle's .module files,
//     coursier's probes, every build's SNAPSHOT metadata), the same ones on
//     every build. The TTL is the upstream's (absenceTTL).
//   - refused, an answer that could not be the file (verify.go), for
//     refusedTTL: a miss skips the upstream (counting it as a failure with
//     the same reason), a revalidation serves the stored copy. A streamed
//     body refused at its end (its checksum did not match) has cost its
//     clients a broken transfer; Maven and Gradle retry at once, and the
//     retry must reach the next upstream rather than the same bad answer.
//     The memory is short, so a repaired upstream is asked again soon.
//
// 5xx, 429, timeouts and connection errors are never remembered here (they
// are the health tracker's). A mark is void once the file is stored for
// that upstream (a fill, an upload), or after anything that ran a
// cache-delete or invalidate endpoint of the upstream or of a registry it
// belongs to, or edited the upstream (store.ForgetEpoch). The memory is in
// memory and bounded (Options.Memory.Paths marks, least recently used out): a
// restart asks again.
const (
	refusedTTL = time.Minute
)

type pathMemory struct {
	c *lru.Cache[flightKey, pathMark]
}

type pathMark struct {
	until time.Time
	epoch uint64 // store.ForgetEpoch of the upstream when its request started
	// refused is the refusal of the upstream's answer; nil for absent.
	refused error
}

func newPathMemory(size int) (*pathMemory, error) {
	c, err := lru.New[flightKey, pathMark](size)
	if err != nil {
		return nil, err
	}
	return &pathMemory{c: c}, nil
}

// absenceTTL is how long up's absence of rel is remembered: the upstream's
// own setting, else the global one, for metadata or for other files; 0 =
// not at all.
func (u *upstreamView) absenceTTL(rel string) time.Duration {
	if maven.IsMetadata(rel) {
		return u.metaNotFoundTTL
	}
	return u.notFoundTTL
}

// rememberAbsent records that up answered 404/410 for rel, to a request
// that started at epoch.
func (m *pathMemory) rememberAbsent(st *store.Store, up *upstreamView, rel string, epoch uint64, now time.Time) {
	if ttl := up.absenceTTL(rel); ttl > 0 {
		m.remember(st, up.id, rel, pathMark{until: now.Add(ttl), epoch: epoch})
	}
}

// rememberRefused records that up's answer for rel was refused.
func (m *pathMemory) rememberRefused(st *store.Store, up int64, rel string, err error, now time.Time) {
	m.remember(st, up, rel, pathMark{until: now.Add(refusedTTL), epoch: st.ForgetEpoch(up), refused: err})
}

// remember keeps rel as a key: it must be owned memory (fills pass their
// flight's key), never a view of a request.
func (m *pathMemory) remember(st *store.Store, up int64, rel string, mark pathMark) {
	// A cache-delete endpoint ran since the request started: what it said
	// may already be void.
	if st.ForgetEpoch(up) != mark.epoch {
		return
	}
	m.c.Add(flightKey{up, rel}, mark)
}

// recall returns the live mark of (up, rel), dropping a void one.
func (m *pathMemory) recall(st *store.Store, up int64, rel string, now time.Time) (pathMark, bool) {
	k := flightKey{up, rel}
	mark, ok := m.c.Peek(k)
	if !ok {
		return mark, false
	}
	if !now.Before(mark.until) || mark.epoch != st.ForgetEpoch(up) {
		m.c.Remove(k)
		return mark, false
	}
	return mark, true
}

// forget drops the mark of (upstream, rel): the file was stored.
func (m *pathMemory) forget(upstream int64, rel string) {
	m.c.Remove(flightKey{upstream, rel})
}

func (m *pathMemory) len() int { return m.c.Len() }

// refusedFor returns the refusal of up's answer for rel, while it is
// remembered, or nil.
func (s *engine) refusedFor(up *upstreamView, rel string) error {
	mark, ok := s.marks.recall(s.st, up.id, rel, s.now())
	if !ok {
		return nil
	}
	return mark.refused
}
