package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"registryd/internal/testclock"
	"registryd/internal/testsvc"
	"registryd/store/blob"
	"registryd/store/objects"
)

// remoteEnv is one store (the shared index) and a bucket on the test S3
// server (testsvc.ObjectStore: MinIO or versitygw).
type remoteEnv struct {
	s     *Store
	clock *testclock.Clock
	obj   *objects.S3
	up    int64
	locks *testClusterLocks
}

func newRemoteEnv(t *testing.T) *remoteEnv {
	t.Helper()
	srv := testsvc.ObjectStore(t)
	obj := srv.NewObjects(t, "registryd")
	// The orphan grace is measured against the object store's clock.
	c := testclock.New(time.Now().UTC())
	db, err := boltAt(t.TempDir(), time.Second)
	noErr(t, err)
	s, err := Open(Options{SecretKey: testKey, Now: c.Now, Engine: db})
	noErr(t, err)
	t.Cleanup(func() { s.Close() })
	g := topGroup(t, s, "acme")
	r := ok(s.CreateRegistry(g.ID, "main", ""))(t)
	u := up(t, s, r.ID, "https://repo.example.com/maven2")
	return &remoteEnv{s: s, clock: c, obj: obj, up: u.ID, locks: &testClusterLocks{m: map[string]*sync.Mutex{}}}
}

// node opens a node's blobs: its own data dir over the shared bucket,
// with the shared cluster lock.
func (e *remoteEnv) node(t *testing.T, obj objects.Store, budget int64) *blob.Store {
	t.Helper()
	if obj == nil {
		obj = e.obj
	}
	b, err := blob.OpenTiered(t.TempDir(), blob.TieredOptions{Objects: obj, LocalCacheBytes: budget, Lock: e.locks.lock})
	noErr(t, err)
	return b
}

func (e *remoteEnv) publish(t testing.TB, b *blob.Store, rel, content string) (CacheEntry, error) {
	t.Helper()
	w, err := b.Create()
	noErr(t, err)
	if _, err := w.Write([]byte(content)); err != nil {
		t.Fatal(err)
	}
	d, err := w.Finish()
	noErr(t, err)
	return e.s.Publish(b, w, d, CacheEntry{UpstreamID: e.up, RelativePath: rel, ContentType: "text/plain"})
}

func (e *remoteEnv) object(t testing.TB, sha string) (objects.Info, bool) {
	t.Helper()
	i, err := e.obj.Stat(context.Background(), blob.ObjectKey(sha))
	if errors.Is(err, objects.ErrNotFound) {
		return i, false
	}
	noErr(t, err)
	return i, true
}

func readRemote(b *blob.Store, sha string, size int64) ([]byte, error) {
	r, err := b.OpenRemote(context.Background(), sha, size)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(r)
}

// testClusterLocks stands in for the cluster's lease (Store.Lease on
// PostgreSQL): one mutex per key, shared by the test's nodes. onLock, when
// set, is told of every attempt before it waits.
type testClusterLocks struct {
	mu     sync.Mutex
	m      map[string]*sync.Mutex
	onLock func(key string)
}

func (l *testClusterLocks) lock(ctx context.Context, key string) (func(), error) {
	l.mu.Lock()
	m := l.m[key]
	if m == nil {
		m = new(sync.Mutex)
		l.m[key] = m
	}
	hook := l.onLock
	l.mu.Unlock()
	if hook != nil {
		hook(key)
	}
	m.Lock()
	return m.Unlock, nil
}

// faultyObjects wraps an object store with injected faults.
type faultyObjects struct {
	objects.Store
	put    func(key string) error // before a Put; an error fails it
	stat   func(key string)       // after a Stat
	getCut int64                  // >0: Get bodies fail after this many bytes
}

func (f *faultyObjects) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	if f.put != nil {
		if err := f.put(key); err != nil {
			return err
		}
	}
	return f.Store.Put(ctx, key, r, size)
}

