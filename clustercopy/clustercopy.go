// Package clustercopy copies a single registryd node's state into a cluster
// (the `registryd migrate` command; not a schema migration, which each
// engine does itself): its index from one kv.DB into another (bbolt into
// PostgreSQL, but any pair of engines: it uses only the kv contract) and its
// blob files into an object bucket under the same content-addressed keys. The copy is
// resumable (progress is recorded in the destination in the same
// transaction as each batch) and verified (key counts and a digest per
// bucket, every object's size, every blob's SHA-256 recomputed while it is
// uploaded).
package clustercopy

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"registryd/store/blob"
	"registryd/store/kv"
)

// ProgressBucket is the destination bucket where a migration records what
// it has copied: the source's identity, the bucket and last key of the last
// batch committed, and its state. It stays after the migration as a record
// of where the data came from; store does not read it, and the verification
// leaves it out.
var ProgressBucket = []byte("registryd_migrate")

var (
	keySource   = []byte("source")
	keyState    = []byte("state")
	keyBucket   = []byte("bucket")
	keyLast     = []byte("last")
	keyComplete = []byte("bucket_complete")
)

// States of a migration, in the progress bucket.
const (
	StateCopying = "copying"  // index batches are being copied
	StateDone    = "verified" // copied and verified
)

// The meta bucket's key check: the secret key's known value sealed with a
// random nonce when the installation was created (store/schema.go), so its
// bytes identify the installation.
var (
	metaBucket   = []byte("meta")
	metaKeyCheck = []byte("key_check")
)

// Bucket is what the migration needs of the object store.
type Bucket interface {
	// Put uploads size bytes from r under key; an error from r (a digest
	// mismatch found at the end) must leave no object.
	Put(ctx context.Context, key string, r io.Reader, size int64) error
	// Delete removes an object (one uploaded whose bytes proved wrong).
	Delete(ctx context.Context, key string) error
	// List calls fn for every object whose key starts with prefix.
	List(ctx context.Context, prefix string, fn func(key string, size int64) error) error
}

// Options configure Run.
type Options struct {
	// Source and Dest are the index engines.
	Source, Dest kv.DB
	// BlobDir is the source's DATA_DIR/blobs/sha256; "" copies no blobs.
	BlobDir string
	// Objects is the destination bucket.
	Objects Bucket
	// BatchKeys and BatchBytes bound one destination transaction. Defaults
	// 1000 keys and 8 MiB (whichever comes first; one larger value is a
	// batch of its own).
	BatchKeys  int
	BatchBytes int
	// Uploads is how many blobs are uploaded at once. Default 4.
	Uploads int
	// Log receives one line per step; nil: none.
	Log io.Writer
}

// BucketSum is one bucket's figures on one side.
type BucketSum struct {
	Keys     int
	Sequence uint64
	// SHA256 is over every key and value in order, each length-prefixed.
	SHA256 string
}

// Result is what Run did and found.
type Result struct {
	Source         string // the source's identity (hex)
	Resumed        bool
	Buckets        int
	KeysCopied     int
	Batches        int
	BlobsTotal     int
	BlobsUploaded  int
	BlobsSkipped   int // the object existed with the right size
	BytesUploaded  int64
	SourceBuckets  map[string]BucketSum
	DestBuckets    map[string]BucketSum
	Mismatches     []string
	AlreadyVerfied bool // a finished migration of the same source: verified again only
}

// ErrOtherInstallation means the destination already holds data that is not
// a migration of this source.
var ErrOtherInstallation = errors.New("the destination already holds another installation's data")

// ErrMismatch means the verification found a difference.
var ErrMismatch = errors.New("the copy does not match the source")

