package upstream

import (
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"

	"registryd/internal/sockpeek"
)

// This file detects bodies longer than their Content-Length on plain
// HTTP/1.x connections; the package comment says what is and is not caught.
//
// How, and why it is sound. Every dialled connection is a countConn. Go's
// transport reads it through a bufio.Reader, in two goroutines that never
// overlap on one connection: its readLoop reads the header block (and
// whatever follows it in the same read, up to 4 KiB), then hands the response
// over and does not touch the connection again until the body has reached
// EOF or been closed; the body itself is read in the caller's goroutine. No
// second request is written on the connection before that either (no
// pipelining). So:
//
//   - countConn counts the bytes its Read returns, and from the moment a
//     request is written it scans them for the end of the response's final
//     header block (1xx blocks skipped, as the transport does): that offset
//     is where the body starts, exactly where Go's parser says it starts
//     for any header block Go accepts with CRLF or LF line ends.
//   - When Do returns, Get arms a lengthCheck with end = body start +
//     Content-Length. If more than end bytes were read already, the excess
//     sits in the transport's buffer: too long. If exactly end, the body
//     was read whole with the headers, and a non-blocking MSG_PEEK on the
//     socket tells whether more is waiting; no other goroutine is reading
//     the connection at that point (readLoop waits for the body). Otherwise
//     the check stays armed on the connection.
//   - An armed check is decided inside the countConn.Read that first reaches
//     end, in whichever goroutine does the read, before that read returns.
//     Bytes past end in the same read, or waiting in the kernel (MSG_PEEK,
//     MSG_DONTWAIT), mean too long. The transport only learns the body is
//     over after this read returns, so the verdict is always in before the
//     body reports EOF, and the connection cannot yet have been handed to
//     another request (whose write would reset the scan).
//   - A too-long connection is retired: the deciding Read returns io.EOF
//     with its bytes (the transport has every body byte by then, so the body
//     still ends cleanly for it, and it then closes the connection instead
//     of pooling it), later Reads return io.EOF, and a verdict reached at arm
//     time makes Body.Read fail before reading, so Close discards the
//     connection.
//
// What cannot be seen: excess bytes that reach the kernel after the deciding
// read (a pause between body and excess), and everything under TLS, where
// the counter sees records, not HTTP. A TLS connection is recognised by its
// first written byte (a handshake record, 0x16; an HTTP request starts with
// a letter) and then passed through untouched.

// Connection modes, decided by the first byte written.
const (
	connUnknown int32 = iota
	connPlain
	connTLS
)

// countConn wraps a dialled connection; see above.
type countConn struct {
	net.Conn
	raw  syscall.RawConn // nil when the connection has no descriptor
	mode atomic.Int32

	mu        sync.Mutex
	read      int64 // bytes returned by Read so far
	scanning  bool  // a request was written; its final header block has not ended
	lineLen   int   // bytes on the current header line, CR not counted
	onStatus  bool  // the current line is a status line
	status    [16]byte
	statusN   int
	code      int          // status code of the current header block
	bodyStart int64        // offset of the current response's body; -1 until known
	check     *lengthCheck // armed, undecided check for the current response
	dead      bool         // excess bytes seen: the connection must not be reused
}

// lengthCheck is one response's verdict. end is the offset just past its
// body in the connection's byte stream.
type lengthCheck struct {
	end  int64
	long atomic.Bool
}

func newCountConn(conn net.Conn) *countConn {
	c := &countConn{Conn: conn, bodyStart: -1}
	if sc, ok := conn.(syscall.Conn); ok {
		if raw, err := sc.SyscallConn(); err == nil {
			c.raw = raw
		}
	}
	return c
}

func (c *countConn) Write(p []byte) (int, error) {
	if len(p) > 0 && c.mode.Load() == connUnknown {
		m := connPlain
		if p[0] == 0x16 {
			m = connTLS
		}
		c.mode.CompareAndSwap(connUnknown, m)
	}
	if c.mode.Load() == connPlain {
		c.mu.Lock()
		if c.dead {
			c.mu.Unlock()
			return 0, net.ErrClosed
		}
		// A new request: its response starts with the next byte read. A
		// request written in several pieces keeps the scan it started.
		if !c.scanning {
			c.scanning = true
			c.lineLen, c.onStatus, c.statusN, c.code = 0, true, 0, 0
			c.bodyStart = -1
			c.check = nil
		}
		c.mu.Unlock()
	}
	return c.Conn.Write(p)
}

