package proxy

import "time"

// engineOptions are the sections of Options the engine reads (all but
// the listener's).
type engineOptions struct {
	Cache     CacheOptions
	Upstreams UpstreamOptions
	Metadata  MetadataOptions
	Audit     AuditOptions
	Memory    MemoryOptions
	Hooks     *Hooks
}

// Hooks are test hooks: points of the engine a test watches or holds,
// and timings a test shortens. A test keeps the pointer it passed in
// Options.Hooks and may set a field while no request uses it; nil (and
// every zero field) is production's behaviour.
type Hooks struct {
	// OnJoin runs whenever a request joins a flight.
	OnJoin func()
	// OnComplete runs in a fill once its body is complete on disk, before
	// the blob is hashed, fsynced and published.
	OnComplete func()
	// OnRest is told each rest of the collector and the evictor before it
	// starts.
	OnRest func(time.Duration)
	// StallNow is asked each time an uncached fill starts to wait for its
	// readers (passthrough.go); true takes the stall path at once, as if
	// SpillStall had passed, so a test cuts the laggards at the moment it
	// chooses rather than after a time that a loaded machine may stretch.
	StallNow func(*flight) bool
	// SpillStall is how long an uncached fill waits for its readers.
	// Default 10s.
	SpillStall time.Duration
	// ClientPoll is how often a request waiting for a fill looks whether
	// its client left (clientgone.go). Default 250ms.
	ClientPoll time.Duration
	// OnMergeWait runs when a merge starts to wait for room under
	// metadata.max_merging_bytes; OnMergeAcquire when one takes room, with
	// the bytes then in use.
	OnMergeWait    func()
	OnMergeAcquire func(used int64)
	// OnComposeFollow runs when a request starts to wait for a
	// composition in progress.
	OnComposeFollow func()
	// OnStoreTake runs after each take of a pending store slot with its
	// outcome (pendingstores.go).
	OnStoreTake func(ok bool)
}

// CacheOptions tune the artifact cache (the cache section).
type CacheOptions struct {
	// MaxFileBytes refuses to cache larger files (cache.max_file_bytes).
	// Default 5GiB.
	MaxFileBytes int64
	// CollectInterval is how often the collector looks for entries pending
	// destruction (cache.collect_interval). Default 2s.
	CollectInterval time.Duration
	// FlushInterval is how often download counters are written
	// (cache.flush_interval). Default 1s.
	FlushInterval time.Duration
	// MemoryBytes is how many bytes of small cached files are also kept in
	// memory (cache.memory_bytes). Default 32MiB; negative keeps none.
	MemoryBytes int64
	// MemoryMaxFileBytes is the largest file kept in memory
	// (cache.memory_max_file_bytes). Default 64KiB; negative keeps none.
	MemoryMaxFileBytes int64
	// MaxBytes is the disk budget of the cached files, kept by eviction
	// (cache.max_bytes). Default 0: no budget.
	MaxBytes int64
	// MaxPendingStores bounds the fills whose file is being stored after
	// their clients were answered (cache.max_pending_stores). Default 512.
	MaxPendingStores int
	// MinFreeFraction is the share of the data volume kept free, by
	// eviction and by fills that stream uncached below it
	// (cache.min_free_fraction). Default 0: off.
	MinFreeFraction float64
	// MaxLocks is how many cluster locks the index engine holds at once
	// (store.postgres.max_locks): fill leases take at most half of them.
	// Default 32.
	MaxLocks int
}

