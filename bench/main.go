// Command bench measures registryd head to head against the fastest thing a
// user could put in front of their builds instead: nginx serving the same
// files from disk, and nginx's caching proxy (proxy_cache with
// proxy_cache_lock). Every figure is a median of rounds that alternate
// registryd and the baseline in the same run, reported as a ratio: these
// machines are shared and noisy, so an absolute number means little.
//
//	go run ./bench [-rounds 3] [-duration 5s] [-only a,b,c] [-out bench/out/latest.json]
//	go run ./bench -only soak [-soak-duration 10m]   # issue 20's soak, not part of the default run
//	go run ./bench -quick   # every scenario once, short and small: a smoke test (make test runs it)
//
// It installs nothing: without nginx the baseline is a Go static server and
// the proxy_cache comparisons are skipped; without wrk the load comes from a
// built-in Go client. It says what it skipped.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"registryd/internal/soak"
)

type options struct {
	rounds   int
	duration time.Duration
	only     map[string]bool
	out      string
	keep     bool
	scaleN   int
	purgeN   int
	pprof    string
	quick    bool
	soak     soakOptions
}

func main() {
	var o options
	var only string
	flag.IntVar(&o.rounds, "rounds", 3, "alternating rounds per comparison (medians are reported)")
	flag.DurationVar(&o.duration, "duration", 5*time.Second, "length of one load run")
	flag.StringVar(&only, "only", "", "comma-separated scenarios to run (a..h, k, purge, soak); default all but soak")
	flag.StringVar(&o.out, "out", "bench/out/latest.json", "where to write the JSON results")
	flag.BoolVar(&o.keep, "keep", false, "keep the work directory")
	flag.IntVar(&o.scaleN, "scale-entries", 1_000_000, "cache entries for the scale scenario")
	flag.IntVar(&o.purgeN, "purge-entries", 100_000, "cache entries (each with its own blob) purged in the purge scenario")
	flag.StringVar(&o.pprof, "pprof", "", "serve registryd's pprof on this address (for profiling a scenario)")
	flag.BoolVar(&o.quick, "quick", false, "smoke test: one round of 1s runs, 8 MB large artifact, 20k scale and 5k purge entries (flags given explicitly win); figures mean little")
	o.soak.flags()
	flag.Parse()
	if o.quick {
		quick(&o)
	}
	if only != "" {
		o.only = map[string]bool{}
		for _, s := range strings.Split(only, ",") {
			o.only[strings.TrimSpace(s)] = true
		}
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// quick shrinks every scenario to a smoke test of itself, leaving alone
// what the command line set explicitly. It exists so that `make test`
// catches a broken bench (a scenario that errors is a failed run) in about
// a minute; its figures are not measurements.
func quick(o *options) {
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if !set["rounds"] {
		o.rounds = 1
	}
	if !set["duration"] {
		o.duration = time.Second
	}
	if !set["scale-entries"] {
		o.scaleN = 20_000
	}
	if !set["purge-entries"] {
		o.purgeN = 5_000
	}
	if !set["out"] {
		o.out = "bench/out/quick.json"
	}
	bigSize = 8 << 20
}

// figure is one comparison. Ratio is registryd / baseline (of the medians,
// unless the scenario says otherwise in Note); Better says which
// direction wins ("higher" for rates, "lower" for times and sizes).
type figure struct {
	Scenario  string    `json:"scenario"`
	Name      string    `json:"name"`
	Unit      string    `json:"unit"`
	Registryd float64   `json:"registryd"`
	Baseline  float64   `json:"baseline,omitempty"`
	Against   string    `json:"against,omitempty"`
	Ratio     float64   `json:"ratio,omitempty"`
	Better    string    `json:"better"`
	Goal      string    `json:"goal,omitempty"`
	Met       *bool     `json:"met,omitempty"`
	Samples   []float64 `json:"samples_registryd,omitempty"`
	BSamples  []float64 `json:"samples_baseline,omitempty"`
	Note      string    `json:"note,omitempty"`
}

type report struct {
	When    time.Time         `json:"when"`
	Machine map[string]string `json:"machine"`
	Tools   map[string]string `json:"tools"`
	Skipped []string          `json:"skipped,omitempty"`
	// Failed are the scenarios that ended with an error, and the error.
	Failed  []string `json:"failed,omitempty"`
	Figures []figure `json:"figures"`
	// Soak is the soak's whole record: windows, purges, samples.
	Soak *soak.Result `json:"soak,omitempty"`
}

// bench is the state shared by the scenarios.
type bench struct {
	o      options
	bin    string // the registryd binary
	work   string
	root   string // origin document root
	origin *origin
	reg    *daemon
	load   *loader
	rep    *report
}

func run(o options) error {
	work, err := os.MkdirTemp("", "registryd-bench-")
	if err != nil {
		return err
	}
	if err := os.Chmod(work, 0o755); err != nil {
		return err
	}
	if !o.keep {
		defer os.RemoveAll(work)
	}
	b := &bench{o: o, work: work, root: filepath.Join(work, "origin"), rep: &report{
		When: time.Now().UTC(), Machine: machine(), Tools: map[string]string{},
	}}
	scenarios := []struct {
		id  string
		fn  func() error
		doc string
		// own: the scenario starts its own daemon and upstreams, so the
		// shared origin, load tools and daemon are not needed for it;
		// optIn: it runs only when -only names it.
		own, optIn bool
	}{
		{"a", b.smallHits, "cache-hit requests/s, random 1 KB artifacts out of 1,000, 32 connections", false, false},
		{"b", b.bigHits, "cache-hit throughput of a 64 MB artifact, 1 and 4 connections", false, false},
		{"c", b.coldMiss, "cold miss of a 64 MB artifact: total time and time to first byte", false, false},
		{"d", b.herds, "herds of 32 and 256 cold requests for one file (1 KB and 64 MB)", false, false},
		{"e", b.peakMemory, "peak RSS while 50 clients download the 64 MB artifact", false, false},
		{"g", b.replay, "replay of a Maven build's request mix against nginx proxy_cache", false, false},
		{"h", b.accessLogCost, "cache-hit requests/s with the access log on (to a file) vs off", false, false},
		{"purge", b.purge, "hit latency while a registry of 100k entries is purged and collected", false, false},
		{"f", b.scale, "1M cache entries: hit rate, start-up, searches", false, false},
		{"k", b.cluster, "cluster (PostgreSQL + MinIO, two nodes): hit of a file filled on another node, cross-node miss", false, false},
		{"soak", b.soak, "issue 20's soak: misses, merged metadata, rules, admin writes and purges under sustained load", true, true},
	}
	selected := scenarios[:0:0]
	shared := false
	for _, s := range scenarios {
		if (b.o.only == nil && !s.optIn) || b.o.only[s.id] {
			selected = append(selected, s)
			shared = shared || !s.own
		}
	}
	fmt.Fprintln(os.Stderr, "bench: building registryd")
	if b.bin, err = buildRegistryd(work); err != nil {
		return err
	}
	if shared {
		if err := b.startShared(); err != nil {
			return err
		}
		defer b.origin.stop()
		defer func() { b.reg.stop() }()
	}
	// A scenario that fails is reported and the others still run: one
	// broken figure must not cost the whole run's.
	var failed []string
	for _, s := range selected {
		fmt.Fprintf(os.Stderr, "bench: %s) %s\n", s.id, s.doc)
		if err := s.fn(); err != nil {
			fmt.Fprintf(os.Stderr, "bench: scenario %s failed: %v\n", s.id, err)
			b.rep.Failed = append(b.rep.Failed, fmt.Sprintf("%s: %v", s.id, err))
			failed = append(failed, s.id)
		}
	}
	b.print()
	if err := os.MkdirAll(filepath.Dir(o.out), 0o755); err != nil {
		return err
	}
	raw, _ := json.MarshalIndent(b.rep, "", "  ")
	if err := os.WriteFile(o.out, append(raw, '\n'), 0o644); err != nil {
		return err
	}
	if len(failed) > 0 {
		return fmt.Errorf("scenarios failed: %s", strings.Join(failed, ", "))
	}
	return nil
}

// startShared writes the origin files, starts the origin (nginx or a Go
// server) and the daemon the classic scenarios share.
func (b *bench) startShared() error {
	_, nginxErr := exec.LookPath("nginx")
	_, wrkErr := exec.LookPath("wrk")
	if nginxErr != nil {
		b.skip("nginx is not installed: the baseline is a Go static server, and the proxy_cache comparisons (d, g) are skipped (apt-get install nginx)")
	}
	if wrkErr != nil {
		b.skip("wrk is not installed: load comes from the built-in Go client (apt-get install wrk)")
	}
	b.rep.Tools["baseline"] = map[bool]string{true: "nginx", false: "go static server"}[nginxErr == nil]
	b.rep.Tools["load"] = map[bool]string{true: "wrk -t1", false: "go client"}[wrkErr == nil]

	fmt.Fprintln(os.Stderr, "bench: writing the origin files")
	if err := b.makeOrigin(); err != nil {
		return err
	}
	var err error
	if b.origin, err = startOrigin(b.root, b.work, nginxErr == nil); err != nil {
		return err
	}
	if b.load, err = newLoader(b.work, wrkErr == nil); err != nil {
		b.origin.stop()
		return err
	}
	fmt.Fprintln(os.Stderr, "bench: starting registryd")
	// The access log goes to a file on disk, as in production, not through
	// the pipe the bench reads the start line from.
	b.reg = &daemon{bin: b.bin, dataDir: filepath.Join(b.work, "data"), pprof: b.o.pprof,
		env: []string{"REGISTRYD_PROXY_ACCESS_LOG_PATH=" + filepath.Join(b.work, "access.log")}}
	if err := b.reg.start(); err != nil {
		b.origin.stop()
		return err
	}
	if err := b.reg.setup(b.origin.URL); err != nil {
		b.reg.stop()
		b.origin.stop()
		return err
	}
	return nil
}

func (b *bench) skip(why string) {
	b.rep.Skipped = append(b.rep.Skipped, why)
	fmt.Fprintln(os.Stderr, "bench: skipped:", why)
}

func (b *bench) add(f figure) {
	// A scenario may set its own ratio (h: the median of paired ratios).
	if f.Baseline != 0 && f.Ratio == 0 {
		f.Ratio = f.Registryd / f.Baseline
	}
	b.rep.Figures = append(b.rep.Figures, f)
	fmt.Fprintf(os.Stderr, "bench:   %-52s %s\n", f.Name, f.line())
}

func (f figure) line() string {
	s := fmt.Sprintf("%12s %s", fmtNum(f.Registryd), f.Unit)
	if f.Baseline != 0 {
		s += fmt.Sprintf("  vs %s %s  ratio %.2f", f.Against, fmtNum(f.Baseline), f.Ratio)
	}
	if f.Goal != "" {
		met := "MET"
		if f.Met != nil && !*f.Met {
			met = "NOT MET"
		}
		s += fmt.Sprintf("  goal %s: %s", f.Goal, met)
	}
	return s
}

func fmtNum(v float64) string {
	switch {
	case v >= 1e9:
		return fmt.Sprintf("%.2fG", v/1e9)
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.1fk", v/1e3)
	}
	return fmt.Sprintf("%.3g", v)
}

func (b *bench) print() {
	fmt.Println()
	fmt.Printf("registryd bench, %s, %s, %s cores, baseline %s, load %s\n",
		b.rep.When.Format(time.RFC3339), b.rep.Machine["cpu"], b.rep.Machine["cores"], b.rep.Tools["baseline"], b.rep.Tools["load"])
	fmt.Printf("%-3s %-55s %14s %14s %8s  %s\n", "", "figure", "registryd", "baseline", "ratio", "goal")
	for _, f := range b.rep.Figures {
		base, ratio := "", ""
		if f.Baseline != 0 {
			base = fmtNum(f.Baseline)
			ratio = fmt.Sprintf("%.2f", f.Ratio)
		}
		goal := f.Goal
		if f.Met != nil {
			goal += map[bool]string{true: " met", false: " NOT met"}[*f.Met]
		}
		fmt.Printf("%-3s %-55s %14s %14s %8s  %s\n", f.Scenario, f.Name+" ("+f.Unit+")", fmtNum(f.Registryd), base, ratio, goal)
	}
	for _, s := range b.rep.Skipped {
		fmt.Println("skipped:", s)
	}
	for _, s := range b.rep.Failed {
		fmt.Println("FAILED:", s)
	}
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

func met(ok bool) *bool { return &ok }

func machine() map[string]string {
	m := map[string]string{
		"cores": fmt.Sprint(runtime.NumCPU()),
		"os":    runtime.GOOS + "/" + runtime.GOARCH,
		"go":    runtime.Version(),
	}
	if raw, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(raw), "\n") {
			if strings.HasPrefix(line, "model name") {
				if _, v, ok := strings.Cut(line, ":"); ok {
					m["cpu"] = strings.TrimSpace(v)
					break
				}
			}
		}
	}
	if raw, err := os.ReadFile("/proc/meminfo"); err == nil {
		if line, _, ok := strings.Cut(string(raw), "\n"); ok {
			m["memory"] = strings.Join(strings.Fields(line)[1:], " ")
		}
	}
	if h, err := os.Hostname(); err == nil {
		m["host"] = h
	}
	return m
}
