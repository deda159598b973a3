// Package blob is registryd's bytes: content-addressed blobs, each named by
// its SHA-256, knowing nothing of the index entries that point at them
// (package store binds entries to blobs, in store/blobbind.go).
//
//   - Writer writes a new blob to a temp file, hashing it in one pass
//     (MD5, SHA-1, SHA-256, SHA-512) behind the writer.
//   - Tier is one place blobs are kept. Disk (the data volume,
//     DATA_DIR/blobs) and Bucket (an S3-compatible object store, through
//     package store/objects) are peers; Tiered composes them for cluster
//     mode: the bucket holds every blob, the node's disk a bounded,
//     least-recently-used cache of them.
//   - Store is the blobs of one node: its Disk (writers, local files,
//     sendfile, the watch of the data volume in diskwatch.go) and the Tier
//     that keeps the blobs (the Disk itself, or a Tiered over it), with the
//     digests' locks.
//
// The package imports no store: whoever binds an entry to a blob takes the
// digest's lock (Store.Lock), places the blob (Place), commits the index and
// unlocks; removing a blob no entry refers to (Remove) holds the lock from
// the reference check to the delete.
package blob

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"registryd/store/objects"
)

// Tier is one place blobs are kept, by SHA-256 (lower-case hex).
type Tier interface {
	// Put stores the finished file tmp of size bytes as the blob sha. A
	// tier on the data volume takes the file by renaming it; otherwise tmp
	// stays the caller's to remove. created reports whether the blob was
	// not there (at that size) before. The caller holds the digest's lock.
	Put(ctx context.Context, tmp, sha string, size int64) (created bool, err error)
	// Get opens the blob sha of size bytes; an error matching ErrNotFound
	// when the tier has none of that size.
	Get(ctx context.Context, sha string, size int64) (io.ReadCloser, error)
	// Stat reports the size of the blob; ErrNotFound when there is none.
	Stat(ctx context.Context, sha string) (int64, error)
	// Delete removes the blob and reports the bytes freed; ErrNotFound
	// when there was none. The caller holds the digest's lock.
	Delete(ctx context.Context, sha string) (int64, error)
	// List calls fn for every blob the tier holds, until fn fails.
	List(ctx context.Context, fn func(Info) error) error
}

// Info describes a blob in a tier.
type Info struct {
	SHA256   string // "" for a key of the tier that is not a blob's
	Size     int64
	Modified time.Time // when it was written (the tier's clock)
}

// ErrNotFound is a blob the tier does not have.
var ErrNotFound = errors.New("blobs: no such blob")

// ErrObjectMismatch is an object whose bytes do not match the index's
// size or digest. It is never served whole and never kept locally.
var ErrObjectMismatch = errors.New("blobs: the stored object does not match its digest")

// ErrNotRemote is OpenRemote on a disk-only Store.
var ErrNotRemote = errors.New("blobs: the blobs are not in an object store")

const defaultOrphanGrace = time.Hour

// Options configure Open.
type Options struct {
	// Faults, for tests only, make the data volume look full (Faults).
	// Default nil: the real volume.
	Faults *Faults
}

// TieredOptions configure OpenTiered.
type TieredOptions struct {
	// Objects is the shared object store.
	Objects objects.Store
	// LocalCacheBytes bounds the blob files kept in DATA_DIR/blobs; it must
	// be positive.
	LocalCacheBytes int64
	// Lock, when set, takes a cluster-wide lock on key (store.Store.Lease):
	// the digest's lock then holds across nodes. Nil: the digest's lock is
	// this process's only (one node on a bucket).
	Lock func(ctx context.Context, key string) (unlock func(), err error)
	// OrphanGrace is how old an object no entry refers to must be before
	// the orphan sweep deletes it: longer than any upload-to-commit takes.
	// Default 1h.
	OrphanGrace time.Duration
}

// Store is the blobs of one node: the Disk every write and hit goes
// through, and the Tier that keeps the blobs.
type Store struct {
	disk *Disk
	// tier keeps the blobs: disk, or tiered.
	tier Tier
	// tiered is the local tier over the bucket; nil when the disk alone
	// keeps the blobs.
	tiered *Tiered
	// clusterLock, when set, extends a digest's lock to every node.
	clusterLock func(ctx context.Context, key string) (func(), error)
	grace       time.Duration

	orphanMu   sync.Mutex
	orphansRan time.Time // the last orphan sweep (the caller's clock)
}

