package proxy

import (
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"registryd/internal/fakecluster"
	"registryd/store"
	"registryd/upstream"
)

// clusterEnv is an env whose store is node "a" of a fake cluster; the
// test plays the other nodes through the broker (their leases) and through
// the same store and blob directory (what they write).
func clusterEnv(t *testing.T, opts ...func(*envOptions)) (*env, *fakecluster.Broker, *fakecluster.Node) {
	t.Helper()
	b := fakecluster.New()
	t.Cleanup(b.Close)
	n := b.Node("a")
	e := newEnvStore(t, store.Options{Cluster: n}, opts...)
	return e, b, n
}

// poll waits for cond with a deadline (no sleeps as synchronisation).
func poll(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// storeAsOtherNode writes the entry and blob of path that another node's
// fill would have written.
func (e *env) storeAsOtherNode(upID int64, path string, body []byte) {
	e.t.Helper()
	w, err := e.blobs.Create()
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := w.Write(body); err != nil {
		e.t.Fatal(err)
	}
	d, err := w.Finish()
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.st.Publish(e.blobs, w, d, store.CacheEntry{UpstreamID: upID, RelativePath: "/" + path,
		CheckedAt: e.clock.Now().UTC().Truncate(time.Millisecond)}); err != nil {
		e.t.Fatal(err)
	}
}

// TestClusterHerdFilledElsewhere: the fill lease of a file is held by
// another node; a herd of misses here makes one flight whose fill waits
// for it. The other node stores the file and gives the lease back: every
// client gets the file, and this node never asks the upstream.
func TestClusterHerdFilledElsewhere(t *testing.T) {
	e, b, _ := clusterEnv(t)
	up := newFakeUpstream(t)
	uid := e.upstream(up.URL, nil, nil)
	const path = "org/example/lib/1.0/lib-1.0.jar"
	body := jarBytes(path, 300<<10)
	up.set(path, fakeFile{body: body})
	key := "fill:" + strconv.FormatInt(uid, 10) + ":" + path

	release := b.Hold(key, "node-b")
	var joined atomic.Int32
	e.hooks.OnJoin = func() { joined.Add(1) }
	const n = 8
	results := make([]resp, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = e.getNow(path)
		}()
	}
	poll(t, "the fill waiting for the lease and the herd joined", func() bool {
		return b.Waiting(key) == 1 && joined.Load() == n-1
	})
	e.storeAsOtherNode(uid, path, body)
	release()
	wg.Wait()
	e.hooks.OnJoin = nil
	for i, r := range results {
		r.expect(t, http.StatusOK)
		if string(r.body) != string(body) {
			t.Fatalf("client %d got %d bytes", i, len(r.body))
		}
	}
	e.waitFills()
	if c := up.total(); c != 0 {
		t.Fatalf("%d upstream requests; the file was filled elsewhere", c)
	}
	if got := e.metric("registryd_cluster_fill_lease_waits_total"); got != 1 {
		t.Fatalf("lease waits %v", got)
	}
	if got := e.metric("registryd_cluster_filled_elsewhere_total"); got != 1 {
		t.Fatalf("filled elsewhere %v", got)
	}
	if h := b.Holder(key); h != "" {
		t.Fatalf("lease held by %q after the flight", h)
	}
	// And it is a plain hit from now on.
	e.get(path).expect(t, http.StatusOK).expectBody(t, string(body))
	if up.total() != 0 {
		t.Fatal("a hit asked the upstream")
	}
	e.noBrokenState()
	e.lint()
}

// TestClusterLeaseHeldForTheFill: a fill on a cluster holds its file's
// lease while it asks the upstream and gives it back once the entry is
// committed.
func TestClusterLeaseHeldForTheFill(t *testing.T) {
	e, b, _ := clusterEnv(t)
	up := newFakeUpstream(t)
	uid := e.upstream(up.URL, nil, nil)
	const path = "org/example/lib/2.0/lib-2.0.jar"
	body := jarBytes(path, 400<<10)
	up.set(path, fakeFile{body: body, fault: faultHold})
	key := "fill:" + strconv.FormatInt(uid, 10) + ":" + path

	done := make(chan resp, 1)
	go func() { done <- e.getNow(path) }()
	<-up.midBody
	if h := b.Holder(key); h != "a" {
		t.Fatalf("lease holder mid-fill %q", h)
	}
	up.releaseHeld()
	(<-done).expect(t, http.StatusOK).expectBody(t, string(body))
	e.waitFills()
	if _, ok := e.entry(uid, "/"+path); !ok {
		t.Fatal("no entry")
	}
	if h := b.Holder(key); h != "" {
		t.Fatalf("lease held by %q after the fill", h)
	}
	if up.calls(path) != 1 || e.metric("registryd_cluster_fill_lease_waits_total") != 0 ||
		e.metric("registryd_cluster_filled_elsewhere_total") != 0 {
		t.Fatal("an uncontended fill counted as contended")
	}
}

// TestClusterLeaseError: an index that cannot grant the lease fails the
// miss with 503 and a reason; the upstream is not asked unguarded.
func TestClusterLeaseError(t *testing.T) {
	e, _, n := clusterEnv(t)
	up := newFakeUpstream(t)
	e.upstream(up.URL, nil, nil)
	up2 := newFakeUpstream(t)
	e.upstream(up2.URL, nil, nil)
	const path = "org/example/lib/3.0/lib-3.0.jar"
	up.set(path, fakeFile{body: jarBytes(path, 1000)})
	n.FailLocks(true)
	r := e.get(path).expect(t, http.StatusServiceUnavailable)
	if !strings.Contains(string(r.body), "index database is unavailable") {
		t.Fatalf("body %s", r.body)
	}
	if up.total() != 0 || up2.total() != 0 {
		t.Fatal("an upstream was asked without the lease")
	}
	n.FailLocks(false)
	e.get(path).expect(t, http.StatusOK)
	if up.calls(path) != 1 {
		t.Fatalf("%d upstream requests once the index is back", up.calls(path))
	}
}

