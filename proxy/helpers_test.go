package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"github.com/valyala/fasthttp"

	"registryd/auth"
	"registryd/internal/boltstore"
	"registryd/internal/testclock"
	"registryd/maven"
	"registryd/store"
	"registryd/store/blob"
	"registryd/store/objects"
	"registryd/upstream"
)

// rootToken authenticates as the admin in every test env.
const rootToken = "rdpat-proxy-test-root-token-0123"

var testSecretKey = bytes.Repeat([]byte{7}, 32)

// envOptions are the settings of an env: the proxy's Options, and those
// of the auth service, the upstream client and the access log it is wired
// with, as main wires them. Left zero, they are registryd's defaults (each
// component's TestDefaultsAreConfigs), except the client's, which newEnv
// sets for upstreams on loopback with short timeouts.
type envOptions struct {
	Options
	auth     auth.Options
	upstream upstream.Options
	// accessLogPath, when set, is a file the access log is appended to,
	// as proxy.access_log_path is; otherwise none is written.
	accessLogPath string
}

// env is an in-process proxy on a loopback port with its own data dir.
type env struct {
	t        testing.TB
	dir      string // the data dir
	st       *store.Store
	blobs    *blob.Store
	faults   *blob.Faults // of blobs, unless they are remote
	srv      *Server
	hooks    *Hooks // the engine's test hooks (Options.Hooks)
	clock    *testclock.Clock
	reg      *prometheus.Registry
	base     string // http://127.0.0.1:port/api/v4/virtual_registries/packages/maven
	group    store.Group
	registry int64
	secret   []byte
	client   *http.Client
	// objects is the bucket of remote blobs, when the env has one
	// (noBrokenState then checks it too).
	objects objects.Store
}

func newEnv(t testing.TB, opts ...func(*envOptions)) *env {
	t.Helper()
	return newEnvStore(t, store.Options{}, opts...)
}

// newEnvStore is newEnv with store options (the key and clock are the env's).
func newEnvStore(t testing.TB, so store.Options, opts ...func(*envOptions)) *env {
	t.Helper()
	dir := t.TempDir()
	o := envOptions{upstream: upstream.Options{AllowLocalNetwork: true, MaxRedirects: 3,
		ConnectTimeout: 5 * time.Second, HeaderTimeout: 5 * time.Second}}
	for _, f := range opts {
		f(&o)
	}
	if o.Hooks == nil {
		o.Hooks = &Hooks{}
	}
	if o.Upstreams.TrialTimeout == 0 {
		// As main: by the client's connect and header timeouts, a health
		// trial has its answer or its error.
		o.Upstreams.TrialTimeout = o.upstream.ConnectTimeout + o.upstream.HeaderTimeout
	}
	clock := testclock.New(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC))
	so.SecretKey, so.Now = testSecretKey, clock.Now
	st, err := boltstore.Open(dir, so)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.EnsureRoot(rootToken); err != nil {
		t.Fatal(err)
	}
	g, err := st.CreateGroup(store.NewGroup{Name: "acme", Path: "acme", Visibility: store.Private})
	if err != nil {
		t.Fatal(err)
	}
	r, err := st.CreateRegistry(g.ID, "main", "")
	if err != nil {
		t.Fatal(err)
	}
	faults := &blob.Faults{}
	var blobs *blob.Store
	if f, ok := envBlobOpeners.Load(t); ok { // remote blobs (remote_test.go), without faults
		faults = nil
		blobs, err = f.(func(string) (*blob.Store, error))(dir)
	} else {
		blobs, err = blob.Open(dir, blob.Options{Faults: faults})
	}
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	e := &env{t: t, dir: dir, st: st, blobs: blobs, faults: faults, hooks: o.Hooks, clock: clock, reg: reg, group: g, registry: r.ID,
		secret: []byte("gateway-secret-for-tests-0123456789"),
		client: &http.Client{Transport: &http.Transport{DisableCompression: true}}}
	// As main does: the access log goes to proxy.access_log_path when a
	// test sets one (and none is written otherwise).
	var accessLog *os.File
	if o.accessLogPath != "" {
		if accessLog, err = os.OpenFile(o.accessLogPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640); err != nil {
			t.Fatal(err)
		}
	}
	o.auth.Now = clock.Now
	deps := Deps{
		Options: o.Options, Store: st, Blobs: blobs, Auth: auth.New(st, o.auth),
		Upstream: upstream.New(o.upstream), Registerer: reg, GatewaySecret: e.secret, Now: clock.Now,
	}
	if accessLog != nil {
		deps.AccessLog = accessLog
	}
	if l, ok := envLoggers.Load(t); ok { // the daemon's log (redact_path_test.go)
		deps.Logger = l.(*slog.Logger)
	}
	e.srv, err = New(deps)
	if err != nil {
		t.Fatal(err)
	}
	// Every request's bytes are scribbled over once it is answered, and
	// the env checks at its end that nothing the server kept aliases them
	// (alias_test.go): every test on an env checks the fasthttp contract.
	e.srv.srv.Handler = func(ctx *fasthttp.RequestCtx) {
		e.srv.handle(ctx)
		scribbleRequest(ctx)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- e.srv.Serve(ln) }()
	e.base = "http://" + ln.Addr().String() + "/api/v4/virtual_registries/packages/maven"
	t.Cleanup(func() {
		e.client.CloseIdleConnections()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := e.srv.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		<-served
		if err := e.srv.StopCounting(); err != nil {
			t.Errorf("StopCounting: %v", err)
		}
		e.srv.StopCollector()
		// Nothing runs on the server any more: its state may be walked.
		expectOwned(t, e.srv, "the test")
		st.Close()
		if accessLog != nil {
			accessLog.Close()
		}
	})
	return e
}

