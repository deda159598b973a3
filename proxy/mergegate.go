package proxy

import (
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// mergeGate bounds the upstream documents being merged at once, in bytes
// (metadata.max_merging_bytes): a merge reads its documents, parses them
// and builds the answer, about four times their size in memory, and anyone
// who may create an upstream can serve documents of the largest size
// merged. A merge weighs the sum of its documents' sizes; it runs when that
// fits beside the merges running, else waits for room up to
// metadata.merge_wait, then is answered 503 with Retry-After (Maven and
// Gradle retry it). A merge too heavy to ever fit is refused at once (502,
// see compose). Merges do not queue in order: one that fits runs, so a
// small merge does not wait behind a large one, and a large one that finds
// no room in time is refused rather than holding back the small.
//
// An answer kept in memory (composedCache), or rebuilt from the same
// documents, costs no merge and never comes here.
type mergeGate struct {
	max  int64
	wait time.Duration

	mu      sync.Mutex
	used    int64
	changed chan struct{} // closed and replaced when used goes down

	waited  prometheus.Counter
	refused prometheus.Counter

	hooks *Hooks // OnMergeWait, OnMergeAcquire (test hooks)
}

// mergeRetryAfter is the Retry-After of a merge refused for want of room,
// in seconds: merges of the largest documents take about a second.
const mergeRetryAfter = 1

// errMergeBusy is a merge that found no room in time: a retry after
// mergeRetryAfter seconds may find some.
var errMergeBusy = errors.New("too many maven-metadata.xml merges at once")

func newMergeGate(reg prometheus.Registerer, max int64, wait time.Duration) (*mergeGate, error) {
	const ns, sub = "registryd", "metadata"
	g := &mergeGate{max: max, wait: wait, changed: make(chan struct{}),
		waited: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "merge_waits_total",
			Help: "Merges of maven-metadata.xml that waited for room under metadata.max_merging_bytes.",
		}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "merges_refused_total",
			Help: "Merges answered 503 because no room came under metadata.max_merging_bytes within metadata.merge_wait.",
		}),
	}
	if reg == nil {
		return g, nil
	}
	for _, c := range []prometheus.Collector{g.waited, g.refused,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: sub, Name: "merging_bytes",
			Help: "Bytes of upstream documents being merged now (at most metadata.max_merging_bytes).",
		}, func() float64 { return float64(g.inUse()) }),
	} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return g, nil
}

func (g *mergeGate) inUse() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.used
}

// fits reports whether a merge of weight bytes can ever run.
func (g *mergeGate) fits(weight int64) bool { return weight <= g.max }

// acquire takes room for weight bytes (at most g.max), waiting up to
// g.wait; release gives it back. It fails with errMergeBusy.
func (g *mergeGate) acquire(weight int64) (release func(), err error) {
	weight = max(weight, 1)
	var timer *time.Timer
	for {
		g.mu.Lock()
		if g.used+weight <= g.max {
			g.used += weight
			used := g.used
			g.mu.Unlock()
			if timer != nil {
				timer.Stop()
			}
			if g.hooks.OnMergeAcquire != nil {
				g.hooks.OnMergeAcquire(used)
			}
			var once sync.Once
			return func() { once.Do(func() { g.release(weight) }) }, nil
		}
		changed := g.changed
		g.mu.Unlock()
		if timer == nil {
			if g.wait <= 0 {
				g.refused.Inc()
				return func() {}, errMergeBusy
			}
			g.waited.Inc()
			timer = time.NewTimer(g.wait)
			if g.hooks.OnMergeWait != nil {
				g.hooks.OnMergeWait()
			}
		}
		select {
		case <-changed:
		case <-timer.C:
			g.refused.Inc()
			return func() {}, errMergeBusy
		}
	}
}

func (g *mergeGate) release(weight int64) {
	g.mu.Lock()
	g.used -= weight
	close(g.changed)
	g.changed = make(chan struct{})
	g.mu.Unlock()
}
