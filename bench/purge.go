package main

import (
	"bufio"
	"context"
	"crypto/md5"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"registryd/config"
	"registryd/internal/boltstore"
	"registryd/store"
)

// purge) purges and collection under hit load. A second registry, with an
// upstream of its own, holds -purge-entries entries, each with its own small
// blob (seeded into the store and the blob directory directly, as the scale
// scenario seeds its index). The load is hits on the 1,000 small files of the
// bench registry, 32 connections, every latency recorded. First a run
// without a purge, then a run during which the second registry's cache is
// purged (DELETE …/registries/:id/cache) and the collector removes the
// entries and their blobs. The run with the purge lasts until the collector
// is done (at least 2 s after the purge).
//
// Reported: hit p50/p99 without and with the purge (from the purge request
// until the collector is done) and their ratio, p99 of the first 2 s after
// the purge request (where one large transaction showed), the purge request's
// own time, the peak of blob files on disk over live blobs,
// and how long dead blobs stayed on disk. Live blobs are known exactly: no
// fill happens during the run, so after the purge they are the bench
// registry's blobs.
func (b *bench) purge() error {
	paths := smallPaths()
	if err := warm(b.reg.base(), b.reg.BasicAuth, paths); err != nil {
		return err
	}
	var reg, up struct {
		ID int64 `json:"id"`
	}
	if err := b.reg.api("POST", fmt.Sprintf("/groups/%d/-/virtual_registries/packages/maven/registries", b.reg.Group),
		map[string]any{"name": "purged"}, &reg); err != nil {
		return err
	}
	if err := b.reg.api("POST", fmt.Sprintf("/virtual_registries/packages/maven/registries/%d/upstreams", reg.ID),
		map[string]any{"url": b.origin.URL + "/purged", "name": "purged"}, &up); err != nil {
		return err
	}
	b.reg.stop()
	n := b.o.purgeN
	fmt.Fprintf(os.Stderr, "bench:   seeding %d entries with their own blobs\n", n)
	seedStart := time.Now()
	if err := seedPurge(b.reg.dataDir, up.ID, n); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "bench:   seeded in %.1fs\n", time.Since(seedStart).Seconds())
	if err := b.reg.start(); err != nil {
		return err
	}
	// The start counted the blob files; all but the seeded ones are the
	// bench registry's, which stay live.
	m, err := b.reg.metrics()
	if err != nil {
		return err
	}
	live := m["registryd_cache_blobs"] - float64(n)
	if live <= 0 {
		return fmt.Errorf("%.0f blob files after seeding %d", m["registryd_cache_blobs"], n)
	}

	// Warm the in-memory views and small-file copies again after the restart.
	if _, err := hitLoad(b.reg.base(), b.reg.BasicAuth, paths, 32, time.Second, nil); err != nil {
		return err
	}
	quiet, err := hitLoad(b.reg.base(), b.reg.BasicAuth, paths, 32, b.o.duration, nil)
	if err != nil {
		return err
	}

	var purgeTook time.Duration
	var peak, drained, left float64
	var purgedAt time.Time
	var samples []string
	during, err := hitLoad(b.reg.base(), b.reg.BasicAuth, paths, 32, 0, func() error {
		time.Sleep(time.Second)
		stopProfiles := b.profile("purge", 8*time.Second)
		defer stopProfiles()
		purgedAt = time.Now()
		if err := b.reg.api("DELETE", fmt.Sprintf("/virtual_registries/packages/maven/registries/%d/cache", reg.ID), nil, nil); err != nil {
			return err
		}
		purgeTook = time.Since(purgedAt)
		deadline := purgedAt.Add(90 * time.Second)
		for {
			m, err := b.reg.metrics()
			if err != nil {
				return err
			}
			files := m["registryd_cache_blobs"]
			peak = max(peak, files/live)
			t := time.Since(purgedAt)
			samples = append(samples, fmt.Sprintf("%.1fs:%.0f", t.Seconds(), files))
			if files <= live && m["registryd_cache_pending_entries"] == 0 && drained == 0 {
				drained = t.Seconds()
			}
			if drained > 0 && t >= 2*time.Second {
				return nil
			}
			if time.Now().After(deadline) {
				left = files - live
				return nil
			}
			time.Sleep(250 * time.Millisecond)
		}
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "bench:   blob files after the purge: %s\n", strings.Join(samples, " "))
	window := during.since(purgedAt)
	window.timeline(purgedAt)
	q50, q99 := quiet.quantile(0.5), quiet.quantile(0.99)
	d50, d99 := window.quantile(0.5), window.quantile(0.99)
	name := fmt.Sprintf("purge of %dk entries", n/1000)
	b.add(figure{Scenario: "purge", Name: "hits, no purge: p50 latency", Unit: "s", Better: "lower", Registryd: q50.Seconds(),
		Note: fmt.Sprintf("%d requests", len(quiet))})
	b.add(figure{Scenario: "purge", Name: "hits, no purge: p99 latency", Unit: "s", Better: "lower", Registryd: q99.Seconds()})
	b.add(figure{Scenario: "purge", Name: "hits during " + name + ": p50 latency", Unit: "s", Better: "lower",
		Registryd: d50.Seconds(), Baseline: q50.Seconds(), Against: "no purge", Note: fmt.Sprintf("%d requests", len(window))})
	f := figure{Scenario: "purge", Name: "hits during " + name + ": p99 latency", Unit: "s", Better: "lower",
		Registryd: d99.Seconds(), Baseline: q99.Seconds(), Against: "no purge", Goal: "<= 3x"}
	f.Met = met(d99 <= 3*q99)
	b.add(f)
	first := window.before(purgedAt.Add(2 * time.Second))
	b.add(figure{Scenario: "purge", Name: "hits, first 2 s after the purge: p99 latency", Unit: "s", Better: "lower",
		Registryd: first.quantile(0.99).Seconds(), Baseline: q99.Seconds(), Against: "no purge",
		Note: fmt.Sprintf("%d requests", len(first))})
	b.add(figure{Scenario: "purge", Name: "hits during " + name + ": max latency", Unit: "s", Better: "lower",
		Registryd: window.quantile(1).Seconds(), Baseline: quiet.quantile(1).Seconds(), Against: "no purge"})
	b.add(figure{Scenario: "purge", Name: name + ": DELETE …/cache answered in", Unit: "s", Better: "lower",
		Registryd: purgeTook.Seconds()})
	b.add(figure{Scenario: "purge", Name: name + ": peak blob files / live blobs", Unit: "x", Better: "lower",
		Registryd: peak, Note: fmt.Sprintf("%.0f live blobs", live)})
	gone := figure{Scenario: "purge", Name: name + ": dead blobs gone after", Unit: "s", Better: "lower", Registryd: drained}
	if left > 0 {
		gone.Registryd = time.Since(purgedAt).Seconds()
		gone.Note = fmt.Sprintf("not gone: %.0f dead blob files left when the run stopped", left)
		gone.Goal, gone.Met = "all gone", met(false)
	}
	b.add(gone)
	return nil
}

