package proxy

import (
	"context"
	"errors"
	"hash"
	"io"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"registryd/store"
	"registryd/store/blob"
	"registryd/upstream"
)

// A full disk breaks nothing. When a fill cannot write its file to the cache
// (the data volume is full, a quota or a file size limit is reached; see
// blob.IsDiskFull), its clients still get the whole file: the flight goes
// on uncached, the rest of the body passing from the upstream to them
// through memory, and nothing is stored.
//
// A flight goes uncached at its start when blob.Store.Reserve says there is
// no room for the file (the volume is below its reserve, a write failed for
// want of space moments ago, or the file's Content-Length does not fit), or
// halfway when a write of its temp file fails for want of space. Halfway,
// the bytes already written stay readable from the flight's descriptor of
// the temp file (its name is removed at once, so nothing is left in
// DATA_DIR/tmp; its blocks go when the last reader closes it), the digests
// computed so far go on with the rest (blob.Writer.Detach), and the rest of
// the body goes to memory.
//
// The memory is a window, not the whole body: pieces of spillChunk bytes,
// at most spillWindow of them at once per flight. A piece is dropped once
// every reader has sent it; when the window is full the fill stops reading
// the upstream until the slowest reader moves on, but for spillStall at
// most: then the pieces the fastest reader has sent go, and the readers
// behind it end short (errSlowReader), so that one stalled client holds
// back neither the others of its flight nor, for long, the upstream's
// connection and its concurrency slot. When every reader is stalled the
// flight ends (errStalledReaders), charged to nobody's health. All uncached
// flights together hold at most spillBudget: past it, each flight goes on
// with one piece at a time (lockstep with its readers).
// That needs the set of readers to be known: an uncached flight leaves the
// flight map at once, so that no request joins it any more (a later request
// for the file starts its own flight, uncached too while the disk is full),
// and the requests that already hold it each read from its first byte
// (those reading from memory register their position; see next). Holders
// that do not read it (a HEAD, a checksum sidecar) give it back before they
// wait for its end.
//
// A revalidation answers nobody before its new body is whole and verified;
// uncached, that body must fit the window, else the revalidation fails and
// the stored copy is served (errSpillFull), as for any failed revalidation.
// The digests (for the checksum headers, the sidecar requests joined to the
// flight and the upstream's offered checksums, checked before the last byte
// goes out, as ever) are computed in the fill as the body passes.

const (
	// spillChunk is the size of one piece of an uncached body in memory.
	spillChunk = copyBufSize
	// spillWindow bounds the memory of one uncached flight.
	spillWindow = 8 << 20
	// spillBudget bounds the memory of all uncached flights together: 20
	// flights with full windows (one upstream's default concurrency) and a
	// few more, while a herd of large misses on a full disk on many
	// upstreams cannot exhaust the process.
	spillBudget = 256 << 20
	// spillStall is how long a fill waits for the readers of a full window
	// before it cuts off those behind the fastest. Well under the idle
	// timeouts of upstream servers (nginx's send_timeout is 60 s), so the
	// upstream does not give up on us for a client's stall.
	spillStall = 10 * time.Second
)

var spillBufs = sync.Pool{New: func() any { b := make([]byte, spillChunk); return &b }}

// Errors of an uncached flight.
var (
	// errNotCached is the outcome (flight.result) of a flight that sent its
	// whole body to its clients but stored nothing (the data volume is
	// full, or too many stores wait: pendingstores.go): its entry carries
	// the body's digests and size, and is not in the store.
	errNotCached = errors.New("the file was served without caching it")
	// errSpillFull is an uncached body that nobody may read yet (a
	// revalidation) and that outgrew the memory window.
	errSpillFull = errors.New("the data volume is full and the file does not fit in memory")
	// errNoReaders ends an uncached flight whose clients are all gone:
	// there is nothing to store, so nothing to fetch.
	errNoReaders = errors.New("every client of the uncached fill is gone")
	// errSlowReader ends the response of a client that fell behind an
	// uncached flight's window (spillStall): the bytes it needs next are
	// gone.
	errSlowReader = errors.New("the client fell too far behind an uncached download")
	// errStalledReaders ends an uncached flight whose every reader stalled
	// for spillStall with the window full.
	errStalledReaders = errors.New("every client of the uncached fill stopped reading")
)

// Stages of registryd_cache_fill_disk_full_total.
const (
	diskStageBefore = "before" // not written: no room (blob.Store.Reserve)
	diskStageWrite  = "write"  // creating or writing the temp file failed
	diskStageStore  = "store"  // fsync, rename or the index commit failed
)

