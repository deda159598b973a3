package clustercopy

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"registryd/store/blob"
	"registryd/store/kv"
)

// memObjects is an in-memory bucket. Put reads exactly size bytes, as an
// S3 client given the size does, and stores nothing when the reader fails.
type memObjects struct {
	mu   sync.Mutex
	objs map[string][]byte
	puts int
}

func newMemObjects() *memObjects { return &memObjects{objs: map[string][]byte{}} }

func (m *memObjects) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	buf := make([]byte, size)
	if _, err := io.ReadFull(r, buf); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.objs[key] = buf
	m.puts++
	return nil
}

func (m *memObjects) Delete(ctx context.Context, key string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.objs, key)
	return nil
}

func (m *memObjects) List(ctx context.Context, prefix string, fn func(string, int64) error) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k, v := range m.objs {
		if strings.HasPrefix(k, prefix) {
			if err := fn(k, int64(len(v))); err != nil {
				return err
			}
		}
	}
	return nil
}

func put(t *testing.T, db kv.DB, bucket, k, v string) {
	t.Helper()
	if err := db.Update(func(tx kv.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte(bucket))
		if err != nil {
			return err
		}
		if v == "" {
			return b.Delete([]byte(k))
		}
		return b.Put([]byte(k), []byte(v))
	}); err != nil {
		t.Fatal(err)
	}
}

// source is a single node's index (meta with a key check, a few buckets,
// one with more keys than a batch, sequences) and blob files.
func source(t *testing.T) (*memDB, string, []string) {
	src := newMemDB("source")
	put(t, src, "meta", "key_check", "sealed-"+t.Name())
	put(t, src, "meta", "schema_version", "12")
	for i := range 10 {
		put(t, src, "cache_entries", fmt.Sprintf("k%03d", i), fmt.Sprintf("value %d", i))
	}
	put(t, src, "users", "1", `{"username":"root"}`)
	if err := src.Update(func(tx kv.Tx) error {
		if _, err := tx.CreateBucketIfNotExists([]byte("empty")); err != nil {
			return err
		}
		return tx.Bucket([]byte("users")).SetSequence(41)
	}); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "blobs", "sha256")
	var shas []string
	for i := range 3 {
		body := []byte(strings.Repeat(fmt.Sprint(i), 1000*(i+1)))
		sum := sha256.Sum256(body)
		sha := hex.EncodeToString(sum[:])
		p := filepath.Join(dir, sha[0:2], sha[2:4], sha)
		if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, body, 0o600); err != nil {
			t.Fatal(err)
		}
		shas = append(shas, sha)
	}
	return src, dir, shas
}

func TestMigrateCopiesAndVerifies(t *testing.T) {
	src, dir, shas := source(t)
	dst := newMemDB("dest")
	objs := newMemObjects()
	// One blob already in the bucket with its size (skipped), one with
	// another size (uploaded again).
	objs.objs[blob.ObjectKey(shas[0])] = make([]byte, 1000)
	objs.objs[blob.ObjectKey(shas[1])] = []byte("short")
	var log bytes.Buffer
	r, err := Run(context.Background(), Options{Source: src, Dest: dst, BlobDir: dir, Objects: objs, BatchKeys: 3, Log: &log})
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	if r.KeysCopied != 13 || r.Buckets != 4 || r.BlobsTotal != 3 || r.BlobsSkipped != 1 || r.BlobsUploaded != 2 {
		t.Errorf("result %+v", r)
	}
	if r.Batches != 4+1+1+1 { // cache_entries 10 keys in 3s, empty, meta, users
		t.Errorf("%d batches", r.Batches)
	}
	s, _ := Sums(src)
	d, _ := Sums(dst)
	if fmt.Sprint(s) != fmt.Sprint(d) || d["users"].Sequence != 41 || d["empty"].Keys != 0 {
		t.Errorf("sums differ:\n%v\n%v", s, d)
	}
	for _, sha := range shas[1:] { // shas[0]'s object had the right size: not read again
		got := objs.objs[blob.ObjectKey(sha)]
		if sum := sha256.Sum256(got); hex.EncodeToString(sum[:]) != sha {
			t.Errorf("object %s has the wrong bytes", sha)
		}
	}
	var state string
	dst.View(func(tx kv.Tx) error { state = string(tx.Bucket(ProgressBucket).Get(keyState)); return nil })
	if state != StateDone {
		t.Errorf("state %q", state)
	}

	// Running again verifies only.
	puts := objs.puts
	r, err = Run(context.Background(), Options{Source: src, Dest: dst, BlobDir: dir, Objects: objs})
	if err != nil || !r.AlreadyVerfied || r.KeysCopied != 0 || objs.puts != puts {
		t.Errorf("second run: %v %+v", err, r)
	}

	// A difference is found and named.
	put(t, dst, "cache_entries", "k004", "tampered")
	delete(objs.objs, blob.ObjectKey(shas[2]))
	r, err = Run(context.Background(), Options{Source: src, Dest: dst, BlobDir: dir, Objects: objs, Uploads: 1})
	// The missing blob is uploaded again (blobs are always brought up to
	// date); the tampered value is reported.
	if !errors.Is(err, ErrMismatch) || len(r.Mismatches) != 1 || !strings.Contains(r.Mismatches[0], "bucket cache_entries: the same 10 keys, but the keys or values differ") {
		t.Errorf("tampered: %v %q", err, r.Mismatches)
	}
}

