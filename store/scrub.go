package store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"registryd/store/blob"
	"registryd/store/kv"
)

// The scrub (docs/operations.md, "Scrub"): a background job that re-reads
// every referenced blob under an I/O budget, re-hashes it (SHA-256) and
// compares the hash with the blob's name. It walks the index's reference
// counts (blob_refs) in key order, from a cursor kept in the index, so that
// a restart continues where the last process stopped.
//
//   - A local file whose bytes do not match is moved to DATA_DIR/quarantine
//     (blob.Store.Quarantine). With disk-only blobs every entry pointing at
//     it is dropped as a delete drops it (to the collector's pending list,
//     reference counts unchanged until the collector runs): the next
//     download fills it again from its upstream. Over a bucket the entries
//     stay: the next hit fetches the object again (a fetch verifies it).
//   - An object of the bucket whose bytes do not match, or a missing one
//     (or a missing local file, with disk-only blobs), is deleted and its
//     entries are dropped the same way.
//
// Objects no entry refers to are not the scrub's: the orphan sweep
// (blobbind.go) deletes them after the grace, and SweepBlobs removes local
// files no entry refers to at start.
//
// Every node scrubs its local files; over a bucket, one node also scrubs the
// objects in a cycle (the holder of the job's lease, ScrubOptions.Shared).

// ScrubOptions configure a Scrubber.
type ScrubOptions struct {
	// Interval is how often a cycle starts (from the end of the last one);
	// 0: only when asked (Scrubber.StartNow).
	Interval time.Duration
	// BytesPerSecond is the I/O budget of the reads; it must be positive.
	BytesPerSecond int64
	// QuarantineMaxBytes bounds DATA_DIR/quarantine (oldest deleted first).
	QuarantineMaxBytes int64
	// Node names this node's cursor in the index ("" on a single node).
	Node string
	// Shared takes the bucket's scrub for one cycle (a cluster-wide lease):
	// ok false, another node scrubs the objects. Nil: this node does (one
	// node on a bucket). Unused with disk-only blobs.
	Shared func() (unlock func(), ok bool)
	// Logger receives a line per bad blob and per cycle; nil: none.
	Logger *slog.Logger
	// Limiter, for tests, replaces the token bucket of BytesPerSecond.
	Limiter Limiter
	// Check is how often the loop looks whether a cycle is due. Default 1m.
	Check time.Duration
}

// Limiter paces reads: Wait returns when n more bytes may be read.
type Limiter interface {
	Wait(ctx context.Context, n int) error
}

// TokenBucket is a Limiter of rate bytes per second with a burst of one
// second's worth. Now and Sleep are the clock (tests inject a fake one).
type TokenBucket struct {
	Rate  int64
	Now   func() time.Time
	Sleep func(ctx context.Context, d time.Duration) error

	mu     sync.Mutex
	tokens float64
	last   time.Time
}