// latencies are the hit timings of one load run.
type latencies []latency

type latency struct {
	start time.Time
	d     time.Duration
}

func (l latencies) quantile(q float64) time.Duration {
	if len(l) == 0 {
		return 0
	}
	d := make([]time.Duration, len(l))
	for i, x := range l {
		d[i] = x.d
	}
	slices.Sort(d)
	return d[int(q*float64(len(d)-1)+0.5)]
}

// since keeps the requests that started at t or later.
func (l latencies) since(t time.Time) latencies {
	var out latencies
	for _, x := range l {
		if !x.start.Before(t) {
			out = append(out, x)
		}
	}
	return out
}

// timeline prints count, p50, p99 and max per second from t0.
func (l latencies) timeline(t0 time.Time) {
	var secs []latencies
	for _, x := range l {
		i := int(x.start.Sub(t0) / time.Second)
		for len(secs) <= i {
			secs = append(secs, nil)
		}
		secs[i] = append(secs[i], x)
	}
	for i, s := range secs {
		fmt.Fprintf(os.Stderr, "bench:   +%2ds %6d hits  p50 %6.2f ms  p99 %7.2f ms  max %7.2f ms\n", i, len(s),
			ms(s.quantile(0.5)), ms(s.quantile(0.99)), ms(s.quantile(1)))
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// profile saves, when -pprof is set, registryd's CPU profile and execution
// trace of the next d to bench/out/NAME.cpu and NAME.trace; the returned
// function waits for both.
func (b *bench) profile(name string, d time.Duration) func() {
	if b.o.pprof == "" {
		return func() {}
	}
	var wg sync.WaitGroup
	for _, p := range []struct{ path, ext string }{{"profile", "cpu"}, {"trace", "trace"}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			url := fmt.Sprintf("http://%s/debug/pprof/%s?seconds=%d", b.o.pprof, p.path, int(d.Seconds()))
			res, err := http.Get(url)
			if err != nil {
				fmt.Fprintln(os.Stderr, "bench: profile:", err)
				return
			}
			defer res.Body.Close()
			out := filepath.Join(filepath.Dir(b.o.out), name+"."+p.ext)
			f, err := os.Create(out)
			if err != nil {
				fmt.Fprintln(os.Stderr, "bench: profile:", err)
				return
			}
			defer f.Close()
			_, _ = io.Copy(f, res.Body)
			fmt.Fprintln(os.Stderr, "bench:   saved", out)
		}()
	}
	return wg.Wait
}

// before keeps the requests that started before t.
func (l latencies) before(t time.Time) latencies {
	var out latencies
	for _, x := range l {
		if x.start.Before(t) {
			out = append(out, x)
		}
	}
	return out
}

// hitLoad runs a closed-loop load of GETs of random paths on conns
// connections and records every latency. It runs for d, or, when during is
// set, until during returns (its error is the load's).
func hitLoad(base, auth string, paths []string, conns int, d time.Duration, during func() error) (latencies, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := newClient(conns)
	var wg sync.WaitGroup
	per := make([]latencies, conns)
	errs := make([]error, conns)
	for c := 0; c < conns; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			for ctx.Err() == nil {
				p := paths[fastRand()%uint32(len(paths))]
				start := time.Now()
				status, _, err := get(ctx, client, base+p, auth)
				if ctx.Err() != nil {
					return
				}
				if err != nil || status != 200 {
					errs[c] = fmt.Errorf("GET %s: %d %v", p, status, err)
					cancel()
					return
				}
				per[c] = append(per[c], latency{start, time.Since(start)})
			}
		}(c)
	}
	var err error
	if during != nil {
		err = during()
	} else {
		select {
		case <-time.After(d):
		case <-ctx.Done():
		}
	}
	cancel()
	wg.Wait()
	for _, e := range errs {
		if e != nil && err == nil {
			err = e
		}
	}
	var all latencies
	for _, l := range per {
		all = append(all, l...)
	}
	return all, err
}

