package proxy

import (
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"registryd/internal/clusterjob"
	"registryd/store"
	"registryd/upstream"
)

// Routes, the label of proxy request counters.
const (
	routeDownload = "download"
	routeUpload   = "upload"
	routeOther    = "other"
)

// route indexes routeNames.
type route uint8

const (
	rDownload route = iota
	rUpload
	rOther
)

// metrics of the proxy listener, the fills and the collector, registered on
// the injected registerer. Counters of the hit path are resolved once, so a
// hit does no label hashing.
type metrics struct {
	requests    *prometheus.CounterVec
	lookups     *prometheus.CounterVec
	servedBytes *prometheus.CounterVec
	// upServed: registryd_upstream_served_bytes_total{upstream, result}.
	upServed     *prometheus.CounterVec
	saved        *prometheus.CounterVec
	upstreamReqs *prometheus.CounterVec
	upstreamDur  *prometheus.HistogramVec
	refusals     *prometheus.CounterVec
	skipped      *prometheus.CounterVec
	abandoned    *prometheus.CounterVec
	denials      *prometheus.CounterVec
	merges       *prometheus.CounterVec
	auditDropped prometheus.Counter
	fetched      prometheus.Counter
	joins        prometheus.Counter
	flushErrors  prometheus.Counter
	storeErrors  prometheus.Counter

	collectorRuns    prometheus.Counter
	collectorEntries prometheus.Counter
	collectorBlobs   prometheus.Counter
	collectorFreed   prometheus.Counter
	collectorErrors  prometheus.Counter

	// Cluster (cluster.go): fills that waited for another node's lease,
	// fills that found the file stored by another node, job rounds skipped.
	leaseWaits      prometheus.Counter
	filledElsewhere prometheus.Counter
	jobSkipped      *clusterjob.Skipped

	// series caches the labelled download counters of each registry and
	// (registry, upstream) pair, so a hit neither hashes labels nor
	// allocates; series.prune drops those of deleted registries and
	// upstreams.
	series seriesCache

	// byCode caches requests{route, code} counters, indexed by route and
	// status code, so counting a request neither hashes labels nor allocates.
	byCode [nRoutes][600]atomic.Pointer[counterBox]
}

type counterBox struct{ c prometheus.Counter }

const nRoutes = 3

var routeNames = [nRoutes]string{routeDownload, routeUpload, routeOther}

// gauges are read at scrape time.
type gauges struct {
	blobs    func() (count, bytes int64)
	cache    func() store.CacheStats
	inflight func() int
	pending  func() int
	memory   func() int64
	// catalog lists the registries and upstreams that exist.
	catalog func() (store.Catalog, error)
	// health is an upstream's health, for registryd_upstream_healthy.
	health func(id int64) upstream.HealthStatus
	// gates is the load of each upstream's request cap.
	gates func() map[int64]gateLoad
	// negatives is the size of the negative cache.
	negatives func() int
}

func newMetrics(reg prometheus.Registerer, g gauges) (*metrics, error) {
	m := &metrics{}
	m.newRequestMetrics()
	m.newUpstreamMetrics()
	m.newCacheMetrics()
	m.newCollectorMetrics()
	m.series.m = m
	var err error
	if m.jobSkipped, err = clusterjob.NewSkipped(reg, jobCollect, jobEvict); err != nil {
		return nil, err
	}
	cs := []prometheus.Collector{
		m.requests, m.upstreamDur, m.fetched, m.joins, m.auditDropped,
		m.flushErrors, m.storeErrors,
		m.collectorRuns, m.collectorEntries, m.collectorBlobs, m.collectorFreed, m.collectorErrors,
		m.leaseWaits, m.filledElsewhere, m.abandoned,
	}
	cs = append(cs, scrapeGauges(g)...)
	// The per-registry and per-upstream series go through the catalog
	// collector, which prunes those of deleted ones before each scrape.
	cs = append(cs, &catalogCollector{m: m, g: g})
	if reg == nil {
		return m, nil
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// newRequestMetrics makes the counters of the listener's requests and the downloads' results.
func (m *metrics) newRequestMetrics() {
	const ns = "registryd"
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: ns, Subsystem: "proxy", Name: "requests_total",
		Help: "Proxy listener requests by route (download, upload, other; readiness and liveness for the probes) and status code.",
	}, []string{"route", "code"})
	m.lookups = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: ns, Subsystem: "cache", Name: "lookups_total",
		Help: "Downloads by registry id, upstream id (the one whose file was served; empty when none), " +
			"kind (artifact, metadata, checksum) and result: hit (fresh entry), miss (asked the upstreams), " +
			"join (shared a fetch already in flight), negative (every upstream remembered not to have it), " +
			"stale (stored copy served, upstream failed or unhealthy), revalidated (stale, upstream confirmed it).",
	}, []string{"registry", "upstream", "kind", "result"})
	m.servedBytes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: ns, Subsystem: "proxy", Name: "served_bytes_total",
		Help: "Body bytes sent to download clients, by registry id and result (as in registryd_cache_lookups_total).",
	}, []string{"registry", "result"})
	m.saved = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: ns, Subsystem: "cache", Name: "upstream_requests_saved_total",
		Help: "Downloads answered without an upstream request of their own (hits, joins, negatives), by registry id.",
	}, []string{"registry"})
}

