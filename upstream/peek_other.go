//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package upstream

import "syscall"

// peekPending cannot look into the socket here: only excess bytes read
// together with the body are detected on this platform.
func peekPending(syscall.RawConn) bool { return false }