// metrics scrapes the admin listener's /metrics and returns the unlabelled
// samples by name.
func (d *daemon) metrics() (map[string]float64, error) {
	res, err := http.Get(d.Admin + "/metrics")
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || strings.Contains(line, "{") {
			continue
		}
		name, val, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		if v, err := strconv.ParseFloat(val, 64); err == nil {
			out[name] = v
		}
	}
	return out, sc.Err()
}

// seedPurge writes n blobs of 256 distinct bytes each straight into the blob
// directory and n entries of the upstream pointing at them, in batched
// transactions. The files are written by a few goroutines and made durable
// with one sync(2) at the end, as registryd's own blobs are by the time an
// entry refers to them: unlinking a file whose pages are still being
// written back waits for the disk, which would measure the seeding, not the
// collector.
func seedPurge(dataDir string, upstream int64, n int) error {
	cfg := config.Default()
	cfg.Data.Dir = dataDir
	key, err := store.LoadOrCreateSecret(cfg.Path("secrets.key"), 32)
	if err != nil {
		return err
	}
	st, err := boltstore.Open(dataDir, store.Options{SecretKey: key})
	if err != nil {
		return err
	}
	defer st.Close()
	root := filepath.Join(dataDir, "blobs", "sha256")
	entries := make([]store.CacheEntry, n)
	const workers = 8
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			body := make([]byte, 256)
			for i := w; i < n; i += workers {
				copy(body, fmt.Sprintf("purge-bench blob %012d ", i))
				s256 := sha256.Sum256(body)
				sha := hex.EncodeToString(s256[:])
				dir := filepath.Join(root, sha[0:2], sha[2:4])
				if err := os.MkdirAll(dir, 0o750); err != nil {
					errs[w] = err
					return
				}
				if err := os.WriteFile(filepath.Join(dir, sha), body, 0o640); err != nil {
					errs[w] = err
					return
				}
				m, s1, s512 := md5.Sum(body), sha1.Sum(body), sha512.Sum512(body)
				entries[i] = store.CacheEntry{
					UpstreamID: upstream, RelativePath: fmt.Sprintf("/org/bench/purged/lib%d/1.0/lib%d-1.0.jar", i, i),
					Size: int64(len(body)), MD5: hex.EncodeToString(m[:]), SHA1: hex.EncodeToString(s1[:]), SHA256: sha,
					SHA512: hex.EncodeToString(s512[:]), ContentType: "application/java-archive", CheckedAt: time.Now(),
				}
			}
		}(w)
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	const batch = 20000
	for i := 0; i < n; i += batch {
		if err := st.PutCacheEntries(entries[i:min(n, i+batch)]); err != nil {
			return err
		}
	}
	syscall.Sync()
	return nil
}
