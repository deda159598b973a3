package proxy

import (
	"context"
	"crypto/md5"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

const jarPath = "org/example/lib/1.0/lib-1.0.jar"

func digests(b []byte) (md5hex, sha1hex, sha256hex, sha512hex string) {
	m, s1, s2, s5 := md5.Sum(b), sha1.Sum(b), sha256.Sum256(b), sha512.Sum512(b)
	return hex.EncodeToString(m[:]), hex.EncodeToString(s1[:]), hex.EncodeToString(s2[:]), hex.EncodeToString(s5[:])
}

func TestMissThenHit(t *testing.T) {
	e := newEnv(t)
	up := newFakeUpstream(t)
	body := jarBytes(jarPath, 100<<10)
	up.set(jarPath, fakeFile{body: body, etag: `"v1"`, ctype: "application/java-archive"})
	uid := e.upstream(up.URL, nil, nil)
	m5, s1, s256, s512 := digests(body)

	miss := e.get(jarPath).expect(t, 200).expectBody(t, string(body))
	if miss.header.Get("Content-Length") != strconv.Itoa(len(body)) {
		t.Errorf("miss Content-Length = %q", miss.header.Get("Content-Length"))
	}
	if got := miss.header.Get("Content-Disposition"); got != `attachment; filename="lib-1.0.jar"` {
		t.Errorf("miss Content-Disposition = %q", got)
	}
	e.waitFills()
	ce, ok := e.entry(uid, "/"+jarPath)
	if !ok {
		t.Fatal("no cache entry after the miss")
	}
	if ce.Size != int64(len(body)) || ce.MD5 != m5 || ce.SHA1 != s1 || ce.SHA256 != s256 || ce.SHA512 != s512 ||
		ce.ContentType != "application/java-archive" || ce.ETag != `"v1"` || !ce.CheckedAt.Equal(e.clock.Now()) {
		t.Fatalf("entry = %+v", ce)
	}
	raw, err := os.ReadFile(e.blobs.Path(s256))
	if err != nil || string(raw) != string(body) {
		t.Fatalf("blob file: %v (%d bytes)", err, len(raw))
	}

	for _, hdr := range [][]string{nil, {"Cache-Control", "no-cache", "Pragma", "no-cache"}} {
		hit := e.get(jarPath, hdr...).expect(t, 200).expectBody(t, string(body))
		want := map[string]string{
			"Content-Type":           "application/java-archive",
			"Content-Length":         strconv.Itoa(len(body)),
			"X-Checksum-Sha1":        s1,
			"X-Checksum-Md5":         m5,
			"Etag":                   `"` + s256 + `"`,
			"Last-Modified":          ce.UpdatedAt.UTC().Format(http.TimeFormat),
			"Content-Disposition":    `attachment; filename="lib-1.0.jar"`,
			"X-Content-Type-Options": "nosniff",
			"Accept-Ranges":          "bytes",
		}
		for k, v := range want {
			if got := hit.header.Get(k); got != v {
				t.Errorf("hit %s = %q, want %q", k, got, v)
			}
		}
		h := e.head(jarPath, hdr...).expect(t, 200)
		if len(h.body) != 0 || h.header.Get("Content-Length") != strconv.Itoa(len(body)) ||
			h.header.Get("X-Checksum-Sha1") != s1 {
			t.Errorf("HEAD: %d body bytes, headers %v", len(h.body), h.header)
		}
	}
	if n := up.calls(jarPath); n != 1 {
		t.Fatalf("upstream GETs = %d, want 1 (hits, even with Cache-Control: no-cache, must not reach it)", n)
	}
	if e.metric("registryd_cache_lookups_total", "result", "hit") != 4 ||
		e.metric("registryd_cache_lookups_total", "result", "miss") != 1 {
		t.Errorf("lookups: hit %v miss %v", e.metric("registryd_cache_lookups_total", "result", "hit"),
			e.metric("registryd_cache_lookups_total", "result", "miss"))
	}
	// Downloads are counted in memory and written by the flusher.
	if err := e.srv.FlushDownloads(); err != nil {
		t.Fatal(err)
	}
	ce, _ = e.entry(uid, "/"+jarPath)
	if ce.DownloadsCount != 3 || ce.DownloadedAt == nil {
		t.Fatalf("downloads_count = %d (downloaded_at %v), want 3: the miss and two GET hits", ce.DownloadsCount, ce.DownloadedAt)
	}
	e.noBrokenState()
	e.lint()
}

func TestIfNoneMatch(t *testing.T) {
	e := newEnv(t)
	up := newFakeUpstream(t)
	up.set(jarPath, fakeFile{body: []byte("jar")})
	e.upstream(up.URL, nil, nil)
	e.get(jarPath).expect(t, 200)
	etag := e.get(jarPath).expect(t, 200).header.Get("Etag")
	r := e.get(jarPath, "If-None-Match", `"nope", `+etag)
	if r.status != http.StatusNotModified || len(r.body) != 0 {
		t.Fatalf("If-None-Match with our ETag: %d %q", r.status, r.body)
	}
	e.get(jarPath, "If-None-Match", `"nope"`).expect(t, 200).expectBody(t, "jar")
}

func TestUpstreamOrder(t *testing.T) {
	body1, body2 := []byte("from the first"), []byte("from the second")
	cases := []struct {
		name       string
		first      *fakeFile // nil: 404
		firstDown  bool
		second     *fakeFile
		wantStatus int
		wantBody   string
		wantMsg    string
	}{
		{name: "first wins", first: &fakeFile{body: body1}, second: &fakeFile{body: body2}, wantStatus: 200, wantBody: string(body1)},
		{name: "second when the first lacks it", second: &fakeFile{body: body2}, wantStatus: 200, wantBody: string(body2)},
		{name: "second when the first is down", firstDown: true, second: &fakeFile{body: body2}, wantStatus: 200, wantBody: string(body2)},
		{name: "second when the first fails", first: &fakeFile{status: 503}, second: &fakeFile{body: body2}, wantStatus: 200, wantBody: string(body2)},
		{name: "none has it", wantStatus: 404, wantMsg: "404 File not found on any upstream Not Found"},
		{name: "all failing", first: &fakeFile{status: 500}, second: &fakeFile{status: 401}, wantStatus: 502,
			wantMsg: "502 Bad Gateway - Upstream not available: upstream 1: answered 500 Internal Server Error; upstream 2: answered 401 Unauthorized"},
		{name: "one failing, the other without it", firstDown: true, wantStatus: 502,
			wantMsg: "502 Bad Gateway - Upstream not available: upstream 1: Connection refused"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			u1, u2 := newFakeUpstream(t), newFakeUpstream(t)
			if c.first != nil {
				u1.set(jarPath, *c.first)
			}
			if c.second != nil {
				u2.set(jarPath, *c.second)
			}
			url1 := u1.URL
			if c.firstDown {
				url1 = downURL(t)
			}
			id1, id2 := e.upstream(url1, nil, nil), e.upstream(u2.URL, nil, nil)
			r := e.get(jarPath)
			if r.status != c.wantStatus {
				t.Fatalf("status %d, want %d: %s", r.status, c.wantStatus, r.body)
			}
			if c.wantBody != "" {
				r.expectBody(t, c.wantBody)
			}
			if c.wantMsg != "" {
				r.expectMessage(t, "message", c.wantMsg)
			}
			e.waitFills()
			_, cached1 := e.entry(id1, "/"+jarPath)
			_, cached2 := e.entry(id2, "/"+jarPath)
			if cached1 != (c.wantBody == string(body1)) || cached2 != (c.wantBody == string(body2)) {
				t.Fatalf("cached on first %v, on second %v", cached1, cached2)
			}
			e.noBrokenState()
		})
	}
}

