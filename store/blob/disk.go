package blob

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Disk is the tier on the data volume: DATA_DIR/blobs/sha256/ab/cd/abcd...
// holds the bytes whose SHA-256 is abcd..., once however many cache entries
// point at them. Files are written under DATA_DIR/tmp (same file system, see
// Writer), fsynced, renamed into place and the directory fsynced before the
// index may refer to them, so a crash leaves either no blob or a whole one,
// never a torn file that looks cached.
//
// Every Store has one: alone it keeps the blobs; under a bucket it is the
// node's bounded local tier (Tiered). Writers write here, and hits are sent
// from here (sendfile).
type Disk struct {
	root string // DATA_DIR/blobs/sha256
	tmp  string // DATA_DIR/tmp

	// locks are the digests' locks in this process (Store.Lock): whoever
	// creates or removes a blob file holds its digest's.
	locks keyedLocks

	// hashSlots bounds the hashing goroutines (of all writers) that run at
	// once to one fewer than GOMAXPROCS, at least one: hashing is CPU-bound
	// and never blocks, and with every P busy hashing, requests would wait
	// for a P, and the network poller would run only every 10ms (the
	// scheduler polls when a P runs out of work, or sysmon does).
	hashSlots chan struct{}

	// count and bytes describe the blob files on disk, for metrics. They are
	// set by Sweep and kept up to date by Put and Delete.
	count atomic.Int64
	bytes atomic.Int64

	// durable are the fan-out directories (ab/cd, by "abcd") known to be
	// made and fsynced in their parents; mkdirMu serialises making the
	// others, so that a fill never finds a directory another fill made but
	// has not fsynced yet (mkdirs).
	durable sync.Map
	mkdirMu sync.Mutex

	// watch is the state of the data volume that fills consult (diskwatch.go).
	watch diskWatch
	// faults, set by tests only, make the volume look full (diskwatch.go).
	faults *Faults
}

var _ Tier = (*Disk)(nil)

// openDisk prepares DATA_DIR/blobs/sha256 and DATA_DIR/tmp, and empties tmp:
// anything there was left by a crash in the middle of a fill or an upload.
func openDisk(dataDir string, faults *Faults) (*Disk, error) {
	d := &Disk{root: filepath.Join(dataDir, "blobs", "sha256"), tmp: filepath.Join(dataDir, "tmp"),
		hashSlots: make(chan struct{}, max(1, runtime.GOMAXPROCS(0)-1)), faults: faults}
	d.watch = diskWatch{dir: d.root, statfs: statfs, now: time.Now}
	if faults != nil {
		faults.disk = &d.watch
	}
	for _, dir := range []string{d.root, d.tmp} {
		if err := MkdirAll(dir, 0o750); err != nil {
			return nil, fmt.Errorf("blobs: %w", err)
		}
	}
	ents, err := os.ReadDir(d.tmp)
	if err != nil {
		return nil, fmt.Errorf("blobs: %w", err)
	}
	for _, e := range ents {
		if err := os.RemoveAll(filepath.Join(d.tmp, e.Name())); err != nil {
			return nil, fmt.Errorf("blobs: clearing %s: %w", d.tmp, err)
		}
	}
	return d, nil
}

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

// TempDir is DATA_DIR/tmp.
func (d *Disk) TempDir() string { return d.tmp }

// Path is the file of the blob with SHA-256 sha (lower-case hex).
func (d *Disk) Path(sha string) string {
	return filepath.Join(d.root, sha[0:2], sha[2:4], sha)
}

// Open opens a blob for reading.
func (d *Disk) Open(sha string) (*os.File, error) {
	if !ValidDigest(sha) {
		return nil, fmt.Errorf("blobs: invalid digest %q", sha)
	}
	return os.Open(d.Path(sha))
}

// Stats reports how many blob files there are and their total size.
func (d *Disk) Stats() (count, bytes int64) { return d.count.Load(), d.bytes.Load() }

// Put renames tmp to the blob's path, or leaves tmp (for the caller to
// remove) when the blob exists with that size. created reports whether a
// new file appeared.
func (d *Disk) Put(_ context.Context, tmp, sha string, size int64) (created bool, err error) {
	dst := d.Path(sha)
	old, statErr := os.Stat(dst)
	if statErr == nil && old.Size() == size {
		// Content addressing: these bytes are stored already.
		return false, nil
	}
	if err := d.mkdirs(sha); err != nil {
		return false, err
	}
	if err := os.Rename(tmp, dst); err != nil {
		return false, fmt.Errorf("blobs: %w", err)
	}
	if err := SyncDir(dst); err != nil {
		// The rename may not be durable, and a crash would lose a file the
		// index points at: undo and fail.
		os.Remove(dst)
		return false, fmt.Errorf("blobs: fsync directory: %w", err)
	}
	if statErr == nil {
		// A file of the wrong size under this digest (damaged outside
		// registryd) was replaced by the right bytes.
		d.bytes.Add(size - old.Size())
	} else {
		d.count.Add(1)
		d.bytes.Add(size)
	}
	return true, nil
}

