package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The connection limits and the listener's timeouts, through the server
// (the limiter's own tests are internal/connlimit's).

// holdConn opens a connection from 127.0.0.1 to the env's proxy and sends
// half a request line: the server holds it, waiting for the rest.
func (e *env) holdConn(t *testing.T, from string) net.Conn {
	t.Helper()
	d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	c, err := d.Dial("tcp", e.addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := c.Write([]byte("GET /api/v4/virtual_registries/packages/maven/1/a")); err != nil {
		t.Fatal(err)
	}
	return c
}

// addr is the env's proxy host:port.
func (e *env) addr() string {
	return strings.TrimSuffix(strings.TrimPrefix(e.base, "http://"), "/api/v4/virtual_registries/packages/maven")
}

func TestConnLimitServer(t *testing.T) {
	e := newEnv(t, func(o *envOptions) { o.Listener.MaxConnsPerClient = 2 })
	e.holdConn(t, "127.0.0.1")
	e.holdConn(t, "127.0.0.1")
	// The server admits in its accept loop; the third connection is refused
	// only once both are counted, which the open gauge shows.
	waitFor(t, "the condition", func() bool { return e.metric("registryd_proxy_connections_open") == 2 })
	expectRefused(t, e.holdConn(t, "127.0.0.1"))

	// Another client gets its answer.
	other := &http.Client{Transport: &http.Transport{DialContext: (&net.Dialer{
		LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}).DialContext}}
	defer other.CloseIdleConnections()
	res, err := other.Get(e.base + "/" + strconv.FormatInt(e.registry, 10) + "/" + jarPath)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("the other client got %d, want 401", res.StatusCode)
	}
	if n := e.metric("registryd_proxy_connections_refused_total", "reason", "per_client_limit"); n != 1 {
		t.Fatalf("refused{per_client_limit} = %v, want 1", n)
	}
	if n := e.metric("registryd_proxy_connections_refused_total", "reason", "concurrency"); n != 0 {
		t.Fatalf("refused{concurrency} = %v, want 0", n)
	}
	e.lint()
}

// dribble writes p one byte every interval until it is written or the
// connection fails; it returns how many bytes it wrote.
func dribble(c net.Conn, p []byte, interval time.Duration) int {
	for i := range p {
		if _, err := c.Write(p[i : i+1]); err != nil {
			return i
		}
		time.Sleep(interval) // the pace of the slow client, not a synchronisation
	}
	return len(p)
}

// endOf reads c to its end and returns what came; it fails the test when
// the server has not closed c within 20s.
func endOf(t *testing.T, c net.Conn) string {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	b, err := io.ReadAll(c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the server did not close the connection within 20s (read %q)", b)
	}
	return string(b)
}

