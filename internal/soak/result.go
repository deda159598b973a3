package soak

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Result is what one soak saw; it is written as JSON by the bench.
type Result struct {
	Duration      float64 `json:"duration_s"` // of the load, as run
	Conns         int     `json:"conns"`
	MissShare     float64 `json:"miss_share"` // as configured
	Window        float64 `json:"window_s"`
	PurgeEvery    float64 `json:"purge_every_s"`
	BacklogMetric string  `json:"backlog_metric"` // "" when the daemon exposes none

	UniqueMisses int64   `json:"unique_misses"`
	MissShareRun float64 `json:"miss_share_measured"` // unique misses / download requests
	Totals       Counts  `json:"totals"`              // warm-up, load and drain
	Warm         Counts  `json:"warm_up"`
	// P99 of the whole load by class (seconds): hit, sidecar_head,
	// metadata, miss, denied, admin_write.
	P99 map[string]float64 `json:"p99_s"`

	Windows []Window `json:"windows"`
	Purges  []Purge  `json:"purges"`
	Drain   Drain    `json:"drain"`

	// RSSFirstHalf is the mean of the RSS samples of the first half of the
	// load after Settle (SettleS); RSSSecondHalf of the second.
	SettleS       float64 `json:"settle_s"`
	RSSFirstHalf  float64 `json:"rss_first_half_mb"`
	RSSSecondHalf float64 `json:"rss_second_half_mb"`
	// The same means of RSS's parts: the process's own memory (anonymous)
	// and the mapped files' pages (the index's mmap), and of the Go heap.
	AnonFirstHalf  float64 `json:"rss_anon_first_half_mb"`
	AnonSecondHalf float64 `json:"rss_anon_second_half_mb"`
	FileFirstHalf  float64 `json:"rss_file_first_half_mb"`
	FileSecondHalf float64 `json:"rss_file_second_half_mb"`
	HeapFirstHalf  float64 `json:"heap_inuse_first_half_mb"`
	HeapSecondHalf float64 `json:"heap_inuse_second_half_mb"`
	BudgetBytes    float64 `json:"budget_bytes"`
	BlobMaxBytes   float64 `json:"blob_max_bytes"`
	// OverBudget counts the samples (one a second) whose blob bytes
	// exceeded the budget plus one fill: what the upstreams brought in
	// the two seconds before (eviction checks every second) plus the
	// largest file.
	OverBudget int `json:"over_budget_samples"`

	UpstreamRequests map[string]int64    `json:"upstream_requests"`
	ProblemCounts    map[string]int      `json:"problem_counts,omitempty"`
	Problems         map[string][]string `json:"problems,omitempty"` // the first examples of each
	Goals            []Goal              `json:"goals"`
	Samples          []Sample            `json:"samples"`
}

// Counts are answers by outcome.
type Counts struct {
	Requests   int64 `json:"requests"` // downloads and admin writes
	S5xx       int64 `json:"status_5xx"`
	S500       int64 `json:"status_500"`
	Wrong      int64 `json:"wrong"`
	Incomplete int64 `json:"incomplete_metadata"`
	Refused    int64 `json:"other_4xx"`
	Errors     int64 `json:"client_errors"` // transport errors, timeouts, failed admin writes
}

func (c *Counts) add(o Counts) {
	c.Requests += o.Requests
	c.S5xx += o.S5xx
	c.S500 += o.S500
	c.Wrong += o.Wrong
	c.Incomplete += o.Incomplete
	c.Refused += o.Refused
	c.Errors += o.Errors
}

func (w *winStats) counts() Counts {
	var c Counts
	for i := range w.req {
		c.Requests += w.req[i].Load()
	}
	c.S5xx, c.S500, c.Wrong = w.s5xx.Load(), w.s500.Load(), w.wrong.Load()
	c.Incomplete, c.Refused, c.Errors = w.incomplete.Load(), w.refused.Load(), w.errors.Load()
	return c
}

