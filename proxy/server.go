// Package proxy is the download listener (fasthttp): Maven clients GET and
// HEAD artifacts of a virtual registry here, resolved across its ordered
// upstreams through the content-addressed cache; gateways POST uploads.
//
// The fasthttp contract holds throughout: nothing keeps the RequestCtx or
// its byte slices after a handler returns. maven.Classify returns substrings
// of the request path; whatever outlives the request (LRU keys, fill keys,
// download counters, merged answers' keys and the rule denials they keep)
// is copied first, once, where it starts to be kept. alias_test.go checks
// it: it scribbles over each request once answered and walks everything
// the Server keeps for strings that show it.
//
// The Server is the listener over its engine (engine.go), which reads no
// HTTP request. A download reads top-down: download parses and
// authenticates, then serveDownload resolves (resolveDownload: an answer,
// as data: a stored entry, a flight to stream, a composed document, or a
// typed miss error), the flight's fill runs on its own (fill.go), and serve
// renders the answer. Resolution reads nothing of the request but the
// caller and its connection (request, the engine's part of the listener's
// exchange); a flight's outcome is read in one place (settle); a blob found
// missing while serving is reported back (blobGone) and resolved again, so
// serving never asks an upstream. The engine's failures are typed
// (failures.go) and become answers in one place (errors.go, toAPI).
//
// The listener's files are server.go, servetls.go, probes.go,
// download.go, serve.go, remote.go, upload.go, gateway.go, errors.go,
// problem.go, accesslog.go and options.go (the connection limits are internal/connlimit's, plumbing
// the listener wraps its net.Listener with, and the access log's encoder
// and writer internal/accesslog's); every other file is the engine's, with its own Options
// sections (engineoptions.go: the cache, upstreams, metadata, audit and
// memory bounds, and the test Hooks) and collaborators (engineDeps). The
// engine's files build without the listener's and import neither fasthttp
// nor config (cmd/registryd's TestEngineSeam): the seam along which they
// are to move to package proxy/cache (issue 21).
package proxy

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime/debug"
	"strings"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"

	"registryd/auth"
	"registryd/internal/accesslog"
	"registryd/internal/connlimit"
	"registryd/internal/redact"
	"registryd/store"
	"registryd/store/blob"
	"registryd/upstream"
)

// Deps are the proxy listener's collaborators.
type Deps struct {
	// Options are the proxy's settings; zero fields take their defaults.
	Options  Options
	Store    *store.Store
	Blobs    *blob.Store
	Auth     *auth.Service
	Upstream Fetcher
	Logger   *slog.Logger
	// Registerer receives the proxy, cache, upstream and collector metrics.
	Registerer prometheus.Registerer
	// GatewaySecret verifies the HS256 Svc-Gateway-Api-Request JWT of uploads.
	GatewaySecret []byte
	// Now is the clock of freshness decisions; tests inject one. Default time.Now.
	Now func() time.Time
	// Health is the upstreams' health, shared with the admin API, which
	// shows it. Default: a tracker of the proxy's own, built by NewHealth
	// from Options.Upstreams.
	Health *upstream.Health
	// AccessLog receives the access log (one line per request, text or
	// JSON as Options.Listener.AccessLogJSON says); nil turns it off
	// (proxy.access_log false).
	AccessLog io.Writer
	// Ready says whether registryd is ready for traffic, for /-/readiness
	// (probes.go): nil when it is, else why not. Default: always ready.
	Ready func() error
}

// Server is the proxy listener (fasthttp): it parses, authenticates,
// resolves through its engine and serves what the engine answers.
type Server struct {
	*engine
	opts     Options // with their defaults
	log      *slog.Logger
	auth     *auth.Service
	secret   []byte
	idPrefix string
	srv      *fasthttp.Server
	conns    *connlimit.Limiter // wraps every listener Serve is given
	alog     *accesslog.Log     // nil when off
	ready    func() error       // nil: always ready (probes.go)
}

