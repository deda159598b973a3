package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"unsafe"

	"github.com/valyala/fasthttp"

	"registryd/maven"
	"registryd/store"
)

// Header names in fasthttp's canonical form, set without re-normalising.
var (
	hdrETag         = []byte("Etag")
	hdrLastModified = []byte("Last-Modified")
	hdrDisposition  = []byte("Content-Disposition")
	hdrChecksumSHA1 = []byte("X-Checksum-Sha1")
	hdrChecksumMD5  = []byte("X-Checksum-Md5")
	hdrAcceptRanges = []byte("Accept-Ranges")
	hdrContentRange = []byte("Content-Range")
	hdrNosniff      = []byte("X-Content-Type-Options")
	hdrCSP          = []byte("Content-Security-Policy")
	valBytes        = []byte("bytes")
	valNosniff      = []byte("nosniff")
	valCSP          = []byte("sandbox; default-src 'none'; require-trusted-types-for 'script'")
	valTextPlain    = []byte("text/plain")
	hdrIfNoneMatch  = "If-None-Match"
	hdrRange        = "Range"
	hdrIfRange      = "If-Range"
)

// hardenDownload sets the headers GitLab gives every file it serves from a
// virtual registry (EXTRA_RESPONSE_HEADERS of its endpoint concern): no
// content sniffing, and a sandbox CSP with nothing allowed, so a cached
// HTML or SVG file opened in a browser from the registry's origin runs no
// script there. The values are built once; SetCanonical copies them into
// the response's own buffer, which fasthttp reuses: no allocation.
func hardenDownload(h *fasthttp.ResponseHeader) {
	h.SetCanonical(hdrNosniff, valNosniff)
	h.SetCanonical(hdrCSP, valCSP)
}

// s2b views s as bytes for fasthttp setters, which copy.
func s2b(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// serveEntry answers from a cached entry: the file (GET, HEAD, Range) or,
// for a checksum sidecar, the stored digest of the entry.
func (s *Server) serveEntry(x *exchange, v *entryView) error {
	ctx, p := x.ctx, x.path
	if p.Kind == maven.Checksum {
		return s.serveDigest(x, &v.e)
	}
	h := &ctx.Response.Header
	h.SetContentType(v.contentType)
	h.SetCanonical(hdrETag, s2b(v.etag))
	h.SetCanonical(hdrLastModified, s2b(v.lastModified))
	h.SetCanonical(hdrDisposition, s2b(v.disposition))
	if v.e.SHA1 != "" {
		h.SetCanonical(hdrChecksumSHA1, s2b(v.e.SHA1))
	}
	if v.e.MD5 != "" {
		h.SetCanonical(hdrChecksumMD5, s2b(v.e.MD5))
	}
	h.SetCanonical(hdrAcceptRanges, valBytes)
	hardenDownload(h)

	if inm := ctx.Request.Header.Peek(hdrIfNoneMatch); len(inm) > 0 && etagListMatches(inm, v.etag) {
		ctx.SetStatusCode(fasthttp.StatusNotModified)
		return nil
	}
	size := v.e.Size
	start, n := int64(0), size
	if rng := ctx.Request.Header.Peek(hdrRange); len(rng) > 0 && ifRangeHolds(ctx, v) {
		switch a, b, r := parseRange(rng, size); r {
		case rangeOK:
			start, n = a, b-a+1
			ctx.SetStatusCode(fasthttp.StatusPartialContent)
			h.SetCanonical(hdrContentRange, contentRange(a, b, size))
		case rangeUnsatisfiable:
			ctx.SetStatusCode(fasthttp.StatusRequestedRangeNotSatisfiable)
			h.SetCanonical(hdrContentRange, append([]byte("bytes */"), strconv.FormatInt(size, 10)...))
			h.SetContentLength(0)
			return nil
		}
	}
	if ctx.IsHead() {
		h.SetContentLength(int(n))
		return nil
	}
	if s.small.fits(size) {
		b, err := s.small.load(v.e.SHA256, v.blob, size)
		if err != nil {
			return s.localMiss(x, v, start, n, err)
		}
		s.blobs.Touch(v.e.SHA256)
		// The bytes are shared and immutable: fasthttp writes them without a copy.
		ctx.Response.SetBodyRaw(b[start : start+n])
		s.countServed(x, v.e.UpstreamID, n)
		s.downloads.add(v.e.UpstreamID, v.e.RelativePath, s.now())
		return nil
	}
	f, err := os.Open(v.blob)
	if err != nil {
		return s.localMiss(x, v, start, n, err)
	}
	s.blobs.Touch(v.e.SHA256) // the local tier's LRU (remote blobs); no allocation
	if start > 0 {
		if _, err := f.Seek(start, io.SeekStart); err != nil {
			f.Close()
			return err
		}
	}
	body := fileBodies.Get().(*fileBody)
	body.f, body.lr = f, io.LimitedReader{R: f, N: n}
	ctx.SetBodyStream(body, int(n))
	s.countServed(x, v.e.UpstreamID, n)
	s.downloads.add(v.e.UpstreamID, v.e.RelativePath, s.now())
	return nil
}

// blobError turns a missing blob file into errBlobGone, so the file is
// resolved again (blobGone) rather than failing every request for it.
func (s *Server) blobError(v *entryView, err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		// Eviction or a delete between the lookup and the open is routine;
		// a live entry without its file is not.
		level := slog.LevelInfo
		if e, lerr := s.st.CacheEntry(v.e.UpstreamID, v.e.RelativePath); lerr == nil && e.SHA256 == v.e.SHA256 {
			level = slog.LevelError
		}
		s.log.Log(context.Background(), level, "a cached entry's blob file is missing; fetching it again",
			"upstream", v.e.UpstreamID, "path", v.e.RelativePath, "blob", v.e.SHA256)
		return errBlobGone
	}
	return err
}

