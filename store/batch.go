package store

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"registryd/store/kv"
)

// Group commit. A fill writes its cache entry after its clients are
// answered, and a revalidation records its check: each was one write
// transaction of its own, and on bbolt each transaction is an fsync. Above
// the rate of fsyncs the disk allows (500-800 a second on the 2-core bench
// machine) the writes queued without limit, and so did everything waiting
// for the writer behind them (admin writes, the collector, eviction).
//
// Such entry writes now go through a batcher: a writer goroutine takes the
// writes queued since its last commit and runs them in one transaction, one
// after the other, as if each were its own (they see each other's writes in
// queue order: the result is that of running them serially). While it
// commits, the next writes queue up. So a lone write commits at once (no
// delay is added at low load), and under load each commit carries what came
// in during the one before: batches grow with the load, and the fsyncs per
// second stay what the disk allows while the writes per second grow.
//
// A batch is bounded twice, so that it cannot hold the engine's single
// writer (bbolt's lock, which admin writes and the collector also take) for
// long: at most BatchMaxEntries writes, and the writes it runs stop once it
// has run for BatchMaxHold (the rest wait for the next batch, at the front
// of the queue). A write waits for at most the batch running when it was
// queued plus its own, beyond the writes queued before it.
//
// Failures stay each write's own, as with bbolt's DB.Batch: when a function
// fails, the shared transaction is rolled back; the failing function is run
// again alone, in its caller's goroutine (as a plain update: its error, or
// its panic, is its caller's), and the others go back to the front of the
// queue for the next batch. That is why a batched function, like every
// function given to an engine (package kv), must be safe to run more than
// once. A function that knows it wrote nothing when it fails (it refused
// before its first write: a missing record, an invalid value) says so with
// unwritten(err); the batch then goes on without it, and its caller gets
// the error. A failure of the engine itself (kv.ErrUnavailable, a failed
// commit) is every run write's: alone, each would have met it too.
//
// The generations and the collector's wake-up of every write in a batch are
// bumped once after its commit and before any of its callers returns
// (committed), as after a write of its own.

// Defaults of the batch bounds (Options.BatchMaxEntries, BatchMaxHold).
const (
	// defaultBatchMaxEntries: one entry write is tens of microseconds of
	// a bbolt transaction (a few index reads and puts, JSON), so a full
	// batch is a few milliseconds; on PostgreSQL, where each read is a
	// round trip, BatchMaxHold ends it first. It also bounds the memory of
	// a batch's transaction.
	defaultBatchMaxEntries = 256
	// defaultBatchMaxHold: an admin write or a collector batch waits for
	// at most about this much of batched writes, plus one fsync.
	defaultBatchMaxHold = 10 * time.Millisecond
)

// errRunAlone tells a caller that its function failed inside a batch and
// must run again alone.
var errRunAlone = errors.New("store: run the write alone")

// unwrittenError marks the error of a batched function that failed before
// its first write: the batch's transaction holds nothing of it.
type unwrittenError struct{ err error }

func (e *unwrittenError) Error() string { return e.err.Error() }
func (e *unwrittenError) Unwrap() error { return e.err }

// unwritten wraps err, returned by a function that wrote nothing in its
// transaction (see the comment above). Outside a batch it is err.
func unwritten(err error) error { return &unwrittenError{err} }

// plainError strips the unwritten marker.
func plainError(err error) error {
	if u, ok := err.(*unwrittenError); ok {
		return u.err
	}
	return err
}

// batcher runs queued writes in shared transactions.
type batcher struct {
	db      kv.DB
	maxN    int
	maxHold time.Duration

	mu      sync.Mutex
	queue   []*batchCall
	running bool // the writer goroutine runs (it exits once the queue is empty)

	// Counters for metrics (BatchStats).
	commits atomic.Uint64 // transactions committed by the writer
	writes  atomic.Uint64 // writes committed in them
	alone   atomic.Uint64 // writes that failed in a batch and ran again alone
	queued  atomic.Int64  // writes waiting for a batch, or in the one running

	// committed is the store's: generations and wake-ups after a commit.
	committed func(auth, cache, work bool)
	// Test hooks: onQueue runs after a write is queued (in its caller's
	// goroutine), onBatch in the writer goroutine before each batch's
	// transaction, with the number of writes taken.
	onQueue func()
	onBatch func(n int)
}

// batchCall is one queued write.
type batchCall struct {
	fn    func(kv.Tx) error
	cache bool // the write changes cache entries (update's cache)
	work  bool // set by each run: it gave the collector work
	err   error
	done  chan struct{}
}

func newBatcher(db kv.DB, maxN int, maxHold time.Duration, committed func(auth, cache, work bool)) *batcher {
	return &batcher{db: db, maxN: maxN, maxHold: maxHold, committed: committed}
}

// do runs fn in a shared transaction and returns its error once the
// transaction committed (or fn failed).
func (b *batcher) do(cache bool, fn func(kv.Tx) error) error {
	c := &batchCall{fn: fn, cache: cache, done: make(chan struct{})}
	b.queued.Add(1)
	b.mu.Lock()
	b.queue = append(b.queue, c)
	start := !b.running
	b.running = true
	b.mu.Unlock()
	if b.onQueue != nil {
		b.onQueue()
	}
	if start {
		go b.writer()
	}
	<-c.done
	return c.err
}

