package upstream

import (
	"bufio"
	"errors"
	"io"
	"net/http"
	"path"
	"strings"
	"sync"

	"github.com/klauspost/compress/flate"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zlib"
	"github.com/klauspost/compress/zstd"
)

// zstdMaxWindow bounds the memory one zstd stream may ask for (the format
// allows windows of up to 3.75 TB).
const zstdMaxWindow = 64 << 20

// contentCoding reads a GET answer's Content-Encoding. It returns the coding
// Get decodes ("gzip", "deflate" or "zstd"), "" for none (absent, identity,
// or gzip on a .gz/.tgz file), or a reason to refuse the answer.
func contentCoding(h http.Header, relPath string) (coding, reason string) {
	var codings []string
	for _, v := range h.Values("Content-Encoding") {
		for _, c := range strings.Split(v, ",") {
			if c = strings.ToLower(strings.Trim(c, " \t")); c != "" {
				codings = append(codings, c)
			}
		}
	}
	switch {
	case len(codings) == 0:
		return "", ""
	case len(codings) > 1:
		return "", "sent Content-Encoding " + safeToken(strings.Join(codings, ", ")) + ", which registryd does not decode"
	}
	switch c := codings[0]; c {
	case "identity":
		return "", ""
	case "gzip", "x-gzip":
		// Apache (mod_mime's AddEncoding) labels a .gz file with the coding
		// of its content: the file is a gzip, stored and served as such.
		name := strings.ToLower(path.Base(relPath))
		if strings.HasSuffix(name, ".gz") || strings.HasSuffix(name, ".tgz") {
			return "", ""
		}
		return "gzip", ""
	case "deflate", "zstd":
		return c, ""
	default:
		return "", "sent Content-Encoding " + safeToken(c) + ", which registryd does not decode"
	}
}

// safeToken returns s when it is short and made of token characters (plus
// ", " between codings), so an upstream cannot put arbitrary text into a
// message shown to clients; otherwise a fixed placeholder.
func safeToken(s string) string {
	if len(s) > 64 {
		return "(unreadable)"
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~, ", c) >= 0) {
			return "(unreadable)"
		}
	}
	return s
}

// decodeBody yields the decoded bytes of a Get body. The decoder is made on
// the first Read, so Get returns as soon as the headers are in.
//
// Errors: a failure of the raw body (a *NetError, or the *AnswerError of a
// body longer than its Content-Length) is returned as it is, whatever the
// decoder made of it; anything else the decoder reports, and bytes after the
// end of the compressed stream, is an *AnswerError "<coding> body could not
// be decoded". io.EOF is returned only after the compressed stream ended
// cleanly and the raw body ended right there, intact.
type decodeBody struct {
	coding string
	raw    io.ReadCloser
	target string

	// mu is held by Read throughout, so Close (which may come from another
	// goroutine, to abort a Read) releases the decoder only once the Read
	// it unblocked by closing raw has returned.
	mu     sync.Mutex
	src    recordingReader
	br     *bufio.Reader // an io.ByteReader, so flate reads no further than its stream
	dec    io.Reader
	close  func()
	err    error // sticky
	closed bool
}

// recordingReader remembers the last error other than io.EOF of r.
type recordingReader struct {
	r   io.Reader
	err error
}

func (s *recordingReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if err != nil && err != io.EOF {
		s.err = err
	}
	return n, err
}

func newDecodeBody(coding string, raw io.ReadCloser, target string) *decodeBody {
	d := &decodeBody{coding: coding, raw: raw, target: target}
	d.src.r = raw
	d.br = bufio.NewReaderSize(&d.src, 32<<10)
	return d
}

func (d *decodeBody) open() error {
	switch d.coding {
	case "gzip":
		zr, err := gzip.NewReader(d.br)
		if err != nil {
			return err
		}
		d.dec, d.close = zr, func() { zr.Close() }
	case "deflate":
		// RFC 9110's deflate is a zlib stream, but some servers send raw
		// deflate: a valid zlib header picks zlib, anything else is tried
		// as raw deflate (and fails to decode if it is neither).
		h, err := d.br.Peek(2)
		if err != nil {
			return err
		}
		var rc io.ReadCloser
		if zlibHeader(h[0], h[1]) {
			if rc, err = zlib.NewReader(d.br); err != nil {
				return err
			}
		} else {
			rc = flate.NewReader(d.br)
		}
		d.dec, d.close = rc, func() { rc.Close() }
	case "zstd":
		zr, err := zstd.NewReader(d.br,
			zstd.WithDecoderConcurrency(1), // no goroutines: decode in Read
			zstd.WithDecoderMaxWindow(zstdMaxWindow),
			zstd.WithDecoderLowmem(true))
		if err != nil {
			return err
		}
		d.dec, d.close = zr, zr.Close
	}
	return nil
}

// zlibHeader reports whether cmf, flg open a zlib stream (RFC 1950: deflate
// method, window at most 32 KiB, check bits, no preset dictionary).
func zlibHeader(cmf, flg byte) bool {
	return cmf&0x0f == 8 && cmf>>4 <= 7 && (uint(cmf)<<8|uint(flg))%31 == 0 && flg&0x20 == 0
}

func (d *decodeBody) Read(p []byte) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return 0, errBodyClosed
	}
	if d.err != nil {
		return 0, d.err
	}
	if d.dec == nil {
		if err := d.open(); err != nil {
			d.err = d.fail(err)
			return 0, d.err
		}
	}
	n, err := d.dec.Read(p)
	if err == io.EOF {
		err = d.finish()
	}
	if err != nil {
		if err != io.EOF {
			err = d.fail(err)
		}
		d.err = err
	}
	return n, err
}

// finish checks that the raw body ends where the compressed stream did, and
// reads it to its end so that its own checks (short, long) run.
func (d *decodeBody) finish() error {
	var b [1]byte
	for {
		n, err := d.br.Read(b[:])
		if n > 0 {
			return errTrailing
		}
		if err != nil {
			return err
		}
	}
}

// errTrailing: bytes after the end of the compressed stream. Reported, like
// every decoder error, as "<coding> body could not be decoded".
var errTrailing = errors.New("data after the end of the compressed stream")

// fail maps a decoding error. The raw body's own failure wins; otherwise the
// reason is fixed (a decoder's text may quote the body).
func (d *decodeBody) fail(error) error {
	if d.src.err != nil {
		return d.src.err
	}
	return &AnswerError{Op: http.MethodGet, URL: d.target, Reason: d.coding + " body could not be decoded"}
}

// errBodyClosed is what Read returns after Close, like net/http's body.
var errBodyClosed = errors.New("upstream: read on closed body")

func (d *decodeBody) Close() error {
	err := d.raw.Close()
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.closed && d.close != nil {
		d.close()
	}
	d.closed = true
	return err
}
