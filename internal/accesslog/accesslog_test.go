package accesslog

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"registryd/internal/testlog"
)

// fullRecord has every field set; accessTime is in a non-UTC zone so the
// line must convert it.
var accessTime = time.Date(2026, 5, 1, 14, 3, 4, 123_987_000, time.FixedZone("CEST", 2*3600))

func fullRecord() Record {
	return Record{
		Time: accessTime, Duration: 1234567 * time.Microsecond, Client: net.ParseIP("10.1.2.3"),
		Method: "GET", Path: "/api/v4/virtual_registries/packages/maven/3/org/x/1.0/x-1.0.jar",
		Registry: 3, Status: 200, Bytes: 1024, Result: "revalidated", Upstream: 7,
		User: 12, Token: 34, DeployToken: 0, RequestID: "", Error: "", UA: "Apache-Maven/3.9.6 (Java 21; Linux)",
	}
}

func TestAccessLineText(t *testing.T) {
	tests := []struct {
		name string
		rec  func(r *Record)
		want string
	}{
		{"every field", func(r *Record) {},
			`time=2026-05-01T12:03:04.123Z level=INFO msg=access client=10.1.2.3 method=GET registry=3 ` +
				`path=/api/v4/virtual_registries/packages/maven/3/org/x/1.0/x-1.0.jar status=200 bytes=1024 ` +
				`duration=1.234567 result=revalidated upstream=7 user=12 token=34 ua="Apache-Maven/3.9.6 (Java 21; Linux)"`},
		{"an early error leaves out what is not known", func(r *Record) {
			*r = Record{Time: accessTime, Duration: 90 * time.Microsecond, Client: net.ParseIP("::1"), Method: "GET",
				Path: "/nope", Status: 404, Bytes: 26, Error: "404 Not Found"}
		}, `time=2026-05-01T12:03:04.123Z level=INFO msg=access client=::1 method=GET path=/nope status=404 bytes=26 ` +
			`duration=0.000090 error="404 Not Found"`},
		{"a deploy token, a 502 with its upstream reasons, a request id", func(r *Record) {
			r.User, r.Token, r.DeployToken, r.Result, r.Status, r.Bytes = 0, 0, 5, "", 502, 0
			r.Error = "upstream 7: answered 503 Service Unavailable; upstream 9: connection refused"
			r.RequestID = "0a1b2c3d-5f"
			r.UA = ""
		}, `time=2026-05-01T12:03:04.123Z level=INFO msg=access client=10.1.2.3 method=GET registry=3 ` +
			`path=/api/v4/virtual_registries/packages/maven/3/org/x/1.0/x-1.0.jar status=502 bytes=0 duration=1.234567 ` +
			`upstream=7 deploy_token=5 request_id=0a1b2c3d-5f ` +
			`error="upstream 7: answered 503 Service Unavailable; upstream 9: connection refused"`},
		{"quotes, newlines, control characters, invalid UTF-8 and '=' are quoted and escaped", func(r *Record) {
			*r = Record{Time: accessTime, Client: net.ParseIP("10.1.2.3"), Method: "G=T",
				Path: "/a\"b\nc\x1b[31m\xff\xfe", Status: 400, UA: "evil\r\nlevel=ERROR msg=\"forged\"\x00é"}
		}, `time=2026-05-01T12:03:04.123Z level=INFO msg=access client=10.1.2.3 method="G=T" ` +
			`path="/a\"b\nc\x1b[31m\xff\xfe" status=400 bytes=0 duration=0.000000 ` +
			`ua="evil\r\nlevel=ERROR msg=\"forged\"\x00é"`},
		{"a query never reaches the line", func(r *Record) {
			r.Path = "/api/v4/virtual_registries/packages/maven/3/x.jar?private_token=glpat-SECRET&x=1"
		}, `time=2026-05-01T12:03:04.123Z level=INFO msg=access client=10.1.2.3 method=GET registry=3 ` +
			`path=/api/v4/virtual_registries/packages/maven/3/x.jar status=200 bytes=1024 ` +
			`duration=1.234567 result=revalidated upstream=7 user=12 token=34 ua="Apache-Maven/3.9.6 (Java 21; Linux)"`},
		{"an empty path, no client, a negative duration", func(r *Record) {
			*r = Record{Time: accessTime, Duration: -time.Second, Method: "GET", Status: 400}
		}, `time=2026-05-01T12:03:04.123Z level=INFO msg=access client=- method=GET path="" status=400 bytes=0 duration=0.000000`},
		{"an IPv4-mapped client", func(r *Record) {
			*r = Record{Time: accessTime, Client: net.ParseIP("::ffff:192.0.2.1"), Method: "HEAD", Path: "/", Status: 200}
		}, `time=2026-05-01T12:03:04.123Z level=INFO msg=access client=192.0.2.1 method=HEAD path=/ status=200 bytes=0 duration=0.000000`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := fullRecord()
			tc.rec(&r)
			got := string(appendAccessText(nil, &r))
			if got != tc.want+"\n" {
				t.Fatalf("line\n got %s\nwant %s", got, tc.want)
			}
			// Whatever went in, a line is one line, and it parses back.
			if strings.Count(got, "\n") != 1 {
				t.Fatalf("%d newlines", strings.Count(got, "\n"))
			}
			fields := parseLogfmt(t, strings.TrimSuffix(got, "\n"))
			if fields["msg"] != "access" || fields["path"] != cutQuery(r.Path) && len(r.Path) <= maxLogPath {
				t.Fatalf("parsed back: %q", fields)
			}
			if r.UA != "" && fields["ua"] != r.UA && utf8Valid(r.UA) {
				t.Fatalf("ua parsed back as %q, want %q", fields["ua"], r.UA)
			}
		})
	}
}

