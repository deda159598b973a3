//go:build !race

package proxy

import (
	"path/filepath"
	"strconv"
	"testing"

	"github.com/valyala/fasthttp"
)

// TestAccessLogAllocations: a cache hit with the access log on allocates
// nothing (a line alone: internal/accesslog's test). (The race detector
// allocates, hence the tag.)
func TestAccessLogAllocations(t *testing.T) {
	e := newEnv(t, func(o *envOptions) { o.accessLogPath = filepath.Join(t.TempDir(), "access.log") })
	up := newFakeUpstream(t)
	up.set(jarPath, fakeFile{body: jarBytes(jarPath, 1024)})
	e.upstream(up.URL, nil, nil)
	e.get(jarPath).expect(t, 200)
	if e.srv.alog == nil {
		t.Fatal("the access log is off")
	}
	uri := "/api/v4/virtual_registries/packages/maven/" + strconv.FormatInt(e.registry, 10) + "/" + jarPath
	var ctx fasthttp.RequestCtx
	hit := func() {
		ctx.Request.Reset()
		ctx.Response.Reset()
		ctx.Request.Header.SetMethod(fasthttp.MethodGet)
		ctx.Request.SetRequestURI(uri)
		ctx.Request.Header.Set("Private-Token", rootToken)
		ctx.Request.Header.Set("User-Agent", "Apache-Maven/3.9.6 (Java 21; Linux)")
		e.srv.handle(&ctx)
		if ctx.Response.StatusCode() != fasthttp.StatusOK {
			t.Fatalf("status %d: %s", ctx.Response.StatusCode(), ctx.Response.Body())
		}
	}
	for range 100 {
		hit()
	}
	if got := testing.AllocsPerRun(500, hit); got != 0 {
		t.Fatalf("a logged hit allocates %.1f times", got)
	}
}