// passState is the uncached part of a flight, under flight.mu.
type passState struct {
	// live is set once the flight is uncached; release reads it without
	// the lock, to wake a fill that waits for room.
	live atomic.Bool
	on   bool
	// memFrom is the body offset from which bytes are in memory; those
	// before it are in the flight's temp file.
	memFrom int64
	base    int64     // body offset of chunks[0]
	chunks  []*[]byte // spillChunk bytes each; the last one fills up
	// readers are the flightReaders that read from memory, and the offset
	// each has reached.
	readers map[*flightReader]int64
	// passive counts the holders that wait for the flight's end without
	// reading its body (awaitResult).
	passive atomic.Int32
	// fillWaits: the fill waits on room for readers to move on.
	fillWaits bool
	room      chan struct{}
}

// memFromLocked is where memory starts; MaxInt64 while the flight caches.
func (p *passState) memFromLocked() int64 {
	if !p.on {
		return math.MaxInt64
	}
	return p.memFrom
}

// wakeFillLocked lets a fill waiting for room look again.
func (p *passState) wakeFillLocked() {
	if p.fillWaits {
		p.fillWaits = false
		close(p.room)
	}
}

// register records that r has read up to r.off, for the window.
func (f *flight) registerLocked(r *flightReader) {
	if f.pass.readers == nil {
		f.pass.readers = make(map[*flightReader]int64)
	}
	f.pass.readers[r] = r.off
	f.pass.wakeFillLocked()
}

func (f *flight) unregister(r *flightReader) {
	if !f.pass.live.Load() {
		return
	}
	f.mu.Lock()
	delete(f.pass.readers, r)
	f.pass.wakeFillLocked()
	f.mu.Unlock()
}

