package proxy

import (
	"errors"
	"testing"

	"github.com/valyala/fasthttp"
)

// TestProbes: /-/readiness and /-/liveness on the download listener answer
// as the admin listener's do, need no credentials, and are counted under
// routes of their own.
func TestProbes(t *testing.T) {
	e := newEnv(t)
	var notReady error
	e.srv.ready = func() error { return notReady }
	probe := func(method, uri string) *fasthttp.RequestCtx {
		t.Helper()
		ctx := &fasthttp.RequestCtx{}
		ctx.Request.Header.SetMethod(method)
		ctx.Request.SetRequestURI(uri)
		e.srv.handle(ctx)
		return ctx
	}
	want := func(ctx *fasthttp.RequestCtx, status int, body string) {
		t.Helper()
		if got := ctx.Response.StatusCode(); got != status || string(ctx.Response.Body()) != body {
			t.Errorf("%s %s: %d %s; want %d %s", ctx.Method(), ctx.RequestURI(), got, ctx.Response.Body(), status, body)
		}
		if ct := string(ctx.Response.Header.ContentType()); ct != "application/json" {
			t.Errorf("%s %s: Content-Type %q", ctx.Method(), ctx.RequestURI(), ct)
		}
	}
	want(probe("GET", "/-/readiness"), 200, `{"status":"ok"}`)
	want(probe("GET", "/-/liveness"), 200, `{"status":"ok"}`)
	want(probe("HEAD", "/-/readiness"), 200, "")
	want(probe("GET", "/-/readiness?verbose=1"), 200, `{"status":"ok"}`)

	notReady = errors.New("shutting down")
	want(probe("GET", "/-/readiness"), 503, `{"status":"failed","message":"shutting down"}`)
	want(probe("GET", "/-/liveness"), 200, `{"status":"ok"}`)

	ctx := probe("POST", "/-/readiness")
	want(ctx, 405, `{"error":"405 Not Allowed"}`)
	if a := string(ctx.Response.Header.Peek("Allow")); a != "GET, HEAD" {
		t.Errorf("Allow %q", a)
	}
	// Other paths under /-/ are no probes: the listener's 404.
	if got := probe("GET", "/-/health").Response.StatusCode(); got != 404 {
		t.Errorf("GET /-/health on the proxy listener: %d, want 404", got)
	}

	for _, c := range []struct {
		route, code string
		want        float64
	}{
		{routeReadiness, "200", 3}, {routeReadiness, "503", 1}, {routeReadiness, "405", 1}, {routeLiveness, "200", 2},
	} {
		if got := e.metric("registryd_proxy_requests_total", "route", c.route, "code", c.code); got != c.want {
			t.Errorf("requests{route=%s,code=%s} = %v, want %v", c.route, c.code, got, c.want)
		}
	}
	if got := e.metric("registryd_proxy_requests_total", "route", routeDownload); got != 0 {
		t.Errorf("probes counted as downloads: %v", got)
	}
}
