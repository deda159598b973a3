package blob

import (
	"errors"
	"fmt"
	"sync"
	"syscall"
	"time"
)

// A full data volume. The blobs and the index share DATA_DIR, so when it
// fills up a fill cannot write its temp file, and a commit of registry.db
// cannot write its pages. Neither may break a download: the proxy then
// streams files to their clients without caching them (proxy/passthrough.go),
// and an admin write answers 507. This file recognises those errors and
// keeps the state of the volume that fills ask before they write.

// IsDiskFull reports whether err is a write that failed for want of space:
// the volume is full (ENOSPC), a quota is reached (EDQUOT), or the process's
// file size limit is (EFBIG, RLIMIT_FSIZE; Go ignores SIGXFSZ, so the write
// fails instead of killing the process). bbolt returns the write's error as
// is, so an index commit that failed for want of space is recognised too.
func IsDiskFull(err error) bool {
	return err != nil && (errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) || errors.Is(err, syscall.EFBIG))
}

const (
	// spaceMaxAge is how long one statfs(2) of the data volume answers
	// Room: fills ask before each file, and a statfs per file would cost a
	// system call per miss for a figure that moves slowly.
	spaceMaxAge = time.Second
	// reserveFraction of the volume is kept free of new blobs: a fill that
	// would leave less streams uncached. It leaves room for registry.db,
	// whose commits must go on (download counts, admin writes, evictions),
	// and for fills already running.
	reserveFraction = 0.01
	// reserveMax caps the reserve on very large volumes.
	reserveMax = 1 << 30
	// fullHold is how long fills stay uncached after a write failed for
	// want of space, unless the volume's free space grows meanwhile. A
	// quota (EDQUOT) or a file size limit (EFBIG) does not show in statfs,
	// so only the failure says that writes fail; after the hold, the next
	// fill tries again (it costs nothing to its clients if it fails).
	fullHold = 10 * time.Second
)

// Space is what the data volume has, as statfs(2) reports it for an
// unprivileged process.
type Space struct {
	Free  int64 // bytes available to registryd
	Total int64 // size of the volume
}

// DiskStatus says whether fills write to the cache, and if not why.
type DiskStatus struct {
	// Filling is false while fills stream their files without caching them.
	Filling bool
	// Reason says why not, with the figures; "" while filling.
	Reason string
	// Free and Total are the volume's last known bytes (0 when statfs failed).
	Free, Total int64
}

// diskWatch is the state of the data volume that fills consult.
type diskWatch struct {
	mu      sync.Mutex
	dir     string
	statfs  func(dir string) (Space, error)
	now     func() time.Time
	at      time.Time // of the last statfs
	space   Space
	statErr error
	// reserved are the bytes promised to fills in progress (Reserve).
	reserved int64
	// minFree is the share of the volume no new blob may take
	// (cache.min_free_fraction, SetMinFree), when above the reserve.
	minFree float64
	// fullAt is the last write failure for want of space; fullFree the
	// free bytes statfs reported just after it.
	fullAt   time.Time
	fullFree int64
}

func statfs(dir string) (Space, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return Space{}, err
	}
	return Space{Free: int64(st.Bavail) * int64(st.Bsize), Total: int64(st.Blocks) * int64(st.Bsize)}, nil
}

// refreshLocked runs statfs when the last figure is older than spaceMaxAge
// (or force).
func (d *diskWatch) refreshLocked(force bool) {
	now := d.now()
	if !force && !d.at.IsZero() && now.Sub(d.at) < spaceMaxAge {
		return
	}
	d.space, d.statErr = d.statfs(d.dir)
	d.at = now
}

func (d *diskWatch) reserve() int64 {
	return max(min(int64(float64(d.space.Total)*reserveFraction), reserveMax), int64(float64(d.space.Total)*d.minFree))
}

// SetMinFree makes frac of the data volume (cache.min_free_fraction) a
// floor no new blob goes below, as the reserve is: a fill that would go
// below streams uncached, until eviction has made room. Without it, each
// fill on a volume that other data keeps below the mark would be written,
// then evicted at the next check.
func (b *Disk) SetMinFree(frac float64) {
	b.watch.mu.Lock()
	b.watch.minFree = frac
	b.watch.mu.Unlock()
}

// statusLocked is the volume's state; avail is what a new fill may write.
func (d *diskWatch) statusLocked() (st DiskStatus, avail int64) {
	st = DiskStatus{Filling: true, Free: d.space.Free, Total: d.space.Total}
	if d.statErr != nil {
		// Without figures, only write failures stop the fills.
		avail = 1<<63 - 1
	} else {
		avail = d.space.Free - d.reserve() - d.reserved
	}
	held := !d.fullAt.IsZero() && d.now().Sub(d.fullAt) < fullHold && d.space.Free <= d.fullFree+d.reserve()
	switch {
	case held:
		st.Filling = false
		st.Reason = fmt.Sprintf("a write to the data volume failed for want of space %s ago (%s free)",
			d.now().Sub(d.fullAt).Round(time.Second), formatBytes(d.space.Free))
	case d.statErr == nil && d.space.Free <= d.reserve():
		st.Filling = false
		st.Reason = fmt.Sprintf("data volume full: %s free of %s, %s kept in reserve",
			formatBytes(d.space.Free), formatBytes(d.space.Total), formatBytes(d.reserve()))
		if d.minFree > 0 {
			st.Reason = fmt.Sprintf("data volume below cache.min_free_fraction: %s free of %s, %s kept free",
				formatBytes(d.space.Free), formatBytes(d.space.Total), formatBytes(d.reserve()))
		}
	}
	if !st.Filling {
		avail = 0
	}
	return st, avail
}