// passReleased is release's part for uncached flights: the fill may wait
// for this holder, and when it was the last one, the memory goes.
func (f *flight) passReleased(last bool) {
	if !f.pass.live.Load() {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if last {
		f.dropChunksLocked(len(f.pass.chunks))
		return
	}
	f.pass.wakeFillLocked()
}

func (f *flight) dropChunksLocked(n int) {
	for _, c := range f.pass.chunks[:n] {
		spillBufs.Put(c)
	}
	f.forgetChunksLocked(n)
}

// forgetChunksLocked drops the first n pieces without putting them back in
// the pool: a reader cut off may still be sending from one (copyMem writes
// outside the lock), so another flight must not reuse it; the garbage
// collector frees it once that write ends.
func (f *flight) forgetChunksLocked(n int) {
	clear(f.pass.chunks[:n])
	f.s.disk.held.Add(-int64(n) * spillChunk)
	f.pass.chunks = f.pass.chunks[n:]
	f.pass.base += int64(n) * spillChunk
}

// awaitResult is result for a holder that does not read the body (a HEAD,
// a checksum sidecar answered from the digests), which then gives the
// flight back. An uncached flight's fill neither waits for such a holder
// to read, nor stops for want of readers while it waits.
func (f *flight) awaitResult() (store.CacheEntry, error) {
	f.pass.passive.Add(1)
	f.passReleased(false)
	e, err := f.result()
	f.pass.passive.Add(-1)
	f.release()
	return e, err
}

// trimLocked drops the pieces every reader has sent. While a holder of the
// flight has not started reading (it will read from the first byte), none
// is dropped, unless pieces are gone already (base past memFrom): such a
// holder would then end short anyway (errSlowReader).
func (f *flight) trimLocked() {
	p := &f.pass
	if len(p.chunks) == 0 || (p.base == p.memFrom && int(f.refs.Load()-1-p.passive.Load()) != len(p.readers)) {
		return
	}
	low := f.written
	for _, off := range p.readers {
		low = min(low, off)
	}
	n := 0
	for n < len(p.chunks) && p.base+int64(n+1)*spillChunk <= low {
		n++
	}
	if n > 0 {
		f.dropChunksLocked(n)
	}
}

// spillAppend adds b, the body's bytes from f.written on, to memory, waiting
// for readers to make room when the window is full.
func (f *flight) spillAppend(ctx context.Context, b []byte) error {
	p := &f.pass
	var stall *time.Timer // made at the first wait: most calls never wait
	defer func() {
		if stall != nil {
			stall.Stop()
		}
	}()
	for len(b) > 0 {
		f.mu.Lock()
		end := f.written
		for {
			if f.decided() && f.refs.Load() <= 1 {
				f.mu.Unlock()
				return errNoReaders
			}
			f.trimLocked()
			if end < p.base+int64(len(p.chunks))*spillChunk || p.roomForPiece(f.s.disk) {
				break
			}
			if !f.decided() {
				f.mu.Unlock()
				return errSpillFull
			}
			// What this call appended so far must reach the readers
			// before the fill waits for them: they wait for progress,
			// which add publishes only once the whole of b is in, and a
			// fast reader that cannot see those bytes is never caught up
			// (Hooks.StallNow) nor moves on to make room.
			f.wakeReadersLocked()
			p.fillWaits, p.room = true, make(chan struct{})
			room := p.room
			f.mu.Unlock()
			if stall == nil {
				stall = time.NewTimer(f.s.spillStallFor())
			} else {
				stall.Reset(f.s.spillStallFor())
			}
			expired := f.s.hooks.StallNow != nil && f.s.hooks.StallNow(f)
			if !expired {
				select {
				case <-room:
				case <-stall.C:
					expired = true
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			f.mu.Lock()
			if expired && !f.cutLaggardsLocked() {
				// Nobody reads on: the memory goes now, not when the
				// stalled clients finally hang up.
				f.forgetChunksLocked(len(p.chunks))
				f.mu.Unlock()
				return errStalledReaders
			}
		}
		if end == p.base+int64(len(p.chunks))*spillChunk {
			p.chunks = append(p.chunks, spillBufs.Get().(*[]byte))
			f.s.disk.hold(spillChunk)
		}
		i := (end - p.base) / spillChunk
		n := copy((*p.chunks[i])[(end-p.base)%spillChunk:], b)
		b = b[n:]
		f.written = end + int64(n)
		f.mu.Unlock()
	}
	return nil
}

// wakeReadersLocked wakes the readers waiting for bytes past what they
// have seen (as progress does, under f.mu).
func (f *flight) wakeReadersLocked() {
	if f.waiting > 0 {
		close(f.wake)
		f.wake, f.waiting = make(chan struct{}), 0
	}
}

// roomForPiece reports whether the flight may take one more piece: within
// its window, and within spillBudget for all flights unless it holds none
// (so every flight moves, one piece at a time at worst).
func (p *passState) roomForPiece(d *diskState) bool {
	return len(p.chunks) < spillWindow/spillChunk && (len(p.chunks) == 0 || d.held.Load()+spillChunk <= spillBudget)
}

// cutLaggardsLocked makes room in a full window whose readers did not move
// for spillStall: the pieces the fastest reader has sent go, and the
// readers behind them end short when they read on (errSlowReader). It
// reports false when there is nothing to drop: every reader stalled.
func (f *flight) cutLaggardsLocked() bool {
	p := &f.pass
	fastest := int64(-1)
	for _, off := range p.readers {
		fastest = max(fastest, off)
	}
	n := 0
	for n < len(p.chunks) && p.base+int64(n+1)*spillChunk <= fastest {
		n++
	}
	if n == 0 {
		return false
	}
	f.forgetChunksLocked(n)
	for r, off := range p.readers {
		if off < p.base {
			delete(p.readers, r)
		}
	}
	f.s.disk.slowCut.Inc()
	return true
}

// memAt returns the bytes of the body in memory from off to the end of
// their piece (the caller bounds them by what is written), or
// errSlowReader when the reader was cut off. The piece stays while the
// reader has not registered a position past it.
func (f *flight) memAt(off int64) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := &f.pass
	if off < p.base {
		return nil, errSlowReader
	}
	i := (off - p.base) / spillChunk
	return (*p.chunks[i])[(off-p.base)%spillChunk:], nil
}

// readAt reads the body at off: from the temp file before memFrom, from
// memory after.
func (f *flight) readAt(b []byte, off, memFrom int64) (int, error) {
	if off < memFrom {
		if int64(len(b)) > memFrom-off {
			b = b[:memFrom-off]
		}
		return f.file.ReadAt(b, off)
	}
	m, err := f.memAt(off)
	return copy(b, m), err
}

// copyMem writes the bytes from r.off to avail, which are in memory.
func (r *flightReader) copyMem(w io.Writer, avail int64) (int64, error) {
	var done int64
	for r.off+done < avail {
		b, err := r.f.memAt(r.off + done)
		if err != nil {
			return done, err
		}
		b = b[:min(int64(len(b)), avail-r.off-done)]
		m, err := w.Write(b)
		done += int64(m)
		if err != nil {
			return done, err
		}
	}
	return done, nil
}

// passThrough is the branch of a streamed fill (stream) that goes on
// uncached: from its start (w nil: nothing was written), or from where a
// write of its temp file failed for want of space (w holds what was
// written; rest is what the failed write did not take). The body passes
// through the memory window to its clients, and ends in the fill's own
// tail (bodyRead) with its digests and nothing to store.
func (s *engine) passThrough(ctx context.Context, f *flight, resp *upstream.Response, body io.Reader, exp expected,
	w *blob.Writer, rest []byte, stage string, cause error) {
	var sums [4]hash.Hash
	var onDisk int64
	if w != nil {
		onDisk = w.Size()
		var err error
		if sums, err = w.Detach(); err != nil {
			s.failBody(f, err)
			return
		}
	} else {
		sums = blob.NewHashes()
	}
	s.diskFull(stage, f, cause)
	// live before on: a reader that registers once on is set must find
	// live set when it unregisters, or it would stay in readers.
	f.pass.live.Store(true)
	f.mu.Lock()
	f.pass.on, f.pass.memFrom, f.pass.base = true, onDisk, onDisk
	f.written = onDisk
	f.mu.Unlock()
	// No request joins an uncached flight: it would need the body from
	// its start, which is no longer kept.
	f.leave()
	if !f.reval && !f.decided() {
		f.decide(flightStreaming, nil)
	}
	n := onDisk
	add := func(b []byte) error {
		if n+int64(len(b)) > f.max {
			return f.tooLarge
		}
		for _, h := range sums {
			h.Write(b)
		}
		if err := f.spillAppend(ctx, b); err != nil {
			return err
		}
		n += int64(len(b))
		s.met.fetched.Add(float64(len(b)))
		f.progress(n)
		return nil
	}
	err := add(rest)
	if err == nil {
		err = s.copyPass(body, add)
	}
	if err == nil && f.size >= 0 && n != f.size {
		err = errShortBody
	}
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			if s.fillCtx.Err() != nil {
				err = errShutdown
			}
		}
		if errors.Is(err, errNoReaders) {
			// Nobody is left to send it to and nothing is stored: the
			// upstream's answer was fine, only unwanted.
			s.met.upstreamReqs.WithLabelValues(f.up.label, outcomeAborted).Inc()
			f.finish(store.CacheEntry{}, err)
			return
		}
		s.failBody(f, err)
		return
	}
	// The rest is the tail of every streamed body, uncached.
	s.bodyRead(f, resp, exp, nil, blob.SumHashes(sums, n))
}

