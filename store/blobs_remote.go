package store

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
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"registryd/store/objects"
)

// Remote blobs (cluster mode): the bytes live in an object store shared by
// every node, under content-addressed keys sha256/ab/cd/<sha>; each node's
// DATA_DIR/blobs is a bounded cache of them (the local tier), so a hit is
// still a local file sent with sendfile.
//
//   - An object exists before any index row refers to it: Publish uploads
//     the finished file (unless an object of that key and size is there)
//     and only then commits the entry. S3 makes an upload visible whole or
//     not at all, so no reader ever sees part of an object.
//   - The digest's lock is a local one per digest plus, when
//     RemoteBlobs.Lock is set, the cluster's: Publish holds it from the
//     object check to the commit, and every delete of the object (reap,
//     collection, orphan sweep) holds it from the reference check to the
//     delete. Without it a node could delete the object right after
//     another node's Publish saw it present, leaving an entry pointing at
//     nothing.
//   - The local tier keeps at most LocalCacheBytes of blob files; the least
//     recently used are removed (the object stays). Use is recorded by
//     Touch, which allocates nothing (a map read and an atomic store).
//   - A local miss streams the object (OpenRemote), hashing it and writing
//     it to a temp file; only a complete object whose SHA-256 and size
//     match becomes the local file, and the last bytes are handed to the
//     reader only once the digest matched, so a wrong body never reaches a
//     client whole.
//   - Objects no entry refers to (a node died between its upload and its
//     commit, or a delete failed during an outage) are deleted by the
//     orphan sweep once older than OrphanGrace; Collect runs it every
//     quarter of the grace.

// RemoteBlobs configure OpenBlobsRemote.
type RemoteBlobs struct {
	// Objects is the shared object store.
	Objects objects.Store
	// LocalCacheBytes bounds the blob files kept in DATA_DIR/blobs; it must
	// be positive.
	LocalCacheBytes int64
	// Lock, when set, takes a cluster-wide lock on key (Store.Lease): the
	// digest's lock then holds across nodes. Nil: the digest's lock is
	// this process's only (one node on a bucket).
	Lock func(ctx context.Context, key string) (unlock func(), err error)
	// OrphanGrace is how old an unreferenced object must be before the
	// orphan sweep deletes it: longer than any upload-to-commit takes.
	// Default 1h.
	OrphanGrace time.Duration
}

// ErrObjectMismatch is an object whose bytes do not match the index's
// size or digest. It is never served whole and never kept locally.
var ErrObjectMismatch = errors.New("blobs: the stored object does not match its digest")

// ErrNotRemote is OpenRemote on a disk-only Blobs.
var ErrNotRemote = errors.New("blobs: the blobs are not in an object store")

const (
	defaultOrphanGrace = time.Hour
	// remoteOpTimeout bounds a lock, a stat or a delete on the object
	// store or the cluster.
	remoteOpTimeout = 30 * time.Second
	// tierLowWater is the share of LocalCacheBytes the tier is brought
	// down to when a file does not fit: a margin, so not every new file
	// starts an eviction (which sorts the tier).
	tierLowWater = 0.9
)

// transferTimeout bounds an upload of size bytes: a minute, plus a second
// per MiB (1 MiB/s is a slow link to a bucket; S3 does 10-100x that).
func transferTimeout(size int64) time.Duration {
	return time.Minute + time.Duration(size>>20)*time.Second
}

// ObjectKey is the object store key of the blob sha.
func ObjectKey(sha string) string {
	return "sha256/" + sha[0:2] + "/" + sha[2:4] + "/" + sha
}

// remoteTier is the object store and the bounded local tier.
type remoteTier struct {
	obj         objects.Store
	clusterLock func(ctx context.Context, key string) (func(), error)
	grace       time.Duration
	budget      int64

	keyed keyedLocks

	// mu guards used (bytes of local files plus reservations for files
	// about to be placed) and filling.
	mu      sync.Mutex
	used    int64
	filling map[string]bool // digests an OpenRemote writes to a temp file
	evictMu sync.Mutex      // one eviction at a time

	tick   atomic.Int64 // the use clock: Touch stamps files with it
	shards [256]tierShard

	orphanMu   sync.Mutex
	orphansRan time.Time // last orphan sweep by Collect (the store's clock)
}

