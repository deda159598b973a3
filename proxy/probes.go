package proxy

// The probes of the download listener, for a load balancer that reaches
// this port only (the admin listener is on loopback by default): the same
// answers as the admin listener's. /-/readiness is 503 while registryd
// starts, while its index database is unreachable (a cluster) and from the
// first stop signal on (shutdown.drain_delay), so that the balancer stops
// sending before the port closes; /-/liveness is 200 while the process
// serves. No credentials. A probe is counted in
// registryd_proxy_requests_total under a route of its own (readiness,
// liveness), never as a download or as "other", and writes no access log
// line: a balancer polling every second would otherwise fill the log with
// lines that are not Maven traffic.

import (
	"encoding/json"
	"strconv"

	"github.com/valyala/fasthttp"
)

// Probe paths, and their route labels.
const (
	readinessPath  = "/-/readiness"
	livenessPath   = "/-/liveness"
	routeReadiness = "readiness"
	routeLiveness  = "liveness"
)

var (
	okBody = []byte(`{"status":"ok"}`)
	// probePrefix is what both probe paths begin with; a download path
	// never does, so the download path pays one byte comparison.
	probePrefix = []byte("/-/")
)

// probe answers the request when it is a probe and reports whether it was.
func (s *Server) probe(ctx *fasthttp.RequestCtx) bool {
	path := rawPath(ctx)
	if len(path) < len(probePrefix) || path[0] != '/' || path[1] != '-' || path[2] != '/' {
		return false
	}
	var route string
	switch b2s(path) {
	case readinessPath:
		route = routeReadiness
	case livenessPath:
		route = routeLiveness
	default:
		return false
	}
	switch {
	case !ctx.IsGet() && !ctx.IsHead():
		ctx.Response.Header.Set("Allow", "GET, HEAD")
		s.writeError(ctx, errMethod)
	case route == routeReadiness && s.ready != nil:
		if err := s.ready(); err != nil {
			body, _ := json.Marshal(struct {
				Status  string `json:"status"`
				Message string `json:"message"`
			}{"failed", err.Error()})
			probeAnswer(ctx, fasthttp.StatusServiceUnavailable, body)
			break
		}
		probeAnswer(ctx, fasthttp.StatusOK, okBody)
	default:
		probeAnswer(ctx, fasthttp.StatusOK, okBody)
	}
	s.met.requests.WithLabelValues(route, strconv.Itoa(ctx.Response.StatusCode())).Inc()
	return true
}

func probeAnswer(ctx *fasthttp.RequestCtx, status int, body []byte) {
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.Response.Header.Set("Cache-Control", "no-store")
	if !ctx.IsHead() {
		ctx.SetBody(body)
	}
}
