package proxy

import (
	"crypto/tls"
	"net"
)

// ServeTLS is Serve over TLS with cfg (cmd/registryd's, whose certificate
// is reloaded without a restart). The TLS layer goes over the per-client
// limiter, not under it: a connection is counted, or refused and closed,
// as TCP, before any handshake, so the accept loop never waits on a
// client's handshake, and a handshake is bounded by proxy.header_timeout
// as the request line is (fasthttp's first read).
func (s *Server) ServeTLS(ln net.Listener, cfg *tls.Config) error {
	return s.srv.Serve(tls.NewListener(s.conns.listener(ln), cfg))
}
