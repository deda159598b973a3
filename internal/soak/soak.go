// Package soak is the sustained-load scenario of issue 20, shared by the
// bench (`make soak`: ten minutes, figures against the goals) and
// the smoke test in itest (30 s under `make test`, no timing assertions).
//
// Against a running registryd it starts two fake upstreams in-process,
// creates a registry that merges their maven-metadata.xml, with allow and
// deny rules, and runs for Config.Duration a closed-loop load on
// Config.Conns keep-alive connections: hits on a hot set, unique misses
// (each followed by its .sha1, as Maven asks), HEADs, merged metadata and
// its .sha1, and files the rules refuse, while an admin loop writes a few
// changes a second and the registry's cache is purged every
// Config.PurgeEvery. Every answer is checked (the bytes are the right
// upstream's for that path, the metadata names its own artifact and
// versions, every checksum matches), every latency recorded by class and
// window, and each second the daemon's RSS and /metrics are sampled. After
// the load it waits for the daemon to drain: nothing pending destruction,
// no fill waiting to be stored or running, blobs within the budget.
package soak

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"registryd/internal/every"
)

// Config is one soak run. Zero fields take the defaults of the issue's
// soak (Defaults).
type Config struct {
	Duration      time.Duration // of the load; default 10m
	Conns         int           // load connections; default 64
	MissShare     float64       // share of all requests that are unique misses; default 0.08
	MetaShare     float64       // of iterations: merged metadata (a fifth of them its .sha1); default 0.10
	HeadShare     float64       // of iterations: HEAD of a hot file; default 0.05
	DeniedShare   float64       // of iterations: a file the rules refuse; default 0.01
	HotFiles      int           // default 2000
	MetaArtifacts int           // artifacts with merged metadata; default 100
	// Settle is the start of the load left out of the RSS goal's halves:
	// the daemon's bounded caches (entry views, path marks, verdicts,
	// small blobs) fill for minutes at the soak's miss rate, and that
	// ramp is not growth. Default 0: the halves cover the whole load.
	Settle         time.Duration
	Window         time.Duration // reporting window; default 1m
	PurgeEvery     time.Duration // default 1m
	PurgeDeadline  time.Duration // a purge's entries must be destroyed within; default 1m
	AdminEvery     time.Duration // one admin write each; default 250ms
	RequestTimeout time.Duration // client timeout of one request; default 60s
	DrainTimeout   time.Duration // safety net of the wait for the drain after the load; default 2m
	// Logf prints progress (a line per window); nil prints nothing.
	Logf func(format string, args ...any)
	// Secret is told every credential the soak creates (the itest checks
	// that none reaches the daemon's logs); nil ignores them.
	Secret func(what, value string)
}

// Defaults fills the zero fields of c.
func (c Config) Defaults() Config {
	orDefault(&c.Duration, 10*time.Minute)
	orDefault(&c.Window, time.Minute)
	orDefault(&c.PurgeEvery, time.Minute)
	orDefault(&c.PurgeDeadline, time.Minute)
	orDefault(&c.AdminEvery, 250*time.Millisecond)
	orDefault(&c.RequestTimeout, time.Minute)
	orDefault(&c.DrainTimeout, 2*time.Minute)
	orDefault(&c.Conns, 64)
	orDefault(&c.MissShare, 0.08)
	orDefault(&c.MetaShare, 0.10)
	orDefault(&c.HeadShare, 0.05)
	orDefault(&c.DeniedShare, 0.01)
	orDefault(&c.HotFiles, 2000)
	orDefault(&c.MetaArtifacts, 100)
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
	if c.Secret == nil {
		c.Secret = func(string, string) {}
	}
	return c
}

func orDefault[T comparable](v *T, d T) {
	var zero T
	if *v == zero {
		*v = d
	}
}

// Target is the running daemon.
type Target struct {
	Proxy, Admin string // base URLs, http://host:port
	RootToken    string
	PID          int // for its RSS
}

// deniedFiles is how many distinct refused paths the load asks for: few,
// so that the audit events of refusals (one per file and caller every
// 10 minutes) stay a handful; their flood is another test's attack.
const deniedFiles = 100

// run is the state of one soak.
type run struct {
	cfg     Config
	t       Target
	api     *api
	w       world
	chk     *checker
	client  *http.Client
	start   time.Time
	tag     string // makes this run's miss paths its own
	misses  atomic.Int64
	wins    []*winStats
	warm    *winStats
	backlog string

	mu       sync.Mutex
	samples  []sample
	purges   []Purge
	problems map[string][]string
	counts   map[string]int
}