// UpstreamOptions govern how the cache asks upstreams (the upstreams
// section), and the health tracker NewHealth builds.
type UpstreamOptions struct {
	// FillTimeout bounds one whole upstream fetch into the cache
	// (upstreams.fill_timeout). Default 30m.
	FillTimeout time.Duration
	// ChecksumPolicy is what a fill checks of the checksums of an upstream
	// without a checksum_policy of its own: store.ChecksumVerify,
	// ChecksumRequire or ChecksumOff (upstreams.checksum_policy). Default
	// "": verify.
	ChecksumPolicy string
	// NotFoundTTL is how long an upstream's 404 or 410 for a file is
	// remembered, unless the upstream says otherwise
	// (upstreams.not_found_ttl). Default 1h; negative remembers none.
	NotFoundTTL time.Duration
	// MetadataNotFoundTTL is NotFoundTTL for maven-metadata.xml
	// (upstreams.metadata_not_found_ttl). Default 5m; negative remembers
	// none.
	MetadataNotFoundTTL time.Duration
	// MaxConcurrentRequests caps the requests out to one upstream at once
	// (upstreams.max_concurrent_requests). Default 20.
	MaxConcurrentRequests int
	// ReservedSmallRequests is how many of them only small files may take
	// (upstreams.reserved_small_requests). Default 4; negative reserves
	// none.
	ReservedSmallRequests int
	// SmallFileBytes is the largest Content-Length that counts a fill as
	// small (upstreams.small_file_bytes). Default 1MiB.
	SmallFileBytes int64

	// Backoff is how long an unhealthy upstream is skipped before a trial
	// (upstreams.backoff). Default 10s.
	Backoff time.Duration
	// MaxBackoff caps Backoff's doubling, and the Retry-After an
	// upstream's pause is passed on to clients with
	// (upstreams.max_backoff). Default 10m.
	MaxBackoff time.Duration
	// FailureThreshold is how many distinct paths failing within
	// FailureWindow mark an upstream unhealthy (upstreams.failure_threshold).
	// Default 3.
	FailureThreshold int
	// PathFailureThreshold is how many failures of one path within
	// FailureWindow open its breaker (upstreams.path_failure_threshold).
	// Default 2.
	PathFailureThreshold int
	// FailureWindow is how long a failure counts
	// (upstreams.failure_window). Default 1m.
	FailureWindow time.Duration
	// MaxFailingPaths bounds the path breakers kept in memory
	// (upstreams.max_failing_paths). Default 10000.
	MaxFailingPaths int
	// TrialTimeout is how long a health trial may go without a verdict
	// before another request may try: registryd passes the upstream
	// client's connect plus header timeouts (upstreams.connect_timeout +
	// upstreams.header_timeout), by when the trial has its answer or its
	// error. Default 20s.
	TrialTimeout time.Duration
}

// MetadataOptions bound merged maven-metadata.xml and prefix files (the
// metadata section).
type MetadataOptions struct {
	// MaxDocumentBytes bounds one upstream's document and a merged answer
	// (metadata.max_document_bytes). Default 16MiB.
	MaxDocumentBytes int64
	// PartialTTL is how long a merge that lacks a failed upstream's
	// document is reused (metadata.partial_ttl). Default 1m; negative
	// reuses none.
	PartialTTL time.Duration
	// MemoryBytes bounds the merged documents kept in memory
	// (metadata.memory_bytes). Default 32MiB; negative keeps none.
	MemoryBytes int64
	// MaxVersions bounds the versions of one document and of a merged
	// answer (metadata.max_versions). Default 100000.
	MaxVersions int
	// MaxElements bounds the XML elements of one document and of a merged
	// answer (metadata.max_elements). Default 1048576.
	MaxElements int
	// MaxMergingBytes bounds the documents being merged at once
	// (metadata.max_merging_bytes). Default 64MiB.
	MaxMergingBytes int64
	// MergeWait is how long a merge waits for room under MaxMergingBytes
	// (metadata.merge_wait). Default 2s; negative refuses at once.
	MergeWait time.Duration
}

// AuditOptions bound the audit events of rule denials (the audit section).
type AuditOptions struct {
	// Retention is how long audit events are kept (audit.retention).
	// Default 26280h (3 years); negative keeps them forever.
	Retention time.Duration
	// CallerDenialsPerMinute is how many refusals of one caller are
	// recorded as events of their own per minute
	// (audit.caller_denials_per_minute). Default 30.
	CallerDenialsPerMinute int
	// RegistryDenialsPerMinute is the same bound for all callers of one
	// registry (audit.registry_denials_per_minute). Default 300.
	RegistryDenialsPerMinute int
	// AggregateInterval is how long refusals past those bounds are counted
	// before their aggregate events are written (audit.aggregate_interval).
	// Default 1m.
	AggregateInterval time.Duration
}