func (f *faultyObjects) Stat(ctx context.Context, key string) (objects.Info, error) {
	i, err := f.Store.Stat(ctx, key)
	if f.stat != nil {
		f.stat(key)
	}
	return i, err
}

func (f *faultyObjects) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	rc, err := f.Store.Get(ctx, key)
	if err != nil || f.getCut <= 0 {
		return rc, err
	}
	return &cutBody{ReadCloser: rc, left: f.getCut}, nil
}

type cutBody struct {
	io.ReadCloser
	left int64
}

func (c *cutBody) Read(p []byte) (int, error) {
	if c.left <= 0 {
		return 0, &objects.Error{Op: "get", Reason: "connection closed mid-body", Err: io.ErrUnexpectedEOF}
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.ReadCloser.Read(p)
	c.left -= int64(n)
	return n, err
}

func TestRemotePublishUploadsBeforeCommit(t *testing.T) {
	e := newRemoteEnv(t)
	down := &objects.Error{Op: "put", Reason: "answered 503 SlowDown", Err: errors.New("injected")}
	var sawEntry *bool
	f := &faultyObjects{Store: e.obj, put: func(string) error {
		_, err := e.s.CacheEntry(e.up, "/a.jar")
		seen := err == nil
		sawEntry = &seen
		return down
	}}
	b := e.node(t, f, 1<<20)
	_, err := e.publish(t, b, "/a.jar", "the bytes")
	if !errors.Is(err, objects.ErrUnavailable) {
		t.Fatalf("Publish with a failing upload: %v", err)
	}
	if sawEntry == nil || *sawEntry {
		t.Fatalf("the upload ran after the index commit (or not at all): %v", sawEntry)
	}
	if _, err := e.s.CacheEntry(e.up, "/a.jar"); err == nil {
		t.Fatal("an entry was committed although its upload failed")
	}
	if exists(b.Path(sha("the bytes"))) || func() bool { _, ok := e.object(t, sha("the bytes")); return ok }() {
		t.Fatal("a failed publish left a blob behind")
	}
	if used, _ := b.LocalCache(); used != 0 {
		t.Fatalf("local tier counts %d bytes after a failed publish", used)
	}
	tmp, _ := os.ReadDir(b.TempDir())
	if len(tmp) != 0 {
		t.Fatalf("temp files left: %v", tmp)
	}

	f.put = nil
	out, err := e.publish(t, b, "/a.jar", "the bytes")
	noErr(t, err)
	if i, ok := e.object(t, out.SHA256); !ok || i.Size != 9 {
		t.Fatalf("object after publish: %+v %v", i, ok)
	}
	if !exists(b.Path(out.SHA256)) {
		t.Fatal("no local copy after publish")
	}
	// The same bytes again: no second upload.
	f.put = func(string) error { return errors.New("uploaded twice") }
	_, err = e.publish(t, b, "/b.jar", "the bytes")
	noErr(t, err)
}

func TestRemoteSecondNodeStreamsFromTheBucket(t *testing.T) {
	e := newRemoteEnv(t)
	a, b := e.node(t, nil, 1<<20), e.node(t, nil, 1<<20)
	content := strings.Repeat("artifact bytes ", 10000)
	ent, err := e.publish(t, a, "/g/a/1/a-1.jar", content)
	noErr(t, err)
	if exists(b.Path(ent.SHA256)) {
		t.Fatal("node B has the file before it was asked")
	}
	got, err := readRemote(b, ent.SHA256, ent.Size)
	noErr(t, err)
	if string(got) != content {
		t.Fatalf("B streamed %d bytes, not the published ones", len(got))
	}
	if !exists(b.Path(ent.SHA256)) {
		t.Fatal("a complete remote read did not fill B's local tier")
	}
	if n, bytes := b.Stats(); n != 1 || bytes != ent.Size {
		t.Fatalf("B Stats = %d, %d", n, bytes)
	}
	if used, _ := b.LocalCache(); used != ent.Size {
		t.Fatalf("B's tier counts %d bytes, want %d", used, ent.Size)
	}
	// A missing object is ErrNotFound (the proxy then fetches the file
	// from its upstream again).
	if _, err := b.OpenRemote(context.Background(), sha("never stored"), 3); !errors.Is(err, objects.ErrNotFound) {
		t.Fatalf("OpenRemote of a missing object: %v", err)
	}
	// A reader closed early keeps nothing.
	noErr(t, os.Remove(b.Path(ent.SHA256)))
	r, err := b.OpenRemote(context.Background(), ent.SHA256, ent.Size)
	noErr(t, err)
	io.CopyN(io.Discard, r, 10)
	r.Close()
	tmp, _ := os.ReadDir(b.TempDir())
	if len(tmp) != 0 {
		t.Fatalf("temp files left after an early close: %v", tmp)
	}
}

func TestRemoteLocalTierStaysWithinBudget(t *testing.T) {
	e := newRemoteEnv(t)
	const size, budget = 1000, 10_500
	a, b := e.node(t, nil, budget), e.node(t, nil, budget)
	var ents []CacheEntry
	for i := range 50 {
		content := fmt.Sprintf("%04d", i) + strings.Repeat("x", size-4)
		ent, err := e.publish(t, a, fmt.Sprintf("/f/%d.jar", i), content)
		noErr(t, err)
		ents = append(ents, ent)
		got, err := readRemote(b, ent.SHA256, ent.Size)
		noErr(t, err)
		if string(got) != content {
			t.Fatalf("blob %d: wrong bytes from the bucket", i)
		}
		// Keep blob 0 hot on A: the LRU must spare it.
		a.Touch(ents[0].SHA256)
		for name, n := range map[string]*blob.Store{"A": a, "B": b} {
			if disk := dirBytes(t, n); disk > budget {
				t.Fatalf("after %d blobs node %s holds %d bytes of blob files, budget %d", i+1, name, disk, budget)
			}
			if used, _ := n.LocalCache(); used > budget {
				t.Fatalf("node %s's tier counts %d bytes", name, used)
			}
		}
	}
	if !exists(a.Path(ents[0].SHA256)) {
		t.Fatal("the most recently used blob was evicted")
	}
	if exists(a.Path(ents[1].SHA256)) {
		t.Fatal("a cold blob was kept over the budget")
	}
	// Every blob is still served: evicted ones from the bucket.
	for i, ent := range ents {
		if _, err := readRemote(a, ent.SHA256, ent.Size); err != nil {
			t.Fatalf("blob %d after eviction: %v", i, err)
		}
	}
	// A restart (Sweep) reads the tier back within the budget.
	b2, err := blob.OpenTiered(filepath.Dir(a.TempDir()), blob.TieredOptions{Objects: e.obj, LocalCacheBytes: 3000})
	noErr(t, err)
	sw, err := e.s.SweepBlobs(b2)
	noErr(t, err)
	if sw.Bytes > 3000 || dirBytes(t, b2) > 3000 {
		t.Fatalf("after a restart with a smaller budget: %+v, %d bytes on disk", sw, dirBytes(t, b2))
	}
}

func dirBytes(t testing.TB, b *blob.Store) int64 {
	var n int64
	filepath.Walk(filepath.Join(filepath.Dir(b.TempDir()), "blobs", "sha256"), func(_ string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			n += fi.Size()
		}
		return nil
	})
	return n
}