func utf8Valid(s string) bool { return strings.ToValidUTF8(s, "\uFFFD") == s }

// parseLogfmt parses a logfmt line as slog's TextHandler writes it: bare
// values or Go-quoted strings.
func parseLogfmt(t *testing.T, line string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for line != "" {
		k, rest, ok := strings.Cut(line, "=")
		if !ok || k == "" || strings.ContainsAny(k, " \"") {
			t.Fatalf("bad key at %q", line)
		}
		var v string
		if strings.HasPrefix(rest, `"`) {
			q, err := strconv.QuotedPrefix(rest)
			if err != nil {
				t.Fatalf("bad quoted value at %q: %v", rest, err)
			}
			v, _ = strconv.Unquote(q)
			rest = rest[len(q):]
		} else {
			v, rest, _ = strings.Cut(rest, " ")
			rest = " " + rest
			if rest == " " {
				rest = ""
			}
		}
		if _, dup := out[k]; dup {
			t.Fatalf("key %s twice", k)
		}
		out[k] = v
		if rest != "" {
			if rest[0] != ' ' {
				t.Fatalf("no space after %s=%q: %q", k, v, rest)
			}
			rest = rest[1:]
		}
		line = rest
	}
	return out
}

func TestAccessLineJSON(t *testing.T) {
	r := fullRecord()
	got := string(appendAccessJSON(nil, &r))
	want := `{"time":"2026-05-01T12:03:04.123Z","level":"INFO","msg":"access","client":"10.1.2.3","method":"GET",` +
		`"registry":3,"path":"/api/v4/virtual_registries/packages/maven/3/org/x/1.0/x-1.0.jar","status":200,` +
		`"bytes":1024,"duration":1.234567,"result":"revalidated","upstream":7,"user":12,"token":34,` +
		`"ua":"Apache-Maven/3.9.6 (Java 21; Linux)"}` + "\n"
	if got != want {
		t.Fatalf("line\n got %s\nwant %s", got, want)
	}

	// Escaping: every hostile string survives as valid JSON, one line, and
	// reads back as itself (invalid UTF-8 as U+FFFD, as encoding/json does).
	hostile := Record{Time: accessTime, Client: net.ParseIP("2001:db8::1"), Method: "GET",
		Path:  "/a\"b\\c\nd\te\x00\x1f\x7f\xff\u2028é?private_token=glpat-SECRET",
		UA:    "ua\"\r\n}{\"level\":\"ERROR\"\xc3",
		Error: "upstream 1: answered 500 \"oops\"", RequestID: "r\n1", Status: 500, Result: "miss"}
	line := appendAccessJSON(nil, &hostile)
	if bytes.Count(line, []byte("\n")) != 1 || line[len(line)-1] != '\n' {
		t.Fatalf("not one line: %q", line)
	}
	var m map[string]any
	if err := json.Unmarshal(line, &m); err != nil {
		t.Fatalf("not JSON (%v): %s", err, line)
	}
	for k, want := range map[string]any{
		"path": "/a\"b\\c\nd\te\x00\x1f\x7f\uFFFD\u2028é", "ua": "ua\"\r\n}{\"level\":\"ERROR\"\uFFFD",
		"error": "upstream 1: answered 500 \"oops\"", "request_id": "r\n1", "client": "2001:db8::1",
		"status": 500.0, "result": "miss", "level": "INFO",
	} {
		if m[k] != want {
			t.Errorf("%s = %q, want %q", k, m[k], want)
		}
	}
	if bytes.Contains(line, []byte("SECRET")) || bytes.Contains(line, []byte("private_token")) {
		t.Fatalf("the query reached the line: %s", line)
	}
	for _, raw := range []string{"\x7f", "\u2028", "\x00"} {
		if bytes.Contains(line, []byte(raw)) {
			t.Errorf("%q written raw: %s", raw, line)
		}
	}
}

