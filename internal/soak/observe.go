package soak

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// hist is a latency histogram with buckets 2 % wide from 1 µs to about
// 20 minutes, safe for concurrent use: a run records millions of
// latencies, so it keeps counts, not samples. Quantiles are a bucket's
// upper bound (at most 2 % high).
type hist struct {
	n       atomic.Int64
	buckets [histBuckets]atomic.Int64
}

const (
	histBuckets = 1060
	histGrowth  = 1.02
)

var histLogGrowth = math.Log(histGrowth)

func (h *hist) add(d time.Duration) {
	i := 0
	if us := float64(d) / float64(time.Microsecond); us > 1 {
		i = min(int(math.Log(us)/histLogGrowth)+1, histBuckets-1)
	}
	h.buckets[i].Add(1)
	h.n.Add(1)
}

// quantile is the q-quantile in seconds, 0 when empty.
func (h *hist) quantile(q float64) float64 {
	n := h.n.Load()
	if n == 0 {
		return 0
	}
	rank := int64(math.Ceil(q * float64(n)))
	var seen int64
	for i := range h.buckets {
		seen += h.buckets[i].Load()
		if seen >= rank {
			return math.Pow(histGrowth, float64(i)) * 1e-6
		}
	}
	return math.Pow(histGrowth, histBuckets-1) * 1e-6
}

func (h *hist) merge(o *hist) {
	for i := range o.buckets {
		if v := o.buckets[i].Load(); v != 0 {
			h.buckets[i].Add(v)
		}
	}
	h.n.Add(o.n.Load())
}

// Metric names the soak reads from the admin listener's /metrics.
const (
	mPending     = "registryd_cache_pending_entries"
	mEntries     = "registryd_cache_entries"
	mBlobBytes   = "registryd_cache_blob_bytes"
	mBudget      = "registryd_cache_budget_bytes"
	mDestroyed   = "registryd_collector_entries_total"
	mFetched     = "registryd_upstream_fetched_bytes_total"
	mInFlight    = "registryd_cache_fills_in_flight"
	mEvictions   = "registryd_cache_evictions_total"
	mGoroutines  = "go_goroutines"
	mHeapInuse   = "go_memstats_heap_inuse_bytes"
	mCountsQueue = "registryd_cache_download_counts_pending"
	// mPendingStores is the gauge of fills whose entries wait to be
	// stored (bounded by cache.max_pending_stores).
	mPendingStores = "registryd_cache_pending_stores"
	// The index file and its free and pending-free parts (bbolt).
	mIndexBytes   = "registryd_index_bytes"
	mIndexFree    = "registryd_index_free_bytes"
	mIndexPending = "registryd_index_pending_free_bytes"
	// mCacheMemory prefixes the gauges of the engine's caches in memory
	// (entries, capacity, held_bytes, budget_bytes; label cache).
	mCacheMemory = "registryd_cache_memory_"
)

// cutLast is strings.Cut at the last sep (a label value may hold spaces).
func cutLast(s, sep string) (before, after string, found bool) {
	if i := strings.LastIndex(s, sep); i >= 0 {
		return s[:i], s[i+len(sep):], true
	}
	return s, "", false
}

// cacheFill is how full each of the engine's caches in memory is, from
// 0 to 1: the larger of its entries over its capacity and, where a byte
// budget bounds it, its bytes over the budget (registryd_cache_memory_*).
func cacheFill(m map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for key, v := range m {
		rest, ok := strings.CutPrefix(key, mCacheMemory+"entries{cache=\"")
		if !ok {
			continue
		}
		name := strings.TrimSuffix(rest, "\"}")
		label := "{cache=\"" + name + "\"}"
		if c := m[mCacheMemory+"capacity"+label]; c > 0 {
			out[name] = v / c
		}
		if b := m[mCacheMemory+"budget_bytes"+label]; b > 0 {
			out[name] = max(out[name], m[mCacheMemory+"held_bytes"+label]/b)
		}
	}
	return out
}

// scrape reads the unlabelled samples of /metrics, and the labelled ones
// of the engine's caches in memory.
func scrape(ctx context.Context, c *http.Client, url string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	res, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %d", res.StatusCode)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		// Labelled samples are kept only for the engine's caches in
		// memory, by their whole name and labels.
		if strings.ContainsRune(line, '{') && !strings.HasPrefix(line, mCacheMemory) {
			continue
		}
		name, val, ok := cutLast(line, " ")
		if !ok {
			continue
		}
		if v, err := strconv.ParseFloat(strings.TrimSpace(val), 64); err == nil {
			out[name] = v
		}
	}
	return out, sc.Err()
}

// Memory is a process's resident memory in bytes, from /proc/pid/status:
// RSS is all of it; Anon the process's own (heap, stacks), File the pages
// of mapped files it touched (the index's mmap: page cache, which the
// kernel takes back under pressure), Shmem shared memory.
type Memory struct {
	RSS, Anon, File, Shmem int64
}

// ReadMemory reads the memory of process pid (zeros when it cannot).
func ReadMemory(pid int) Memory {
	var m Memory
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return m
	}
	fields := map[string]*int64{"VmRSS:": &m.RSS, "RssAnon:": &m.Anon, "RssFile:": &m.File, "RssShmem:": &m.Shmem}
	for _, line := range strings.Split(string(raw), "\n") {
		name, rest, ok := strings.Cut(line, "\t")
		if !ok {
			name, rest, ok = strings.Cut(line, " ")
		}
		if dst := fields[name]; ok && dst != nil {
			if f := strings.Fields(rest); len(f) >= 1 {
				kb, _ := strconv.ParseInt(f[0], 10, 64)
				*dst = kb << 10
			}
		}
	}
	return m
}

// RSS is the resident set size of process pid in bytes (0 when it cannot
// be read).
func RSS(pid int) int64 { return ReadMemory(pid).RSS }

// sample is what the sampler saw at one second of the run.
type sample struct {
	At         time.Duration // since the load started
	OK         bool          // the scrape answered
	RSS        int64
	Anon, File int64   // parts of RSS (Memory)
	HeapInuse  float64 // go_memstats_heap_inuse_bytes
	// Index, IndexFree, IndexPending: the index file, its free pages and
	// those a read transaction still pins (registryd_index_*).
	Index, IndexFree, IndexPending float64
	// Caches: each cache in memory's fill, 0 to 1 (cacheFill).
	Caches     map[string]float64
	Pending    float64
	Backlog    float64 // -1 when the daemon has no such gauge
	Goroutines float64
	Entries    float64
	BlobBytes  float64
	Budget     float64
	Destroyed  float64
	Fetched    float64
	InFlight   float64
	Evictions  float64
}
