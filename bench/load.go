package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// loader generates load with wrk when installed, else with a Go client.
type loader struct {
	wrk    bool
	script string // path of the Lua script
	work   string
}

func newLoader(work string, useWrk bool) (*loader, error) {
	l := &loader{wrk: useWrk, work: work}
	if useWrk {
		l.script = filepath.Join(work, "paths.lua")
		if err := os.WriteFile(l.script, []byte(wrkScript), 0o644); err != nil {
			return nil, err
		}
	}
	return l, nil
}

var rpsRE = regexp.MustCompile(`Requests/sec:\s+([0-9.]+)`)
var non2xxRE = regexp.MustCompile(`Non-2xx or 3xx responses:\s+([0-9]+)`)

// rps runs a closed-loop load of GETs of base+paths[i] on conns keep-alive
// connections for d, and returns requests per second. Every non-2xx answer
// is an error: a benchmark of failures measures nothing.
func (l *loader) rps(base string, paths []string, auth string, conns int, d time.Duration, ordered bool) (float64, error) {
	if l.wrk {
		list := filepath.Join(l.work, fmt.Sprintf("paths-%d.txt", time.Now().UnixNano()))
		prefix := urlPath(base)
		var b strings.Builder
		for _, p := range paths {
			b.WriteString(prefix + p + "\n")
		}
		if err := os.WriteFile(list, []byte(b.String()), 0o644); err != nil {
			return 0, err
		}
		defer os.Remove(list)
		cmd := exec.Command("wrk", "-t1", "-c"+strconv.Itoa(conns), "-d"+d.String(), "-s", l.script, hostOf(base))
		cmd.Env = append(os.Environ(), "BENCH_PATHS="+list, "BENCH_AUTH="+auth, "BENCH_ORDERED="+boolEnv(ordered))
		out, err := cmd.CombinedOutput()
		if err != nil {
			return 0, fmt.Errorf("wrk: %v: %s", err, out)
		}
		if m := non2xxRE.FindSubmatch(out); m != nil {
			return 0, fmt.Errorf("wrk saw %s non-2xx answers from %s", m[1], base)
		}
		m := rpsRE.FindSubmatch(out)
		if m == nil {
			return 0, fmt.Errorf("wrk printed no rate: %s", out)
		}
		return strconv.ParseFloat(string(m[1]), 64)
	}
	var done atomic.Int64
	var failed atomic.Value
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	client := newClient(conns)
	var wg sync.WaitGroup
	for c := 0; c < conns; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			i := c
			for ctx.Err() == nil {
				p := paths[i%len(paths)]
				if !ordered {
					p = paths[fastRand()%uint32(len(paths))]
				}
				i++
				status, _, err := get(ctx, client, base+p, auth)
				if ctx.Err() != nil {
					return
				}
				if err != nil || status/100 != 2 {
					failed.Store(fmt.Errorf("GET %s: %d %v", p, status, err))
					return
				}
				done.Add(1)
			}
		}(c)
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		return 0, err
	}
	return float64(done.Load()) / d.Seconds(), nil
}

// throughput downloads url on conns connections for d and returns bytes/s.
func (l *loader) throughput(url, auth string, conns int, d time.Duration) (float64, error) {
	var total atomic.Int64
	var failed atomic.Value
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	client := newClient(conns)
	var wg sync.WaitGroup
	for c := 0; c < conns; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				status, n, err := get(ctx, client, url, auth)
				total.Add(n)
				if ctx.Err() != nil {
					return
				}
				if err != nil || status != 200 {
					failed.Store(fmt.Errorf("GET %s: %d %v", url, status, err))
					return
				}
			}
		}()
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		return 0, err
	}
	return float64(total.Load()) / d.Seconds(), nil
}

// timing is one request's latency figures.
type timing struct {
	Total, TTFB time.Duration
	Bytes       int64
	Status      int
}

// timed GETs url once and measures time to first byte and total time.
func timed(client *http.Client, url, auth string) (timing, error) {
	req, _ := http.NewRequest("GET", url, nil)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	start := time.Now()
	res, err := client.Do(req)
	if err != nil {
		return timing{}, err
	}
	defer res.Body.Close()
	var t timing
	buf := make([]byte, 256<<10)
	first := true
	for {
		n, err := res.Body.Read(buf)
		if n > 0 && first {
			t.TTFB = time.Since(start)
			first = false
		}
		t.Bytes += int64(n)
		if err == io.EOF {
			break
		}
		if err != nil {
			return t, err
		}
	}
	t.Total = time.Since(start)
	t.Status = res.StatusCode
	if t.TTFB == 0 {
		t.TTFB = t.Total
	}
	return t, nil
}

// herd sends n concurrent GETs of url at once and returns their timings.
func herd(url, auth string, n int) ([]timing, error) {
	client := newClient(n)
	out := make([]timing, n)
	errs := make([]error, n)
	var start sync.WaitGroup
	start.Add(1)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			start.Wait()
			out[i], errs[i] = timed(client, url, auth)
		}(i)
	}
	start.Done()
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return nil, err
		}
		if out[i].Status != 200 {
			return nil, fmt.Errorf("GET %s: status %d", url, out[i].Status)
		}
	}
	return out, nil
}

func percentile(ts []timing, p float64) time.Duration {
	d := make([]time.Duration, len(ts))
	for i, t := range ts {
		d[i] = t.Total
	}
	slices.Sort(d)
	idx := int(p*float64(len(d)-1) + 0.5)
	return d[idx]
}

func newClient(conns int) *http.Client {
	return &http.Client{Transport: &http.Transport{
		MaxIdleConns: conns, MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns,
		DisableCompression: true, IdleConnTimeout: time.Minute,
	}}
}

func get(ctx context.Context, c *http.Client, url, auth string) (int, int64, error) {
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	res, err := c.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer res.Body.Close()
	n, err := io.Copy(io.Discard, res.Body)
	return res.StatusCode, n, err
}

var randState atomic.Uint32

func fastRand() uint32 {
	// xorshift on a shared state: good enough to spread keys, no locks.
	for {
		old := randState.Load()
		x := old
		if x == 0 {
			x = 2463534242
		}
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		if randState.CompareAndSwap(old, x) {
			return x
		}
	}
}

func hostOf(base string) string {
	i := strings.Index(base[len("http://"):], "/")
	if i < 0 {
		return base
	}
	return base[:len("http://")+i]
}

func urlPath(base string) string {
	return strings.TrimPrefix(base, hostOf(base))
}

func boolEnv(b bool) string {
	if b {
		return "1"
	}
	return "0"
}
