package proxy

import (
	"errors"
	"sync"
	"time"

	"registryd/internal/every"
	"registryd/store"
	"registryd/store/blob"
)

// downloadCounter accumulates downloads_count and downloaded_at in memory so
// that a cache hit performs no bbolt write transaction and no fsync; the
// flusher writes them in one batched transaction every cache.flush_interval
// and once more at shutdown.
type downloadCounter struct {
	mu sync.Mutex
	m  map[downloadKey]downloadCount
}

type downloadKey struct {
	upstream int64
	rel      string // with the leading slash; owned memory, never request bytes
}

type downloadCount struct {
	n    int64
	last time.Time
}

func newDownloadCounter() *downloadCounter {
	return &downloadCounter{m: map[downloadKey]downloadCount{}}
}

// add counts one download. rel must not alias request memory: it becomes
// the map key, and not only when new (assigning to an existing entry of a
// map whose key holds a string stores the new key's string).
func (d *downloadCounter) add(upstream int64, rel string, at time.Time) {
	k := downloadKey{upstream, rel}
	d.mu.Lock()
	c := d.m[k]
	c.n++
	c.last = at
	d.m[k] = c
	d.mu.Unlock()
}

func (d *downloadCounter) pending() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.m)
}

// take empties the counter and returns its batch.
func (d *downloadCounter) take() []store.DownloadCount {
	d.mu.Lock()
	m := d.m
	if len(m) == 0 {
		d.mu.Unlock()
		return nil
	}
	d.m = make(map[downloadKey]downloadCount, len(m))
	d.mu.Unlock()
	batch := make([]store.DownloadCount, 0, len(m))
	for k, c := range m {
		batch = append(batch, store.DownloadCount{UpstreamID: k.upstream, Rel: k.rel, Count: c.n, Last: c.last})
	}
	return batch
}

// FlushDownloads writes the accumulated download counts now. A failed write
// puts the batch back, so the counts are not lost to a transient error.
func (s *engine) FlushDownloads() error {
	// One flush at a time: eviction flushes before it picks the least
	// recently used entries, and must not run while the periodic flush
	// holds the latest counts on their way to the index.
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	batch := s.downloads.take()
	if len(batch) == 0 {
		return nil
	}
	if err := s.st.AddDownloads(batch); err != nil {
		s.met.flushErrors.Inc()
		// The counts written before the failure stay written.
		if nw := (*store.DownloadsNotWritten)(nil); errors.As(err, &nw) {
			batch = nw.Rest
		}
		s.downloads.mu.Lock()
		for _, b := range batch {
			k := downloadKey{b.UpstreamID, b.Rel}
			c := s.downloads.m[k]
			c.n += b.Count
			if b.Last.After(c.last) {
				c.last = b.Last
			}
			s.downloads.m[k] = c
		}
		s.downloads.mu.Unlock()
		return err
	}
	return nil
}

// collectBatch is how many entries one collector transaction destroys at
// most: small enough that the transaction is a few milliseconds and the
// unlinks after it take one core for well under one scheduling period.
const collectBatch = 512

// collectRest is how long the collector pauses after each batch, as a
// multiple of the batch's own work (store.CollectResult.Busy: its
// transaction and its unlinks, not the wait for the index's writer): 1
// keeps it to about half of one core however long the work, so a purge of a
// large cache leaves the hits the CPU (unlinking blob files is kernel time
// that Go's scheduler does not see), and still drains at a rate
// proportional to the machine's. Counting the wait too made a collector
// behind a busy writer rest as long as it had waited, and a purge under
// load was never destroyed.
const collectRest = 1

