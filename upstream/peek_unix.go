//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package upstream

import "syscall"

// peekPending reports whether at least one byte is waiting in the receive
// buffer of rc's socket: a MSG_PEEK with MSG_DONTWAIT neither consumes it
// nor blocks. Control, unlike RawConn.Read, takes no lock on the descriptor,
// so this can never wait for a concurrent read.
func peekPending(rc syscall.RawConn) bool {
	pending := false
	_ = rc.Control(func(fd uintptr) {
		var b [1]byte
		for {
			n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
			if err == syscall.EINTR {
				continue
			}
			// EAGAIN: nothing waiting; n == 0: the upstream closed after
			// the body, which is fine; other errors say nothing about excess.
			pending = err == nil && n > 0
			return
		}
	})
	return pending
}