// New builds the proxy server with explicit limits. It starts nothing: call
// Serve for the listener and Start for the background work.
func New(d Deps) (*Server, error) {
	if d.Store == nil || d.Blobs == nil || d.Auth == nil || d.Upstream == nil {
		return nil, errors.New("proxy: Store, Blobs, Auth and Upstream are required")
	}
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	// Paths are logged (fills, errors, fasthttp's complaints): a token a
	// client wrote into one must not reach the log.
	d.Logger = redact.Logger(d.Logger)
	if d.Now == nil {
		d.Now = time.Now
	}
	if len(d.GatewaySecret) == 0 {
		return nil, errors.New("proxy: a gateway secret is required")
	}
	o := d.Options.withDefaults()
	eng, err := newEngine(engineDeps{
		Options: o.engine(), Store: d.Store, Blobs: d.Blobs, Upstream: d.Upstream, Logger: d.Logger,
		Registerer: d.Registerer, Now: d.Now, Health: d.Health,
	})
	if err != nil {
		return nil, err
	}
	var pfx [4]byte
	if _, err := rand.Read(pfx[:]); err != nil {
		return nil, err
	}
	s := &Server{engine: eng, opts: o, log: d.Logger, auth: d.Auth, secret: d.GatewaySecret,
		idPrefix: hex.EncodeToString(pfx[:]) + "-", ready: d.Ready}
	l := o.Listener
	bodyTimeout := fasthttp.RequestConfig{ReadTimeout: l.ReadTimeout}
	s.srv = &fasthttp.Server{
		Handler: s.handle,
		Name:    "registryd",
		// fasthttp's ReadTimeout is the read deadline it sets when a
		// connection is served and, on a kept-alive one, once the first byte
		// of the next request arrived (waiting for that byte is
		// IdleTimeout). Set to the header timeout, it bounds the request line
		// plus headers: a client dribbling them (slowloris) is cut off after
		// it, however long read_timeout is. Once the headers are in,
		// HeaderReceived moves the deadline to read_timeout for the body.
		ReadTimeout:    l.HeaderTimeout,
		HeaderReceived: func(*fasthttp.RequestHeader) fasthttp.RequestConfig { return bodyTimeout },
		ErrorHandler:   requestError,
		WriteTimeout:   l.WriteTimeout,
		IdleTimeout:    l.IdleTimeout,
		// The read buffer bounds the request line plus headers: larger
		// requests get 431.
		ReadBufferSize: l.MaxHeaderBytes,
		Concurrency:    l.Concurrency,
		// Uploads stream to the blob store; the handler enforces
		// MaxUploadBytes itself (with streaming, fasthttp hands over an
		// oversized body instead of refusing it) and parses the multipart
		// body as it arrives, so fasthttp must not pre-parse it into memory.
		MaxRequestBodySize:           int(l.MaxUploadBytes),
		StreamRequestBody:            true,
		DisablePreParseMultipartForm: true,
		CloseOnShutdown:              true,
		Logger:                       fasthttpLogger{d.Logger},
	}
	s.conns = connlimit.New(l.MaxConnsPerClient, l.Concurrency, d.Logger)
	rejected := func() uint64 { return uint64(s.srv.GetRejectedConnectionsCount()) }
	if err := connlimit.Register(d.Registerer, s.conns, rejected); err != nil {
		return nil, fmt.Errorf("proxy metrics: %w", err)
	}
	if d.AccessLog != nil {
		if s.alog, err = accesslog.New(d.AccessLog, l.AccessLogJSON, d.Registerer, d.Logger); err != nil {
			return nil, fmt.Errorf("proxy access log: %w", err)
		}
	}
	return s, nil
}

// requestError answers a request fasthttp could not read, as fasthttp's
// default does, except that a read timeout is a 408 however it was wrapped:
// the default knows only a bare *net.OpError, so a client cut off by
// proxy.header_timeout halfway through its headers would read 400.
func requestError(ctx *fasthttp.RequestCtx, err error) {
	var small *fasthttp.ErrSmallBuffer
	var ne net.Error
	switch {
	case errors.As(err, &small):
		ctx.Error("Too big request header", fasthttp.StatusRequestHeaderFieldsTooLarge)
	case errors.As(err, &ne) && ne.Timeout():
		ctx.Error("Request timeout", fasthttp.StatusRequestTimeout)
	default:
		ctx.Error("Error when parsing request", fasthttp.StatusBadRequest)
	}
}

// fasthttpLogger sends fasthttp's own complaints (bad requests, timeouts)
// to slog at debug level: they are the clients' problems, not ours. They are
// redacted first: fasthttp quotes the requests it cannot parse, credentials
// included.
type fasthttpLogger struct{ log *slog.Logger }

func (l fasthttpLogger) Printf(format string, args ...any) {
	l.log.Debug("fasthttp: " + redactRequest(fmt.Sprintf(format, args...)))
}

// secretMarks start the header values redactRequest hides (as a quoted
// request shows them, or raw): their values run to the end of the line and
// may hold spaces ("Basic ..."), which redact.Text would stop at.
var secretMarks = [...]string{
	"private-token:", "deploy-token:", "job-token:", "authorization:", "cookie:", "svc-gateway-api-request:",
}

// redactRequest removes from a fasthttp error line what it quotes of a
// request: the snippet of one it could not parse ("contents: ...", which
// holds its headers) goes whole, any credential header elsewhere is
// replaced up to the end of its line, and credentials in the request line
// (a query or path parameter, in any case or encoding, a token as a path
// segment) go as in every log line (redact.Text).
func redactRequest(msg string) string {
	if i := strings.Index(msg, "contents: "); i >= 0 {
		msg = msg[:i] + "contents: [redacted]"
	}
	lower := asciiLower(msg) // byte for byte, so indexes hold in msg
	var b strings.Builder
	last := 0
	for i := 0; i < len(lower); {
		j, mark := -1, ""
		for _, m := range secretMarks {
			if k := strings.Index(lower[i:], m); k >= 0 && (j < 0 || i+k < j) {
				j, mark = i+k, m
			}
		}
		if j < 0 {
			break
		}
		start := j + len(mark)
		for start < len(msg) && msg[start] == ' ' {
			start++
		}
		// A header value runs to the end of its line (a quoted request shows
		// it as a backslash escape).
		const stops = "\r\n\"\\"
		end := start
		for end < len(msg) && !strings.ContainsRune(stops, rune(msg[end])) {
			end++
		}
		b.WriteString(msg[last:start])
		b.WriteString("[redacted]")
		last, i = end, end
	}
	b.WriteString(msg[last:])
	return redact.Text(b.String())
}