// serveDigest answers a checksum sidecar from the digests stored with its
// parent entry, never from an upstream's sidecar file.
func (s *Server) serveDigest(x *exchange, e *store.CacheEntry) error {
	d := pickDigest(x.path.Algo, e.SHA1, e.MD5, e.SHA256, e.SHA512)
	if d == "" {
		return errFileNotFound
	}
	s.writeDigest(x, e.UpstreamID, d)
	s.downloads.add(e.UpstreamID, e.RelativePath, s.now())
	return nil
}

// pickDigest returns the digest of algorithm a among a file's digests.
func pickDigest(a maven.Algo, sha1, md5, sha256, sha512 string) string {
	switch a {
	case maven.SHA1:
		return sha1
	case maven.MD5:
		return md5
	case maven.SHA256:
		return sha256
	case maven.SHA512:
		return sha512
	}
	return ""
}

// writeDigest answers a checksum sidecar with the hex digest d of a file of
// upstream up (0: merged metadata, of no one upstream).
func (s *Server) writeDigest(x *exchange, up int64, d string) {
	ctx, p := x.ctx, x.path
	h := &ctx.Response.Header
	h.SetContentTypeBytes(valTextPlain)
	var buf [len(dispositionStart) + maven.MaxSegmentLen + 1]byte
	h.SetCanonical(hdrDisposition, append(append(append(buf[:0], dispositionStart...), p.File...), '"'))
	hardenDownload(h)
	if ctx.IsHead() {
		h.SetContentLength(len(d))
		return
	}
	ctx.SetBodyString(d)
	s.countServed(x, up, int64(len(d)))
}

