package proxy

import (
	"errors"
	"net"
	"syscall"
	"time"

	"registryd/internal/sockpeek"
)

// clientPoll is how often a request waiting for a fill's answer looks
// whether its client is still there (Hooks.ClientPoll: shorter in tests).
const clientPoll = 250 * time.Millisecond

// errClientGone ends a request whose client closed its connection while it
// waited for a fill's answer. Nobody reads the answer; the listener records
// it as 499 (nginx's "client closed request").
var errClientGone = errors.New("the client closed its connection")

// awaitReady waits for f's outcome, as <-f.ready does, and reports false
// when the client of conn went away first. fasthttp tells a handler nothing
// when its client leaves, and a fill may wait long for a slot of the
// upstream's cap (gate.go) or for the upstream's answer: meanwhile the
// client's connection is looked at every clientPoll, by a peek that
// neither reads nor blocks (sockpeek: the client closed or reset it; a
// pipelined request waiting there means it is still there). The caller releases the flight when the client
// is gone: a fill nobody else waits for is then dequeued (flight.orphaned)
// instead of asking the upstream for nobody. A nil conn (a merge, which has
// no one client) just waits.
func (s *engine) awaitReady(conn net.Conn, f *flight) bool {
	select {
	case <-f.ready:
		return true
	default:
	}
	var rc syscall.RawConn
	if conn != nil {
		rc = rawConn(conn)
	}
	if rc == nil {
		<-f.ready
		return true
	}
	t := time.NewTicker(s.clientPollEvery())
	defer t.Stop()
	for {
		select {
		case <-f.ready:
			return true
		case <-t.C:
			if sockpeek.Peek(rc) == sockpeek.Closed {
				return false
			}
		}
	}
}

// rawConn digs the socket out of a client connection (under a wrapper
// that gives it by NetConn, as the listener's per-client limiter and TLS
// do); nil when there is none.
func rawConn(c net.Conn) syscall.RawConn {
	for c != nil {
		switch v := c.(type) {
		case interface{ NetConn() net.Conn }:
			c = v.NetConn()
		case syscall.Conn:
			rc, err := v.SyscallConn()
			if err != nil {
				return nil
			}
			return rc
		default:
			return nil
		}
	}
	return nil
}
