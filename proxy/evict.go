package proxy

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"registryd/internal/every"
)

// Eviction keeps the cache within its disk budget (docs/operations.md, "Disk
// budget and eviction"). Two marks, checked every evictEvery:
//
//   - cache.max_bytes: when the blob files take more, entries are evicted
//     until they take evictLowWater of it;
//   - cache.min_free_fraction: when less of the data volume is free, entries
//     are evicted until evictFreeMargin more of it is free.
//
// Entries go least recently downloaded first (store.EvictLeastUsed, by the
// cache_by_use index: no scan of the entries), as deletes go: one
// transaction marks a batch pending (the entries vanish from lookups at its
// commit), then the collector destroys them and unlinks the blobs that lost
// their last reference. A crash in between leaves pending marks that the
// collector finishes after the restart, or orphan blobs the start-up sweep
// removes. A blob that a request is streaming is unlinked but stays
// readable through the descriptor the request holds (Linux keeps an
// unlinked file's blocks until its last descriptor closes): a hit opens
// the blob before it sends a byte (fileBody; sendfile sends from that
// descriptor), a small file in the memory cache is served from memory, and
// a request that looked the entry up just before the eviction and opens
// the blob after its unlink finds it missing and fetches the file again
// (errBlobGone). So no hit fails.
//
// Batches are those of the collector: at most evictBatch entries per
// transaction, then one collector batch (the unlinks), then a rest as long
// as their own work took (not the waits for the index's writer, see
// collectRest), so hits are never stalled for long and eviction takes at
// most about half a core.
//
// Entries of a purge in progress among the least recently used are handed
// to the collector with the batch (store.EvictLeastUsed): eviction goes on
// past them, and the space they hold counts towards its goal, however far
// behind the collector's walk of the purge is.

const (
	// evictEvery is how often the marks are checked: a check reads two
	// counters and a statfs at most a second old.
	evictEvery = time.Second
	// evictLowWater is the share of cache.max_bytes eviction brings the
	// blobs down to, once past the budget: a margin, so that every fill
	// past the budget does not start a run of its own.
	evictLowWater = 0.90
	// evictFreeMargin is how much more of the volume eviction frees than
	// cache.min_free_fraction, once below it.
	evictFreeMargin = 0.02
	// evictBatch is the most entries one eviction transaction marks.
	evictBatch = collectBatch
)

// Reasons of an eviction run, in its log line.
const (
	evictBudget = "cache.max_bytes"
	evictFree   = "cache.min_free_fraction"
)

// EvictResult is what one eviction run did.
type EvictResult struct {
	Reason  string // which mark was crossed; "" when none was
	Want    int64  // the bytes it set out to free
	Entries int    // entries evicted
	Bytes   int64  // their sizes
	Purged  int    // entries of a purge in progress handed to the collector on the way
	Freed   int64  // bytes of the blobs they left unreferenced (removed by the collector)
}

// evictState is the eviction loop and its metrics.
type evictState struct {
	entries, bytes, errors prometheus.Counter

	stop, done chan struct{}

	mu       sync.Mutex
	warnedAt time.Time // "nothing left to evict", once a minute
}

func newEvictState(reg prometheus.Registerer, maxBytes int64, minFree float64) (*evictState, error) {
	const ns = "registryd"
	e := &evictState{
		entries: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Subsystem: "cache", Name: "evictions_total",
			Help: "Cache entries evicted (least recently downloaded first) to keep cache.max_bytes or cache.min_free_fraction.",
		}),
		bytes: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Subsystem: "cache", Name: "evicted_bytes_total",
			Help: "Sizes of the cache entries evicted (their blobs are removed by the collector unless shared).",
		}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Subsystem: "cache", Name: "eviction_errors_total",
			Help: "Eviction runs that failed (an index transaction or the collector).",
		}),
	}
	if reg == nil {
		return e, nil
	}
	for _, c := range []prometheus.Collector{e.entries, e.bytes, e.errors,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: "cache", Name: "budget_bytes",
			Help: "cache.max_bytes: the disk budget of the cached files, 0 for none.",
		}, func() float64 { return float64(maxBytes) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: "cache", Name: "min_free_ratio",
			Help: "cache.min_free_fraction: the share of the data volume eviction keeps free, 0 for none.",
		}, func() float64 { return minFree }),
	} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// evictWant is how many bytes of blobs to free now, and why.
func (s *engine) evictWant() (int64, string) {
	var want int64
	var reason string
	_, used := s.blobs.Stats()
	if budget := s.opts.Cache.MaxBytes; budget > 0 && used > budget {
		want, reason = used-int64(float64(budget)*evictLowWater), evictBudget
	}
	if frac := s.opts.Cache.MinFreeFraction; frac > 0 {
		if sp, err := s.blobs.SpaceNow(); err == nil && sp.Total > 0 && float64(sp.Free) < frac*float64(sp.Total) {
			if w := int64((frac+evictFreeMargin)*float64(sp.Total)) - sp.Free; w > want {
				want, reason = w, evictFree
			}
		}
	}
	return want, reason
}

