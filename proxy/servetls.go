package proxy

import (
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"time"
)

// maxHandshakes bounds the TLS handshakes in progress at once; past it the
// listener accepts no new connection until one ends (each ends within
// proxy.header_timeout).
const maxHandshakes = 1024

// ServeTLS is Serve over TLS with cfg (cmd/registryd's, whose certificate
// is reloaded without a restart). The TLS layer goes over the per-client
// limiter, not under it: a connection is counted, or refused and closed,
// as TCP, before any handshake, so the limiter never waits on a client's
// handshake. A handshake is bounded by proxy.header_timeout, as the
// request line is.
func (s *Server) ServeTLS(ln net.Listener, cfg *tls.Config) error {
	return s.srv.Serve(newTLSListener(s.conns.Listener(ln), cfg, s.srv.ReadTimeout))
}

// tlsListener hands fasthttp only connections whose TLS handshake is done.
// The handshakes run off the accept loop, each in its own goroutine with
// a deadline: fasthttp answers a connection over proxy.concurrency with a
// 503 written from its accept loop, and over TLS that write would first be
// a handshake, so a few clients that connect and send nothing would hold
// the loop, one deadline after another, and delay everyone else. A
// connection fasthttp serves gets its own deadlines (header, write and
// idle timeouts) before it reads or writes.
type tlsListener struct {
	net.Listener
	cfg       *tls.Config
	handshake time.Duration
	ready     chan accepted
	slots     chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

type accepted struct {
	c   net.Conn
	err error
}

func newTLSListener(ln net.Listener, cfg *tls.Config, handshake time.Duration) *tlsListener {
	l := &tlsListener{Listener: ln, cfg: cfg, handshake: handshake, ready: make(chan accepted),
		slots: make(chan struct{}, maxHandshakes), done: make(chan struct{})}
	go l.acceptLoop()
	return l
}

func (l *tlsListener) acceptLoop() {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			// fasthttp decides: it retries a temporary error and stops
			// on a closed listener, as without TLS.
			select {
			case l.ready <- accepted{err: err}:
			case <-l.done:
				return
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		select {
		case l.slots <- struct{}{}:
		case <-l.done:
			c.Close()
			return
		}
		go l.handshakeConn(c)
	}
}

func (l *tlsListener) handshakeConn(c net.Conn) {
	defer func() { <-l.slots }()
	_ = c.SetDeadline(time.Now().Add(l.handshake))
	tc := tls.Server(c, l.cfg)
	if err := tc.Handshake(); err != nil {
		c.Close() // a silent, slow or refused client: nothing to answer
		return
	}
	select {
	case l.ready <- accepted{c: tc}:
	case <-l.done:
		tc.Close()
	}
}

func (l *tlsListener) Accept() (net.Conn, error) {
	select {
	case a := <-l.ready:
		return a.c, a.err
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *tlsListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}
