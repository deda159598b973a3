package store

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"registryd/store/blob"
)

// blobEnv is a store with one registry and upstream, and a blob store.
type blobEnv struct {
	s  *Store
	b  *blob.Store
	up int64
}

func newBlobEnv(t *testing.T) blobEnv {
	t.Helper()
	s, _ := openTest(t)
	b, err := blob.Open(t.TempDir(), blob.Options{}) // not s.Path()'s dir: on another testEngine, Path is a DSN
	noErr(t, err)
	g := topGroup(t, s, "acme")
	r := ok(s.CreateRegistry(g.ID, "main", ""))(t)
	u := up(t, s, r.ID, "https://repo.example.com/maven2")
	return blobEnv{s: s, b: b, up: u.ID}
}

// finished writes content to a new blob writer in two chunks and finishes it.
func (e blobEnv) finished(t testing.TB, content string) (*blob.Writer, blob.Digests) {
	t.Helper()
	w, err := e.b.Create()
	noErr(t, err)
	half := len(content) / 2
	for _, part := range []string{content[:half], content[half:]} {
		if _, err := w.Write([]byte(part)); err != nil {
			t.Fatal(err)
		}
	}
	d, err := w.Finish()
	noErr(t, err)
	return w, d
}

func (e blobEnv) publish(t testing.TB, rel, content string) CacheEntry {
	t.Helper()
	out, err := e.tryPublish(rel, content)
	noErr(t, err)
	return out
}

// tryPublish is publish for goroutines other than the test's.
func (e blobEnv) tryPublish(rel, content string) (CacheEntry, error) {
	w, err := e.b.Create()
	if err != nil {
		return CacheEntry{}, err
	}
	if _, err := w.Write([]byte(content)); err != nil {
		return CacheEntry{}, err
	}
	d, err := w.Finish()
	if err != nil {
		return CacheEntry{}, err
	}
	return e.s.Publish(e.b, w, d, CacheEntry{UpstreamID: e.up, RelativePath: rel, ContentType: "text/plain"})
}

func TestPublishStoresEqualBytesOnce(t *testing.T) {
	e := newBlobEnv(t)
	a := e.publish(t, "/g/a/1/a-1.jar", "same bytes")
	b := e.publish(t, "/g/b/1/b-1.jar", "same bytes")
	if a.SHA256 != sha("same bytes") || b.SHA256 != a.SHA256 || a.Size != 10 || a.SHA1 == "" || a.MD5 == "" || a.SHA512 == "" {
		t.Fatalf("entries = %+v, %+v", a, b)
	}
	if n, bytes := e.b.Stats(); n != 1 || bytes != 10 {
		t.Fatalf("Stats = %d blobs, %d bytes; want 1, 10", n, bytes)
	}
	path := e.b.Path(a.SHA256)
	if want := filepath.Join("blobs", "sha256", a.SHA256[:2], a.SHA256[2:4], a.SHA256); !filepath.IsAbs(path) ||
		path[len(path)-len(want):] != want {
		t.Fatalf("blob path %s does not end in %s", path, want)
	}
	raw, err := os.ReadFile(path)
	noErr(t, err)
	if string(raw) != "same bytes" {
		t.Fatalf("blob holds %q", raw)
	}
	tmp, _ := os.ReadDir(e.b.TempDir())
	if len(tmp) != 0 {
		t.Fatalf("tmp holds %d files after publishing", len(tmp))
	}
}

func TestPublishReplacingFreesTheOldBlob(t *testing.T) {
	e := newBlobEnv(t)
	e.publish(t, "/g/a/1/a-1.jar", "version one")
	e.publish(t, "/g/b/1/b-1.jar", "version one")
	old := e.b.Path(sha("version one"))

	// a changes upstream: the old bytes are still b's.
	e.publish(t, "/g/a/1/a-1.jar", "version two")
	if !exists(old) {
		t.Fatal("old blob removed while another entry refers to it")
	}
	// b changes too: nothing refers to the old bytes any more.
	e.publish(t, "/g/b/1/b-1.jar", "version two")
	if exists(old) {
		t.Fatal("old blob kept after its last entry was replaced")
	}
	if n, _ := e.b.Stats(); n != 1 {
		t.Fatalf("Stats = %d blobs, want 1", n)
	}
}

func TestPublishFailureLeavesNoBlob(t *testing.T) {
	e := newBlobEnv(t)
	w, d := e.finished(t, "orphan to be")
	_, err := e.s.Publish(e.b, w, d, CacheEntry{UpstreamID: 999, RelativePath: "/x.jar"})
	if err == nil {
		t.Fatal("Publish for an unknown upstream succeeded")
	}
	if exists(e.b.Path(d.SHA256)) {
		t.Fatal("blob file left behind by a failed publish")
	}
	if n, _ := e.b.Stats(); n != 0 {
		t.Fatalf("Stats = %d blobs, want 0", n)
	}
	if _, err := e.s.Publish(e.b, w, d, CacheEntry{UpstreamID: e.up, RelativePath: "/x.jar"}); err == nil {
		t.Fatal("a writer was published twice")
	}
}