// Window is one reporting window (a minute by default).
type Window struct {
	Index int     `json:"index"`
	From  float64 `json:"from_s"`
	To    float64 `json:"to_s"`
	Phase string  `json:"phase"` // load, drain
	Counts
	Misses int64              `json:"unique_misses"`
	P99    map[string]float64 `json:"p99_s"`

	RSSMean  float64 `json:"rss_mean_mb"`
	AnonMean float64 `json:"rss_anon_mean_mb"` // RSS's anonymous part
	FileMean float64 `json:"rss_file_mean_mb"` // RSS's mapped-file part
	HeapMean float64 `json:"heap_inuse_mean_mb"`
	// The index at the window's end, its free part then, and the most
	// any read transaction pinned during the window (MB).
	IndexEnd        float64 `json:"index_end_mb"`
	IndexFreeEnd    float64 `json:"index_free_end_mb"`
	IndexPendingMax float64 `json:"index_pending_max_mb"`
	// CachesEnd is each cache in memory's fill at the window's end (0-1).
	CachesEnd     map[string]float64 `json:"caches_fill_end,omitempty"`
	RSSMax        float64            `json:"rss_max_mb"`
	PendingMax    float64            `json:"pending_max"`
	PendingEnd    float64            `json:"pending_end"`
	BacklogMax    float64            `json:"backlog_max"` // -1: not exposed
	BacklogEnd    float64            `json:"backlog_end"`
	GoroutinesMax float64            `json:"goroutines_max"`
	GoroutinesEnd float64            `json:"goroutines_end"`
	BlobMax       float64            `json:"blob_max_mb"`
	Budget        float64            `json:"budget_mb"`
	OverBudget    int                `json:"over_budget_samples"`
	Destroyed     float64            `json:"destroyed"` // entries the collector destroyed in the window
	Evictions     float64            `json:"evictions"`
}

// Sample is one second's reading of the daemon.
type Sample struct {
	At        float64 `json:"t"` // seconds since the load started
	OK        bool    `json:"ok"`
	RSS       float64 `json:"rss_mb"`
	Anon      float64 `json:"rss_anon_mb"`
	File      float64 `json:"rss_file_mb"`
	HeapInuse float64 `json:"heap_inuse_mb"`
	// Index and its free and pending-free parts, MB.
	Index        float64 `json:"index_mb"`
	IndexFree    float64 `json:"index_free_mb"`
	IndexPending float64 `json:"index_pending_mb"`
	Pending      float64 `json:"pending"`
	Backlog      float64 `json:"backlog"`
	Goroutines   float64 `json:"goroutines"`
	Entries      float64 `json:"entries"`
	BlobBytes    float64 `json:"blob_bytes"`
	InFlight     float64 `json:"fills_in_flight"`
	Fetched      float64 `json:"fetched_bytes_total"`
	Destroyed    float64 `json:"destroyed_total"`
	Evictions    float64 `json:"evictions_total"`
}

// Goal is one of the goals, met or not.
type Goal struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	Unit  string  `json:"unit"`
	Goal  string  `json:"goal"`
	Met   bool    `json:"met"`
}

const mb = 1 << 20

// overBudget marks the samples whose blobs exceed the budget plus one fill.
func overBudget(s []sample) []bool {
	out := make([]bool, len(s))
	for j, x := range s {
		if !x.OK || x.Budget == 0 {
			continue
		}
		prev := x.Fetched
		for k := j - 1; k >= 0 && k >= j-2; k-- {
			if s[k].OK {
				prev = s[k].Fetched
			}
		}
		out[j] = x.BlobBytes > x.Budget+(x.Fetched-prev)+largeMax
	}
	return out
}

