package upstream

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// rawServer is a loopback HTTP/1.1 server that answers each request with
// bytes chosen by the test, written in one Write: the exact faults net/http
// would not produce. It serves requests on a connection until the answer
// says Connection: close or the client goes away.
type rawServer struct {
	URL   string
	conns atomic.Int32
	reqs  atomic.Int32
}

func newRawServer(t *testing.T, answer func(path string) []byte) *rawServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &rawServer{URL: "http://" + ln.Addr().String()}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		open []net.Conn
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			s.conns.Add(1)
			mu.Lock()
			open = append(open, conn)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer conn.Close()
				br := bufio.NewReader(conn)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					s.reqs.Add(1)
					resp := answer(req.URL.Path)
					if _, err := conn.Write(resp); err != nil {
						return
					}
					if bytes.Contains(resp, []byte("\r\nConnection: close\r\n")) {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range open {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return s
}

// rawAnswer builds a 200 answer announcing length bytes and carrying body.
func rawAnswer(length int, body []byte, extraHeader string) []byte {
	h := "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: " + strconv.Itoa(length) + "\r\n" + extraHeader + "\r\n"
	return append([]byte(h), body...)
}

// TestBodyLongerThanContentLength: an upstream that sends more bytes than
// it announced makes Body.Read fail with an *AnswerError instead of io.EOF,
// and the connection is not reused; an exact body ends with io.EOF and its
// connection is reused.
func TestBodyLongerThanContentLength(t *testing.T) {
	small := payload(100)
	large := payload(200 << 10)
	type tc struct {
		name   string
		answer []byte
		long   bool
		want   []byte // body expected when not long
	}
	var tests []tc
	for _, size := range []struct {
		name string
		body []byte
	}{{"small", small}, {"large", large}} {
		for _, conn := range []struct{ name, header string }{{"keep-alive", ""}, {"close", "Connection: close\r\n"}} {
			b := size.body
			n := len(b)
			tests = append(tests,
				tc{size.name + " exact " + conn.name, rawAnswer(n, b, conn.header), false, b},
				tc{size.name + " one byte more " + conn.name, rawAnswer(n-1, b, conn.header), true, nil},
				tc{size.name + " ten bytes more " + conn.name, rawAnswer(n-10, b, conn.header), true, nil},
				tc{size.name + " a second answer smuggled " + conn.name, append(rawAnswer(n, b, conn.header), rawAnswer(5, []byte("evil!"), "")...), true, nil},
			)
		}
	}
	// A 1xx before the real answer moves where the body starts.
	hints := []byte("HTTP/1.1 103 Early Hints\r\nLink: </a.pom>; rel=preload\r\n\r\n")
	tests = append(tests,
		tc{"exact after 103", append(bytes.Clone(hints), rawAnswer(len(small), small, "")...), false, small},
		tc{"longer after 103", append(bytes.Clone(hints), rawAnswer(len(small)-3, small, "")...), true, nil},
		tc{"exact with LF line ends", []byte("HTTP/1.1 200 OK\nContent-Length: 5\n\nhello"), false, []byte("hello")},
		tc{"longer with LF line ends", []byte("HTTP/1.1 200 OK\nContent-Length: 4\n\nhello"), true, nil},
	)

	readers := []struct {
		name string
		read func(io.Reader) ([]byte, error)
	}{
		{"ReadAll", io.ReadAll},
		{"Copy 32k", func(r io.Reader) ([]byte, error) {
			var b bytes.Buffer
			_, err := io.CopyBuffer(&b, struct{ io.Reader }{r}, make([]byte, 32<<10))
			return b.Bytes(), err
		}},
		{"Copy 1000", func(r io.Reader) ([]byte, error) {
			var b bytes.Buffer
			_, err := io.CopyBuffer(&b, struct{ io.Reader }{r}, make([]byte, 1000))
			return b.Bytes(), err
		}},
	}

	for _, tt := range tests {
		for _, rd := range readers {
			t.Run(tt.name+"/"+rd.name, func(t *testing.T) {
				srv := newRawServer(t, func(path string) []byte {
					if path == "/next.pom" {
						return rawAnswer(2, []byte("ok"), "")
					}
					return tt.answer
				})
				c := local(Options{})
				defer c.CloseIdleConnections()
				ep := Endpoint{URL: srv.URL}
				resp, err := c.Get(context.Background(), ep, "a.jar", "")
				if err != nil {
					t.Fatal(err)
				}
				got, err := rd.read(resp.Body)
				resp.Body.Close()
				if tt.long {
					var ae *AnswerError
					if !errors.As(err, &ae) || ae.Reason != "body longer than its Content-Length" || !errors.Is(err, ErrBadAnswer) {
						t.Fatalf("read %d bytes, err = %v; want *AnswerError body longer than its Content-Length", len(got), err)
					}
				} else {
					if err != nil {
						t.Fatalf("read: %v", err)
					}
					if !bytes.Equal(got, tt.want) {
						t.Fatalf("read %d bytes; want %d", len(got), len(tt.want))
					}
				}

				// The next request: a fresh connection after a long body
				// (or a Connection: close), the same one otherwise.
				resp, err = c.Get(context.Background(), ep, "next.pom", "")
				if err != nil {
					t.Fatal(err)
				}
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || string(b) != "ok" {
					t.Fatalf("next request: %q, %v", b, err)
				}
				wantConns := int32(1)
				if tt.long || bytes.Contains(tt.answer, []byte("Connection: close")) {
					wantConns = 2
				}
				if n := srv.conns.Load(); n != wantConns {
					t.Fatalf("server saw %d connections; want %d", n, wantConns)
				}
			})
		}
	}
}

// TestLongBodyUnderDecoder: the length check is on the bytes on the wire,
// and its error wins over whatever the decoder makes of the end.
func TestLongBodyUnderDecoder(t *testing.T) {
	gz := compress(t, "gzip", payload(50<<10))
	srv := newRawServer(t, func(string) []byte {
		return rawAnswer(len(gz)-8, gz, "Content-Encoding: gzip\r\n")
	})
	resp, err := local(Options{}).Get(context.Background(), Endpoint{URL: srv.URL}, "a.jar", "")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	var ae *AnswerError
	if !errors.As(err, &ae) || ae.Reason != "body longer than its Content-Length" {
		t.Fatalf("err = %v; want body longer than its Content-Length", err)
	}
}

// TestLongErrorPage: a refused answer with excess bytes does not leave its
// connection in the pool either.
func TestLongErrorPage(t *testing.T) {
	srv := newRawServer(t, func(path string) []byte {
		if path == "/next.pom" {
			return rawAnswer(2, []byte("ok"), "")
		}
		return []byte("HTTP/1.1 404 Not Found\r\nContent-Length: 3\r\n\r\nnot found")
	})
	c := local(Options{})
	if _, err := c.Get(context.Background(), Endpoint{URL: srv.URL}, "a.jar", ""); !errors.Is(err, ErrNotFound) {
		t.Fatalf("err = %v; want ErrNotFound", err)
	}
	resp, err := c.Get(context.Background(), Endpoint{URL: srv.URL}, "next.pom", "")
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || string(b) != "ok" {
		t.Fatalf("next: %q, %v", b, err)
	}
	if n := srv.conns.Load(); n != 2 {
		t.Fatalf("server saw %d connections; want 2", n)
	}
}

// TestBodyShortRaw: a body cut short by the upstream closing still fails
// with io.ErrUnexpectedEOF in a *NetError, with the length check armed.
func TestBodyShortRaw(t *testing.T) {
	srv := newRawServer(t, func(string) []byte {
		return rawAnswer(1000, payload(600), "Connection: close\r\n")
	})
	resp, err := local(Options{}).Get(context.Background(), Endpoint{URL: srv.URL}, "a.jar", "")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	var ne *NetError
	if len(b) != 600 || !errors.As(err, &ne) || !errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, ErrBadAnswer) {
		t.Fatalf("read %d, err = %v; want a *NetError with io.ErrUnexpectedEOF", len(b), err)
	}
}

