//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package sockpeek

import "syscall"

// Peek reports what rc's receive queue holds: a MSG_PEEK with MSG_DONTWAIT
// neither consumes a byte nor blocks; it returns 0 bytes only after the
// peer's FIN, and an error other than EAGAIN after a reset. Control,
// unlike RawConn.Read, takes no lock on the descriptor, so this never
// waits for a concurrent read.
func Peek(rc syscall.RawConn) State {
	st := Unknown
	err := rc.Control(func(fd uintptr) {
		var b [1]byte
		for {
			n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
			switch {
			case err == syscall.EINTR:
				continue
			case err == syscall.EAGAIN || err == syscall.EWOULDBLOCK:
				st = Empty
			case err != nil, n == 0:
				st = Closed
			default:
				st = Pending
			}
			return
		}
	})
	if err != nil {
		return Unknown
	}
	return st
}
