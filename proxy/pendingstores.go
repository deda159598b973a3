package proxy

import (
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Pending stores. A fill answers its clients first and stores the file
// afterwards: the blob written, fsynced and placed, the entry committed
// (through the index's group commit, store/batch.go). When fills come in
// faster than the index and the disk can store them, the stores wait, each
// holding a goroutine, its flight and (for a small file) its body. Nothing
// bounded that wait: at 8 % unique misses 19,292 stores were waiting and
// the daemon's memory grew from 28 MB to 1.2 GB.
//
// cache.max_pending_stores bounds them. A fill takes a slot once its
// clients have the body, without waiting for one, and gives it back when
// its entry is committed (or the store failed). With every slot taken:
//
//   - a new file is served uncached, as on a full disk (passthrough.go): its
//     clients get the whole file with its checksums exactly as ever (a small
//     file is in memory already; a large one was streamed through its temp
//     file, which is dropped), the flight's joined requests and the
//     sidecars that follow it answer from its digests (uncachedSums), and
//     the next request for it is a miss again;
//   - a revalidated file is served as revalidated, but its check is not
//     recorded (the stored copy stays stale: the next request revalidates
//     it again), and a changed one is served uncached, the stored copy
//     staying until a later revalidation stores the new one.
//
// Serving uncached rather than answering 503 keeps the client's answer
// whole and immediate: the upstream's bytes are already here, and refusing
// them would turn an index that is behind into failed builds. What it costs
// is upstream traffic for repeated misses while the writer is behind.

// Kinds of registryd_cache_stores_turned_away_total.
const (
	turnedAwayFill  = "fill"         // a new or changed file served uncached
	turnedAwayCheck = "revalidation" // a 304 whose check was not recorded
)

// pendingStores is the bound and its metrics.
type pendingStores struct {
	slots      chan struct{}
	turnedAway *prometheus.CounterVec
	log        *slog.Logger

	mu       sync.Mutex
	warnedAt time.Time
	quiet    int // turned away since the last warning

	hooks *Hooks // OnStoreTake (a test hook)
}

func newPendingStores(max int, reg prometheus.Registerer, log *slog.Logger) (*pendingStores, error) {
	const ns = "registryd"
	p := &pendingStores{
		slots: make(chan struct{}, max),
		turnedAway: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: "cache", Name: "stores_turned_away_total",
			Help: "Fills not stored because cache.max_pending_stores stores were waiting, by kind: fill " +
				"(the file was served uncached), revalidation (a confirmed copy's check was not recorded).",
		}, []string{"kind"}),
		log: log,
	}
	if reg == nil {
		return p, nil
	}
	for _, c := range []prometheus.Collector{p.turnedAway,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: "cache", Name: "pending_stores",
			Help: "Fills storing their file now (blob and index entry), after their clients were answered; at most cache.max_pending_stores.",
		}, func() float64 { return float64(len(p.slots)) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: "cache", Name: "max_pending_stores",
			Help: "cache.max_pending_stores: past it, fills are served without being stored.",
		}, func() float64 { return float64(cap(p.slots)) }),
	} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// take takes a slot without waiting; ok is false when all are taken, and
// the refusal is counted and logged (once a minute) under kind. release is
// safe to call more than once.
func (p *pendingStores) take(kind string, f *flight) (release func(), ok bool) {
	select {
	case p.slots <- struct{}{}:
		ok = true
	default:
	}
	if !ok {
		// Counted before OnStoreTake reports it, so a test woken by the hook
		// reads the refusal in the metric.
		p.turnedAway.WithLabelValues(kind).Inc()
	}
	if p.hooks.OnStoreTake != nil {
		p.hooks.OnStoreTake(ok)
	}
	if ok {
		var once sync.Once
		return func() { once.Do(func() { <-p.slots }) }, true
	}
	now := time.Now()
	p.mu.Lock()
	if !p.warnedAt.IsZero() && now.Sub(p.warnedAt) < diskLogEvery {
		p.quiet++
		p.mu.Unlock()
		return func() {}, false
	}
	quiet := p.quiet
	p.warnedAt, p.quiet = now, 0
	p.mu.Unlock()
	p.log.Warn("the index is behind: files are served to their clients without storing them "+
		"(cache.max_pending_stores stores are waiting; logged once a minute; see registryd_cache_stores_turned_away_total)",
		"kind", kind, "upstream", f.up.id, "path", f.relSlash, "pending", len(p.slots), "since_last_warning", quiet)
	return func() {}, false
}

// pending is how many stores wait now.
func (p *pendingStores) pending() int { return len(p.slots) }
