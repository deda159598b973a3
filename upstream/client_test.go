package upstream

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// newServer starts a loopback httptest server closed at cleanup.
func newServer(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// blockingServer starts a server whose handler calls before (if set) and
// then waits until the test ends or the client goes away. The release
// channel is closed by a cleanup registered after the server's, so it runs
// first and srv.Close does not wait on a stuck handler.
func blockingServer(t *testing.T, before func(http.ResponseWriter)) *httptest.Server {
	t.Helper()
	release := make(chan struct{})
	srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if before != nil {
			before(w)
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(release) })
	return srv
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// refusedURL is the URL of a loopback port nobody listens on.
func refusedURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr
}

// local is a client that may reach httptest servers.
func local(o Options) *Client {
	o.AllowLocalNetwork = true
	return New(o)
}

func TestJoin(t *testing.T) {
	tests := []struct{ name, base, rel, want string }{
		{"plain", "https://r.example/m2", "org/a/1/a-1.jar", "https://r.example/m2/org/a/1/a-1.jar"},
		{"base slash", "https://r.example/m2/", "org/a.pom", "https://r.example/m2/org/a.pom"},
		{"rel slash", "https://r.example/m2", "/org/a.pom", "https://r.example/m2/org/a.pom"},
		{"both slashes", "https://r.example/m2//", "//org/a.pom", "https://r.example/m2/org/a.pom"},
		{"host only", "https://r.example", "a.pom", "https://r.example/a.pom"},
		{"plus kept", "https://r.example", "a/1.0+b/a.jar", "https://r.example/a/1.0+b/a.jar"},
		{"query chars escaped", "https://r.example", "a/b?c#d.jar", "https://r.example/a/b%3Fc%23d.jar"},
		{"space escaped", "https://r.example", "a b.jar", "https://r.example/a%20b.jar"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Join(tt.base, tt.rel); got != tt.want {
				t.Fatalf("Join(%q, %q) = %q; want %q", tt.base, tt.rel, got, tt.want)
			}
		})
	}
}

// TestDialerBlocksLocal: the connect-time check stands on its own, so a
// caller that skipped CheckURL (or a name that rebinds) cannot reach a
// loopback server.
func TestDialerBlocksLocal(t *testing.T) {
	var hits atomic.Int32
	srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	c := New(Options{})
	ep := Endpoint{URL: srv.URL}
	tests := []struct {
		name string
		call func() error
	}{
		{"get", func() error { _, err := c.Get(context.Background(), ep, "a.pom", ""); return err }},
		{"head", func() error { _, err := c.Head(context.Background(), ep, "a.pom"); return err }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			var ue *URLError
			if !errors.As(err, &ue) || ue.Reason != ReasonLocalhost {
				t.Fatalf("err = %v; want blocked localhost", err)
			}
			if !errors.Is(err, ErrUnavailable) {
				t.Errorf("err = %v; want ErrUnavailable", err)
			}
		})
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("server saw %d requests; want 0", n)
	}
}

func TestRequestHeaders(t *testing.T) {
	got := make(chan http.Header, 1)
	srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Clone()
		w.Write([]byte("x"))
	}))
	resp, err := local(Options{}).Get(context.Background(), Endpoint{URL: srv.URL}, "a.pom", "")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	h := <-got
	for k, want := range map[string]string{"User-Agent": "registryd", "Accept-Encoding": "identity", "If-None-Match": "", "Authorization": ""} {
		if v := h.Get(k); v != want {
			t.Errorf("%s = %q; want %q", k, v, want)
		}
	}
}

func TestBasicAuth(t *testing.T) {
	type creds struct {
		user, pass string
		ok         bool
	}
	got := make(chan creds, 1)
	srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, p, ok := r.BasicAuth()
		got <- creds{u, p, ok}
	}))
	hostport := strings.TrimPrefix(srv.URL, "http://")
	tests := []struct {
		name string
		ep   Endpoint
		want creds
	}{
		{"endpoint credentials", Endpoint{URL: srv.URL, Username: "alice", Password: "s3cret"}, creds{"alice", "s3cret", true}},
		{"userinfo in url", Endpoint{URL: "http://bob:pw%40x@" + hostport}, creds{"bob", "pw@x", true}},
		{"endpoint wins over userinfo", Endpoint{URL: "http://bob:pw@" + hostport, Username: "alice", Password: "a"}, creds{"alice", "a", true}},
		{"none", Endpoint{URL: srv.URL}, creds{}},
	}
	c := local(Options{})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := c.Head(context.Background(), tt.ep, "a.pom")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if g := <-got; g != tt.want {
				t.Fatalf("server saw %+v; want %+v", g, tt.want)
			}
		})
	}
}