func (s *engine) evict(stop <-chan struct{}) (EvictResult, error) {
	s.ev.mu.Lock() // one run at a time: a second would evict for the same want
	defer s.ev.mu.Unlock()
	want, reason := s.evictWant()
	out := EvictResult{Reason: reason, Want: want}
	if want <= 0 {
		return out, nil
	}
	// Once per cluster (cluster.go): another node evicting skips this round.
	unlock, run, err := s.jobLease(jobEvict)
	if !run {
		return out, err
	}
	defer unlock()
	if err := s.buildUseIndex(stop); err != nil {
		s.ev.errors.Inc()
		return out, err
	}
	exhausted := false
	for out.Freed < want {
		// Downloads counted since the last flush are the most recent
		// uses: without them a file in use now could look like the oldest.
		if err := s.FlushDownloads(); err != nil {
			s.backgroundFailed("flushing download counts", err)
		}
		ev, err := s.st.EvictLeastUsed(evictBatch, want-out.Freed)
		if err != nil {
			s.ev.errors.Inc()
			return out, err
		}
		if ev.Entries == 0 && ev.Purged == 0 {
			exhausted = true
			break
		}
		s.ev.entries.Add(float64(ev.Entries))
		s.ev.bytes.Add(float64(ev.Bytes))
		out.Entries += ev.Entries
		out.Bytes += ev.Bytes
		out.Purged += ev.Purged
		// What the batch frees, as the index counts it: measuring the blob
		// store instead would count the fills running meanwhile against
		// eviction, which would chase them.
		out.Freed += ev.Freed
		// One collector batch removes the blobs now (the entries just
		// marked go first), so that about one batch of them waits; not a
		// whole collector run, which would first finish every purge in
		// progress while the budget waits.
		c, err := s.collect(stop, 1)
		if err != nil {
			s.ev.errors.Inc()
			return out, err
		}
		if !s.rest(stop, ev.Busy+c.Busy) {
			break
		}
	}
	if out.Entries > 0 || out.Purged > 0 {
		s.log.Info("evicted cache entries, least recently downloaded first", "reason", reason, "want_bytes", want,
			"entries", out.Entries, "bytes", out.Bytes, "purged_entries", out.Purged, "freed_bytes", out.Freed)
	}
	if exhausted && time.Since(s.ev.warnedAt) > diskLogEvery {
		s.ev.warnedAt = time.Now()
		s.log.Warn("eviction found nothing more to evict; the mark is still crossed (logged once a minute)",
			"reason", reason, "want_bytes", want, "freed_bytes", out.Freed)
	}
	return out, nil
}

// buildUseIndex completes the least-recently-used index of a database from
// before it, in batches (store.BuildUseIndex).
func (s *engine) buildUseIndex(stop <-chan struct{}) error {
	if s.st.UseIndexReady() {
		return nil
	}
	s.log.Info("building the least-recently-used index of the cache entries, for eviction")
	batches := 0
	for {
		start := time.Now()
		done, err := s.st.BuildUseIndex(0)
		if err != nil {
			return err
		}
		batches++
		if done {
			s.log.Info("the least-recently-used index of the cache entries is complete", "batches", batches)
			return nil
		}
		if !s.rest(stop, time.Since(start)) {
			return errShutdown
		}
	}
}

// rest pauses as long as a batch's own work took (see collectRest); false
// when stop closed meanwhile.
func (s *engine) rest(stop <-chan struct{}, took time.Duration) bool {
	d := time.Duration(collectRest * float64(took))
	if s.hooks.OnRest != nil {
		s.hooks.OnRest(d)
	}
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-stop:
		return false
	}
}

// evictor checks the marks every evictEvery until stop closes.
func (s *engine) evictor(stop, done chan struct{}) {
	defer close(done)
	// The index of a database from before it is built now, in the
	// background, rather than by the first eviction, which would wait for
	// it (and might find the volume too full for its transactions).
	s.ev.mu.Lock()
	err := s.buildUseIndex(stop)
	s.ev.mu.Unlock()
	if err == errShutdown {
		return
	}
	if err != nil {
		s.backgroundFailed("building the least-recently-used index", err)
	}
	every.Tick(stop, evictEvery, func() {
		if _, err := s.evict(stop); err != nil && err != errShutdown {
			s.backgroundFailed("evicting cache entries", err)
		}
	})
}

// startEvictor runs the evictor when a mark is set.
func (s *engine) startEvictor() {
	if s.opts.Cache.MaxBytes <= 0 && s.opts.Cache.MinFreeFraction <= 0 {
		return
	}
	s.ev.stop, s.ev.done = make(chan struct{}), make(chan struct{})
	go s.evictor(s.ev.stop, s.ev.done)
}

// stopEvictor stops the evictor and waits for a run in progress.
func (s *engine) stopEvictor() {
	if s.ev.stop != nil {
		close(s.ev.stop)
		<-s.ev.done
		s.ev.stop = nil
	}
}
