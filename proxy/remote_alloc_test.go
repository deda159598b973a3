//go:build !race

package proxy

import (
	"strconv"
	"testing"

	"github.com/valyala/fasthttp"
)

// TestRemoteHitAllocations: with remote blobs, a hit from the local tier
// (which stamps the tier's LRU) allocates no more than with disk blobs:
// nothing for a file from the memory cache, and the same as on a single
// node for one sent from its file (os.Open's).
func TestRemoteHitAllocations(t *testing.T) {
	remote, _, _ := newRemoteEnv(t)
	disk := newEnv(t)
	small := "org/example/lib/1.0/lib-1.0.pom"
	for _, p := range []string{jarPath, small} {
		got, want := hitAllocs(t, remote, p), hitAllocs(t, disk, p)
		if got > want || (p == small && got > 0) {
			t.Fatalf("%s: a hit allocates %.1f times with remote blobs, %.1f with disk blobs", p, got, want)
		}
	}
}

func hitAllocs(t *testing.T, e *env, p string) float64 {
	up := newFakeUpstream(t)
	size := 300 << 10 // beyond the memory cache
	if p != jarPath {
		size = 1000
	}
	up.set(p, fakeFile{body: jarBytes(p, size)})
	e.upstream(up.URL, nil, nil)
	e.get(p).expect(t, 200)
	uri := "/api/v4/virtual_registries/packages/maven/" + strconv.FormatInt(e.registry, 10) + "/" + p
	var ctx fasthttp.RequestCtx
	hit := func() {
		ctx.Request.Reset()
		ctx.Response.Reset()
		ctx.Request.Header.SetMethod(fasthttp.MethodGet)
		ctx.Request.SetRequestURI(uri)
		ctx.Request.Header.Set("Private-Token", rootToken)
		e.srv.handle(&ctx)
		if ctx.Response.StatusCode() != fasthttp.StatusOK {
			t.Fatalf("status %d: %s", ctx.Response.StatusCode(), ctx.Response.Body())
		}
		if c, ok := ctx.Response.BodyStream().(interface{ Close() error }); ok {
			c.Close() // the file's descriptor, as fasthttp closes it once written
		}
	}
	hit()
	return testing.AllocsPerRun(200, hit)
}
