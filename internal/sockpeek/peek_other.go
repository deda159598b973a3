//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package sockpeek

import "syscall"

// Peek cannot look into a socket on this platform.
func Peek(syscall.RawConn) State { return Unknown }