// writer runs batches until the queue is empty.
func (b *batcher) writer() {
	for {
		b.mu.Lock()
		n := min(len(b.queue), b.maxN)
		if n == 0 {
			b.running = false
			b.queue = nil // drop the backing array of a burst
			b.mu.Unlock()
			return
		}
		calls := make([]*batchCall, n)
		copy(calls, b.queue)
		b.queue = b.queue[n:]
		b.mu.Unlock()
		if b.onBatch != nil {
			b.onBatch(n)
		}
		b.requeue(b.run(calls))
	}
}

// requeue puts writes a batch did not get to back at the front of the queue.
func (b *batcher) requeue(rest []*batchCall) {
	if len(rest) == 0 {
		return
	}
	b.mu.Lock()
	b.queue = append(rest, b.queue...)
	b.mu.Unlock()
}

// panicked is a batched function's panic, recovered in the writer
// goroutine: its caller runs the function again alone, where the panic is
// its own.
// A pointer, so that comparing it (errors.Is) never compares the value.
type panicked struct{ v any }

func (p *panicked) Error() string { return fmt.Sprint("store: batched write panicked: ", p.v) }

// call runs one function in the shared transaction, recovering a panic.
func (c *batchCall) call(tx kv.Tx) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &panicked{v}
		}
	}()
	if !c.cache {
		return c.fn(tx)
	}
	pending, purges := tx.Bucket(bktCachePending), tx.Bucket(bktCachePurges)
	p, m := pending.Sequence(), purges.Sequence()
	if err := c.fn(tx); err != nil {
		return err
	}
	c.work = pending.Sequence() != p || purges.Sequence() != m
	return nil
}

// run runs one batch and returns the writes it did not get to.
func (b *batcher) run(calls []*batchCall) []*batchCall {
	var (
		ran     int          // calls run in the last attempt
		failed  *batchCall   // the call whose failure aborted it
		ferr    error        // failed's error
		refused []*batchCall // calls that failed without writing (unwritten)
		errs    = map[*batchCall]error{}
		deliver []*batchCall // the calls whose outcome the transaction decided
	)
	err := b.db.Update(func(tx kv.Tx) error {
		// An engine may run this again (pgkv, after a serialization
		// failure): every outcome is the last attempt's.
		ran, failed, ferr, refused = 0, nil, nil, refused[:0]
		clear(errs)
		start := time.Now()
		for _, c := range calls {
			if ran > 0 && time.Since(start) >= b.maxHold {
				break
			}
			ran++
			if err := c.call(tx); err != nil {
				if u, ok := err.(*unwrittenError); ok {
					refused = append(refused, c)
					errs[c] = u.err
					continue
				}
				failed, ferr = c, err
				return err
			}
		}
		return nil
	})
	rest := calls[ran:]
	switch {
	case err == nil:
		b.commits.Add(1)
		b.writes.Add(uint64(ran - len(refused)))
		var cache, work bool
		for _, c := range calls[:ran] {
			if _, ok := errs[c]; !ok {
				cache, work = cache || c.cache, work || c.work
			}
		}
		if cache || work {
			b.committed(false, cache, work)
		}
		deliver = calls[:ran]
	case failed != nil && !errors.Is(err, kv.ErrUnavailable) && errors.Is(err, ferr):
		// One function failed: it runs alone, the others in the next batch.
		b.alone.Add(1)
		b.settle(failed, errRunAlone)
		keep := make([]*batchCall, 0, len(calls)-1)
		for _, c := range calls {
			if c != failed {
				keep = append(keep, c)
			}
		}
		return keep
	default:
		// The engine failed (or the commit did): every write it ran
		// shares the failure.
		for _, c := range calls[:ran] {
			errs[c] = err
		}
		deliver = calls[:ran]
	}
	for _, c := range deliver {
		b.settle(c, errs[c])
	}
	return rest
}

func (b *batcher) settle(c *batchCall, err error) {
	c.err = err
	b.queued.Add(-1)
	close(c.done)
}

// BatchStats are the group commit's counters, read at scrape time.
type BatchStats struct {
	// Commits counts the shared transactions committed, Writes the entry
	// writes they carried: Writes/Commits is the mean batch.
	Commits, Writes uint64
	// Alone counts writes that failed inside a batch and ran again alone.
	Alone uint64
	// Queued is the writes waiting for their batch's commit now.
	Queued int64
}

// BatchStats reports the group commit's figures; zero when it is off.
func (s *Store) BatchStats() BatchStats {
	if s.batch == nil {
		return BatchStats{}
	}
	b := s.batch
	return BatchStats{Commits: b.commits.Load(), Writes: b.writes.Load(), Alone: b.alone.Load(), Queued: b.queued.Load()}
}

// updateBatched is update for an entry write that may share its
// transaction with concurrent ones (see the comment at the top). fn follows
// update's rules, and may return unwritten(err) when it fails before its
// first write.
func (s *Store) updateBatched(cache bool, fn func(tx kv.Tx) error) error {
	if s.batch == nil {
		return plainError(s.update(false, cache, fn))
	}
	err := s.batch.do(cache, fn)
	if err == errRunAlone {
		err = s.update(false, cache, fn)
	}
	return plainError(err)
}