// TestFaults drives a misbehaving upstream: each fault shows what the client
// gets, that nothing broken is cached, and that the next request, with the
// fault gone, fetches the file whole.
func TestFaults(t *testing.T) {
	body := jarBytes(jarPath, 64<<10)
	cases := []struct {
		name string
		file fakeFile
		// wantStatus is the status the client sees; short means the body
		// must end early (the headers promised more).
		wantStatus int
		short      bool
		wantMsg    string
	}{
		{name: "truncated chunked body", file: fakeFile{body: body, fault: faultTruncated}, wantStatus: 200, short: true},
		{name: "connection reset mid-body", file: fakeFile{body: body, fault: faultReset}, wantStatus: 200, short: true},
		{name: "Content-Length larger than the body", file: fakeFile{body: body, fault: faultWrongLen}, wantStatus: 200, short: true},
		{name: "503", file: fakeFile{status: 503}, wantStatus: 502,
			wantMsg: "502 Bad Gateway - Upstream not available: upstream 1: answered 503 Service Unavailable"},
		{name: "401 from the upstream", file: fakeFile{status: 401}, wantStatus: 502,
			wantMsg: "502 Bad Gateway - Upstream not available: upstream 1: answered 401 Unauthorized"},
		{name: "redirect loop", file: fakeFile{fault: faultRedirect}, wantStatus: 502,
			wantMsg: "502 Bad Gateway - Upstream not available: upstream 1: Too many redirects"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			up := newFakeUpstream(t)
			up.set(jarPath, c.file)
			uid := e.upstream(up.URL, nil, nil)
			r := e.get(jarPath)
			if r.status != c.wantStatus {
				t.Fatalf("status %d, want %d: %q", r.status, c.wantStatus, truncate(r.body))
			}
			if c.short {
				if r.readErr == nil {
					t.Fatalf("the body (%d bytes) ended cleanly: a broken fill must never look complete", len(r.body))
				}
				if cl, _ := strconv.Atoi(r.header.Get("Content-Length")); cl != 0 && len(r.body) >= cl {
					t.Fatalf("got %d bytes of %d announced and no error", len(r.body), cl)
				}
			}
			if c.wantMsg != "" {
				r.expectMessage(t, "message", c.wantMsg)
			}
			e.waitFills()
			if _, ok := e.entry(uid, "/"+jarPath); ok {
				t.Fatal("a broken fill left a cache entry")
			}
			e.noBrokenState()

			up.set(jarPath, fakeFile{body: body})
			before := up.calls(jarPath)
			e.get(jarPath).expect(t, 200).expectBody(t, string(body))
			if up.calls(jarPath) != before+1 {
				t.Fatal("the retry did not refetch")
			}
			e.waitFills()
			if ce, ok := e.entry(uid, "/"+jarPath); !ok || ce.Size != int64(len(body)) {
				t.Fatalf("after the retry: entry %+v, %v", ce, ok)
			}
		})
	}
}