// tcpPair returns a countConn dialled to a loopback listener, and the
// server's end.
func tcpPair(t *testing.T) (*countConn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return newCountConn(client), server
}

// readN reads exactly n bytes from c.
func readN(t *testing.T, c net.Conn, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := io.ReadFull(c, b); err != nil {
		t.Fatalf("read %d: %v", n, err)
	}
	return b
}

// waitPending waits until the kernel has bytes for c: the server's write
// has arrived.
func waitPending(t *testing.T, c *countConn) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !c.pending() {
		if time.Now().After(deadline) {
			t.Fatal("bytes never arrived")
		}
		runtime.Gosched() // polling the condition itself, no guessed delay
	}
}

// TestCountConnVerdicts drives countConn directly through each way a
// verdict is reached.
func TestCountConnVerdicts(t *testing.T) {
	const head = "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n"
	tests := []struct {
		name string
		run  func(t *testing.T, c *countConn, srv net.Conn) (*lengthCheck, error)
		long bool
	}{
		{"at arm: excess read with the headers", func(t *testing.T, c *countConn, srv net.Conn) (*lengthCheck, error) {
			srv.Write([]byte(head + "helloX"))
			readN(t, c, len(head)+6)
			return c.arm(5), nil
		}, true},
		{"at arm: excess waiting in the kernel", func(t *testing.T, c *countConn, srv net.Conn) (*lengthCheck, error) {
			srv.Write([]byte(head + "hello"))
			readN(t, c, len(head)+5)
			srv.Write([]byte("X"))
			waitPending(t, c)
			return c.arm(5), nil
		}, true},
		{"at arm: exact, nothing waiting", func(t *testing.T, c *countConn, srv net.Conn) (*lengthCheck, error) {
			srv.Write([]byte(head + "hello"))
			readN(t, c, len(head)+5)
			return c.arm(5), nil
		}, false},
		{"in read: excess in the same read", func(t *testing.T, c *countConn, srv net.Conn) (*lengthCheck, error) {
			srv.Write([]byte(head))
			readN(t, c, len(head))
			ck := c.arm(5)
			srv.Write([]byte("helloX"))
			waitPending(t, c)
			b := make([]byte, 64)
			n, err := c.Read(b)
			if n != 6 || err != io.EOF {
				t.Fatalf("read %d, %v; want 6 bytes and io.EOF", n, err)
			}
			return ck, nil
		}, true},
		{"in read: excess waiting in the kernel", func(t *testing.T, c *countConn, srv net.Conn) (*lengthCheck, error) {
			srv.Write([]byte(head))
			readN(t, c, len(head))
			ck := c.arm(5)
			srv.Write([]byte("helloX"))
			waitPending(t, c)
			b := make([]byte, 5) // exactly the body, as the transport asks
			n, err := c.Read(b)
			if n != 5 || err != io.EOF {
				t.Fatalf("read %d, %v; want 5 bytes and io.EOF", n, err)
			}
			return ck, nil
		}, true},
		{"in read: exact", func(t *testing.T, c *countConn, srv net.Conn) (*lengthCheck, error) {
			srv.Write([]byte(head))
			readN(t, c, len(head))
			ck := c.arm(5)
			srv.Write([]byte("hello"))
			if b := readN(t, c, 5); string(b) != "hello" {
				t.Fatalf("read %q", b)
			}
			return ck, nil
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, srv := tcpPair(t)
			if _, err := c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
				t.Fatal(err)
			}
			readN(t, srv, len("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
			ck, _ := tt.run(t, c, srv)
			if ck == nil {
				t.Fatal("no check armed")
			}
			if got := ck.long.Load(); got != tt.long {
				t.Fatalf("long = %v; want %v", got, tt.long)
			}
			c.mu.Lock()
			dead, start := c.dead, c.bodyStart
			c.mu.Unlock()
			if dead != tt.long {
				t.Fatalf("dead = %v; want %v", dead, tt.long)
			}
			if start != int64(len(head)) {
				t.Fatalf("body starts at %d; want %d", start, len(head))
			}
			if tt.long {
				if n, err := c.Read(make([]byte, 8)); n != 0 || err != io.EOF {
					t.Fatalf("read on a retired connection: %d, %v", n, err)
				}
				if _, err := c.Write([]byte("GET")); err == nil {
					t.Fatal("write on a retired connection succeeded")
				}
			}
		})
	}
}

// TestCountConnTLSPassThrough: a connection whose first byte written is a
// TLS handshake record is neither scanned nor checked.
func TestCountConnTLSPassThrough(t *testing.T) {
	c, srv := tcpPair(t)
	c.Write([]byte{0x16, 0x03, 0x01})
	readN(t, srv, 3)
	srv.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nabc"))
	readN(t, c, 41)
	if c.mode.Load() != connTLS || c.read != 0 || c.scanning || c.arm(1) != nil {
		t.Fatalf("TLS connection was tracked: mode %d read %d", c.mode.Load(), c.read)
	}
}

func TestStatusCode(t *testing.T) {
	tests := []struct {
		line string
		want int
	}{
		{"HTTP/1.1 200 OK", 200},
		{"HTTP/1.1 103", 103},
		{"HTTP/1.0  404 Not Found", 404},
		{"HTTP/1.1 20", 0},
		{"HTTP/1.1 2x0 OK", 0},
		{"", 0},
	}
	for _, tt := range tests {
		if got := statusCode([]byte(tt.line)); got != tt.want {
			t.Errorf("statusCode(%q) = %d; want %d", tt.line, got, tt.want)
		}
	}
	if !strings.HasPrefix(string(rawAnswer(1, nil, "")), "HTTP/1.1 200 OK\r\n") {
		t.Fatal("rawAnswer")
	}
}