func TestCollectRemovesUnreferencedBlobs(t *testing.T) {
	e := newBlobEnv(t)
	a := e.publish(t, "/g/a/1/a-1.jar", "shared")
	e.publish(t, "/g/b/1/b-1.jar", "shared")
	c := e.publish(t, "/g/c/1/c-1.jar", "alone!")

	noErr(t, e.s.DeleteCacheEntry(e.up, "/g/a/1/a-1.jar"))
	noErr(t, e.s.DeleteCacheEntry(e.up, "/g/c/1/c-1.jar"))
	r, err := e.s.CollectBlobs(e.b, 100)
	noErr(t, err)
	if r.Entries != 2 || r.BlobsRemoved != 1 || r.BytesFreed != 6 {
		t.Fatalf("Collect = %+v, want 2 entries, 1 blob, 6 bytes", r)
	}
	if !exists(e.b.Path(a.SHA256)) {
		t.Fatal("blob still referenced by b was removed")
	}
	if exists(e.b.Path(c.SHA256)) {
		t.Fatal("unreferenced blob kept")
	}
	if r, _ := e.s.CollectBlobs(e.b, 100); r.Entries != 0 {
		t.Fatalf("second Collect destroyed %d entries", r.Entries)
	}
}

// TestCollectSparesARepublishedBlob plays the race between the collector and
// a fill step by step: the collector's commit drops the last reference, a
// fill publishes the same bytes, and only then does the collector get to the
// file. The file must stay.
func TestCollectSparesARepublishedBlob(t *testing.T) {
	e := newBlobEnv(t)
	a := e.publish(t, "/g/a/1/a-1.jar", "popular bytes")
	noErr(t, e.s.DeleteCacheEntry(e.up, "/g/a/1/a-1.jar"))
	col, err := e.s.CollectPending(10)
	noErr(t, err)
	if len(col.Unreferenced) != 1 || col.Unreferenced[0] != a.SHA256 {
		t.Fatalf("CollectPending = %+v", col)
	}
	e.publish(t, "/g/b/1/b-1.jar", "popular bytes")
	if removed, _ := e.s.reap(e.b, a.SHA256); removed {
		t.Fatal("the collector removed a blob a fill had just published")
	}
	if !exists(e.b.Path(a.SHA256)) {
		t.Fatal("blob file gone")
	}
	if n, _ := e.b.Stats(); n != 1 {
		t.Fatalf("Stats = %d blobs, want 1", n)
	}
}

// TestCollectPublishConcurrently runs fills of the same bytes against the
// collector and checks the invariant afterwards: every live entry's blob file
// exists.
func TestCollectPublishConcurrently(t *testing.T) {
	e := newBlobEnv(t)
	const rounds = 60
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for i := range rounds {
			rel := fmt.Sprintf("/g/a/%d/a-%d.jar", i%3, i%3)
			if _, err := e.tryPublish(rel, "contended bytes"); err != nil {
				t.Error(err)
				return
			}
			if i%2 == 0 {
				if err := e.s.DeleteCacheEntry(e.up, rel); err != nil {
					t.Error(err)
					return
				}
			}
		}
	}()
	go func() {
		defer wg.Done()
		for range rounds {
			if _, err := e.s.CollectBlobs(e.b, 4); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	wg.Wait()
	for i := range 3 {
		rel := fmt.Sprintf("/g/a/%d/a-%d.jar", i, i)
		ce, err := e.s.CacheEntry(e.up, rel)
		if err != nil {
			continue
		}
		if !exists(e.b.Path(ce.SHA256)) {
			t.Fatalf("entry %s is live but its blob file is gone", rel)
		}
	}
}

func TestSweepRemovesOrphans(t *testing.T) {
	e := newBlobEnv(t)
	kept := e.publish(t, "/g/a/1/a-1.jar", "kept bytes")
	orphan := sha("orphan bytes")
	noErr(t, os.MkdirAll(filepath.Dir(e.b.Path(orphan)), 0o750))
	noErr(t, os.WriteFile(e.b.Path(orphan), []byte("orphan bytes"), 0o600))
	stranger := filepath.Join(filepath.Dir(e.b.Path(orphan)), "README")
	noErr(t, os.WriteFile(stranger, []byte("not a blob"), 0o600))

	r, err := e.s.SweepBlobs(e.b)
	noErr(t, err)
	if r.Blobs != 1 || r.Bytes != 10 || r.Removed != 1 || r.RemovedBytes != 12 {
		t.Fatalf("Sweep = %+v", r)
	}
	if exists(e.b.Path(orphan)) || !exists(e.b.Path(kept.SHA256)) || !exists(stranger) {
		t.Fatal("Sweep removed the wrong files")
	}
	if n, bytes := e.b.Stats(); n != 1 || bytes != 10 {
		t.Fatalf("Stats = %d, %d after Sweep", n, bytes)
	}
}

func sha(content string) string {
	h := sha256.Sum256([]byte(content))
	return hex.EncodeToString(h[:])
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
