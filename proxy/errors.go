package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"registryd/auth"
	"registryd/maven"
	"registryd/store"
	"registryd/store/blob"
	"registryd/store/objects"
	"registryd/upstream"
)

// apiError is an answer that already knows its status and GitLab body.
type apiError struct {
	status int
	body   string // JSON, rendered once
	// challenge adds the Basic challenge Maven and Gradle wait for before
	// they send credentials.
	challenge bool
	// retryAfter, when positive, is sent as Retry-After (seconds).
	retryAfter int64
}

func (e *apiError) Error() string { return strconv.Itoa(e.status) + " " + e.body }

func jsonBody(key, msg string) string {
	raw, _ := json.Marshal(map[string]string{key: msg})
	return string(raw)
}

func message(status int, msg string) *apiError {
	return &apiError{status: status, body: jsonBody("message", msg)}
}

func badRequest(reason string) *apiError {
	if reason == "" {
		return message(fasthttp.StatusBadRequest, "400 Bad request")
	}
	return message(fasthttp.StatusBadRequest, "400 Bad request - "+reason)
}

// The fixed answers of the proxy listener, in GitLab's words.
var (
	errRouteNotFound = &apiError{status: fasthttp.StatusNotFound, body: `{"error":"404 Not Found"}`}
	errMethod        = &apiError{status: fasthttp.StatusMethodNotAllowed, body: `{"error":"405 Not Allowed"}`}
	// errGate answers when the feature flag or the licence is off, before
	// authentication (reference §4).
	errGate         = message(fasthttp.StatusNotFound, "404 Not Found")
	errUnauthorized = &apiError{status: fasthttp.StatusUnauthorized, body: `{"message":"401 Unauthorized"}`, challenge: true}
	errForbidden    = message(fasthttp.StatusForbidden, "403 Forbidden")
	// errInvisible is a registry the caller may not even know exists; it
	// reads exactly like one that does not exist.
	errInvisible       = message(fasthttp.StatusNotFound, "404 Not found")
	errInsufficient    = &apiError{status: fasthttp.StatusForbidden, body: `{"error":"insufficient_scope","error_description":"The request requires higher privileges than provided by the access token.","scope":"read_virtual_registry api read_api"}`}
	errBadID           = &apiError{status: fasthttp.StatusBadRequest, body: `{"error":"id is invalid"}`}
	errBrowser         = badRequest("This endpoint is not meant to be accessed by a web browser.")
	errNoUpstreams     = badRequest("No upstreams set")
	errFileNotFound    = message(fasthttp.StatusNotFound, "404 File not found on any upstream Not Found")
	errNoGateway       = message(fasthttp.StatusForbidden, "403 Forbidden - Request should be executed via the gateway")
	errUpstreamUnknown = message(fasthttp.StatusNotFound, "404 Upstream Not Found")
	errUploadTooLarge  = message(fasthttp.StatusRequestEntityTooLarge, "413 Request Entity Too Large")
	errNoFile          = badRequest("file is missing")
	errUploadChecksum  = badRequest("checksum files are answered from the stored digests and cannot be uploaded")
	errUploadBody      = badRequest("the multipart body could not be read")
	// errInsufficientStorage is an upload that the full data volume could
	// not take (blob.IsDiskFull).
	errInsufficientStorage = message(fasthttp.StatusInsufficientStorage, "507 Insufficient Storage - the data volume is full")
)

// The answers of resolution's failures.
var (
	// errAllDenied is GitLab's answer when the rules leave no upstream for
	// a file; problem documents name each upstream's rule.
	errAllDenied = message(fasthttp.StatusForbidden,
		"403 Forbidden - All upstreams are filtered out because of existing allow/deny rules")
	// errLeaseAnswer answers a fill without its cluster lease (leaseError).
	errLeaseAnswer = message(fasthttp.StatusServiceUnavailable, "503 Service Unavailable - "+leaseReason)
	// errElsewhereGoneAnswer answers a file another node stored just now
	// whose blob cannot be read here (errElsewhereGone).
	errElsewhereGoneAnswer = message(fasthttp.StatusServiceUnavailable,
		"503 Service Unavailable - the file was stored by another node and could not be read; try again")
	// errClientGoneAnswer is recorded for a request whose client left
	// while it waited (errClientGone); nobody reads it.
	errClientGoneAnswer = &apiError{status: 499, body: `{"message":"499 Client Closed Request"}`}
	// errMergeBusyAnswer answers a merge that found no room in time
	// (errMergeBusy).
	errMergeBusyAnswer = &apiError{
		status: fasthttp.StatusServiceUnavailable,
		body: jsonBody("message", "503 Service Unavailable - too many maven-metadata.xml merges at once; retry after "+
			strconv.Itoa(mergeRetryAfter)+" second"),
		retryAfter: mergeRetryAfter,
	}
)

// missAnswer is the answer to a miss no upstream served.
func missAnswer(e *missError) *apiError {
	if e.denied() {
		return errAllDenied
	}
	if e.absent() {
		return errFileNotFound
	}
	// Our own storage failing (the bucket, the index database) is not the
	// upstreams' fault: the answer says so, with a 503, as a hit's would.
	for _, f := range e.failures {
		switch {
		case errors.Is(f.err, objects.ErrUnavailable):
			return objectStoreAnswer(f.err)
		case errors.Is(f.err, store.ErrUnavailable):
			return errIndexUnavailable
		}
	}
	if status, after := e.retryAfter(); after > 0 {
		text := "429 Too Many Requests"
		if status == fasthttp.StatusServiceUnavailable {
			text = "503 Service Unavailable"
		}
		ae := message(status, text+" - Upstream not available: "+e.reasons(false))
		ae.retryAfter = int64((after + time.Second - 1) / time.Second)
		return ae
	}
	status, text := fasthttp.StatusGatewayTimeout, "504 Gateway Timeout"
	for _, f := range e.failures {
		if !isAbsent(f.err) && !errors.Is(f.err, upstream.ErrTimeout) {
			status, text = fasthttp.StatusBadGateway, "502 Bad Gateway"
			break
		}
	}
	return message(status, text+" - Upstream not available: "+e.reasons(false))
}

