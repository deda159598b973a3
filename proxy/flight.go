package proxy

import (
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"registryd/proxy/maven"
	"registryd/proxy/upstream"
	"registryd/store"
)

// A flight is the one upstream fetch of (upstream, path) in progress: a miss
// being filled, or a stale entry being revalidated. It runs in its own
// goroutine on a context detached from every client (bounded by
// upstreams.fill_timeout), so a client hanging up does not abort it and a
// slow client does not slow it: the body goes to a temp file (hashed on the
// way), and every client, the first one included, streams behind the fill
// from that file as it grows. Only after the full length and a clean end is
// the blob published and the entry written; a failure leaves neither, and
// clients reading behind it see their body end short.
//
// This is the only deduplication layer: concurrent requests for the same
// (upstream, path) join the flight in the map and never fetch again.
type flight struct {
	s        *Server
	key      flightKey
	relSlash string // the entry's relative path, with its leading slash
	up       *upstreamView
	etag     string // If-None-Match of a revalidation; "" for a plain GET

	ready chan struct{} // closed once kind (and the fields below) are set
	done  chan struct{} // closed once the flight is over

	// Set before ready is closed; read-only after.
	kind   flightKind
	err    error // flightFailed: why
	size   int64 // Content-Length, -1 when unknown
	ctype  string
	upSHA1 string // the upstream's X-Checksum-Sha1, when well-formed
	upMD5  string
	file   *os.File // read side of the temp file, for readers (ReadAt)

	refs atomic.Int32 // holders of file: the fill and each request

	mu       sync.Mutex
	written  int64
	wake     chan struct{} // closed and replaced whenever written or finished changes
	finished bool
	final    error            // a failure after ready (the body broke)
	entry    store.CacheEntry // the published entry, once finished without error
}

type flightKey struct {
	upstream int64
	rel      string // without the leading slash
}

type flightKind uint8

const (
	flightPending     flightKind = iota
	flightStreaming              // a 2xx body is being written; read behind it
	flightNotModified            // the stored copy is current (revalidation)
	flightNotFound               // the upstream answered 404 or 410
	flightFailed                 // no usable answer: see err
)

// join returns the flight for (up, rel), starting one if none runs. The
// caller must wait for ready and then call release (or hand the flight to a
// flightReader, whose Close releases it).
func (s *Server) join(up *upstreamView, rel, etag string) *flight {
	s.flightsMu.Lock()
	if f, ok := s.flights[flightKey{up.id, rel}]; ok {
		f.refs.Add(1)
		s.flightsMu.Unlock()
		s.met.joins.Inc()
		if s.onJoin != nil {
			s.onJoin()
		}
		return f
	}
	relc := strings.Clone(rel)
	f := &flight{
		s: s, key: flightKey{up.id, relc}, relSlash: "/" + relc, up: up, etag: etag,
		ready: make(chan struct{}), done: make(chan struct{}), wake: make(chan struct{}), size: -1,
	}
	if s.closing {
		s.flightsMu.Unlock()
		f.refs.Store(1)
		f.decide(flightFailed, errShutdown)
		close(f.done)
		return f
	}
	f.refs.Store(2) // the caller and the fill
	s.flights[f.key] = f
	s.fills.Add(1)
	s.flightsMu.Unlock()
	go s.fill(f)
	return f
}

func (s *Server) inflight() int {
	s.flightsMu.Lock()
	defer s.flightsMu.Unlock()
	return len(s.flights)
}

func (f *flight) release() {
	if f.refs.Add(-1) == 0 && f.file != nil {
		f.file.Close()
	}
}

// decide publishes the outcome of the upstream's response headers. A
// streaming flight stays joinable until finish; any other outcome is final,
// so the flight leaves the map first: a request that comes after this
// answer must ask the upstream afresh, not inherit it.
func (f *flight) decide(kind flightKind, err error) {
	if kind != flightStreaming {
		f.leave()
	}
	f.kind, f.err = kind, err
	close(f.ready)
}

func (f *flight) leave() {
	s := f.s
	s.flightsMu.Lock()
	if s.flights[f.key] == f {
		delete(s.flights, f.key)
	}
	s.flightsMu.Unlock()
}

