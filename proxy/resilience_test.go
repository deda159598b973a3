package proxy

import (
	"encoding/json"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"registryd/store"
)

// hang answers nothing until the client gives up.
func hang(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() }

// files are distinct artifact paths, as a build asks for them.
func files(n int) []string {
	out := make([]string, n)
	for i := range out {
		v := strconv.Itoa(i + 1)
		out[i] = "org/example/lib" + v + "/1.0/lib" + v + "-1.0.jar"
	}
	return out
}

// resetConn closes the connection with a TCP reset before any answer.
func resetConn(w http.ResponseWriter, _ *http.Request) {
	conn, _, err := w.(http.Hijacker).Hijack()
	if err == nil {
		conn.(*net.TCPConn).SetLinger(0)
		conn.Close()
	}
}

// A build behind a broken first upstream (hung, resetting, refusing
// connections) pays for it a few times, not once per file. A connection
// that cannot be made says the host is down: the first request marks the
// upstream unhealthy. A hang or a reset once connected may be one file's
// (a repository whose remote for that file is broken): the upstream is
// marked once upstreams.failure_threshold (3) distinct files failed in a
// row. The next ones skip it at once; after the backoff one trial finds it
// repaired and it is used again.
func TestBrokenUpstreamCostsFewFailures(t *testing.T) {
	for _, c := range []struct {
		name, lastError string
		handler         func(http.ResponseWriter, *http.Request)
		down            bool
		failed          int // files that failed before the upstream was marked
	}{
		{name: "hang", lastError: "Connection timeout", handler: hang, failed: 3},
		{name: "reset", lastError: "Connection reset by peer", handler: resetConn, failed: 3},
		{name: "refused", lastError: "Connection refused", down: true, failed: 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, func(o *envOptions) { o.upstream.HeaderTimeout = 300 * time.Millisecond })
			broken, good := newFakeUpstream(t), newFakeUpstream(t)
			paths := files(6)
			for _, p := range paths {
				broken.set(p, fakeFile{custom: c.handler})
				good.set(p, fakeFile{body: jarBytes(p, 2048)})
			}
			url := broken.URL
			if c.down {
				url = downURL(t)
			}
			hid := e.upstream(url, nil, nil)
			e.upstream(good.URL, nil, nil)

			for _, p := range paths[:5] {
				e.get(p).expect(t, 200).expectBody(t, string(jarBytes(p, 2048)))
			}
			// net/http may retry a request that died on a kept-alive
			// connection before any answer, once, on a new connection; a
			// timed-out one never.
			for i, p := range paths[:5] {
				n, want := broken.calls(p), 0
				if i < c.failed && !c.down {
					want = 1
				}
				if n < want || n > 2*want || (c.name == "hang" && n != want) {
					t.Fatalf("the broken upstream got %d requests for file %d, want %d", n, i+1, want)
				}
			}
			if st := e.srv.health.Status(hid); st.State != "unhealthy" || st.LastError != c.lastError {
				t.Fatalf("health %+v", st)
			}
			if n := e.metric("registryd_upstream_skipped_total", "upstream", strconv.FormatInt(hid, 10), "reason", "unhealthy"); n != float64(5-c.failed) {
				t.Fatalf("skipped %v, want %d", n, 5-c.failed)
			}
			if n := e.metric("registryd_upstream_healthy", "upstream", strconv.FormatInt(hid, 10)); n != 0 {
				t.Fatalf("registryd_upstream_healthy %v, want 0", n)
			}
			if c.down {
				return
			}

			// Repaired; once the backoff (10s) is over, the next miss is its trial.
			last := paths[5]
			broken.set(last, fakeFile{body: []byte("from the first upstream")})
			e.clock.Advance(11 * time.Second)
			e.get(last).expect(t, 200).expectBody(t, "from the first upstream")
			if st := e.srv.health.Status(hid); st.State != "healthy" {
				t.Fatalf("after a good trial: %+v", st)
			}
			if n := e.metric("registryd_upstream_healthy", "upstream", strconv.FormatInt(hid, 10)); n != 1 {
				t.Fatalf("registryd_upstream_healthy %v, want 1", n)
			}
		})
	}
}