// upstream adds an upstream at url to the env's registry; hours are
// cache_validity_hours and metadata_cache_validity_hours (nil: defaults).
func (e *env) upstream(url string, validity, metaValidity *int) int64 {
	e.t.Helper()
	u, err := e.st.CreateUpstream(e.registry, store.NewUpstream{URL: url, Name: url,
		CacheValidityHours: validity, MetadataCacheValidityHours: metaValidity})
	if err != nil {
		e.t.Fatal(err)
	}
	return u.ID
}

func hours(n int) *int { return &n }

// resp is a finished answer.
type resp struct {
	status int
	header http.Header
	body   []byte
	// readErr is the error that ended the body early, if it did.
	readErr error
}

// do sends a request to the proxy: path is below the maven prefix ("/1/g/a.jar"),
// hdr a flat list of names and values. No credentials unless given.
func (e *env) do(method, path string, body io.Reader, hdr ...string) resp {
	e.t.Helper()
	req, err := http.NewRequest(method, e.base+path, body)
	if err != nil {
		e.t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := e.client.Do(req)
	if err != nil {
		// A connection closed before any answer: status 0.
		return resp{readErr: err}
	}
	defer res.Body.Close()
	raw, rerr := io.ReadAll(res.Body)
	return resp{status: res.StatusCode, header: res.Header, body: raw, readErr: rerr}
}

// getNow downloads path from the env's registry as root without waiting
// for the fill it may have started: for requests made while a fill is held.
func (e *env) getNow(path string, hdr ...string) resp {
	e.t.Helper()
	return e.do(http.MethodGet, "/"+strconv.FormatInt(e.registry, 10)+"/"+path, nil,
		append([]string{"Private-Token", rootToken}, hdr...)...)
}

// herd sends n concurrent GETs of a file whose upstream holds its body
// (faultHold), waits until the first is mid-body and the other n-1 have
// joined its flight, then releases the upstream and returns every answer.
func (e *env) herd(up *fakeUpstream, path string, n int) []resp {
	e.t.Helper()
	joined := make(chan struct{}, n)
	e.hooks.OnJoin = func() { joined <- struct{}{} }
	defer func() { e.hooks.OnJoin = nil }()
	results := make([]resp, n)
	var wg sync.WaitGroup
	wg.Add(n)
	for i := range n {
		go func() {
			defer wg.Done()
			results[i] = e.do(http.MethodGet, "/"+strconv.FormatInt(e.registry, 10)+"/"+path, nil, "Private-Token", rootToken)
		}()
	}
	<-up.midBody
	for range n - 1 {
		<-joined
	}
	up.releaseHeld()
	wg.Wait()
	return results
}

// expectNothingStored checks what a fill that failed to store leaves: no
// entry, no blob, no temp file, and one count of the failure.
func (e *env) expectNothingStored(upstream int64, path string) {
	e.t.Helper()
	e.noBrokenState()
	if n, _ := e.blobs.Stats(); n != 0 {
		e.t.Fatalf("%d blobs after a failed publish", n)
	}
	if _, ok := e.entry(upstream, "/"+path); ok {
		e.t.Fatal("an entry was written")
	}
	if got := e.metric("registryd_cache_fill_store_errors_total"); got != 1 {
		e.t.Fatalf("fill store errors = %v, want 1", got)
	}
}

// get downloads path from the env's registry as root, then waits for the
// fill it may have started to end: a client holds the whole body (its
// Content-Length reached) a moment before the fill has published the entry,
// and tests that move the clock next must not race that.
func (e *env) get(path string, hdr ...string) resp {
	e.t.Helper()
	r := e.do(http.MethodGet, "/"+strconv.FormatInt(e.registry, 10)+"/"+path, nil,
		append([]string{"Private-Token", rootToken}, hdr...)...)
	e.waitFills()
	return r
}

func (e *env) head(path string, hdr ...string) resp {
	e.t.Helper()
	r := e.do(http.MethodHead, "/"+strconv.FormatInt(e.registry, 10)+"/"+path, nil,
		append([]string{"Private-Token", rootToken}, hdr...)...)
	e.waitFills()
	return r
}

func (r resp) expect(t testing.TB, status int) resp {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d; body %q", r.status, status, r.body)
	}
	if r.readErr != nil {
		t.Fatalf("body ended early: %v", r.readErr)
	}
	return r
}