func TestAccessLineBounds(t *testing.T) {
	r := fullRecord()
	r.UA = strings.Repeat("a", maxLogUA-1) + "é" + strings.Repeat("b", 100) // é straddles the bound
	r.Path = "/" + strings.Repeat("p", 10_000)
	r.Method = strings.Repeat("M", 100)
	for _, format := range []string{"text", "json"} {
		t.Run(format, func(t *testing.T) {
			var line []byte
			var ua, path, method string
			if format == "json" {
				line = appendAccessJSON(nil, &r)
				var m map[string]any
				if err := json.Unmarshal(line, &m); err != nil {
					t.Fatal(err)
				}
				ua, path, method = m["ua"].(string), m["path"].(string), m["method"].(string)
			} else {
				line = appendAccessText(nil, &r)
				f := parseLogfmt(t, strings.TrimSuffix(string(line), "\n"))
				ua, path, method = f["ua"], f["path"], f["method"]
			}
			// The cut falls before é, not inside it.
			if ua != strings.Repeat("a", maxLogUA-1)+"..." {
				t.Errorf("ua cut to %q", ua)
			}
			if len(path) != maxLogPath+3 || !strings.HasSuffix(path, "...") {
				t.Errorf("path of %d bytes", len(path))
			}
			if method != strings.Repeat("M", maxLogMethod)+"..." {
				t.Errorf("method %q", method)
			}
			if len(line) > 4096 {
				t.Errorf("a line of %d bytes", len(line))
			}
		})
	}
}

func TestAccessLogCloseFlushesEverything(t *testing.T) {
	var dst testlog.Buffer
	// The ticker never fires: only full batches and close write.
	l, err := start(&dst, false, nil, nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	const n = 5000 // several 64 KiB batches
	r := fullRecord()
	for i := range n {
		r.Bytes = int64(i)
		l.Write(&r)
	}
	l.Close()
	lines := strings.Split(strings.TrimSuffix(dst.String(), "\n"), "\n")
	if len(lines) != n || l.Dropped() != 0 {
		t.Fatalf("%d lines written, %d dropped, want %d and 0", len(lines), l.Dropped(), n)
	}
	for i, line := range lines {
		if f := parseLogfmt(t, line); f["bytes"] != strconv.Itoa(i) {
			t.Fatalf("line %d is %s: out of order or torn", i, line)
		}
	}
	// A line after close (a request that outlived the drain) is dropped
	// and counted, never written behind the writer's back.
	l.Write(&r)
	if got := strings.Count(dst.String(), "\n"); got != n || l.Dropped() != 1 {
		t.Fatalf("a line after close: %d lines, %d dropped", got, l.Dropped())
	}
	l.Close() // twice is fine
}

func TestAccessLogFlushesOnATimer(t *testing.T) {
	var dst testlog.Buffer
	l, err := start(&dst, true, nil, nil, 5*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	r := fullRecord()
	l.Write(&r)
	deadline := time.Now().Add(10 * time.Second)
	for dst.String() == "" {
		if time.Now().After(deadline) {
			t.Fatal("a lone line was never flushed")
		}
		time.Sleep(time.Millisecond)
	}
	if got := dst.String(); got != string(appendAccessJSON(nil, &r)) {
		t.Fatalf("flushed %q", got)
	}
}

func TestAccessLogConcurrentWriters(t *testing.T) {
	var dst testlog.Buffer
	l, err := start(&dst, true, nil, nil, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	const writers, each = 8, 2000
	// Writers in a tight loop can outrun the destination on a busy machine:
	// then lines are dropped, never torn or reordered, and every line is
	// either written or counted.
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := fullRecord()
			r.Registry = int64(w + 1)
			for i := range each {
				r.Bytes = int64(i)
				l.Write(&r)
			}
		}()
	}
	wg.Wait()
	l.Close()
	next := map[float64]float64{}
	n := 0
	for _, line := range strings.Split(strings.TrimSuffix(dst.String(), "\n"), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("torn line %q: %v", line, err)
		}
		reg, b := m["registry"].(float64), m["bytes"].(float64)
		if b < next[reg] {
			t.Fatalf("writer %v: line %v after %v", reg, b, next[reg]-1)
		}
		next[reg] = b + 1
		n++
	}
	if int64(n)+l.Dropped() != writers*each {
		t.Fatalf("%d lines + %d dropped, want %d", n, l.Dropped(), writers*each)
	}
	t.Logf("%d lines written, %d dropped", n, l.Dropped())
}