func TestUpstreamDown(t *testing.T) {
	e := newEnv(t)
	e.upstream(downURL(t), nil, nil)
	r := e.get(jarPath)
	r.expect(t, 502)
	r.expectMessage(t, "message", "502 Bad Gateway - Upstream not available: upstream 1: Connection refused")
	e.noBrokenState()
	if e.metric("registryd_upstream_requests_total", "upstream", "1", "outcome", "network_error") != 1 {
		t.Error("the failure was not counted")
	}
}

func TestTooLarge(t *testing.T) {
	e := newEnv(t, func(o *envOptions) { o.Cache.MaxFileBytes = 1 << 10 })
	up := newFakeUpstream(t)
	up.set("big/1/big-1.jar", fakeFile{body: jarBytes("big", 4<<10)})
	up.set("chunked/1/chunked-1.jar", fakeFile{body: jarBytes("chunked", 64<<10), chunked: true})
	up.set("chunked/2/chunked-2.jar", fakeFile{body: jarBytes("chunked", 4<<10), chunked: true})
	up.set("small/1/small-1.jar", fakeFile{body: []byte("small enough")})
	uid := e.upstream(up.URL, nil, nil)

	r := e.get("big/1/big-1.jar")
	r.expect(t, 502)
	r.expectMessage(t, "message", "502 Bad Gateway - Upstream not available: upstream 1: file is larger than the cache accepts")

	// Without a Content-Length the size shows only on the way: past the
	// bytes read before answering, the answer has started, so it must end
	// short; within them, it is refused before anything is answered.
	c := e.get("chunked/1/chunked-1.jar")
	if c.status != 200 || c.readErr == nil {
		t.Fatalf("chunked oversize: status %d, read error %v", c.status, c.readErr)
	}
	e.get("chunked/2/chunked-2.jar").expectMessage(t, "message",
		"502 Bad Gateway - Upstream not available: upstream 1: file is larger than the cache accepts")
	e.get("small/1/small-1.jar").expect(t, 200)
	e.waitFills()
	for _, p := range []string{"/big/1/big-1.jar", "/chunked/1/chunked-1.jar", "/chunked/2/chunked-2.jar"} {
		if _, ok := e.entry(uid, p); ok {
			t.Fatalf("%s was cached", p)
		}
	}
	e.noBrokenState()
}

