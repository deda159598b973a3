package proxy

import "github.com/prometheus/client_golang/prometheus"

// memoryCache is one of the engine's caches in memory, as its gauges show
// it: what it holds and what bounds it.
type memoryCache struct {
	name     string       // the cache label
	entries  func() int   // held now
	capacity int          // the count bound (Options.Memory)
	bytes    func() int64 // bytes held now; nil when no byte budget bounds it
	budget   int64        // the byte bound
}

// memoryCaches lists the engine's caches in memory for their gauges.
func (s *engine) memoryCaches() []memoryCache {
	o := s.opts
	cs := []memoryCache{
		{name: "paths", entries: s.marks.len, capacity: o.Memory.Paths},
		{name: "registries", entries: s.regs.Len, capacity: o.Memory.Registries},
		{name: "entries", entries: s.entries.Len, capacity: o.Memory.Entries},
		{name: "verdicts", entries: s.rules.verdicts.Len, capacity: o.Memory.Verdicts},
		{name: "composed", entries: func() int { n, _ := s.composed.fill(); return n }, capacity: o.Memory.Composed,
			bytes: func() int64 { _, b := s.composed.fill(); return b }, budget: o.Metadata.MemoryBytes},
	}
	if s.small != nil {
		cs = append(cs, memoryCache{name: "small_blobs", entries: s.small.count, capacity: o.Memory.SmallBlobs,
			bytes: s.small.held, budget: o.Cache.MemoryBytes})
	}
	return cs
}

// memoryGauges reads the fill of the engine's caches in memory at scrape
// time.
type memoryGauges struct {
	caches                          []memoryCache
	entries, capacity, held, budget *prometheus.Desc
}

func registerMemoryGauges(reg prometheus.Registerer, caches []memoryCache) error {
	if reg == nil {
		return nil
	}
	desc := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName("registryd", "cache", name), help, []string{"cache"}, nil)
	}
	g := &memoryGauges{
		caches: caches,
		entries: desc("memory_entries", "Entries held by a cache in memory of the engine, by cache: paths (the "+
			"negative cache), registries, entries (resolved cache entries), verdicts (of upstream rules), "+
			"composed (merged metadata), small_blobs (small files)."),
		capacity: desc("memory_capacity", "The most entries a cache in memory of the engine holds, by cache."),
		held:     desc("memory_held_bytes", "Bytes held by a cache in memory of the engine that a byte budget bounds, by cache (composed, small_blobs)."),
		budget:   desc("memory_budget_bytes", "The byte budget of a cache in memory of the engine, by cache (composed, small_blobs)."),
	}
	return reg.Register(g)
}

func (g *memoryGauges) Describe(ch chan<- *prometheus.Desc) {
	ch <- g.entries
	ch <- g.capacity
	ch <- g.held
	ch <- g.budget
}

func (g *memoryGauges) Collect(ch chan<- prometheus.Metric) {
	for _, c := range g.caches {
		ch <- prometheus.MustNewConstMetric(g.entries, prometheus.GaugeValue, float64(c.entries()), c.name)
		ch <- prometheus.MustNewConstMetric(g.capacity, prometheus.GaugeValue, float64(c.capacity), c.name)
		if c.bytes != nil {
			ch <- prometheus.MustNewConstMetric(g.held, prometheus.GaugeValue, float64(c.bytes()), c.name)
			ch <- prometheus.MustNewConstMetric(g.budget, prometheus.GaugeValue, float64(c.budget), c.name)
		}
	}
}