// A damaged object is never served whole and never becomes a local file.
func TestRemoteCorruptObjectIsNeverServed(t *testing.T) {
	e := newRemoteEnv(t)
	a, b := e.node(t, nil, 1<<20), e.node(t, nil, 1<<20)
	content := strings.Repeat("0123456789", 5000)
	ent, err := e.publish(t, a, "/c.jar", content)
	noErr(t, err)
	ctx := context.Background()

	// Same size, other bytes: the read fails before its last bytes.
	bad := []byte(content)
	bad[100] ^= 1
	noErr(t, e.obj.Put(ctx, blob.ObjectKey(ent.SHA256), bytes.NewReader(bad), int64(len(bad))))
	got, err := readRemote(b, ent.SHA256, ent.Size)
	if !errors.Is(err, blob.ErrObjectMismatch) || int64(len(got)) >= ent.Size {
		t.Fatalf("a corrupt object read as %d of %d bytes, err %v", len(got), ent.Size, err)
	}
	if exists(b.Path(ent.SHA256)) {
		t.Fatal("a corrupt object became a local file")
	}
	// It was deleted, so the next miss refetches from the upstream.
	if _, ok := e.object(t, ent.SHA256); ok {
		t.Fatal("the corrupt object was kept")
	}

	// Truncated: announced shorter than the index says, refused up front
	// as missing.
	noErr(t, e.obj.Put(ctx, blob.ObjectKey(ent.SHA256), strings.NewReader(content[:100]), 100))
	if _, err := b.OpenRemote(ctx, ent.SHA256, ent.Size); !errors.Is(err, objects.ErrNotFound) || !errors.Is(err, blob.ErrObjectMismatch) {
		t.Fatalf("OpenRemote of a truncated object: %v", err)
	}

	// Cut mid-body (the bucket went away): an error, no local file.
	noErr(t, e.obj.Put(ctx, blob.ObjectKey(ent.SHA256), strings.NewReader(content), int64(len(content))))
	c := e.node(t, &faultyObjects{Store: e.obj, getCut: 1000}, 1<<20)
	got, err = readRemote(c, ent.SHA256, ent.Size)
	if !errors.Is(err, objects.ErrUnavailable) || len(got) != 1000 {
		t.Fatalf("a cut read: %d bytes, %v", len(got), err)
	}
	if exists(c.Path(ent.SHA256)) {
		t.Fatal("a cut read became a local file")
	}
	tmp, _ := os.ReadDir(c.TempDir())
	if len(tmp) != 0 {
		t.Fatalf("temp files left: %v", tmp)
	}
	if used, _ := c.LocalCache(); used != 0 {
		t.Fatalf("tier counts %d bytes after a cut read", used)
	}
}