// A revalidation waits for the upstream's answer at most check_timeout:
// with a header timeout of an hour, a hung upstream would otherwise hold
// the stale hit for that hour (and this test past its deadline). One hung
// revalidation says nothing of the upstream's other files: it stays
// healthy; the file's own breaker opens on its second failure, and its
// stale hits then do not ask at all.
func TestRevalidationBoundedByCheckTimeout(t *testing.T) {
	e := newEnv(t, func(o *envOptions) {
		o.upstream.HeaderTimeout = time.Hour
		o.upstream.CheckTimeout = 200 * time.Millisecond
	})
	up := newFakeUpstream(t)
	body := jarBytes(jarPath, 4096)
	up.set(jarPath, fakeFile{body: body, etag: `"v1"`})
	uid := e.upstream(up.URL, hours(1), nil)
	e.get(jarPath).expect(t, 200)
	before, _ := e.entry(uid, "/"+jarPath)

	e.clock.Advance(2 * time.Hour)
	up.set(jarPath, fakeFile{custom: hang})
	for i := 1; i <= 2; i++ {
		e.get(jarPath).expect(t, 200).expectBody(t, string(body))
		if n := e.metric("registryd_cache_lookups_total", "result", "stale"); n != float64(i) {
			t.Fatalf("stale %v, want %d", n, i)
		}
		if st := e.srv.health.Status(uid); st.State != "healthy" {
			t.Fatalf("after %d hung revalidation(s): %+v", i, st)
		}
	}
	if up.calls(jarPath) != 3 {
		t.Fatalf("%d requests for the file, want the fill and two revalidations", up.calls(jarPath))
	}
	// The file's breaker is open: the next stale hit does not ask.
	e.get(jarPath).expect(t, 200).expectBody(t, string(body))
	if up.calls(jarPath) != 3 {
		t.Fatal("a file whose breaker is open was asked to revalidate")
	}
	if n := e.metric("registryd_upstream_skipped_total", "upstream", strconv.FormatInt(uid, 10), "reason", "failing_path"); n != 1 {
		t.Fatalf("skipped for the failing path %v, want 1", n)
	}
	if n := e.metric("registryd_upstream_failing_paths", "upstream", strconv.FormatInt(uid, 10)); n != 1 {
		t.Fatalf("registryd_upstream_failing_paths %v, want 1", n)
	}
	if after, ok := e.entry(uid, "/"+jarPath); !ok || after.SHA256 != before.SHA256 || !after.CheckedAt.Equal(before.CheckedAt) {
		t.Fatalf("the stored copy changed: %+v -> %+v", before, after)
	}
	// Other files of the upstream are fetched as ever.
	other := "org/example/other/1.0/other-1.0.jar"
	up.set(other, fakeFile{body: jarBytes(other, 1024)})
	e.get(other).expect(t, 200).expectBody(t, string(jarBytes(other, 1024)))
	e.noBrokenState()
}

