package proxy

import (
	"bufio"
	"errors"
	"io"
	"os"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// flightReader streams a flight's body to one client from the temp file, as
// fast as the fill writes it, except the very last byte, which it hands over
// only once the body is known complete. It returns the fill's error if the
// body breaks, so fasthttp ends the response short (Content-Length not
// reached, or no terminating chunk) and closes the connection: a client never
// holds a complete-looking 200 of a body the upstream did not send whole.
type flightReader struct {
	f       *flight
	bytes   prometheus.Counter // registryd_proxy_served_bytes_total of the request
	upBytes prometheus.Counter // registryd_upstream_served_bytes_total of the flight's upstream
	off     int64
	counted bool
	// src is this reader's own descriptor of the temp file, for sendfile,
	// which sends from (and advances) a descriptor's file position; nil
	// until WriteTo opens it, or when it could not.
	src *os.File
	// memFrom is where the body goes on in memory rather than in the temp
	// file (an uncached flight, passthrough.go); set by next.
	memFrom int64
}

// next waits until there are bytes past r.off to send and returns how far
// they go; at the end it returns io.EOF, or the fill's error if the body
// broke before it was complete.
func (r *flightReader) next() (int64, error) {
	f := r.f
	for {
		f.mu.Lock()
		written, wake := f.written, f.wake
		r.memFrom = f.pass.memFromLocked()
		if f.pass.on {
			if r.off >= r.memFrom && r.off < f.pass.base {
				f.mu.Unlock() // cut off (cutLaggardsLocked): what it needs is gone
				return 0, errSlowReader
			}
			f.registerLocked(r)
		}
		if !f.complete && written == f.size && written > 0 {
			written-- // the last byte waits for the clean end
		}
		if r.off < written {
			f.mu.Unlock()
			return written, nil
		}
		if f.complete {
			f.mu.Unlock()
			// One download per response, and only of a cached file: until
			// the entry exists, finish counts it.
			if !r.counted {
				r.counted = true
				f.countSent()
			}
			return 0, io.EOF
		}
		final := f.final
		if final == nil {
			f.waiting++
		}
		f.mu.Unlock()
		if final != nil {
			return 0, final
		}
		<-wake
	}
}

func (r *flightReader) Read(p []byte) (int, error) {
	avail, err := r.next()
	if err != nil {
		return 0, err
	}
	n := int(min(int64(len(p)), avail-r.off))
	n, err = r.f.readAt(p[:n], r.off, r.memFrom)
	r.off += int64(n)
	r.count(int64(n))
	if err != nil && !errors.Is(err, io.EOF) {
		return n, err
	}
	return n, nil
}

// SupportsBodyWriteTo lets fasthttp call WriteTo for both framings: WriteTo
// sends what Read would, with the same accounting.
func (r *flightReader) SupportsBodyWriteTo() bool { return true }

// WriteTo sends the body to w as the fill writes it. fasthttp passes its
// buffered writer on the connection for a response with a Content-Length:
// each newly written range then goes from the temp file to the socket by
// sendfile(2) (bufio.Writer.ReadFrom hands an io.LimitedReader over an
// *os.File to the TCP connection), never through user space. Anything else
// (chunked framing) gets the bytes by ReadAt in large pieces.
func (r *flightReader) WriteTo(w io.Writer) (int64, error) {
	var sent int64
	bw, direct := w.(*bufio.Writer)
	if direct && r.src == nil && r.f.file != nil {
		r.src = r.f.reopen(r.off)
	}
	for {
		avail, err := r.next()
		if err != nil {
			if err == io.EOF {
				err = nil
			}
			return sent, err
		}
		var n int64
		switch {
		case r.off >= r.memFrom:
			n, err = r.copyMem(w, avail)
		case direct && r.src != nil:
			lr := io.LimitedReader{R: r.src, N: min(avail, r.memFrom) - r.off}
			n, err = bw.ReadFrom(&lr)
		default:
			n, err = r.copyPiece(w, min(avail, r.memFrom))
		}
		r.off += n
		sent += n
		r.count(n)
		if err != nil {
			return sent, err
		}
	}
}

// copyPiece writes the bytes from r.off to avail through a pooled buffer.
func (r *flightReader) copyPiece(w io.Writer, avail int64) (int64, error) {
	bp := pieceBufs.Get().(*[]byte)
	defer pieceBufs.Put(bp)
	buf := *bp
	var done int64
	for r.off+done < avail {
		n, err := r.f.file.ReadAt(buf[:min(int64(len(buf)), avail-r.off-done)], r.off+done)
		if n > 0 {
			m, werr := w.Write(buf[:n])
			done += int64(m)
			if werr != nil {
				return done, werr
			}
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return done, err
		}
		if n == 0 {
			return done, io.ErrUnexpectedEOF
		}
	}
	return done, nil
}

// reopen opens the temp file again, as a new open file description with its
// own position (set to off), by way of /proc/self/fd: the file may have been
// renamed into the blob store, or dropped as a duplicate, since the flight
// opened it. It returns nil where that is not possible; the reader then
// copies by ReadAt.
func (f *flight) reopen(off int64) *os.File {
	sc, err := f.file.SyscallConn()
	if err != nil {
		return nil
	}
	var src *os.File
	_ = sc.Control(func(fd uintptr) {
		src, err = os.Open("/proc/self/fd/" + strconv.FormatUint(uint64(fd), 10))
	})
	if err != nil {
		return nil
	}
	if off > 0 {
		if _, err := src.Seek(off, io.SeekStart); err != nil {
			src.Close()
			return nil
		}
	}
	return src
}

// Close releases the flight; fasthttp calls it when the response is done.
func (r *flightReader) Close() error {
	if r.src != nil {
		r.src.Close()
		r.src = nil
	}
	if r.f != nil {
		r.f.unregister(r)
		r.f.release()
		r.f = nil
	}
	return nil
}

// count counts n body bytes sent.
func (r *flightReader) count(n int64) {
	r.bytes.Add(float64(n))
	if r.upBytes != nil {
		r.upBytes.Add(float64(n))
	}
}