// uncachedEntry is the outcome of a flight that stored nothing: what the
// entry would have said, for the requests joined to the flight that answer
// from it (a HEAD, a checksum sidecar).
func (f *flight) uncachedEntry(d blob.Digests) store.CacheEntry {
	return store.CacheEntry{
		UpstreamID: f.up.id, RelativePath: f.relSlash, ContentType: f.ctype, Size: d.Size,
		MD5: d.MD5, SHA1: d.SHA1, SHA256: d.SHA256, SHA512: d.SHA512,
	}
}

// hashAll digests a body held in memory.
func hashAll(b []byte) blob.Digests {
	sums := blob.NewHashes()
	for _, h := range sums {
		h.Write(b)
	}
	return blob.SumHashes(sums, int64(len(b)))
}

// copyPass reads the body to its end into add.
func (s *engine) copyPass(body io.Reader, add func([]byte) error) error {
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	buf := *bp
	for {
		n, rerr := body.Read(buf)
		if n > 0 {
			if err := add(buf[:n]); err != nil {
				return err
			}
		}
		if rerr == io.EOF {
			return nil
		}
		if rerr != nil {
			if s.fillCtx.Err() != nil {
				return errShutdown
			}
			return rerr
		}
	}
}

// diskFullError is a temp file write that failed for want of space; rest
// is what that write did not take.
type diskFullError struct {
	err  error
	rest []byte
}

func (e *diskFullError) Error() string { return e.err.Error() }
func (e *diskFullError) Unwrap() error { return e.err }

// diskState is the proxy's side of a full disk: what it counts and logs.
type diskState struct {
	full *prometheus.CounterVec
	// slowCut counts the cuts of clients that fell behind an uncached
	// flight's window (cutLaggardsLocked).
	slowCut prometheus.Counter
	held    atomic.Int64 // bytes of uncached bodies in memory
	peak    atomic.Int64 // the most held at once (for tests)
	log     *slog.Logger
	blobs   *blob.Store

	mu       sync.Mutex
	warnedAt time.Time // of the last warning; zero once fills cache again
	quiet    int       // failures since that warning
	// indexWarned is when each kind of background index write (download
	// counts, collector) last logged a failure for want of space.
	indexWarned map[string]time.Time
}

