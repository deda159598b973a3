package store

import (
	"context"
	"crypto/md5"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"errors"
	"fmt"
	"hash"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"registryd/store/kv"
)

// Blobs is the content-addressed file store beside the index:
// DATA_DIR/blobs/sha256/ab/cd/abcd... holds the bytes whose SHA-256 is
// abcd..., once however many cache entries point at them. Files are written
// under DATA_DIR/tmp (same file system), fsynced, renamed into place and the
// directory fsynced before the index may refer to them, so a crash leaves
// either no blob or a whole one, never a torn file that looks cached.
//
// The index counts references per blob (blob_refs). The race between a fill
// that publishes a blob and the collector that removes a blob whose last
// reference went away is closed by a lock per digest: Publish holds it
// across rename and index commit, Collect across the reference check and
// the unlink. A referenced blob file is therefore never removed. The lock is
// the digest's own, not a stripe shared with others: a publish holds it
// while its entry waits for a shared commit (batch.go), and fills of other
// files must not queue behind that.
type Blobs struct {
	root string // DATA_DIR/blobs/sha256
	tmp  string // DATA_DIR/tmp

	digests keyedLocks // a lock per digest, see above

	// hashSlots bounds the hashing goroutines (of all writers) that run at
	// once to one fewer than GOMAXPROCS, at least one: hashing is CPU-bound
	// and never blocks, and with every P busy hashing, requests would wait
	// for a P, and the network poller would run only every 10ms (the
	// scheduler polls when a P runs out of work, or sysmon does).
	hashSlots chan struct{}

	// count and bytes describe the blob files on disk, for metrics. They are
	// set by Sweep and kept up to date by Publish and Collect.
	count atomic.Int64
	bytes atomic.Int64

	// disk is the state of the data volume that fills consult (disk.go).
	disk diskWatch
	// faults, set by tests only, make the volume look full (disk.go).
	faults *Faults

	// remote, when set, keeps the blobs in an object store and this
	// directory as a bounded local tier (blobs_remote.go).
	remote *remoteTier
}

// Digests are the checksums of one blob, lower-case hex.
type Digests struct {
	Size   int64
	MD5    string
	SHA1   string
	SHA256 string
	SHA512 string
}

// BlobOptions configure OpenBlobs.
type BlobOptions struct {
	// Faults, for tests only, make the data volume look full (Faults).
	// Default nil: the real volume.
	Faults *Faults
}

// OpenBlobs prepares DATA_DIR/blobs/sha256 and DATA_DIR/tmp, and empties tmp:
// anything there was left by a crash in the middle of a fill or an upload.
func OpenBlobs(dataDir string, o BlobOptions) (*Blobs, error) {
	b := &Blobs{root: filepath.Join(dataDir, "blobs", "sha256"), tmp: filepath.Join(dataDir, "tmp"),
		hashSlots: make(chan struct{}, max(1, runtime.GOMAXPROCS(0)-1)), faults: o.Faults}
	b.disk = diskWatch{dir: b.root, statfs: statfs, now: time.Now}
	if o.Faults != nil {
		o.Faults.disk = &b.disk
	}
	for _, d := range []string{b.root, b.tmp} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			return nil, fmt.Errorf("blobs: %w", err)
		}
	}
	ents, err := os.ReadDir(b.tmp)
	if err != nil {
		return nil, fmt.Errorf("blobs: %w", err)
	}
	for _, e := range ents {
		if err := os.RemoveAll(filepath.Join(b.tmp, e.Name())); err != nil {
			return nil, fmt.Errorf("blobs: clearing %s: %w", b.tmp, err)
		}
	}
	return b, nil
}

// TempDir is DATA_DIR/tmp.
func (b *Blobs) TempDir() string { return b.tmp }

