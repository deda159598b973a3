package store

import "sync"

// forgetEpochs counts, per upstream, the changes after which what the proxy
// remembers about the upstream's files without storing them (its negative
// cache: "this upstream does not have that path") must be forgotten: a
// cache entry of the upstream deleted or invalidated, its cache or its
// registry's cache purged, the upstream edited or deleted. The counts live
// in memory, as does what they invalidate.
type forgetEpochs struct {
	mu sync.Mutex
	m  map[int64]uint64
}

func (f *forgetEpochs) bump(ids ...int64) {
	f.mu.Lock()
	if f.m == nil {
		f.m = map[int64]uint64{}
	}
	for _, id := range ids {
		f.m[id]++
	}
	f.mu.Unlock()
}

// ForgetEpoch returns the upstream's count of such changes; a remembered
// fact taken at an older count is void.
func (s *Store) ForgetEpoch(upstream int64) uint64 {
	s.forget.mu.Lock()
	defer s.forget.mu.Unlock()
	return s.forget.m[upstream]
}

// forgetRegistry bumps the epochs of every upstream of the registry: its
// cache-delete endpoint voids what is remembered of all of them.
func (s *Store) forgetRegistry(registry int64) {
	ups, err := s.RegistryUpstreams(registry)
	if err != nil {
		return
	}
	ids := make([]int64, len(ups))
	for i, u := range ups {
		ids[i] = u.ID
	}
	s.forget.bump(ids...)
}