// TestStreamsWhileFilling shows the client getting the first half of a body
// while the upstream still holds back the second.
func TestStreamsWhileFilling(t *testing.T) {
	e := newEnv(t)
	up := newFakeUpstream(t)
	body := jarBytes(jarPath, 256<<10)
	up.set(jarPath, fakeFile{body: body, fault: faultHold})
	uid := e.upstream(up.URL, nil, nil)

	res := e.startHeld(jarPath)
	defer res.Body.Close()
	if res.StatusCode != 200 || res.ContentLength != int64(len(body)) {
		t.Fatalf("status %d, length %d", res.StatusCode, res.ContentLength)
	}
	first := make([]byte, len(body)/2)
	if _, err := io.ReadFull(res.Body, first); err != nil {
		t.Fatalf("reading the first half while the upstream holds the rest: %v", err)
	}
	if _, ok := e.entry(uid, "/"+jarPath); ok {
		t.Fatal("entry written before the body was complete")
	}
	up.releaseHeld()
	rest, err := io.ReadAll(res.Body)
	if err != nil || string(first)+string(rest) != string(body) {
		t.Fatalf("body: %v, %d bytes", err, len(first)+len(rest))
	}
	e.waitFills()
	if _, ok := e.entry(uid, "/"+jarPath); !ok {
		t.Fatal("no entry after the fill")
	}
}

// TestConcurrentMisses: 16 requests for one uncached file share one upstream GET.
func TestConcurrentMisses(t *testing.T) {
	e := newEnv(t)
	up := newFakeUpstream(t)
	body := jarBytes(jarPath, 128<<10)
	up.set(jarPath, fakeFile{body: body, fault: faultHold})
	e.upstream(up.URL, nil, nil)

	const n = 16
	results := e.herd(up, jarPath, n)
	for i, r := range results {
		if r.readErr != nil || r.status != 200 || string(r.body) != string(body) {
			t.Fatalf("request %d: status %d, %d bytes, %v", i, r.status, len(r.body), r.readErr)
		}
	}
	if got := up.calls(jarPath); got != 1 {
		t.Fatalf("upstream GETs = %d, want exactly 1", got)
	}
	if got := e.metric("registryd_cache_fill_joins_total"); got != n-1 {
		t.Fatalf("fill joins = %v, want %d", got, n-1)
	}
}

func TestChecksumSidecars(t *testing.T) {
	e := newEnv(t)
	up := newFakeUpstream(t)
	body := []byte("<project>lib</project>")
	pom := "org/example/lib/1.0/lib-1.0.pom"
	up.set(pom, fakeFile{body: body})
	// The upstream's own sidecar is wrong on purpose: it must never be used.
	up.set(pom+".sha1", fakeFile{body: []byte("0000000000000000000000000000000000000000")})
	uid := e.upstream(up.URL, nil, nil)
	m5, s1, s256, s512 := digests(body)

	for _, c := range []struct{ ext, want string }{{".sha1", s1}, {".md5", m5}, {".sha256", s256}, {".sha512", s512}} {
		r := e.get(pom+c.ext).expect(t, 200).expectBody(t, c.want)
		if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
			t.Errorf("%s Content-Type = %q", c.ext, ct)
		}
		if h := e.head(pom+c.ext).expect(t, 200); h.header.Get("Content-Length") != strconv.Itoa(len(c.want)) || len(h.body) != 0 {
			t.Errorf("HEAD %s: %v", c.ext, h.header)
		}
	}
	if up.calls(pom) != 1 || up.calls(pom+".sha1") != 0 {
		t.Fatalf("upstream GETs: pom %d, pom.sha1 %d; want the parent once and never the sidecar",
			up.calls(pom), up.calls(pom+".sha1"))
	}
	if _, ok := e.entry(uid, "/"+pom+".sha1"); ok {
		t.Fatal("a sidecar became a cache entry of its own")
	}
	e.get("org/example/lib/1.0/missing.pom.sha1").expect(t, 404)
}