type tierShard struct {
	mu    sync.RWMutex
	files map[string]*tierFile
}

type tierFile struct {
	size int64
	used atomic.Int64 // the tick of the last use
}

// OpenBlobsRemote opens the blobs of a node in cluster mode: DATA_DIR/blobs
// as a local tier of at most o.LocalCacheBytes over o.Objects.
func OpenBlobsRemote(dataDir string, o RemoteBlobs) (*Blobs, error) {
	if o.Objects == nil {
		return nil, errors.New("blobs: no object store")
	}
	if o.LocalCacheBytes <= 0 {
		return nil, errors.New("blobs: the local cache of remote blobs needs a positive size")
	}
	b, err := OpenBlobs(dataDir, BlobOptions{})
	if err != nil {
		return nil, err
	}
	t := &remoteTier{obj: o.Objects, clusterLock: o.Lock, grace: o.OrphanGrace, budget: o.LocalCacheBytes,
		filling: map[string]bool{}}
	if t.grace <= 0 {
		t.grace = defaultOrphanGrace
	}
	for i := range t.shards {
		t.shards[i].files = map[string]*tierFile{}
	}
	t.keyed.m = map[string]*keyedLock{}
	b.remote = t
	return b, nil
}

// Remote reports whether the blobs live in an object store.
func (b *Blobs) Remote() bool { return b.remote != nil }

// localCache reports the local tier's bytes (files and reservations) and
// its budget; zeros for disk-only blobs.
func (b *Blobs) localCache() (used, budget int64) {
	if b.remote == nil {
		return 0, 0
	}
	b.remote.mu.Lock()
	defer b.remote.mu.Unlock()
	return b.remote.used, b.remote.budget
}

// Touch records a use of the local file of sha, for the local tier's LRU.
// It does nothing for disk-only blobs, and allocates nothing.
func (b *Blobs) Touch(sha string) {
	t := b.remote
	if t == nil || len(sha) < 2 {
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

// --- locks ---

// keyedLocks is a mutex per digest (created on demand), taken under a ctx.
type keyedLocks struct {
	mu sync.Mutex
	m  map[string]*keyedLock
}

type keyedLock struct {
	ch   chan struct{} // holds one token while locked
	refs int
}

func (k *keyedLocks) acquire(sha string) *keyedLock {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.m == nil {
		k.m = map[string]*keyedLock{}
	}
	l := k.m[sha]
	if l == nil {
		l = &keyedLock{ch: make(chan struct{}, 1)}
		k.m[sha] = l
	}
	l.refs++
	return l
}

func (k *keyedLocks) drop(sha string, l *keyedLock) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if l.refs--; l.refs == 0 {
		delete(k.m, sha)
	}
}

func (k *keyedLocks) lock(ctx context.Context, sha string) (func(), error) {
	l := k.acquire(sha)
	select {
	case l.ch <- struct{}{}:
		return func() { <-l.ch; k.drop(sha, l) }, nil
	case <-ctx.Done():
		k.drop(sha, l)
		return nil, fmt.Errorf("blobs: waiting for the lock of %s: %w", sha, ctx.Err())
	}
}

func (k *keyedLocks) tryLock(sha string) (func(), bool) {
	l := k.acquire(sha)
	select {
	case l.ch <- struct{}{}:
		return func() { <-l.ch; k.drop(sha, l) }, true
	default:
		k.drop(sha, l)
		return nil, false
	}
}

// lockDigest takes the digest's lock: this process's, then the cluster's.
func (t *remoteTier) lockDigest(ctx context.Context, sha string) (func(), error) {
	unlock, err := t.keyed.lock(ctx, sha)
	if err != nil || t.clusterLock == nil {
		return unlock, err
	}
	unlockCluster, err := t.clusterLock(ctx, "registryd:blob:"+sha)
	if err != nil {
		unlock()
		return nil, fmt.Errorf("blobs: the cluster lock of %s: %w", sha, err)
	}
	return func() { unlockCluster(); unlock() }, nil
}

// --- the local tier ---

// reserve makes room for a local file of size, evicting the least recently
// used files, and counts it; false when it cannot fit.
func (b *Blobs) reserve(size int64) bool {
	t := b.remote
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
		if b.evictLocal(need) == 0 {
			break
		}
	}
	return false
}

