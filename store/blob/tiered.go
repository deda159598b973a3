package blob

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Tiered is the composition of cluster mode: the blobs live in a Bucket
// shared by every node, and the node's Disk is a bounded cache of them (the
// local tier), so a hit is still a local file sent with sendfile.
//
//   - An object exists before any index row refers to it: Put uploads the
//     finished file (unless an object of that key and size is there) and
//     then keeps it locally; the index commit comes after (store's
//     binding of entries to blobs).
//   - The local tier keeps at most its budget of blob files; the least
//     recently used are removed (the object stays). Use is recorded by
//     Touch, which allocates nothing (a map read and an atomic store).
//   - A local miss streams the object (fetch), hashing it and writing it
//     to a temp file; only a complete object whose SHA-256 and size match
//     becomes the local file, and the last bytes are handed to the reader
//     only once the digest matched, so a wrong body never reaches a client
//     whole.
type Tiered struct {
	disk   *Disk
	remote *Bucket
	budget int64

	// mu guards used (bytes of local files plus reservations for files
	// about to be placed) and filling.
	mu      sync.Mutex
	used    int64
	filling map[string]bool // digests a fetch writes to a temp file
	evictMu sync.Mutex      // one eviction at a time

	tick   atomic.Int64 // the use clock: Touch stamps files with it
	shards [256]tierShard
}

var _ Tier = (*Tiered)(nil)

type tierShard struct {
	mu    sync.RWMutex
	files map[string]*tierFile
}

type tierFile struct {
	size int64
	used atomic.Int64 // the tick of the last use
}

const (
	// remoteOpTimeout bounds a lock, a stat or a delete on the object
	// store or the cluster.
	remoteOpTimeout = 30 * time.Second
	// tierLowWater is the share of the budget the tier is brought down to
	// when a file does not fit: a margin, so not every new file starts an
	// eviction (which sorts the tier).
	tierLowWater = 0.9
)

func newTiered(disk *Disk, remote *Bucket, budget int64) *Tiered {
	t := &Tiered{disk: disk, remote: remote, budget: budget, filling: map[string]bool{}}
	for i := range t.shards {
		t.shards[i].files = map[string]*tierFile{}
	}
	return t
}

// Touch records a use of the local file of sha, for the LRU. It allocates
// nothing.
func (t *Tiered) Touch(sha string) {
	if len(sha) < 2 {
		return
	}
	sh := &t.shards[shardOf(sha)]
	sh.mu.RLock()
	f := sh.files[sha]
	sh.mu.RUnlock()
	if f != nil {
		f.used.Store(t.tick.Add(1))
	}
}

// localCache reports the local tier's bytes (files and reservations) and
// its budget.
func (t *Tiered) localCache() (used, budget int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.used, t.budget
}

func shardOf(sha string) int { return int(unhex(sha[0]))<<4 | int(unhex(sha[1])) }

func unhex(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	}
	return 0
}

// Put uploads the finished file tmp (unless the object is there) and keeps
// it as the local file when it fits the budget. The caller holds the
// digest's lock. A local copy that cannot be placed is no error: the object
// is the blob.
func (t *Tiered) Put(ctx context.Context, tmp, sha string, size int64) (created bool, err error) {
	keep := t.reserve(size)
	created, err = t.remote.Put(ctx, tmp, sha, size)
	if err != nil {
		if keep {
			t.release(size)
		}
		return false, err
	}
	if keep {
		t.placeLocal(tmp, sha, size)
	}
	return created, nil
}

// Get opens the local file of sha, or streams the object (fetch).
func (t *Tiered) Get(ctx context.Context, sha string, size int64) (io.ReadCloser, error) {
	if f, err := t.disk.Get(ctx, sha, size); err == nil {
		t.Touch(sha)
		return f, nil
	}
	return t.fetch(ctx, sha, size)
}

// Stat reports the size of the local file of sha, or of its object.
func (t *Tiered) Stat(ctx context.Context, sha string) (int64, error) {
	if n, err := t.disk.Stat(ctx, sha); err == nil {
		return n, nil
	}
	return t.remote.Stat(ctx, sha)
}

// Delete removes the local file and the object of sha. The caller holds
// the digest's lock. A delete of the object that fails (the bucket is away)
// leaves an orphan for the orphan sweep.
func (t *Tiered) Delete(ctx context.Context, sha string) (int64, error) {
	var size int64
	if fi, err := os.Stat(t.disk.Path(sha)); err == nil {
		size = fi.Size()
		if t.disk.remove(sha, size) == nil {
			t.forgetLocal(sha)
		}
	}
	if size == 0 {
		n, err := t.remote.Stat(ctx, sha)
		if errors.Is(err, ErrNotFound) {
			return 0, err
		}
		if err == nil {
			size = n
		}
	}
	if err := t.remote.remove(ctx, sha); err != nil {
		return 0, err
	}
	return size, nil
}