// winStats counts the answers of one window (by the requests' start).
type winStats struct {
	lat                                    [nClasses]hist
	req                                    [nClasses]atomic.Int64
	s5xx, s500, wrong, incomplete, refused atomic.Int64
	errors, misses                         atomic.Int64
}

// Run runs one soak against t and returns what it saw. An error means the
// soak could not be set up; everything the daemon did wrong is in the
// Result.
func Run(cfg Config, t Target) (*Result, error) {
	cfg = cfg.Defaults()
	r := &run{cfg: cfg, t: t, chk: newChecker(), problems: map[string][]string{}, counts: map[string]int{},
		tag: strconv.FormatInt(time.Now().UnixNano()%1e6, 36) + "n"}
	r.api = &api{base: t.Admin, token: t.RootToken, timeout: cfg.RequestTimeout,
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}}
	r.client = &http.Client{Transport: &http.Transport{
		MaxIdleConns: cfg.Conns, MaxIdleConnsPerHost: cfg.Conns, MaxConnsPerHost: cfg.Conns,
		DisableCompression: true, IdleConnTimeout: time.Minute,
	}}
	defer r.client.CloseIdleConnections()
	r.w.centralUp, r.w.vendUp = startUpstream(central), startUpstream(vendor)
	defer r.w.centralUp.close()
	defer r.w.vendUp.close()
	if err := setup(r.api, &r.w, cfg.Secret); err != nil {
		return nil, fmt.Errorf("soak set-up: %w", err)
	}
	r.backlog = mPendingStores

	cfg.Logf("soak: warming %d hot files and %d metadata documents", cfg.HotFiles, cfg.MetaArtifacts)
	r.warm = &winStats{}
	r.warmUp()

	n := int(math.Ceil(float64(cfg.Duration+cfg.DrainTimeout+cfg.RequestTimeout)/float64(cfg.Window))) + 2
	r.wins = make([]*winStats, n)
	for i := range r.wins {
		r.wins[i] = &winStats{}
	}
	cfg.Logf("soak: %s of load on %d connections; a window is %s", cfg.Duration, cfg.Conns, cfg.Window)
	cfg.Logf("soak: %s", windowHeader())
	r.start = time.Now()
	samplerDone := make(chan struct{})
	stopSampler := make(chan struct{})
	fresh := make(chan sample, 1)
	go r.sampler(stopSampler, samplerDone, fresh)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < cfg.Conns; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			r.worker(i, stop)
		}(i)
	}
	var side sync.WaitGroup
	side.Add(2)
	go func() { defer side.Done(); r.adminLoop(stop) }()
	go func() { defer side.Done(); r.purgeLoop(stop) }()
	time.Sleep(cfg.Duration)
	close(stop)
	wg.Wait()
	side.Wait()
	loadEnd := time.Since(r.start)

	drain := r.drain(loadEnd, fresh)
	close(stopSampler)
	<-samplerDone
	return r.result(loadEnd, drain), nil
}

// warmUp asks once for every hot file and metadata document, 16 at a
// time, checking each answer, before the clock starts.
func (r *run) warmUp() {
	jobs := make(chan func(), 64)
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				j()
			}
		}()
	}
	for i := 0; i < r.cfg.HotFiles; i++ {
		jobs <- func() { r.do(r.warm, kHit, hotPath(i), new(bytes.Buffer)) }
	}
	for k := 0; k < r.cfg.MetaArtifacts; k++ {
		jobs <- func() { r.do(r.warm, kMeta, metaPath(k), new(bytes.Buffer)) }
	}
	close(jobs)
	wg.Wait()
}

func (r *run) window(at time.Time) *winStats {
	i := int(at.Sub(r.start) / r.cfg.Window)
	return r.wins[min(max(i, 0), len(r.wins)-1)]
}

// worker is one connection's closed loop.
func (r *run) worker(i int, stop <-chan struct{}) {
	rng := rand.New(rand.NewPCG(uint64(i)+1, uint64(time.Now().UnixNano())))
	c := r.cfg
	// A miss is two requests (the jar, then its .sha1): pMiss of the
	// iterations makes MissShare of the requests.
	pMiss := c.MissShare / (1 - c.MissShare)
	var buf bytes.Buffer
	for {
		select {
		case <-stop:
			return
		default:
		}
		x := rng.Float64() * (1 + pMiss)
		switch {
		case x < pMiss:
			p := missPath(r.tag, r.misses.Add(1))
			r.window(time.Now()).misses.Add(1)
			if r.do(nil, kMiss, p, &buf) {
				r.do(nil, kSidecar, p+".sha1", &buf)
			}
		case x < pMiss+c.MetaShare:
			p := metaPath(rng.IntN(c.MetaArtifacts))
			if rng.IntN(5) == 0 {
				r.do(nil, kMetaSidecar, p+".sha1", &buf)
			} else {
				r.do(nil, kMeta, p, &buf)
			}
		case x < pMiss+c.MetaShare+c.HeadShare:
			r.do(nil, kHead, hotPath(rng.IntN(c.HotFiles)), &buf)
		case x < pMiss+c.MetaShare+c.HeadShare+c.DeniedShare:
			r.do(nil, kDenied, deniedPath(rng.IntN(deniedFiles)), &buf)
		default:
			r.do(nil, kHit, hotPath(rng.IntN(c.HotFiles)), &buf)
		}
	}
}