// errIndexUnavailable answers a request the index's database could not
// serve (PostgreSQL down or unreachable): the client may retry, and no
// answer about the file (a 404) is made up.
var errIndexUnavailable = message(fasthttp.StatusServiceUnavailable, "503 Service Unavailable - the index database is unavailable")

// toAPI maps an error to its answer. It is the one place where errors become
// HTTP on the proxy listener; nil means an unexpected error (500).
func toAPI(err error) *apiError {
	var ae *apiError
	var me *maven.Error
	var miss *missError
	var fe *fillError
	var nf *store.NotFoundError
	var mr *mergeRefusedError
	var np *noPrefixesError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.Is(err, errClientGone):
		return errClientGoneAnswer
	case errors.Is(err, errElsewhereGone):
		return errElsewhereGoneAnswer
	case errors.Is(err, errMergeBusy):
		return errMergeBusyAnswer
	case errors.As(err, &mr):
		return message(fasthttp.StatusBadGateway, "502 Bad Gateway - "+mr.reason)
	case errors.As(err, &np):
		return message(fasthttp.StatusNotFound, "404 Not Found - "+np.Error())
	case errors.As(err, &me):
		return badRequest(me.Reason())
	case errors.Is(err, auth.ErrUnauthorized):
		return errUnauthorized
	case errors.As(err, &miss):
		return missAnswer(miss)
	case isLeaseError(err):
		return errLeaseAnswer
	case blob.IsDiskFull(err):
		return errInsufficientStorage
	case errors.Is(err, store.ErrUnavailable):
		return errIndexUnavailable
	case errors.Is(err, objects.ErrUnavailable):
		// A local miss the bucket could not serve (objectStoreError), or an
		// upload to it that failed.
		return objectStoreAnswer(err)
	case errors.As(err, &fe):
		return message(fasthttp.StatusBadGateway, "502 Bad Gateway - Upstream not available: "+failureReason(fe.err))
	case errors.As(err, &nf):
		if nf.Resource == "Upstream" {
			return errUpstreamUnknown
		}
		return errInvisible
	}
	return nil
}

// writeError answers err. An unexpected error is logged with a request id and
// answered 500 with that id, never with its text. A client that accepts
// application/problem+json (Maven 4's resolver) gets an RFC 9457 problem
// document instead of GitLab's body (see problem).
func (s *Server) writeError(ctx *fasthttp.RequestCtx, err error) {
	ae := toAPI(err)
	if ae == nil {
		id := s.requestID(ctx)
		s.log.LogAttrs(context.Background(), slog.LevelError, "proxy request failed", slog.String("req_id", id),
			slog.String("method", string(ctx.Method())), slog.String("path", string(ctx.Request.URI().PathOriginal())),
			slog.String("err", err.Error()), stackAttr(err))
		ae = &apiError{status: fasthttp.StatusInternalServerError,
			body: `{"message":"500 Internal Server Error","request_id":"` + id + `"}`}
	}
	// Nothing of a half-built success may leak into an error answer.
	ctx.Response.ResetBody()
	ctx.Response.Header.Del("Content-Disposition")
	ctx.Response.Header.Del("ETag")
	ctx.Response.Header.Del("Last-Modified")
	ctx.Response.Header.Del("X-Checksum-Sha1")
	ctx.Response.Header.Del("X-Checksum-Md5")
	ctx.Response.Header.Del("Content-Range")
	ctx.SetStatusCode(ae.status)
	ctx.SetContentType("application/json")
	if ae.challenge {
		ctx.Response.Header.Set("WWW-Authenticate", `Basic realm="registryd"`)
	}
	if ae.retryAfter > 0 {
		// The upstream client and the health tracker already cap an
		// upstream's pause at upstreams.max_backoff; this holds it for any
		// client the Server was given.
		after := ae.retryAfter
		if limit := int64(s.opts.Upstreams.MaxBackoff / time.Second); limit > 0 {
			after = min(after, limit)
		}
		ctx.Response.Header.Set("Retry-After", strconv.FormatInt(after, 10))
	}
	body := ae.body
	if wantsProblem(ctx.Request.Header.Peek("Accept")) {
		ctx.SetContentType(problemType)
		body = problem(ae, err)
	}
	if ctx.IsHead() {
		return
	}
	ctx.SetBodyString(body)
}

// stackAttr is the stack of a recovered panic, for its log line; the
// empty Attr, which handlers leave out, for any other error.
func stackAttr(err error) slog.Attr {
	var pe *panicError
	if errors.As(err, &pe) {
		return slog.String("stack", string(pe.stack))
	}
	return slog.Attr{}
}

// requestID names one request in the log and in a 500 answer: a random
// prefix per process and fasthttp's request serial.
func (s *Server) requestID(ctx *fasthttp.RequestCtx) string {
	return s.idPrefix + strconv.FormatUint(ctx.ID(), 36)
}