// authRecorder records the Authorization header seen per path.
type authRecorder struct {
	mu   sync.Mutex
	seen map[string]string
}

func (a *authRecorder) record(r *http.Request) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.seen == nil {
		a.seen = map[string]string{}
	}
	a.seen[r.URL.Path] = r.Header.Get("Authorization")
}

func (a *authRecorder) get(path string) (string, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	v, ok := a.seen[path]
	return v, ok
}

func TestRedirectCredentials(t *testing.T) {
	rec := &authRecorder{}
	var other *httptest.Server // other origin: same IP, different port
	origin := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec.record(r)
		switch r.URL.Path {
		case "/same":
			http.Redirect(w, r, "/final-same", http.StatusFound)
		case "/cross":
			http.Redirect(w, r, other.URL+"/final-other", http.StatusFound)
		case "/bounce":
			http.Redirect(w, r, other.URL+"/back", http.StatusTemporaryRedirect)
		}
	}))
	other = newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec.record(r)
		if r.URL.Path == "/back" {
			http.Redirect(w, r, origin.URL+"/final-back", http.StatusFound)
		}
	}))
	ep := Endpoint{URL: origin.URL, Username: "alice", Password: "s3cret"}
	c := local(Options{})
	tests := []struct {
		name, start, final string
		wantAuth           bool
	}{
		{"same origin keeps credentials", "same", "/final-same", true},
		{"other port gets none", "cross", "/final-other", false},
		{"back to origin after leaving gets none", "bounce", "/final-back", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := c.Get(context.Background(), ep, tt.start, "")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if a, _ := rec.get("/" + tt.start); a == "" {
				t.Fatalf("first hop had no credentials")
			}
			a, ok := rec.get(tt.final)
			if !ok {
				t.Fatalf("redirect target %s not reached", tt.final)
			}
			if (a != "") != tt.wantAuth {
				t.Fatalf("Authorization at %s = %q; want present=%v", tt.final, a, tt.wantAuth)
			}
		})
	}
}

func TestSameOrigin(t *testing.T) {
	tests := []struct {
		name, from, to string
		want           bool
	}{
		{"same", "https://r.example/a", "https://r.example/b", true},
		{"host case", "https://r.example/a", "https://R.EXAMPLE/b", true},
		{"explicit default port", "https://r.example/a", "https://r.example:443/b", true},
		{"http to https upgrade", "http://r.example/a", "https://r.example/b", true},
		{"https to http downgrade", "https://r.example/a", "http://r.example/b", false},
		{"other port", "https://r.example/a", "https://r.example:8443/b", false},
		{"subdomain", "https://r.example/a", "https://cdn.r.example/b", false},
		{"other host", "https://r.example/a", "https://s3.example/b", false},
		{"http 8080 to https", "http://r.example:8080/a", "https://r.example/b", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := sameOrigin(mustURL(t, tt.from), mustURL(t, tt.to)); got != tt.want {
				t.Fatalf("sameOrigin(%s, %s) = %v; want %v", tt.from, tt.to, got, tt.want)
			}
		})
	}
}

func TestRedirectLimit(t *testing.T) {
	// /r/N redirects N more times, then answers 200.
	srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/r/"))
		if n > 0 {
			http.Redirect(w, r, "/r/"+strconv.Itoa(n-1), http.StatusFound)
		}
	}))
	tests := []struct {
		name      string
		max       int
		redirects int
		wantErr   bool
	}{
		{"default allows 5", 0, 5, false},
		{"default refuses 6", 0, 6, true},
		{"negative allows none", -1, 1, true},
		{"negative without redirect", -1, 0, false},
		{"two allows two", 2, 2, false},
		{"two refuses three", 2, 3, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := local(Options{MaxRedirects: tt.max})
			_, err := c.Head(context.Background(), Endpoint{URL: srv.URL}, "r/"+strconv.Itoa(tt.redirects))
			if !tt.wantErr {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrTooManyRedirects) || !errors.Is(err, ErrUnavailable) {
				t.Fatalf("err = %v; want ErrTooManyRedirects and ErrUnavailable", err)
			}
		})
	}
}

