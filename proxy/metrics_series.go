package proxy

import (
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"registryd/maven"
	"registryd/store"
	"registryd/upstream"
)

// result is how a download was answered, the result label of
// registryd_cache_lookups_total and registryd_proxy_served_bytes_total, and
// the access log's.
type result uint8

const (
	resNone        result = iota // not resolved (refused before, or failed)
	resHit                       // a fresh entry
	resMiss                      // the upstreams were asked
	resJoin                      // shared a fetch already in flight
	resNegative                  // every upstream remembered not to have it
	resStale                     // a stale entry served: its upstream failed or is unhealthy
	resRevalidated               // a stale entry its upstream confirmed
	nResults
)

var resultNames = [nResults]string{"", "hit", "miss", "join", "negative", "stale", "revalidated"}

func (r result) String() string { return resultNames[r] }

// saves reports whether the result cost no upstream request of its own.
func (r result) saves() bool { return r == resHit || r == resJoin || r == resNegative }

const nKinds = int(maven.Checksum) + 1

// seriesCache holds the resolved children of the labelled download
// counters. Children are created on first use: a pair that never served a
// checksum has no checksum series.
type seriesCache struct {
	m     *metrics
	pairs sync.Map // pairKey -> *pairSeries
	regs  sync.Map // registry id -> *regSeries
	// upstreams are the upstream ids that may have series in the
	// upstream-labelled vectors (every upstream of a resolved registry).
	upstreams sync.Map // upstream id -> struct{}
	// upBytes are the served-bytes counters by upstream and result.
	upBytes sync.Map // upstream id -> *[nResults]atomic.Pointer[counterBox]
}

// seenUpstream notes that upstream id may get series.
func (c *seriesCache) seenUpstream(id int64) {
	if _, ok := c.upstreams.Load(id); !ok {
		c.upstreams.Store(id, struct{}{})
	}
}

type pairKey struct{ registry, upstream int64 }

type pairSeries struct {
	lookups [nKinds][nResults]atomic.Pointer[counterBox]
}

type regSeries struct {
	bytes [nResults]atomic.Pointer[counterBox]
	saved prometheus.Counter
}

func idLabel(id int64) string {
	if id == 0 {
		return ""
	}
	return strconv.FormatInt(id, 10)
}

// lookup counts one download.
func (c *seriesCache) lookup(registry, upstream int64, kind maven.Kind, r result) {
	k := pairKey{registry, upstream}
	v, ok := c.pairs.Load(k)
	if !ok {
		v, _ = c.pairs.LoadOrStore(k, new(pairSeries))
	}
	slot := &v.(*pairSeries).lookups[kind][r]
	b := slot.Load()
	if b == nil {
		b = &counterBox{c.m.lookups.WithLabelValues(idLabel(registry), idLabel(upstream), kind.String(), r.String())}
		slot.Store(b)
	}
	b.c.Inc()
	if r.saves() {
		c.reg(registry).saved.Inc()
	}
}

func (c *seriesCache) reg(registry int64) *regSeries {
	v, ok := c.regs.Load(registry)
	if !ok {
		v, _ = c.regs.LoadOrStore(registry, &regSeries{saved: c.m.saved.WithLabelValues(idLabel(registry))})
	}
	return v.(*regSeries)
}

// bytes returns the served-bytes counter of a registry and result.
func (c *seriesCache) bytes(registry int64, r result) prometheus.Counter {
	slot := &c.reg(registry).bytes[r]
	b := slot.Load()
	if b == nil {
		b = &counterBox{c.m.servedBytes.WithLabelValues(idLabel(registry), r.String())}
		slot.Store(b)
	}
	return b.c
}

// upstreamBytes returns the served-bytes counter of an upstream and result.
func (c *seriesCache) upstreamBytes(upstream int64, r result) prometheus.Counter {
	v, ok := c.upBytes.Load(upstream)
	if !ok {
		c.seenUpstream(upstream)
		v, _ = c.upBytes.LoadOrStore(upstream, new([nResults]atomic.Pointer[counterBox]))
	}
	slot := &v.(*[nResults]atomic.Pointer[counterBox])[r]
	b := slot.Load()
	if b == nil {
		b = &counterBox{c.m.upServed.WithLabelValues(idLabel(upstream), r.String())}
		slot.Store(b)
	}
	return b.c
}

// prune deletes the series of registries and upstreams that no longer
// exist, in every labelled vector.
func (c *seriesCache) prune(cat store.Catalog) {
	regs := make(map[int64]bool, len(cat.Registries))
	for _, r := range cat.Registries {
		regs[r.ID] = true
	}
	ups := make(map[int64]bool, len(cat.Upstreams))
	for _, u := range cat.Upstreams {
		ups[u.ID] = true
	}
	m := c.m
	goneUps := map[int64]bool{}
	c.pairs.Range(func(k, _ any) bool {
		p := k.(pairKey)
		if !regs[p.registry] || (p.upstream != 0 && !ups[p.upstream]) {
			c.pairs.Delete(k)
			m.lookups.DeletePartialMatch(prometheus.Labels{"registry": idLabel(p.registry), "upstream": idLabel(p.upstream)})
		}
		if p.upstream != 0 && !ups[p.upstream] {
			goneUps[p.upstream] = true
		}
		return true
	})
	c.regs.Range(func(k, _ any) bool {
		id := k.(int64)
		if !regs[id] {
			c.regs.Delete(k)
			l := prometheus.Labels{"registry": idLabel(id)}
			m.servedBytes.DeletePartialMatch(l)
			m.saved.DeletePartialMatch(l)
			m.merges.DeletePartialMatch(l)
		}
		return true
	})
	c.upstreams.Range(func(k, _ any) bool {
		if id := k.(int64); !ups[id] {
			goneUps[id] = true
			c.upstreams.Delete(k)
		}
		return true
	})
	for id := range goneUps {
		l := prometheus.Labels{"upstream": idLabel(id)}
		m.upstreamReqs.DeletePartialMatch(l)
		m.upstreamDur.DeletePartialMatch(l)
		m.refusals.DeletePartialMatch(l)
		m.skipped.DeletePartialMatch(l)
		m.denials.DeletePartialMatch(l)
		m.upServed.DeletePartialMatch(l)
		c.upBytes.Delete(id)
	}
}