// Run copies, then verifies. It returns ErrMismatch (with the Result's
// Mismatches filled) when the verification finds a difference.
func Run(ctx context.Context, o Options) (*Result, error) {
	if o.BatchKeys <= 0 {
		o.BatchKeys = 1000
	}
	if o.BatchBytes <= 0 {
		o.BatchBytes = 8 << 20
	}
	if o.Uploads <= 0 {
		o.Uploads = 4
	}
	logf := func(format string, a ...any) {
		if o.Log != nil {
			fmt.Fprintf(o.Log, format+"\n", a...)
		}
	}
	r := &Result{}
	id, err := Identity(o.Source)
	if err != nil {
		return r, err
	}
	r.Source = id
	state, err := claim(o.Dest, id)
	if err != nil {
		return r, err
	}
	r.Resumed = state != ""
	r.AlreadyVerfied = state == StateDone
	switch state {
	case "":
		logf("migrating installation %s from %s into %s", short(id), o.Source.Describe(), o.Dest.Describe())
	case StateDone:
		logf("%s was migrated and verified already: verifying again", o.Dest.Describe())
	default:
		logf("resuming the migration of installation %s into %s", short(id), o.Dest.Describe())
	}

	// Blobs first: an index entry copied must never point at an object
	// that is not in the bucket yet.
	if o.BlobDir != "" && o.Objects != nil {
		if err := copyBlobs(ctx, o, r, logf); err != nil {
			return r, err
		}
	}
	if state != StateDone {
		if err := copyIndex(ctx, o, r, logf); err != nil {
			return r, err
		}
	}
	if err := verify(ctx, o, r, logf); err != nil {
		return r, err
	}
	if len(r.Mismatches) > 0 {
		return r, ErrMismatch
	}
	if err := o.Dest.Update(func(tx kv.Tx) error {
		b, err := tx.CreateBucketIfNotExists(ProgressBucket)
		if err != nil {
			return err
		}
		return b.Put(keyState, []byte(StateDone))
	}); err != nil {
		return r, fmt.Errorf("recording the end of the migration: %w", err)
	}
	return r, nil
}

// Identity is the hex SHA-256 of the source's sealed key check, which
// differs between any two installations.
func Identity(src kv.DB) (string, error) {
	var id string
	err := src.View(func(tx kv.Tx) error {
		id = ""
		meta := tx.Bucket(metaBucket)
		if meta == nil {
			return nil
		}
		if v := meta.Get(metaKeyCheck); v != nil {
			sum := sha256.Sum256(v)
			id = hex.EncodeToString(sum[:])
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("reading the source %s: %w", src.Describe(), err)
	}
	if id == "" {
		return "", fmt.Errorf("the source %s has no key check in its meta bucket: it is no registryd index, or one never started", src.Describe())
	}
	return id, nil
}

// claim records id as the destination's migration source, or finds it
// there (a resume; the state is returned). A destination that holds any key
// without a record of this source is refused.
func claim(dst kv.DB, id string) (state string, err error) {
	var other string
	err = dst.Update(func(tx kv.Tx) error {
		state, other = "", ""
		if p := tx.Bucket(ProgressBucket); p != nil && p.Get(keySource) != nil {
			if src := string(p.Get(keySource)); src != id {
				other = fmt.Sprintf("it holds a migration of installation %s, not of this source (%s)", short(src), short(id))
				return nil
			}
			state = string(p.Get(keyState))
			return nil
		}
		if err := tx.ForEach(func(name []byte, b kv.Bucket) error {
			if other == "" && !bytes.Equal(name, ProgressBucket) && b.KeyN() > 0 {
				other = fmt.Sprintf("its bucket %q has %d keys and no migration of this source is recorded "+
					"(a cluster node started on it before the migration?)", name, b.KeyN())
			}
			return nil
		}); err != nil {
			return err
		}
		if other != "" {
			return nil
		}
		p, err := tx.CreateBucketIfNotExists(ProgressBucket)
		if err != nil {
			return err
		}
		if err := p.Put(keySource, []byte(id)); err != nil {
			return err
		}
		return p.Put(keyState, []byte(StateCopying))
	})
	if err != nil {
		return "", fmt.Errorf("the destination %s: %w", dst.Describe(), err)
	}
	if other != "" {
		return "", fmt.Errorf("%w: %s: %s; migrate into an empty database", ErrOtherInstallation, dst.Describe(), other)
	}
	return state, nil
}

func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

type pair struct{ k, v []byte }

// sourceBuckets lists the source's bucket names in order.
func sourceBuckets(src kv.DB) ([]string, error) {
	var names []string
	err := src.View(func(tx kv.Tx) error {
		names = names[:0]
		return tx.ForEach(func(name []byte, _ kv.Bucket) error {
			if !bytes.Equal(name, ProgressBucket) {
				names = append(names, string(name))
			}
			return nil
		})
	})
	sort.Strings(names)
	return names, err
}

// copyIndex copies every bucket in name order, batch by batch; each batch's
// destination transaction also records (bucket, last key), so a killed run
// resumes after the last batch that committed. A batch also deletes the
// destination keys in its range that the source lacks, so a resume over a
// source that changed meanwhile still converges (and the verification
// finds what did not).
func copyIndex(ctx context.Context, o Options, r *Result, logf func(string, ...any)) error {
	names, err := sourceBuckets(o.Source)
	if err != nil {
		return fmt.Errorf("reading the source: %w", err)
	}
	var doneBucket string
	var resumeAfter []byte
	var complete bool
	if err := o.Dest.View(func(tx kv.Tx) error {
		p := tx.Bucket(ProgressBucket)
		doneBucket, resumeAfter, complete = string(p.Get(keyBucket)), bytes.Clone(p.Get(keyLast)), string(p.Get(keyComplete)) == "1"
		return nil
	}); err != nil {
		return fmt.Errorf("reading the progress: %w", err)
	}
	if doneBucket != "" {
		logf("resuming after bucket %q, key %q", doneBucket, resumeAfter)
	}
	r.Buckets = len(names)
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return err
		}
		var after []byte
		switch {
		case doneBucket == "" || name > doneBucket:
		case name < doneBucket || complete:
			continue
		default: // the bucket the last run was in
			after = resumeAfter
		}
		keys, err := copyBucket(ctx, o, r, []byte(name), after)
		if err != nil {
			return fmt.Errorf("copying bucket %q: %w", name, err)
		}
		logf("bucket %s: %d keys copied", name, keys)
	}
	return nil
}