// do sends one download request, checks and counts its answer in ws (the
// window of its start when nil), and says whether it was a 200.
func (r *run) do(ws *winStats, k kind, path string, buf *bytes.Buffer) bool {
	method := http.MethodGet
	if k == kHead {
		method = http.MethodHead
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.RequestTimeout)
	defer cancel()
	url := fmt.Sprintf("%s/api/v4/virtual_registries/packages/maven/%d/%s", r.t.Proxy, r.w.registry, path)
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		panic(err) // the soak's own paths
	}
	req.Header.Set("Authorization", r.w.basicAuth)
	start := time.Now()
	if ws == nil {
		ws = r.window(start)
	}
	ws.req[k.class()].Add(1)
	res, err := r.client.Do(req)
	if err == nil {
		buf.Reset()
		_, err = buf.ReadFrom(io.LimitReader(res.Body, 4<<20))
		res.Body.Close()
	}
	ws.lat[k.class()].add(time.Since(start))
	if err != nil {
		ws.errors.Add(1)
		r.problem("client error", fmt.Sprintf("%s %s: %v", method, path, err))
		return false
	}
	v, why := r.chk.check(k, path, res.StatusCode, res.Header, buf.Bytes())
	switch v {
	case vWrong:
		ws.wrong.Add(1)
		r.problem("wrong answer", why)
	case vIncomplete:
		ws.incomplete.Add(1)
		r.problem("incomplete metadata", why)
	case v5xx:
		ws.s5xx.Add(1)
		if res.StatusCode == http.StatusInternalServerError {
			ws.s500.Add(1)
		}
		r.problem("5xx", why+": "+truncate(buf.String()))
	case vRefused:
		ws.refused.Add(1)
		r.problem("other 4xx", why+": "+truncate(buf.String()))
	}
	return res.StatusCode == http.StatusOK
}

// problem keeps the first examples of each kind of failure, and counts all.
func (r *run) problem(what, detail string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.counts[what]++
	if len(r.problems[what]) < 10 {
		r.problems[what] = append(r.problems[what], detail)
	}
}

// admin times and counts one admin request started at start: a 5xx in the
// 5xx counts, any other failure as a client error.
func (r *run) admin(start time.Time, status int, err error, what string) {
	ws := r.window(start)
	ws.req[cAdmin].Add(1)
	ws.lat[cAdmin].add(time.Since(start))
	switch {
	case status >= 500:
		ws.s5xx.Add(1)
		if status == http.StatusInternalServerError {
			ws.s500.Add(1)
		}
		r.problem("5xx", err.Error())
	case err != nil:
		ws.errors.Add(1)
		r.problem(what, err.Error())
	}
}

// adminLoop sends one admin write every AdminEvery until stop.
func (r *run) adminLoop(stop <-chan struct{}) {
	c := &churn{a: r.api, w: &r.w, secret: r.cfg.Secret}
	every.Tick(stop, r.cfg.AdminEvery, func() {
		start := time.Now()
		status, err := c.next()
		r.admin(start, status, err, "admin write failed")
	})
}

// Purge is one purge of the registry's cache during the run.
type Purge struct {
	At            float64 `json:"at_s"`            // since the load started
	Took          float64 `json:"took_s"`          // the DELETE's answer time
	Status        int     `json:"status"`          // its status
	EntriesBefore float64 `json:"entries_before"`  // live entries at the last sample before it
	PendingBefore float64 `json:"pending_before"`  // entries pending destruction then
	PendingPeak   float64 `json:"pending_peak"`    // the most pending seen after it, until drained
	DrainedAfter  float64 `json:"drained_after_s"` // from the purge until pending <= DrainedPending; -1 never
	Destroyed     bool    `json:"destroyed_within_deadline"`
}

// DrainedPending is the number of entries pending destruction at or below
// which a purge counts as collected: two eviction batches (512 each), which
// a daemon evicting under load may hold at any moment.
const DrainedPending = 1024

