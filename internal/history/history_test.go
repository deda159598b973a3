package history

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"registryd/internal/boltstore"
	"registryd/internal/testclock"
	"registryd/store"
)

// proxyCounters are the proxy's series the sampler reads, with their names
// and labels (proxy/metrics.go).
type proxyCounters struct {
	reg      *prometheus.Registry
	lookups  *prometheus.CounterVec
	served   *prometheus.CounterVec
	upServed *prometheus.CounterVec
	upstream *prometheus.CounterVec
}

func newProxyCounters(t *testing.T) *proxyCounters {
	t.Helper()
	p := &proxyCounters{
		reg: prometheus.NewRegistry(),
		lookups: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "registryd_cache_lookups_total", Help: "h"},
			[]string{"registry", "upstream", "kind", "result"}),
		served: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "registryd_proxy_served_bytes_total", Help: "h"},
			[]string{"registry", "result"}),
		upServed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "registryd_upstream_served_bytes_total", Help: "h"},
			[]string{"upstream", "result"}),
		upstream: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "registryd_upstream_requests_total", Help: "h"},
			[]string{"upstream", "outcome"}),
	}
	// A series of another family with the same labels is not read.
	other := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "registryd_cache_upstream_requests_saved_total", Help: "h"},
		[]string{"registry"})
	other.WithLabelValues("1").Add(1000)
	p.reg.MustRegister(p.lookups, p.served, p.upServed, p.upstream, other)
	return p
}

// recorder keeps the samples; fail makes the next recordings fail.
type recorder struct {
	samples []store.TrafficSample
	fail    int
}

func (r *recorder) RecordTraffic(node uint64, smp store.TrafficSample) error {
	if r.fail > 0 {
		r.fail--
		return errors.New("index unavailable")
	}
	r.samples = append(r.samples, smp)
	return nil
}

func (r *recorder) last(t *testing.T) store.TrafficSample {
	t.Helper()
	if len(r.samples) == 0 {
		t.Fatal("no sample recorded")
	}
	return r.samples[len(r.samples)-1]
}

var (
	reg1 = store.TrafficOf{Kind: store.TrafficRegistry, ID: 1}
	up5  = store.TrafficOf{Kind: store.TrafficUpstream, ID: 5}
	up6  = store.TrafficOf{Kind: store.TrafficUpstream, ID: 6}
)

func TestSamplerDeltas(t *testing.T) {
	p := newProxyCounters(t)
	clk := testclock.New(time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC))
	rec := &recorder{}
	s := New(Options{Gatherer: p.reg, Store: rec, Now: clk.Now, Node: 42})
	if s.Node() != 42 {
		t.Fatalf("node %d", s.Node())
	}

	p.lookups.WithLabelValues("1", "5", "artifact", "hit").Add(3)
	p.lookups.WithLabelValues("1", "5", "artifact", "miss").Add(1)
	p.lookups.WithLabelValues("1", "6", "checksum", "join").Add(2)
	p.lookups.WithLabelValues("1", "", "artifact", "negative").Add(4) // no upstream served it
	p.served.WithLabelValues("1", "hit").Add(3000)
	p.served.WithLabelValues("1", "miss").Add(1 << 40)
	p.served.WithLabelValues("1", "stale").Add(500)
	p.upServed.WithLabelValues("5", "hit").Add(3000)
	p.upServed.WithLabelValues("5", "miss").Add(700)
	p.upstream.WithLabelValues("5", "ok").Add(1)
	p.upstream.WithLabelValues("6", "timeout").Add(2)
	p.upstream.WithLabelValues("6", "not_found").Add(1)
	clk.Advance(time.Minute)
	if err := s.Sample(); err != nil {
		t.Fatal(err)
	}
	got := rec.last(t)
	if !got.At.Equal(clk.Now()) {
		t.Fatalf("sample at %s, want %s", got.At, clk.Now())
	}
	want := map[store.TrafficOf]store.TrafficCounts{
		reg1: {Requests: 10, Hits: 5, Misses: 1, ServedBytes: 3500 + 1<<40, SavedBytes: 3500},
		up5:  {Requests: 4, Hits: 3, Misses: 1, ServedBytes: 3700, SavedBytes: 3000, UpstreamRequests: 1},
		up6:  {Requests: 2, Hits: 2, UpstreamRequests: 3, UpstreamFailures: 2},
	}
	wantSeries(t, got.Series, want)

	// Nothing happened: nothing to record.
	clk.Advance(time.Minute)
	if err := s.Sample(); err != nil {
		t.Fatal(err)
	}
	if n := len(rec.last(t).Series); n != 0 {
		t.Fatalf("an idle minute recorded %d series: %+v", n, rec.last(t).Series)
	}

	// Only the increase counts.
	p.lookups.WithLabelValues("1", "5", "artifact", "hit").Add(2)
	p.served.WithLabelValues("1", "hit").Add(10)
	clk.Advance(time.Minute)
	if err := s.Sample(); err != nil {
		t.Fatal(err)
	}
	wantSeries(t, rec.last(t).Series, map[store.TrafficOf]store.TrafficCounts{
		reg1: {Requests: 2, Hits: 2, ServedBytes: 10, SavedBytes: 10},
		up5:  {Requests: 2, Hits: 2},
	})
}