func TestRangeRequests(t *testing.T) {
	e := newEnv(t)
	up := newFakeUpstream(t)
	body := []byte("0123456789abcdefghij")
	up.set(jarPath, fakeFile{body: body})
	e.upstream(up.URL, nil, nil)
	e.get(jarPath).expect(t, 200)
	etag := e.get(jarPath).header.Get("Etag")

	cases := []struct {
		rng, ifRange string
		status       int
		body, cr     string
	}{
		{rng: "bytes=0-3", status: 206, body: "0123", cr: "bytes 0-3/20"},
		{rng: "bytes=10-", status: 206, body: "abcdefghij", cr: "bytes 10-19/20"},
		{rng: "bytes=-5", status: 206, body: "fghij", cr: "bytes 15-19/20"},
		{rng: "bytes=15-100", status: 206, body: "fghij", cr: "bytes 15-19/20"},
		{rng: "bytes=20-", status: 416, cr: "bytes */20"},
		{rng: "bytes=0-1,4-5", status: 200, body: string(body)},
		{rng: "pages=1-2", status: 200, body: string(body)},
		{rng: "bytes=0-3", ifRange: `"stale"`, status: 200, body: string(body)},
		{rng: "bytes=0-3", ifRange: etag, status: 206, body: "0123", cr: "bytes 0-3/20"},
	}
	for _, c := range cases {
		t.Run(c.rng+c.ifRange, func(t *testing.T) {
			hdr := []string{"Range", c.rng}
			if c.ifRange != "" {
				hdr = append(hdr, "If-Range", c.ifRange)
			}
			r := e.get(jarPath, hdr...).expect(t, c.status)
			if c.status != 416 {
				r.expectBody(t, c.body)
			}
			if got := r.header.Get("Content-Range"); got != c.cr {
				t.Fatalf("Content-Range = %q, want %q", got, c.cr)
			}
		})
	}
}

func TestRevalidation(t *testing.T) {
	e := newEnv(t)
	up := newFakeUpstream(t)
	up.set(jarPath, fakeFile{body: []byte("version 1"), etag: `"v1"`})
	uid := e.upstream(up.URL, hours(24), hours(1))
	e.get(jarPath).expect(t, 200).expectBody(t, "version 1")

	e.clock.Advance(23 * time.Hour)
	e.get(jarPath).expect(t, 200).expectBody(t, "version 1")
	if up.calls(jarPath) != 1 {
		t.Fatal("a fresh entry was revalidated")
	}

	// Stale, unchanged: one conditional GET, 304, served from the cache.
	e.clock.Advance(2 * time.Hour)
	e.get(jarPath).expect(t, 200).expectBody(t, "version 1")
	if up.calls(jarPath) != 2 || up.lastIfNoneMatch(jarPath) != `"v1"` {
		t.Fatalf("revalidation: %d GETs, If-None-Match %q", up.calls(jarPath), up.lastIfNoneMatch(jarPath))
	}
	ce, _ := e.entry(uid, "/"+jarPath)
	if !ce.CheckedAt.Equal(e.clock.Now()) {
		t.Fatalf("upstream_checked_at = %v, want %v", ce.CheckedAt, e.clock.Now())
	}
	oldBlob := e.blobs.Path(ce.SHA256)
	if e.metric("registryd_cache_lookups_total", "result", "revalidated") != 1 {
		t.Error("revalidation not counted")
	}
	e.get(jarPath).expect(t, 200)
	if up.calls(jarPath) != 2 {
		t.Fatal("the touched entry was not fresh again")
	}

	// Stale, changed: the new body streams and replaces the entry.
	up.set(jarPath, fakeFile{body: []byte("version 2"), etag: `"v2"`})
	e.clock.Advance(25 * time.Hour)
	e.get(jarPath).expect(t, 200).expectBody(t, "version 2")
	e.waitFills()
	ce, _ = e.entry(uid, "/"+jarPath)
	if ce.ETag != `"v2"` || ce.Size != 9 {
		t.Fatalf("entry after the change: %+v", ce)
	}
	if _, err := os.Stat(oldBlob); err == nil {
		t.Fatal("the replaced blob file was kept")
	}
	e.get(jarPath).expect(t, 200).expectBody(t, "version 2")
	if up.calls(jarPath) != 3 {
		t.Fatalf("upstream GETs = %d, want 3", up.calls(jarPath))
	}
	e.noBrokenState()
}

func TestRevalidationWithoutETagRefetches(t *testing.T) {
	e := newEnv(t)
	up := newFakeUpstream(t)
	up.set(jarPath, fakeFile{body: []byte("no etag")})
	uid := e.upstream(up.URL, hours(1), nil)
	e.get(jarPath).expect(t, 200)
	e.clock.Advance(2 * time.Hour)
	e.get(jarPath).expect(t, 200).expectBody(t, "no etag")
	if up.calls(jarPath) != 2 || up.lastIfNoneMatch(jarPath) != "" {
		t.Fatalf("GETs %d, If-None-Match %q", up.calls(jarPath), up.lastIfNoneMatch(jarPath))
	}
	e.waitFills()
	if ce, _ := e.entry(uid, "/"+jarPath); !ce.CheckedAt.Equal(e.clock.Now()) {
		t.Fatalf("checked_at %v", ce.CheckedAt)
	}
}

