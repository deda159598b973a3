package store

import "sync"

// forgetEpochs counts, per upstream, the changes after which what the proxy
// remembers about the upstream's files without storing them (its negative
// cache: "this upstream does not have that path") must be forgotten: a
// cache entry of the upstream deleted or invalidated, its cache or its
// registry's cache purged, the upstream edited or deleted. The counts live
// in memory, as does what they invalidate.
//
// On a cluster (cluster.go) the counts of every node move together: a bump
// here is published, the other nodes' bumps arrive as messages, and a
// possible loss of messages moves the global count, which every upstream's
// epoch includes.
type forgetEpochs struct {
	mu  sync.Mutex
	m   map[int64]uint64
	all uint64 // bumped for every upstream at once
	// publish, set on a cluster, tells the other nodes of a bump.
	publish func(ids []int64)
}

// bump moves the epochs of ids after a change made by this node.
func (f *forgetEpochs) bump(ids ...int64) {
	f.bumpLocal(ids...)
	if f.publish != nil && len(ids) > 0 {
		f.publish(ids)
	}
}

// bumpLocal moves the epochs of ids in this process only.
func (f *forgetEpochs) bumpLocal(ids ...int64) {
	f.mu.Lock()
	if f.m == nil {
		f.m = map[int64]uint64{}
	}
	for _, id := range ids {
		f.m[id]++
	}
	f.mu.Unlock()
}

// bumpAll moves every upstream's epoch.
func (f *forgetEpochs) bumpAll() {
	f.mu.Lock()
	f.all++
	f.mu.Unlock()
}

// ForgetEpoch returns the upstream's count of such changes; a remembered
// fact taken at an older count is void.
func (s *Store) ForgetEpoch(upstream int64) uint64 {
	s.forget.mu.Lock()
	defer s.forget.mu.Unlock()
	// Both counts only grow, so their sum moves whenever either does.
	return s.forget.m[upstream] + s.forget.all
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