// summarize is window i as it stands.
func (r *run) summarize(i int, loadEnd time.Duration) Window {
	r.mu.Lock()
	s := append([]sample(nil), r.samples...)
	r.mu.Unlock()
	ws := r.wins[i]
	from, to := time.Duration(i)*r.cfg.Window, time.Duration(i+1)*r.cfg.Window
	w := Window{Index: i, From: from.Seconds(), To: to.Seconds(), Phase: "load", Counts: ws.counts(),
		Misses: ws.misses.Load(), P99: map[string]float64{}, BacklogMax: -1, BacklogEnd: -1}
	if from >= loadEnd {
		w.Phase = "drain"
	}
	for c := range nClasses {
		if ws.lat[c].n.Load() > 0 {
			w.P99[classNames[c]] = ws.lat[c].quantile(0.99)
		}
	}
	over := overBudget(s)
	var prev *sample
	var rssSum, anonSum, fileSum, heapSum float64
	var nHeap int
	var n int
	for j := range s {
		x := &s[j]
		if x.At < from {
			if x.OK {
				prev = x
			}
			continue
		}
		if x.At >= to {
			break
		}
		if x.RSS > 0 {
			rssSum += float64(x.RSS)
			anonSum += float64(x.Anon)
			fileSum += float64(x.File)
			n++
			w.RSSMax = max(w.RSSMax, float64(x.RSS)/mb)
		}
		if x.OK {
			heapSum += x.HeapInuse
			nHeap++
		}
		if !x.OK {
			continue
		}
		if prev == nil {
			prev = x
		}
		w.PendingMax, w.PendingEnd = max(w.PendingMax, x.Pending), x.Pending
		w.BacklogMax, w.BacklogEnd = max(w.BacklogMax, x.Backlog), x.Backlog
		w.IndexEnd, w.IndexFreeEnd = x.Index/mb, x.IndexFree/mb
		w.CachesEnd = x.Caches
		w.IndexPendingMax = max(w.IndexPendingMax, x.IndexPending/mb)
		w.GoroutinesMax, w.GoroutinesEnd = max(w.GoroutinesMax, x.Goroutines), x.Goroutines
		w.BlobMax, w.Budget = max(w.BlobMax, x.BlobBytes/mb), x.Budget/mb
		w.Destroyed, w.Evictions = x.Destroyed-prev.Destroyed, x.Evictions-prev.Evictions
		if over[j] {
			w.OverBudget++
		}
	}
	if n > 0 {
		w.RSSMean = rssSum / float64(n) / mb
		w.AnonMean, w.FileMean = anonSum/float64(n)/mb, fileSum/float64(n)/mb
	}
	if nHeap > 0 {
		w.HeapMean = heapSum / float64(nHeap) / mb
	}
	return w
}

func windowHeader() string {
	return fmt.Sprintf("%-11s %7s %14s %7s %8s %8s %8s %8s %8s %7s %5s %5s %8s %8s %6s %13s %9s",
		"window", "RSS MB", "anon/file/heap", "req", "hit p99", "side p99", "meta p99", "miss p99", "adm p99",
		"misses", "5xx", "500", "wrong", "pending", "gorout", "blobs/budget", "destroyed")
}

func (w Window) line() string {
	ms := func(c string) string {
		v, ok := w.P99[c]
		if !ok {
			return "-"
		}
		if v >= 1 {
			return fmt.Sprintf("%.2fs", v)
		}
		return fmt.Sprintf("%.1fms", v*1000)
	}
	s := fmt.Sprintf("%4.0f-%4.0fs %7.0f %4.0f/%4.0f/%4.0f %7d %8s %8s %8s %8s %8s %7d %5d %5d %8d %8.0f %6.0f %6.0f/%-6.0f %9.0f",
		w.From, w.To, w.RSSMean, w.AnonMean, w.FileMean, w.HeapMean, w.Requests, ms("hit"), ms("sidecar_head"), ms("metadata"), ms("miss"), ms("admin_write"),
		w.Misses, w.S5xx, w.S500, w.Wrong, w.PendingEnd, w.GoroutinesEnd, w.BlobMax, w.Budget, w.Destroyed)
	if w.BacklogMax >= 0 {
		s += fmt.Sprintf("  backlog max %.0f end %.0f", w.BacklogMax, w.BacklogEnd)
	}
	if w.IndexEnd > 0 {
		s += fmt.Sprintf("  index %.1f MB (free %.1f, pinned max %.1f)", w.IndexEnd, w.IndexFreeEnd, w.IndexPendingMax)
	}
	if len(w.CachesEnd) > 0 {
		s += "  caches"
		for _, name := range slices.Sorted(maps.Keys(w.CachesEnd)) {
			s += fmt.Sprintf(" %s %.0f%%", name, 100*w.CachesEnd[name])
		}
	}
	if w.Phase == "drain" {
		s += "  (after the load)"
	}
	return s
}