// A path every upstream answered 404 for is answered 404 with no upstream
// request until the mark expires or a cache-delete endpoint runs; a 5xx is
// never remembered as absence.
func TestNegativeCache(t *testing.T) {
	e := newEnv(t)
	a, b := newFakeUpstream(t), newFakeUpstream(t)
	aid := e.upstream(a.URL, nil, nil)
	bid := e.upstream(b.URL, nil, nil)
	missing := "org/example/lib/1.0/lib-1.0.module"

	e.get(missing).expect(t, 404)
	if a.calls(missing) != 1 || b.calls(missing) != 1 {
		t.Fatalf("calls %d, %d", a.calls(missing), b.calls(missing))
	}
	if !e.rememberedAbsent(aid, missing) || !e.rememberedAbsent(bid, missing) {
		t.Fatal("the 404s were not remembered")
	}
	for range 3 {
		e.get(missing).expect(t, 404)
	}
	if a.calls(missing) != 1 || b.calls(missing) != 1 {
		t.Fatalf("remembered 404s asked again: calls %d, %d", a.calls(missing), b.calls(missing))
	}
	if n := e.metric("registryd_cache_lookups_total", "result", "negative"); n != 3 {
		t.Fatalf("negative %v, want 3", n)
	}
	if n := e.metric("registryd_cache_upstream_requests_saved_total"); n != 3 {
		t.Fatalf("saved %v, want 3", n)
	}

	// A cache-delete endpoint of the registry forgets them.
	if _, err := e.st.PurgeRegistryCache(e.registry); err != nil {
		t.Fatal(err)
	}
	e.get(missing).expect(t, 404)
	if a.calls(missing) != 2 || b.calls(missing) != 2 {
		t.Fatalf("after the purge: calls %d, %d", a.calls(missing), b.calls(missing))
	}

	// So does deleting any entry of one upstream, for that upstream only.
	a.set(jarPath, fakeFile{body: jarBytes(jarPath, 100)})
	e.get(jarPath).expect(t, 200)
	if err := e.st.DeleteCacheEntry(aid, "/"+jarPath); err != nil {
		t.Fatal(err)
	}
	e.get(missing).expect(t, 404)
	if a.calls(missing) != 3 || b.calls(missing) != 2 {
		t.Fatalf("after deleting an entry of the first upstream: calls %d, %d", a.calls(missing), b.calls(missing))
	}

	// Published on the second upstream meanwhile: found once the mark
	// expires (upstreams.not_found_ttl, 1h by default).
	b.set(missing, fakeFile{body: []byte("{}"), ctype: "application/json"})
	e.get(missing).expect(t, 404)
	e.clock.Advance(61 * time.Minute)
	e.get(missing).expect(t, 200).expectBody(t, "{}")
	if _, ok := e.entry(bid, "/"+missing); !ok {
		t.Fatal("not stored")
	}

	// Metadata is remembered for 5 minutes only.
	meta := "org/example/other/maven-metadata.xml"
	e.get(meta).expect(t, 404)
	e.clock.Advance(4 * time.Minute)
	e.get(meta).expect(t, 404)
	if a.calls(meta) != 1 {
		t.Fatalf("metadata asked %d times within its TTL", a.calls(meta))
	}
	e.clock.Advance(2 * time.Minute)
	e.get(meta).expect(t, 404)
	if a.calls(meta) != 2 {
		t.Fatalf("metadata asked %d times after its TTL, want 2", a.calls(meta))
	}

	// A 5xx is not absence: asked again (until the path's breaker opens,
	// upstreams.path_failure_threshold, 2), and never answered 404.
	flaky := "org/example/flaky/1.0/flaky-1.0.pom"
	a.set(flaky, fakeFile{status: 500})
	e.get(flaky).expect(t, 502)
	e.get(flaky).expect(t, 502)
	if a.calls(flaky) != 2 {
		t.Fatalf("a 500 was remembered: %d calls", a.calls(flaky))
	}
	e.get(flaky).expect(t, 502)
}

// No more than upstreams.max_concurrent_requests requests are out to one
// upstream; the others queue and are all served. (No slot is reserved for
// small files here: TestSmallFileNotBehindAbandonedDownloads tests that.)
func TestUpstreamRequestCap(t *testing.T) {
	const limit, n = 2, 6
	e := newEnv(t, func(o *envOptions) {
		o.Upstreams.MaxConcurrentRequests = limit
		o.Upstreams.ReservedSmallRequests = -1 // none
	})
	up := newFakeUpstream(t)
	var cur, peak atomic.Int32
	release := make(chan struct{})
	paths := files(n)
	for _, p := range paths {
		body := jarBytes(p, 1024)
		up.set(p, fakeFile{custom: func(w http.ResponseWriter, r *http.Request) {
			c := cur.Add(1)
			defer cur.Add(-1)
			for {
				old := peak.Load()
				if c <= old || peak.CompareAndSwap(old, c) {
					break
				}
			}
			<-release
			w.Write(body)
		}})
	}
	uid := e.upstream(up.URL, nil, nil)
	var wg sync.WaitGroup
	results := make([]resp, n)
	for i, p := range paths {
		wg.Add(1)
		go func() { defer wg.Done(); results[i] = e.getNow(p) }()
	}
	id := strconv.FormatInt(uid, 10)
	waitFor(t, "the cap to be full and the rest queued", func() bool {
		return cur.Load() == limit && e.metric("registryd_upstream_queued_requests", "upstream", id) == n-limit
	})
	close(release)
	wg.Wait()
	for i, r := range results {
		r.expect(t, 200).expectBody(t, string(jarBytes(paths[i], 1024)))
	}
	if peak.Load() != limit {
		t.Fatalf("peak concurrency %d, want %d", peak.Load(), limit)
	}
}

