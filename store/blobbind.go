package store

import (
	"context"
	"fmt"
	"sync"
	"time"

	"registryd/store/blob"
	"registryd/store/kv"
)

// The binding of index entries to blobs: the one place where the index
// (this package) and the bytes (package store/blob, which knows no entries)
// meet.
//
// The index counts references per blob (blob_refs). The race between a fill
// that publishes a blob and the collector that removes a blob whose last
// reference went away is closed by the digest's lock (blob.Store.Lock: this
// process's, and over a shared bucket the cluster's): Publish holds it
// across placing the blob and the index commit, every removal (reap,
// collection, orphan sweep) across the reference check and the delete. A
// referenced blob is therefore never removed, on any node. The lock is the
// digest's own, not a stripe shared with others: a publish holds it while
// its entry waits for a shared commit (batch.go), and fills of other files
// must not queue behind that.
//
// Over a bucket, an object exists before any index row refers to it: the
// blob is placed (uploaded) before the commit. Objects no entry refers to (a
// node died between its upload and its commit, or a delete failed during an
// outage) are deleted by the orphan sweep once older than the blob store's
// OrphanGrace; CollectBlobs runs it every quarter of the grace.

const (
	// lockTimeout bounds the wait for a digest's lock (the cluster's, over
	// a bucket) and a reference check and delete under it.
	lockTimeout = 30 * time.Second
	// orphanSweepTimeout bounds one orphan sweep of the bucket.
	orphanSweepTimeout = 10 * time.Minute
)

// transferTimeout bounds a publish of size bytes, which may upload them: a
// minute, plus a second per MiB (1 MiB/s is a slow link to a bucket; S3
// does 10-100x that).
func transferTimeout(size int64) time.Duration {
	return time.Minute + time.Duration(size>>20)*time.Second
}

// Publish places the finished blob of w (digests d) in b and then writes e
// (whose digests and size are set from d here) to the index like
// PutCacheEntry, holding the digest's lock throughout so that no collector
// removes the blob between its placing and the commit. When the same bytes
// are already stored the temp file is dropped and the existing blob is
// used. If the index write fails and nothing refers to the blob, it is
// removed again. When e replaces an entry whose blob thereby lost its last
// reference (an upstream changed the file), that blob is removed too.
func (s *Store) Publish(b *blob.Store, w *blob.Writer, d blob.Digests, e CacheEntry) (CacheEntry, error) {
	e.Size, e.MD5, e.SHA1, e.SHA256, e.SHA512 = d.Size, d.MD5, d.SHA1, d.SHA256, d.SHA512
	ctx, cancel := context.WithTimeout(context.Background(), transferTimeout(d.Size))
	defer cancel()
	unlock, err := b.Lock(ctx, d.SHA256)
	if err != nil {
		w.Abort()
		return e, err
	}
	if _, err := b.Place(ctx, w, d); err != nil {
		unlock()
		return e, err
	}
	out, replaced, err := s.putEntryReplacing(e)
	if err != nil {
		s.reapLocked(ctx, b, d.SHA256)
	}
	unlock()
	if err != nil {
		return out, err
	}
	// One lock at a time, never two: two publishes swapping the same pair
	// of digests must not deadlock.
	if replaced != "" && blob.ValidDigest(replaced) {
		s.reap(b, replaced)
	}
	return out, nil
}

// reap removes the blob sha if no entry refers to it, under its lock, and
// reports whether it did and the bytes freed.
func (s *Store) reap(b *blob.Store, sha string) (bool, int64) {
	ctx, cancel := context.WithTimeout(context.Background(), lockTimeout)
	defer cancel()
	unlock, err := b.Lock(ctx, sha)
	if err != nil {
		return false, 0
	}
	defer unlock()
	return s.reapLocked(ctx, b, sha)
}

// reapLocked is reap under the digest's lock. An index that cannot be read
// removes nothing.
func (s *Store) reapLocked(ctx context.Context, b *blob.Store, sha string) (bool, int64) {
	refs, err := s.referencedBlobs(map[string]int64{sha: 0})
	if err != nil || refs[sha] {
		return false, 0
	}
	return b.Remove(ctx, sha)
}

// CollectResult is what one CollectBlobs batch destroyed.
type CollectResult struct {
	Entries      int   // pending entries destroyed
	BlobsRemoved int   // blobs removed
	BytesFreed   int64 // their size
	More         bool  // entries still wait for destruction
	// Busy is the batch's own work: its transaction from its start to its
	// commit (not the wait for the index's writer) and the unlinks.
	Busy time.Duration
}