// TestHeaderTimeout: proxy.header_timeout cuts off a client that dribbles
// its request line and headers, on a new connection and on a kept-alive
// one, although proxy.read_timeout is an hour; an upload's body keeps
// read_timeout.
func TestHeaderTimeout(t *testing.T) {
	const headerTimeout = 500 * time.Millisecond
	e := newEnv(t, func(o *envOptions) {
		o.Listener.HeaderTimeout = headerTimeout
		o.Listener.ReadTimeout = time.Hour
	})
	dial := func(t *testing.T, e *env) net.Conn {
		c, err := net.DialTimeout("tcp", e.addr(), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	// Headers that would take half a minute at this pace.
	slowHeaders := []byte(strings.Repeat("X-Slow: 1\r\n", 300) + "\r\n")
	const pace = 10 * time.Millisecond
	cutOff := func(t *testing.T, c net.Conn) {
		t.Helper()
		if n := dribble(c, slowHeaders, pace); n >= len(slowHeaders) {
			t.Fatalf("the client finished its headers (%d bytes) before being cut off", n)
		}
		if got := endOf(t, c); !strings.HasPrefix(got, "HTTP/1.1 408 ") {
			t.Fatalf("cut off with %q, want a 408", got)
		}
	}

	t.Run("new connection", func(t *testing.T) {
		c := dial(t, e)
		if _, err := c.Write([]byte("GET /api/v4/virtual_registries/packages/maven/1/a.jar HTTP/1.1\r\nHost: x\r\n")); err != nil {
			t.Fatal(err)
		}
		cutOff(t, c)
	})

	t.Run("kept-alive connection", func(t *testing.T) {
		c := dial(t, e)
		br := bufio.NewReader(c)
		get := func() {
			t.Helper()
			if _, err := c.Write([]byte("GET /nope HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
				t.Fatal(err)
			}
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			res, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, res.Body)
			if res.StatusCode != http.StatusNotFound || res.Close {
				t.Fatalf("GET /nope: %d, close=%v", res.StatusCode, res.Close)
			}
		}
		get()
		// Idle between requests is idle_timeout's business, not the
		// header timeout's: the connection outlives a pause longer than it.
		time.Sleep(3 * headerTimeout)
		get()
		if _, err := c.Write([]byte("GET /nope HTTP/1.1\r\n")); err != nil {
			t.Fatal(err)
		}
		cutOff(t, c)
	})

	upload := func(t *testing.T, e *env, body []byte, pace time.Duration) (string, int) {
		up := newFakeUpstream(t)
		uid := e.upstream(up.URL, nil, nil)
		token := gatewayToken(e.secret, "HS256", map[string]any{"iat": e.clock.Now().Unix()})
		mp, ctype := multipartBody(t, body, "path", jarPath)
		c := dial(t, e)
		head := "POST /api/v4/virtual_registries/packages/maven/" + strconv.FormatInt(e.registry, 10) + "/" + jarPath + "/upload HTTP/1.1\r\n" +
			"Host: x\r\nContent-Type: " + ctype + "\r\nContent-Length: " + strconv.Itoa(mp.Len()) + "\r\n" +
			"Private-Token: " + rootToken + "\r\nUpstream-GID: gid://registryd/Upstream/" + strconv.FormatInt(uid, 10) + "\r\n" +
			"Svc-Gateway-Api-Request: " + token + "\r\nConnection: close\r\n\r\n"
		// The request line, the headers and the multipart preamble at once,
		// the file part's bytes one at a time, then the rest.
		raw := mp.Bytes()
		at := bytes.Index(raw, body)
		if _, err := c.Write(append([]byte(head), raw[:at]...)); err != nil {
			t.Fatal(err)
		}
		sent := dribble(c, body, pace)
		c.Write(raw[at+len(body):]) // fails when the server cut off the body
		return endOf(t, c), sent
	}

	t.Run("upload body slower than the header timeout", func(t *testing.T) {
		// 100 bytes at 10ms each: twice the header timeout.
		got, _ := upload(t, e, jarBytes(jarPath, 100), pace)
		if !strings.HasPrefix(got, "HTTP/1.1 200 ") {
			t.Fatalf("slow upload answered %q, want 200", got)
		}
	})

	t.Run("upload body slower than the read timeout", func(t *testing.T) {
		e := newEnv(t, func(o *envOptions) {
			o.Listener.HeaderTimeout = time.Hour
			o.Listener.ReadTimeout = headerTimeout
		})
		body := jarBytes(jarPath, 3000) // half a minute at this pace
		got, sent := upload(t, e, body, pace)
		if sent >= len(body) || strings.HasPrefix(got, "HTTP/1.1 200 ") {
			t.Fatalf("an upload body slower than read_timeout was not cut off: %d bytes sent, answer %q", sent, got)
		}
		t.Logf("cut off after %d body bytes with %q", sent, got)
	})
}

// expectRefused reads what the server sent on c: the 429 and then the end.
func expectRefused(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading the refusal: %v", err)
	}
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("reading the refusal's body: %v", err)
	}
	if res.StatusCode != http.StatusTooManyRequests || !res.Close ||
		res.Header.Get("Content-Type") != "application/json" || string(body) != `{"message":"429 Too Many Requests"}` {
		t.Fatalf("refusal: %d close=%v %q %s", res.StatusCode, res.Close, res.Header.Get("Content-Type"), body)
	}
}
