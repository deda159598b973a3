package store

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"registryd/store/blob"
)

// Over a bucket: a bad local file whose object is sound is quarantined and
// its entries stay (the next read fetches the object); a node that does not
// hold the bucket's scrub reads no object; a missing object drops its
// entries.
func TestScrubOverABucket(t *testing.T) {
	e := newRemoteEnv(t)
	b := e.node(t, nil, 1<<20)
	rot, err := e.publish(t, b, "/g/a/1/a.jar", "local copy will rot")
	noErr(t, err)
	gone, err := e.publish(t, b, "/g/b/1/b.jar", "object will vanish")
	noErr(t, err)
	flipByte(t, b.Path(rot.SHA256))
	noErr(t, e.obj.Delete(context.Background(), blob.ObjectKey(gone.SHA256)))

	// A node whose lease is refused checks its local files only.
	lim := &countingLimiter{}
	local := e.s.NewScrubber(b, ScrubOptions{Limiter: lim, QuarantineMaxBytes: 1 << 20,
		Shared: func() (func(), bool) { return func() {}, false }})
	cyc := local.Run(context.Background())
	if cyc.Bucket || len(cyc.Corrupt) != 1 || len(cyc.Missing) != 0 || cyc.Checked != 2 {
		t.Fatalf("local cycle = %+v", cyc)
	}
	c := cyc.Corrupt[0]
	if c.SHA256 != rot.SHA256 || c.Tier != "local" || len(c.Entries) != 0 || c.Quarantined != filepath.Join(b.QuarantineDir(), rot.SHA256) {
		t.Fatalf("finding = %+v", c)
	}
	if _, err := e.s.CacheEntry(e.up, "/g/a/1/a.jar"); err != nil {
		t.Fatalf("the entry of a sound object was dropped: %v", err)
	}
	if got, err := readRemote(b, rot.SHA256, rot.Size); err != nil || string(got) != "local copy will rot" {
		t.Fatalf("read after the quarantine: %q, %v", got, err)
	}
	if _, err := os.Stat(b.Path(rot.SHA256)); err != nil {
		t.Fatalf("the read did not place a sound local copy again: %v", err)
	}

	// The node that scrubs the bucket finds the missing object.
	cyc = e.s.NewScrubber(b, ScrubOptions{Limiter: lim, QuarantineMaxBytes: 1 << 20}).Run(context.Background())
	if !cyc.Bucket || len(cyc.Corrupt) != 0 || len(cyc.Missing) != 1 {
		t.Fatalf("bucket cycle = %+v", cyc)
	}
	m := cyc.Missing[0]
	if m.SHA256 != gone.SHA256 || m.Tier != "bucket" || len(m.Entries) != 1 || !strings.HasSuffix(m.Entries[0].RelativePath, "b.jar") {
		t.Fatalf("missing = %+v", m)
	}
	if _, err := e.s.CacheEntry(e.up, "/g/b/1/b.jar"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the entry of a missing object: %v", err)
	}
	if _, err := e.s.CollectBlobs(b, 100); err != nil || refCount(t, e.s, gone.SHA256) != 0 || refCount(t, e.s, rot.SHA256) != 1 {
		t.Fatalf("collect: %v; refs %d, %d", err, refCount(t, e.s, gone.SHA256), refCount(t, e.s, rot.SHA256))
	}
}

// A rotten object is deleted and its entries dropped; a refill uploads it
// again.
func TestScrubDeletesARottenObject(t *testing.T) {
	e := newRemoteEnv(t)
	b := e.node(t, nil, 1<<20)
	ent, err := e.publish(t, b, "/g/a/1/a.jar", "object will rot")
	noErr(t, err)
	// Only the object rots: this node's local copy is removed first, as
	// on a node that never read it.
	unlock, err := b.Lock(context.Background(), ent.SHA256)
	noErr(t, err)
	_, err = b.Quarantine(ent.SHA256, 0)
	unlock()
	noErr(t, err)
	noErr(t, e.obj.Put(context.Background(), blob.ObjectKey(ent.SHA256), strings.NewReader("object will rOt"), ent.Size))

	cyc := e.s.NewScrubber(b, ScrubOptions{Limiter: &countingLimiter{}}).Run(context.Background())
	if len(cyc.Corrupt) != 1 || cyc.Corrupt[0].Tier != "bucket" || len(cyc.Corrupt[0].Entries) != 1 || cyc.Checked != 1 {
		t.Fatalf("cycle = %+v", cyc)
	}
	if _, ok := e.object(t, ent.SHA256); ok {
		t.Fatal("the rotten object is still there")
	}
	again, err := e.publish(t, b, "/g/a/1/a.jar", "object will rot")
	noErr(t, err)
	if i, ok := e.object(t, again.SHA256); !ok || i.Size != ent.Size {
		t.Fatalf("the refill did not upload the object again: %+v %v", i, ok)
	}
}
