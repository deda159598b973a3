// Package history records the traffic history the web console draws: every
// interval it reads the proxy's counters from the Prometheus registry they
// are registered on (so it needs nothing of package proxy but the names and
// labels of its series), turns them into the counts of that interval per
// registry and per upstream, and stores them in the index
// (store.RecordTraffic), which keeps them 24 hours per interval and 30 days
// per hour, and sums the nodes of a cluster on read.
//
// Series read (see proxy/metrics.go):
//
//   - registryd_cache_lookups_total{registry, upstream, kind, result}:
//     requests; hits are results hit, stale, revalidated and join (answered
//     without an upstream download of their own), misses result miss.
//   - registryd_proxy_served_bytes_total{registry, result}: bytes served;
//     those of every result but miss (and none) are upstream traffic saved.
//   - registryd_upstream_served_bytes_total{upstream, result}: the same
//     for the files of each upstream (merged metadata belongs to none).
//   - registryd_upstream_requests_total{upstream, outcome}: requests sent
//     to upstreams; outcomes other than ok, not_modified and not_found
//     failed.
//
// A counter lower than at the last sample was reset (its series was
// dropped with a deleted registry and created again): its whole value is
// the interval's count, never a negative one. The counters start at 0 with
// the process, and so does the sampler, so a restart loses nothing but the
// interval it stopped in (Stop records it).
package history

import (
	"crypto/rand"
	"encoding/binary"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"registryd/internal/every"
	"registryd/store"
)

// The series read, by family name.
const (
	famLookups     = "registryd_cache_lookups_total"
	famServedBytes = "registryd_proxy_served_bytes_total"
	famUpServed    = "registryd_upstream_served_bytes_total"
	famUpstreamReq = "registryd_upstream_requests_total"
)

// Recorder stores one node's sample: store.Store.
type Recorder interface {
	RecordTraffic(node uint64, smp store.TrafficSample) error
}

// Options configure a Sampler.
type Options struct {
	// Interval between samples (admin.traffic_history_interval). Default 1m.
	Interval time.Duration
	// Gatherer is the registry the proxy's metrics are registered on.
	Gatherer prometheus.Gatherer
	// Store records the samples.
	Store Recorder
	// Node names this process's points in the index; 0: a random one.
	Node uint64
	// Now is the clock; default time.Now.
	Now    func() time.Time
	Logger *slog.Logger
}

// Sampler records the traffic history of one node.
type Sampler struct {
	o Options

	mu sync.Mutex
	// prev are the counters' values at the last recorded sample, by
	// family and labels: only the series that exist (bounded by the
	// proxy's, which drops those of deleted registries and upstreams).
	prev map[string]float64

	stop, done chan struct{}
	started    bool
	once       sync.Once
	// failing is the loop's: the last sample failed.
	failing bool
}