// Lines are the window table, the purges and the goals, for printing.
func (res *Result) Lines() []string {
	out := []string{windowHeader()}
	for _, w := range res.Windows {
		out = append(out, w.line())
	}
	for _, p := range res.Purges {
		d := "never"
		if p.DrainedAfter >= 0 {
			d = fmt.Sprintf("%.0fs later", p.DrainedAfter)
		}
		out = append(out, fmt.Sprintf("purge at %4.0fs: %d in %.3fs, %.0f entries live, %.0f pending before, peak %.0f, collected (<= %d pending) %s",
			p.At, p.Status, p.Took, p.EntriesBefore, p.PendingBefore, p.PendingPeak, DrainedPending, d))
	}
	out = append(out, fmt.Sprintf("unique misses %d (%.1f %% of downloads); totals: %d requests, %d 5xx (%d × 500), %d wrong, %d incomplete metadata, %d other 4xx, %d client errors",
		res.UniqueMisses, 100*res.MissShareRun, res.Totals.Requests, res.Totals.S5xx, res.Totals.S500, res.Totals.Wrong,
		res.Totals.Incomplete, res.Totals.Refused, res.Totals.Errors))
	for _, what := range slices.Sorted(maps.Keys(res.ProblemCounts)) {
		n := res.ProblemCounts[what]
		ex := res.Problems[what]
		out = append(out, fmt.Sprintf("%s: %d, e.g. %s", what, n, strings.Join(ex[:min(len(ex), 3)], " | ")))
	}
	for _, g := range res.Goals {
		met := "met"
		if !g.Met {
			met = "NOT MET"
		}
		out = append(out, fmt.Sprintf("goal %-52s %10.3g %-8s %-12s %s", g.Name, g.Value, g.Unit, g.Goal, met))
	}
	return out
}

func (r *run) result(loadEnd time.Duration, drain Drain) *Result {
	c := r.cfg
	res := &Result{Duration: loadEnd.Seconds(), Conns: c.Conns, MissShare: c.MissShare, Window: c.Window.Seconds(),
		PurgeEvery: c.PurgeEvery.Seconds(), BacklogMetric: r.backlog, UniqueMisses: r.misses.Load(),
		Warm: r.warm.counts(), P99: map[string]float64{}, Drain: drain,
		UpstreamRequests: map[string]int64{central: r.w.centralUp.requests.Load(), vendor: r.w.vendUp.requests.Load()}}
	res.Totals = res.Warm
	var whole [nClasses]hist
	var downloads int64
	r.mu.Lock()
	s := append([]sample(nil), r.samples...)
	res.Purges = append([]Purge(nil), r.purges...)
	res.ProblemCounts, res.Problems = r.counts, r.problems
	r.mu.Unlock()
	last := time.Duration(0)
	if len(s) > 0 {
		last = s[len(s)-1].At
	}
	for i := range r.wins {
		from := time.Duration(i) * c.Window
		ws := r.wins[i]
		if from > last && ws.counts().Requests == 0 {
			break
		}
		w := r.summarize(i, loadEnd)
		res.Windows = append(res.Windows, w)
		res.Totals.add(w.Counts)
		for k := range nClasses {
			whole[k].merge(&ws.lat[k])
			if k != cAdmin {
				downloads += ws.req[k].Load()
			}
		}
	}
	for k := range nClasses {
		if whole[k].n.Load() > 0 {
			res.P99[classNames[k]] = whole[k].quantile(0.99)
		}
	}
	if downloads > 0 {
		res.MissShareRun = float64(res.UniqueMisses) / float64(downloads)
	}

	// RSS by half of the load; blobs against the budget.
	over := overBudget(s)
	for _, x := range s {
		res.Samples = append(res.Samples, Sample{At: x.At.Seconds(), OK: x.OK, RSS: float64(x.RSS) / mb,
			Anon: float64(x.Anon) / mb, File: float64(x.File) / mb, HeapInuse: x.HeapInuse / mb,
			Index: x.Index / mb, IndexFree: x.IndexFree / mb, IndexPending: x.IndexPending / mb, Pending: x.Pending,
			Backlog: x.Backlog, Goroutines: x.Goroutines, Entries: x.Entries, BlobBytes: x.BlobBytes, InFlight: x.InFlight,
			Fetched: x.Fetched, Destroyed: x.Destroyed, Evictions: x.Evictions})
	}
	if h, ok := memoryHalves(res.Samples, min(r.cfg.Settle, loadEnd/2), loadEnd); ok {
		res.SettleS = h.settle
		res.RSSFirstHalf, res.RSSSecondHalf = h.first.RSS, h.second.RSS
		res.AnonFirstHalf, res.AnonSecondHalf = h.first.Anon, h.second.Anon
		res.FileFirstHalf, res.FileSecondHalf = h.first.File, h.second.File
		res.HeapFirstHalf, res.HeapSecondHalf = h.first.HeapInuse, h.second.HeapInuse
	}
	for j, x := range s {
		if x.OK {
			res.BudgetBytes = x.Budget
			res.BlobMaxBytes = max(res.BlobMaxBytes, x.BlobBytes)
		}
		if over[j] {
			res.OverBudget++
		}
	}

	// Each purge: how long until its entries were destroyed.
	for i := range res.Purges {
		p := &res.Purges[i]
		for _, x := range s {
			if !x.OK || x.At.Seconds() < p.At {
				continue
			}
			p.PendingPeak = max(p.PendingPeak, x.Pending)
			if x.At.Seconds() >= p.At+p.Took && x.Pending <= DrainedPending {
				p.DrainedAfter = x.At.Seconds() - p.At
				break
			}
		}
		p.Destroyed = p.DrainedAfter >= 0 && p.DrainedAfter <= c.PurgeDeadline.Seconds()
	}
	res.Goals = r.goals(res)
	return res
}

