package proxy

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/prometheus/client_golang/prometheus"

	"registryd/store"
	"registryd/store/blob"
	"registryd/upstream"
)

// engine is the cache behind the listener, which reads no request:
// resolution (resolve.go), flights and their fills, verify, the negative
// cache, the upstream gates, health, merged metadata, eviction and the
// background work (the download-count flusher, the collector, the audit
// writer and retention). It is the part of the proxy meant to become
// package proxy/cache (issue 21).
type engine struct {
	opts    engineOptions // with their defaults
	st      *store.Store
	blobs   *blob.Store
	up      Fetcher
	log     *slog.Logger
	met     *metrics
	now     func() time.Time
	maxFile int64

	regs    *lru.Cache[int64, *registryView]
	entries *lru.Cache[entryKey, *entryView]
	small   *smallBlobs // nil when disabled

	health *upstream.Health // which upstreams are worth asking
	urls   upstreamURLs     // the url each upstream's health was judged for (cluster.go)
	gates  *gates           // the cap of requests out to each upstream
	// leaseSlots bounds the cluster fill leases held at once (cluster.go).
	leaseSlots chan struct{}
	marks      *pathMemory // (upstream, path) answers remembered: absent or refused

	composed *composedCache // merged maven-metadata.xml and prefix files
	merging  *mergeGate     // the documents being merged at once (metadata.max_merging_bytes)
	rules    *ruleSets      // compiled allow/deny rules of each upstream, and their verdicts
	audit    *auditQueue    // audit events of rule denials, written in batches

	flightsMu sync.Mutex
	flights   map[flightKey]*flight
	closing   bool
	fills     sync.WaitGroup
	fillCtx   context.Context
	fillStop  context.CancelFunc

	downloads *downloadCounter
	disk      *diskState  // a full data volume: counted and logged (passthrough.go)
	ev        *evictState // eviction under the disk budget (evict.go)
	// stores bounds the fills waiting to be stored (pendingstores.go).
	stores   *pendingStores
	uncached *uncachedSums // digests of files streamed uncached, for their sidecars
	// collectMu serialises collector batches: eviction measures what was
	// freed once its batch returns, which must include a batch a
	// concurrent run took.
	collectMu sync.Mutex
	flushMu   sync.Mutex // one download-count flush at a time

	// hooks are the test hooks (Options.Hooks; empty in production).
	hooks *Hooks

	bgMu          sync.Mutex
	flusherStop   chan struct{}
	flusherDone   chan struct{}
	collectorStop chan struct{}
	collectorDone chan struct{}
	retentionStop chan struct{} // the audit retention job (audit_retention.go)
	retentionDone chan struct{}
}

// Fetcher is what the proxy needs of the upstream client.
type Fetcher interface {
	Get(ctx context.Context, ep upstream.Endpoint, relPath, etag string) (*upstream.Response, error)
	// Revalidate is Get with the wait for headers bounded by
	// upstreams.check_timeout.
	Revalidate(ctx context.Context, ep upstream.Endpoint, relPath, etag string) (*upstream.Response, error)
	// GetChecksum fetches relPath's .sha1, for the require checksum policy.
	GetChecksum(ctx context.Context, ep upstream.Endpoint, relPath string) (string, error)
}

// engineDeps are the engine's collaborators: New's Deps but the
// listener's (auth, the gateway secret, the access log).
type engineDeps struct {
	Options    engineOptions // with their defaults
	Store      *store.Store
	Blobs      *blob.Store
	Upstream   Fetcher
	Logger     *slog.Logger // set
	Registerer prometheus.Registerer
	Now        func() time.Time // set
	Health     *upstream.Health // nil: the engine's own (NewHealth)
}

// newEngine builds the engine of d. It starts nothing.
func newEngine(d engineDeps) (*engine, error) {
	o := d.Options
	u := o.Upstreams
	s := &engine{
		opts: o, st: d.Store, blobs: d.Blobs, up: d.Upstream, log: d.Logger,
		now: d.Now, maxFile: o.Cache.MaxFileBytes,
		flights:    map[flightKey]*flight{},
		downloads:  newDownloadCounter(),
		health:     d.Health,
		gates:      newGates(u.MaxConcurrentRequests, u.ReservedSmallRequests, u.SmallFileBytes),
		leaseSlots: newLeaseSlots(o.Cache.MaxLocks),
		hooks:      o.Hooks,
		uncached:   newUncachedSums(d.Store.ForgetEpoch),
	}
	if s.hooks == nil {
		s.hooks = &Hooks{}
	}
	s.fillCtx, s.fillStop = context.WithCancel(context.Background())
	if s.health == nil {
		s.health = NewHealth(o.Upstreams, d.Logger, d.Now)
	}
	if err := s.newCaches(); err != nil {
		return nil, err
	}
	if err := s.register(d); err != nil {
		return nil, err
	}
	// No new file below the free mark: eviction makes room, fills do not
	// refill it at once (blob.Store.SetMinFree).
	d.Blobs.SetMinFree(o.Cache.MinFreeFraction)
	return s, nil
}