func TestSamplerCounterReset(t *testing.T) {
	p := newProxyCounters(t)
	clk := testclock.New(time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC))
	rec := &recorder{}
	s := New(Options{Gatherer: p.reg, Store: rec, Now: clk.Now})
	p.lookups.WithLabelValues("1", "5", "artifact", "hit").Add(100)
	p.served.WithLabelValues("1", "hit").Add(1000)
	if err := s.Sample(); err != nil {
		t.Fatal(err)
	}
	// The registry's series are dropped (as the proxy drops a deleted
	// registry's) and counted again from 0: the new values are the counts,
	// never a negative difference.
	p.lookups.Reset()
	p.served.Reset()
	p.lookups.WithLabelValues("1", "5", "artifact", "hit").Add(7)
	p.served.WithLabelValues("1", "hit").Add(70)
	clk.Advance(time.Minute)
	if err := s.Sample(); err != nil {
		t.Fatal(err)
	}
	wantSeries(t, rec.last(t).Series, map[store.TrafficOf]store.TrafficCounts{
		reg1: {Requests: 7, Hits: 7, ServedBytes: 70, SavedBytes: 70},
		up5:  {Requests: 7, Hits: 7},
	})
	// A series gone between two samples is forgotten (the sampler's memory
	// is bounded by the series that exist).
	p.lookups.Reset()
	p.served.Reset()
	clk.Advance(time.Minute)
	if err := s.Sample(); err != nil {
		t.Fatal(err)
	}
	if len(s.prev) != 0 {
		t.Fatalf("the sampler remembers %d series that are gone", len(s.prev))
	}
}

func TestSamplerRecordFailureKeepsCounts(t *testing.T) {
	p := newProxyCounters(t)
	clk := testclock.New(time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC))
	rec := &recorder{}
	var logs strings.Builder
	s := New(Options{Gatherer: p.reg, Store: rec, Now: clk.Now, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	p.lookups.WithLabelValues("1", "5", "artifact", "miss").Add(2)
	// Three failures in a row, then it works: one warning, one line
	// that it works again, and the counts of all four intervals.
	rec.fail = 3
	for range 3 {
		s.tick()
		clk.Advance(time.Minute)
	}
	p.lookups.WithLabelValues("1", "5", "artifact", "miss").Add(3)
	s.tick()
	if got := logs.String(); strings.Count(got, "recording the traffic history failed") != 1 ||
		strings.Count(got, "recording the traffic history works again") != 1 {
		t.Fatalf("logs:\n%s", got)
	}
	if len(rec.samples) != 1 {
		t.Fatalf("%d samples recorded", len(rec.samples))
	}
	wantSeries(t, rec.last(t).Series, map[store.TrafficOf]store.TrafficCounts{
		reg1: {Requests: 5, Misses: 5},
		up5:  {Requests: 5, Misses: 5},
	})
}

// TestSamplerPersistence records through the index: the history outlives
// a restart (a new sampler, a new store on the same data directory), the
// nodes of a cluster are summed, and Stop records the interval in
// progress.
func TestSamplerPersistence(t *testing.T) {
	dir := t.TempDir()
	clk := testclock.New(time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC))
	open := func() *store.Store {
		st, err := boltstore.Open(dir, store.Options{SecretKey: make([]byte, 32), Now: clk.Now})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	start := clk.Now()
	st := open()
	// Two nodes, each its own counters, on one index.
	p1, p2 := newProxyCounters(t), newProxyCounters(t)
	n1 := New(Options{Gatherer: p1.reg, Store: st, Now: clk.Now, Interval: time.Hour})
	n2 := New(Options{Gatherer: p2.reg, Store: st, Now: clk.Now, Interval: time.Hour})
	if n1.Node() == n2.Node() {
		t.Fatal("two samplers drew the same node id")
	}
	p1.lookups.WithLabelValues("1", "5", "artifact", "hit").Add(4)
	p2.lookups.WithLabelValues("1", "5", "artifact", "miss").Add(6)
	clk.Advance(time.Minute)
	for _, s := range []*Sampler{n1, n2} {
		if err := s.Sample(); err != nil {
			t.Fatal(err)
		}
	}
	// Counted after node 1's last sample, recorded by its Stop.
	p1.lookups.WithLabelValues("1", "5", "artifact", "hit").Add(1)
	clk.Advance(30 * time.Second)
	n1.Start()
	n1.Stop()
	n2.Stop()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	// A restart: a new process counts from 0 again.
	st = open()
	defer st.Close()
	p3 := newProxyCounters(t)
	n3 := New(Options{Gatherer: p3.reg, Store: st, Now: clk.Now})
	p3.lookups.WithLabelValues("1", "5", "artifact", "hit").Add(2)
	clk.Advance(30 * time.Second)
	if err := n3.Sample(); err != nil {
		t.Fatal(err)
	}
	all, err := st.Traffic(start, start.Add(2*time.Minute), time.Minute, reg1, up5)
	if err != nil {
		t.Fatal(err)
	}
	got := all[0]
	if all[1][0] != (store.TrafficCounts{Requests: 10, Hits: 4, Misses: 6}) {
		t.Fatalf("the upstream's first minute: %+v", all[1][0])
	}
	want := []store.TrafficCounts{{Requests: 10, Hits: 4, Misses: 6}, {Requests: 3, Hits: 3}}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("history after a restart: %+v, want %+v", got, want)
	}
	hourly, err := st.Traffic(start, start.Add(time.Hour), time.Hour, up5)
	if err != nil {
		t.Fatal(err)
	}
	hours := hourly[0]
	if len(hours) != 1 || hours[0] != (store.TrafficCounts{Requests: 13, Hits: 7, Misses: 6}) {
		t.Fatalf("the hour: %+v", hours)
	}
}

func wantSeries(t *testing.T, got, want map[store.TrafficOf]store.TrafficCounts) {
	t.Helper()
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%c%d: %+v, want %+v", k.Kind, k.ID, got[k], w)
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok && !g.IsZero() {
			t.Errorf("unexpected series %c%d: %+v", k.Kind, k.ID, g)
		}
	}
}