// waitFor polls cond until it holds, failing the test after 10 seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// When the upstreams failed and one asked for a pause (429 or 503 with
// Retry-After), the client is told the same, with the shortest pause.
func TestRetryAfterPassedThrough(t *testing.T) {
	e := newEnv(t)
	a, b := newFakeUpstream(t), newFakeUpstream(t)
	retryAfter := func(code int, secs string) fakeFile {
		return fakeFile{custom: func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Retry-After", secs)
			w.WriteHeader(code)
		}}
	}
	a.set(jarPath, retryAfter(http.StatusTooManyRequests, "120"))
	b.set(jarPath, retryAfter(http.StatusServiceUnavailable, "30"))
	e.upstream(a.URL, nil, nil)
	e.upstream(b.URL, nil, nil)

	r := e.get(jarPath).expect(t, 503)
	if got := r.header.Get("Retry-After"); got != "30" {
		t.Fatalf("Retry-After %q, want 30", got)
	}
	// Both now back off for what they asked: skipped, and the client is
	// still told when to come back.
	e.clock.Advance(10 * time.Second)
	calls := a.total() + b.total()
	r = e.get(jarPath).expect(t, 503)
	if got := r.header.Get("Retry-After"); got != "20" {
		t.Fatalf("Retry-After %q while backing off, want 20", got)
	}
	if a.total()+b.total() != calls {
		t.Fatal("an upstream that asked for a pause was asked again")
	}

	// One upstream only, answering 429: 429.
	e2 := newEnv(t)
	c := newFakeUpstream(t)
	c.set(jarPath, retryAfter(http.StatusTooManyRequests, "7"))
	e2.upstream(c.URL, nil, nil)
	r = e2.get(jarPath).expect(t, 429)
	if got := r.header.Get("Retry-After"); got != "7" {
		t.Fatalf("Retry-After %q, want 7", got)
	}
}

// A client that accepts application/problem+json gets RFC 9457 documents
// naming what each upstream said; others keep GitLab's bodies.
func TestProblemDetails(t *testing.T) {
	e := newEnv(t)
	a, b := newFakeUpstream(t), newFakeUpstream(t)
	a.set(jarPath, fakeFile{status: 500})
	aid := e.upstream(a.URL, nil, nil)
	bid := e.upstream(b.URL, nil, nil)

	plain := e.get(jarPath).expect(t, 502)
	if ct := plain.header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("without Accept: Content-Type %q", ct)
	}
	plain.expectMessage(t, "message", "502 Bad Gateway - Upstream not available: upstream "+strconv.FormatInt(aid, 10)+": answered 500 Internal Server Error")

	r := e.get(jarPath, "Accept", "application/problem+json, application/json;q=0.9").expect(t, 502)
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q", ct)
	}
	var doc problemDoc
	if err := json.Unmarshal(r.body, &doc); err != nil {
		t.Fatalf("%v: %s", err, r.body)
	}
	want := []problemUpstream{
		{ID: aid, Result: "failed", Reason: "answered 500 Internal Server Error"},
		{ID: bid, Result: "not_found", Reason: "not found (remembered)"},
	}
	if doc.Type != "about:blank" || doc.Title != "Bad Gateway" || doc.Status != 502 || doc.Detail == "" ||
		len(doc.Upstreams) != 2 || doc.Upstreams[0] != want[0] || doc.Upstreams[1] != want[1] {
		t.Fatalf("problem %+v", doc)
	}

	// Errors before resolution are problems too.
	r = e.do(http.MethodGet, "/"+strconv.FormatInt(e.registry, 10)+"/"+jarPath, nil, "Accept", "application/problem+json")
	r.expect(t, 401)
	if err := json.Unmarshal(r.body, &doc); err != nil || doc.Status != 401 || doc.Title != "Unauthorized" || doc.Detail != "401 Unauthorized" {
		t.Fatalf("401 problem %+v (%v)", doc, err)
	}
}