func (t *remoteTier) release(size int64) {
	t.mu.Lock()
	t.used -= size
	t.mu.Unlock()
}

// placeLocal moves the finished temp file tmp into the local tier under a
// reservation of size (released when the file was there already or cannot
// be placed). The caller holds the digest's local lock.
func (b *Blobs) placeLocal(tmp, sha string, size int64) {
	t := b.remote
	created, err := b.place(tmp, sha, size)
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
func (t *remoteTier) forgetLocal(sha string) {
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
func (b *Blobs) evictLocal(need int64) int64 {
	t := b.remote
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
		unlock, ok := t.keyed.tryLock(c.sha)
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
			if err := os.Remove(b.Path(c.sha)); err == nil || errors.Is(err, fs.ErrNotExist) {
				if err == nil {
					b.count.Add(-1)
					b.bytes.Add(-f.size)
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

// --- publish and delete ---

// publishRemote is Publish for remote blobs: upload (unless present), then
// the local copy, then the index commit, under the digest's lock.
func (b *Blobs) publishRemote(s *Store, w *BlobWriter, d Digests, e CacheEntry) (CacheEntry, error) {
	t := b.remote
	tmp := w.name
	w.name = ""
	e.Size, e.MD5, e.SHA1, e.SHA256, e.SHA512 = d.Size, d.MD5, d.SHA1, d.SHA256, d.SHA512
	keep := b.reserve(d.Size)
	placed := false
	defer func() {
		if !placed {
			os.Remove(tmp)
			if keep {
				t.release(d.Size)
			}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), transferTimeout(d.Size))
	defer cancel()
	unlock, err := t.lockDigest(ctx, d.SHA256)
	if err != nil {
		return e, err
	}
	key := ObjectKey(d.SHA256)
	info, err := t.obj.Stat(ctx, key)
	switch {
	case err == nil && info.Size == d.Size:
		// Content addressing: these bytes are in the bucket already.
	case err == nil || errors.Is(err, objects.ErrNotFound):
		if err := putFile(ctx, t.obj, key, tmp, d.Size); err != nil {
			unlock()
			return e, err
		}
	default:
		unlock()
		return e, fmt.Errorf("blobs: %w", err)
	}
	if keep {
		placed = true
		b.placeLocal(tmp, d.SHA256, d.Size)
	}
	out, replaced, err := s.putEntryReplacing(e)
	if err != nil {
		b.reapRemoteLocked(ctx, s, d.SHA256)
	}
	unlock()
	if err != nil {
		return out, err
	}
	if replaced != "" && ValidDigest(replaced) {
		b.reap(s, replaced)
	}
	return out, nil
}

func putFile(ctx context.Context, obj objects.Store, key, path string, size int64) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("blobs: %w", err)
	}
	defer f.Close()
	if err := obj.Put(ctx, key, f, size); err != nil {
		return fmt.Errorf("blobs: uploading: %w", err)
	}
	return nil
}

// reapRemote deletes the object and local file of sha if no entry refers
// to it, under the digest's lock.
func (b *Blobs) reapRemote(s *Store, sha string) (bool, int64) {
	ctx, cancel := context.WithTimeout(context.Background(), remoteOpTimeout)
	defer cancel()
	unlock, err := b.remote.lockDigest(ctx, sha)
	if err != nil {
		return false, 0
	}
	defer unlock()
	return b.reapRemoteLocked(ctx, s, sha)
}

// reapRemoteLocked is reapRemote under the digest's lock. An index that
// cannot be read deletes nothing. A delete that fails (the bucket is away)
// leaves an orphan for the orphan sweep.
func (b *Blobs) reapRemoteLocked(ctx context.Context, s *Store, sha string) (bool, int64) {
	refs, err := s.referencedBlobs(map[string]int64{sha: 0})
	if err != nil || refs[sha] {
		return false, 0
	}
	var size int64
	if fi, err := os.Stat(b.Path(sha)); err == nil {
		size = fi.Size()
		if b.removeLocked(sha, size) {
			b.remote.forgetLocal(sha)
		}
	}
	if size == 0 {
		if info, err := b.remote.obj.Stat(ctx, ObjectKey(sha)); err == nil {
			size = info.Size
		} else if errors.Is(err, objects.ErrNotFound) {
			return false, 0
		}
	}
	if err := b.remote.obj.Delete(ctx, ObjectKey(sha)); err != nil {
		return false, 0
	}
	return true, size
}

// --- local misses ---

// OpenRemote streams the blob sha of size from the object store (a local
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
func (b *Blobs) OpenRemote(ctx context.Context, sha string, size int64) (io.ReadCloser, error) {
	t := b.remote
	if t == nil {
		return nil, ErrNotRemote
	}
	if !ValidDigest(sha) {
		return nil, fmt.Errorf("blobs: invalid digest %q", sha)
	}
	src, err := t.obj.Get(ctx, ObjectKey(sha))
	if err != nil {
		return nil, fmt.Errorf("blobs: %w", err)
	}
	if sz, ok := src.(interface{ Size() int64 }); ok && sz.Size() != size {
		src.Close()
		return nil, fmt.Errorf("%w: %s has %d bytes, the index says %d: %w", ErrObjectMismatch, sha, sz.Size(), size, objects.ErrNotFound)
	}
	r := &remoteReader{b: b, sha: sha, size: size, src: src, h: sha256.New()}
	t.mu.Lock()
	first := !t.filling[sha]
	if first {
		t.filling[sha] = true
	}
	t.mu.Unlock()
	if first {
		r.filler = true
		if b.reserve(size) {
			if f, err := os.CreateTemp(b.tmp, "remote-*"); err == nil {
				r.tmp, r.keep = f, true
			} else {
				t.release(size)
			}
		}
	}
	return r, nil
}

type remoteReader struct {
	b      *Blobs
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
			r.b.remote.obj.Delete(ctx, ObjectKey(r.sha))
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
	unlock, err := r.b.remote.keyed.lock(ctx, r.sha)
	if err != nil {
		r.abandon(name)
		return
	}
	r.keep = false // placeLocal owns the reservation now
	r.b.placeLocal(name, r.sha, r.size)
	unlock()
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
		r.b.remote.release(r.size)
	}
}

// Close ends the stream; an unfinished local copy is dropped.
func (r *remoteReader) Close() error {
	r.dropTemp()
	if r.filler {
		r.filler = false
		t := r.b.remote
		t.mu.Lock()
		delete(t.filling, r.sha)
		t.mu.Unlock()
	}
	return r.src.Close()
}

// --- sweeps ---

// sweepRemote is Sweep for remote blobs: the local files are the tier; those
// no entry refers to are removed, the rest ordered by modification time for
// the LRU, and the tier brought within its budget.
func (b *Blobs) sweepRemote(s *Store) (SweepResult, error) {
	var out SweepResult
	type local struct {
		size int64
		mod  time.Time
	}
	files := map[string]local{}
	sizes := map[string]int64{}
	err := filepath.WalkDir(b.root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || !d.Type().IsRegular() || !ValidDigest(d.Name()) || path != b.Path(d.Name()) {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		files[d.Name()] = local{fi.Size(), fi.ModTime()}
		sizes[d.Name()] = fi.Size()
		return nil
	})
	if err != nil {
		return out, fmt.Errorf("blobs: sweep: %w", err)
	}
	referenced, err := s.referencedBlobs(sizes)
	if err != nil {
		return out, fmt.Errorf("blobs: sweep: %w", err)
	}
	var keep []string
	for sha, f := range files {
		if referenced[sha] {
			keep = append(keep, sha)
			continue
		}
		if err := os.Remove(b.Path(sha)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return out, fmt.Errorf("blobs: sweep: %w", err)
		}
		out.Removed++
		out.RemovedBytes += f.size
	}
	slices.SortFunc(keep, func(a, c string) int { return files[a].mod.Compare(files[c].mod) })
	t := b.remote
	for _, sha := range keep {
		f := &tierFile{size: files[sha].size}
		f.used.Store(t.tick.Add(1))
		sh := &t.shards[shardOf(sha)]
		sh.mu.Lock()
		if old := sh.files[sha]; old != nil {
			t.release(old.size)
		}
		sh.files[sha] = f
		sh.mu.Unlock()
		t.mu.Lock()
		t.used += f.size
		t.mu.Unlock()
		out.Blobs++
		out.Bytes += f.size
	}
	b.count.Store(out.Blobs)
	b.bytes.Store(out.Bytes)
	t.mu.Lock()
	over := t.used - t.budget
	t.mu.Unlock()
	if over > 0 {
		b.evictLocal(over + t.budget - int64(tierLowWater*float64(t.budget)))
		out.Blobs, out.Bytes = b.count.Load(), b.bytes.Load()
	}
	return out, nil
}

// orphanResult is what one orphan sweep found in the object store.
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

// sweepOrphans deletes the objects no entry refers to that are older than
// OrphanGrace (by the store's clock against the object's upload time), and
// aborts incomplete multipart uploads as old when the object store can.
// Each delete rechecks the reference under the digest's lock.
func (b *Blobs) sweepOrphans(ctx context.Context, s *Store) (orphanResult, error) {
	var out orphanResult
	t := b.remote
	if t == nil {
		return out, ErrNotRemote
	}
	cutoff := s.clock().Add(-t.grace)
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
			if removed, _ := b.reapRemote(s, sha); removed {
				out.Removed++
				out.RemovedBytes += size
			}
		}
		clear(batch)
		return nil
	}
	err := t.obj.List(ctx, "sha256/", func(i objects.Info) error {
		out.Objects++
		out.Bytes += i.Size
		sha := i.Key[strings.LastIndexByte(i.Key, '/')+1:]
		if !ValidDigest(sha) || i.Key != ObjectKey(sha) || !i.Modified.Before(cutoff) {
			return nil
		}
		batch[sha] = i.Size
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
	if a, ok := t.obj.(interface {
		AbortUploads(ctx context.Context, prefix string, before time.Time) (int, error)
	}); ok {
		n, err := a.AbortUploads(ctx, "sha256/", cutoff)
		out.Uploads = n
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// orphanSweepDue reports whether Collect should run the orphan sweep now
// (every quarter of the grace), and marks it run.
func (b *Blobs) orphanSweepDue(s *Store) bool {
	t := b.remote
	now := s.clock()
	t.orphanMu.Lock()
	defer t.orphanMu.Unlock()
	if !t.orphansRan.IsZero() && now.Sub(t.orphansRan) < t.grace/4 {
		return false
	}
	t.orphansRan = now
	return true
}

// collectOrphans is Collect's part for remote blobs.
func (b *Blobs) collectOrphans(s *Store, out *CollectResult) error {
	if out.More || !b.orphanSweepDue(s) {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	r, err := b.sweepOrphans(ctx, s)
	out.BlobsRemoved += r.Removed
	out.BytesFreed += r.RemovedBytes
	return err
}

// Present reports whether the blob sha of size can be read here: its local
// file, or (remote blobs) its object in the bucket. An error is the
// bucket's (an outage).
func (b *Blobs) Present(ctx context.Context, sha string, size int64) (bool, error) {
	if fi, err := os.Stat(b.Path(sha)); err == nil && fi.Size() == size {
		return true, nil
	}
	if b.remote == nil {
		return false, nil
	}
	info, err := b.remote.obj.Stat(ctx, ObjectKey(sha))
	if errors.Is(err, objects.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return info.Size == size, nil
}
