package itest

import (
	"bytes"
	"crypto/sha1"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
)

// ivUpstream is a fake Maven repository that serves one file with an ETag,
// answers If-None-Match with 304, records every request, and can be made to
// answer 503.
type ivUpstream struct {
	URL  string
	srv  *httptest.Server
	path string
	body []byte
	etag string

	mu   sync.Mutex
	reqs []ivRequest
	down bool
}

type ivRequest struct{ method, path, ifNoneMatch string }

func newIvUpstream(t *testing.T, path string, body []byte, etag string) *ivUpstream {
	u := &ivUpstream{path: "/maven2/" + path, body: body, etag: etag}
	u.srv = httptest.NewServer(http.HandlerFunc(u.serve))
	u.URL = u.srv.URL + "/maven2"
	t.Cleanup(u.srv.Close)
	return u
}

func (u *ivUpstream) serve(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	u.reqs = append(u.reqs, ivRequest{r.Method, r.URL.Path, r.Header.Get("If-None-Match")})
	down := u.down
	u.mu.Unlock()
	switch {
	case down:
		http.Error(w, "maintenance", http.StatusServiceUnavailable)
		return
	case r.URL.Path != u.path:
		http.NotFound(w, r)
		return
	}
	w.Header().Set("ETag", u.etag)
	if r.Header.Get("If-None-Match") == u.etag {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	sum := sha1.Sum(u.body)
	w.Header().Set("X-Checksum-Sha1", hex.EncodeToString(sum[:]))
	w.Header().Set("Content-Type", "application/java-archive")
	w.Header().Set("Content-Length", strconv.Itoa(len(u.body)))
	w.Write(u.body)
}

// requests is every request for the file so far.
func (u *ivUpstream) requests() []ivRequest {
	u.mu.Lock()
	defer u.mu.Unlock()
	var out []ivRequest
	for _, r := range u.reqs {
		if r.path == u.path {
			out = append(out, r)
		}
	}
	return out
}

func (u *ivUpstream) setDown(down bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.down = down
}

// TestInvalidateCacheEntry: an invalidated entry of a fresh file is
// revalidated on the next download (one conditional request with the stored
// ETag) and still served; invalidated again with its upstream down, the
// stored copy is served (stale-if-error); the upstream-wide invalidation
// marks every entry.
func TestInvalidateCacheEntry(t *testing.T) {
	d := Start(t, nil)
	f := d.Fix(t)
	group := f.Group("acme", 0, "private")
	reg := f.Registry(group, "main")
	body := pxBody("inv", 40<<10)
	up := newIvUpstream(t, pxJar, body, `"v1"`)
	// A year of validity: without the invalidation, nothing would ask the upstream.
	upID := f.Upstream(reg, up.URL, map[string]any{"cache_validity_hours": 24 * 365})
	get := func() *Resp {
		t.Helper()
		r := d.pxGet(t, reg, pxJar, "PRIVATE-TOKEN", rootToken).Expect(t, 200)
		if !bytes.Equal(r.Body, body) {
			t.Fatalf("download: %d bytes, want the %d stored", len(r.Body), len(body))
		}
		return r
	}
	wantRequests := func(n int, when string) []ivRequest {
		t.Helper()
		reqs := up.requests()
		if len(reqs) != n {
			t.Fatalf("%s: %d upstream requests for the file, want %d: %+v", when, len(reqs), n, reqs)
		}
		return reqs
	}
	entries := func() []map[string]any {
		t.Helper()
		var list []map[string]any
		d.Do("GET", vr("/upstreams/%d/cache_entries", upID), rootToken, nil).Expect(t, 200).JSON(t, &list)
		return list
	}

	// Fill, then wait for the stored entry (a sidecar answers only from it).
	get()
	d.pxGet(t, reg, pxJar+".sha1", "PRIVATE-TOKEN", rootToken).Expect(t, 200)
	get()
	wantRequests(1, "fill and a fresh hit")
	list := entries()
	if len(list) != 1 || list[0]["upstream_etag"] != `"v1"` {
		t.Fatalf("entries after the fill: %v", list)
	}
	id := list[0]["id"].(string)
	if _, has := list[0]["invalidated"]; has {
		t.Fatalf("a fresh entry shows invalidated: %v", list[0])
	}

	// Invalidate: 200 with the entry, nothing removed.
	r := d.Do("POST", vr("/cache_entries/%s/invalidate", id), rootToken, nil).Expect(t, 200)
	inv := r.Map(t)
	if inv["invalidated"] != true || inv["id"] != id || inv["relative_path"] != "/"+pxJar ||
		inv["updated_at"] != list[0]["updated_at"] || inv["downloads_count"] != list[0]["downloads_count"] {
		t.Fatalf("invalidate answered %s\nfor the entry %v", r.Body, list[0])
	}
	if l := entries(); len(l) != 1 || l[0]["invalidated"] != true {
		t.Fatalf("entries after invalidating: %v", l)
	}

	// The next download revalidates once, conditionally, and serves the bytes.
	get()
	reqs := wantRequests(2, "download after the invalidation")
	if last := reqs[1]; last.ifNoneMatch != `"v1"` {
		t.Fatalf("revalidation sent If-None-Match %q (method %s), want the stored ETag", last.ifNoneMatch, last.method)
	}
	if l := entries(); len(l) != 1 || l[0]["invalidated"] != nil {
		t.Fatalf("a successful revalidation did not clear the mark: %v", l)
	}
	get()
	wantRequests(2, "a hit after the revalidation")

	// Invalidate again and take the upstream down: the stored copy is served.
	d.Do("POST", vr("/cache_entries/%s/invalidate", id), rootToken, nil).Expect(t, 200)
	up.setDown(true)
	get()
	wantRequests(3, "download with the upstream answering 503")
	if l := entries(); len(l) != 1 || l[0]["invalidated"] != true {
		t.Fatalf("after a failed revalidation the entry must stay invalidated: %v", l)
	}
	// Now with nothing listening at all.
	up.srv.Close()
	get()

	// The upstream-wide invalidation answers the count, and permissions hold.
	devID, dev := f.User("dev", false)
	f.Member(group, devID, developer)
	d.Do("POST", vr("/upstreams/%d/cache/invalidate", upID), dev, nil).Expect(t, 403)
	d.Do("POST", vr("/cache_entries/%s/invalidate", id), dev, nil).Expect(t, 403)
	wantResp(t, d.Do("POST", vr("/upstreams/%d/cache/invalidate", upID), rootToken, nil), 200, `{"invalidated_entries_count":1}`)
	wantResp(t, d.Do("POST", vr("/upstreams/%d/cache/invalidate", upID+100), rootToken, nil), 404, `{"message":"404 Upstream Not Found"}`)
	noServerErrors(t, d)
}