// mkdirs creates ab/ and ab/cd/ for sha, durably (MkdirAll).
//
// Two fills may need the same new directory. The one that finds it made
// must not go on (rename its blob in, commit its entry) before the maker
// has fsynced it in its parent, or a power cut could lose the directory
// under a committed entry: a directory not yet known durable is made (or
// found) under mkdirMu, where MkdirAll makes and fsyncs it in one go.
func (d *Disk) mkdirs(sha string) error {
	key := sha[0:4]
	if _, ok := d.durable.Load(key); ok {
		return nil
	}
	d.mkdirMu.Lock()
	defer d.mkdirMu.Unlock()
	if err := MkdirAll(filepath.Join(d.root, sha[0:2], sha[2:4]), 0o750); err != nil {
		return fmt.Errorf("blobs: %w", err)
	}
	d.durable.Store(key, struct{}{})
	return nil
}

// Get opens the blob file; an error matching ErrNotFound when there is none
// of that size.
func (d *Disk) Get(_ context.Context, sha string, size int64) (io.ReadCloser, error) {
	f, err := d.Open(sha)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	if err != nil {
		return nil, err
	}
	if fi, err := f.Stat(); err != nil || fi.Size() != size {
		f.Close()
		return nil, fmt.Errorf("%w: %s is not of %d bytes", ErrNotFound, sha, size)
	}
	return f, nil
}

// Stat reports the size of the blob file; ErrNotFound when there is none.
func (d *Disk) Stat(_ context.Context, sha string) (int64, error) {
	fi, err := os.Stat(d.Path(sha))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

// Delete unlinks the blob file and reports its size.
func (d *Disk) Delete(_ context.Context, sha string) (int64, error) {
	fi, err := os.Stat(d.Path(sha))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	if err != nil {
		return 0, fmt.Errorf("blobs: %w", err)
	}
	if err := d.remove(sha, fi.Size()); err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

// remove unlinks a blob file of size bytes and counts it gone.
func (d *Disk) remove(sha string, size int64) error {
	if err := os.Remove(d.Path(sha)); err != nil {
		return fmt.Errorf("blobs: %w", err)
	}
	d.count.Add(-1)
	d.bytes.Add(-size)
	return nil
}

// List calls fn for every blob file (a regular file named by its digest at
// its digest's path); other files are left alone.
func (d *Disk) List(_ context.Context, fn func(Info) error) error {
	err := filepath.WalkDir(d.root, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() || !e.Type().IsRegular() || !ValidDigest(e.Name()) || path != d.Path(e.Name()) {
			return nil
		}
		fi, err := e.Info()
		if err != nil {
			return err
		}
		return fn(Info{SHA256: e.Name(), Size: fi.Size(), Modified: fi.ModTime()})
	})
	if err != nil {
		return fmt.Errorf("blobs: %w", err)
	}
	return nil
}

// sweep removes the blob files keep does not want and sets the counts from
// the rest, which it returns.
func (d *Disk) sweep(keep func(sizes map[string]int64) (map[string]bool, error)) (SweepResult, []Info, error) {
	var out SweepResult
	var files []Info
	sizes := map[string]int64{}
	if err := d.List(context.Background(), func(i Info) error {
		files = append(files, i)
		sizes[i.SHA256] = i.Size
		return nil
	}); err != nil {
		return out, nil, fmt.Errorf("blobs: sweep: %w", err)
	}
	wanted, err := keep(sizes)
	if err != nil {
		return out, nil, fmt.Errorf("blobs: sweep: %w", err)
	}
	kept := files[:0]
	for _, f := range files {
		if wanted[f.SHA256] {
			kept = append(kept, f)
			out.Blobs++
			out.Bytes += f.Size
			continue
		}
		if err := os.Remove(d.Path(f.SHA256)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return out, nil, fmt.Errorf("blobs: sweep: %w", err)
		}
		out.Removed++
		out.RemovedBytes += f.Size
	}
	d.count.Store(out.Blobs)
	d.bytes.Store(out.Bytes)
	return out, kept, nil
}

// MkdirAll is os.MkdirAll that makes each directory it creates durable:
// its parent is fsynced once the new entry is in it, as after a rename
// into it. Without that, a power cut may lose a directory (and every blob
// under it) whose files were fsynced and whose index entries committed.
func MkdirAll(path string, perm fs.FileMode) error {
	path = filepath.Clean(path)
	if fi, err := os.Stat(path); err == nil {
		if fi.IsDir() {
			return nil
		}
		return &fs.PathError{Op: "mkdir", Path: path, Err: syscall.ENOTDIR}
	}
	parent := filepath.Dir(path)
	if parent != path {
		if err := MkdirAll(parent, perm); err != nil {
			return err
		}
	}
	// Callers that may race to make the same directory serialise (as
	// Disk.mkdirs does): one that found it made by another would not know
	// whether that one had fsynced it yet.
	if err := os.Mkdir(path, perm); err != nil {
		return err
	}
	if err := SyncDir(parent); err != nil {
		return fmt.Errorf("fsync directory %s: %w", parent, err)
	}
	return nil
}

// SyncDir fsyncs the directory holding path (or path itself, when a
// directory), making a rename into it durable.
func SyncDir(path string) error {
	dir := path
	if fi, err := os.Stat(path); err != nil || !fi.IsDir() {
		dir = filepath.Dir(path)
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