// List lists the objects: the bucket holds every blob.
func (t *Tiered) List(ctx context.Context, fn func(Info) error) error {
	return t.remote.List(ctx, fn)
}

// --- the local tier ---

// reserve makes room for a local file of size, evicting the least recently
// used files, and counts it; false when it cannot fit.
func (t *Tiered) reserve(size int64) bool {
	if size > t.budget {
		return false
	}
	for range 3 {
		t.mu.Lock()
		if t.used+size <= t.budget {
			t.used += size
			t.mu.Unlock()
			return true
		}
		need := t.used + size - int64(tierLowWater*float64(t.budget))
		t.mu.Unlock()
		if t.evictLocal(need) == 0 {
			break
		}
	}
	return false
}

func (t *Tiered) release(size int64) {
	t.mu.Lock()
	t.used -= size
	t.mu.Unlock()
}

// placeLocal moves the finished temp file tmp into the local tier under a
// reservation of size (released when the file was there already or cannot
// be placed). The caller holds the digest's local lock.
func (t *Tiered) placeLocal(tmp, sha string, size int64) {
	created, err := t.disk.Put(context.Background(), tmp, sha, size)
	sh := &t.shards[shardOf(sha)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	f := sh.files[sha]
	switch {
	case err != nil:
		// The object is the blob; the local copy is only a cache.
		t.release(size)
		return
	case f == nil:
		f = &tierFile{size: size}
		sh.files[sha] = f
	case created:
		// Replaced a damaged file: the old one's bytes are no longer used.
		t.release(f.size)
		f.size = size
	default:
		t.release(size)
	}
	f.used.Store(t.tick.Add(1))
}

// forgetLocal removes sha from the tier after its file was removed.
func (t *Tiered) forgetLocal(sha string) {
	sh := &t.shards[shardOf(sha)]
	sh.mu.Lock()
	f := sh.files[sha]
	delete(sh.files, sha)
	sh.mu.Unlock()
	if f != nil {
		t.release(f.size)
	}
}

// evictLocal removes local files, least recently used first, until need
// bytes are freed or none is left; digests whose lock is busy are skipped.
// The caller holds no digest lock.
func (t *Tiered) evictLocal(need int64) int64 {
	t.evictMu.Lock()
	defer t.evictMu.Unlock()
	type cand struct {
		sha  string
		used int64
	}
	var cands []cand
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.RLock()
		for sha, f := range sh.files {
			cands = append(cands, cand{sha, f.used.Load()})
		}
		sh.mu.RUnlock()
	}
	slices.SortFunc(cands, func(a, b cand) int { return int(a.used - b.used) })
	var freed int64
	for _, c := range cands {
		if freed >= need {
			break
		}
		unlock, ok := t.disk.locks.tryLock(c.sha)
		if !ok {
			continue
		}
		sh := &t.shards[shardOf(c.sha)]
		sh.mu.Lock()
		f := sh.files[c.sha]
		if f != nil {
			delete(sh.files, c.sha)
		}
		sh.mu.Unlock()
		if f != nil {
			// An open descriptor (a hit streaming it) keeps reading the
			// unlinked file; a hit that opens it later goes to the bucket.
			if err := os.Remove(t.disk.Path(c.sha)); err == nil || errors.Is(err, fs.ErrNotExist) {
				if err == nil {
					t.disk.count.Add(-1)
					t.disk.bytes.Add(-f.size)
				}
				t.release(f.size)
				freed += f.size
			} else {
				sh.mu.Lock()
				sh.files[c.sha] = f
				sh.mu.Unlock()
			}
		}
		unlock()
	}
	return freed
}

// --- local misses ---

// fetch streams the blob sha of size from the object store (a local
// miss of an entry the index has): the object is hashed as it is read and
// written to a temp file, which becomes the local file only when complete
// with the right size and digest. The bytes that complete the object are
// returned only after the digest matched; otherwise Read fails with
// ErrObjectMismatch and the object is deleted (the next miss fetches the
// file from its upstream again). A missing object, or one of another size,
// wraps objects.ErrNotFound; an outage matches objects.ErrUnavailable.
//
// Concurrent misses of one digest stream independently (a GET each: the
// bucket serves parallel reads well, and no client waits on another's
// pace), but only the first writes a temp file, so a herd costs one local
// copy.
func (t *Tiered) fetch(ctx context.Context, sha string, size int64) (io.ReadCloser, error) {
	if !ValidDigest(sha) {
		return nil, fmt.Errorf("blobs: invalid digest %q", sha)
	}
	src, err := t.remote.Get(ctx, sha, size)
	if err != nil {
		return nil, err
	}
	r := &remoteReader{t: t, sha: sha, size: size, src: src, h: sha256.New()}
	t.mu.Lock()
	first := !t.filling[sha]
	if first {
		t.filling[sha] = true
	}
	t.mu.Unlock()
	if first {
		r.filler = true
		if t.reserve(size) {
			if f, err := os.CreateTemp(t.disk.tmp, "remote-*"); err == nil {
				r.tmp, r.keep = f, true
			} else {
				t.release(size)
			}
		}
	}
	return r, nil
}