func (c *countConn) Read(p []byte) (int, error) {
	if c.mode.Load() == connPlain {
		c.mu.Lock()
		dead := c.dead
		c.mu.Unlock()
		if dead {
			return 0, io.EOF
		}
	}
	n, err := c.Conn.Read(p)
	// The mode is looked at after the read: readLoop starts reading a new
	// connection before the first request is written.
	if n == 0 || c.mode.Load() != connPlain {
		return n, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	start := c.read
	c.read += int64(n)
	if c.scanning {
		c.scan(p[:n], start)
	}
	if ck := c.check; ck != nil && c.read >= ck.end {
		c.check = nil
		if c.read > ck.end || c.pending() {
			c.retire(ck)
			if err == nil {
				err = io.EOF
			}
		}
	}
	return n, err
}

// scan follows header lines in b (which starts at stream offset off) until
// the end of the final header block.
func (c *countConn) scan(b []byte, off int64) {
	for i, ch := range b {
		switch ch {
		case '\r':
		case '\n':
			switch {
			case c.onStatus:
				c.code = statusCode(c.status[:c.statusN])
				c.onStatus = false
			case c.lineLen == 0:
				if c.code >= 100 && c.code <= 199 && c.code != http.StatusSwitchingProtocols {
					// An interim answer: the real one follows.
					c.onStatus, c.statusN, c.code = true, 0, 0
					break
				}
				c.bodyStart = off + int64(i) + 1
				c.scanning = false
				return
			}
			c.lineLen = 0
		default:
			c.lineLen++
			if c.onStatus && c.statusN < len(c.status) {
				c.status[c.statusN] = ch
				c.statusN++
			}
		}
	}
}

// statusCode reads the code from the start of a status line the way
// net/http does ("HTTP/1.1 200 OK"), or returns 0.
func statusCode(line []byte) int {
	i := 0
	for i < len(line) && line[i] != ' ' {
		i++
	}
	for i < len(line) && line[i] == ' ' {
		i++
	}
	if len(line)-i < 3 {
		return 0
	}
	code := 0
	for _, d := range line[i : i+3] {
		if d < '0' || d > '9' {
			return 0
		}
		code = code*10 + int(d-'0')
	}
	return code
}

// pending reports whether bytes are waiting in the socket's receive buffer,
// without consuming them or blocking. Called with c.mu held, by the goroutine
// that owns the connection's reads at that moment.
func (c *countConn) pending() bool {
	return c.raw != nil && sockpeek.Peek(c.raw) == sockpeek.Pending
}

func (c *countConn) retire(ck *lengthCheck) {
	ck.long.Store(true)
	c.dead = true
}

// arm starts the length check of the response whose headers were just read,
// with its Content-Length. It returns nil when the body start is unknown.
func (c *countConn) arm(contentLength int64) *lengthCheck {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.scanning || c.bodyStart < 0 {
		return nil
	}
	ck := &lengthCheck{end: c.bodyStart + contentLength}
	switch {
	case c.read > ck.end, c.read == ck.end && c.pending():
		c.retire(ck)
	case c.read < ck.end:
		c.check = ck
	}
	return ck
}

// armLengthCheck arms the check for a GET answer that came on conn (nil
// when not a plain connection), or returns nil when its body has no
// announced, non-zero length: chunked, close-delimited, empty, HTTP/2.
func armLengthCheck(conn *countConn, hr *http.Response) *lengthCheck {
	if conn == nil || hr.ProtoMajor != 1 || hr.ContentLength <= 0 || len(hr.TransferEncoding) > 0 {
		return nil
	}
	if hr.StatusCode < 200 || hr.StatusCode == http.StatusNoContent || hr.StatusCode == http.StatusNotModified {
		return nil
	}
	return conn.arm(hr.ContentLength)
}
