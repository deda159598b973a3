package proxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"runtime"
	"time"

	"registryd/maven"
	"registryd/store"
	"registryd/store/blob"
	"registryd/upstream"
)

// memBodyMax is the largest body a fill reads whole before it answers
// (most POMs and metadata files): one write then carries a client's headers
// and body, where streaming a body of a few KB behind the fill costs every
// client a header write, an open of the temp file, a wait for the fill and
// two sendfiles (the last byte waits for the clean end), and makes the first
// byte wait for the temp file. On a herd of 32 for a 1 KB file that took the
// answer from about 1 ms after the upstream's to about 3.
const memBodyMax = 16 << 10 // the listener sends bodies this large from memory (sendfileMin)

// statusNotModified is an upstream's 304.
const statusNotModified = 304

// errLongBody is a body that went on past its Content-Length.
var errLongBody = &refusedError{label: refusedAnswer, reason: "body longer than its Content-Length"}

// fill runs one flight to its end: the upstream's answer (ask), then its
// body (takeBody): read whole when it is small (fillSmall), else streamed
// to the cache's temp file, or uncached through memory when the disk has no
// room for it (stream, passThrough), both ending in the one tail of a
// streamed body (bodyRead).
func (s *engine) fill(f *flight) {
	defer s.fills.Done()
	defer f.release()
	f.max, f.tooLarge = s.fillLimit(f.key.rel)
	defer f.stop(nil)
	// On a cluster, one node at a time asks the upstream for this file
	// (cluster.go); the lease is given back once the entry is committed.
	unlease, done := s.leaseFill(f)
	defer unlease()
	if done {
		return
	}
	ctx, cancel := context.WithTimeout(f.ctx, s.opts.Upstreams.FillTimeout)
	defer cancel()
	sl, ok := s.admitFill(ctx, f)
	defer sl.release()
	if !ok {
		return
	}
	epoch := s.st.ForgetEpoch(f.up.id)
	var temp *pendingTemp
	if !f.reval && s.blobs.DiskStatus().Filling {
		temp = s.prepareTemp()
	}
	resp := s.ask(ctx, f, temp, epoch)
	if resp == nil {
		return
	}
	defer resp.Body.Close()
	sl.sized(resp.ContentLength)
	s.takeBody(ctx, f, resp, temp)
}

// admitFill waits for a slot of the upstream's cap, then for the health
// tracker's leave: an upstream that turned unhealthy while this fill
// queued is not asked. false: the flight is decided and finished.
func (s *engine) admitFill(ctx context.Context, f *flight) (*slot, bool) {
	sl, err := s.gates.acquire(ctx, f.up.id, !smallByPath(f.key.rel))
	f.slot.Store(sl)
	if err != nil {
		if s.fillCtx.Err() != nil {
			err = errShutdown
		}
		f.decide(flightFailed, err)
		f.finish(store.CacheEntry{}, nil)
		return sl, false
	}
	tk, closed, ok := s.health.Begin(f.up.id, f.key.rel)
	if !ok {
		f.decide(flightFailed, s.skipped(f.up, closed))
		f.finish(store.CacheEntry{}, nil)
		return sl, false
	}
	f.ticket = tk
	return sl, true
}

// noBody ends a flight whose answer brings no body. The prepared temp file
// goes before the flight is done: once it is, nothing of it is left in
// DATA_DIR/tmp.
func (f *flight) noBody(temp *pendingTemp, kind flightKind, err error) {
	f.decide(kind, err)
	temp.drop()
	f.finish(store.CacheEntry{}, nil)
}

// ask sends the flight's request, and ends the flight on every answer that
// brings no body (a failure, 404 or 410, 304): nil then.
func (s *engine) ask(ctx context.Context, f *flight, temp *pendingTemp, epoch uint64) *upstream.Response {
	start := time.Now()
	get := s.up.Get
	if f.reval {
		get = s.up.Revalidate
	}
	resp, err := get(ctx, f.up.ep, f.key.rel, f.etag)
	switch {
	case err == nil:
	case s.fillCtx.Err() != nil:
		err = errShutdown
	case f.dropped.Load():
		err = errAbandoned
	}
	s.judge(f.ticket, err)
	if err != nil {
		s.met.upstream(f.up, outcomeOf(err), start)
		kind, err := s.askFailed(f, err, epoch)
		f.noBody(temp, kind, err)
		return nil
	}
	if resp.Status == statusNotModified || (f.etag != "" && resp.ETag == f.etag) {
		kind, err := s.notModified(f, start)
		f.noBody(temp, kind, err)
		resp.Body.Close()
		return nil
	}
	s.met.upstreamDur.WithLabelValues(f.up.label).Observe(time.Since(start).Seconds())
	return resp
}