func TestRemoteOrphansSweptAfterGrace(t *testing.T) {
	e := newRemoteEnv(t)
	a := e.node(t, nil, 1<<20)
	kept, err := e.publish(t, a, "/kept.jar", "referenced")
	noErr(t, err)
	// A node that died between its upload and its commit.
	orphan := sha("orphaned")
	noErr(t, e.obj.Put(context.Background(), blob.ObjectKey(orphan), strings.NewReader("orphaned"), 8))
	// Not blob-shaped: left alone.
	noErr(t, e.obj.Put(context.Background(), "sha256/zz/other", strings.NewReader("x"), 1))

	r, err := e.s.sweepOrphans(context.Background(), a)
	noErr(t, err)
	if r.Removed != 0 || r.Objects != 3 {
		t.Fatalf("sweep within the grace: %+v", r)
	}
	if _, ok := e.object(t, orphan); !ok {
		t.Fatal("an orphan younger than the grace was deleted")
	}
	e.clock.Advance(time.Hour + time.Minute)
	r, err = e.s.sweepOrphans(context.Background(), a)
	noErr(t, err)
	if r.Removed != 1 || r.RemovedBytes != 8 {
		t.Fatalf("sweep after the grace: %+v", r)
	}
	if _, ok := e.object(t, orphan); ok {
		t.Fatal("the orphan survived the grace")
	}
	if _, ok := e.object(t, kept.SHA256); !ok {
		t.Fatal("a referenced object was deleted")
	}
	if _, err := e.obj.Stat(context.Background(), "sha256/zz/other"); err != nil {
		t.Fatalf("a key that is not a blob's was touched: %v", err)
	}

	// Collect runs the sweep too (every quarter of the grace), and deletes
	// the objects of collected entries.
	e.clock.Set(time.Now().UTC())
	noErr(t, e.obj.Put(context.Background(), blob.ObjectKey(orphan), strings.NewReader("orphaned"), 8))
	noErr(t, e.s.DeleteCacheEntry(e.up, "/kept.jar"))
	c, err := e.s.CollectBlobs(a, 100)
	noErr(t, err)
	if c.Entries != 1 || c.BlobsRemoved != 1 {
		t.Fatalf("Collect = %+v", c)
	}
	if _, ok := e.object(t, kept.SHA256); ok {
		t.Fatal("Collect left the object of a destroyed entry")
	}
	if exists(a.Path(kept.SHA256)) {
		t.Fatal("Collect left the local file")
	}
	e.clock.Advance(16 * time.Minute)
	c, err = e.s.CollectBlobs(a, 100)
	noErr(t, err)
	if c.BlobsRemoved != 0 { // the new orphan is younger than the grace
		t.Fatalf("Collect removed %d objects within the grace", c.BlobsRemoved)
	}
	e.clock.Advance(time.Hour)
	c, err = e.s.CollectBlobs(a, 100)
	noErr(t, err)
	if c.BlobsRemoved != 1 {
		t.Fatalf("Collect after the grace = %+v", c)
	}
}