// progress publishes how much of the body is on disk.
func (f *flight) progress(n int64) {
	f.mu.Lock()
	f.written = n
	w := f.wake
	f.wake = make(chan struct{})
	f.mu.Unlock()
	close(w)
}

// finish ends the flight: it leaves the map first (new requests then find
// the entry in the store, or start afresh after a failure), then wakes the
// readers with the outcome.
func (f *flight) finish(entry store.CacheEntry, err error) {
	f.leave()
	f.mu.Lock()
	f.finished, f.final, f.entry = true, err, entry
	w := f.wake
	f.mu.Unlock()
	close(w)
	close(f.done)
}

// result waits for the end of a streaming flight and returns its entry.
func (f *flight) result() (store.CacheEntry, error) {
	<-f.done
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.final != nil {
		return store.CacheEntry{}, &fillError{f.final}
	}
	return f.entry, nil
}

var copyBufs = sync.Pool{New: func() any { b := make([]byte, 64<<10); return &b }}

// fill runs one flight to its end.
func (s *Server) fill(f *flight) {
	defer s.fills.Done()
	defer f.release()
	ctx, cancel := context.WithTimeout(s.fillCtx, s.cfg.Upstreams.FillTimeout)
	defer cancel()

	start := time.Now()
	resp, err := s.up.Get(ctx, f.up.ep, f.key.rel, f.etag)
	if err != nil {
		s.met.upstream(f.up, outcomeOf(err), start)
		if errors.Is(err, upstream.ErrNotFound) {
			f.decide(flightNotFound, nil)
		} else {
			f.decide(flightFailed, err)
		}
		f.finish(store.CacheEntry{}, nil)
		return
	}
	defer resp.Body.Close()

	if resp.Status == fasthttp.StatusNotModified || (f.etag != "" && resp.ETag == f.etag) {
		if f.etag == "" {
			s.met.upstream(f.up, outcomeServerError, start)
			f.decide(flightFailed, errUnexpected304)
			f.finish(store.CacheEntry{}, nil)
			return
		}
		s.met.upstream(f.up, outcomeNotModified, start)
		if err := s.st.TouchCacheEntry(f.up.id, f.relSlash, s.now()); err != nil && !errors.Is(err, store.ErrNotFound) {
			s.log.Warn("recording a revalidation", "upstream", f.up.id, "path", f.relSlash, "err", err)
		}
		f.decide(flightNotModified, nil)
		f.finish(store.CacheEntry{}, nil)
		return
	}
	s.met.upstreamDur.WithLabelValues(f.up.label).Observe(time.Since(start).Seconds())

	if resp.ContentLength > s.maxFile {
		s.met.upstreamReqs.WithLabelValues(f.up.label, outcomeAborted).Inc()
		f.decide(flightFailed, errTooLarge)
		f.finish(store.CacheEntry{}, nil)
		return
	}
	w, err := s.blobs.Create()
	if err != nil {
		s.failBeforeStream(f, err)
		return
	}
	rf, err := os.Open(w.Name())
	if err != nil {
		w.Abort()
		s.failBeforeStream(f, err)
		return
	}
	f.file = rf
	f.size = resp.ContentLength
	f.ctype = resp.ContentType
	if f.ctype == "" {
		f.ctype = maven.ContentType(f.key.rel)
	}
	f.upSHA1 = hexHeader(resp.Header.Get("X-Checksum-Sha1"), 40)
	f.upMD5 = hexHeader(resp.Header.Get("X-Checksum-Md5"), 32)
	f.decide(flightStreaming, nil)

	entry, err := s.stream(f, resp, w)
	if err != nil {
		w.Abort()
		s.met.upstreamReqs.WithLabelValues(f.up.label, outcomeAborted).Inc()
		if !errors.Is(err, errShutdown) {
			s.log.Warn("fill failed; nothing cached", "upstream", f.up.id, "path", f.relSlash,
				"bytes", w.Size(), "err", err)
		}
		f.finish(store.CacheEntry{}, err)
		return
	}
	s.met.upstreamReqs.WithLabelValues(f.up.label, outcomeOK).Inc()
	f.finish(entry, nil)
}