// MemoryOptions bound the count of what the engine's caches in memory
// hold (registryd_cache_memory_entries and _capacity show their fill).
// They are not configuration keys: the defaults are registryd's; tests,
// the bench and the soak may set them.
type MemoryOptions struct {
	// Paths bounds the (upstream, path) answers remembered as absent or
	// refused, the negative cache (negative.go). Default 131072.
	Paths int
	// Registries bounds the resolved registries kept. Default 1024.
	Registries int
	// Entries bounds the resolved cache entries kept (each checked against
	// the cache generation on use). Default 32768.
	Entries int
	// Verdicts bounds the verdicts of upstreams' allow/deny rules kept, all
	// upstreams together, some 300 bytes each (rules.go). Default 16384.
	Verdicts int
	// Composed bounds the merged answers kept, whatever their size
	// (metadata.memory_bytes bounds their bytes), and the upstream
	// documents remembered not to merge (composed.go). Default 8192.
	Composed int
	// SmallBlobs bounds the small files kept in memory; only a backstop,
	// cache.memory_bytes does the evicting (memcache.go). Default 1048576.
	SmallBlobs int
}

// withDefaults is Options.withDefaults for the engine's sections.
func (o engineOptions) withDefaults() engineOptions {
	c := &o.Cache
	c.MaxFileBytes = orDefault(c.MaxFileBytes, 5<<30)
	c.CollectInterval = orDefault(c.CollectInterval, 2*time.Second)
	c.FlushInterval = orDefault(c.FlushInterval, time.Second)
	c.MemoryBytes = orOff(c.MemoryBytes, 32<<20)
	c.MemoryMaxFileBytes = orOff(c.MemoryMaxFileBytes, 64<<10)
	c.MaxBytes = max(c.MaxBytes, 0)
	c.MaxPendingStores = orDefault(c.MaxPendingStores, 512)
	c.MinFreeFraction = max(c.MinFreeFraction, 0)
	c.MaxLocks = orDefault(c.MaxLocks, 32)

	u := &o.Upstreams
	u.FillTimeout = orDefault(u.FillTimeout, 30*time.Minute)
	u.NotFoundTTL = orOff(u.NotFoundTTL, time.Hour)
	u.MetadataNotFoundTTL = orOff(u.MetadataNotFoundTTL, 5*time.Minute)
	u.MaxConcurrentRequests = orDefault(u.MaxConcurrentRequests, 20)
	u.ReservedSmallRequests = orOff(u.ReservedSmallRequests, 4)
	u.SmallFileBytes = orDefault(u.SmallFileBytes, 1<<20)
	u.Backoff = orDefault(u.Backoff, 10*time.Second)
	u.MaxBackoff = orDefault(u.MaxBackoff, 10*time.Minute)
	u.FailureThreshold = orDefault(u.FailureThreshold, 3)
	u.PathFailureThreshold = orDefault(u.PathFailureThreshold, 2)
	u.FailureWindow = orDefault(u.FailureWindow, time.Minute)
	u.MaxFailingPaths = orDefault(u.MaxFailingPaths, 10000)
	u.TrialTimeout = orDefault(u.TrialTimeout, 20*time.Second)

	m := &o.Metadata
	m.MaxDocumentBytes = orDefault(m.MaxDocumentBytes, 16<<20)
	m.PartialTTL = orOff(m.PartialTTL, time.Minute)
	m.MemoryBytes = orOff(m.MemoryBytes, 32<<20)
	m.MaxVersions = orDefault(m.MaxVersions, 100000)
	m.MaxElements = orDefault(m.MaxElements, 1<<20)
	m.MaxMergingBytes = orDefault(m.MaxMergingBytes, 64<<20)
	m.MergeWait = orOff(m.MergeWait, 2*time.Second)

	a := &o.Audit
	a.Retention = orOff(a.Retention, 3*365*24*time.Hour)
	a.CallerDenialsPerMinute = orDefault(a.CallerDenialsPerMinute, 30)
	a.RegistryDenialsPerMinute = orDefault(a.RegistryDenialsPerMinute, 300)
	a.AggregateInterval = orDefault(a.AggregateInterval, time.Minute)

	mem := &o.Memory
	mem.Paths = orDefault(mem.Paths, 1<<17)
	mem.Registries = orDefault(mem.Registries, 1024)
	mem.Entries = orDefault(mem.Entries, 32768)
	mem.Verdicts = orDefault(mem.Verdicts, 16384)
	mem.Composed = orDefault(mem.Composed, 8192)
	mem.SmallBlobs = orDefault(mem.SmallBlobs, 1<<20)
	return o
}

// orDefault is v, or def when v is not positive.
func orDefault[T int | int64 | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

// orOff is v, def when v is 0, and 0 (off) when v is negative.
func orOff[T int | int64 | time.Duration](v, def T) T {
	switch {
	case v == 0:
		return def
	case v < 0:
		return 0
	}
	return v
}
