package proxy

import (
	"context"
	"errors"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"

	"registryd/store"
	"registryd/store/blob"
	"registryd/upstream"
)

// A flight is the one upstream fetch of (upstream, path) in progress: a miss
// being filled, or a stale entry being revalidated. It runs in its own
// goroutine on a context detached from every client (bounded by
// upstreams.fill_timeout), so a client hanging up does not abort it and a
// slow client does not slow it: the body goes to a temp file (hashed behind
// the writer, see blob.Writer), and every client, the first one
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
	s        *engine
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
	// ctx is the fill's context, detached from every client; stop cancels
	// it, with errAbandoned when every client left (see orphaned). Set by
	// join before anyone can release the flight.
	ctx  context.Context
	stop context.CancelCauseFunc
	// slot is the upstream request slot the fill holds (gate.go), nil
	// until it has one.
	slot atomic.Pointer[slot]
	// dropped says the fill was abandoned and cancelled (drop).
	dropped atomic.Bool
	// max is the longest body the fill takes, tooLarge its failure past it
	// (Server.fillLimit); set when the fill starts.
	max      int64
	tooLarge error

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
func (s *engine) join(up *upstreamView, rel, etag string, reval bool, seen uint64) (f *flight, joined bool) {
	s.flightsMu.Lock()
	if f, ok := s.flights[flightKey{up.id, rel}]; ok {
		if f.refs.Add(1) == 2 {
			// Only its fill held it: it is wanted again, and keeps its slot.
			f.slot.Load().busy()
		}
		s.flightsMu.Unlock()
		s.met.joins.Inc()
		if s.hooks.OnJoin != nil {
			s.hooks.OnJoin()
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
	f.ctx, f.stop = context.WithCancelCause(s.fillCtx)
	s.flights[f.key] = f
	s.fills.Add(1)
	s.flightsMu.Unlock()
	go s.fill(f)
	return f, false
}

func (s *engine) inflight() int {
	s.flightsMu.Lock()
	defer s.flightsMu.Unlock()
	return len(s.flights)
}

func (f *flight) release() {
	n := f.refs.Add(-1)
	if n == 0 && f.file != nil {
		f.file.Close()
	}
	if n == 1 {
		f.orphaned()
	}
	f.passReleased(n == 0)
}

// errAbandoned ends a fill whose clients all left (drop).
var errAbandoned = errors.New("every client of the fill left")

// Stages of registryd_upstream_fills_abandoned_total.
const (
	abandonedQueued      = "queued"      // dequeued before it had a slot
	abandonedDownloading = "downloading" // cancelled to give its slot to a waiting request
)

// orphaned handles a flight that only its fill holds any more: every
// client left and nobody joined. A fill still waiting for a slot of the
// upstream's cap is dropped at once: it would ask the upstream for nobody.
// One that holds a slot becomes idle (slot.idle): it goes on, so the file
// is cached for the next build, until a request waits for a slot, which
// then cancels it. Called when the count of holders falls to one; the
// fill's own release, at its end, finds the flight done.
func (f *flight) orphaned() {
	select {
	case <-f.done:
		return
	default:
	}
	if f.stop == nil {
		return // never had a fill (registryd was closing)
	}
	if sl := f.slot.Load(); sl != nil {
		sl.idle(f.drop)
		return
	}
	f.drop()
}

// drop cancels an abandoned fill. It leaves the map first, under the lock
// join takes, so that a request from now on starts a fill of its own
// rather than join a cancelled one; false when a client joined meanwhile
// or the flight ended.
func (f *flight) drop() bool {
	s := f.s
	s.flightsMu.Lock()
	if f.refs.Load() != 1 || s.flights[f.key] != f {
		s.flightsMu.Unlock()
		return false
	}
	delete(s.flights, f.key)
	f.dropped.Store(true)
	s.flightsMu.Unlock()
	stage := abandonedQueued
	if f.slot.Load() != nil {
		stage = abandonedDownloading
	}
	s.met.abandoned.WithLabelValues(stage).Inc()
	f.stop(errAbandoned)
	return true
}

// freeSlot gives back the upstream's request slot once the upstream's
// body is read; safe to call more than once.
func (f *flight) freeSlot() { f.slot.Load().release() }

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
	if errors.Is(err, errNotCached) && entry.SHA1 != "" {
		f.s.uncached.remember(f.up.id, f.key.rel, entry, f.s.now())
	}
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
func (f *flight) setDigests(d blob.Digests) {
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

// outcome is a decided flight as its askers read it (settle).
type outcome struct {
	kind  flightKind       // never flightPending
	entry store.CacheEntry // flightElsewhere: the entry another node stored
	err   error            // flightFailed: why
}

// settle reads the outcome of f, decided (ready is closed): the one place
// that does, for downloads and merges alike. Every outcome but a streaming
// body releases f; a streaming one stays the caller's to read and release.
// stored says the caller holds a stored entry of the file (it revalidates
// it): a 404 of a plain fetch it joined (the fetch of a file whose blob had
// gone missing) is news about that entry all the same, and drops it.
func (s *engine) settle(f *flight, stored bool) outcome {
	o := outcome{kind: f.kind, err: f.err}
	switch f.kind {
	case flightStreaming:
		return o
	case flightNotFound:
		if stored && !f.reval {
			s.dropGone(f)
		}
	case flightElsewhere:
		o.entry, _ = f.result()
	}
	f.release()
	return o
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