// newUpstreamMetrics makes the counters of the requests out to upstreams and what became of them.
func (m *metrics) newUpstreamMetrics() {
	const ns = "registryd"
	m.skipped = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: ns, Subsystem: "upstream", Name: "skipped_total",
		Help: "Upstream requests not sent, by upstream id and reason: unhealthy (backing off), " +
			"failing_path (the file failed on the upstream lately: its path breaker is open), " +
			"not_found (remembered 404, the negative cache).",
	}, []string{"upstream", "reason"})
	m.abandoned = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: ns, Subsystem: "upstream", Name: "fills_abandoned_total",
		Help: "Fills whose clients all left and that nobody joined, cancelled, by stage: queued (dequeued " +
			"before they had a slot of the upstream's cap), downloading (their slot given to a waiting request).",
	}, []string{"stage"})
	m.denials = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: ns, Subsystem: "upstream", Name: "rule_denials_total",
		Help: "Requests for which an upstream's allow/deny rules took it out of resolution, by upstream id.",
	}, []string{"upstream"})
	m.upstreamReqs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: ns, Subsystem: "upstream", Name: "requests_total",
		Help: "Upstream GET requests by upstream id and outcome (ok, not_modified, not_found, " +
			"client_error, server_error, timeout, network_error, refused, aborted).",
	}, []string{"upstream", "outcome"})
	m.upstreamDur = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: ns, Subsystem: "upstream", Name: "response_duration_seconds",
		Help:    "Time from sending an upstream request to its response headers (or its failure), by upstream id.",
		Buckets: prometheus.ExponentialBuckets(0.005, 3, 9),
	}, []string{"upstream"})
	m.refusals = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: ns, Subsystem: "upstream", Name: "refusals_total",
		Help: "Upstream answers refused as a copy of the file, by upstream id and reason: answer (204, " +
			"unsolicited 206, other 2xx, an encoding not decoded, a body longer than its Content-Length), " +
			"content_type, html_body, empty_body, checksum_mismatch, checksum_missing, checksum_unusable, " +
			"blocked (a redirect to an address upstreams may not reach, or to a URL that is not http(s)).",
	}, []string{"upstream", "reason"})
	m.upServed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: ns, Subsystem: "upstream", Name: "served_bytes_total",
		Help: "Body bytes of the upstream's files sent to download clients, through every registry, by upstream id " +
			"and result (as in registryd_cache_lookups_total); merged metadata, built of several upstreams, is " +
			"counted by registry only (registryd_proxy_served_bytes_total).",
	}, []string{"upstream", "result"})
	m.fetched = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: ns, Subsystem: "upstream", Name: "fetched_bytes_total",
		Help: "Body bytes read from upstreams by fills.",
	})
}

// newCacheMetrics makes the counters of merged metadata, audit, fills and download counts.
func (m *metrics) newCacheMetrics() {
	const ns = "registryd"
	m.merges = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: ns, Subsystem: "metadata", Name: "merges_total",
		Help: "Answers built out of several upstreams' documents (maven-metadata.xml, .meta/prefixes.txt), " +
			"by registry id and outcome: complete, partial (an upstream failed; its document is missing), " +
			"single (one upstream had the document: its own bytes), none (no upstream could give one).",
	}, []string{"registry", "outcome"})
	m.auditDropped = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: ns, Subsystem: "audit", Name: "events_dropped_total",
		Help: "Audit events of rule denials not recorded: their write failed while the writer was stopping.",
	})
	m.joins = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: ns, Subsystem: "cache", Name: "fill_joins_total",
		Help: "Requests that joined a fill (or revalidation) already in flight instead of asking the upstream again.",
	})
	m.storeErrors = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: ns, Subsystem: "cache", Name: "fill_store_errors_total",
		Help: "Fills whose body arrived whole but could not be stored (hashing, fsync, rename or index " +
			"write failed): their clients got the whole file, nothing was cached.",
	})
	m.flushErrors = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: ns, Subsystem: "cache", Name: "download_count_flush_errors_total",
		Help: "Failed writes of batched download counters.",
	})
}