func (r *run) goals(res *Result) []Goal {
	var g []Goal
	ratio := 0.0 // not measured: too few samples (JSON has no NaN)
	if res.RSSFirstHalf > 0 {
		ratio = res.RSSSecondHalf / res.RSSFirstHalf
	}
	name := fmt.Sprintf("RSS, second half / first half (%.0f / %.0f MB)", res.RSSSecondHalf, res.RSSFirstHalf)
	if res.SettleS > 0 {
		name = fmt.Sprintf("RSS after %.0fs, second half / first half (%.0f / %.0f MB)", res.SettleS, res.RSSSecondHalf, res.RSSFirstHalf)
	}
	g = append(g, Goal{Name: name,
		Value: ratio, Unit: "x", Goal: "<= 1.10", Met: ratio > 0 && ratio <= 1.10})
	g = append(g, Goal{Name: "500 answers", Value: float64(res.Totals.S500), Unit: "answers", Goal: "0", Met: res.Totals.S500 == 0})
	g = append(g, Goal{Name: "wrong answers", Value: float64(res.Totals.Wrong), Unit: "answers", Goal: "0", Met: res.Totals.Wrong == 0})
	late := 0
	for _, p := range res.Purges {
		if !p.Destroyed {
			late++
		}
	}
	g = append(g, Goal{Name: fmt.Sprintf("purges not collected within %s (of %d)", r.cfg.PurgeDeadline, len(res.Purges)),
		Value: float64(late), Unit: "purges", Goal: "0", Met: late == 0 && len(res.Purges) > 0})
	g = append(g, Goal{Name: fmt.Sprintf("seconds with blobs > budget + one fill (max %.0f MiB)", res.BlobMaxBytes/mb),
		Value: float64(res.OverBudget), Unit: "s", Goal: "0", Met: res.OverBudget == 0})
	adm := res.P99[classNames[cAdmin]]
	g = append(g, Goal{Name: "admin write p99", Value: adm, Unit: "s", Goal: "< 1 s", Met: adm < 1})
	g = append(g, Goal{Name: "drained after the load", Value: res.Drain.After, Unit: "s", Goal: "drained", Met: res.Drain.OK})
	return g
}

// halves are the mean memory of the samples of the load's two halves after
// settle (MB, as in Sample).
type halves struct {
	settle        float64 // seconds left out at the start
	first, second Sample  // RSS, Anon, File and HeapInuse are means
}

// memoryHalves splits the samples taken from settle to loadEnd (those with
// an RSS reading) in two halves by time and averages each; ok is false
// when either half has no sample.
func memoryHalves(s []Sample, settle, loadEnd time.Duration) (halves, bool) {
	from, mid, end := settle.Seconds(), (settle + (loadEnd-settle)/2).Seconds(), loadEnd.Seconds()
	var h [2]Sample
	var n [2]float64
	for _, x := range s {
		if x.At < from || x.At >= end || x.RSS <= 0 {
			continue
		}
		i := 0
		if x.At >= mid {
			i = 1
		}
		h[i].RSS += x.RSS
		h[i].Anon += x.Anon
		h[i].File += x.File
		h[i].HeapInuse += x.HeapInuse
		n[i]++
	}
	if n[0] == 0 || n[1] == 0 {
		return halves{}, false
	}
	for i := range h {
		h[i].RSS, h[i].Anon, h[i].File, h[i].HeapInuse = h[i].RSS/n[i], h[i].Anon/n[i], h[i].File/n[i], h[i].HeapInuse/n[i]
	}
	return halves{settle: settle.Seconds(), first: h[0], second: h[1]}, true
}
