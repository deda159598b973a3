package itest

import (
	"path/filepath"
	"testing"
	"time"

	"registryd/internal/soak"
)

// TestSoakSmoke is the 30-second version of the soak of issue 20
// (internal/soak; the ten-minute run with its timing goals is `make soak`):
// the real daemon with a disk budget far below what the load brings, two
// fake upstreams whose maven-metadata.xml it merges, allow and deny rules,
// a closed-loop load of hits, unique misses with their .sha1, HEADs, merged
// metadata and refused files, admin writes a few times a second (upstream
// and registry edits, tokens created and revoked, a rule rewritten, the
// upstreams' positions swapped) and a purge of the registry every 10 s.
//
// It asserts what holds on any machine, however slow: no 500, no wrong
// answer (every body, checksum and metadata document is checked against
// what the upstreams serve), and after the load the daemon drains: nothing
// left pending destruction, no fill waiting to be stored or running, blobs
// within the budget. The drain is polled until it holds; the deadline is a
// safety net for a daemon that never gets there. No latency is asserted.
func TestSoakSmoke(t *testing.T) {
	const budget = 2 << 20
	d := Start(t, map[string]string{
		"REGISTRYD_CACHE_MAX_BYTES":         "2MiB",
		"REGISTRYD_CACHE_MIN_FREE_FRACTION": "0",
		// As in production, the access log goes to a file: at debug level
		// on stdout it would be held in the harness's memory.
		"REGISTRYD_PROXY_ACCESS_LOG_PATH": filepath.Join(t.TempDir(), "access.log"),
	})
	// A race-enabled daemon is several times slower: fewer connections
	// keep a loaded 2-core machine from timing requests out, while still
	// running fills, purges and admin writes concurrently.
	conns := 16
	if raceEnabled {
		conns = 4
	}
	res, err := soak.Run(soak.Config{
		Duration: 30 * time.Second, Conns: conns, Window: 10 * time.Second, PurgeEvery: 10 * time.Second,
		// 300 hot files are about 2.5 MB: the warm-up alone passes the
		// budget, so eviction runs whatever the machine's speed.
		HotFiles: 300,
		// An admin write every 0.1 s and a third of the load on 20
		// metadata documents, as in the reproduction of answers
		// naming another artifact (main before the fix: a1 and a2
		// swapped within 30 s).
		MetaArtifacts: 20, MetaShare: 0.3, AdminEvery: 100 * time.Millisecond,
		RequestTimeout: 2 * time.Minute, DrainTimeout: 3 * time.Minute,
		Logf:   t.Logf,
		Secret: func(what, value string) { registerSecret(what, value) },
	}, soak.Target{Proxy: d.Proxy, Admin: d.Admin, RootToken: rootToken, PID: d.cmd.Process.Pid})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range res.Lines() {
		t.Log(l)
	}
	if n := len(res.Samples); n == 0 || res.Samples[n-1].Fetched <= budget {
		t.Fatalf("the upstreams sent no more than the %d-byte budget: the run tested no eviction", budget)
	}
	if res.BudgetBytes != budget {
		t.Errorf("registryd_cache_budget_bytes %.0f, want %d", res.BudgetBytes, budget)
	}
	if res.Totals.S500 != 0 {
		t.Errorf("%d answers were 500: %q", res.Totals.S500, res.Problems["5xx"])
	}
	if res.Totals.Wrong != 0 {
		t.Errorf("%d wrong answers: %q", res.Totals.Wrong, res.Problems["wrong answer"])
	}
	dr := res.Drain
	if dr.Pending != 0 {
		t.Errorf("%.0f cache entries still pending destruction %.0fs after the load", dr.Pending, dr.After)
	}
	if dr.Backlog > 0 {
		t.Errorf("%.0f fills still waiting to be stored (%s) %.0fs after the load", dr.Backlog, res.BacklogMetric, dr.After)
	}
	if dr.InFlight != 0 {
		t.Errorf("%.0f fills still in flight %.0fs after the load", dr.InFlight, dr.After)
	}
	if dr.BlobBytes > dr.Budget {
		t.Errorf("blobs take %.0f bytes %.0fs after the load, over the %.0f-byte budget", dr.BlobBytes, dr.After, dr.Budget)
	}
}
