package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"sync"
	"testing"

	"registryd/internal/testsvc"
	"registryd/store/blob"
	"registryd/store/objects"
)

// envBlobOpeners lets a test open its env's blobs another way (newEnv).
var envBlobOpeners sync.Map // testing.TB -> func(dir string) (*blob.Store, error)

// newRemoteEnv is newEnv with its blobs in a bucket of the test MinIO.
func newRemoteEnv(t *testing.T) (*env, *objects.S3, *testsvc.S3) {
	t.Helper()
	srv := testsvc.MinIO(t)
	obj := srv.NewObjects(t, "")
	envBlobOpeners.Store(t, func(dir string) (*blob.Store, error) {
		return blob.OpenTiered(dir, blob.TieredOptions{Objects: obj, LocalCacheBytes: 64 << 20})
	})
	defer envBlobOpeners.Delete(t)
	return newEnv(t), obj, srv
}

// A hit whose local file is gone (evicted, or filled on another node)
// streams from the bucket and fills the local tier: no upstream request.
// Only when the object is gone too is the file fetched again.
func TestRemoteLocalMissStreamsFromTheBucket(t *testing.T) {
	e, obj, _ := newRemoteEnv(t)
	up := newFakeUpstream(t)
	large := jarBytes(jarPath, 300<<10) // beyond the memory cache: streamed
	pom := strings.Replace(jarPath, ".jar", ".pom", 1)
	small := jarBytes(pom, 2000)
	up.set(jarPath, fakeFile{body: large})
	up.set(pom, fakeFile{body: small})
	u := e.upstream(up.URL, nil, nil)
	e.get(jarPath).expect(t, 200)
	e.get(pom).expect(t, 200)
	ent, _ := e.entry(u, "/"+jarPath)
	if _, err := obj.Stat(context.Background(), blob.ObjectKey(ent.SHA256)); err != nil {
		t.Fatalf("the filled file is not in the bucket: %v", err)
	}

	for _, c := range []struct {
		path string
		body []byte
	}{{jarPath, large}, {pom, small}} {
		ent, _ := e.entry(u, "/"+c.path)
		if err := os.Remove(e.blobs.Path(ent.SHA256)); err != nil {
			t.Fatal(err)
		}
		e.get(c.path).expect(t, 200).expectBody(t, string(c.body))
		if _, err := os.Stat(e.blobs.Path(ent.SHA256)); err != nil {
			t.Fatalf("%s: the local miss did not fill the local tier: %v", c.path, err)
		}
		// A Range of a local miss: fetched, then served.
		if err := os.Remove(e.blobs.Path(ent.SHA256)); err != nil {
			t.Fatal(err)
		}
		e.get(c.path, "Range", "bytes=100-199").expect(t, 206).expectBody(t, string(c.body[100:200]))
	}
	if n := up.calls(jarPath) + up.calls(pom); n != 2 {
		t.Fatalf("upstream GETs = %d, want 2 (the fills only)", n)
	}

	// The object gone too: the file is fetched from its upstream again
	// and republished.
	if err := os.Remove(e.blobs.Path(ent.SHA256)); err != nil {
		t.Fatal(err)
	}
	if err := obj.Delete(context.Background(), blob.ObjectKey(ent.SHA256)); err != nil {
		t.Fatal(err)
	}
	e.get(jarPath).expect(t, 200).expectBody(t, string(large))
	if up.calls(jarPath) != 2 {
		t.Fatalf("upstream GETs of the jar = %d, want 2", up.calls(jarPath))
	}
	if _, err := obj.Stat(context.Background(), blob.ObjectKey(ent.SHA256)); err != nil {
		t.Fatalf("the refetched file was not republished to the bucket: %v", err)
	}
}

// A damaged object is never served whole: the response ends short and the
// next request fetches the file from its upstream again.
func TestRemoteCorruptObjectCutsTheResponse(t *testing.T) {
	e, obj, _ := newRemoteEnv(t)
	up := newFakeUpstream(t)
	large := jarBytes(jarPath, 300<<10)
	up.set(jarPath, fakeFile{body: large})
	u := e.upstream(up.URL, nil, nil)
	e.get(jarPath).expect(t, 200)
	ent, _ := e.entry(u, "/"+jarPath)
	bad := bytes.Clone(large)
	bad[len(bad)-1] ^= 1
	if err := obj.Put(context.Background(), blob.ObjectKey(ent.SHA256), bytes.NewReader(bad), int64(len(bad))); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(e.blobs.Path(ent.SHA256)); err != nil {
		t.Fatal(err)
	}
	r := e.get(jarPath)
	if r.readErr == nil || len(r.body) >= len(large) {
		t.Fatalf("a damaged object was served whole: status %d, %d bytes, err %v", r.status, len(r.body), r.readErr)
	}
	if _, err := os.Stat(e.blobs.Path(ent.SHA256)); err == nil {
		t.Fatal("a damaged object became the local file")
	}
	e.get(jarPath).expect(t, 200).expectBody(t, string(large))
	if up.calls(jarPath) != 2 {
		t.Fatalf("upstream GETs = %d, want 2", up.calls(jarPath))
	}
}

// A bucket that is away answers a local miss with 503 and the reason;
// hits from the local tier go on.
func TestRemoteBucketOutageAnswers503(t *testing.T) {
	e, _, srv := newRemoteEnv(t)
	up := newFakeUpstream(t)
	other := strings.Replace(jarPath, "lib-1.0.jar", "lib-1.0-sources.jar", 1)
	up.set(jarPath, fakeFile{body: jarBytes(jarPath, 300<<10)})
	up.set(other, fakeFile{body: jarBytes(other, 1000)})
	u := e.upstream(up.URL, nil, nil)
	e.get(jarPath).expect(t, 200)
	e.get(other).expect(t, 200)
	ent, _ := e.entry(u, "/"+jarPath)
	if err := os.Remove(e.blobs.Path(ent.SHA256)); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	defer srv.Start()
	r := e.get(jarPath, "Accept", "application/problem+json")
	if r.status != 503 {
		t.Fatalf("status %d, want 503: %s", r.status, r.body)
	}
	var doc problemDoc
	if err := json.Unmarshal(r.body, &doc); err != nil || !strings.Contains(doc.Detail, "object storage not available: ") {
		t.Fatalf("problem body %s (%v)", r.body, err)
	}
	e.get(other).expect(t, 200) // a local hit
	if up.calls(jarPath) != 1 {
		t.Fatalf("an outage of the bucket went to the upstream: %d GETs", up.calls(jarPath))
	}
	srv.Start()
	e.get(jarPath).expect(t, 200)
}