// catalogCollector exposes the labelled series of registries and upstreams
// after pruning those of deleted ones, plus the series read at scrape time:
// the info series mapping ids to names, upstream health, the request caps'
// load and the negative cache's size.
type catalogCollector struct {
	m *metrics
	g gauges
}

var (
	registryInfoDesc = prometheus.NewDesc("registryd_registry_info",
		"One series per virtual registry, value 1, mapping its id to its group id and name.",
		[]string{"registry", "group", "name"}, nil)
	upstreamInfoDesc = prometheus.NewDesc("registryd_upstream_info",
		"One series per upstream, value 1, mapping its id to its group id and name.",
		[]string{"upstream", "group", "name"}, nil)
	upstreamHealthyDesc = prometheus.NewDesc("registryd_upstream_healthy",
		"1 while the upstream is healthy, 0 while it is skipped after failures (see upstreams.backoff).",
		[]string{"upstream"}, nil)
	upstreamFailingPathsDesc = prometheus.NewDesc("registryd_upstream_failing_paths",
		"Paths of the upstream whose breaker is open: they failed lately and are not asked until their own trial "+
			"(see upstreams.path_failure_threshold).",
		[]string{"upstream"}, nil)
	upstreamActiveDesc = prometheus.NewDesc("registryd_upstream_active_requests",
		"Requests out to the upstream now (at most upstreams.max_concurrent_requests).",
		[]string{"upstream"}, nil)
	upstreamLargeDesc = prometheus.NewDesc("registryd_upstream_large_requests",
		"Of the requests out to the upstream, those of large bodies (at most upstreams.max_concurrent_requests "+
			"less upstreams.reserved_small_requests).",
		[]string{"upstream"}, nil)
	upstreamIdleDesc = prometheus.NewDesc("registryd_upstream_idle_requests",
		"Of the requests out to the upstream, fills whose clients all left: they go on into the cache, "+
			"and give their slot up when another request waits for one.",
		[]string{"upstream"}, nil)
	upstreamQueuedDesc = prometheus.NewDesc("registryd_upstream_queued_requests",
		"Requests waiting for a free slot of the upstream's cap.",
		[]string{"upstream"}, nil)
	negativeEntriesDesc = prometheus.NewDesc("registryd_cache_negative_entries",
		"(upstream, path) answers remembered, absent (the negative cache) or refused, expired ones included until evicted.",
		nil, nil)
)

func (c *catalogCollector) vecs() []prometheus.Collector {
	m := c.m
	return []prometheus.Collector{m.lookups, m.servedBytes, m.upServed, m.saved, m.upstreamReqs, m.refusals, m.skipped,
		m.denials, m.merges}
}

func (c *catalogCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, v := range c.vecs() {
		v.Describe(ch)
	}
	for _, d := range []*prometheus.Desc{registryInfoDesc, upstreamInfoDesc, upstreamHealthyDesc,
		upstreamFailingPathsDesc, upstreamActiveDesc, upstreamLargeDesc, upstreamIdleDesc, upstreamQueuedDesc, negativeEntriesDesc} {
		ch <- d
	}
}

func (c *catalogCollector) Collect(ch chan<- prometheus.Metric) {
	cat, err := c.g.catalog()
	if err == nil {
		c.m.series.prune(cat)
		for _, r := range cat.Registries {
			ch <- prometheus.MustNewConstMetric(registryInfoDesc, prometheus.GaugeValue, 1,
				idLabel(r.ID), idLabel(r.GroupID), r.Name)
		}
		load := c.g.gates()
		for _, u := range cat.Upstreams {
			id := idLabel(u.ID)
			ch <- prometheus.MustNewConstMetric(upstreamInfoDesc, prometheus.GaugeValue, 1, id, idLabel(u.GroupID), u.Name)
			st := c.g.health(u.ID)
			healthy := 1.0
			if st.State != upstream.Healthy {
				healthy = 0
			}
			ch <- prometheus.MustNewConstMetric(upstreamHealthyDesc, prometheus.GaugeValue, healthy, id)
			ch <- prometheus.MustNewConstMetric(upstreamFailingPathsDesc, prometheus.GaugeValue, float64(st.FailingPaths), id)
			l := load[u.ID]
			ch <- prometheus.MustNewConstMetric(upstreamActiveDesc, prometheus.GaugeValue, float64(l.active), id)
			ch <- prometheus.MustNewConstMetric(upstreamLargeDesc, prometheus.GaugeValue, float64(l.bulk), id)
			ch <- prometheus.MustNewConstMetric(upstreamIdleDesc, prometheus.GaugeValue, float64(l.idle), id)
			ch <- prometheus.MustNewConstMetric(upstreamQueuedDesc, prometheus.GaugeValue, float64(l.waiting), id)
		}
	}
	ch <- prometheus.MustNewConstMetric(negativeEntriesDesc, prometheus.GaugeValue, float64(c.g.negatives()))
	for _, v := range c.vecs() {
		v.Collect(ch)
	}
}