// formatBytes writes n in binary units, for messages: "12.0 MiB".
func formatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTP"[exp])
}

// DiskStatus reports whether fills write to the cache now.
func (b *Disk) DiskStatus() DiskStatus {
	d := &b.watch
	d.mu.Lock()
	defer d.mu.Unlock()
	d.refreshLocked(false)
	st, _ := d.statusLocked()
	return st
}

// Space reports the data volume's free and total bytes, at most spaceMaxAge
// old.
func (b *Disk) Space() (Space, error) {
	d := &b.watch
	d.mu.Lock()
	defer d.mu.Unlock()
	d.refreshLocked(false)
	return d.space, d.statErr
}

// SpaceNow is Space read afresh: for eviction, which must see the space
// its own last run freed.
func (b *Disk) SpaceNow() (Space, error) {
	d := &b.watch
	d.mu.Lock()
	defer d.mu.Unlock()
	d.refreshLocked(true)
	return d.space, d.statErr
}

// Reserve asks for room for a new blob of size bytes (-1: unknown). ok is
// false when the fill should not write to the cache: the volume is below
// its reserve, a write failed for want of space moments ago, or the file
// would not fit. Otherwise the bytes are promised to the fill until release
// is called (once the blob is published or dropped), so that fills starting
// together do not each count the same free space.
func (b *Disk) Reserve(size int64) (release func(), ok bool) {
	d := &b.watch
	d.mu.Lock()
	defer d.mu.Unlock()
	d.refreshLocked(false)
	_, avail := d.statusLocked()
	if avail <= 0 || size > avail {
		return func() {}, false
	}
	n := max(size, 0)
	d.reserved += n
	var once sync.Once
	return func() {
		once.Do(func() {
			d.mu.Lock()
			d.reserved -= n
			d.mu.Unlock()
		})
	}, true
}

// NoteDiskFull records a write that failed for want of space (see
// IsDiskFull): fills stay uncached for a while, or until the volume has
// more room than it had just after the failure.
func (b *Disk) NoteDiskFull() {
	d := &b.watch
	d.mu.Lock()
	defer d.mu.Unlock()
	d.refreshLocked(true)
	d.fullAt = d.now()
	d.fullFree = d.space.Free
}

// Faults stand in for a full data volume, for tests that cannot fill a
// real one (blob's, and the proxy's disk-full tests): the volume's figures
// are what the test says, and writes to temp files fail as on a full
// volume. A test gives one to Open (Options.Faults) and changes it
// as it goes; nothing else makes one. One Faults serves one Store.
type Faults struct {
	mu    sync.Mutex
	disk  *diskWatch     // of the Store opened with it
	fault writeFaultFunc // nil: writes succeed
}

// writeFaultFunc is called with the bytes a writer has written and the length
// of its next write, and returns how many of them to write and the error to
// return after them (nil: write all).
type writeFaultFunc func(written int64, n int) (int, error)

// SetSpaceProbe replaces statfs(2) of the data volume with fn; nil
// restores statfs. The next fill sees the new figures at once.
func (f *Faults) SetSpaceProbe(fn func() (Space, error)) {
	d := f.disk
	d.mu.Lock()
	defer d.mu.Unlock()
	if fn == nil {
		d.statfs = statfs
	} else {
		d.statfs = func(string) (Space, error) { return fn() }
	}
	d.at = time.Time{}
}

// ENOSPCAfter makes the temp files created from now on those of a volume
// with room for limit bytes of each: the write that crosses it writes what
// fits and fails with ENOSPC. A writer keeps the fault it was created with.
func (f *Faults) ENOSPCAfter(limit int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fault = func(written int64, n int) (int, error) {
		if written+int64(n) <= limit {
			return n, nil
		}
		return int(max(0, limit-written)), &wrapErr{op: "write", err: syscall.ENOSPC}
	}
}

// NoWriteFault makes writes to temp files created from now on succeed again.
func (f *Faults) NoWriteFault() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fault = nil
}

// writeFault is the fault of a new temp file; nil without Faults.
func (b *Disk) writeFault() writeFaultFunc {
	if b.faults == nil {
		return nil
	}
	b.faults.mu.Lock()
	defer b.faults.mu.Unlock()
	return b.faults.fault
}

// wrapErr stands for the *fs.PathError of a real write.
type wrapErr struct {
	op  string
	err error
}

func (e *wrapErr) Error() string { return e.op + ": " + e.err.Error() }
func (e *wrapErr) Unwrap() error { return e.err }