func TestStaleIfError(t *testing.T) {
	cases := []struct {
		name   string
		break_ func(up *fakeUpstream)
	}{
		{"503", func(up *fakeUpstream) { up.set(jarPath, fakeFile{status: 503}) }},
		{"401", func(up *fakeUpstream) { up.set(jarPath, fakeFile{status: 401}) }},
		{"connection reset", func(up *fakeUpstream) {
			up.set(jarPath, fakeFile{body: []byte("half of a new version"), fault: faultReset})
		}},
		{"upstream down", func(up *fakeUpstream) { up.srv.Close() }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			up := newFakeUpstream(t)
			up.set(jarPath, fakeFile{body: []byte("cached copy"), etag: `"v1"`})
			uid := e.upstream(up.URL, hours(1), nil)
			e.get(jarPath).expect(t, 200)
			c.break_(up)
			e.clock.Advance(2 * time.Hour)
			// A revalidation answers nothing before a new body is whole and
			// verified: a reset mid-body is a failure like the others.
			e.get(jarPath).expect(t, 200).expectBody(t, "cached copy")
			if e.metric("registryd_cache_lookups_total", "result", "stale") != 1 {
				t.Error("stale_served not counted")
			}
			e.waitFills()
			ce, ok := e.entry(uid, "/"+jarPath)
			if !ok || ce.ETag != `"v1"` {
				t.Fatalf("the stale entry was lost: %+v %v", ce, ok)
			}
			e.noBrokenState()
		})
	}
}

func TestRevalidationNotFoundFallsThrough(t *testing.T) {
	e := newEnv(t)
	u1, u2 := newFakeUpstream(t), newFakeUpstream(t)
	u1.set(jarPath, fakeFile{body: []byte("first"), etag: `"a"`})
	id1 := e.upstream(u1.URL, hours(1), nil)
	id2 := e.upstream(u2.URL, hours(1), nil)
	e.get(jarPath).expect(t, 200).expectBody(t, "first")

	u1.del(jarPath)
	u2.set(jarPath, fakeFile{body: []byte("second")})
	e.clock.Advance(2 * time.Hour)
	e.get(jarPath).expect(t, 200).expectBody(t, "second")
	e.waitFills()
	if _, ok := e.entry(id2, "/"+jarPath); !ok {
		t.Fatal("the second upstream's copy was not cached")
	}
	// The entry its upstream no longer has is gone, or it would shadow the
	// second upstream's on every request.
	if _, ok := e.entry(id1, "/"+jarPath); ok {
		t.Fatal("the first upstream's entry is still there")
	}
	calls := u1.total() + u2.total()
	e.get(jarPath).expect(t, 200).expectBody(t, "second")
	if u1.total()+u2.total() != calls {
		t.Fatal("not a hit")
	}
	u2.del(jarPath)
	e.clock.Advance(2 * time.Hour)
	e.get(jarPath).expect(t, 404)
}

func TestMetadataFreshness(t *testing.T) {
	e := newEnv(t)
	up := newFakeUpstream(t)
	meta := "org/example/lib/maven-metadata.xml"
	up.set(meta, fakeFile{body: []byte("<metadata/>"), etag: `"m1"`})
	up.set(jarPath, fakeFile{body: []byte("jar"), etag: `"j1"`})
	e.upstream(up.URL, hours(0), hours(1)) // artifacts never stale; metadata for an hour

	e.get(meta).expect(t, 200)
	e.get(jarPath).expect(t, 200)
	e.clock.Advance(1000 * time.Hour)
	e.get(jarPath).expect(t, 200)
	e.get(jarPath+".sha1").expect(t, 200)
	if up.calls(jarPath) != 1 {
		t.Fatal("cache_validity_hours 0 must mean never re-check")
	}
	e.get(meta).expect(t, 200)
	if up.calls(meta) != 2 {
		t.Fatalf("stale metadata GETs = %d, want 2", up.calls(meta))
	}
	// The sidecar of stale metadata revalidates the metadata first.
	e.clock.Advance(2 * time.Hour)
	up.set(meta, fakeFile{body: []byte("<metadata>new</metadata>"), etag: `"m2"`})
	_, s1, _, _ := digests([]byte("<metadata>new</metadata>"))
	e.get(meta+".sha1").expect(t, 200).expectBody(t, s1)
	if up.calls(meta) != 3 || up.calls(meta+".sha1") != 0 {
		t.Fatalf("GETs: metadata %d, its sidecar %d", up.calls(meta), up.calls(meta+".sha1"))
	}
}

