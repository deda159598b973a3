package proxy

import (
	"context"
	"os"
	"testing"

	"registryd/internal/testsvc"
	"registryd/store/blob"
)

// TestClusterMissingObjectRefetched: on a cluster, an entry whose object is
// missing from the bucket (and from the local tier) is fetched from its
// upstream again, as on a single node (TestRemoteLocalMissStreamsFromTheBucket),
// not answered "filled elsewhere" from the same gone object for ever.
func TestClusterMissingObjectRefetched(t *testing.T) {
	srv := testsvc.MinIO(t)
	obj := srv.NewObjects(t, "")
	envBlobOpeners.Store(t, func(dir string) (*blob.Store, error) {
		return blob.OpenTiered(dir, blob.TieredOptions{Objects: obj, LocalCacheBytes: 64 << 20})
	})
	e, _, _ := clusterEnv(t)
	envBlobOpeners.Delete(t)
	up := newFakeUpstream(t)
	large := jarBytes(jarPath, 300<<10)
	up.set(jarPath, fakeFile{body: large})
	u := e.upstream(up.URL, nil, nil)
	e.get(jarPath).expect(t, 200)
	ent, _ := e.entry(u, "/"+jarPath)
	if err := os.Remove(e.blobs.Path(ent.SHA256)); err != nil {
		t.Fatal(err)
	}
	if err := obj.Delete(context.Background(), blob.ObjectKey(ent.SHA256)); err != nil {
		t.Fatal(err)
	}
	e.get(jarPath).expect(t, 200).expectBody(t, string(large))
	if n := up.calls(jarPath); n != 2 {
		t.Fatalf("upstream GETs = %d, want 2 (the fill, the refetch of the gone file)", n)
	}
	// Published again: the object is back, and the next hit needs nobody.
	if _, err := obj.Stat(context.Background(), blob.ObjectKey(ent.SHA256)); err != nil {
		t.Fatalf("the refetched file's object: %v", err)
	}
	e.get(jarPath).expect(t, 200).expectBody(t, string(large))
	if n := up.calls(jarPath); n != 2 {
		t.Fatalf("upstream GETs = %d after the refetch, want 2", n)
	}
}
