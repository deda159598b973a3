//go:build !race

package proxy

import (
	"io"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// TestAccessLogAllocations: encoding and queueing a line allocates nothing
// (after the first batches exist), in either format; nor does a cache hit
// with the access log on. (The race detector allocates, hence the tag.)
func TestAccessLogAllocations(t *testing.T) {
	for _, json := range []bool{false, true} {
		l, err := startAccessLog(io.Discard, json, nil, nil, time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		r := fullRecord()
		r.UA = "quoted \"UA\" with\ttab and é and \xff"
		write := func() { l.write(&r) }
		for range 1000 {
			write()
		}
		if got := testing.AllocsPerRun(2000, write); got != 0 {
			t.Errorf("json=%v: a line allocates %.1f times", json, got)
		}
		l.close()
	}

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