// Downloads are counted by registry, upstream, kind and result; the series
// of a deleted upstream go with it, and info series name the ids.
func TestDownloadMetrics(t *testing.T) {
	e := newEnv(t)
	up := newFakeUpstream(t)
	body := jarBytes(jarPath, 200<<10)
	up.set(jarPath, fakeFile{body: body, fault: faultHold})
	uid := e.upstream(up.URL, nil, nil)
	reg, id := strconv.FormatInt(e.registry, 10), strconv.FormatInt(uid, 10)

	for _, r := range e.herd(up, jarPath, 3) {
		r.expect(t, 200)
	}
	e.waitFills()
	e.get(jarPath).expect(t, 200)
	e.get(jarPath+".sha1").expect(t, 200)
	e.get("org/none/x/1/x-1.pom").expect(t, 404)
	e.get("org/none/x/1/x-1.pom").expect(t, 404)

	for _, c := range []struct {
		kind, result, upstream string
		want                   float64
	}{
		{"artifact", "miss", id, 1}, {"artifact", "join", id, 2}, {"artifact", "hit", id, 1},
		{"checksum", "hit", id, 1}, {"artifact", "miss", "", 1}, {"artifact", "negative", "", 1},
	} {
		if n := e.metric("registryd_cache_lookups_total", "registry", reg, "upstream", c.upstream, "kind", c.kind, "result", c.result); n != c.want {
			t.Errorf("lookups{kind=%s,result=%s,upstream=%q} = %v, want %v", c.kind, c.result, c.upstream, n, c.want)
		}
	}
	if n := e.metric("registryd_cache_upstream_requests_saved_total", "registry", reg); n != 5 {
		t.Errorf("saved %v, want 5 (2 joins, 2 hits, 1 negative)", n)
	}
	if n := e.metric("registryd_proxy_served_bytes_total", "registry", reg, "result", "join"); n != float64(2*len(body)) {
		t.Errorf("join bytes %v, want %d", n, 2*len(body))
	}
	// The upstream's own count of the bytes of its files served.
	if n := e.metric("registryd_upstream_served_bytes_total", "upstream", id, "result", "join"); n != float64(2*len(body)) {
		t.Errorf("upstream join bytes %v, want %d", n, 2*len(body))
	}
	if n := e.metric("registryd_upstream_served_bytes_total", "upstream", id, "result", "miss"); n != float64(len(body)) {
		t.Errorf("upstream miss bytes %v, want %d", n, len(body))
	}
	if n := e.metric("registryd_upstream_info", "upstream", id, "name", up.URL); n != 1 {
		t.Errorf("upstream info %v", n)
	}
	if n := e.metric("registryd_registry_info", "registry", reg, "name", "main"); n != 1 {
		t.Errorf("registry info %v", n)
	}
	e.lint()

	if err := e.st.DeleteUpstream(uid); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"registryd_cache_lookups_total", "registryd_upstream_requests_total",
		"registryd_upstream_response_duration_seconds", "registryd_upstream_info", "registryd_upstream_healthy",
		"registryd_upstream_served_bytes_total"} {
		if e.hasSeries(name, "upstream", id) {
			t.Errorf("%s still has series of the deleted upstream", name)
		}
	}
	if _, err := e.st.CreateRegistry(e.group.ID, "other", ""); err != nil {
		t.Fatal(err)
	}
	if err := e.st.DeleteRegistry(e.registry, nil); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"registryd_cache_lookups_total", "registryd_proxy_served_bytes_total",
		"registryd_cache_upstream_requests_saved_total", "registryd_registry_info"} {
		if e.hasSeries(name, "registry", reg) {
			t.Errorf("%s still has series of the deleted registry", name)
		}
	}
}

// hasSeries reports whether a gathered family has a series with label=value.
func (e *env) hasSeries(name, label, value string) bool {
	e.t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		e.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label && lp.GetValue() == value {
					return true
				}
			}
		}
	}
	return false
}

// An upstream's own not_found_cache_minutes overrides the global TTL; 0
// remembers nothing for that upstream.
func TestNegativeCacheOverride(t *testing.T) {
	e := newEnv(t)
	a, b := newFakeUpstream(t), newFakeUpstream(t)
	zero, two := 0, 2
	for _, u := range []struct {
		url     string
		minutes *int
	}{{a.URL, &zero}, {b.URL, &two}} {
		if _, err := e.st.CreateUpstream(e.registry, store.NewUpstream{URL: u.url, Name: u.url, NotFoundCacheMinutes: u.minutes}); err != nil {
			t.Fatal(err)
		}
	}
	missing := "org/example/lib/1.0/lib-1.0.module"
	e.get(missing).expect(t, 404)
	e.get(missing).expect(t, 404)
	if a.calls(missing) != 2 || b.calls(missing) != 1 {
		t.Fatalf("calls %d, %d; want 2 (remembers nothing), 1", a.calls(missing), b.calls(missing))
	}
	e.clock.Advance(3 * time.Minute)
	e.get(missing).expect(t, 404)
	if b.calls(missing) != 2 {
		t.Fatalf("asked %d times after its own TTL, want 2", b.calls(missing))
	}
}

// rememberedAbsent reports whether the env's proxy remembers that upstream
// up does not have rel (the negative cache).
func (e *env) rememberedAbsent(up int64, rel string) bool {
	m, ok := e.srv.marks.recall(e.st, up, rel, e.clock.Now())
	return ok && m.refused == nil
}