// askFailed is the outcome of a request that failed: 404 and 410 are
// remembered (and end a revalidated entry), refusals too.
func (s *engine) askFailed(f *flight, err error, epoch uint64) (flightKind, error) {
	switch {
	case errors.Is(err, upstream.ErrNotFound):
		if f.reval {
			s.dropGone(f)
		}
		s.marks.rememberAbsent(s.st, f.up, f.key.rel, epoch, s.now())
		return flightNotFound, nil
	case errors.Is(err, upstream.ErrBadAnswer), errors.Is(err, upstream.ErrBlocked):
		// Refused, by the client or by policy (a redirect to an address
		// registryd does not connect to): remembered, so a client's retry
		// does not ask again at once.
		return flightFailed, s.refuse(f, err)
	}
	return flightFailed, err
}

// notModified is the outcome of a 304 (or a 200 with the stored ETag): the
// stored copy is current, and its check recorded.
func (s *engine) notModified(f *flight, start time.Time) (flightKind, error) {
	if f.etag == "" {
		s.met.upstream(f.up, outcomeServerError, start)
		return flightFailed, errUnexpected304
	}
	s.met.upstream(f.up, outcomeNotModified, start)
	// With too many stores waiting the check is not recorded: the stored
	// copy is served all the same, and revalidated again next time
	// (pendingstores.go).
	if release, ok := s.stores.take(turnedAwayCheck, f); ok {
		if err := s.st.TouchCacheEntry(f.up.id, f.relSlash, s.now()); err != nil && !errors.Is(err, store.ErrNotFound) {
			s.log.Warn("recording a revalidation", "upstream", f.up.id, "path", f.relSlash, "err", err)
		}
		release()
	}
	return flightNotModified, nil
}