func (d *diskState) hold(n int64) {
	h := d.held.Add(n)
	for p := d.peak.Load(); h > p && !d.peak.CompareAndSwap(p, h); p = d.peak.Load() {
	}
}

// diskLogEvery is how often a full disk is logged, however many fills it
// turns away.
const diskLogEvery = time.Minute

func newDiskState(reg prometheus.Registerer, blobs *blob.Store, log *slog.Logger) (*diskState, error) {
	const ns = "registryd"
	d := &diskState{log: log, blobs: blobs,
		full: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: "cache", Name: "fill_disk_full_total",
			Help: "Fills that could not write to the cache for want of space (a full data volume, a quota, a file " +
				"size limit) and streamed their file to their clients uncached, by stage: before (no room, " +
				"nothing written), write (the temp file could not be created or written), store (fsync, rename " +
				"or the index commit failed after the body).",
		}, []string{"stage"}),
		slowCut: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Subsystem: "cache", Name: "uncached_slow_client_cuts_total",
			Help: "Times an uncached download's memory window stayed full for 10 s and the clients behind the " +
				"fastest one were cut off (their responses end short), so that they hold back neither the others " +
				"nor the upstream.",
		}),
	}
	for _, st := range []string{diskStageBefore, diskStageWrite, diskStageStore} {
		d.full.WithLabelValues(st)
	}
	if reg == nil {
		return d, nil
	}
	cs := []prometheus.Collector{
		d.full, d.slowCut,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: "cache", Name: "filling",
			Help: "1 while fills write to the cache, 0 while the data volume is full and files are served uncached.",
		}, func() float64 {
			if blobs.DiskStatus().Filling {
				return 1
			}
			return 0
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: "cache", Name: "volume_free_bytes",
			Help: "Bytes available on the data volume (statfs, at most a second old).",
		}, func() float64 { sp, _ := blobs.Space(); return float64(sp.Free) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: "cache", Name: "volume_size_bytes",
			Help: "Size of the data volume.",
		}, func() float64 { sp, _ := blobs.Space(); return float64(sp.Total) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: "cache", Name: "uncached_memory_bytes",
			Help: "Bytes of files being served uncached (the disk is full) held in memory.",
		}, func() float64 { return float64(d.held.Load()) }),
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// diskFull counts a fill that could not write to the cache, and logs it
// once per diskLogEvery.
func (s *engine) diskFull(stage string, f *flight, cause error) {
	d := s.disk
	d.full.WithLabelValues(stage).Inc()
	if stage != diskStageBefore {
		s.blobs.NoteDiskFull()
	}
	now := time.Now()
	d.mu.Lock()
	if !d.warnedAt.IsZero() && now.Sub(d.warnedAt) < diskLogEvery {
		d.quiet++
		d.mu.Unlock()
		return
	}
	quiet := d.quiet
	d.warnedAt, d.quiet = now, 0
	d.mu.Unlock()
	st := s.blobs.DiskStatus()
	attrs := []any{"stage", stage, "upstream", f.up.id, "path", f.relSlash, "free_bytes", st.Free,
		"since_last_warning", quiet}
	if st.Reason != "" {
		attrs = append(attrs, "reason", st.Reason)
	}
	if cause != nil {
		attrs = append(attrs, "err", cause)
	}
	s.log.Warn("the data volume is full: files are served to their clients without caching them "+
		"(logged once a minute; see registryd_cache_fill_disk_full_total)", attrs...)
}

// diskOK notes a fill that was stored: after a full disk, the first one
// says so in the log.
func (s *engine) diskOK() {
	d := s.disk
	d.mu.Lock()
	was := !d.warnedAt.IsZero()
	d.warnedAt, d.quiet = time.Time{}, 0
	d.mu.Unlock()
	if was {
		s.log.Info("the data volume has room again: fills are cached")
	}
}

// backgroundFailed logs a failed background write (what: "flushing download
// counts", "collecting cache entries"): at once, unless it failed for want
// of space, which is logged once per diskLogEvery for each kind, since it
// fails again at every period until the volume has room.
func (s *engine) backgroundFailed(what string, err error) {
	if !blob.IsDiskFull(err) {
		s.log.Warn(what, "err", err)
		return
	}
	d := s.disk
	now := time.Now()
	d.mu.Lock()
	last, ok := d.indexWarned[what]
	if ok && now.Sub(last) < diskLogEvery {
		d.mu.Unlock()
		return
	}
	if d.indexWarned == nil {
		d.indexWarned = map[string]time.Time{}
	}
	d.indexWarned[what] = now
	d.mu.Unlock()
	s.log.Warn(what+": the data volume is full (logged once a minute while it lasts)", "err", err)
}