func (r *run) purgeLoop(stop <-chan struct{}) {
	every.Tick(stop, r.cfg.PurgeEvery, func() {
		r.mu.Lock()
		var before sample
		if n := len(r.samples); n > 0 {
			before = r.samples[n-1]
		}
		r.mu.Unlock()
		start := time.Now()
		status, err := purge(r.api, &r.w)
		p := Purge{At: start.Sub(r.start).Seconds(), Took: time.Since(start).Seconds(), Status: status,
			EntriesBefore: before.Entries, PendingBefore: before.Pending, DrainedAfter: -1}
		r.admin(start, status, err, "purge failed")
		r.mu.Lock()
		r.purges = append(r.purges, p)
		r.mu.Unlock()
		r.cfg.Logf("soak:   purge at %.0fs answered %d in %.3fs (%.0f entries live, %.0f pending before)",
			p.At, status, p.Took, p.EntriesBefore, p.PendingBefore)
	})
}

// sampler reads RSS and /metrics every second, prints each window's line
// as it closes, and offers each sample on fresh (for the drain). A printed
// line lacks the requests of its window still running at its end (they
// count when they end): the Result's table is the exact one.
func (r *run) sampler(stop <-chan struct{}, done chan<- struct{}, fresh chan sample) {
	defer close(done)
	printed := 0
	every.Tick(stop, time.Second, func() {
		s := r.sampleNow()
		r.mu.Lock()
		r.samples = append(r.samples, s)
		r.mu.Unlock()
		select { // only the latest matters
		case <-fresh:
		default:
		}
		fresh <- s
		for ; time.Duration(printed+1)*r.cfg.Window <= s.At && printed < len(r.wins); printed++ {
			w := r.summarize(printed, r.cfg.Duration)
			r.cfg.Logf("soak: %s", w.line())
		}
	})
}

func (r *run) sampleNow() sample {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	mem := ReadMemory(r.t.PID)
	s := sample{At: time.Since(r.start), RSS: mem.RSS, Anon: mem.Anon, File: mem.File, Backlog: -1}
	m, err := scrape(ctx, r.api.client, r.t.Admin+"/metrics")
	if err != nil {
		r.problem("metrics scrape failed", err.Error())
		return s
	}
	s.OK = true
	s.HeapInuse = m[mHeapInuse]
	s.Index, s.IndexFree, s.IndexPending = m[mIndexBytes], m[mIndexFree], m[mIndexPending]
	s.Caches = cacheFill(m)
	s.Pending, s.Entries, s.BlobBytes, s.Budget = m[mPending], m[mEntries], m[mBlobBytes], m[mBudget]
	s.Destroyed, s.Fetched, s.InFlight, s.Evictions, s.Goroutines = m[mDestroyed], m[mFetched], m[mInFlight], m[mEvictions], m[mGoroutines]
	if r.backlog != "" {
		if v, ok := m[r.backlog]; ok {
			s.Backlog = v
		}
	}
	return s
}

// Drain is how the daemon settled after the load.
type Drain struct {
	OK        bool    `json:"ok"`
	After     float64 `json:"after_s"` // from the end of the load until drained (or the deadline)
	Pending   float64 `json:"pending"`
	Backlog   float64 `json:"backlog"` // -1: not exposed
	InFlight  float64 `json:"fills_in_flight"`
	BlobBytes float64 `json:"blob_bytes"`
	Budget    float64 `json:"budget_bytes"`
}

func (d Drain) done() bool {
	return d.Pending == 0 && d.Backlog <= 0 && d.InFlight == 0 && (d.Budget == 0 || d.BlobBytes <= d.Budget)
}

// drain waits, reading the sampler's samples, until nothing is pending
// destruction, no fill waits to be stored or runs, and the blobs are within
// the budget. DrainTimeout is a safety net: a daemon that never drains
// fails there.
func (r *run) drain(loadEnd time.Duration, fresh <-chan sample) Drain {
	deadline := time.After(r.cfg.DrainTimeout)
	var d Drain
	for {
		select {
		case s := <-fresh:
			d = Drain{After: (s.At - loadEnd).Seconds(), Pending: s.Pending, Backlog: s.Backlog, InFlight: s.InFlight,
				BlobBytes: s.BlobBytes, Budget: s.Budget}
			if s.OK && d.done() {
				d.OK = true
				r.cfg.Logf("soak: drained %.1fs after the load", d.After)
				return d
			}
		case <-deadline:
			r.cfg.Logf("soak: NOT drained %.0fs after the load: %.0f pending destruction, backlog %.0f, %.0f fills in flight, blobs %.1f MiB of a %.1f MiB budget",
				d.After, d.Pending, d.Backlog, d.InFlight, d.BlobBytes/(1<<20), d.Budget/(1<<20))
			return d
		}
	}
}