func TestGetConditional(t *testing.T) {
	const etag = `"v1"`
	srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("ETag", etag)
		if r.Header.Get("If-None-Match") == etag {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		w.Header().Set("Content-Type", "application/java-archive")
		w.Write([]byte("jar bytes"))
	}))
	tests := []struct {
		name       string
		etag       string
		wantStatus int
		wantBody   string
	}{
		{"unconditional", "", http.StatusOK, "jar bytes"},
		{"etag matches", etag, http.StatusNotModified, ""},
		{"etag changed", `"v0"`, http.StatusOK, "jar bytes"},
	}
	c := local(Options{})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := c.Get(context.Background(), Endpoint{URL: srv.URL}, "a/1/a-1.jar", tt.etag)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			if resp.Status != tt.wantStatus || string(b) != tt.wantBody || resp.ETag != etag {
				t.Fatalf("got %d %q etag %q; want %d %q etag %q", resp.Status, b, resp.ETag, tt.wantStatus, tt.wantBody, etag)
			}
			if tt.wantStatus == http.StatusOK && (resp.ContentType != "application/java-archive" || resp.ContentLength != int64(len(tt.wantBody))) {
				t.Fatalf("content type %q length %d", resp.ContentType, resp.ContentLength)
			}
		})
	}
}

func TestErrorClasses(t *testing.T) {
	status := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		code, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/"))
		w.WriteHeader(code)
		w.Write([]byte(strings.Repeat("error page ", 1000)))
	}))
	loop := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, r.URL.Path, http.StatusFound)
	}))
	stuck := blockingServer(t, nil)
	refused := refusedURL(t)

	tests := []struct {
		name     string
		url      string
		path     string
		opts     Options
		code     int // expected *StatusError code, 0 for none
		notFound bool
		unavail  bool
		timeout  bool
	}{
		{name: "404", url: status.URL, path: "404", code: 404, notFound: true},
		{name: "410", url: status.URL, path: "410", code: 410, notFound: true},
		{name: "500", url: status.URL, path: "500", code: 500, unavail: true},
		{name: "503", url: status.URL, path: "503", code: 503, unavail: true},
		{name: "401", url: status.URL, path: "401", code: 401},
		{name: "403", url: status.URL, path: "403", code: 403},
		{name: "redirect without location", url: status.URL, path: "302", code: 302, unavail: true},
		{name: "redirect loop", url: loop.URL, path: "a.pom", unavail: true},
		{name: "connection refused", url: refused, path: "a.pom", unavail: true},
		{name: "header timeout", url: stuck.URL, path: "a.pom", opts: Options{HeaderTimeout: 100 * time.Millisecond}, unavail: true, timeout: true},
		{name: "invalid url", url: "::nope", path: "a.pom"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := local(tt.opts)
			resp, err := c.Get(context.Background(), Endpoint{URL: tt.url}, tt.path, "")
			if err == nil {
				resp.Body.Close()
				t.Fatalf("Get succeeded with %d", resp.Status)
			}
			gotCode := 0
			if se := (*StatusError)(nil); errors.As(err, &se) {
				gotCode = se.Code
			}
			if gotCode != tt.code {
				t.Fatalf("err = %v (status %d); want status %d", err, gotCode, tt.code)
			}
			if errors.Is(err, ErrNotFound) != tt.notFound || errors.Is(err, ErrUnavailable) != tt.unavail || errors.Is(err, ErrTimeout) != tt.timeout {
				t.Fatalf("err = %v: notFound=%v unavailable=%v timeout=%v; want %v %v %v", err,
					errors.Is(err, ErrNotFound), errors.Is(err, ErrUnavailable), errors.Is(err, ErrTimeout),
					tt.notFound, tt.unavail, tt.timeout)
			}
		})
	}
}

func TestBodyIdleTimeout(t *testing.T) {
	srv := blockingServer(t, func(w http.ResponseWriter) {
		w.Header().Set("Content-Length", "100")
		w.Write([]byte("partial"))
		w.(http.Flusher).Flush()
	})
	c := local(Options{BodyIdleTimeout: 100 * time.Millisecond})
	resp, err := c.Get(context.Background(), Endpoint{URL: srv.URL}, "big.jar", "")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if string(b) != "partial" {
		t.Errorf("read %q before the stall", b)
	}
	var ne *NetError
	if !errors.Is(err, ErrTimeout) || !errors.As(err, &ne) || ne.Reason != "Connection timeout" {
		t.Fatalf("err = %v; want a *NetError timeout", err)
	}
}

func TestBodyShort(t *testing.T) {
	srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "100")
		w.Write([]byte("short"))
		// Returning with fewer bytes than promised makes net/http close the
		// connection: the client sees an unexpected EOF.
	}))
	resp, err := local(Options{}).Get(context.Background(), Endpoint{URL: srv.URL}, "a.jar", "")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, err = io.ReadAll(resp.Body)
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("err = %v; want ErrUnavailable and io.ErrUnexpectedEOF", err)
	}
}

func TestCallerCancel(t *testing.T) {
	srv := blockingServer(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	c := local(Options{})
	errc := make(chan error, 1)
	go func() {
		_, err := c.Get(ctx, Endpoint{URL: srv.URL}, "a.jar", "")
		errc <- err
	}()
	cancel()
	err := <-errc
	if !errors.Is(err, context.Canceled) || !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrTimeout) {
		t.Fatalf("err = %v; want context.Canceled and ErrUnavailable, not ErrTimeout", err)
	}
}