// serveFlight answers from a fill in progress: the body streams behind the
// fill with the upstream's Content-Length (or chunked when it sent none),
// with the checksum headers the flight can vouch for (see checksums).
// Range is not honoured here (the whole file comes with 200, as RFC 9110
// allows). A checksum sidecar, and a HEAD of a streamed body, wait for the
// fill to finish and answer from the stored entry.
func (s *Server) serveFlight(x *exchange, f *flight) error {
	ctx, p := x.ctx, x.path
	head := ctx.IsHead()
	// A HEAD must not vouch for a body that is still arriving (its
	// checksums unchecked, its length unproven): unless the body is whole
	// and verified in memory, it answers from the stored entry.
	if p.Kind == maven.Checksum || (head && f.mem == nil) {
		e, err := f.awaitResult()
		if err != nil && !errors.Is(err, errNotCached) {
			return err
		}
		if p.Kind == maven.Checksum {
			return s.serveDigest(x, &e)
		}
		h := &ctx.Response.Header
		h.SetContentType(f.ctype)
		h.SetCanonical(hdrChecksumSHA1, s2b(e.SHA1))
		h.SetCanonical(hdrChecksumMD5, s2b(e.MD5))
		hardenDownload(h)
		h.SetContentLength(int(e.Size))
		return nil
	}
	h := &ctx.Response.Header
	h.SetContentType(f.ctype)
	var buf [len(dispositionStart) + maven.MaxSegmentLen + 1]byte
	h.SetCanonical(hdrDisposition, append(append(append(buf[:0], dispositionStart...), p.File...), '"'))
	hardenDownload(h)
	sha1, md5 := f.checksums()
	if sha1 != "" {
		h.SetCanonical(hdrChecksumSHA1, s2b(sha1))
	}
	if md5 != "" {
		h.SetCanonical(hdrChecksumMD5, s2b(md5))
	}
	if head {
		h.SetContentLength(int(f.size))
		f.release()
		return nil
	}
	if f.mem != nil {
		// Complete and immutable: fasthttp writes it with the headers, in
		// one write, without a copy.
		ctx.Response.SetBodyRaw(f.mem)
		s.countServed(x, f.up.id, int64(len(f.mem)))
		f.countSent()
		f.release()
		return nil
	}
	// The headers go out at once, before the first body byte: a client
	// waiting on a slow upstream sees the answer start, and a fill that
	// breaks early still ends a 200 short rather than as a bare hang-up.
	ctx.Response.ImmediateHeaderFlush = true
	ctx.SetBodyStream(&flightReader{f: f, bytes: s.met.series.bytes(x.reg.id, x.res),
		upBytes: s.met.series.upstreamBytes(f.up.id, x.res)}, int(f.size))
	return nil
}

// fileBody is a cached file (or a range of it) as a response body. Its
// WriteTo hands fasthttp's buffered writer an io.LimitedReader over the
// *os.File, which the runtime sends with sendfile(2): the body never passes
// through user space, let alone sits whole in memory.
type fileBody struct {
	f  *os.File
	lr io.LimitedReader
}

var fileBodies = sync.Pool{New: func() any { return new(fileBody) }}

func (b *fileBody) Read(p []byte) (int, error) { return b.lr.Read(p) }

// sendfileMin is the size from which the header buffer is flushed first so
// the body goes out by sendfile rather than through the buffer.
const sendfileMin = 16 << 10

func (b *fileBody) WriteTo(w io.Writer) (int64, error) {
	if bw, ok := w.(*bufio.Writer); ok && b.lr.N >= sendfileMin {
		if err := bw.Flush(); err != nil {
			return 0, err
		}
	}
	return io.Copy(w, &b.lr)
}

// Close closes the file; fasthttp calls it once the response is written.
func (b *fileBody) Close() error {
	err := b.f.Close()
	b.f, b.lr = nil, io.LimitedReader{}
	fileBodies.Put(b)
	return err
}

// --- conditional and range requests ---

// etagListMatches implements If-None-Match's weak comparison against our
// strong ETag.
func etagListMatches(list []byte, etag string) bool {
	for len(list) > 0 {
		var item []byte
		if i := bytes.IndexByte(list, ','); i >= 0 {
			item, list = list[:i], list[i+1:]
		} else {
			item, list = list, nil
		}
		item = bytes.TrimSpace(item)
		if len(item) == 1 && item[0] == '*' {
			return true
		}
		item = bytes.TrimPrefix(item, []byte("W/"))
		if string(item) == etag {
			return true
		}
	}
	return false
}

