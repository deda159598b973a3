package connlimit

import (
	"bufio"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"registryd/internal/clientkey"
	"registryd/internal/testclock"
	"registryd/internal/testlog"
)

// accepting serves ln wrapped by l: every admitted connection arrives on
// the returned channel. The test's cleanup closes ln and what was admitted.
func accepting(t *testing.T, l *Limiter, ln net.Listener) <-chan net.Conn {
	t.Helper()
	wrapped := l.Listener(ln)
	got := make(chan net.Conn, 64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := wrapped.Accept()
			if err != nil {
				return
			}
			got <- c
		}
	}()
	t.Cleanup(func() {
		wrapped.Close()
		<-done
		close(got)
		for c := range got {
			c.Close()
		}
	})
	return got
}

func listenLoopback(t *testing.T, network, addr string) net.Listener {
	t.Helper()
	ln, err := net.Listen(network, addr)
	if err != nil {
		t.Skipf("cannot listen on %s: %v", addr, err)
	}
	return ln
}

// dialFrom connects to ln from the local IP from.
func dialFrom(t *testing.T, ln net.Listener, from string) net.Conn {
	t.Helper()
	d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	c, err := d.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatalf("dial from %s: %v", from, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// admitted waits for the server side of the next admitted connection.
func admitted(t *testing.T, got <-chan net.Conn) net.Conn {
	t.Helper()
	select {
	case c := <-got:
		return c
	case <-time.After(10 * time.Second):
		t.Fatal("no connection admitted within 10s")
		return nil
	}
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

func TestConnLimitPerClient(t *testing.T) {
	l := New(2, 0, slog.New(slog.DiscardHandler))
	ln := listenLoopback(t, "tcp4", "127.0.0.1:0")
	got := accepting(t, l, ln)
	a := netip.MustParseAddr("127.0.0.1")

	dialFrom(t, ln, "127.0.0.1")
	first := admitted(t, got)
	dialFrom(t, ln, "127.0.0.1")
	admitted(t, got)
	if n := l.conns(a); n != 2 {
		t.Fatalf("127.0.0.1 holds %d connections, want 2", n)
	}

	// The third of the same client is answered 429 and closed, never handed over.
	expectRefused(t, dialFrom(t, ln, "127.0.0.1"))
	if n := l.refused.Load(); n != 1 {
		t.Fatalf("refused = %d, want 1", n)
	}

	// Another client is not affected (Linux routes all of 127/8 on lo).
	dialFrom(t, ln, "127.0.0.2")
	other := admitted(t, got)
	if n := l.conns(netip.MustParseAddr("127.0.0.2")); n != 1 {
		t.Fatalf("127.0.0.2 holds %d connections, want 1", n)
	}
	if n := l.open.Load(); n != 3 {
		t.Fatalf("open = %d, want 3", n)
	}

	// Closing frees the slot exactly once, however often Close is called.
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	if err := first.Close(); err == nil {
		t.Fatal("the second Close did not report the closed connection")
	}
	if n := l.conns(a); n != 1 {
		t.Fatalf("after closing one (twice), 127.0.0.1 holds %d connections, want 1", n)
	}
	if n := l.open.Load(); n != 2 {
		t.Fatalf("open = %d, want 2", n)
	}
	dialFrom(t, ln, "127.0.0.1")
	admitted(t, got)
	expectRefused(t, dialFrom(t, ln, "127.0.0.1"))

	// A client whose last connection closes leaves no trace.
	other.Close()
	if _, ok := l.clients[clientkey.Of(netip.MustParseAddr("127.0.0.2"))]; ok {
		t.Fatal("a client without connections is still in the map")
	}
}

func TestConnLimitIPv6(t *testing.T) {
	l := New(1, 0, slog.New(slog.DiscardHandler))
	ln := listenLoopback(t, "tcp6", "[::1]:0")
	got := accepting(t, l, ln)
	dialFrom(t, ln, "::1")
	c := admitted(t, got)
	if n := l.conns(netip.MustParseAddr("::1")); n != 1 {
		t.Fatalf("::1 holds %d connections, want 1", n)
	}
	expectRefused(t, dialFrom(t, ln, "::1"))
	c.Close()
	dialFrom(t, ln, "::1")
	admitted(t, got)
}

// addrConn is a connection from a given peer address.
type addrConn struct {
	net.Conn
	remote net.Addr
}

func (c addrConn) RemoteAddr() net.Addr { return c.remote }

// pipeFrom is one end of a pipe that claims to come from remote; the other
// end is drained so that a refusal's write does not wait on it.
func pipeFrom(t *testing.T, remote net.Addr) net.Conn {
	t.Helper()
	server, client := net.Pipe()
	go io.Copy(io.Discard, client)
	t.Cleanup(func() { server.Close(); client.Close() })
	return addrConn{Conn: server, remote: remote}
}

func TestClientAddr(t *testing.T) {
	tests := []struct {
		name string
		addr net.Addr
		want string // "" for no client address
	}{
		{"ipv4, 4 bytes", &net.TCPAddr{IP: net.IPv4(10, 1, 2, 3).To4(), Port: 1}, "10.1.2.3"},
		{"ipv4, 16 bytes (as net.ParseIP makes it)", &net.TCPAddr{IP: net.ParseIP("10.1.2.3"), Port: 1}, "10.1.2.3"},
		{"ipv4-mapped ipv6 (a dual-stack listener)", &net.TCPAddr{IP: netip.MustParseAddr("::ffff:10.1.2.3").AsSlice()}, "10.1.2.3"},
		{"ipv6", &net.TCPAddr{IP: net.ParseIP("2001:db8::1"), Port: 1}, "2001:db8::1"},
		{"ipv6 with zone", &net.TCPAddr{IP: net.ParseIP("fe80::1"), Zone: "eth0"}, "fe80::1"},
		{"other addr type", &net.UDPAddr{IP: net.ParseIP("192.0.2.1"), Port: 9}, "192.0.2.1"},
		{"unix socket", &net.UnixAddr{Name: "/run/x.sock", Net: "unix"}, ""},
		{"nil", nil, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := clientkey.Addr(tc.addr)
			if tc.want == "" {
				if got.IsValid() {
					t.Fatalf("clientkey.Addr = %v, want none", got)
				}
				return
			}
			if got != netip.MustParseAddr(tc.want) {
				t.Fatalf("clientkey.Addr = %v, want %s", got, tc.want)
			}
		})
	}

	// Both spellings of one IPv4 client share its count.
	l := New(1, 0, slog.New(slog.DiscardHandler))
	if l.admit(pipeFrom(t, &net.TCPAddr{IP: net.IPv4(10, 1, 2, 3).To4()})) == nil {
		t.Fatal("the first connection was refused")
	}
	if l.admit(pipeFrom(t, &net.TCPAddr{IP: netip.MustParseAddr("::ffff:10.1.2.3").AsSlice()})) != nil {
		t.Fatal("the IPv4-mapped spelling of the same client was admitted over its limit")
	}
	// A peer without an IP is counted but not limited.
	for range 3 {
		if l.admit(pipeFrom(t, &net.UnixAddr{Name: "@x", Net: "unix"})) == nil {
			t.Fatal("a unix socket peer was refused")
		}
	}
	if n := l.open.Load(); n != 4 {
		t.Fatalf("open = %d, want 4", n)
	}
}

func TestConnLimitOff(t *testing.T) {
	l := New(0, 0, slog.New(slog.DiscardHandler))
	var conns []net.Conn
	for range 10 {
		c := l.admit(pipeFrom(t, &net.TCPAddr{IP: net.IPv4(10, 0, 0, 1)}))
		if c == nil {
			t.Fatal("refused with the limit off")
		}
		conns = append(conns, c)
	}
	if len(l.clients) != 0 || l.open.Load() != 10 {
		t.Fatalf("clients %v, open %d; want none and 10", l.clients, l.open.Load())
	}
	for _, c := range conns {
		c.Close()
	}
	if n := l.open.Load(); n != 0 {
		t.Fatalf("open = %d after closing all", n)
	}
}

func TestConnLimitWarnsOncePerMinutePerClient(t *testing.T) {
	h := &testlog.Recorder{}
	l := New(1, 0, slog.New(h))
	clock := testclock.New(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC))
	l.now = clock.Now
	from := func(ip string) net.Conn { return pipeFrom(t, &net.TCPAddr{IP: net.ParseIP(ip), Port: 4242}) }
	l.admit(from("192.0.2.1"))
	l.admit(from("2001:db8::7"))

	refuse := func(ip string, want int) {
		t.Helper()
		if l.admit(from(ip)) != nil {
			t.Fatalf("%s admitted over its limit", ip)
		}
		if n := len(h.Lines()); n != want {
			t.Fatalf("%d log lines, want %d: %q", n, want, h.Lines())
		}
	}
	refuse("192.0.2.1", 1)
	if line := h.Lines()[0]; !strings.HasPrefix(line, "WARN ") || !strings.Contains(line, "client=192.0.2.1 ") ||
		strings.Contains(line, "4242") || !strings.Contains(line, "limit=1") {
		t.Fatalf("log line %q: want a warning naming the address (without port) and the limit", line)
	}
	refuse("192.0.2.1", 1)
	refuse("2001:db8::7", 2) // another client has its own minute
	clock.Advance(59 * time.Second)
	refuse("192.0.2.1", 2)
	clock.Advance(time.Second)
	refuse("192.0.2.1", 3)
	refuse("2001:db8::7", 4) // a minute after its line
	clock.Advance(30 * time.Second)
	refuse("2001:db8::7", 4)
	refuse("192.0.2.1", 4)
	clock.Advance(5 * time.Minute)
	refuse("192.0.2.1", 5)
	refuse("192.0.2.1", 5)
	if n := l.refused.Load(); n != 10 {
		t.Fatalf("refused = %d, want 9 (every refusal counts, logged or not)", n)
	}
}

// readerFromConn records what its ReadFrom was given.
type readerFromConn struct {
	net.Conn
	got io.Reader
}

func (c *readerFromConn) ReadFrom(r io.Reader) (int64, error) {
	c.got = r
	return 0, nil
}

// TestLimitedConnKeepsSendfile: bufio.Writer.ReadFrom uses its writer's
// ReadFrom (sendfile on a *net.TCPConn) only if the writer has one.
func TestLimitedConnKeepsSendfile(t *testing.T) {
	l := New(0, 0, slog.New(slog.DiscardHandler))
	inner := &readerFromConn{Conn: pipeFrom(t, &net.TCPAddr{IP: net.IPv4(10, 0, 0, 1)})}
	c := l.admit(inner)
	f, err := os.Open(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	lr := &io.LimitedReader{R: f, N: 10}
	if _, err := bufio.NewWriter(c).ReadFrom(lr); err != nil {
		t.Fatal(err)
	}
	if inner.got != lr {
		t.Fatalf("the inner connection's ReadFrom got %T, want the file reader itself", inner.got)
	}

	// Without a ReadFrom underneath, the bytes are copied (and no loop).
	server, client := net.Pipe()
	defer client.Close()
	c = l.admit(addrConn{Conn: server, remote: &net.TCPAddr{IP: net.IPv4(10, 0, 0, 1)}})
	defer c.Close()
	done := make(chan []byte)
	go func() { b, _ := io.ReadAll(io.LimitReader(client, 5)); done <- b }()
	if n, err := c.(io.ReaderFrom).ReadFrom(strings.NewReader("bytes")); n != 5 || err != nil {
		t.Fatalf("ReadFrom = %d, %v", n, err)
	}
	if b := <-done; string(b) != "bytes" {
		t.Fatalf("copied %q", b)
	}
}

// scriptedListener answers Accept from a list: an error or a connection.
type scriptedListener struct {
	net.Listener
	next []any
}

func (l *scriptedListener) Accept() (net.Conn, error) {
	if len(l.next) == 0 {
		return nil, net.ErrClosed
	}
	x := l.next[0]
	l.next = l.next[1:]
	if err, ok := x.(error); ok {
		return nil, err
	}
	return x.(net.Conn), nil
}

// TestAcceptWaitsOutFileLimit: out of descriptors is not the listener's
// end (fasthttp would stop serving on it), it is waited out.
func TestAcceptWaitsOutFileLimit(t *testing.T) {
	h := &testlog.Recorder{}
	l := New(1, 0, slog.New(h))
	emfile := &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	conn := pipeFrom(t, &net.TCPAddr{IP: net.IPv4(10, 0, 0, 1)})
	ln := l.Listener(&scriptedListener{next: []any{emfile, emfile, conn}})
	c, err := ln.Accept()
	if err != nil {
		t.Fatalf("Accept = %v, want the connection after the EMFILEs", err)
	}
	if c.RemoteAddr().String() != "10.0.0.1:0" {
		t.Fatalf("accepted %v", c.RemoteAddr())
	}
	if n := len(h.Lines()); n != 1 || !strings.Contains(h.Lines()[0], "too many open files") {
		t.Fatalf("log lines %q, want one naming the error", h.Lines())
	}
	if _, err := ln.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept = %v, want the listener's own error", err)
	}
}