func (r resp) expectBody(t testing.TB, want string) resp {
	t.Helper()
	if string(r.body) != want {
		t.Fatalf("body %q, want %q", truncate(r.body), truncate([]byte(want)))
	}
	return r
}

func (r resp) expectMessage(t testing.TB, key, want string) {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("body is not JSON: %q", r.body)
	}
	if m[key] != want {
		t.Fatalf("%s = %v, want %q", key, m[key], want)
	}
}

func truncate(b []byte) string {
	if len(b) > 80 {
		return string(b[:80]) + "..."
	}
	return string(b)
}

// entry is the cache entry for (upstream, rel), or ok false.
func (e *env) entry(up int64, rel string) (store.CacheEntry, bool) {
	ce, err := e.st.CacheEntry(up, rel)
	if errors.Is(err, store.ErrNotFound) {
		return ce, false
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return ce, true
}

// noBrokenState checks that nothing half-written is left: the temp dir is
// empty and every blob file is referenced by the index.
func (e *env) noBrokenState() {
	e.t.Helper()
	e.waitFills()
	tmp, err := os.ReadDir(e.blobs.TempDir())
	if err != nil {
		e.t.Fatal(err)
	}
	if len(tmp) != 0 {
		e.t.Fatalf("DATA_DIR/tmp holds %d files", len(tmp))
	}
	_ = filepath.WalkDir(filepath.Join(e.dir, "blobs"), func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && !e.st.BlobReferenced(d.Name()) {
			e.t.Fatalf("blob file %s is referenced by no entry", path)
		}
		return nil
	})
	if e.objects == nil {
		return
	}
	// Nothing a refused or broken answer left in the bucket either: every
	// object is some entry's blob.
	if err := e.objects.List(context.Background(), "sha256/", func(i objects.Info) error {
		if sha := i.Key[strings.LastIndexByte(i.Key, '/')+1:]; !e.st.BlobReferenced(sha) {
			e.t.Fatalf("object %s is referenced by no entry", i.Key)
		}
		return nil
	}); err != nil {
		e.t.Fatal(err)
	}
}

