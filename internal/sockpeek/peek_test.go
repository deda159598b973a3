//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package sockpeek

import (
	"net"
	"syscall"
	"testing"
	"time"
)

// pair returns both ends of a loopback TCP connection.
func pair(t *testing.T) (client, server *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return c.(*net.TCPConn), s.(*net.TCPConn)
}

func raw(t *testing.T, c syscall.Conn) syscall.RawConn {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	return rc
}

// waitState polls Peek until it says want: the peer's bytes or FIN cross
// loopback asynchronously.
func waitState(t *testing.T, rc syscall.RawConn, want State) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for Peek(rc) != want {
		if time.Now().After(deadline) {
			t.Fatalf("Peek = %v, want %v", Peek(rc), want)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestPeek(t *testing.T) {
	c, s := pair(t)
	rc := raw(t, s)
	if st := Peek(rc); st != Empty {
		t.Fatalf("an idle connection: %v, want Empty", st)
	}
	c.Write([]byte("x"))
	waitState(t, rc, Pending)
	// Peeking read nothing.
	var b [1]byte
	if n, err := s.Read(b[:]); n != 1 || err != nil || b[0] != 'x' {
		t.Fatalf("Read after Peek = %d %v %q", n, err, b)
	}
	if st := Peek(rc); st != Empty {
		t.Fatalf("after the byte was read: %v, want Empty", st)
	}
	c.Close()
	waitState(t, rc, Closed)

	// A reset.
	c, s = pair(t)
	c.SetLinger(0)
	c.Close()
	waitState(t, raw(t, s), Closed)
}
