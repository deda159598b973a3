package itest

// Helpers of the download-path tests: a fake Maven upstream on loopback that
// counts requests and can hold a body half-sent, and a download client.

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
)

// pxFile is one file of a pxUpstream.
type pxFile struct {
	body []byte
	etag string
	// hold sends half the body, signals midBody, and waits for release.
	hold bool
	// status, when set, is answered instead of the file.
	status int
}

// pxUpstream is a fake Maven repository at URL (…/maven2).
type pxUpstream struct {
	URL     string
	srv     *httptest.Server
	mu      sync.Mutex
	files   map[string]pxFile
	gets    map[string]int
	midBody chan struct{}
	release chan struct{}
	once    sync.Once
}

func newPxUpstream(t *testing.T) *pxUpstream {
	u := &pxUpstream{files: map[string]pxFile{}, gets: map[string]int{},
		midBody: make(chan struct{}, 16), release: make(chan struct{})}
	u.srv = httptest.NewServer(http.HandlerFunc(u.serve))
	u.URL = u.srv.URL + "/maven2"
	t.Cleanup(func() {
		u.releaseHeld()
		u.srv.Close()
	})
	return u
}

func (u *pxUpstream) set(path string, f pxFile) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.files["/maven2/"+path] = f
}

func (u *pxUpstream) calls(path string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.gets["/maven2/"+path]
}

func (u *pxUpstream) releaseHeld() { u.once.Do(func() { close(u.release) }) }

func (u *pxUpstream) serve(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	if r.Method == http.MethodGet {
		u.gets[r.URL.Path]++
	}
	f, ok := u.files[r.URL.Path]
	u.mu.Unlock()
	if !ok {
		http.NotFound(w, r)
		return
	}
	if f.status != 0 {
		w.WriteHeader(f.status)
		return
	}
	if f.etag != "" {
		if r.Header.Get("If-None-Match") == f.etag {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		w.Header().Set("ETag", f.etag)
	}
	// As a repository labels a jar (net/http would sniff the test bodies,
	// which are text, as text/plain: refused for a binary file).
	w.Header().Set("Content-Type", "application/java-archive")
	w.Header().Set("Content-Length", strconv.Itoa(len(f.body)))
	if r.Method == http.MethodHead {
		return
	}
	if !f.hold {
		w.Write(f.body)
		return
	}
	half := len(f.body) / 2
	w.Write(f.body[:half])
	w.(http.Flusher).Flush()
	u.midBody <- struct{}{}
	select {
	case <-u.release:
		w.Write(f.body[half:])
	case <-r.Context().Done():
	}
}

// pxGet downloads path from registry reg through the proxy listener.
func (d *Daemon) pxGet(t *testing.T, reg int64, path string, hdr ...string) *Resp {
	t.Helper()
	return doRequest(t, http.MethodGet, d.pxURL(reg, path), nil, hdr...)
}

func (d *Daemon) pxURL(reg int64, path string) string {
	return d.Proxy + "/api/v4/virtual_registries/packages/maven/" + itoa(reg) + "/" + path
}

// pxBody is a deterministic body of n bytes.
func pxBody(seed string, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed[i%len(seed)] ^ byte(i>>8)
	}
	return b
}

// pxDrain reads a response body to its end or its first error.
func pxDrain(r io.Reader) (int64, error) { return io.Copy(io.Discard, r) }