func (s *Server) failBeforeStream(f *flight, err error) {
	s.log.Error("starting a fill", "upstream", f.up.id, "path", f.relSlash, "err", err)
	s.met.upstreamReqs.WithLabelValues(f.up.label, outcomeAborted).Inc()
	f.decide(flightFailed, err)
	f.finish(store.CacheEntry{}, nil)
}

// stream copies the body to the blob writer, publishing progress, and on a
// clean, complete end publishes the blob and writes the entry.
func (s *Server) stream(f *flight, resp *upstream.Response, w *store.BlobWriter) (store.CacheEntry, error) {
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	buf := *bp
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			if w.Size()+int64(n) > s.maxFile {
				return store.CacheEntry{}, errTooLarge
			}
			if _, err := w.Write(buf[:n]); err != nil {
				return store.CacheEntry{}, err
			}
			s.met.fetched.Add(float64(n))
			f.progress(w.Size())
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			if s.fillCtx.Err() != nil {
				return store.CacheEntry{}, errShutdown
			}
			return store.CacheEntry{}, rerr
		}
	}
	if f.size >= 0 && w.Size() != f.size {
		return store.CacheEntry{}, errShortBody
	}
	d, err := w.Finish()
	if err != nil {
		return store.CacheEntry{}, err
	}
	return s.blobs.Publish(s.st, w, d, store.CacheEntry{
		UpstreamID:   f.up.id,
		RelativePath: f.relSlash,
		ContentType:  f.ctype,
		ETag:         resp.ETag,
		CheckedAt:    s.now().UTC().Truncate(time.Millisecond),
	})
}

// outcomeOf sorts an upstream error for the requests metric.
func outcomeOf(err error) string {
	var se *upstream.StatusError
	switch {
	case errors.As(err, &se):
		switch {
		case errors.Is(err, upstream.ErrNotFound):
			return outcomeNotFound
		case se.Code >= 500:
			return outcomeServerError
		}
		return outcomeClientError
	case errors.Is(err, upstream.ErrTimeout):
		return outcomeTimeout
	}
	return outcomeNetwork
}

// hexHeader returns v lower-cased if it is n hex digits, else "".
func hexHeader(v string, n int) string {
	v = strings.TrimSpace(v)
	if len(v) != n {
		return ""
	}
	for i := 0; i < n; i++ {
		c := v[i] | 0x20
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return ""
		}
	}
	return strings.ToLower(v)
}

// flightReader streams a flight's body to one client from the temp file, as
// fast as the fill writes it, except the very last byte, which it hands over
// only once the entry is published. It returns the fill's error if the body
// breaks, so fasthttp ends the response short (Content-Length not reached,
// or no terminating chunk) and closes the connection: a client never holds a
// complete-looking 200 of a file that is not cached.
type flightReader struct {
	f       *flight
	off     int64
	counted bool
}

func (r *flightReader) Read(p []byte) (int, error) {
	f := r.f
	for {
		f.mu.Lock()
		written, finished, final, wake := f.written, f.finished, f.final, f.wake
		f.mu.Unlock()
		if written == f.size && written > 0 && (!finished || final != nil) {
			// The last byte waits for the entry: a client holding the whole
			// file can rely on the next request being a hit, and a fill that
			// fails to publish still ends its body short.
			written--
		}
		if r.off < written {
			n := int(min(int64(len(p)), written-r.off))
			n, err := f.file.ReadAt(p[:n], r.off)
			r.off += int64(n)
			f.s.met.served.Add(float64(n))
			if err != nil && !errors.Is(err, io.EOF) {
				return n, err
			}
			return n, nil
		}
		if final != nil {
			return 0, final
		}
		if finished {
			if !r.counted {
				r.counted = true
				f.s.downloads.add(f.up.id, f.relSlash, f.s.now())
			}
			return 0, io.EOF
		}
		<-wake
	}
}

// Close releases the flight; fasthttp calls it when the response is done.
func (r *flightReader) Close() error {
	if r.f != nil {
		r.f.release()
		r.f = nil
	}
	return nil
}