// newCollectorMetrics makes the counters of the collector and the cluster.
func (m *metrics) newCollectorMetrics() {
	const ns = "registryd"
	m.collectorRuns = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: ns, Subsystem: "collector", Name: "runs_total",
		Help: "Collector runs (every cache.collect_interval, and at once after a delete or purge).",
	})
	m.collectorEntries = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: ns, Subsystem: "collector", Name: "entries_total",
		Help: "Cache entries pending destruction that the collector destroyed.",
	})
	m.collectorBlobs = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: ns, Subsystem: "collector", Name: "blobs_removed_total",
		Help: "Blob files the collector removed because no entry referred to them any more.",
	})
	m.collectorFreed = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: ns, Subsystem: "collector", Name: "freed_bytes_total",
		Help: "Bytes of blob files the collector removed.",
	})
	m.collectorErrors = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: ns, Subsystem: "collector", Name: "errors_total",
		Help: "Collector batches that failed.",
	})
	m.leaseWaits = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: ns, Subsystem: "cluster", Name: "fill_lease_waits_total",
		Help: "Fills that waited for the fill lease of their file because another node of the cluster was fetching it.",
	})
	m.filledElsewhere = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: ns, Subsystem: "cluster", Name: "filled_elsewhere_total",
		Help: "Fills (and revalidations) that did not ask the upstream because another node of the cluster had stored (or revalidated) the file meanwhile.",
	})
}

// scrapeGauges are the gauges of g, read at scrape time.
func scrapeGauges(g gauges) []prometheus.Collector {
	const ns = "registryd"
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: "cache", Name: "blobs",
			Help: "Blob files in DATA_DIR/blobs (each distinct content once).",
		}, func() float64 { n, _ := g.blobs(); return float64(n) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: "cache", Name: "blob_bytes",
			Help: "Bytes of the blob files in DATA_DIR/blobs.",
		}, func() float64 { _, b := g.blobs(); return float64(b) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: "cache", Name: "entries",
			Help: "Live cache entries in the index.",
		}, func() float64 { return float64(g.cache().Entries) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: "cache", Name: "pending_entries",
			Help: "Cache entries marked for destruction that the collector has not removed yet.",
		}, func() float64 { return float64(g.cache().Pending) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: "cache", Name: "fills_in_flight",
			Help: "Upstream fetches (fills and revalidations) running now.",
		}, func() float64 { return float64(g.inflight()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: "cache", Name: "download_counts_pending",
			Help: "Cache entries whose download counts wait in memory for the next flush.",
		}, func() float64 { return float64(g.pending()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: "cache", Name: "memory_bytes",
			Help: "Bytes of small cached files also held in memory (cache.memory_bytes bounds it).",
		}, func() float64 { return float64(g.memory()) }),
	}
}

// request counts one answered request.
func (m *metrics) request(r route, code int) {
	if code < 100 || code >= 600 {
		m.requests.WithLabelValues(routeNames[r], strconv.Itoa(code)).Inc()
		return
	}
	slot := &m.byCode[r][code]
	b := slot.Load()
	if b == nil {
		b = &counterBox{m.requests.WithLabelValues(routeNames[r], strconv.Itoa(code))}
		slot.Store(b)
	}
	b.c.Inc()
}

// Upstream request outcomes.
const (
	outcomeOK          = "ok"
	outcomeNotModified = "not_modified"
	outcomeNotFound    = "not_found"
	outcomeClientError = "client_error"
	outcomeServerError = "server_error"
	outcomeTimeout     = "timeout"
	outcomeNetwork     = "network_error"
	outcomeAborted     = "aborted" // the body failed, or was refused, after the headers
	outcomeRefused     = "refused" // the answer's status or framing was refused (upstream.ErrBadAnswer)
)

func (m *metrics) upstream(up *upstreamView, outcome string, since time.Time) {
	m.upstreamReqs.WithLabelValues(up.label, outcome).Inc()
	if !since.IsZero() {
		m.upstreamDur.WithLabelValues(up.label).Observe(time.Since(since).Seconds())
	}
}