func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// Serve serves on ln until Shutdown. Connections over a client's
// proxy.max_conns_per_client are refused as they are accepted.
func (s *Server) Serve(ln net.Listener) error { return s.srv.Serve(s.conns.Listener(ln)) }

// Shutdown stops accepting, waits for in-flight requests until ctx ends, then
// cancels the fills still running (their clients are gone) and waits for
// them, so nothing writes to the store after Shutdown returns.
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.srv.ShutdownWithContext(ctx)
	s.stopFills()
	s.alog.Close()
	return err
}

// The one route prefix of the proxy listener.
var downloadPrefix = []byte("/api/v4/virtual_registries/packages/maven/")

var uploadSuffix = []byte("/upload")

func (s *Server) handle(ctx *fasthttp.RequestCtx) {
	if s.probe(ctx) {
		return
	}
	x := exchange{ctx: ctx}
	if s.alog != nil {
		// fasthttp read the clock when it took the request; a bare
		// RequestCtx (in tests) has no time.
		if x.start = ctx.Time(); x.start.IsZero() {
			x.start = time.Now()
		}
	}
	// fasthttp does not recover a panicking handler: the whole daemon would
	// go down with one bad request. A panic is answered like any unexpected
	// error: a 500 that shows nothing internal but a request id, and a log
	// line with that id and the stack where it happened.
	defer func() {
		if rec := recover(); rec != nil {
			err := &panicError{value: rec, stack: debug.Stack()}
			s.writeError(ctx, err)
			s.met.request(rOther, ctx.Response.StatusCode())
			s.logAccess(&x, err)
		}
	}()
	r, err := s.route(&x)
	if err != nil {
		s.writeError(ctx, err)
	}
	s.met.request(r, ctx.Response.StatusCode())
	if x.reg != nil && x.res != resNone {
		s.met.series.lookup(x.reg.id, x.up, x.path.Kind, x.res)
	}
	s.logAccess(&x, err)
}

// panicError is a panic recovered in the handler, with the stack of the
// goroutine where it happened (writeError logs it).
type panicError struct {
	value any
	stack []byte
}

func (e *panicError) Error() string { return fmt.Sprintf("panic: %v", e.value) }

// route dispatches on the raw path (never fasthttp's decoded, normalised
// Path: package maven judges the bytes as sent).
func (s *Server) route(x *exchange) (route, error) {
	ctx := x.ctx
	path := rawPath(ctx)
	rest, ok := bytes.CutPrefix(path, downloadPrefix)
	if !ok {
		return rOther, errRouteNotFound
	}
	// rest is "<id>/<path>"; tail keeps its leading slash so that Classify,
	// which strips exactly one, sees "//x" as an empty segment.
	id, tail := rest, []byte(nil)
	if i := bytes.IndexByte(rest, '/'); i >= 0 {
		id, tail = rest[:i], rest[i:]
	}
	switch {
	case ctx.IsGet() || ctx.IsHead():
		return rDownload, s.download(x, id, tail)
	case ctx.IsPost():
		if bytes.Equal(tail, uploadSuffix) {
			return rUpload, s.upload(ctx, id, nil)
		}
		if t, ok := bytes.CutSuffix(tail, uploadSuffix); ok {
			return rUpload, s.upload(ctx, id, t)
		}
	}
	ctx.Response.Header.Set("Allow", "GET, HEAD")
	return rOther, errMethod
}

// rawPath is the request path as sent, without the query. It is read from
// the request line directly: ctx.URI() would parse and normalise the whole
// URI on every request, work the Maven path parser does (stricter) anyway.
// An absolute-form request line ("GET http://host/path") goes through the
// full parser.
func rawPath(ctx *fasthttp.RequestCtx) []byte {
	raw := ctx.Request.Header.RequestURI()
	if len(raw) == 0 || raw[0] != '/' {
		return ctx.Request.URI().PathOriginal()
	}
	if i := bytes.IndexByte(raw, '?'); i >= 0 {
		return raw[:i]
	}
	return raw
}

// b2s views b as a string without copying. The result must not outlive the
// request that owns b; callers that keep it use strings.Clone.
func b2s(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// parseID parses a registry id: decimal digits, positive, no sign.
func parseID(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, n > 0
}