// waitFills waits until no fill runs: a fill's client may get its answer
// before the fill has cleaned up (a body is released once it is complete,
// before it is hashed and published; an answer without a body leaves the
// flight map before its prepared temp file is dropped). No request may start
// a fill while it waits.
func (e *env) waitFills() {
	e.srv.fills.Wait()
}

// counter reads a counter or gauge of the env's registry.
// metric sums the series of name whose labels include the given
// name/value pairs.
func (e *env) metric(name string, labels ...string) float64 {
	e.t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		e.t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
						found = true
					}
				}
				if !found {
					continue next
				}
			}
			switch {
			case m.Counter != nil:
				sum += m.Counter.GetValue()
			case m.Gauge != nil:
				sum += m.Gauge.GetValue()
			}
		}
	}
	return sum
}

// gatewayToken signs an HS256 JWT with the given claims.
func gatewayToken(secret []byte, alg string, claims map[string]any) string {
	h, _ := json.Marshal(map[string]string{"alg": alg, "typ": "JWT"})
	p, _ := json.Marshal(claims)
	signing := base64.RawURLEncoding.EncodeToString(h) + "." + base64.RawURLEncoding.EncodeToString(p)
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(signing))
	return signing + "." + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// lint fails the test when the registry's metrics break Prometheus' naming rules.
func (e *env) lint() {
	e.t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		e.t.Fatal(err)
	}
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil {
		e.t.Fatal(err)
	}
	for _, p := range problems {
		e.t.Errorf("metric %s: %s", p.Metric, p.Text)
	}
}

// --- the fake upstream ---

// fault is how a fake file misbehaves.
type fault uint8

const (
	faultNone      fault = iota
	faultTruncated       // chunked body that ends without its last chunk
	faultWrongLen        // Content-Length larger than the bytes sent, then close
	faultReset           // half the body, then a TCP reset
	faultHold            // half the body, then wait for release
	faultRedirect        // redirects to itself forever
	faultLongBody        // Content-Length 100 shorter than the body it sends
)

type fakeFile struct {
	body     []byte
	etag     string
	ctype    string
	status   int // answer this status instead (401, 503, ...)
	fault    fault
	chunked  bool   // no Content-Length
	checksum string // X-Checksum-Sha1 to send
	md5      string // X-Checksum-Md5 to send
	// custom, when set, answers the request instead (after it is counted).
	custom func(w http.ResponseWriter, r *http.Request)
}

// fakeUpstream is a Maven repository on loopback that counts requests and
// misbehaves on demand.
type fakeUpstream struct {
	t   testing.TB
	srv *httptest.Server
	URL string

	mu      sync.Mutex
	files   map[string]fakeFile
	gets    map[string]int
	inm     map[string]string // last If-None-Match per path
	auth    map[string]string // last Authorization per path
	midBody chan string       // a faultHold file has sent its first half
	release chan struct{}     // lets faultHold files finish
}

func newFakeUpstream(t testing.TB) *fakeUpstream {
	f := &fakeUpstream{t: t, files: map[string]fakeFile{}, gets: map[string]int{}, inm: map[string]string{},
		auth: map[string]string{}, midBody: make(chan string, 64), release: make(chan struct{})}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	f.URL = f.srv.URL + "/maven2"
	t.Cleanup(func() {
		f.releaseHeld()
		f.srv.Close()
	})
	return f
}

func (f *fakeUpstream) set(path string, ff fakeFile) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.files["/maven2/"+path] = ff
}

func (f *fakeUpstream) del(path string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.files, "/maven2/"+path)
}

// calls is how many GETs path received.
func (f *fakeUpstream) calls(path string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.gets["/maven2/"+path]
}

func (f *fakeUpstream) total() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.gets {
		n += c
	}
	return n
}

func (f *fakeUpstream) lastIfNoneMatch(path string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.inm["/maven2/"+path]
}

func (f *fakeUpstream) releaseHeld() {
	f.mu.Lock()
	defer f.mu.Unlock()
	select {
	case <-f.release:
	default:
		close(f.release)
	}
}

