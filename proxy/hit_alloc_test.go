//go:build !race

package proxy

import (
	"encoding/base64"
	"strconv"
	"testing"

	"github.com/valyala/fasthttp"
)

// TestHitAllocations pins the allocations of a cache hit in the handler:
// routing, path classification, cached authentication, cached registry and
// entry lookups, headers and the body. A PRIVATE-TOKEN hit allocates
// nothing; Basic credentials cost the one string their decoded form needs.
// (The race detector adds allocations of its own, hence the build tag.)
func TestHitAllocations(t *testing.T) {
	e := newEnv(t)
	up := newFakeUpstream(t)
	up.set(jarPath, fakeFile{body: jarBytes(jarPath, 1024)})
	e.upstream(up.URL, nil, nil)
	e.get(jarPath).expect(t, 200)
	uri := "/api/v4/virtual_registries/packages/maven/" + strconv.FormatInt(e.registry, 10) + "/" + jarPath
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte("root:"+rootToken))

	cases := []struct {
		name, header, value string
		uri                 string
		want                float64
	}{
		{"private token", "Private-Token", rootToken, uri, 0},
		{"basic", "Authorization", basic, uri, 1},
		{"checksum sidecar", "Private-Token", rootToken, uri + ".sha1", 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var ctx fasthttp.RequestCtx
			hit := func() {
				ctx.Request.Reset()
				ctx.Response.Reset()
				ctx.Request.Header.SetMethod(fasthttp.MethodGet)
				ctx.Request.SetRequestURI(tc.uri)
				ctx.Request.Header.Set(tc.header, tc.value)
				e.srv.handle(&ctx)
				if ctx.Response.StatusCode() != fasthttp.StatusOK {
					t.Fatalf("status %d: %s", ctx.Response.StatusCode(), ctx.Response.Body())
				}
			}
			hit() // warm the caches
			if got := testing.AllocsPerRun(200, hit); got > tc.want {
				t.Fatalf("a hit allocates %.1f times, want at most %.0f", got, tc.want)
			}
		})
	}
	if up.calls(jarPath) != 1 {
		t.Fatalf("upstream GETs = %d: the test did not measure hits", up.calls(jarPath))
	}
}
