package blob

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// What the scrub (store/scrub.go) needs of the bytes: read a blob's local
// file and its object apart, move a bad local file aside, delete a bad
// object. Each is called under the digest's lock, except the reads.

// QuarantineDir is DATA_DIR/quarantine, where Quarantine moves local blob
// files whose bytes do not match their digest.
func (s *Store) QuarantineDir() string {
	return filepath.Join(filepath.Dir(filepath.Dir(s.disk.root)), "quarantine")
}

// OpenShared opens the object of sha in the shared tier (the bucket)
// without filling the local tier, and reports its size. An error matching
// ErrNotFound when there is none; ErrNotRemote for disk-only blobs.
func (s *Store) OpenShared(ctx context.Context, sha string) (io.ReadCloser, int64, error) {
	if s.tiered == nil {
		return nil, 0, ErrNotRemote
	}
	size, err := s.tiered.remote.Stat(ctx, sha)
	if err != nil {
		return nil, 0, err
	}
	r, err := s.tiered.remote.Get(ctx, sha, size)
	if err != nil {
		return nil, 0, err
	}
	return r, size, nil
}

// DeleteShared deletes the object of sha from the shared tier (the local
// file stays; the caller quarantines it if it is bad too). The caller holds
// the digest's lock. A missing object is no error.
func (s *Store) DeleteShared(ctx context.Context, sha string) error {
	if s.tiered == nil {
		return ErrNotRemote
	}
	if err := s.tiered.remote.remove(ctx, sha); err != nil && !errors.Is(notFound(err), ErrNotFound) {
		return fmt.Errorf("blobs: %w", err)
	}
	return nil
}

// Quarantine moves the local file of sha to DATA_DIR/quarantine/<sha>
// (fsynced: the file, and both directories), so that it is neither served
// nor taken for the same bytes by a fill (Place would keep an existing file
// of the right size), and keeps for an operator's look at most maxBytes of
// quarantined files there: the oldest quarantined are deleted first (the
// new one too, when it alone is larger). It returns the quarantined path
// ("" when the file was deleted for the bound, or there was none). The
// caller holds the digest's lock.
func (s *Store) Quarantine(sha string, maxBytes int64) (string, error) {
	if !ValidDigest(sha) {
		return "", fmt.Errorf("blobs: invalid digest %q", sha)
	}
	src := s.disk.Path(sha)
	fi, err := os.Stat(src)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("blobs: %w", err)
	}
	dir := s.QuarantineDir()
	if err := MkdirAll(dir, 0o750); err != nil {
		return "", fmt.Errorf("blobs: quarantine: %w", err)
	}
	dst := filepath.Join(dir, sha)
	if err := os.Rename(src, dst); err != nil {
		return "", fmt.Errorf("blobs: quarantine: %w", err)
	}
	s.disk.count.Add(-1)
	s.disk.bytes.Add(-fi.Size())
	if s.tiered != nil {
		s.tiered.forgetLocal(sha)
	}
	// The quarantine's order is when a file came here, not when it was
	// written.
	now := time.Now()
	_ = os.Chtimes(dst, now, now)
	if f, err := os.Open(dst); err == nil {
		_ = f.Sync()
		f.Close()
	}
	if err := SyncDir(dst); err != nil {
		return dst, fmt.Errorf("blobs: quarantine: fsync %s: %w", dir, err)
	}
	if err := SyncDir(src); err != nil {
		return dst, fmt.Errorf("blobs: quarantine: fsync %s: %w", filepath.Dir(src), err)
	}
	kept, err := pruneQuarantine(dir, maxBytes)
	if err != nil {
		return dst, err
	}
	if !kept[sha] {
		return "", nil
	}
	return dst, nil
}

// pruneQuarantine deletes the oldest files of dir until the rest hold at
// most maxBytes, and reports the names kept.
func pruneQuarantine(dir string, maxBytes int64) (map[string]bool, error) {
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("blobs: quarantine: %w", err)
	}
	type qf struct {
		name string
		size int64
		mod  time.Time
	}
	var files []qf
	var total int64
	for _, de := range des {
		fi, err := de.Info()
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		files = append(files, qf{de.Name(), fi.Size(), fi.ModTime()})
		total += fi.Size()
	}
	slices.SortFunc(files, func(a, b qf) int { return a.mod.Compare(b.mod) })
	kept := map[string]bool{}
	for _, f := range files {
		if total > maxBytes {
			if err := os.Remove(filepath.Join(dir, f.name)); err == nil {
				total -= f.size
				continue
			}
		}
		kept[f.name] = true
	}
	return kept, SyncDir(dir)
}