func TestHeadOnAMiss(t *testing.T) {
	e := newEnv(t)
	up := newFakeUpstream(t)
	up.set(jarPath, fakeFile{body: []byte("jar body")})
	up.set("chunked/1/chunked-1.pom", fakeFile{body: []byte("<project/>"), chunked: true})
	e.upstream(up.URL, nil, nil)
	h := e.head(jarPath).expect(t, 200)
	if h.header.Get("Content-Length") != "8" || len(h.body) != 0 {
		t.Fatalf("HEAD miss: %v", h.header)
	}
	h = e.head("chunked/1/chunked-1.pom").expect(t, 200)
	if h.header.Get("Content-Length") != "10" {
		t.Fatalf("HEAD of a chunked miss: Content-Length %q", h.header.Get("Content-Length"))
	}
	e.waitFills()
	e.get(jarPath).expect(t, 200).expectBody(t, "jar body")
	if up.calls(jarPath) != 1 {
		t.Fatal("the GET after a HEAD fetched again")
	}
}

func TestBlobGoneIsRefetched(t *testing.T) {
	e := newEnv(t)
	up := newFakeUpstream(t)
	up.set(jarPath, fakeFile{body: []byte("precious")})
	uid := e.upstream(up.URL, nil, nil)
	e.get(jarPath).expect(t, 200)
	e.waitFills()
	ce, _ := e.entry(uid, "/"+jarPath)
	if err := os.Remove(e.blobs.Path(ce.SHA256)); err != nil {
		t.Fatal(err)
	}
	e.get(jarPath).expect(t, 200).expectBody(t, "precious")
	e.waitFills()
	if _, err := os.Stat(e.blobs.Path(ce.SHA256)); err != nil {
		t.Fatal("the refetch did not restore the blob")
	}
}

func TestCollectorRemovesDeletedEntries(t *testing.T) {
	e := newEnv(t)
	up := newFakeUpstream(t)
	up.set(jarPath, fakeFile{body: []byte("to be purged")})
	uid := e.upstream(up.URL, nil, nil)
	e.get(jarPath).expect(t, 200)
	e.waitFills()
	ce, _ := e.entry(uid, "/"+jarPath)
	if _, err := e.st.PurgeUpstreamCache(uid); err != nil {
		t.Fatal(err)
	}
	// Pending destruction: never served, so the next GET is a miss.
	e.get(jarPath).expect(t, 200)
	if up.calls(jarPath) != 2 {
		t.Fatal("a purged entry was served")
	}
	e.waitFills()
	if _, err := e.srv.CollectOnce(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(e.blobs.Path(ce.SHA256)); err != nil {
		t.Fatal("the collector removed a blob the refetched entry uses")
	}
	if _, err := e.st.PurgeUpstreamCache(uid); err != nil {
		t.Fatal(err)
	}
	r, err := e.srv.CollectOnce()
	if err != nil || r.Entries != 1 || r.BlobsRemoved != 1 || r.BytesFreed != 12 {
		t.Fatalf("CollectOnce = %+v, %v", r, err)
	}
	if _, err := os.Stat(e.blobs.Path(ce.SHA256)); err == nil {
		t.Fatal("the blob outlived its last entry")
	}
	if e.metric("registryd_collector_freed_bytes_total") != 12 || e.metric("registryd_collector_runs_total") != 2 {
		t.Error("collector metrics")
	}
	e.lint()
}

// startHeld starts a GET of a held file and returns its response once the
// headers are in.
func (e *env) startHeld(path string) *http.Response {
	e.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, e.base+"/"+strconv.FormatInt(e.registry, 10)+"/"+path, nil)
	req.Header.Set("Private-Token", rootToken)
	res, err := e.client.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	return res
}