// copyBucket copies the keys of bucket name after the key after (nil: all).
func copyBucket(ctx context.Context, o Options, r *Result, name, after []byte) (int, error) {
	copied := 0
	for {
		if err := ctx.Err(); err != nil {
			return copied, err
		}
		var batch []pair
		var seq uint64
		var end bool
		if err := o.Source.View(func(tx kv.Tx) error {
			batch, end = batch[:0], false
			b := tx.Bucket(name)
			if b == nil {
				end = true
				return nil
			}
			seq = b.Sequence()
			c := b.Cursor()
			var k, v []byte
			if after == nil {
				k, v = c.First()
			} else if k, v = c.Seek(after); k != nil && bytes.Equal(k, after) {
				k, v = c.Next()
			}
			size := 0
			for ; k != nil; k, v = c.Next() {
				if len(batch) >= o.BatchKeys || len(batch) > 0 && size+len(k)+len(v) > o.BatchBytes {
					return nil
				}
				batch = append(batch, pair{bytes.Clone(k), bytes.Clone(v)})
				size += len(k) + len(v)
			}
			end = true
			return nil
		}); err != nil {
			return copied, fmt.Errorf("reading the source: %w", err)
		}
		var last []byte
		if len(batch) > 0 {
			last = batch[len(batch)-1].k
		}
		if err := o.Dest.Update(func(tx kv.Tx) error {
			b, err := tx.CreateBucketIfNotExists(name)
			if err != nil {
				return err
			}
			// Keys of the destination in this batch's range that the
			// source does not have.
			var stale [][]byte
			c := b.Cursor()
			var k []byte
			if after == nil {
				k, _ = c.First()
			} else if k, _ = c.Seek(after); k != nil && bytes.Equal(k, after) {
				k, _ = c.Next()
			}
			i := 0
			for ; k != nil && (end || bytes.Compare(k, last) <= 0); k, _ = c.Next() {
				for i < len(batch) && bytes.Compare(batch[i].k, k) < 0 {
					i++
				}
				if i == len(batch) || !bytes.Equal(batch[i].k, k) {
					stale = append(stale, bytes.Clone(k))
				}
			}
			for _, k := range stale {
				if err := b.Delete(k); err != nil {
					return err
				}
			}
			for _, p := range batch {
				if err := b.Put(p.k, p.v); err != nil {
					return err
				}
			}
			if end {
				if err := b.SetSequence(seq); err != nil {
					return err
				}
			}
			pb, err := tx.CreateBucketIfNotExists(ProgressBucket)
			if err != nil {
				return err
			}
			if err := pb.Put(keyBucket, name); err != nil {
				return err
			}
			complete := "0"
			if end {
				complete = "1"
			}
			if err := pb.Put(keyComplete, []byte(complete)); err != nil {
				return err
			}
			if last != nil {
				return pb.Put(keyLast, last)
			}
			if after == nil {
				return pb.Delete(keyLast)
			}
			return nil
		}); err != nil {
			return copied, fmt.Errorf("writing the destination: %w", err)
		}
		r.Batches++
		r.KeysCopied += len(batch)
		copied += len(batch)
		if end {
			return copied, nil
		}
		after = last
	}
}

