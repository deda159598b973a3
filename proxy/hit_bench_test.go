package proxy

import (
	"io"
	"strconv"
	"testing"

	"github.com/valyala/fasthttp"
)

// BenchmarkHit measures the handler on the hit path: routing, path
// classification, authentication (cached), registry and entry lookups
// (cached), headers, and opening the blob as the body. The body itself is
// written to io.Discard outside the handler, as fasthttp would write it to
// the socket (by sendfile there).
func BenchmarkHit(b *testing.B) {
	for _, size := range []int{1 << 10, 64 << 10} {
		b.Run(strconv.Itoa(size>>10)+"KiB", func(b *testing.B) {
			e := newEnv(b)
			up := newFakeUpstream(b)
			body := jarBytes(jarPath, size)
			up.set(jarPath, fakeFile{body: body})
			e.upstream(up.URL, nil, nil)
			e.get(jarPath).expect(b, 200)
			uri := "/api/v4/virtual_registries/packages/maven/" + strconv.FormatInt(e.registry, 10) + "/" + jarPath

			var ctx fasthttp.RequestCtx
			b.ReportAllocs()
			b.SetBytes(int64(size))
			for b.Loop() {
				ctx.Request.Reset()
				ctx.Response.Reset()
				ctx.Request.Header.SetMethod(fasthttp.MethodGet)
				ctx.Request.SetRequestURI(uri)
				ctx.Request.Header.Set("Private-Token", rootToken)
				e.srv.handle(&ctx)
				if ctx.Response.StatusCode() != fasthttp.StatusOK {
					b.Fatalf("status %d: %s", ctx.Response.StatusCode(), ctx.Response.Body())
				}
				if err := ctx.Response.BodyWriteTo(io.Discard); err != nil {
					b.Fatal(err)
				}
			}
			ctx.Response.Reset()
			if up.calls(jarPath) != 1 {
				b.Fatalf("upstream GETs = %d: the benchmark did not measure hits", up.calls(jarPath))
			}
		})
	}
}

// BenchmarkChecksumHit is the other half of a Maven download: the .sha1
// sidecar, answered from the stored digest.
func BenchmarkChecksumHit(b *testing.B) {
	e := newEnv(b)
	up := newFakeUpstream(b)
	up.set(jarPath, fakeFile{body: jarBytes(jarPath, 1024)})
	e.upstream(up.URL, nil, nil)
	e.get(jarPath).expect(b, 200)
	uri := "/api/v4/virtual_registries/packages/maven/" + strconv.FormatInt(e.registry, 10) + "/" + jarPath + ".sha1"
	var ctx fasthttp.RequestCtx
	b.ReportAllocs()
	for b.Loop() {
		ctx.Request.Reset()
		ctx.Response.Reset()
		ctx.Request.Header.SetMethod(fasthttp.MethodGet)
		ctx.Request.SetRequestURI(uri)
		ctx.Request.Header.Set("Private-Token", rootToken)
		e.srv.handle(&ctx)
		if ctx.Response.StatusCode() != fasthttp.StatusOK {
			b.Fatalf("status %d", ctx.Response.StatusCode())
		}
	}
}
