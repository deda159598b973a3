package proxy

import (
	"crypto/tls"
	"net"
	"time"
)

// ServeTLS is Serve over TLS with cfg (cmd/registryd's, whose certificate
// is reloaded without a restart). The TLS layer goes over the per-client
// limiter, not under it: a connection is counted, or refused and closed,
// as TCP, before any handshake, so the limiter never waits on a client's
// handshake. A handshake is bounded by proxy.header_timeout, as the
// request line is.
func (s *Server) ServeTLS(ln net.Listener, cfg *tls.Config) error {
	return s.srv.Serve(&tlsListener{Listener: s.conns.Listener(ln), cfg: cfg, handshake: s.srv.ReadTimeout})
}

// tlsListener is tls.NewListener with a deadline on each connection it
// hands over. fasthttp answers a connection over proxy.concurrency with a
// 503 written from its accept loop: over TLS that write is first a
// handshake, which a client that connects and sends nothing would hold
// for ever, and no further connection would be accepted. The deadline
// bounds it; a connection fasthttp serves gets its own deadlines (header,
// write and idle timeouts) before it reads or writes.
type tlsListener struct {
	net.Listener
	cfg       *tls.Config
	handshake time.Duration
}

func (l *tlsListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(l.handshake))
	return tls.Server(c, l.cfg), nil
}