// takeBody admits the body of a 2xx answer (its length, its checksums, its
// first bytes) and runs it: a body that is (or may be, when its length is
// unknown) small is read whole before anyone is answered (fillSmall); a
// longer one streams on from what was read of it.
func (s *engine) takeBody(ctx context.Context, f *flight, resp *upstream.Response, temp *pendingTemp) {
	if resp.ContentLength > f.max {
		s.met.upstreamReqs.WithLabelValues(f.up.label, outcomeAborted).Inc()
		if refusal(f.tooLarge) {
			s.refuse(f, f.tooLarge)
		}
		f.noBody(temp, flightFailed, f.tooLarge)
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
	var head []byte
	if f.size <= memBodyMax {
		var whole bool
		head, whole, err = readHead(resp.Body, f.size)
		if err == nil && whole && int64(len(head)) > f.max {
			err = f.tooLarge
		}
		if err != nil {
			temp.drop()
			s.failBody(f, err)
			return
		}
		if whole {
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
	s.stream(ctx, f, resp, body, exp, temp)
}

// stream writes a body to the cache's temp file as its clients read it
// behind the fill; it goes on uncached (passThrough) when the disk has no
// room for it, before or while it is written.
func (s *engine) stream(ctx context.Context, f *flight, resp *upstream.Response, body io.Reader, exp expected, temp *pendingTemp) {
	unreserve, room := s.blobs.Reserve(f.size)
	defer unreserve()
	if !room {
		temp.drop()
		s.passThrough(ctx, f, resp, body, exp, nil, nil, diskStageBefore, nil)
		return
	}
	w, rf, err := temp.take(s)
	if blob.IsDiskFull(err) {
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
	s.bodyRead(f, resp, exp, w, blob.Digests{})
}

// bodyRead is the one tail of a streamed body read to its clean end: into
// the temp file w, or uncached through memory (w nil, d its digests:
// passThrough). The upstream connection goes back to the pool, and its
// slot to the next request, before the hashing and the fsync. With
// checksums to check, the last byte waits for the digests: no client may
// hold a complete-looking body that does not match them. A revalidation
// answers nothing before its body is verified, the stored copy being the
// answer until then. Otherwise the clients finish at once and the hashing
// (usually done by now, see blob.Writer) ends behind them. Then the
// body is stored (storeBody), unless it went uncached.
func (s *engine) bodyRead(f *flight, resp *upstream.Response, exp expected, w *blob.Writer, d blob.Digests) {
	resp.Body.Close()
	f.freeSlot()
	verifyFirst := exp.any() || f.reval || w == nil
	var unsynced error // a full disk failed the fsync: the body is whole, but not stored
	if verifyFirst {
		var err error
		if w != nil {
			d, err = w.Finish()
			if blob.IsDiskFull(err) && d.SHA256 != "" {
				unsynced, err = err, nil
			}
		}
		if err == nil {
			err = exp.check(d)
		}
		if err != nil {
			if w != nil {
				w.Abort()
			}
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
	if w == nil {
		if s.hooks.OnComplete != nil {
			s.hooks.OnComplete()
		}
		f.finish(f.uncachedEntry(d), errNotCached)
		return
	}
	s.storeBody(f, w, d, !verifyFirst, unsynced, resp.ETag)
}

// storeBody publishes a streamed body whole on its clients' side: hashed
// here unless bodyRead did (hash), fsynced, and made the entry, unless too
// many stores wait (notStored) or the disk is full (the flight then ends
// uncached with its digests).
func (s *engine) storeBody(f *flight, w *blob.Writer, d blob.Digests, hash bool, unsynced error, etag string) {
	release, storing := s.stores.take(turnedAwayFill, f)
	defer release()
	if !storing {
		s.notStored(f, w, d, hash)
		return
	}
	var err error
	if hash {
		if d, err = w.Finish(); d.SHA256 != "" {
			f.setDigests(d)
		}
	}
	if err == nil {
		err = unsynced
	}
	if s.hooks.OnComplete != nil {
		s.hooks.OnComplete()
	}
	var entry store.CacheEntry
	if err == nil {
		entry, err = s.publish(f, w, d, etag)
	}
	if err != nil {
		w.Abort()
		s.storeFailed(f, w.Size(), err)
		if blob.IsDiskFull(err) && d.SHA256 != "" {
			entry, err = f.uncachedEntry(d), errNotCached
		}
	} else {
		s.diskOK()
	}
	f.finish(entry, err)
}

// notStored ends a flight whose body its clients got whole but which is not
// stored (too many stores wait, pendingstores.go): the temp file goes, and
// the flight ends uncached with the body's digests, hashed here when hash
// says they are not known yet.
func (s *engine) notStored(f *flight, w *blob.Writer, d blob.Digests, hash bool) {
	if hash {
		if sums, err := w.Detach(); err == nil {
			d = blob.SumHashes(sums, w.Size())
			f.setDigests(d)
		}
	}
	w.Abort()
	f.finish(f.uncachedEntry(d), errNotCached)
}

// publish makes the verified body of f the cache entry of its upstream and
// path.
func (s *engine) publish(f *flight, w *blob.Writer, d blob.Digests, etag string) (store.CacheEntry, error) {
	s.marks.forget(f.up.id, f.key.rel)
	return s.st.Publish(s.blobs, w, d, store.CacheEntry{
		UpstreamID:   f.up.id,
		RelativePath: f.relSlash,
		ContentType:  f.ctype,
		ETag:         etag,
		CheckedAt:    s.now().UTC().Truncate(time.Millisecond),
	})
}

func (s *engine) storeFailed(f *flight, size int64, err error) {
	s.met.storeErrors.Inc()
	if blob.IsDiskFull(err) {
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
func (s *engine) failBody(f *flight, err error) {
	switch {
	case s.fillCtx.Err() != nil && !refusal(err):
		err = errShutdown
	case f.dropped.Load():
		err = errAbandoned // nobody is told; counted in fills_abandoned_total
	}
	s.met.upstreamReqs.WithLabelValues(f.up.label, outcomeAborted).Inc()
	if _, after, ok := upstream.Classify(err); ok {
		// The body broke (reset, idle timeout, cut short): the answer's
		// headers counted as a success; this counts against the path.
		s.health.Failure(f.ticket, healthFault(upstream.FailPath, err, after))
	}
	switch {
	case refusal(err):
		s.refuse(f, err)
	case !errors.Is(err, errShutdown) && err != errAbandoned:
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
func (s *engine) dropGone(f *flight) {
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
func (s *engine) fillSmall(f *flight, resp *upstream.Response, body []byte, exp expected, temp *pendingTemp) {
	var err error
	var d blob.Digests
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
	if s.hooks.OnComplete != nil {
		s.hooks.OnComplete()
	}

	release, storing := s.stores.take(turnedAwayFill, f)
	defer release()
	if !storing {
		temp.drop()
		f.finish(f.uncachedEntry(hashAll(body)), errNotCached)
		return
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
		if blob.IsDiskFull(err) {
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
	w     *blob.Writer
	rf    *os.File
	err   error
	taken bool
}

func (s *engine) prepareTemp() *pendingTemp {
	t := &pendingTemp{done: make(chan struct{})}
	go func() {
		defer close(t.done)
		t.w, t.rf, t.err = s.createTemp()
	}()
	return t
}

func (s *engine) createTemp() (*blob.Writer, *os.File, error) {
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
func (t *pendingTemp) take(s *engine) (*blob.Writer, *os.File, error) {
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

func (s *engine) failBeforeStream(f *flight, err error) {
	s.log.Error("starting a fill", "upstream", f.up.id, "path", f.relSlash, "err", err)
	s.met.upstreamReqs.WithLabelValues(f.up.label, outcomeAborted).Inc()
	f.decide(flightFailed, err)
	f.finish(store.CacheEntry{}, nil)
}

// copyBody copies the body to the blob writer, publishing progress, and
// checks that it ended cleanly with the announced length.
func (s *engine) copyBody(f *flight, body io.Reader, w *blob.Writer) error {
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	buf := *bp
	for {
		n, rerr := body.Read(buf)
		if n > 0 {
			if w.Size()+int64(n) > f.max {
				return f.tooLarge
			}
			if m, err := w.Write(buf[:n]); err != nil {
				if blob.IsDiskFull(err) {
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
	case err == errAbandoned:
		return outcomeAborted
	}
	return outcomeNetwork
}