// Open opens the blobs of a single node: DATA_DIR/blobs/sha256, with
// DATA_DIR/tmp for writers (emptied: anything there was left by a crash in
// the middle of a fill or an upload).
func Open(dataDir string, o Options) (*Store, error) {
	d, err := openDisk(dataDir, o.Faults)
	if err != nil {
		return nil, err
	}
	return &Store{disk: d, tier: d}, nil
}

// OpenTiered opens the blobs of a node in cluster mode: DATA_DIR/blobs as a
// local tier of at most o.LocalCacheBytes over the bucket o.Objects.
func OpenTiered(dataDir string, o TieredOptions) (*Store, error) {
	if o.Objects == nil {
		return nil, errors.New("blobs: no object store")
	}
	if o.LocalCacheBytes <= 0 {
		return nil, errors.New("blobs: the local cache of remote blobs needs a positive size")
	}
	d, err := openDisk(dataDir, nil)
	if err != nil {
		return nil, err
	}
	t := newTiered(d, newBucket(o.Objects), o.LocalCacheBytes)
	s := &Store{disk: d, tier: t, tiered: t, clusterLock: o.Lock, grace: o.OrphanGrace}
	if s.grace <= 0 {
		s.grace = defaultOrphanGrace
	}
	return s, nil
}

// Create starts a new blob in DATA_DIR/tmp.
func (s *Store) Create() (*Writer, error) { return s.disk.Create() }

// TempDir is DATA_DIR/tmp.
func (s *Store) TempDir() string { return s.disk.TempDir() }

// Path is the local file of the blob sha (which, over a bucket, may not be
// there).
func (s *Store) Path(sha string) string { return s.disk.Path(sha) }

// Open opens the local file of a blob for reading.
func (s *Store) Open(sha string) (*os.File, error) { return s.disk.Open(sha) }

// Stats reports how many local blob files there are and their total size.
func (s *Store) Stats() (count, bytes int64) { return s.disk.Stats() }

// SetMinFree: see Disk.SetMinFree.
func (s *Store) SetMinFree(frac float64) { s.disk.SetMinFree(frac) }

// DiskStatus: see Disk.DiskStatus.
func (s *Store) DiskStatus() DiskStatus { return s.disk.DiskStatus() }

// Space: see Disk.Space.
func (s *Store) Space() (Space, error) { return s.disk.Space() }

// SpaceNow: see Disk.SpaceNow.
func (s *Store) SpaceNow() (Space, error) { return s.disk.SpaceNow() }

// Reserve: see Disk.Reserve.
func (s *Store) Reserve(size int64) (release func(), ok bool) { return s.disk.Reserve(size) }

// NoteDiskFull: see Disk.NoteDiskFull.
func (s *Store) NoteDiskFull() { s.disk.NoteDiskFull() }

// Remote reports whether the blobs live in an object store.
func (s *Store) Remote() bool { return s.tiered != nil }

// Touch records a use of the local file of sha, for the local tier's LRU.
// It does nothing for disk-only blobs, and allocates nothing.
func (s *Store) Touch(sha string) {
	if s.tiered != nil {
		s.tiered.Touch(sha)
	}
}

// LocalCache reports the local tier's bytes (files, and reservations for
// files about to be placed) and its budget; zeros for disk-only blobs.
func (s *Store) LocalCache() (used, budget int64) {
	if s.tiered == nil {
		return 0, 0
	}
	return s.tiered.localCache()
}

// OpenRemote streams the blob sha of size from the object store (a local
// miss of an entry the index has), verifying it and filling the local tier
// (Tiered.fetch). A missing object, or one of another size, wraps
// objects.ErrNotFound; an outage matches objects.ErrUnavailable;
// ErrNotRemote for disk-only blobs.
func (s *Store) OpenRemote(ctx context.Context, sha string, size int64) (io.ReadCloser, error) {
	if s.tiered == nil {
		return nil, ErrNotRemote
	}
	return s.tiered.fetch(ctx, sha, size)
}

