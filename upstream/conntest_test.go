package upstream

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestConnectionTest(t *testing.T) {
	type seen struct {
		method, path, user, pass string
	}
	got := make(chan seen, 16)
	status := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, p, _ := r.BasicAuth()
		got <- seen{r.Method, r.URL.Path, u, p}
		// /raw/<status line> writes that status line itself, to control
		// the reason phrase; /<code>/... answers <code>; anything else 200.
		if line, ok := strings.CutPrefix(r.URL.Path, "/raw/"); ok {
			conn, buf, err := w.(http.Hijacker).Hijack()
			if err != nil {
				t.Error(err)
				return
			}
			defer conn.Close()
			buf.WriteString("HTTP/1.1 " + line + "\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
			buf.Flush()
			return
		}
		code, err := strconv.Atoi(strings.Split(strings.TrimPrefix(r.URL.Path, "/"), "/")[0])
		if err != nil {
			code = http.StatusOK
		}
		w.WriteHeader(code)
	}))
	redirect := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, status.URL+"/ok"+r.URL.Path, http.StatusMovedPermanently)
	}))
	loop := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, r.URL.Path, http.StatusFound)
	}))
	stuck := blockingServer(t, nil)
	refused := refusedURL(t)

	tests := []struct {
		name       string
		url        string
		path       string
		blockLocal bool
		want       TestResult
	}{
		{name: "200", url: status.URL, path: "200/a.pom", want: TestResult{Success: true}},
		{name: "204", url: status.URL, path: "204/a.pom", want: TestResult{Success: true}},
		{name: "404 is success", url: status.URL, path: "404/a.pom", want: TestResult{Success: true}},
		{name: "401", url: status.URL, path: "401/a.pom", want: TestResult{Result: "Error: 401 - Unauthorized"}},
		{name: "403", url: status.URL, path: "403/a.pom", want: TestResult{Result: "Error: 403 - Forbidden"}},
		{name: "410", url: status.URL, path: "410/a.pom", want: TestResult{Result: "Error: 410 - Gone"}},
		{name: "500", url: status.URL, path: "500/a.pom", want: TestResult{Result: "Error: 500 - Internal Server Error"}},
		{name: "503", url: status.URL, path: "503/a.pom", want: TestResult{Result: "Error: 503 - Service Unavailable"}},
		{name: "unknown code, upstream phrase", url: status.URL, path: "raw/599 Network Connect Timeout", want: TestResult{Result: "Error: 599 - Network Connect Timeout"}},
		{name: "unknown code, no phrase", url: status.URL, path: "raw/599", want: TestResult{Result: "Error: 599 - Unknown"}},
		{name: "known code, odd phrase", url: status.URL, path: "raw/503 Go Away", want: TestResult{Result: "Error: 503 - Service Unavailable"}},
		{name: "redirect followed", url: redirect.URL, path: "a.pom", want: TestResult{Success: true}},
		{name: "default path", url: status.URL, path: "", want: TestResult{Success: true}},
		{name: "timeout", url: stuck.URL, path: "a.pom", want: TestResult{Result: "Error: Connection timeout"}},
		{name: "connection refused", url: refused, path: "a.pom", want: TestResult{Result: "Error: Connection refused"}},
		{name: "redirect loop", url: loop.URL, path: "a.pom", want: TestResult{Result: "Error: Too many redirects"}},
		{name: "invalid url", url: "invalid-url", path: "a.pom", want: TestResult{Result: "Error: must be a valid URL"}},
		{name: "blocked", url: status.URL, path: "a.pom", blockLocal: true, want: TestResult{Result: "Error: is blocked: Requests to localhost are not allowed"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := New(Options{AllowLocalNetwork: !tt.blockLocal, CheckTimeout: 200 * time.Millisecond})
			res := c.Test(context.Background(), Endpoint{URL: tt.url}, tt.path)
			if res != tt.want {
				t.Fatalf("Test = %+v; want %+v", res, tt.want)
			}
		})
	}
	// Drain what the status server saw so far; the next case checks the
	// request itself.
	for len(got) > 0 {
		<-got
	}

	t.Run("HEAD with basic auth and default path", func(t *testing.T) {
		c := local(Options{})
		ep := Endpoint{URL: status.URL + "/", Username: "alice", Password: "s3cret"}
		if res := c.Test(context.Background(), ep, ""); !res.Success {
			t.Fatalf("Test = %+v", res)
		}
		want := seen{http.MethodHead, "/" + DefaultTestPath, "alice", "s3cret"}
		if s := <-got; s != want {
			t.Fatalf("server saw %+v; want %+v", s, want)
		}
	})
	t.Run("cached entry path with leading slash", func(t *testing.T) {
		c := local(Options{})
		if res := c.Test(context.Background(), Endpoint{URL: status.URL}, "/org/a/1/a-1.pom"); !res.Success {
			t.Fatalf("Test = %+v", res)
		}
		want := seen{http.MethodHead, "/org/a/1/a-1.pom", "", ""}
		if s := <-got; s != want {
			t.Fatalf("server saw %+v; want %+v", s, want)
		}
	})
}