func (f *fakeUpstream) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	if r.Method == http.MethodGet {
		f.gets[r.URL.Path]++
	}
	f.inm[r.URL.Path] = r.Header.Get("If-None-Match")
	f.auth[r.URL.Path] = r.Header.Get("Authorization")
	ff, ok := f.files[r.URL.Path]
	release := f.release
	f.mu.Unlock()
	switch {
	case !ok:
		http.NotFound(w, r)
		return
	case ff.custom != nil:
		ff.custom(w, r)
		return
	case ff.status != 0:
		w.WriteHeader(ff.status)
		fmt.Fprintf(w, "upstream says %d", ff.status)
		return
	case ff.fault == faultRedirect:
		http.Redirect(w, r, r.URL.Path, http.StatusFound)
		return
	case ff.etag != "" && r.Header.Get("If-None-Match") == ff.etag:
		w.Header().Set("ETag", ff.etag)
		w.WriteHeader(http.StatusNotModified)
		return
	}
	if ff.etag != "" {
		w.Header().Set("ETag", ff.etag)
	}
	// A repository labels files by their extension (net/http would sniff
	// the test bodies, which are text, as text/plain).
	if ff.ctype == "" {
		ff.ctype = maven.ContentType(r.URL.Path)
	}
	w.Header().Set("Content-Type", ff.ctype)
	if ff.checksum != "" {
		w.Header().Set("X-Checksum-Sha1", ff.checksum)
	}
	if ff.md5 != "" {
		w.Header().Set("X-Checksum-Md5", ff.md5)
	}
	half := len(ff.body) / 2
	switch ff.fault {
	case faultTruncated:
		f.raw(w, "Transfer-Encoding: chunked", func(bw *bufio.Writer) {
			fmt.Fprintf(bw, "%x\r\n%s\r\n", half, ff.body[:half])
		}, false)
		return
	case faultWrongLen:
		f.raw(w, "Content-Length: "+strconv.Itoa(len(ff.body)+100), func(bw *bufio.Writer) {
			bw.Write(ff.body)
		}, false)
		return
	case faultLongBody:
		f.raw(w, "Content-Length: "+strconv.Itoa(len(ff.body)-100), func(bw *bufio.Writer) {
			bw.Write(ff.body)
		}, false)
		return
	case faultReset:
		f.raw(w, "Content-Length: "+strconv.Itoa(len(ff.body)), func(bw *bufio.Writer) {
			bw.Write(ff.body[:half])
		}, true)
		return
	case faultHold:
		w.Header().Set("Content-Length", strconv.Itoa(len(ff.body)))
		w.Write(ff.body[:half])
		w.(http.Flusher).Flush()
		f.midBody <- r.URL.Path
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		w.Write(ff.body[half:])
		return
	}
	if !ff.chunked {
		w.Header().Set("Content-Length", strconv.Itoa(len(ff.body)))
	}
	if r.Method == http.MethodHead {
		return
	}
	w.Write(ff.body)
}

// raw answers over the hijacked connection so the test controls the bytes:
// status line, one framing header, the body write, then a close (with a TCP
// reset when rst).
func (f *fakeUpstream) raw(w http.ResponseWriter, framing string, body func(*bufio.Writer), rst bool) {
	conn, bw, err := w.(http.Hijacker).Hijack()
	if err != nil {
		f.t.Errorf("hijack: %v", err)
		return
	}
	defer conn.Close()
	bw.WriteString("HTTP/1.1 200 OK\r\nContent-Type: application/java-archive\r\n" + framing + "\r\n\r\n")
	body(bw.Writer)
	bw.Flush()
	if rst {
		if tc, ok := conn.(*net.TCPConn); ok {
			tc.SetLinger(0)
		}
	}
}

// downURL is an http URL on loopback where nothing listens.
func downURL(t testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr + "/maven2"
}

// jarBytes is a deterministic body of n bytes for path.
func jarBytes(path string, n int) []byte {
	var b bytes.Buffer
	for b.Len() < n {
		b.WriteString(path)
		b.WriteByte(byte(b.Len()))
	}
	return b.Bytes()[:n]
}