// newCaches makes the engine's caches in memory, bounded by
// Options.Memory. The registry and entry views are validated against
// store.CacheGeneration on every use, so their size bounds memory, not
// staleness.
func (s *engine) newCaches() error {
	o := s.opts
	var err error
	if s.regs, err = lru.New[int64, *registryView](o.Memory.Registries); err != nil {
		return err
	}
	if s.entries, err = lru.New[entryKey, *entryView](o.Memory.Entries); err != nil {
		return err
	}
	if s.marks, err = newPathMemory(o.Memory.Paths); err != nil {
		return err
	}
	if s.composed, err = newComposedCache(o.Metadata.MemoryBytes, o.Memory.Composed); err != nil {
		return err
	}
	s.composed.hooks = s.hooks
	s.small, err = newSmallBlobs(o.Cache.MemoryBytes, o.Cache.MemoryMaxFileBytes, o.Memory.SmallBlobs)
	return err
}

// register makes the parts of the engine that bring metrics of their own,
// registered on d.Registerer.
func (s *engine) register(d engineDeps) error {
	o := s.opts
	var err error
	if s.rules, err = newRuleSets(d.Registerer, o.Memory.Verdicts); err != nil {
		return fmt.Errorf("proxy metrics: %w", err)
	}
	if s.merging, err = newMergeGate(d.Registerer, o.Metadata.MaxMergingBytes, o.Metadata.MergeWait); err != nil {
		return fmt.Errorf("proxy metrics: %w", err)
	}
	s.merging.hooks = s.hooks
	if s.audit, err = newAuditQueue(s, o.Audit, d.Registerer); err != nil {
		return err
	}
	s.met, err = newMetrics(d.Registerer, gauges{
		blobs:     d.Blobs.Stats,
		cache:     d.Store.CacheStats,
		inflight:  s.inflight,
		pending:   s.downloads.pending,
		memory:    s.small.held,
		catalog:   d.Store.Catalog,
		health:    s.health.Status,
		gates:     s.gates.load,
		negatives: s.marks.len,
	})
	if err != nil {
		return fmt.Errorf("proxy metrics: %w", err)
	}
	if err = registerMemoryGauges(d.Registerer, s.memoryCaches()); err != nil {
		return fmt.Errorf("proxy metrics: %w", err)
	}
	if s.disk, err = newDiskState(d.Registerer, d.Blobs, d.Logger); err != nil {
		return fmt.Errorf("proxy metrics: %w", err)
	}
	if s.stores, err = newPendingStores(o.Cache.MaxPendingStores, d.Registerer, d.Logger); err != nil {
		return fmt.Errorf("proxy metrics: %w", err)
	}
	s.stores.hooks = s.hooks
	if s.ev, err = newEvictState(d.Registerer, o.Cache.MaxBytes, o.Cache.MinFreeFraction); err != nil {
		return fmt.Errorf("proxy metrics: %w", err)
	}
	return nil
}

// spillStallFor is how long an uncached fill waits for its readers:
// spillStall, or the test hooks' SpillStall.
func (s *engine) spillStallFor() time.Duration {
	if d := s.hooks.SpillStall; d > 0 {
		return d
	}
	return spillStall
}

// clientPollEvery is how often a request waiting for a fill looks whether
// its client left: clientPoll, or the test hooks' ClientPoll.
func (s *engine) clientPollEvery() time.Duration {
	if d := s.hooks.ClientPoll; d > 0 {
		return d
	}
	return clientPoll
}

// stopFills ends the engine's flights: no new one starts, the running
// fills are cancelled, and it returns once they ended.
func (s *engine) stopFills() {
	s.flightsMu.Lock()
	s.closing = true
	s.flightsMu.Unlock()
	s.fillStop()
	s.fills.Wait()
}
