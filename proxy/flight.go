package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"

	"registryd/maven"
	"registryd/store"
	"registryd/upstream"
)

// A flight is the one upstream fetch of (upstream, path) in progress: a miss
// being filled, or a stale entry being revalidated. It runs in its own
// goroutine on a context detached from every client (bounded by
// upstreams.fill_timeout), so a client hanging up does not abort it and a
// slow client does not slow it: the body goes to a temp file (hashed behind
// the writer, see store.BlobWriter), and every client, the first one
// included, streams behind the fill from that file as it grows.
//
// The last byte is held back until the body has ended cleanly with its full
// length on disk: the clients then hold exactly the upstream's bytes, and a
// body that breaks ends their responses short. Only then are the digests
// awaited, the file fsynced and the blob published and the entry written;
// a failure there leaves neither (it is logged and counted) but no longer
// touches the responses, which were complete and correct. Checksum sidecars
// wait for the published entry, since they answer from its digests.
//
// This is the only deduplication layer: concurrent requests for the same
// (upstream, path) join the flight in the map and never fetch again.
type flight struct {
	s        *Server
	key      flightKey
	relSlash string // the entry's relative path, with its leading slash
	up       *upstreamView
	etag     string // If-None-Match of a revalidation; "" for a plain GET
	// reval marks the revalidation of a stored copy: its clients are
	// answered only once a new body is whole and verified (until then, and
	// on any failure, the stored copy is the answer), and a 404 or 410
	// removes the stored entry.
	reval bool
	// ticket is the health tracker's permission for the upstream request,
	// to report its end with (see Server.judge).
	ticket upstream.Ticket
	// freeSlot gives back the upstream's request slot (gate.go) once the
	// upstream's body is read; safe to call more than once.
	freeSlot func()

	ready chan struct{} // closed once kind (and the fields below) are set
	done  chan struct{} // closed once the flight is over

	// Set before ready is closed; read-only after.
	kind  flightKind
	err   error // flightFailed: why
	size  int64 // Content-Length, -1 when unknown
	ctype string
	file  *os.File // read side of the temp file, for readers (ReadAt)
	// mem is the whole body of a small file (see memBodyMax), read before
	// the answer was published; readers send it from here and never touch
	// the temp file. nil for a streamed body.
	mem []byte

	refs atomic.Int32 // holders of file: the fill and each request

	mu       sync.Mutex
	written  int64
	wake     chan struct{} // closed and replaced when written, complete or finished change
	waiting  int           // readers waiting on wake
	complete bool          // the body ended cleanly with its full length on disk
	finished bool
	final    error            // a failure after ready: the body broke, or storing it failed
	entry    store.CacheEntry // the published entry, once finished without error
	// sent counts the responses that had the whole body before the entry
	// existed; finish records them as downloads once it does.
	sent int
	// hdrSHA1 and hdrMD5 are what the X-Checksum headers of a response say:
	// the upstream's checksums (checked before the last byte goes out) until
	// the body is hashed, then its digests. Set before ready, then under mu.
	hdrSHA1, hdrMD5 string
	// digested is closed once the body's digests are known, or they never
	// will be (the flight failed); digestsDone says it was.
	digested    chan struct{}
	digestsDone bool

	// pass is the flight's uncached part, when the disk is full
	// (passthrough.go). Under mu.
	pass passState
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

// anyGen makes join start a flight whatever changed in the cache.
const anyGen = ^uint64(0)

// errLookAgain tells resolve that the cache changed since its lookup.
var errLookAgain = errors.New("the cache changed since the lookup")

// join returns the flight for (up, rel), starting one if none runs. The
// caller must wait for ready and then call release (or hand the flight to a
// flightReader, whose Close releases it).
//
// seen is the cache generation the caller's lookup saw. When no flight runs
// and the generation has moved since, join starts nothing and returns nil: a
// flight may have stored the very entry the lookup missed and ended in
// between, and fetching again would be a second upstream request for one
// file. A flight leaves the map only after its entry is committed and the
// generation bumped, so reading the generation under flightsMu, after
// finding no flight, cannot miss that. seen == anyGen skips the check.
func (s *Server) join(up *upstreamView, rel, etag string, reval bool, seen uint64) (f *flight, joined bool) {
	s.flightsMu.Lock()
	if f, ok := s.flights[flightKey{up.id, rel}]; ok {
		f.refs.Add(1)
		s.flightsMu.Unlock()
		s.met.joins.Inc()
		if s.onJoin != nil {
			s.onJoin()
		}
		return f, true
	}
	if seen != anyGen && s.st.CacheGeneration() != seen {
		s.flightsMu.Unlock()
		return nil, false
	}
	relc := strings.Clone(rel)
	f = &flight{
		s: s, key: flightKey{up.id, relc}, relSlash: "/" + relc, up: up, etag: etag, reval: reval,
		ready: make(chan struct{}), done: make(chan struct{}), wake: make(chan struct{}),
		digested: make(chan struct{}), size: -1,
	}
	if s.closing {
		s.flightsMu.Unlock()
		f.refs.Store(1)
		f.decide(flightFailed, errShutdown)
		close(f.done)
		return f, false
	}
	f.refs.Store(2) // the caller and the fill
	s.flights[f.key] = f
	s.fills.Add(1)
	s.flightsMu.Unlock()
	go s.fill(f)
	return f, false
}

func (s *Server) inflight() int {
	s.flightsMu.Lock()
	defer s.flightsMu.Unlock()
	return len(s.flights)
}

func (f *flight) release() {
	n := f.refs.Add(-1)
	if n == 0 && f.file != nil {
		f.file.Close()
	}
	f.passReleased(n == 0)
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

// decided reports whether the outcome is published (ready is closed).
func (f *flight) decided() bool {
	select {
	case <-f.ready:
		return true
	default:
		return false
	}
}

func (f *flight) leave() {
	s := f.s
	s.flightsMu.Lock()
	if s.flights[f.key] == f {
		delete(s.flights, f.key)
	}
	s.flightsMu.Unlock()
}

// progress publishes how much of the body is on disk. When readers were
// waiting for it, the fill yields to them: they were readied onto the fill's
// P, which a fast upstream keeps busy without the fill ever blocking, and
// would otherwise wait for the scheduler to preempt it (10ms) or for another
// P to steal them.
func (f *flight) progress(n int64) {
	f.mu.Lock()
	f.written = n
	w, waiting := f.wake, f.waiting
	if waiting > 0 {
		f.wake, f.waiting = make(chan struct{}), 0
	}
	f.mu.Unlock()
	if waiting > 0 {
		close(w)
		runtime.Gosched()
	}
}

// completed publishes that the body ended cleanly with its full length:
// readers may hand out the last byte and end their responses.
func (f *flight) completed() {
	f.mu.Lock()
	f.complete = true
	w := f.wake
	f.wake, f.waiting = make(chan struct{}), 0
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
	sent := f.sent
	w := f.wake
	f.closeDigestsLocked()
	f.mu.Unlock()
	close(w)
	if err == nil {
		now := f.s.now()
		for range sent {
			f.s.downloads.add(f.up.id, f.relSlash, now)
		}
	}
	close(f.done)
}

// setDigests publishes the digests of the whole body for the checksum
// headers of responses that start from now on.
func (f *flight) setDigests(d store.Digests) {
	f.mu.Lock()
	f.hdrSHA1, f.hdrMD5 = d.SHA1, d.MD5
	f.closeDigestsLocked()
	f.mu.Unlock()
}

func (f *flight) closeDigestsLocked() {
	if !f.digestsDone {
		f.digestsDone = true
		close(f.digested)
	}
}

// checksums returns what the X-Checksum headers of a response that starts
// now say. Once the body is complete they are its digests (waiting for the
// hashing to end, which follows the body closely); before, the checksums the
// upstream offered, which the body is checked against before its last byte
// goes out; "" when it offered none (the one answer without them).
func (f *flight) checksums() (sha1, md5 string) {
	f.mu.Lock()
	complete := f.complete
	f.mu.Unlock()
	if complete {
		<-f.digested
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hdrSHA1, f.hdrMD5
}

// result waits for the end of a streaming flight and returns its entry.
// An uncached flight (passthrough.go) returns an entry that is not stored,
// with its digests, and errNotCached.
func (f *flight) result() (store.CacheEntry, error) {
	<-f.done
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.final != nil {
		return f.entry, &fillError{f.final}
	}
	return f.entry, nil
}

// copyBufSize is the fill's read size: large reads and writes cost fewer
// system calls and fewer wake-ups of the readers behind the fill (writing
// 64 MB to a file by 256 KiB takes about 3/4 of the time it takes by 64 KiB
// here), while a 50-client herd of different files still holds little.
const copyBufSize = 256 << 10

var copyBufs = sync.Pool{New: func() any { b := make([]byte, copyBufSize); return &b }}

// pieceBufs serve readers that cannot use sendfile (chunked responses): a
// piece becomes one chunk, and a herd of such readers holds one buffer each.
var pieceBufs = sync.Pool{New: func() any { b := make([]byte, 64<<10); return &b }}

// memBodyMax is the largest body a fill reads whole before it answers
// (most POMs and metadata files): one write then carries a client's headers
// and body, where streaming a body of a few KB behind the fill costs every
// client a header write, an open of the temp file, a wait for the fill and
// two sendfiles (the last byte waits for the clean end), and makes the first
// byte wait for the temp file. On a herd of 32 for a 1 KB file that took the
// answer from about 1 ms after the upstream's to about 3.
const memBodyMax = sendfileMin

// errLongBody is a body that went on past its Content-Length.
var errLongBody = &refusedError{label: refusedAnswer, reason: "body longer than its Content-Length"}

// fill runs one flight to its end.
func (s *Server) fill(f *flight) {
	defer s.fills.Done()
	defer f.release()
	ctx, cancel := context.WithTimeout(s.fillCtx, s.cfg.Upstreams.FillTimeout)
	defer cancel()

	// Wait for a slot of the upstream's cap, then for the health tracker's
	// leave: an upstream that turned unhealthy while this fill queued is
	// not asked.
	release, err := s.gates.acquire(ctx, f.up.id)
	defer release()
	f.freeSlot = release
	if err != nil {
		if s.fillCtx.Err() != nil {
			err = errShutdown
		}
		f.decide(flightFailed, err)
		f.finish(store.CacheEntry{}, nil)
		return
	}
	tk, ok := s.health.Begin(f.up.id)
	if !ok {
		s.met.skipped.WithLabelValues(f.up.label, skipUnhealthy).Inc()
		f.decide(flightFailed, s.unavailable(f.up.id))
		f.finish(store.CacheEntry{}, nil)
		return
	}
	f.ticket = tk
	epoch := s.st.ForgetEpoch(f.up.id)

	start := time.Now()
	var temp *pendingTemp
	if !f.reval && s.blobs.DiskStatus().Filling {
		temp = s.prepareTemp()
	}
	// Outcomes without a body drop the prepared temp file before the
	// flight is done: once it is, nothing of it is left in DATA_DIR/tmp.
	noBody := func(kind flightKind, err error) {
		f.decide(kind, err)
		temp.drop()
		f.finish(store.CacheEntry{}, nil)
	}
	get := s.up.Get
	if f.reval {
		get = s.up.Revalidate
	}
	resp, err := get(ctx, f.up.ep, f.key.rel, f.etag)
	if s.fillCtx.Err() != nil && err != nil {
		err = errShutdown
	}
	s.judge(tk, err)
	if err != nil {
		s.met.upstream(f.up, outcomeOf(err), start)
		switch {
		case errors.Is(err, upstream.ErrNotFound):
			if f.reval {
				s.dropGone(f)
			}
			s.marks.rememberAbsent(s.st, f.up, f.key.rel, epoch, s.now())
			noBody(flightNotFound, nil)
		case errors.Is(err, upstream.ErrBadAnswer):
			noBody(flightFailed, s.refuse(f, err))
		default:
			noBody(flightFailed, err)
		}
		return
	}
	defer resp.Body.Close()

	if resp.Status == fasthttp.StatusNotModified || (f.etag != "" && resp.ETag == f.etag) {
		if f.etag == "" {
			s.met.upstream(f.up, outcomeServerError, start)
			noBody(flightFailed, errUnexpected304)
			return
		}
		s.met.upstream(f.up, outcomeNotModified, start)
		if err := s.st.TouchCacheEntry(f.up.id, f.relSlash, s.now()); err != nil && !errors.Is(err, store.ErrNotFound) {
			s.log.Warn("recording a revalidation", "upstream", f.up.id, "path", f.relSlash, "err", err)
		}
		noBody(flightNotModified, nil)
		return
	}
	s.met.upstreamDur.WithLabelValues(f.up.label).Observe(time.Since(start).Seconds())

	if resp.ContentLength > s.maxFile {
		s.met.upstreamReqs.WithLabelValues(f.up.label, outcomeAborted).Inc()
		noBody(flightFailed, errTooLarge)
		return
	}
	exp, err := s.admit(ctx, f, resp)
	if err != nil {
		temp.drop()
		s.failBody(f, err)
		return
	}
	f.size = resp.ContentLength
	f.ctype = resp.ContentType
	if f.ctype == "" {
		f.ctype = maven.ContentType(f.key.rel)
	}
	f.hdrSHA1, f.hdrMD5 = exp.sha1, exp.md5
	// A body that is (or may be, when its length is unknown) small is read
	// whole before anyone is answered; a longer one streams on from what
	// was read of it.
	var head []byte
	if f.size <= memBodyMax {
		var whole bool
		head, whole, err = readHead(resp.Body, f.size)
		if err != nil {
			temp.drop()
			s.failBody(f, err)
			return
		}
		if whole {
			if int64(len(head)) > s.maxFile {
				temp.drop()
				s.failBody(f, errTooLarge)
				return
			}
			f.size = int64(len(head))
			s.fillSmall(f, resp, head, exp, temp)
			return
		}
	}
	body, err := s.sniff(f, head, resp.Body)
	if err != nil {
		temp.drop()
		s.failBody(f, err)
		return
	}
	unreserve, room := s.blobs.Reserve(f.size)
	defer unreserve()
	if !room {
		temp.drop()
		s.passThrough(ctx, f, resp, body, exp, nil, nil, diskStageBefore, nil)
		return
	}
	w, rf, err := temp.take(s)
	if store.IsDiskFull(err) {
		s.passThrough(ctx, f, resp, body, exp, nil, nil, diskStageWrite, err)
		return
	}
	if err != nil {
		s.failBeforeStream(f, err)
		return
	}
	f.file = rf
	if !f.reval {
		f.decide(flightStreaming, nil)
		// The requests waiting for this answer were readied onto this P,
		// which the copy below keeps busy without ever blocking when the
		// upstream is fast: let them send their headers first.
		runtime.Gosched()
	}

	if err := s.copyBody(f, body, w); err != nil {
		if df := (*diskFullError)(nil); errors.As(err, &df) {
			s.passThrough(ctx, f, resp, body, exp, w, df.rest, diskStageWrite, df.err)
			return
		}
		w.Abort()
		s.failBody(f, err)
		return
	}
	// The upstream connection goes back to the pool, and its slot to the
	// next request, before the hashing and the fsync.
	resp.Body.Close()
	f.freeSlot()
	// With checksums to check, the last byte waits for the digests: no
	// client may hold a complete-looking body that does not match them. A
	// revalidation answers nothing before its body is verified, the stored
	// copy being the answer until then. Otherwise the clients finish at
	// once and the hashing (usually done by now, see store.BlobWriter) ends
	// behind them.
	verifyFirst := exp.any() || f.reval
	var d store.Digests
	var unsynced error // a full disk failed the fsync: the body is whole, but not stored
	if verifyFirst {
		d, err = w.Finish()
		if store.IsDiskFull(err) && d.SHA256 != "" {
			unsynced, err = err, nil
		}
		if err == nil {
			err = exp.check(d)
		}
		if err != nil {
			w.Abort()
			s.failBody(f, err)
			return
		}
		f.setDigests(d)
	}
	s.met.upstreamReqs.WithLabelValues(f.up.label, outcomeOK).Inc()
	f.completed()
	if f.reval {
		f.decide(flightStreaming, nil)
	}
	if !verifyFirst {
		if d, err = w.Finish(); d.SHA256 != "" {
			f.setDigests(d)
		}
	}
	if err == nil {
		err = unsynced
	}
	if s.onComplete != nil {
		s.onComplete()
	}
	var entry store.CacheEntry
	if err == nil {
		entry, err = s.publish(f, w, d, resp.ETag)
	}
	if err != nil {
		w.Abort()
		s.storeFailed(f, w.Size(), err)
		if store.IsDiskFull(err) && d.SHA256 != "" {
			entry, err = f.uncachedEntry(d), errNotCached
		}
	} else {
		s.diskOK()
	}
	f.finish(entry, err)
}

// publish makes the verified body of f the cache entry of its upstream and
// path.
func (s *Server) publish(f *flight, w *store.BlobWriter, d store.Digests, etag string) (store.CacheEntry, error) {
	s.marks.forget(f.up.id, f.key.rel)
	return s.blobs.Publish(s.st, w, d, store.CacheEntry{
		UpstreamID:   f.up.id,
		RelativePath: f.relSlash,
		ContentType:  f.ctype,
		ETag:         etag,
		CheckedAt:    s.now().UTC().Truncate(time.Millisecond),
	})
}

func (s *Server) storeFailed(f *flight, size int64, err error) {
	s.met.storeErrors.Inc()
	if store.IsDiskFull(err) {
		s.diskFull(diskStageStore, f, err)
		return
	}
	s.log.Error("storing a fill failed; its clients got the whole file, nothing was cached",
		"upstream", f.up.id, "path", f.relSlash, "bytes", size, "err", err)
}

// failBody ends a flight whose body broke, or was refused, before it was
// complete. Clients already streaming it end short (the headers promised
// more), so none holds a complete-looking wrong file. When none was
// answered yet (a small body, a revalidation), the flight fails like an
// upstream error: the next upstream is asked, or the stored copy served.
func (s *Server) failBody(f *flight, err error) {
	if s.fillCtx.Err() != nil && !refusal(err) {
		err = errShutdown
	}
	s.met.upstreamReqs.WithLabelValues(f.up.label, outcomeAborted).Inc()
	if _, after, ok := upstream.Classify(err); ok {
		// The body broke (reset, idle timeout, cut short): the answer's
		// headers counted as a success; this counts as an error answer.
		s.health.Failure(f.ticket, upstream.FailSoft, failureReason(err), after)
	}
	switch {
	case refusal(err):
		s.refuse(f, err)
	case !errors.Is(err, errShutdown):
		s.log.Warn("fill failed; nothing cached", "upstream", f.up.id, "path", f.relSlash, "err", err)
	}
	if !f.decided() {
		f.decide(flightFailed, err)
		f.finish(store.CacheEntry{}, nil)
		return
	}
	f.finish(store.CacheEntry{}, err)
}

// dropGone removes the stale entry of a revalidation that the upstream now
// answers 404 or 410 for: resolution goes on down the list and stores the
// file where it is found, which this entry would otherwise shadow on every
// request.
func (s *Server) dropGone(f *flight) {
	switch err := s.st.DeleteCacheEntry(f.up.id, f.relSlash); {
	case err == nil:
		s.log.Info("the upstream no longer has a cached file; its entry was removed",
			"upstream", f.up.id, "path", f.relSlash)
	case !errors.Is(err, store.ErrNotFound):
		s.log.Warn("removing an entry its upstream no longer has", "upstream", f.up.id, "path", f.relSlash, "err", err)
	}
}

// readHead reads a body that is at most memBodyMax bytes long, or may be:
// size bytes and a clean end when size is known, else up to memBodyMax+1
// bytes. whole reports that the body ended cleanly within them; when it did
// not (a longer body of unknown length), head is the part read, for the
// rest to stream on from.
func readHead(r io.Reader, size int64) (head []byte, whole bool, err error) {
	if size < 0 {
		head = make([]byte, memBodyMax+1)
		n, eof, err := readFull(r, head)
		if err != nil {
			return nil, false, err
		}
		return head[:n], eof, nil
	}
	head = make([]byte, size)
	n, eof, err := readFull(r, head)
	switch {
	case err != nil:
		return nil, false, err
	case int64(n) < size:
		return nil, false, errShortBody
	case !eof:
		// The end must come clean too: a body longer than its
		// Content-Length is refused by the upstream client here.
		var one [1]byte
		switch m, rerr := r.Read(one[:]); {
		case m > 0:
			return nil, false, errLongBody
		case rerr != io.EOF && rerr != nil:
			return nil, false, rerr
		case rerr == nil:
			return nil, false, io.ErrNoProgress
		}
	}
	return head, true, nil
}

// readFull reads into buf until it is full or the body ends (eof). Unlike
// io.ReadFull it never turns an early end into an error, nor a reader's own
// io.ErrUnexpectedEOF (a cut chunked body) into an early end.
func readFull(r io.Reader, buf []byte) (n int, eof bool, err error) {
	for n < len(buf) {
		m, err := r.Read(buf[n:])
		n += m
		if err == io.EOF {
			return n, true, nil
		}
		if err != nil {
			return n, false, err
		}
	}
	return n, false, nil
}

// fillSmall runs the rest of a flight whose body was read whole (see
// readHead): it is sniffed and checked against the upstream's checksums
// before any client is answered. A body that is refused fails the flight
// like an upstream error (the next upstream is asked); a good one goes to
// every client in one write with its digests. The temp file is written,
// hashed, fsynced and published afterwards, off the clients' path; a
// failure there is logged and counted, and caches nothing.
func (s *Server) fillSmall(f *flight, resp *upstream.Response, body []byte, exp expected, temp *pendingTemp) {
	var err error
	var d store.Digests
	switch {
	case len(body) == 0 && maven.Binary(f.key.rel):
		err = &refusedError{label: refusedEmpty, reason: "answered an empty body for a binary file"}
	case maven.LooksLikeHTML(f.key.rel, body[:min(len(body), maven.SniffLen)]):
		err = &refusedError{label: refusedHTML, reason: "answered a web page for a file that is not HTML"}
	}
	if err == nil {
		d = smallDigests(body, exp.sha256 != "")
		err = exp.check(d)
	}
	if err != nil {
		temp.drop()
		s.failBody(f, err)
		return
	}
	resp.Body.Close()
	f.freeSlot()
	s.met.upstreamReqs.WithLabelValues(f.up.label, outcomeOK).Inc()
	s.met.fetched.Add(float64(len(body)))
	f.mem, f.written, f.complete = body, f.size, true
	f.setDigests(d)
	f.decide(flightStreaming, nil)
	if s.onComplete != nil {
		s.onComplete()
	}

	unreserve, room := s.blobs.Reserve(f.size)
	defer unreserve()
	if !room {
		temp.drop()
		s.diskFull(diskStageBefore, f, nil)
		f.finish(f.uncachedEntry(hashAll(body)), errNotCached)
		return
	}
	w, rf, err := temp.take(s)
	var entry store.CacheEntry
	if err == nil {
		rf.Close()
		_, err = w.Write(body)
		if err == nil {
			d, err = w.Finish()
		}
		if err == nil {
			entry, err = s.publish(f, w, d, resp.ETag)
		}
		if err != nil {
			w.Abort()
		}
	}
	if err != nil {
		s.storeFailed(f, int64(len(body)), err)
		if store.IsDiskFull(err) {
			entry, err = f.uncachedEntry(hashAll(body)), errNotCached
		}
	} else {
		s.diskOK()
	}
	f.finish(entry, err)
}

// sent counts a response that got the whole body, as a download of the
// cached file: at once when the entry exists, by finish once it does.
func (f *flight) countSent() {
	f.mu.Lock()
	count := false
	if f.finished {
		count = f.final == nil
	} else {
		f.sent++
	}
	f.mu.Unlock()
	if count {
		f.s.downloads.add(f.up.id, f.relSlash, f.s.now())
	}
}

// pendingTemp is the temp file for a body (the blob writer and a read
// descriptor for the flight), created while the upstream is being asked:
// creating a file costs from tens of microseconds to over half a millisecond
// (this machine's ext4, under load), as much as the upstream's answer on a
// local network, and a client would wait for it before its first byte. Only
// plain GETs prepare one, since revalidations mostly end in 304; an answer
// that brings no body drops it.
type pendingTemp struct {
	done  chan struct{}
	w     *store.BlobWriter
	rf    *os.File
	err   error
	taken bool
}

func (s *Server) prepareTemp() *pendingTemp {
	t := &pendingTemp{done: make(chan struct{})}
	go func() {
		defer close(t.done)
		t.w, t.rf, t.err = s.createTemp()
	}()
	return t
}

func (s *Server) createTemp() (*store.BlobWriter, *os.File, error) {
	w, err := s.blobs.Create()
	if err != nil {
		return nil, nil, err
	}
	rf, err := os.Open(w.Name())
	if err != nil {
		w.Abort()
		return nil, nil, err
	}
	return w, rf, nil
}

// take returns the prepared temp file, waiting for it, or creates one when
// none was prepared (t is nil).
func (t *pendingTemp) take(s *Server) (*store.BlobWriter, *os.File, error) {
	if t == nil {
		return s.createTemp()
	}
	<-t.done
	t.taken = true
	return t.w, t.rf, t.err
}

// drop removes a prepared temp file that was not taken.
func (t *pendingTemp) drop() {
	if t == nil || t.taken {
		return
	}
	<-t.done
	if t.w != nil {
		t.rf.Close()
		t.w.Abort()
	}
}

func (s *Server) failBeforeStream(f *flight, err error) {
	s.log.Error("starting a fill", "upstream", f.up.id, "path", f.relSlash, "err", err)
	s.met.upstreamReqs.WithLabelValues(f.up.label, outcomeAborted).Inc()
	f.decide(flightFailed, err)
	f.finish(store.CacheEntry{}, nil)
}

// copyBody copies the body to the blob writer, publishing progress, and
// checks that it ended cleanly with the announced length.
func (s *Server) copyBody(f *flight, body io.Reader, w *store.BlobWriter) error {
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	buf := *bp
	for {
		n, rerr := body.Read(buf)
		if n > 0 {
			if w.Size()+int64(n) > s.maxFile {
				return errTooLarge
			}
			if m, err := w.Write(buf[:n]); err != nil {
				if store.IsDiskFull(err) {
					return &diskFullError{err: err, rest: bytes.Clone(buf[m:n])}
				}
				return err
			}
			s.met.fetched.Add(float64(n))
			f.progress(w.Size())
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			if s.fillCtx.Err() != nil {
				return errShutdown
			}
			return rerr
		}
	}
	if f.size >= 0 && w.Size() != f.size {
		return errShortBody
	}
	return nil
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
	case errors.Is(err, upstream.ErrBadAnswer):
		return outcomeRefused
	}
	return outcomeNetwork
}

// flightReader streams a flight's body to one client from the temp file, as
// fast as the fill writes it, except the very last byte, which it hands over
// only once the body is known complete. It returns the fill's error if the
// body breaks, so fasthttp ends the response short (Content-Length not
// reached, or no terminating chunk) and closes the connection: a client never
// holds a complete-looking 200 of a body the upstream did not send whole.
type flightReader struct {
	f       *flight
	bytes   prometheus.Counter // registryd_proxy_served_bytes_total of the request
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
	r.bytes.Add(float64(n))
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
		r.bytes.Add(float64(n))
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