func TestMigrateResumesAfterAKill(t *testing.T) {
	src, dir, _ := source(t)
	dst := newMemDB("dest")
	objs := newMemObjects()
	dst.failAfter = 3 // the claim and two batches commit, then the process dies
	_, err := Run(context.Background(), Options{Source: src, Dest: dst, BlobDir: dir, Objects: objs, BatchKeys: 3})
	if !errors.Is(err, errKilled) {
		t.Fatalf("first run: %v", err)
	}
	// The source changed meanwhile inside the copied range (the node was
	// started again by mistake): the resume converges on the range it
	// copies, and the verification catches the rest.
	dst.failAfter = 0
	var log bytes.Buffer
	r, err := Run(context.Background(), Options{Source: src, Dest: dst, BlobDir: dir, Objects: objs, BatchKeys: 3, Log: &log})
	if err != nil {
		t.Fatalf("resume: %v\n%s", err, log.String())
	}
	if !r.Resumed || r.KeysCopied != 13-6 {
		t.Errorf("resume copied %d keys (resumed %v), want the 7 not copied before\n%s", r.KeysCopied, r.Resumed, log.String())
	}
	if !strings.Contains(log.String(), `resuming after bucket "cache_entries", key "k005"`) {
		t.Errorf("log: %s", log.String())
	}
	if objs.puts != 3 {
		t.Errorf("%d uploads, want each blob once", objs.puts)
	}
}

func TestMigrateResumeConvergesOnAChangedSource(t *testing.T) {
	src, dir, _ := source(t)
	dst := newMemDB("dest")
	dst.failAfter = 2 // the claim and one batch (k000..k002)
	if _, err := Run(context.Background(), Options{Source: src, Dest: dst, BatchKeys: 3}); !errors.Is(err, errKilled) {
		t.Fatal(err)
	}
	put(t, src, "cache_entries", "k004", "")     // deleted after the kill, not copied yet
	put(t, src, "cache_entries", "k001", "")     // deleted after the kill, already copied
	put(t, src, "cache_entries", "k010", "late") // added
	dst.failAfter = 0
	r, err := Run(context.Background(), Options{Source: src, Dest: dst, BlobDir: dir, Objects: newMemObjects(), BatchKeys: 3})
	if !errors.Is(err, ErrMismatch) || len(r.Mismatches) != 1 || !strings.Contains(r.Mismatches[0], "cache_entries: 9 keys in the source, 10 in the destination") {
		t.Fatalf("a key deleted in the source inside a range already copied is found: %v %q", err, r.Mismatches)
	}
}

func TestMigrateRefusesAnotherInstallation(t *testing.T) {
	src, _, _ := source(t)
	dst := newMemDB("dest")
	put(t, dst, "meta", "key_check", "sealed-by-a-cluster-node")
	_, err := Run(context.Background(), Options{Source: src, Dest: dst})
	if !errors.Is(err, ErrOtherInstallation) || !strings.Contains(err.Error(), `its bucket "meta" has 1 keys and no migration of this source is recorded`) {
		t.Fatalf("a destination with data: %v", err)
	}

	other := newMemDB("other")
	put(t, other, "meta", "key_check", "another installation")
	dst = newMemDB("dest")
	dst.failAfter = 2
	Run(context.Background(), Options{Source: other, Dest: dst})
	dst.failAfter = 0
	_, err = Run(context.Background(), Options{Source: src, Dest: dst})
	if !errors.Is(err, ErrOtherInstallation) || !strings.Contains(err.Error(), "it holds a migration of installation") {
		t.Fatalf("a destination with another source's migration: %v", err)
	}

	_, err = Run(context.Background(), Options{Source: newMemDB("blank"), Dest: newMemDB("d")})
	if err == nil || !strings.Contains(err.Error(), "has no key check") {
		t.Fatalf("a source that is no registryd index: %v", err)
	}
}

func TestMigrateRefusesACorruptBlob(t *testing.T) {
	src, dir, shas := source(t)
	p := filepath.Join(dir, shas[1][0:2], shas[1][2:4], shas[1])
	body, _ := os.ReadFile(p)
	body[10] ^= 1
	os.WriteFile(p, body, 0o600)
	objs := newMemObjects()
	_, err := Run(context.Background(), Options{Source: src, Dest: newMemDB("d"), BlobDir: dir, Objects: objs, Uploads: 1})
	if !errors.Is(err, ErrCorruptBlob) || !strings.Contains(err.Error(), shas[1]) {
		t.Fatalf("corrupt blob: %v", err)
	}
	if _, ok := objs.objs[blob.ObjectKey(shas[1])]; ok {
		t.Error("the corrupt blob was stored")
	}
}