// TestClusterRevalidatedElsewhere: a stale entry's revalidation waits for
// the lease of another node that revalidates it; once that node has
// touched the entry, the clients get it without a request of this node.
func TestClusterRevalidatedElsewhere(t *testing.T) {
	e, b, _ := clusterEnv(t)
	up := newFakeUpstream(t)
	uid := e.upstream(up.URL, hours(1), nil)
	const path = "org/example/lib/4.0/lib-4.0.jar"
	body := jarBytes(path, 2000)
	up.set(path, fakeFile{body: body, etag: `"v1"`})
	e.get(path).expect(t, http.StatusOK)
	e.clock.Advance(2 * time.Hour) // stale
	key := "fill:" + strconv.FormatInt(uid, 10) + ":" + path

	release := b.Hold(key, "node-b")
	done := make(chan resp, 1)
	go func() { done <- e.getNow(path) }()
	poll(t, "the revalidation waiting for the lease", func() bool { return b.Waiting(key) == 1 })
	if err := e.st.TouchCacheEntry(uid, "/"+path, e.clock.Now()); err != nil {
		t.Fatal(err)
	}
	release()
	(<-done).expect(t, http.StatusOK).expectBody(t, string(body))
	e.waitFills()
	if up.calls(path) != 1 {
		t.Fatalf("%d upstream requests; the revalidation was done elsewhere", up.calls(path))
	}
	if got := e.metric("registryd_cluster_filled_elsewhere_total"); got != 1 {
		t.Fatalf("filled elsewhere %v", got)
	}
}

// TestClusterJobsSkipped: the collector and the evictor skip their round
// while another node holds the job's lease, and run once it is free.
func TestClusterJobsSkipped(t *testing.T) {
	const size = 200 << 10
	e, b, _ := clusterEnv(t, func(o *envOptions) { o.Cache.MaxBytes = 1 << 20; o.Cache.MinFreeFraction = 0 })
	up := newFakeUpstream(t)
	uid := e.upstream(up.URL, nil, nil)
	paths, _ := e.evictFiles(up, 6, size)

	release := b.Hold("job:evict", "node-b")
	if r, err := e.srv.EvictOnce(); err != nil || r.Entries != 0 || r.Want <= 0 {
		t.Fatalf("eviction while another node evicts: %+v, %v", r, err)
	}
	if got := e.metric("registryd_cluster_job_skipped_total", "job", "evict"); got != 1 {
		t.Fatalf("evict skipped %v", got)
	}
	release()
	if r, err := e.srv.EvictOnce(); err != nil || r.Entries == 0 {
		t.Fatalf("eviction: %+v, %v", r, err)
	}

	release = b.Hold("job:collect", "node-b")
	if err := e.st.DeleteCacheEntry(uid, "/"+paths[5]); err != nil {
		t.Fatal(err)
	}
	blobs, _ := e.blobs.Stats()
	if r, err := e.srv.CollectOnce(); err != nil || r.Entries != 0 {
		t.Fatalf("collection while another node collects: %+v, %v", r, err)
	}
	if n, _ := e.blobs.Stats(); n != blobs {
		t.Fatal("a blob was removed while another node collects")
	}
	if got := e.metric("registryd_cluster_job_skipped_total", "job", "collect"); got != 1 {
		t.Fatalf("collect skipped %v", got)
	}
	release()
	if r, err := e.srv.CollectOnce(); err != nil || r.Entries != 1 {
		t.Fatalf("collection: %+v, %v", r, err)
	}
	for _, k := range []string{"job:evict", "job:collect"} {
		if h := b.Holder(k); h != "" {
			t.Fatalf("%s held by %q after the run", k, h)
		}
	}
}

// TestUncachedSumsForgetEpoch: the digests of a file streamed uncached are
// void once its upstream's forget epoch moves (here or on another node).
func TestUncachedSumsForgetEpoch(t *testing.T) {
	var ep atomic.Uint64
	u := newUncachedSums(func(int64) uint64 { return ep.Load() })
	now := time.Now()
	u.remember(1, "a/b", store.CacheEntry{SHA1: "x"}, now)
	if _, ok := u.recall(1, "a/b", now); !ok {
		t.Fatal("not remembered")
	}
	ep.Add(1)
	if _, ok := u.recall(1, "a/b", now); ok {
		t.Fatal("remembered across a forget epoch")
	}
}

// TestHealthForgottenOnNewURL: a registry view that sees an upstream's url
// change (an edit on another node) forgets the upstream's health.
func TestHealthForgottenOnNewURL(t *testing.T) {
	h := upstream.NewHealth(upstream.HealthOptions{Threshold: 1})
	var u upstreamURLs
	u.note(h, 7, "https://one.example/m")
	tk, _, _ := h.Begin(7, "a/b")
	h.Failure(tk, upstream.Fault{Class: upstream.FailHost, Reason: "Connection refused"})
	available := func() bool { _, ok := h.Check(7, "a/c"); return ok }
	if available() {
		t.Fatal("still available after a host failure")
	}
	u.note(h, 7, "https://one.example/m") // same url: health kept
	if available() {
		t.Fatal("health forgotten for the same url")
	}
	u.note(h, 7, "https://two.example/m")
	if !available() {
		t.Fatal("health of the old url kept for the new one")
	}
}
