package proxy

import (
	"context"
	"testing"

	"registryd/internal/fakecluster"
	"registryd/internal/testsvc"
	"registryd/store"
	"registryd/store/blob"
)

// The download path of a cluster node differs from a single node's: the
// fill holds the cluster's lease and re-reads its entry under it, and a
// publish uploads to the bucket before the index commit. Every upstream
// fault class runs there too, and noBrokenState checks the bucket as well:
// no object is left that no entry refers to.

func TestBadAnswersOnAClusterMiss(t *testing.T) { badAnswersOnAMiss(t, clusterFaultEnv) }

func TestBadAnswersOnAClusterRevalidation(t *testing.T) {
	badAnswersOnARevalidation(t, clusterFaultEnv)
}

// clusterFaultEnv is envFor on a cluster node: a fake cluster for the fill
// lease and the messages, and remote blobs in a fresh bucket of a real
// MinIO.
func clusterFaultEnv(t *testing.T, c badAnswer) *env {
	srv := testsvc.MinIO(t)
	obj := srv.NewObjects(t, "")
	b := fakecluster.New()
	t.Cleanup(b.Close)
	node := b.Node("a")
	var st *store.Store
	envBlobOpeners.Store(t, func(dir string) (*blob.Store, error) {
		return blob.OpenTiered(dir, blob.TieredOptions{Objects: obj, LocalCacheBytes: 64 << 20,
			Lock: func(ctx context.Context, key string) (func(), error) { return st.Lease(ctx, key) }})
	})
	defer envBlobOpeners.Delete(t)
	var e *env
	if c.cfg != nil {
		e = newEnvStore(t, store.Options{Cluster: node}, c.cfg)
	} else {
		e = newEnvStore(t, store.Options{Cluster: node})
	}
	st, e.objects = e.st, obj
	return e
}
