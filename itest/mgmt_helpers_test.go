package itest

// Helpers of the virtual registry management tests (permissions, registries,
// bad input, restart, daemon).

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
)

// vrBase is the record-id half of the virtual registry API.
const vrBase = "/virtual_registries/packages/maven"

// vr is a path under vrBase.
func vr(format string, a ...any) string { return vrBase + fmt.Sprintf(format, a...) }

// groupVR is a path under a group's virtual registry API; group is an id or
// a URL-encoded full path.
func groupVR(group any, rest string) string {
	return fmt.Sprintf("/groups/%v/-/virtual_registries/packages/maven%s", group, rest)
}

// Access levels.
const (
	guest      = 10
	reporter   = 20
	developer  = 30
	maintainer = 40
	owner      = 50
)

// msTimestamp is GitLab's timestamp: UTC with milliseconds.
var msTimestamp = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$`)

// wantResp fails unless the answer has the status and, when body is not "",
// a JSON body equal to body (compared as JSON, so key order is free; use
// jsonKeys to check order).
func wantResp(t testing.TB, r *Resp, status int, body string) {
	t.Helper()
	if r.Status != status {
		t.Fatalf("status %d, want %d; body: %s", r.Status, status, r.Body)
	}
	if body == "" {
		return
	}
	if !jsonEqual(t, r.Body, []byte(body)) {
		t.Fatalf("body %s\nwant %s", bytes.TrimSpace(r.Body), body)
	}
}

func jsonEqual(t testing.TB, a, b []byte) bool {
	t.Helper()
	var va, vb any
	if err := json.Unmarshal(a, &va); err != nil {
		t.Fatalf("not JSON (%v): %s", err, a)
	}
	if err := json.Unmarshal(b, &vb); err != nil {
		t.Fatalf("bad expectation (%v): %s", err, b)
	}
	ca, _ := json.Marshal(va)
	cb, _ := json.Marshal(vb)
	return bytes.Equal(ca, cb)
}

// jsonKeys is the keys of a JSON object in the order they were written.
func jsonKeys(t testing.TB, raw []byte) []string {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("not a JSON object: %s", raw)
	}
	var keys []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, tok.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			t.Fatal(err)
		}
	}
	return keys
}

// wantKeys fails unless the JSON object raw has exactly keys, in order.
func wantKeys(t testing.TB, raw []byte, keys ...string) {
	t.Helper()
	if got := jsonKeys(t, raw); strings.Join(got, ",") != strings.Join(keys, ",") {
		t.Fatalf("keys %v\nwant %v\nin %s", got, keys, raw)
	}
}

// wantTimestamps fails unless every named field of obj is a UTC timestamp
// with milliseconds.
func wantTimestamps(t testing.TB, obj map[string]any, fields ...string) {
	t.Helper()
	for _, f := range fields {
		s, _ := obj[f].(string)
		if !msTimestamp.MatchString(s) {
			t.Fatalf("%s = %v, want a UTC timestamp with milliseconds", f, obj[f])
		}
	}
}

// noServerErrors fails if the daemon answered any request with a 500: the
// admin listener logs each one as "request failed".
func noServerErrors(t testing.TB, d *Daemon) {
	t.Helper()
	for _, line := range strings.Split(d.Logs(), "\n") {
		if strings.Contains(line, `"msg":"request failed"`) {
			t.Errorf("the daemon logged a server error: %s", line)
		}
	}
}

// stubRequest is one request an upstreamStub received.
type stubRequest struct {
	Method, Path string
	User, Pass   string
	HasAuth      bool
}

// upstreamStub is a fake upstream on loopback that records what it is asked.
type upstreamStub struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []stubRequest
}

func newUpstreamStub(t testing.TB, h http.HandlerFunc) *upstreamStub {
	t.Helper()
	s := &upstreamStub{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, p, ok := r.BasicAuth()
		s.mu.Lock()
		s.reqs = append(s.reqs, stubRequest{Method: r.Method, Path: r.URL.Path, User: u, Pass: p, HasAuth: ok})
		s.mu.Unlock()
		h(w, r)
	}))
	t.Cleanup(s.Close)
	return s
}

// Requests is every request so far.
func (s *upstreamStub) Requests() []stubRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]stubRequest(nil), s.reqs...)
}

// Last is the latest request; it fails the test when there is none.
func (s *upstreamStub) Last(t testing.TB) stubRequest {
	t.Helper()
	reqs := s.Requests()
	if len(reqs) == 0 {
		t.Fatal("the upstream stub received no request")
	}
	return reqs[len(reqs)-1]
}

// closedPort is a loopback address nothing listens on.
func closedPort(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// vrState is the whole virtual registry state of a group as the API shows
// it: the registry list, every registry, its upstream list, the group's
// upstream list and every upstream. Two equal states mean nothing changed.
func vrState(t testing.TB, d *Daemon, group int64) string {
	t.Helper()
	var b strings.Builder
	get := func(path string) []byte {
		r := d.Do("GET", path, rootToken, nil)
		if r.Status != 200 {
			t.Fatalf("GET %s: %d %s", path, r.Status, r.Body)
		}
		b.WriteString(path + " " + string(bytes.TrimSpace(r.Body)) + "\n")
		return r.Body
	}
	var regs []map[string]any
	if err := json.Unmarshal(get(groupVR(group, "/registries")), &regs); err != nil {
		t.Fatal(err)
	}
	for _, reg := range regs {
		id := int64(reg["id"].(float64))
		get(vr("/registries/%d", id))
		get(vr("/registries/%d/upstreams", id))
	}
	var ups []map[string]any
	if err := json.Unmarshal(get(groupVR(group, "/upstreams?per_page=100")), &ups); err != nil {
		t.Fatal(err)
	}
	for _, u := range ups {
		get(vr("/upstreams/%d", int64(u["id"].(float64))))
	}
	return b.String()
}

// jsonField is the raw JSON of one field of the object raw.
func jsonField(t testing.TB, raw []byte, name string) []byte {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("not a JSON object (%v): %s", err, raw)
	}
	v, ok := m[name]
	if !ok {
		t.Fatalf("no %q in %s", name, raw)
	}
	return v
}

// jsonItems is the raw JSON of each element of the array raw.
func jsonItems(t testing.TB, raw []byte) [][]byte {
	t.Helper()
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		t.Fatalf("not a JSON array (%v): %s", err, raw)
	}
	out := make([][]byte, len(items))
	for i, it := range items {
		out[i] = it
	}
	return out
}
