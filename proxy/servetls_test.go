package proxy

import (
	"bufio"
	"crypto/tls"
	"net"
	"net/http"
	"testing"
	"time"

	"registryd/internal/testcert"
)

// TestServeTLSRefusalDoesNotBlockAccept: with proxy.concurrency taken, a
// client that opens a TCP connection and never says a word does not stop
// the listener: fasthttp's 503 to it (a handshake first, over TLS) gives
// up after proxy.header_timeout, and the next client is answered.
func TestServeTLSRefusalDoesNotBlockAccept(t *testing.T) {
	e := newEnv(t, func(o *envOptions) {
		o.Listener.Concurrency = 1
		// Long: a client after silent ones must not wait for their
		// handshakes' deadlines.
		o.Listener.HeaderTimeout = time.Minute
		o.Listener.IdleTimeout = time.Minute
	})
	ca, err := testcert.NewCA("proxy test CA")
	if err != nil {
		t.Fatal(err)
	}
	pair, err := ca.Issue(2, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := pair.TLS()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go e.srv.ServeTLS(ln, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	addr := ln.Addr().String()
	client := &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost"}

	// A takes the one connection fasthttp serves and keeps it (keep-alive).
	a, err := tls.Dial("tcp", addr, client)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if _, err := a.Write([]byte("GET /-/liveness HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(a), nil)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("first client: %v %v", res, err)
	}
	// B and B2 connect and say nothing.
	for range 2 {
		b, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
	}
	// C is still handled: its handshake completes and it reads the 503.
	d := &net.Dialer{Timeout: 20 * time.Second}
	c, err := tls.DialWithDialer(d, "tcp", addr, client)
	if err != nil {
		t.Fatalf("a client after a silent one: %v", err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	res, err = http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || res.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("a client over proxy.concurrency: %v %v; want 503", res, err)
	}
}