// Node B publishes bytes whose object it found present, while node A's
// collector reaps the same digest (its last entry was deleted): with the
// cluster lock, A's reap waits for B's commit and then sees the reference,
// so the object B's entry points at stays.
func TestRemoteReapWaitsForPublishOnAnotherNode(t *testing.T) {
	e := newRemoteEnv(t)
	content := "shared between nodes"
	digest := sha(content)
	statted := make(chan struct{})
	proceed := make(chan struct{})
	var once sync.Once
	fb := &faultyObjects{Store: e.obj, stat: func(key string) {
		if key == blob.ObjectKey(digest) {
			once.Do(func() { close(statted); <-proceed })
		}
	}}
	a, b := e.node(t, nil, 1<<20), e.node(t, fb, 1<<20)
	_, err := e.publish(t, a, "/old.jar", content)
	noErr(t, err)
	noErr(t, e.s.DeleteCacheEntry(e.up, "/old.jar"))

	published := make(chan error, 1)
	go func() { _, err := e.publish(t, b, "/new.jar", content); published <- err }()
	<-statted // B saw the object and holds the digest's lock

	waiting := make(chan struct{})
	var wonce sync.Once
	e.locks.mu.Lock()
	e.locks.onLock = func(key string) {
		if key == "registryd:blob:"+digest {
			wonce.Do(func() { close(waiting) })
		}
	}
	e.locks.mu.Unlock()
	collected := make(chan CollectResult, 1)
	go func() { r, err := e.s.CollectBlobs(a, 100); noErr(t, err); collected <- r }()
	<-waiting // A's reap asks for the lock B holds
	close(proceed)
	noErr(t, <-published)
	r := <-collected
	if r.Entries != 1 || r.BlobsRemoved != 0 {
		t.Fatalf("Collect = %+v: it removed a blob B had just published", r)
	}
	if _, ok := e.object(t, digest); !ok {
		t.Fatal("the object of B's new entry was deleted")
	}
	got, err := readRemote(a, digest, int64(len(content)))
	noErr(t, err)
	if string(got) != content {
		t.Fatal("wrong bytes")
	}
}

func TestOpenTieredValidates(t *testing.T) {
	if _, err := blob.OpenTiered(t.TempDir(), blob.TieredOptions{LocalCacheBytes: 1}); err == nil {
		t.Fatal("no object store accepted")
	}
	if _, err := blob.OpenTiered(t.TempDir(), blob.TieredOptions{Objects: &faultyObjects{}}); err == nil {
		t.Fatal("no local cache size accepted")
	}
	b, err := blob.Open(t.TempDir(), blob.Options{})
	noErr(t, err)
	if _, err := b.OpenRemote(context.Background(), sha("x"), 1); !errors.Is(err, blob.ErrNotRemote) {
		t.Fatalf("OpenRemote on disk blobs: %v", err)
	}
	b.Touch(sha("x")) // a no-op
}
