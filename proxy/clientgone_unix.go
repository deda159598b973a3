//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package proxy

import "syscall"

// peerClosed reports whether the client closed or reset its connection: a
// MSG_PEEK with MSG_DONTWAIT reads nothing and never blocks; it returns 0
// bytes only after the peer's FIN, and an error other than EAGAIN after a
// reset. Bytes waiting (a pipelined request) mean the client is there.
// Control, unlike RawConn.Read, takes no lock on the descriptor, so this
// never waits for fasthttp.
func peerClosed(rc syscall.RawConn) bool {
	closed := false
	_ = rc.Control(func(fd uintptr) {
		var b [1]byte
		for {
			n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
			if err == syscall.EINTR {
				continue
			}
			closed = (err == nil && n == 0) || (err != nil && err != syscall.EAGAIN && err != syscall.EWOULDBLOCK)
			return
		}
	})
	return closed
}