// stalledWriter blocks every Write until released.
type stalledWriter struct {
	release chan struct{}
	entered chan struct{}
	once    sync.Once
	testlog.Buffer
}

func (s *stalledWriter) Write(p []byte) (int, error) {
	s.once.Do(func() { close(s.entered) })
	<-s.release
	return s.Buffer.Write(p)
}

// TestAccessLogStalledDestination: a destination that blocks never blocks
// a request; once 2 MiB wait, lines are dropped and counted, and every line
// is either written or counted.
func TestAccessLogStalledDestination(t *testing.T) {
	dst := &stalledWriter{release: make(chan struct{}), entered: make(chan struct{})}
	reg := prometheus.NewRegistry()
	l, err := start(dst, false, reg, nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	r := fullRecord()
	line := appendAccessText(nil, &r)
	n := 2 * maxAccessBufs * accessBufSize / len(line) // twice what can wait
	start := time.Now()
	for range n {
		l.Write(&r)
	}
	// Not a timing assertion: a blocked write would never return at all.
	t.Logf("%d writes against a stalled destination took %v", n, time.Since(start))
	<-dst.entered
	dropped := l.Dropped()
	if dropped == 0 || dropped >= int64(n) {
		t.Fatalf("%d of %d lines dropped", dropped, n)
	}
	if got := droppedMetric(t, reg); got != float64(dropped) {
		t.Fatalf("metric %v, counted %d", got, dropped)
	}
	close(dst.release)
	l.Close()
	written := strings.Count(dst.String(), "\n")
	if int64(written)+l.Dropped() != int64(n) {
		t.Fatalf("%d written + %d dropped != %d", written, l.Dropped(), n)
	}
	if got := droppedMetric(t, reg); got != float64(l.Dropped()) {
		t.Fatalf("metric %v, counted %d", got, l.Dropped())
	}
}

func droppedMetric(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "registryd_proxy_access_log_dropped_total" {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatal("no registryd_proxy_access_log_dropped_total")
	return 0
}

type failingWriter struct{}

func (failingWriter) Write(p []byte) (int, error) { return 0, errors.New("disk full") }

func TestAccessLogWriteErrorsCountAsDropped(t *testing.T) {
	l, err := start(failingWriter{}, true, nil, nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	r := fullRecord()
	for range 10 {
		l.Write(&r)
	}
	l.Close()
	if l.Dropped() != 10 {
		t.Fatalf("%d dropped, want 10", l.Dropped())
	}
}

func TestNilAccessLogIsOff(t *testing.T) {
	var l *Log
	r := fullRecord()
	l.Write(&r)
	l.Close()
}

func BenchmarkAccessLog(b *testing.B) {
	for _, format := range []string{"text", "json"} {
		b.Run(format, func(b *testing.B) {
			l, err := start(io.Discard, format == "json", nil, nil, accessFlushInterval)
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			r := fullRecord()
			b.SetBytes(int64(len(appendAccessText(nil, &r))))
			b.ReportAllocs()
			for b.Loop() {
				r.Time = time.Now()
				l.Write(&r)
			}
		})
	}
	b.Run("parallel", func(b *testing.B) {
		l, err := start(io.Discard, false, nil, nil, accessFlushInterval)
		if err != nil {
			b.Fatal(err)
		}
		defer l.Close()
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			r := fullRecord()
			for pb.Next() {
				l.Write(&r)
			}
		})
	})
}
