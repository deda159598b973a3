package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"registryd/config"
	"registryd/internal/soak"
)

// soakOptions are the -soak-* flags.
type soakOptions struct {
	duration, settle, window time.Duration
	purgeEvery               time.Duration
	adminEvery               time.Duration
	conns                    int
	missShare, metaShare     float64
	budget                   string
	rememberedPaths          int
}

func (s *soakOptions) flags() {
	flag.DurationVar(&s.duration, "soak-duration", 10*time.Minute, "soak: length of the load")
	flag.DurationVar(&s.settle, "soak-settle", 0, "soak: start of the load left out of the RSS goal (the caches' ramp)")
	flag.DurationVar(&s.window, "soak-window", time.Minute, "soak: reporting window")
	flag.DurationVar(&s.purgeEvery, "soak-purge-every", time.Minute, "soak: interval of the registry purges")
	flag.DurationVar(&s.adminEvery, "soak-admin-every", 250*time.Millisecond, "soak: interval of the admin writes")
	flag.IntVar(&s.conns, "soak-conns", 64, "soak: load connections")
	flag.Float64Var(&s.metaShare, "soak-meta-share", 0.10, "soak: share of the load's iterations asking for merged metadata")
	flag.Float64Var(&s.missShare, "soak-miss-share", 0.08, "soak: share of the downloads that are unique misses")
	flag.StringVar(&s.budget, "soak-budget", "256MiB", "soak: cache.max_bytes of the soak's daemon")
	flag.IntVar(&s.rememberedPaths, "soak-remembered-paths", 0, "soak: cache.remembered_paths of the soak's daemon (0: its default); small, the negative cache is full early and its fill leaves the RSS goal")
}

// soak) issue 20's soak (internal/soak) against a daemon of its own, with
// a disk budget far below what the misses bring. The Go client is the load
// (wrk cannot check the bodies). The figures are the goals; the
// windows, purges and per-second samples go to the JSON report whole.
func (b *bench) soak() error {
	o := b.o.soak
	if _, err := config.ParseByteSize(o.budget); err != nil {
		return fmt.Errorf("-soak-budget: %w", err)
	}
	d := &daemon{bin: b.bin, dataDir: filepath.Join(b.work, "data-soak"), pprof: b.o.pprof, env: []string{
		"REGISTRYD_CACHE_MAX_BYTES=" + o.budget,
		"REGISTRYD_CACHE_MIN_FREE_FRACTION=0",
		"REGISTRYD_PROXY_ACCESS_LOG_PATH=" + filepath.Join(b.work, "access-soak.log"),
	}}
	if o.rememberedPaths > 0 {
		d.env = append(d.env, fmt.Sprintf("REGISTRYD_CACHE_REMEMBERED_PATHS=%d", o.rememberedPaths))
	}
	if err := d.start(); err != nil {
		return err
	}
	defer d.stop()
	if b.rep.Tools["load"] == "" { // a soak-only run
		b.rep.Tools["load"] = "go client"
		b.rep.Tools["baseline"] = "none"
	}
	logf := func(format string, args ...any) { fmt.Fprintf(os.Stderr, "bench:   "+format+"\n", args...) }
	res, err := soak.Run(soak.Config{
		Duration: o.duration, Settle: o.settle, Conns: o.conns, MissShare: o.missShare, MetaShare: o.metaShare,
		Window: o.window, PurgeEvery: o.purgeEvery, AdminEvery: o.adminEvery,
		Logf: logf,
	}, soak.Target{Proxy: d.Proxy, Admin: d.Admin, RootToken: benchRootToken, PID: d.pid()})
	if err != nil {
		return err
	}
	b.rep.Soak = res
	fmt.Fprintln(os.Stderr, "bench:   soak, whole run:")
	for _, l := range res.Lines() {
		logf("%s", l)
	}
	run := fmt.Sprintf("%s, %d conns, %.1f %% unique misses, budget %s", o.duration, o.conns, 100*res.MissShareRun, o.budget)
	for _, g := range res.Goals {
		b.add(figure{Scenario: "soak", Name: g.Name, Unit: g.Unit, Registryd: g.Value, Better: "lower",
			Goal: g.Goal, Met: met(g.Met), Note: run})
	}
	for _, c := range []string{"hit", "sidecar_head", "metadata", "miss"} {
		b.add(figure{Scenario: "soak", Name: "p99, " + strings.ReplaceAll(c, "_", "/"), Unit: "s", Better: "lower",
			Registryd: res.P99[c], Note: run})
	}
	b.add(figure{Scenario: "soak", Name: "5xx answers", Unit: "answers", Better: "lower", Registryd: float64(res.Totals.S5xx), Note: run})
	return nil
}