// ValidDigest reports whether s is a lower-case hex SHA-256.
func ValidDigest(s string) bool {
	if len(s) != sha256.Size*2 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// Path is the file of the blob with SHA-256 sha (lower-case hex).
func (b *Blobs) Path(sha string) string {
	return filepath.Join(b.root, sha[0:2], sha[2:4], sha)
}

// Open opens a blob for reading.
func (b *Blobs) Open(sha string) (*os.File, error) {
	if !ValidDigest(sha) {
		return nil, fmt.Errorf("blobs: invalid digest %q", sha)
	}
	return os.Open(b.Path(sha))
}

// Stats reports how many blob files there are and their total size.
func (b *Blobs) Stats() (count, bytes int64) { return b.count.Load(), b.bytes.Load() }

// lock takes the digest's lock and returns its unlock.
func (b *Blobs) lock(sha string) func() {
	unlock, _ := b.digests.lock(context.Background(), sha) // fails only when the context ends
	return unlock
}

// BlobWriter writes a new blob to a temp file. Write only writes the file:
// the MD5, SHA-1, SHA-256 and SHA-512 digests are computed by two hashing
// goroutines that read the bytes back from the file (the page cache) behind
// the writer, so a fill's bytes reach its clients at the speed of the disk
// and the network rather than of four hashes in a row (together about 5ms
// of CPU per MB here). Reading the file back rather than handing the hashers
// copies of the chunks costs one copy either way, but it bounds a writer's
// memory to the hashers' read buffers however far they fall behind, and
// never makes the writer wait for them.
//
// The hashers keep pace with a writer that is slower than they are (an
// upstream across the Internet), so the digests are ready when the body
// ends. A writer that outruns them by more than hashLagMax (a fast local
// upstream, whose transfer is bound by CPU) has them wait for the end
// instead: hashing alongside would take the CPU the transfer, and its
// clients, are waiting for. Hashing runs in pieces, each in one of the
// Blobs' hashSlots, and yields the processor between pieces.
//
// Finish waits for the hashers; Abort stops them. A BlobWriter is not safe
// for concurrent use.
type BlobWriter struct {
	b      *Blobs
	f      *os.File
	name   string
	n      int64
	closed bool
	fault  writeFaultFunc // see Faults

	sums    [4]hash.Hash  // md5, sha1, sha256, sha512
	started bool          // the hashers run
	stop    atomic.Bool   // Abort: the hashers return before their next piece
	quit    chan struct{} // closed with stop set, for hashers waiting for a slot
	wg      sync.WaitGroup

	mu     sync.Mutex
	more   sync.Cond // signalled when bytes arrive, if a hasher is idle
	end    sync.Cond // signalled at the end or on Abort, for hashers that fell behind
	avail  int64     // bytes the hashers may read: Write publishes n here
	ended  bool      // no more bytes: the hashers finish at avail
	idle   int       // hashers waiting for bytes
	behind int       // hashers waiting for the end, having fallen behind
	herr   error     // the first read error of a hasher
}

// hashGroups says which of BlobWriter.sums (md5, sha1, sha256, sha512) each
// hashing goroutine computes: two, for machines with hashing slots to spare,
// each pairing a slow hash with a fast one. Measured here for 64 MB: SHA-512
// 120ms, MD5 90ms, SHA-256 and SHA-1 45ms each (on the CPU's SHA extensions).
var hashGroups = [...][]int{{0, 2}, {1, 3}}

const (
	// hashPiece is how much a hasher reads and hashes before it yields.
	hashPiece = 64 << 10
	// hashLagMax is how far a hasher may fall behind the writer before it
	// leaves the rest for after the end.
	hashLagMax = 4 << 20
)

var hashBufs = sync.Pool{New: func() any { b := make([]byte, hashPiece); return &b }}

// Create starts a new blob in DATA_DIR/tmp.
func (b *Blobs) Create() (*BlobWriter, error) {
	f, err := os.CreateTemp(b.tmp, "blob-*")
	if err != nil {
		return nil, fmt.Errorf("blobs: %w", err)
	}
	w := &BlobWriter{b: b, f: f, name: f.Name(), quit: make(chan struct{}), fault: b.writeFault(),
		sums: [4]hash.Hash{md5.New(), sha1.New(), sha256.New(), sha512.New()}}
	w.more.L, w.end.L = &w.mu, &w.mu
	return w, nil
}

// Name is the temp file's path. Readers may open it while it grows: an open
// descriptor stays valid after Publish renames the file.
func (w *BlobWriter) Name() string { return w.name }

// Size is how many bytes were written so far.
func (w *BlobWriter) Size() int64 { return w.n }

// Write appends p to the file. The hashers read it from there.
func (w *BlobWriter) Write(p []byte) (int, error) {
	if w.closed {
		return 0, errors.New("blobs: write after Finish or Abort")
	}
	var n int
	var err error
	if w.fault != nil {
		if allow, ferr := w.fault(w.n, len(p)); ferr != nil {
			n, err = w.f.Write(p[:allow])
			if err == nil {
				err = ferr
			}
		} else {
			n, err = w.f.Write(p)
		}
	} else {
		n, err = w.f.Write(p)
	}
	if n > 0 {
		w.n += int64(n)
		w.publish(false)
	}
	return n, err
}

// publish hands the bytes written so far to the hashers, starting them on
// the first call; end says that no more will come.
func (w *BlobWriter) publish(end bool) {
	w.mu.Lock()
	w.avail, w.ended = w.n, end
	wake := w.idle > 0
	w.mu.Unlock()
	if !w.started {
		w.started = true
		w.wg.Add(len(hashGroups))
		for _, g := range hashGroups {
			go w.hash(g)
		}
		return
	}
	if wake || end {
		w.more.Broadcast()
	}
	if end {
		w.end.Broadcast()
	}
}

// hash runs one hashing goroutine: it reads the file from the start into
// the digests of group, behind the writer, until the writer has ended and
// it has read everything, or the writer aborts.
func (w *BlobWriter) hash(group []int) {
	defer w.wg.Done()
	bp := hashBufs.Get().(*[]byte)
	defer hashBufs.Put(bp)
	buf := *bp
	var off int64
	for {
		w.mu.Lock()
		for !w.stop.Load() && !w.ended {
			if off == w.avail {
				w.idle++
				w.more.Wait()
				w.idle--
			} else if w.avail-off > hashLagMax {
				w.behind++
				w.end.Wait()
				w.behind--
			} else {
				break
			}
		}
		avail := w.avail
		w.mu.Unlock()
		if w.stop.Load() || off == avail {
			return
		}
		select {
		case w.b.hashSlots <- struct{}{}:
		case <-w.quit:
			return
		}
		n, err := w.f.ReadAt(buf[:min(int64(len(buf)), avail-off)], off)
		for _, i := range group {
			w.sums[i].Write(buf[:n])
		}
		<-w.b.hashSlots
		off += int64(n)
		if err != nil && off < avail {
			// The file holds fewer bytes than were written to it: the
			// digests would be wrong, so the blob must not be published.
			w.mu.Lock()
			if w.herr == nil {
				w.herr = fmt.Errorf("blobs: reading back the temp file: %w", err)
			}
			w.mu.Unlock()
			return
		}
		runtime.Gosched()
	}
}

// Finish waits for the hashers, makes the temp file durable (fsync) and
// closes it; the digests name the blob. The temp file stays until Publish or
// Abort. When the fsync or the close fails (a full volume can fail it: see
// IsDiskFull), the digests are still returned with the error: they are
// those of the bytes written, which readers of the file got.
func (w *BlobWriter) Finish() (Digests, error) {
	if w.closed {
		return Digests{}, errors.New("blobs: writer already finished")
	}
	w.publish(true)
	w.wg.Wait()
	w.closed = true
	if w.herr != nil {
		w.f.Close()
		return Digests{}, w.herr
	}
	d := SumHashes(w.sums, w.n)
	if err := w.f.Sync(); err != nil {
		w.f.Close()
		return d, fmt.Errorf("blobs: fsync: %w", err)
	}
	if err := w.f.Close(); err != nil {
		return d, fmt.Errorf("blobs: %w", err)
	}
	return d, nil
}

// Detach ends a writer whose file can take no more bytes (the volume is
// full, see IsDiskFull) while its body goes on elsewhere: it waits for the
// hashers to have read every byte written, removes the temp file and
// returns the running digests (md5, sha1, sha256, sha512) for the caller to
// feed the rest of the body to. Descriptors opened on the file stay
// readable. The writer is then aborted.
func (w *BlobWriter) Detach() ([4]hash.Hash, error) {
	if w.closed {
		return [4]hash.Hash{}, errors.New("blobs: writer already finished")
	}
	w.publish(true)
	w.wg.Wait()
	herr := w.herr
	w.Abort()
	if herr != nil {
		return [4]hash.Hash{}, herr
	}
	return w.sums, nil
}

// Abort stops the hashers, waits for them to return and drops the temp
// file. It is safe to call after Finish or Publish (it then only removes
// what is left) and more than once.
func (w *BlobWriter) Abort() {
	if !w.closed {
		w.closed = true
		w.stop.Store(true)
		close(w.quit)
		w.mu.Lock()
		w.more.Broadcast()
		w.end.Broadcast()
		w.mu.Unlock()
		w.wg.Wait()
		w.f.Close()
	}
	if w.name != "" {
		os.Remove(w.name)
		w.name = ""
	}
}

// Publish moves a finished blob into place and then writes e (whose digests
// and size are set from d here) to the index like PutCacheEntry, holding the
// digest's lock throughout so the collector cannot remove the file between
// the rename and the commit. When the same bytes are already stored the temp
// file is dropped and the existing blob is used. If the index write fails and
// nothing refers to the blob, its file is removed again. When e replaces an
// entry whose blob thereby lost its last reference (an upstream changed the
// file), that blob file is removed too.
func (b *Blobs) Publish(s *Store, w *BlobWriter, d Digests, e CacheEntry) (CacheEntry, error) {
	if !w.closed || w.name == "" {
		return e, errors.New("blobs: publish of an unfinished or aborted writer")
	}
	if b.remote != nil {
		return b.publishRemote(s, w, d, e)
	}
	e.Size, e.MD5, e.SHA1, e.SHA256, e.SHA512 = d.Size, d.MD5, d.SHA1, d.SHA256, d.SHA512
	unlock := b.lock(d.SHA256)
	created, err := b.place(w.name, d.SHA256, d.Size)
	w.name = ""
	if err != nil {
		unlock()
		return e, err
	}
	out, replaced, err := s.putEntryReplacing(e)
	if err != nil && created {
		b.reapLocked(s, d.SHA256)
	}
	unlock()
	if err != nil {
		return out, err
	}
	// One lock at a time, never two: two publishes swapping the same pair
	// of digests must not deadlock.
	if replaced != "" && ValidDigest(replaced) {
		b.reap(s, replaced)
	}
	return out, nil
}

// reap removes the blob file of sha if no entry refers to it, under its
// lock, and reports whether it did and the bytes freed.
func (b *Blobs) reap(s *Store, sha string) (bool, int64) {
	if b.remote != nil {
		return b.reapRemote(s, sha)
	}
	defer b.lock(sha)()
	return b.reapLocked(s, sha)
}

func (b *Blobs) reapLocked(s *Store, sha string) (bool, int64) {
	if s.BlobReferenced(sha) {
		return false, 0
	}
	fi, err := os.Stat(b.Path(sha))
	if err != nil || !b.removeLocked(sha, fi.Size()) {
		return false, 0
	}
	return true, fi.Size()
}

// place renames tmp to the blob's path, or drops tmp when the blob exists.
// created reports whether a new file appeared.
func (b *Blobs) place(tmp, sha string, size int64) (created bool, err error) {
	dst := b.Path(sha)
	old, statErr := os.Stat(dst)
	if statErr == nil && old.Size() == size {
		// Content addressing: these bytes are stored already.
		os.Remove(tmp)
		return false, nil
	}
	if err := b.mkdirs(sha); err != nil {
		os.Remove(tmp)
		return false, err
	}
	if err := os.Rename(tmp, dst); err != nil {
		os.Remove(tmp)
		return false, fmt.Errorf("blobs: %w", err)
	}
	if err := syncDir(dst); err != nil {
		// The rename may not be durable, and a crash would lose a file the
		// index points at: undo and fail.
		os.Remove(dst)
		return false, fmt.Errorf("blobs: fsync directory: %w", err)
	}
	if statErr == nil {
		// A file of the wrong size under this digest (damaged outside
		// registryd) was replaced by the right bytes.
		b.bytes.Add(size - old.Size())
	} else {
		b.count.Add(1)
		b.bytes.Add(size)
	}
	return true, nil
}

// mkdirs creates ab/ and ab/cd/ for sha, fsyncing each parent whose entry
// list changed, so the directories survive a crash as the blob does.
func (b *Blobs) mkdirs(sha string) error {
	for _, dir := range []string{filepath.Join(b.root, sha[0:2]), filepath.Join(b.root, sha[0:2], sha[2:4])} {
		err := os.Mkdir(dir, 0o750)
		switch {
		case err == nil:
			if err := syncDir(filepath.Dir(dir)); err != nil {
				return fmt.Errorf("blobs: fsync directory: %w", err)
			}
		case !errors.Is(err, fs.ErrExist):
			return fmt.Errorf("blobs: %w", err)
		}
	}
	return nil
}

// removeLocked unlinks a blob file; the caller holds the digest's lock.
func (b *Blobs) removeLocked(sha string, size int64) bool {
	if err := os.Remove(b.Path(sha)); err != nil {
		return false
	}
	b.count.Add(-1)
	b.bytes.Add(-size)
	return true
}

// CollectResult is what one Collect batch destroyed.
type CollectResult struct {
	Entries      int   // pending entries destroyed
	BlobsRemoved int   // blob files unlinked
	BytesFreed   int64 // size of those files
	More         bool  // entries still wait for destruction
	// Busy is the batch's own work: its transaction from its start to its
	// commit (not the wait for the index's writer) and the unlinks.
	Busy time.Duration
}

// collectUnlinkers is how many blob files Collect unlinks at once. An unlink
// on ext4 is about half kernel time and half waiting (for the journal, for
// the disk under other writers): measured here, 50k unlinks took 4.4 s one
// at a time and 2.1 s eight at a time, for no more CPU. Four get most of
// that on a small machine.
const collectUnlinkers = 4

// Collect destroys up to max cache entries marked for destruction (one index
// transaction) and removes the blob files that lost their last reference.
// Between the commit and the last unlink, at most max blob files are on disk
// that no entry refers to (a crash there leaves them to the next start's
// Sweep). With remote blobs the objects go too, and every quarter of
// OrphanGrace the orphan sweep runs (sweepOrphans).
func (b *Blobs) Collect(s *Store, max int) (CollectResult, error) {
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
				if removed, n := b.reap(s, sha); removed {
					mu.Lock()
					out.BlobsRemoved++
					out.BytesFreed += n
					mu.Unlock()
				}
			}
		}()
	}
	for _, sha := range c.Unreferenced {
		if ValidDigest(sha) {
			next <- sha
		}
	}
	close(next)
	wg.Wait()
	out.Busy += time.Since(unlinking)
	if b.remote != nil {
		return out, b.collectOrphans(s, &out)
	}
	return out, nil
}