// Present reports whether the blob sha of size can be read here: its local
// file, or (remote blobs) its object in the bucket. An error is the
// bucket's (an outage).
func (s *Store) Present(ctx context.Context, sha string, size int64) (bool, error) {
	if fi, err := os.Stat(s.disk.Path(sha)); err == nil && fi.Size() == size {
		return true, nil
	}
	if s.tiered == nil {
		return false, nil
	}
	n, err := s.tiered.remote.Stat(ctx, sha)
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return n == size, nil
}

// Lock takes the digest's lock: this process's, then (when the Store was
// opened with one) the cluster's. Whoever creates or removes a blob, or
// commits an index entry pointing at one, holds it.
func (s *Store) Lock(ctx context.Context, sha string) (unlock func(), err error) {
	unlockLocal, err := s.disk.locks.lock(ctx, sha)
	if err != nil || s.clusterLock == nil {
		return unlockLocal, err
	}
	unlockCluster, err := s.clusterLock(ctx, "registryd:blob:"+sha)
	if err != nil {
		unlockLocal()
		return nil, fmt.Errorf("blobs: the cluster lock of %s: %w", sha, err)
	}
	return func() { unlockCluster(); unlockLocal() }, nil
}

// Place stores the blob of the finished writer w, whose digests are d, in
// the tier, and removes what is left of the temp file. The caller holds the
// digest's lock. created reports whether the blob was not there before.
func (s *Store) Place(ctx context.Context, w *Writer, d Digests) (created bool, err error) {
	tmp, err := w.take()
	if err != nil {
		return false, err
	}
	defer os.Remove(tmp) // gone already when the tier took it
	return s.tier.Put(ctx, tmp, d.SHA256, d.Size)
}

// Remove deletes the blob sha from the tier (the local file, and over a
// bucket its object) and reports whether it did and the bytes freed. The
// caller holds the digest's lock and has checked that no entry refers to
// the blob.
func (s *Store) Remove(ctx context.Context, sha string) (removed bool, freed int64) {
	n, err := s.tier.Delete(ctx, sha)
	if err != nil {
		return false, 0
	}
	return true, n
}

// SweepResult is what Sweep found on disk.
type SweepResult struct {
	Blobs        int64 // referenced blob files kept
	Bytes        int64 // their size
	Removed      int   // orphan blob files removed
	RemovedBytes int64
}

// Sweep walks the local blob files once at start: those keep does not want
// (given every digest and size, it answers the ones the index refers to)
// are removed, and the file count and size for metrics are set. Over a
// bucket, the files kept become the local tier (least recently modified
// first out) and the tier is brought within its budget; the bucket is not
// listed. Run it before serving; it takes no locks. Files whose name is not
// a digest are left alone.
func (s *Store) Sweep(keep func(sizes map[string]int64) (map[string]bool, error)) (SweepResult, error) {
	out, kept, err := s.disk.sweep(keep)
	if err != nil || s.tiered == nil {
		return out, err
	}
	s.tiered.load(kept)
	out.Blobs, out.Bytes = s.disk.Stats()
	return out, nil
}

// OrphanGrace is how old a blob of the shared tier must be before a sweep
// of orphans may delete it; 0 when no tier is shared (disk-only blobs have
// their orphans removed by Sweep at start).
func (s *Store) OrphanGrace() time.Duration {
	if s.tiered == nil {
		return 0
	}
	return s.grace
}

// OrphanSweepDue reports whether a sweep of orphans should run at now
// (every quarter of the grace), and marks it run.
func (s *Store) OrphanSweepDue(now time.Time) bool {
	if s.tiered == nil {
		return false
	}
	s.orphanMu.Lock()
	defer s.orphanMu.Unlock()
	if !s.orphansRan.IsZero() && now.Sub(s.orphansRan) < s.grace/4 {
		return false
	}
	s.orphansRan = now
	return true
}

// ListShared lists the blobs of the shared tier (the bucket); ErrNotRemote
// for disk-only blobs.
func (s *Store) ListShared(ctx context.Context, fn func(Info) error) error {
	if s.tiered == nil {
		return ErrNotRemote
	}
	return s.tiered.remote.List(ctx, fn)
}

// AbortUploads aborts the shared tier's incomplete uploads begun before
// before, when it can.
func (s *Store) AbortUploads(ctx context.Context, before time.Time) (int, error) {
	if s.tiered == nil {
		return 0, nil
	}
	return s.tiered.remote.AbortUploads(ctx, before)
}