// TestStoreFailureAfterCompleteBody: every byte arrived from the upstream,
// but the entry cannot be written (the upstream was deleted meanwhile).
// Since the last byte is released once the body is complete on disk rather
// than once it is published, the client's response is complete and correct
// (this test asserted a short body before that change); the failure is
// logged and counted, and neither an entry nor a blob stays.
func TestStoreFailureAfterCompleteBody(t *testing.T) {
	e := newEnv(t)
	up := newFakeUpstream(t)
	body := jarBytes(jarPath, 32<<10)
	up.set(jarPath, fakeFile{body: body, fault: faultHold})
	uid := e.upstream(up.URL, nil, nil)
	res := e.startHeld(jarPath)
	defer res.Body.Close()
	<-up.midBody
	if err := e.st.DeleteUpstream(uid); err != nil {
		t.Fatal(err)
	}
	up.releaseHeld()
	got, err := io.ReadAll(res.Body)
	if err != nil || string(got) != string(body) {
		t.Fatalf("read %d of %d bytes, error %v: the body arrived whole, so must the response", len(got), len(body), err)
	}
	e.expectNothingStored(uid, jarPath)
}

// TestJoinBetweenCompleteAndPublished holds a fill after its body is
// complete on disk and before it is hashed and published: the first client
// already has the whole body, a GET that joins then reads the complete temp
// file, and a checksum sidecar that joins waits for the published entry.
func TestJoinBetweenCompleteAndPublished(t *testing.T) {
	e := newEnv(t)
	up := newFakeUpstream(t)
	body := jarBytes(jarPath, 96<<10)
	up.set(jarPath, fakeFile{body: body, fault: faultHold})
	uid := e.upstream(up.URL, nil, nil)
	completed, proceed := make(chan struct{}), make(chan struct{})
	e.hooks.OnComplete = func() {
		close(completed)
		<-proceed
	}
	joined := make(chan struct{}, 4)
	e.hooks.OnJoin = func() { joined <- struct{}{} }
	reg := "/" + strconv.FormatInt(e.registry, 10) + "/"

	res := e.startHeld(jarPath)
	defer res.Body.Close()
	<-up.midBody
	up.releaseHeld()
	<-completed
	first, err := io.ReadAll(res.Body)
	if err != nil || string(first) != string(body) {
		t.Fatalf("first client: %d of %d bytes, %v", len(first), len(body), err)
	}
	if _, ok := e.entry(uid, "/"+jarPath); ok {
		t.Fatal("the entry exists already: the hold did not hold")
	}

	e.do(http.MethodGet, reg+jarPath, nil, "Private-Token", rootToken).expect(t, 200).expectBody(t, string(body))
	<-joined

	sidecar := make(chan resp, 1)
	go func() { sidecar <- e.do(http.MethodGet, reg+jarPath+".sha1", nil, "Private-Token", rootToken) }()
	<-joined
	select {
	case r := <-sidecar:
		t.Fatalf("the sidecar was answered (%d %q) before the entry was published", r.status, r.body)
	default:
	}
	close(proceed)
	_, sha1hex, _, _ := digests(body)
	(<-sidecar).expect(t, 200).expectBody(t, sha1hex)
	e.waitFills()
	if ce, ok := e.entry(uid, "/"+jarPath); !ok || ce.Size != int64(len(body)) {
		t.Fatalf("entry %+v, %v", ce, ok)
	}
	if got := up.calls(jarPath); got != 1 {
		t.Fatalf("upstream GETs = %d, want 1", got)
	}
	e.noBrokenState()
}

// TestShutdownCancelsFills: a fill still running when the listener has
// drained is cancelled, its client's body ends short, and it leaves nothing.
func TestShutdownCancelsFills(t *testing.T) {
	e := newEnv(t)
	up := newFakeUpstream(t)
	body := jarBytes(jarPath, 32<<10)
	up.set(jarPath, fakeFile{body: body, fault: faultHold})
	uid := e.upstream(up.URL, nil, nil)
	res := e.startHeld(jarPath)
	defer res.Body.Close()
	<-up.midBody
	read := make(chan error, 1)
	go func() {
		_, err := io.ReadAll(res.Body)
		read <- err
	}()
	// The drain deadline passes at once: the held request is still open.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = e.srv.Shutdown(ctx)
	if err := <-read; err == nil {
		t.Fatal("the body of a cancelled fill ended cleanly")
	}
	if e.srv.inflight() != 0 {
		t.Fatal("fills still registered after Shutdown")
	}
	if _, ok := e.entry(uid, "/"+jarPath); ok {
		t.Fatal("a cancelled fill wrote an entry")
	}
	e.noBrokenState()
}