// Sums computes every bucket's figures of db, leaving ProgressBucket out.
func Sums(db kv.DB) (map[string]BucketSum, error) {
	out := map[string]BucketSum{}
	err := db.View(func(tx kv.Tx) error {
		clear(out)
		return tx.ForEach(func(name []byte, b kv.Bucket) error {
			if bytes.Equal(name, ProgressBucket) {
				return nil
			}
			h := sha256.New()
			n := 0
			if err := b.ForEach(func(k, v []byte) error {
				writeLP(h, k)
				writeLP(h, v)
				n++
				return nil
			}); err != nil {
				return err
			}
			out[string(name)] = BucketSum{Keys: n, Sequence: b.Sequence(), SHA256: hex.EncodeToString(h.Sum(nil))}
			return nil
		})
	})
	return out, err
}

func writeLP(h hash.Hash, b []byte) {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(b)))
	h.Write(n[:])
	h.Write(b)
}

// verify compares the buckets of both sides and every blob's object size.
func verify(ctx context.Context, o Options, r *Result, logf func(string, ...any)) error {
	var err error
	if r.SourceBuckets, err = Sums(o.Source); err != nil {
		return fmt.Errorf("summing the source: %w", err)
	}
	if r.DestBuckets, err = Sums(o.Dest); err != nil {
		return fmt.Errorf("summing the destination: %w", err)
	}
	names := make([]string, 0, len(r.SourceBuckets))
	for n := range r.SourceBuckets {
		names = append(names, n)
	}
	for n := range r.DestBuckets {
		if _, ok := r.SourceBuckets[n]; !ok {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	for _, n := range names {
		s, inS := r.SourceBuckets[n]
		d, inD := r.DestBuckets[n]
		switch {
		case !inD:
			r.Mismatches = append(r.Mismatches, fmt.Sprintf("bucket %s: missing in the destination (%d keys in the source)", n, s.Keys))
		case !inS:
			r.Mismatches = append(r.Mismatches, fmt.Sprintf("bucket %s: in the destination only (%d keys)", n, d.Keys))
		case s.Keys != d.Keys:
			r.Mismatches = append(r.Mismatches, fmt.Sprintf("bucket %s: %d keys in the source, %d in the destination", n, s.Keys, d.Keys))
		case s.SHA256 != d.SHA256:
			r.Mismatches = append(r.Mismatches, fmt.Sprintf("bucket %s: the same %d keys, but the keys or values differ (sha256 %s vs %s)",
				n, s.Keys, short(s.SHA256), short(d.SHA256)))
		case s.Sequence != d.Sequence:
			r.Mismatches = append(r.Mismatches, fmt.Sprintf("bucket %s: sequence %d in the source, %d in the destination", n, s.Sequence, d.Sequence))
		}
	}
	logf("index verified: %d buckets compared, %d differ", len(names), len(r.Mismatches))
	if o.BlobDir == "" || o.Objects == nil {
		return nil
	}
	local, err := localBlobs(o.BlobDir)
	if err != nil {
		return err
	}
	remote, err := listObjects(ctx, o)
	if err != nil {
		return err
	}
	before := len(r.Mismatches)
	for _, b := range local {
		size, ok := remote[blob.ObjectKey(b.sha)]
		switch {
		case !ok:
			r.Mismatches = append(r.Mismatches, fmt.Sprintf("blob %s: no object %s", b.sha, blob.ObjectKey(b.sha)))
		case size != b.size:
			r.Mismatches = append(r.Mismatches, fmt.Sprintf("blob %s: the object has %d bytes, the file %d", b.sha, size, b.size))
		}
	}
	logf("blobs verified: %d objects checked, %d differ", len(local), len(r.Mismatches)-before)
	return nil
}

type localBlob struct {
	sha, path string
	size      int64
}

// localBlobs lists the blob files under dir (named by their SHA-256).
// Anything else there (a stray file) is skipped: store's sweep would
// not serve it either.
func localBlobs(dir string) ([]localBlob, error) {
	var out []localBlob
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || !validDigest(d.Name()) {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		out = append(out, localBlob{sha: d.Name(), path: path, size: info.Size()})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("listing the source's blobs: %w", err)
	}
	return out, nil
}

func validDigest(s string) bool {
	if len(s) != 64 {
		return false
	}
	return strings.Trim(s, "0123456789abcdef") == ""
}

// listObjects maps the key of every object of the bucket (under the
// configured prefix) to its size: one listing instead of a request per blob.
func listObjects(ctx context.Context, o Options) (map[string]int64, error) {
	out := map[string]int64{}
	if err := o.Objects.List(ctx, "", func(key string, size int64) error {
		out[key] = size
		return nil
	}); err != nil {
		return nil, fmt.Errorf("listing the bucket: %w", err)
	}
	return out, nil
}

// copyBlobs uploads every local blob whose object is missing or has another
// size, hashing it on the way: a file whose bytes do not hash to its name
// fails its upload (no object is left) and the run.
func copyBlobs(ctx context.Context, o Options, r *Result, logf func(string, ...any)) error {
	local, err := localBlobs(o.BlobDir)
	if err != nil {
		return err
	}
	remote, err := listObjects(ctx, o)
	if err != nil {
		return err
	}
	r.BlobsTotal = len(local)
	var todo []localBlob
	for _, b := range local {
		if size, ok := remote[blob.ObjectKey(b.sha)]; ok && size == b.size {
			r.BlobsSkipped++
			continue
		}
		todo = append(todo, b)
	}
	logf("blobs: %d files, %d in the bucket already, %d to upload", len(local), r.BlobsSkipped, len(todo))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
	)
	work := make(chan localBlob)
	for range o.Uploads {
		wg.Go(func() {
			for b := range work {
				err := uploadBlob(ctx, o, b)
				mu.Lock()
				if err != nil && first == nil {
					first = err
					cancel()
				} else if err == nil {
					r.BlobsUploaded++
					r.BytesUploaded += b.size
				}
				mu.Unlock()
			}
		})
	}
feed:
	for _, b := range todo {
		select {
		case work <- b:
		case <-ctx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()
	if first != nil {
		return first
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	logf("blobs: %d uploaded (%d bytes)", r.BlobsUploaded, r.BytesUploaded)
	return nil
}

// ErrCorruptBlob means a local blob file's bytes do not hash to its name.
var ErrCorruptBlob = errors.New("the local blob file is corrupt")

func uploadBlob(ctx context.Context, o Options, b localBlob) error {
	f, err := os.Open(b.path)
	if err != nil {
		return fmt.Errorf("blob %s: %w", b.sha, err)
	}
	defer f.Close()
	hr := &hashingReader{r: io.LimitReader(f, b.size), h: sha256.New(), want: b.sha, size: b.size}
	if b.size == 0 {
		hr.check()
	}
	if err := o.Objects.Put(ctx, blob.ObjectKey(b.sha), hr, b.size); err != nil {
		if hr.bad != nil {
			return hr.bad
		}
		return fmt.Errorf("blob %s: uploading: %w", b.sha, err)
	}
	switch {
	case hr.bad != nil: // an uploader that did not pass the reader's error on
		err = hr.bad
	case !hr.checked:
		err = fmt.Errorf("blob %s: the upload read %d of its %d bytes", b.sha, hr.n, b.size)
	default:
		return nil
	}
	if derr := o.Objects.Delete(ctx, blob.ObjectKey(b.sha)); derr != nil {
		return fmt.Errorf("%w (and deleting the object failed: %v)", err, derr)
	}
	return err
}

// hashingReader hashes what it reads and, once it has read size bytes (or
// the file ends first), checks the digest: a mismatch fails that last read,
// so the upload is aborted before it completes and leaves no object.
type hashingReader struct {
	r       io.Reader
	h       hash.Hash
	want    string
	size, n int64
	checked bool
	bad     error
}

func (h *hashingReader) Read(p []byte) (int, error) {
	if h.bad != nil {
		return 0, h.bad
	}
	n, err := h.r.Read(p)
	h.h.Write(p[:n])
	h.n += int64(n)
	if !h.checked && (h.n >= h.size || err == io.EOF) {
		h.check()
	}
	if h.bad != nil {
		// The bytes of this read are withheld: an uploader that drops an
		// error once it has all the bytes it asked for (io.ReadFull does)
		// still comes up short and fails.
		return 0, h.bad
	}
	return n, err
}

func (h *hashingReader) check() {
	h.checked = true
	if got := hex.EncodeToString(h.h.Sum(nil)); got != h.want || h.n != h.size {
		h.bad = fmt.Errorf("blob %s: %w: its %d bytes (of %d) hash to %s; restore it from a backup, "+
			"or delete the file and the cache entries that use it on the single node, then migrate again", h.want, ErrCorruptBlob, h.n, h.size, got)
	}
}