// collect runs batches until no entry waits, stop is closed, batches (when
// not 0) have run, or an error. On a cluster one node at a time collects
// (cluster.go, jobLease): a node that finds the job's lease held skips the
// round; the commits that give the collector work wake every node's
// collector, so the holder's next round takes what came in while it ran.
// The result's Busy adds up the batches' own work.
func (s *engine) collect(stop <-chan struct{}, batches int) (store.CollectResult, error) {
	var total store.CollectResult
	unlock, run, err := s.jobLease(jobCollect)
	if err != nil {
		s.met.collectorErrors.Inc()
		return total, err
	}
	if !run {
		return total, nil
	}
	defer unlock()
	s.met.collectorRuns.Inc()
	for n := 1; ; n++ {
		s.collectMu.Lock()
		r, err := s.st.CollectBlobs(s.blobs, collectBatch)
		s.collectMu.Unlock()
		total.Entries += r.Entries
		total.BlobsRemoved += r.BlobsRemoved
		total.BytesFreed += r.BytesFreed
		total.Busy += r.Busy
		total.More = r.More
		s.met.collectorEntries.Add(float64(r.Entries))
		s.met.collectorBlobs.Add(float64(r.BlobsRemoved))
		s.met.collectorFreed.Add(float64(r.BytesFreed))
		if err != nil {
			s.met.collectorErrors.Inc()
			return total, err
		}
		if !r.More || n == batches {
			break
		}
		if !s.rest(stop, r.Busy) {
			return total, nil
		}
	}
	if total.Entries > 0 && batches == 0 {
		s.log.Info("collected cache entries", "entries", total.Entries, "blobs", total.BlobsRemoved,
			"bytes", total.BytesFreed)
	}
	return total, nil
}

// collector runs the collector every cache.collect_interval, and at once
// when a delete or purge commits (store.CollectWanted), until stop closes.
func (s *engine) collector(stop, done chan struct{}) {
	defer close(done)
	every.TickOrWake(stop, s.st.CollectWanted(), s.opts.Cache.CollectInterval, func() {
		if _, err := s.collect(stop, 0); err != nil {
			if blob.IsDiskFull(err) {
				s.backgroundFailed("collecting cache entries", err)
			} else {
				s.log.Error("collecting cache entries", "err", err)
			}
		}
	})
}

// flusher writes the download counts every cache.flush_interval until stop
// closes.
func (s *engine) flusher(stop, done chan struct{}) {
	defer close(done)
	every.Tick(stop, s.opts.Cache.FlushInterval, func() {
		if err := s.FlushDownloads(); err != nil {
			s.backgroundFailed("flushing download counts", err)
		}
	})
}

// Start runs the background work: the download-count flusher (every
// cache.flush_interval), the collector (every cache.collect_interval, and
// at once after a delete or purge; a purge left by a crash is resumed at the
// first period), the evictor (evict.go), the audit retention job
// (audit_retention.go) and the audit writer (audit.go).
func (s *engine) Start() {
	s.bgMu.Lock()
	defer s.bgMu.Unlock()
	if s.flusherStop != nil {
		return
	}
	s.flusherStop, s.flusherDone = make(chan struct{}), make(chan struct{})
	s.collectorStop, s.collectorDone = make(chan struct{}), make(chan struct{})
	go s.flusher(s.flusherStop, s.flusherDone)
	go s.collector(s.collectorStop, s.collectorDone)
	s.startEvictor()
	s.startAuditRetention()
	s.audit.start()
}

// StopCounting stops the flusher and the audit writer and writes what they
// had not written yet (download counts, queued audit events). Call it after
// Shutdown, so no request adds counts behind it.
func (s *engine) StopCounting() error {
	s.bgMu.Lock()
	stop, done := s.flusherStop, s.flusherDone
	s.flusherStop = nil
	s.bgMu.Unlock()
	if stop != nil {
		close(stop)
		<-done
	}
	s.audit.stopDrain()
	return s.FlushDownloads()
}

// StopCollector stops the evictor, the collector and the audit retention
// job and waits for runs in progress.
func (s *engine) StopCollector() {
	s.bgMu.Lock()
	s.stopEvictor()
	s.stopAuditRetention()
	s.bgMu.Unlock()
	s.bgMu.Lock()
	stop, done := s.collectorStop, s.collectorDone
	s.collectorStop = nil
	s.bgMu.Unlock()
	if stop != nil {
		close(stop)
		<-done
	}
}