// NewTokenBucket is a TokenBucket of rate bytes per second on the real clock.
func NewTokenBucket(rate int64) *TokenBucket {
	return &TokenBucket{Rate: rate, Now: time.Now, Sleep: sleepCtx}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Wait takes n tokens, sleeping for the ones that are not there yet.
func (t *TokenBucket) Wait(ctx context.Context, n int) error {
	t.mu.Lock()
	now := t.Now()
	rate := float64(t.Rate)
	if t.last.IsZero() {
		t.tokens = rate
	} else {
		t.tokens = min(rate, t.tokens+now.Sub(t.last).Seconds()*rate)
	}
	t.last = now
	t.tokens -= float64(n)
	var d time.Duration
	if t.tokens < 0 {
		d = time.Duration(-t.tokens / rate * float64(time.Second))
	}
	t.mu.Unlock()
	if d == 0 {
		return ctx.Err()
	}
	return t.Sleep(ctx, d)
}

// scrubChunk is the size of one read (and one take of the budget).
const scrubChunk = 64 << 10

// scrubBatch is how many digests one read transaction lists; the cursor is
// saved after each batch.
const scrubBatch = 256

// maxFindings bounds the bad blobs one cycle's report lists (the counters
// count them all).
const maxFindings = 1000

// ScrubEntry is a cache entry a bad blob's drop removed.
type ScrubEntry struct {
	UpstreamID   int64  `json:"upstream_id"`
	RelativePath string `json:"relative_path"`
}

// ScrubFinding is one bad blob.
type ScrubFinding struct {
	SHA256 string `json:"sha256"`
	// Tier is "local" (the node's file) or "bucket" (the object).
	Tier string `json:"tier"`
	// Quarantined is where the bad local file was moved ("" when none was,
	// or the quarantine's bound deleted it).
	Quarantined string `json:"quarantined,omitempty"`
	// Entries are the cache entries dropped for it.
	Entries []ScrubEntry `json:"entries"`
}

// ScrubCycle is one cycle's progress or result.
type ScrubCycle struct {
	StartedAt  time.Time  `json:"started_at"`
	FinishedAt *time.Time `json:"finished_at"`
	// Resumed says the cycle continued one a stop cut short (its counts
	// start at the cursor).
	Resumed bool `json:"resumed"`
	// Bucket says this node scrubbed the bucket's objects too.
	Bucket         bool           `json:"bucket"`
	Checked        int64          `json:"checked"`
	BytesHashed    int64          `json:"bytes_hashed"`
	EntriesDropped int64          `json:"entries_dropped"`
	Corrupt        []ScrubFinding `json:"corrupt"`
	Missing        []ScrubFinding `json:"missing"`
	// Error is why the cycle stopped early ("" when it did not).
	Error string `json:"error,omitempty"`
}

// ScrubReport is the current cycle (nil when none runs) and the last one
// that ended in this process.
type ScrubReport struct {
	Running bool        `json:"running"`
	Current *ScrubCycle `json:"current"`
	Last    *ScrubCycle `json:"last"`
}

// ScrubCounters are the scrub's totals since the start, for metrics.
type ScrubCounters struct {
	Checked, Corrupt, Missing, BytesHashed, EntriesDropped atomic.Int64
	// LastCompleted is the end of the last whole cycle, Unix seconds (0:
	// none in this process).
	LastCompleted atomic.Int64
}

// scrubState is what the index keeps of a node's scrub.
type scrubState struct {
	Cursor       string    `json:"cursor,omitempty"` // the last digest checked by the cycle in progress
	StartedAt    time.Time `json:"started_at,omitzero"`
	LastFinished time.Time `json:"last_finished,omitzero"`
	Since        time.Time `json:"since,omitzero"` // first seen: the first cycle is due one interval later
}

// ErrScrubRunning is a cycle asked for while one runs.
var ErrScrubRunning = errors.New("a scrub cycle is running")

// Scrubber runs the scrub of one node.
type Scrubber struct {
	s     *Store
	b     *blob.Store
	o     ScrubOptions
	lim   Limiter
	log   *slog.Logger
	Stats ScrubCounters

	mu      sync.Mutex
	running bool
	asked   bool // StartNow asked for the cycle that runs or is about to
	current *ScrubCycle
	last    *ScrubCycle

	stop   chan struct{}
	cancel context.CancelFunc
	ctx    context.Context
	wg     sync.WaitGroup
	kick   chan struct{}
}

// NewScrubber prepares the scrub of b; Start runs its loop.
func (s *Store) NewScrubber(b *blob.Store, o ScrubOptions) *Scrubber {
	if o.Check <= 0 {
		o.Check = time.Minute
	}
	if o.Interval > 0 && o.Interval < o.Check {
		o.Check = o.Interval
	}
	lim := o.Limiter
	if lim == nil {
		lim = NewTokenBucket(max(o.BytesPerSecond, scrubChunk))
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Scrubber{s: s, b: b, o: o, lim: lim, log: log, stop: make(chan struct{}),
		ctx: ctx, cancel: cancel, kick: make(chan struct{}, 1)}
}

// Start runs the loop: a cycle when one is due (or one a stop cut short is
// left), and when StartNow asks. Cycles run on the loop's goroutine only.
func (sc *Scrubber) Start() {
	sc.wg.Add(1)
	go func() {
		defer sc.wg.Done()
		t := time.NewTicker(sc.o.Check)
		defer t.Stop()
		for {
			if due, _ := sc.due(); due {
				sc.Run(sc.ctx)
			}
			select {
			case <-sc.stop:
				return
			case <-t.C:
			case <-sc.kick:
				sc.mu.Lock()
				asked := sc.asked
				sc.mu.Unlock()
				if asked {
					sc.Run(sc.ctx)
				}
			}
		}
	}()
}

// Stop ends the loop, cutting a cycle short at its next read (its cursor is
// kept: the next start continues it).
func (sc *Scrubber) Stop() {
	close(sc.stop)
	sc.cancel()
	sc.wg.Wait()
}

// StartNow asks the loop for a cycle now; ErrScrubRunning when one runs.
func (sc *Scrubber) StartNow() error {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.running || sc.asked {
		return ErrScrubRunning
	}
	sc.asked, sc.running = true, true
	sc.current = &ScrubCycle{StartedAt: sc.s.clock()}
	select {
	case sc.kick <- struct{}{}:
	default:
	}
	return nil
}

// Report is the current and the last cycle.
func (sc *Scrubber) Report() ScrubReport {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	var r ScrubReport
	r.Running = sc.running
	if sc.current != nil {
		r.Current = sc.current.copy()
	}
	if sc.last != nil {
		r.Last = sc.last.copy()
	}
	return r
}

func (c *ScrubCycle) copy() *ScrubCycle {
	out := *c
	out.Corrupt = slices.Clone(c.Corrupt)
	out.Missing = slices.Clone(c.Missing)
	if out.Corrupt == nil {
		out.Corrupt = []ScrubFinding{}
	}
	if out.Missing == nil {
		out.Missing = []ScrubFinding{}
	}
	return &out
}

func (sc *Scrubber) stateKey() []byte { return []byte("scrub:" + sc.o.Node) }

func (sc *Scrubber) loadState() (scrubState, error) {
	var st scrubState
	err := sc.s.db.View(func(tx kv.Tx) error {
		getJSON(tx.Bucket(bktMeta), sc.stateKey(), &st)
		return nil
	})
	return st, err
}

func (sc *Scrubber) saveState(st scrubState) error {
	return sc.s.db.Update(func(tx kv.Tx) error {
		return putJSON(tx.Bucket(bktMeta), sc.stateKey(), st)
	})
}

// due reports whether a cycle should start: one is left to resume, or the
// interval has passed since the last (or since the scrub was first seen).
func (sc *Scrubber) due() (due, resume bool) {
	st, err := sc.loadState()
	if err != nil {
		return false, false
	}
	if st.Cursor != "" {
		return true, true
	}
	if sc.o.Interval <= 0 {
		return false, false
	}
	now := sc.s.clock()
	if st.Since.IsZero() && st.LastFinished.IsZero() {
		st.Since = now
		_ = sc.saveState(st)
		return false, false
	}
	from := st.LastFinished
	if from.IsZero() {
		from = st.Since
	}
	return now.Sub(from) >= sc.o.Interval, false
}

// Run runs one cycle to its end (or ctx's): it continues the cycle whose
// cursor the index keeps, or starts one. Tests call it directly.
func (sc *Scrubber) Run(ctx context.Context) *ScrubCycle {
	sc.mu.Lock()
	sc.running = true
	if sc.current == nil {
		sc.current = &ScrubCycle{StartedAt: sc.s.clock()}
	}
	cyc := sc.current
	sc.mu.Unlock()

	err := sc.cycle(ctx, cyc)
	sc.mu.Lock()
	if err != nil {
		cyc.Error = err.Error()
	}
	now := sc.s.clock()
	cyc.FinishedAt = &now
	sc.last, sc.current, sc.running, sc.asked = cyc, nil, false, false
	out := cyc.copy()
	sc.mu.Unlock()
	if err != nil {
		sc.log.Warn("scrub: cycle stopped", "err", err, "checked", out.Checked, "bytes", out.BytesHashed)
	} else {
		sc.Stats.LastCompleted.Store(now.Unix())
		sc.log.Info("scrub: cycle done", "checked", out.Checked, "bytes", out.BytesHashed,
			"corrupt", len(out.Corrupt), "missing", len(out.Missing), "entries_dropped", out.EntriesDropped,
			"bucket", out.Bucket, "resumed", out.Resumed, "dur", now.Sub(out.StartedAt))
	}
	return out
}

// cycle walks the referenced digests after the saved cursor.
func (sc *Scrubber) cycle(ctx context.Context, cyc *ScrubCycle) error {
	st, err := sc.loadState()
	if err != nil {
		return err
	}
	sc.mu.Lock()
	if st.Cursor != "" {
		cyc.Resumed = true
		if !st.StartedAt.IsZero() {
			cyc.StartedAt = st.StartedAt
		}
	}
	sc.mu.Unlock()
	if st.Cursor == "" {
		st.StartedAt = cyc.StartedAt
	}
	bucket := false
	if sc.b.Remote() {
		if sc.o.Shared == nil {
			bucket = true
		} else if unlock, ok := sc.o.Shared(); ok {
			defer unlock()
			bucket = true
		}
	}
	sc.mu.Lock()
	cyc.Bucket = bucket
	sc.mu.Unlock()
	cursor := st.Cursor
	for {
		shas, err := sc.referencedAfter(cursor, scrubBatch)
		if err != nil {
			return err
		}
		for _, sha := range shas {
			if err := ctx.Err(); err != nil {
				return sc.saveCursor(st, cursor, err)
			}
			if err := sc.check(ctx, cyc, sha, bucket); err != nil {
				if ctx.Err() != nil {
					return sc.saveCursor(st, cursor, ctx.Err())
				}
				sc.log.Warn("scrub: blob not checked", "sha256", sha, "err", err)
			}
			cursor = sha
		}
		if len(shas) < scrubBatch {
			break
		}
		if err := sc.saveCursor(st, cursor, nil); err != nil {
			return err
		}
	}
	st.Cursor, st.StartedAt, st.LastFinished = "", time.Time{}, sc.s.clock()
	return sc.saveState(st)
}

func (sc *Scrubber) saveCursor(st scrubState, cursor string, cause error) error {
	st.Cursor = cursor
	if cursor == "" {
		// Nothing checked yet: a marker that sorts before every digest.
		st.Cursor = " "
	}
	err := sc.saveState(st)
	if cause != nil {
		return cause
	}
	return err
}

// referencedAfter lists up to n referenced digests after cursor, in key
// order.
func (sc *Scrubber) referencedAfter(cursor string, n int) ([]string, error) {
	var out []string
	err := sc.s.db.View(func(tx kv.Tx) error {
		out = out[:0]
		c := tx.Bucket(bktBlobRefs).Cursor()
		var k []byte
		if cursor == "" || cursor == " " {
			k, _ = c.First()
		} else {
			k, _ = c.Seek([]byte(cursor))
			if k != nil && string(k) == cursor {
				k, _ = c.Next()
			}
		}
		for ; k != nil && len(out) < n; k, _ = c.Next() {
			out = append(out, string(k))
		}
		return nil
	})
	return out, err
}

// check scrubs one digest: its local file, then (bucket) its object.
func (sc *Scrubber) check(ctx context.Context, cyc *ScrubCycle, sha string, bucket bool) error {
	if !blob.ValidDigest(sha) {
		return nil
	}
	// A digest counts once, when its first read begins (or it is found
	// missing); over a bucket, one with neither a local file nor the
	// bucket's scrub on this node is not checked here.
	count := sync.OnceFunc(func() {
		sc.mu.Lock()
		cyc.Checked++
		sc.mu.Unlock()
		sc.Stats.Checked.Add(1)
	})
	f, err := sc.b.Open(sha)
	switch {
	case err == nil:
		count()
		fi, serr := f.Stat()
		good, herr := sc.hash(ctx, cyc, f, sha)
		f.Close()
		if herr != nil || serr != nil {
			return errors.Join(herr, serr)
		}
		if !good {
			if err := sc.badLocal(ctx, cyc, sha, fi); err != nil {
				return err
			}
		}
	case errors.Is(err, fs.ErrNotExist):
		if !sc.b.Remote() {
			count()
			return sc.missing(ctx, cyc, sha, "local", func() bool {
				_, err := os.Stat(sc.b.Path(sha))
				return errors.Is(err, fs.ErrNotExist)
			})
		}
	default:
		return err
	}
	if !bucket {
		return nil
	}
	count()
	r, _, err := sc.b.OpenShared(ctx, sha)
	if errors.Is(err, blob.ErrNotFound) {
		return sc.missing(ctx, cyc, sha, "bucket", func() bool {
			r, _, err := sc.b.OpenShared(ctx, sha)
			if err == nil {
				r.Close()
			}
			return errors.Is(err, blob.ErrNotFound)
		})
	}
	if err != nil {
		return err
	}
	good, err := sc.hash(ctx, cyc, r, sha)
	r.Close()
	if err != nil || good {
		return err
	}
	return sc.badObject(ctx, cyc, sha)
}

// hash reads r under the budget and reports whether its SHA-256 is sha.
func (sc *Scrubber) hash(ctx context.Context, cyc *ScrubCycle, r io.Reader, sha string) (bool, error) {
	h := sha256.New()
	buf := make([]byte, scrubChunk)
	for {
		if err := sc.lim.Wait(ctx, scrubChunk); err != nil {
			return false, err
		}
		n, err := io.ReadFull(r, buf)
		if n > 0 {
			h.Write(buf[:n])
			sc.Stats.BytesHashed.Add(int64(n))
			sc.mu.Lock()
			cyc.BytesHashed += int64(n)
			sc.mu.Unlock()
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			return false, err
		}
	}
	return hex.EncodeToString(h.Sum(nil)) == sha, nil
}

// lock takes the digest's lock for a repair.
func (sc *Scrubber) lock(ctx context.Context, sha string) (func(), context.Context, context.CancelFunc, error) {
	lctx, cancel := context.WithTimeout(ctx, lockTimeout)
	unlock, err := sc.b.Lock(lctx, sha)
	if err != nil {
		cancel()
		return nil, nil, nil, err
	}
	return unlock, lctx, cancel, nil
}

// badLocal repairs a local file whose bytes do not match: quarantined, and
// (disk-only blobs) its entries dropped. fi is the file hashed: a file
// replaced since (removed and filled again) is left alone.
func (sc *Scrubber) badLocal(ctx context.Context, cyc *ScrubCycle, sha string, fi os.FileInfo) error {
	unlock, _, cancel, err := sc.lock(ctx, sha)
	if err != nil {
		return err
	}
	defer cancel()
	defer unlock()
	now, err := os.Stat(sc.b.Path(sha))
	if err != nil || !os.SameFile(fi, now) {
		return nil
	}
	var entries []ScrubEntry
	if !sc.b.Remote() {
		// Entries first: once the file is gone, no hit may find an entry
		// pointing at it.
		if entries, err = sc.s.dropEntriesOf(sha); err != nil {
			return err
		}
	}
	q, qerr := sc.b.Quarantine(sha, sc.o.QuarantineMaxBytes)
	sc.found(cyc, false, ScrubFinding{SHA256: sha, Tier: "local", Quarantined: q, Entries: entries})
	return qerr
}

// badObject deletes an object whose bytes do not match and drops its
// entries.
func (sc *Scrubber) badObject(ctx context.Context, cyc *ScrubCycle, sha string) error {
	unlock, lctx, cancel, err := sc.lock(ctx, sha)
	if err != nil {
		return err
	}
	defer cancel()
	defer unlock()
	entries, err := sc.s.dropEntriesOf(sha)
	if err != nil {
		return err
	}
	derr := sc.b.DeleteShared(lctx, sha)
	sc.found(cyc, false, ScrubFinding{SHA256: sha, Tier: "bucket", Entries: entries})
	return derr
}

// missing drops the entries of a blob that is not there: gone() says so
// again under the digest's lock (a collector may have removed it with its
// last reference meanwhile; then nothing refers to it any more).
func (sc *Scrubber) missing(ctx context.Context, cyc *ScrubCycle, sha, tier string, gone func() bool) error {
	unlock, _, cancel, err := sc.lock(ctx, sha)
	if err != nil {
		return err
	}
	defer cancel()
	defer unlock()
	if !sc.s.BlobReferenced(sha) || !gone() {
		return nil
	}
	entries, err := sc.s.dropEntriesOf(sha)
	if err != nil {
		return err
	}
	sc.found(cyc, true, ScrubFinding{SHA256: sha, Tier: tier, Entries: entries})
	return nil
}

// found records a bad blob in the cycle, the counters and the log.
func (sc *Scrubber) found(cyc *ScrubCycle, missing bool, f ScrubFinding) {
	if f.Entries == nil {
		f.Entries = []ScrubEntry{}
	}
	sc.Stats.EntriesDropped.Add(int64(len(f.Entries)))
	sc.mu.Lock()
	cyc.EntriesDropped += int64(len(f.Entries))
	if missing {
		if len(cyc.Missing) < maxFindings {
			cyc.Missing = append(cyc.Missing, f)
		}
	} else if len(cyc.Corrupt) < maxFindings {
		cyc.Corrupt = append(cyc.Corrupt, f)
	}
	sc.mu.Unlock()
	if missing {
		sc.Stats.Missing.Add(1)
		sc.log.Warn("scrub: blob missing; its entries were dropped, the next download fills them again",
			"sha256", f.SHA256, "tier", f.Tier, "entries_dropped", len(f.Entries))
		return
	}
	sc.Stats.Corrupt.Add(1)
	sc.log.Warn("scrub: blob bytes do not match their digest", "sha256", f.SHA256, "tier", f.Tier,
		"entries_dropped", len(f.Entries), "quarantined", f.Quarantined)
}

// dropEntriesOf drops every live cache entry whose blob is sha, in one
// transaction, as DeleteCacheEntry drops one: marked for the collector,
// which then takes their references. It walks every entry (the index has
// no map from a blob to its entries): about a second per million entries,
// once per bad blob.
func (s *Store) dropEntriesOf(sha string) ([]ScrubEntry, error) {
	var out []ScrubEntry
	var ups []int64
	want := []byte(`"file_sha256":"` + sha + `"`)
	err := s.update(false, true, func(tx kv.Tx) error {
		out, ups = out[:0], ups[:0]
		type hit struct {
			key []byte
			e   CacheEntry
		}
		var hits []hit
		c := tx.Bucket(bktCacheEntries).Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if !bytes.Contains(v, want) {
				continue
			}
			var e CacheEntry
			if json.Unmarshal(v, &e) != nil || e.SHA256 != sha || purgedTx(tx, &e) {
				continue
			}
			hits = append(hits, hit{slices.Clone(k), e})
		}
		now := s.clock()
		for _, h := range hits {
			if err := markPendingTx(tx, h.key, h.e, now); err != nil {
				return err
			}
			out = append(out, ScrubEntry{UpstreamID: h.e.UpstreamID, RelativePath: h.e.RelativePath})
			if !slices.Contains(ups, h.e.UpstreamID) {
				ups = append(ups, h.e.UpstreamID)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	s.forget.bump(ups...)
	return out, nil
}