// collectUnlinkers is how many blobs CollectBlobs removes at once. An unlink
// on ext4 is about half kernel time and half waiting (for the journal, for
// the disk under other writers): measured here, 50k unlinks took 4.4 s one
// at a time and 2.1 s eight at a time, for no more CPU. Four get most of
// that on a small machine.
const collectUnlinkers = 4

// CollectBlobs destroys up to max cache entries marked for destruction (one
// index transaction) and removes from b the blobs that lost their last
// reference. Between the commit and the last removal, at most max blobs are
// kept that no entry refers to (a crash there leaves them to the next
// start's SweepBlobs, or the orphan sweep). Over a bucket, every quarter of
// the orphan grace the orphan sweep runs too (sweepOrphans).
func (s *Store) CollectBlobs(b *blob.Store, max int) (CollectResult, error) {
	c, err := s.CollectPending(max)
	out := CollectResult{Entries: c.Entries, More: c.More, Busy: c.Busy}
	if err != nil {
		return out, err
	}
	unlinking := time.Now()
	var mu sync.Mutex
	var wg sync.WaitGroup
	next := make(chan string)
	for range min(collectUnlinkers, len(c.Unreferenced)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for sha := range next {
				// The reference is checked again under the digest's
				// lock: a fill may have published the same bytes since
				// the commit.
				if removed, n := s.reap(b, sha); removed {
					mu.Lock()
					out.BlobsRemoved++
					out.BytesFreed += n
					mu.Unlock()
				}
			}
		}()
	}
	for _, sha := range c.Unreferenced {
		if blob.ValidDigest(sha) {
			next <- sha
		}
	}
	close(next)
	wg.Wait()
	out.Busy += time.Since(unlinking)
	if out.More || b.OrphanGrace() == 0 || !b.OrphanSweepDue(s.clock()) {
		return out, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), orphanSweepTimeout)
	defer cancel()
	r, err := s.sweepOrphans(ctx, b)
	out.BlobsRemoved += r.Removed
	out.BytesFreed += r.RemovedBytes
	return out, err
}

// SweepBlobs runs b's sweep at start (blob.Store.Sweep) with the index's
// answer of which local blob files entries refer to: the others (a crash
// between an index commit and the removal that follows it) are removed.
func (s *Store) SweepBlobs(b *blob.Store) (blob.SweepResult, error) {
	return b.Sweep(s.referencedBlobs)
}

// referencedBlobs reports which of the digests the index refers to, in one
// read transaction.
func (s *Store) referencedBlobs(shas map[string]int64) (map[string]bool, error) {
	out := make(map[string]bool, len(shas))
	err := s.db.View(func(tx kv.Tx) error {
		b := tx.Bucket(bktBlobRefs)
		for sha := range shas {
			if b.Get([]byte(sha)) != nil {
				out[sha] = true
			}
		}
		return nil
	})
	return out, err
}

// orphanResult is what one orphan sweep found in the bucket.
type orphanResult struct {
	Objects      int64 // objects listed
	Bytes        int64
	Removed      int // unreferenced objects older than the grace, deleted
	RemovedBytes int64
	Uploads      int // stale incomplete multipart uploads aborted
}

// orphanBatch is how many unreferenced-looking objects are checked against
// the index in one read transaction.
const orphanBatch = 1000

// sweepOrphans deletes the blobs of b's shared tier that no entry refers to
// and that are older than its OrphanGrace (by the store's clock against the
// object's upload time), and aborts incomplete multipart uploads as old
// when the bucket can. Each delete rechecks the reference under the
// digest's lock.
func (s *Store) sweepOrphans(ctx context.Context, b *blob.Store) (orphanResult, error) {
	var out orphanResult
	if b.OrphanGrace() == 0 {
		return out, blob.ErrNotRemote
	}
	cutoff := s.clock().Add(-b.OrphanGrace())
	batch := map[string]int64{}
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		refs, err := s.referencedBlobs(batch)
		if err != nil {
			return fmt.Errorf("blobs: orphan sweep: %w", err)
		}
		for sha, size := range batch {
			if refs[sha] {
				continue
			}
			if removed, _ := s.reap(b, sha); removed {
				out.Removed++
				out.RemovedBytes += size
			}
		}
		clear(batch)
		return nil
	}
	err := b.ListShared(ctx, func(i blob.Info) error {
		out.Objects++
		out.Bytes += i.Size
		if i.SHA256 == "" || !i.Modified.Before(cutoff) {
			return nil
		}
		batch[i.SHA256] = i.Size
		if len(batch) >= orphanBatch {
			return flush()
		}
		return nil
	})
	if err == nil {
		err = flush()
	}
	if err != nil {
		return out, err
	}
	n, err := b.AbortUploads(ctx, cutoff)
	out.Uploads = n
	return out, err
}
