package proxy

import (
	"errors"
	"strconv"
	"testing"

	"github.com/valyala/fasthttp"

	"registryd/maven"
)

// TestLookupRaceFetchesOnce: a request whose lookup missed just before a
// flight stored the file, and that comes to join after the flight ended,
// looks again and serves the stored entry instead of fetching it a second
// time.
func TestLookupRaceFetchesOnce(t *testing.T) {
	e := newEnv(t)
	up := newFakeUpstream(t)
	body := jarBytes(jarPath, 32<<10)
	up.set(jarPath, fakeFile{body: body})
	e.upstream(up.URL, nil, nil)

	// The late request's view of the world: the generation before the fill.
	gen := e.srv.st.CacheGeneration()
	reg, err := e.srv.registry(e.registry, gen)
	if err != nil {
		t.Fatal(err)
	}
	p, err := maven.Classify(jarPath)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := e.srv.lookup(reg, p.EntryRel(), gen); err != nil || v != nil {
		t.Fatalf("before the fill the lookup finds %v, %v", v, err)
	}
	// Another request fills the cache, and its flight ends.
	e.get(jarPath).expect(t, 200)

	var ctx fasthttp.RequestCtx
	ctx.Request.Header.SetMethod(fasthttp.MethodGet)
	ctx.Request.SetRequestURI("/api/v4/virtual_registries/packages/maven/" + strconv.FormatInt(e.registry, 10) + "/" + jarPath)
	x := &exchange{ctx: &ctx, request: request{reg: reg, path: p}}
	if _, err := e.srv.fetchMiss(&x.request, 0, gen); !errors.Is(err, errLookAgain) {
		t.Fatalf("joining after the flight ended: %v, want errLookAgain", err)
	}
	if err := e.srv.serveDownload(x, gen); err != nil {
		t.Fatal(err)
	}
	if ctx.Response.StatusCode() != fasthttp.StatusOK || len(ctx.Response.Body()) != len(body) {
		t.Fatalf("late request: status %d, %d bytes", ctx.Response.StatusCode(), len(ctx.Response.Body()))
	}
	if n := up.calls(jarPath); n != 1 {
		t.Fatalf("upstream GETs = %d, want 1", n)
	}
}