// ifRangeHolds reports whether a Range may be honoured: no If-Range, or one
// that names the current ETag or Last-Modified exactly.
func ifRangeHolds(ctx *fasthttp.RequestCtx, v *entryView) bool {
	ir := ctx.Request.Header.Peek(hdrIfRange)
	return len(ir) == 0 || string(ir) == v.etag || string(ir) == v.lastModified
}

type rangeResult uint8

const (
	rangeIgnored       rangeResult = iota // absent, malformed or multi-range: send the whole file
	rangeOK                               // [a, b] inclusive
	rangeUnsatisfiable                    // 416
)

// parseRange parses a single byte range ("bytes=a-b", "bytes=a-",
// "bytes=-n") against size. Multiple ranges are answered with the whole file
// (RFC 9110 lets a server ignore Range), and so is anything malformed.
func parseRange(h []byte, size int64) (a, b int64, r rangeResult) {
	spec, ok := bytes.CutPrefix(bytes.TrimSpace(h), []byte("bytes="))
	if !ok || bytes.IndexByte(spec, ',') >= 0 {
		return 0, 0, rangeIgnored
	}
	first, last, ok := bytes.Cut(bytes.TrimSpace(spec), []byte("-"))
	if !ok {
		return 0, 0, rangeIgnored
	}
	if len(first) == 0 { // suffix: the last n bytes
		n, ok := parseUint(last)
		if !ok {
			return 0, 0, rangeIgnored
		}
		if n == 0 || size == 0 {
			return 0, 0, rangeUnsatisfiable
		}
		return max(0, size-n), size - 1, rangeOK
	}
	a, ok = parseUint(first)
	if !ok {
		return 0, 0, rangeIgnored
	}
	b = size - 1
	if len(last) > 0 {
		if b, ok = parseUint(last); !ok || b < a {
			return 0, 0, rangeIgnored
		}
		b = min(b, size-1)
	}
	if a >= size {
		return 0, 0, rangeUnsatisfiable
	}
	return a, b, rangeOK
}

func parseUint(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

func contentRange(a, b, size int64) []byte {
	var buf [64]byte
	out := append(buf[:0], "bytes "...)
	out = strconv.AppendInt(out, a, 10)
	out = append(out, '-')
	out = strconv.AppendInt(out, b, 10)
	out = append(out, '/')
	return strconv.AppendInt(out, size, 10)
}

// serveComposed answers x from v: the document, or one of its digests.
func (s *Server) serveComposed(x *exchange, v *composedView) error {
	ctx, p := x.ctx, x.path
	if v.refused != nil {
		v.merges.Inc()
		return v.refused
	}
	x.merge, x.up = v.merge, v.up
	if v.merge == mergePartial {
		x.miss = &missError{failures: v.failures}
	}
	v.merges.Inc()
	h := &ctx.Response.Header
	if v.mergeHdr != "" {
		h.SetCanonical(hdrMerge, s2b(v.mergeHdr))
	}
	if p.Kind == maven.Checksum {
		s.writeDigest(x, 0, pickDigest(p.Algo, v.sha1, v.md5, v.sha256, v.sha512))
		if !ctx.IsHead() {
			s.countComposed(v)
		}
		return nil
	}
	h.SetContentType(v.ctype)
	h.SetCanonical(hdrETag, s2b(v.etag))
	h.SetCanonical(hdrLastModified, s2b(v.lastMod))
	h.SetCanonical(hdrDisposition, s2b(v.disposition))
	h.SetCanonical(hdrChecksumSHA1, s2b(v.sha1))
	h.SetCanonical(hdrChecksumMD5, s2b(v.md5))
	hardenDownload(h)
	if inm := ctx.Request.Header.Peek(hdrIfNoneMatch); len(inm) > 0 && etagListMatches(inm, v.etag) {
		ctx.SetStatusCode(fasthttp.StatusNotModified)
		return nil
	}
	if ctx.IsHead() {
		h.SetContentLength(len(v.body))
		return nil
	}
	// Immutable once built: fasthttp writes it without a copy.
	ctx.Response.SetBodyRaw(v.body)
	s.countServed(x, 0, int64(len(v.body)))
	s.countComposed(v)
	return nil
}