type remoteReader struct {
	t      *Tiered
	sha    string
	size   int64
	src    io.ReadCloser
	h      hash.Hash
	n      int64
	filler bool     // holds the digest's filling mark
	tmp    *os.File // the local copy being written; nil when none is kept
	keep   bool     // a reservation of size is held for tmp
	done   bool
	err    error
}

func (r *remoteReader) Read(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	if r.done {
		return 0, io.EOF
	}
	rem := r.size - r.n
	if int64(len(p)) > rem {
		p = p[:rem]
	}
	var k int
	var err error
	if len(p) > 0 {
		k, err = r.src.Read(p)
	}
	if k > 0 {
		r.h.Write(p[:k])
		if r.tmp != nil {
			if _, werr := r.tmp.Write(p[:k]); werr != nil {
				r.dropTemp() // the local copy only; the client's bytes go on
			}
		}
		r.n += int64(k)
	}
	if r.n == r.size {
		// The last bytes leave only once the whole object is proven.
		if got := hex.EncodeToString(r.h.Sum(nil)); got != r.sha {
			r.err = fmt.Errorf("%w: object %s hashes to %s", ErrObjectMismatch, r.sha, got)
			r.dropTemp()
			ctx, cancel := context.WithTimeout(context.Background(), remoteOpTimeout)
			r.t.remote.remove(ctx, r.sha)
			cancel()
			return 0, r.err
		}
		r.done = true
		r.finishLocal()
		return k, nil
	}
	switch {
	case err == io.EOF:
		r.err = fmt.Errorf("%w: object %s ended after %d of %d bytes", ErrObjectMismatch, r.sha, r.n, r.size)
		r.dropTemp()
		return 0, r.err
	case err != nil:
		r.err = fmt.Errorf("blobs: reading %s: %w", r.sha, err)
		r.dropTemp()
		return k, r.err
	}
	return k, nil
}

// finishLocal makes the verified temp file the local file.
func (r *remoteReader) finishLocal() {
	if r.tmp == nil {
		return
	}
	f, name := r.tmp, r.tmp.Name()
	r.tmp = nil
	if f.Sync() != nil || f.Close() != nil {
		f.Close()
		r.abandon(name)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), remoteOpTimeout)
	defer cancel()
	unlock, err := r.t.disk.locks.lock(ctx, r.sha)
	if err != nil {
		r.abandon(name)
		return
	}
	r.keep = false // placeLocal owns the reservation now
	r.t.placeLocal(name, r.sha, r.size)
	unlock()
	os.Remove(name) // left when the file was there already
}

func (r *remoteReader) dropTemp() {
	if r.tmp == nil {
		return
	}
	r.tmp.Close()
	r.abandon(r.tmp.Name())
	r.tmp = nil
}

func (r *remoteReader) abandon(name string) {
	os.Remove(name)
	if r.keep {
		r.keep = false
		r.t.release(r.size)
	}
}

// Close ends the stream; an unfinished local copy is dropped.
func (r *remoteReader) Close() error {
	r.dropTemp()
	if r.filler {
		r.filler = false
		t := r.t
		t.mu.Lock()
		delete(t.filling, r.sha)
		t.mu.Unlock()
	}
	return r.src.Close()
}

// load makes the local files kept by a sweep the tier, in the order of
// their modification times for the LRU, and brings the tier within its
// budget.
func (t *Tiered) load(kept []Info) {
	slices.SortFunc(kept, func(a, c Info) int { return a.Modified.Compare(c.Modified) })
	for _, k := range kept {
		f := &tierFile{size: k.Size}
		f.used.Store(t.tick.Add(1))
		sh := &t.shards[shardOf(k.SHA256)]
		sh.mu.Lock()
		if old := sh.files[k.SHA256]; old != nil {
			t.release(old.size)
		}
		sh.files[k.SHA256] = f
		sh.mu.Unlock()
		t.mu.Lock()
		t.used += f.size
		t.mu.Unlock()
	}
	t.mu.Lock()
	over := t.used - t.budget
	t.mu.Unlock()
	if over > 0 {
		t.evictLocal(over + t.budget - int64(tierLowWater*float64(t.budget)))
	}
}
