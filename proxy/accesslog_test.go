package proxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"github.com/valyala/fasthttp"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestAccessErrorReasons(t *testing.T) {
	tests := []struct {
		err  error
		want string
	}{
		{nil, ""},
		{errFileNotFound, "404 File not found on any upstream Not Found"},
		{errInsufficient, "insufficient_scope"},
		{errRouteNotFound, "404 Not Found"},
		{&missError{failures: []upstreamFailure{{upstream: 4, err: errShortBody}}}, "upstream 4: body ended before its Content-Length"},
		{&fillError{err: errTooLarge}, "file is larger than the cache accepts"},
		{fmt.Errorf("open /data/blobs/ab/cd: permission denied"), "internal error"},
	}
	for _, tc := range tests {
		if got := accessError(tc.err); got != tc.want {
			t.Errorf("accessError(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}

// TestAccessLogOfRequests: the listener writes one line per request with
// what it knows of every request; the query and the credentials of a
// request never reach it.
func TestAccessLogOfRequests(t *testing.T) {
	path := filepath.Join(t.TempDir(), "access.log")
	e := newEnv(t, func(o *envOptions) { o.accessLogPath = path; o.Listener.AccessLogJSON = true })
	up := newFakeUpstream(t)
	up.set(jarPath, fakeFile{body: jarBytes(jarPath, 1024)})
	up.set("org/x/broken/1/broken-1.pom", fakeFile{status: 500})
	uid := e.upstream(up.URL, nil, nil)
	e.get(jarPath).expect(t, 200)
	e.get(jarPath, "User-Agent", "Apache-Maven/3.9.6 \"quoted\"").expect(t, 200)
	reg := strconv.FormatInt(e.registry, 10)
	e.do("GET", "/"+reg+"/"+jarPath+"?private_token="+rootToken, nil).expect(t, 200)
	e.do("GET", "/"+reg+"/"+jarPath, nil, "Private-Token", "rdpat-wrong-token-0123456789").expect(t, 401)
	e.do("GET", "/"+reg+"/org/a/../b.jar", nil, "Private-Token", rootToken).expect(t, 400)
	e.do("DELETE", "/"+reg+"/"+jarPath, nil).expect(t, 405)
	e.get("org/x/broken/1/broken-1.pom").expect(t, 502)

	// Shutdown (in the cleanup) flushes; here the timer does: poll.
	var lines []map[string]any
	deadline := time.Now().Add(10 * time.Second)
	for {
		raw, _ := os.ReadFile(path)
		if n := bytes.Count(raw, []byte("\n")); n >= 7 || time.Now().After(deadline) {
			if bytes.Contains(raw, []byte(rootToken)) || bytes.Contains(raw, []byte("rdpat-wrong-token")) {
				t.Fatalf("a token reached the access log:\n%s", raw)
			}
			for _, l := range bytes.Split(bytes.TrimSpace(raw), []byte("\n")) {
				var m map[string]any
				if err := json.Unmarshal(l, &m); err != nil {
					t.Fatalf("%v: %s", err, l)
				}
				lines = append(lines, m)
			}
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if len(lines) != 7 {
		t.Fatalf("%d lines, want 7: %v", len(lines), lines)
	}
	want := []struct {
		method string
		status float64
		bytes  float64
		err    string
	}{
		{"GET", 200, 1024, ""},
		{"GET", 200, 1024, ""},
		{"GET", 200, 1024, ""},
		{"GET", 401, float64(len(errUnauthorized.body)), "401 Unauthorized"},
		{"GET", 400, -1, "path contains '..'"},
		{"DELETE", 405, -1, "405 Not Allowed"},
		{"GET", 502, -1, "upstream " + strconv.FormatInt(uid, 10) + ": answered 500 Internal Server Error"},
	}
	for i, w := range want {
		m := lines[i]
		if m["msg"] != "access" || m["method"] != w.method || m["status"] != w.status || m["client"] != "127.0.0.1" ||
			(w.bytes >= 0 && m["bytes"] != w.bytes) || (w.err != "" && m["error"] != w.err) || (w.err == "" && m["error"] != nil) {
			t.Errorf("line %d: %v", i, m)
		}
		if p, _ := m["path"].(string); !strings.HasPrefix(p, "/api/v4/virtual_registries/packages/maven/"+reg+"/") {
			t.Errorf("line %d: path %q", i, p)
		}
		if d, ok := m["duration"].(float64); !ok || d < 0 || d > 60 {
			t.Errorf("line %d: duration %v", i, m["duration"])
		}
	}
	if lines[1]["ua"] != "Apache-Maven/3.9.6 \"quoted\"" {
		t.Errorf("ua %q", lines[1]["ua"])
	}
	// What resolution adds: registry, caller, result, upstream.
	root, err := e.st.UserByUsername("root")
	if err != nil {
		t.Fatal(err)
	}
	for i, w := range []struct {
		result   string
		upstream float64
		user     bool
	}{{"miss", float64(uid), true}, {"hit", float64(uid), true}, {"hit", float64(uid), true},
		{"", 0, false}, {"", 0, false}, {"", 0, false}, {"miss", 0, true}} {
		m := lines[i]
		res, _ := m["result"].(string)
		upID, _ := m["upstream"].(float64)
		if res != w.result || upID != w.upstream {
			t.Errorf("line %d: result %q upstream %v, want %q %v", i, res, upID, w.result, w.upstream)
		}
		if w.user && (m["registry"] != float64(e.registry) || m["user"] != float64(root.ID) || m["token"] == nil) {
			t.Errorf("line %d: registry %v user %v token %v", i, m["registry"], m["user"], m["token"])
		}
	}
}

// TestAccessLogOffWithoutWriter: without an access log writer (main gives
// none while proxy.access_log is false, TestAccessLogOffByConfig) the
// listener writes none.
func TestAccessLogOffWithoutWriter(t *testing.T) {
	e := newEnv(t)
	e.do("GET", "/1/x.jar", nil).expect(t, 401)
	if e.srv.alog != nil {
		t.Fatal("an access log without a writer")
	}
}

// BenchmarkHitAccessLog is BenchmarkHit/1KiB with the access log off and
// on (to a file, as in production): the log's cost per hit in the handler.
func BenchmarkHitAccessLog(b *testing.B) {
	for _, on := range []bool{false, true} {
		b.Run(map[bool]string{false: "off", true: "file"}[on], func(b *testing.B) {
			e := newEnv(b, func(o *envOptions) {
				if on {
					o.accessLogPath = filepath.Join(b.TempDir(), "access.log")
				}
			})
			up := newFakeUpstream(b)
			up.set(jarPath, fakeFile{body: jarBytes(jarPath, 1024)})
			e.upstream(up.URL, nil, nil)
			e.get(jarPath).expect(b, 200)
			uri := "/api/v4/virtual_registries/packages/maven/" + strconv.FormatInt(e.registry, 10) + "/" + jarPath
			var ctx fasthttp.RequestCtx
			b.ReportAllocs()
			for b.Loop() {
				ctx.Request.Reset()
				ctx.Response.Reset()
				ctx.Request.Header.SetMethod(fasthttp.MethodGet)
				ctx.Request.SetRequestURI(uri)
				ctx.Request.Header.Set("Private-Token", rootToken)
				ctx.Request.Header.Set("User-Agent", "Apache-Maven/3.9.6 (Java 21; Linux)")
				e.srv.handle(&ctx)
				if ctx.Response.StatusCode() != fasthttp.StatusOK {
					b.Fatalf("status %d", ctx.Response.StatusCode())
				}
			}
			if on && e.srv.alog.Dropped() != 0 {
				b.Logf("%d lines dropped", e.srv.alog.Dropped())
			}
		})
	}
}