// SweepResult is what Sweep found on disk.
type SweepResult struct {
	Blobs        int64 // referenced blob files kept
	Bytes        int64 // their size
	Removed      int   // orphan blob files removed
	RemovedBytes int64
}

// Sweep walks the blob files once at start: files the index does not refer
// to (a crash between an index commit and the unlink that follows it) are
// removed, and the file count and size for metrics are set. Run it before
// serving; it takes no locks. Files whose name is not a digest are left alone.
// With remote blobs it also loads the local tier (sweepRemote); the bucket
// is not listed.
func (b *Blobs) Sweep(s *Store) (SweepResult, error) {
	if b.remote != nil {
		return b.sweepRemote(s)
	}
	var out SweepResult
	sizes := map[string]int64{}
	err := filepath.WalkDir(b.root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || !d.Type().IsRegular() {
			return nil
		}
		name := d.Name()
		if !ValidDigest(name) || path != b.Path(name) {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		sizes[name] = fi.Size()
		return nil
	})
	if err != nil {
		return out, fmt.Errorf("blobs: sweep: %w", err)
	}
	referenced, err := s.referencedBlobs(sizes)
	if err != nil {
		return out, fmt.Errorf("blobs: sweep: %w", err)
	}
	for sha, size := range sizes {
		if referenced[sha] {
			out.Blobs++
			out.Bytes += size
			continue
		}
		if err := os.Remove(b.Path(sha)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return out, fmt.Errorf("blobs: sweep: %w", err)
		}
		out.Removed++
		out.RemovedBytes += size
	}
	b.count.Store(out.Blobs)
	b.bytes.Store(out.Bytes)
	return out, nil
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