// TestNoSecretsInErrorsOrLogs: passwords (in the endpoint or the URL's
// userinfo) appear in no error text and no log line, and the log line has
// the house keys.
func TestNoSecretsInErrorsOrLogs(t *testing.T) {
	srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	hostport := strings.TrimPrefix(srv.URL, "http://")
	refusedHost := strings.TrimPrefix(refusedURL(t), "http://")
	const secret = "hunter2-s3cret"
	tests := []struct {
		name string
		ep   Endpoint
	}{
		{"endpoint password, 503", Endpoint{URL: srv.URL, Username: "u", Password: secret}},
		{"userinfo password, 503", Endpoint{URL: "http://u:" + secret + "@" + hostport}},
		{"userinfo password, refused", Endpoint{URL: "http://u:" + secret + "@" + refusedHost}},
		{"endpoint password, refused", Endpoint{URL: "http://" + refusedHost, Username: "u", Password: secret}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs bytes.Buffer
			log := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			c := local(Options{Logger: log})
			_, err := c.Get(context.Background(), tt.ep, "org/a/a.pom", "")
			if err == nil {
				t.Fatal("want an error")
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("error leaks the password: %v", err)
			}
			for e := err; e != nil; e = errors.Unwrap(e) {
				if strings.Contains(e.Error(), secret) {
					t.Errorf("wrapped error leaks the password: %v", e)
				}
			}
			if ne := (*NetError)(nil); errors.As(err, &ne) && strings.Contains(ne.Err.Error(), secret) {
				t.Errorf("cause leaks the password: %v", ne.Err)
			}
			if res := c.Test(context.Background(), tt.ep, ""); strings.Contains(res.Result, secret) {
				t.Errorf("test result leaks the password: %q", res.Result)
			}
			out := logs.String()
			if strings.Contains(out, secret) {
				t.Errorf("log leaks the password: %s", out)
			}
			for _, key := range []string{`"upstream":`, `"path":"org/a/a.pom"`, `"status":`, `"dur":`} {
				if !strings.Contains(out, key) {
					t.Errorf("log line lacks %s: %s", key, out)
				}
			}
		})
	}
}

// An upstream's Retry-After, as seconds or as a date, is capped at the
// client's MaxRetryAfter (upstreams.max_backoff): no upstream makes
// registryd, or its clients, wait longer than its own backoff would.
func TestRetryAfterCapped(t *testing.T) {
	var value atomic.Value
	srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", value.Load().(string))
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	for _, tt := range []struct {
		max   time.Duration
		value string
		want  time.Duration
	}{
		{time.Minute, "30", 30 * time.Second},
		{time.Minute, "86400", time.Minute},
		{time.Minute, "4294967295", time.Minute},
		{time.Minute, time.Now().Add(72 * time.Hour).UTC().Format(http.TimeFormat), time.Minute},
		{0, "86400", DefaultMaxRetryAfter}, // the default
	} {
		value.Store(tt.value)
		c := New(Options{AllowLocalNetwork: true, MaxRetryAfter: tt.max})
		_, err := c.Get(context.Background(), Endpoint{URL: srv.URL}, "a/b/1/b-1.jar", "")
		var se *StatusError
		if !errors.As(err, &se) || se.RetryAfter != tt.want {
			t.Errorf("max %v, Retry-After %q: %v (%#v), want %v", tt.max, tt.value, err, se, tt.want)
		}
		c.CloseIdleConnections()
	}
}

// A token a client wrote into a path (Maven paths allow '&' and '=') is
// redacted from the client's request log lines, and from the errors they
// carry.
func TestRequestLogRedactsTokens(t *testing.T) {
	const secret = "Tok3nValue0123456789abcdef"
	srv := newServer(t, http.NotFoundHandler())
	var out bytes.Buffer
	c := New(Options{AllowLocalNetwork: true, Logger: slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	defer c.CloseIdleConnections()
	for _, p := range []string{"a/b/1/b-1.jar&private_token=" + secret, "a/rdpat-" + secret + "/1/x.jar"} {
		if _, err := c.Get(context.Background(), Endpoint{URL: srv.URL}, p, ""); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Get %s: %v", p, err)
		}
	}
	if _, err := c.Get(context.Background(), Endpoint{URL: refusedURL(t)}, "a/b/1/b-1.jar;job_token="+secret, ""); err == nil {
		t.Fatal("no error from a refused connection")
	}
	if strings.Contains(out.String(), secret) || strings.Count(out.String(), "[redacted]") < 3 {
		t.Fatalf("request log:\n%s", out.String())
	}
}