// New returns a sampler; Start runs it.
func New(o Options) *Sampler {
	if o.Interval <= 0 {
		o.Interval = time.Minute
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	for o.Node == 0 {
		var b [8]byte
		_, _ = rand.Read(b[:])
		o.Node = binary.BigEndian.Uint64(b[:])
	}
	return &Sampler{o: o, prev: map[string]float64{}, stop: make(chan struct{}), done: make(chan struct{})}
}

// Node is the id this sampler records its points under.
func (s *Sampler) Node() uint64 { return s.o.Node }

// Start samples every interval until Stop.
func (s *Sampler) Start() {
	s.started = true
	go func() {
		defer close(s.done)
		every.Tick(s.stop, s.o.Interval, s.tick)
	}()
}

// tick is one sample of the loop. It logs one line when recording starts
// failing and one when it works again, not one an interval through an
// outage of the index.
func (s *Sampler) tick() {
	switch err := s.Sample(); {
	case err != nil && !s.failing:
		s.failing = true
		s.o.Logger.Warn("recording the traffic history failed; the next sample that is recorded carries the counts", "err", err)
	case err == nil && s.failing:
		s.failing = false
		s.o.Logger.Info("recording the traffic history works again")
	}
}

// Stop ends the loop started by Start and records the interval in
// progress, so a restart loses none of it. Call it before the store
// closes, after the listeners stopped counting.
func (s *Sampler) Stop() {
	s.once.Do(func() {
		close(s.stop)
		if s.started {
			<-s.done
		}
		if err := s.Sample(); err != nil {
			s.o.Logger.Warn("recording the last traffic sample failed", "err", err)
		}
	})
}

// Sample records the counts since the last recorded sample now. When the
// store refuses them, nothing is forgotten: the next sample's counts
// include them.
func (s *Sampler) Sample() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	fams, err := s.o.Gatherer.Gather()
	if err != nil && len(fams) == 0 {
		return err
	}
	cur := make(map[string]float64, len(s.prev))
	series := map[store.TrafficOf]store.TrafficCounts{}
	add := func(of store.TrafficOf, fn func(*store.TrafficCounts)) {
		if of.ID <= 0 {
			return
		}
		c := series[of]
		fn(&c)
		series[of] = c
	}
	for _, f := range fams {
		name := f.GetName()
		if name != famLookups && name != famServedBytes && name != famUpServed && name != famUpstreamReq {
			continue
		}
		for _, m := range f.GetMetric() {
			if m.GetCounter() == nil {
				continue
			}
			key, labels := seriesKey(name, m)
			v := m.GetCounter().GetValue()
			cur[key] = v
			d := delta(s.prev[key], v)
			if d == 0 {
				continue
			}
			switch name {
			case famLookups:
				res := labels["result"]
				count := func(c *store.TrafficCounts) {
					c.Requests += d
					switch res {
					case "hit", "stale", "revalidated", "join":
						c.Hits += d
					case "miss":
						c.Misses += d
					}
				}
				add(store.TrafficOf{Kind: store.TrafficRegistry, ID: id(labels["registry"])}, count)
				add(store.TrafficOf{Kind: store.TrafficUpstream, ID: id(labels["upstream"])}, count)
			case famServedBytes, famUpServed:
				res := labels["result"]
				of := store.TrafficOf{Kind: store.TrafficRegistry, ID: id(labels["registry"])}
				if name == famUpServed {
					of = store.TrafficOf{Kind: store.TrafficUpstream, ID: id(labels["upstream"])}
				}
				add(of, func(c *store.TrafficCounts) {
					c.ServedBytes += d
					if res != "miss" && res != "" {
						c.SavedBytes += d
					}
				})
			case famUpstreamReq:
				out := labels["outcome"]
				add(store.TrafficOf{Kind: store.TrafficUpstream, ID: id(labels["upstream"])}, func(c *store.TrafficCounts) {
					c.UpstreamRequests += d
					switch out {
					case "ok", "not_modified", "not_found":
					default:
						c.UpstreamFailures += d
					}
				})
			}
		}
	}
	if err := s.o.Store.RecordTraffic(s.o.Node, store.TrafficSample{At: s.o.Now(), Series: series}); err != nil {
		return err
	}
	s.prev = cur
	return nil
}

// delta is a counter's increase from prev to v; a value below prev means
// the counter started again from 0 (reset), and all of it is new.
func delta(prev, v float64) int64 {
	if v < prev {
		prev = 0
	}
	return int64(math.Round(v - prev))
}

func id(label string) int64 {
	n, err := strconv.ParseInt(label, 10, 64)
	if err != nil {
		return 0
	}
	return n
}

// seriesKey names a series by its family and labels (the registry
// gathers them sorted by name).
func seriesKey(family string, m *dto.Metric) (string, map[string]string) {
	var b strings.Builder
	b.WriteString(family)
	labels := make(map[string]string, len(m.GetLabel()))
	for _, l := range m.GetLabel() {
		b.WriteByte(0)
		b.WriteString(l.GetName())
		b.WriteByte('=')
		b.WriteString(l.GetValue())
		labels[l.GetName()] = l.GetValue()
	}
	return b.String(), labels
}
