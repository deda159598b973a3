package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strconv"
	"strings"
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

// The failures of resolution that are not an upstream's.
var (
	// errElsewhereGone is a file another node of the cluster stored just
	// now whose blob cannot be read here (see blobGone).
	errElsewhereGone = errors.New("the file was stored by another node and could not be read")
)

// upstreamFailure is one upstream that did not serve a miss, and why.
type upstreamFailure struct {
	upstream int64
	err      error
}

// The two ways an upstream does not have a file.
var (
	errAbsent           = errors.New("answered 404 Not Found")
	errRememberedAbsent = errors.New("not found (remembered)")
)

func isAbsent(err error) bool { return err == errAbsent || err == errRememberedAbsent }

// unavailableError is an upstream not asked: it is unhealthy, or the
// path's breaker is open (it failed for this file lately). A path closed
// by timeouts is a timeout (504) again.
type unavailableError struct {
	c   upstream.Closure
	now time.Time
}

func (e *unavailableError) Error() string { return e.reason() }

func (e *unavailableError) reason() string {
	var r string
	switch {
	case e.c.Path:
		r = "failing for this file, not asked for it until " + e.c.RetryAt.UTC().Format(time.RFC3339)
	case e.c.RetryAt.After(e.now):
		r = "unhealthy, not asked until " + e.c.RetryAt.UTC().Format(time.RFC3339)
	default:
		// The backoff is over, and the trial goes by another file than
		// this one, which failed lately.
		r = "unhealthy, waiting for a trial request for another file"
	}
	if e.c.LastError != "" {
		r += " (last error: " + e.c.LastError + ")"
	}
	return r
}

func (e *unavailableError) Unwrap() error {
	if e.c.Path && e.c.Timeout {
		return upstream.ErrTimeout
	}
	return nil
}

// retryAfter is how long the upstream asked to be left alone (its
// Retry-After made the backoff), or 0.
func (e *unavailableError) retryAfter() time.Duration {
	if !e.c.RetryAfterAsked || !e.c.RetryAt.After(e.now) {
		return 0
	}
	return e.c.RetryAt.Sub(e.now)
}

// notAsked returns why up is not asked for rel now, counted in
// registryd_upstream_skipped_total, or nil when it may be.
func (s *engine) notAsked(up *upstreamView, rel string) error {
	c, ok := s.health.Check(up.id, rel)
	if ok {
		return nil
	}
	return s.skipped(up, c)
}

// skipped counts and returns the failure of an upstream not asked.
func (s *engine) skipped(up *upstreamView, c upstream.Closure) error {
	reason := skipUnhealthy
	if c.Path {
		reason = skipFailingPath
	}
	s.met.skipped.WithLabelValues(up.label, reason).Inc()
	return &unavailableError{c: c, now: s.now()}
}

// missError is a miss that no upstream served: the upstreams in order,
// each with why. It answers 404 when every upstream does not have the file
// (said so now, or is remembered to have said so); otherwise 502, or 504
// when every failure was a timeout, or the 429 or 503 an upstream answered
// with a Retry-After (the shortest asked), which Maven and Gradle honour.
type missError struct{ failures []upstreamFailure }

func (e *missError) Error() string { return "no upstream could serve the file: " + e.reasons(false) }

// absent reports whether every upstream does not have the file, or may not
// serve it (its rules refused it).
func (e *missError) absent() bool {
	for _, f := range e.failures {
		if !isAbsent(f.err) && !isDenied(f.err) {
			return false
		}
	}
	return true
}

// denied reports whether every upstream's rules refused the file.
func (e *missError) denied() bool {
	for _, f := range e.failures {
		if !isDenied(f.err) {
			return false
		}
	}
	return len(e.failures) > 0
}

// reasons lists the failures; the 404s only when withAbsent is set (the
// GitLab-shaped 502 names only the upstreams that failed).
func (e *missError) reasons(withAbsent bool) string {
	var b strings.Builder
	for _, f := range e.failures {
		if !withAbsent && (isAbsent(f.err) || isDenied(f.err)) {
			continue
		}
		if b.Len() > 0 {
			b.WriteString("; ")
		}
		b.WriteString("upstream ")
		b.WriteString(strconv.FormatInt(f.upstream, 10))
		b.WriteString(": ")
		b.WriteString(failureReason(f.err))
	}
	return b.String()
}

// retryAfter finds the shortest Retry-After an upstream asked for in a 429
// or 503, with that status; 0 when none did.
func (e *missError) retryAfter() (status int, after time.Duration) {
	for _, f := range e.failures {
		var se *upstream.StatusError
		var ue *unavailableError
		var code int
		var d time.Duration
		switch {
		case errors.As(f.err, &se) && se.RetryAfter > 0:
			code, d = se.Code, se.RetryAfter
		case errors.As(f.err, &ue) && ue.retryAfter() > 0:
			code, d = fasthttp.StatusServiceUnavailable, ue.retryAfter()
		default:
			continue
		}
		if after == 0 || d < after {
			status, after = code, d
		}
	}
	return status, after
}

func (e *missError) answer() *apiError {
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

// failureReason is a short reason that is safe to show a client: the
// upstream client's fixed phrases, never an error's text (which may carry
// addresses).
func failureReason(err error) string {
	var se *upstream.StatusError
	var ne *upstream.NetError
	var ae *upstream.AnswerError
	var re *refusedError
	var unavail *unavailableError
	var de *deniedError
	switch {
	case isAbsent(err):
		return err.Error()
	case errors.As(err, &de):
		return "refused by its rules: " + de.v.Reason()
	case errors.As(err, &unavail):
		return unavail.reason()
	case errors.As(err, &re):
		return re.reason
	case errors.As(err, &ae):
		return ae.Reason
	case errors.As(err, &se):
		return "answered " + strconv.Itoa(se.Code) + " " + se.Status
	case errors.As(err, &ne):
		return ne.Reason
	case isLeaseError(err):
		return leaseReason
	case errors.Is(err, objects.ErrUnavailable):
		return "object storage not available: " + objects.Reason(err)
	case errors.Is(err, errTooLarge):
		return "file is larger than the cache accepts"
	case errors.Is(err, errShortBody):
		return "body ended before its Content-Length"
	case errors.Is(err, errUnexpected304):
		return "answered 304 to an unconditional request"
	}
	var ue *upstream.URLError
	if errors.As(err, &ue) {
		return "url " + ue.Reason
	}
	return "fetch failed"
}

// Failures of a fill that are not the upstream client's own errors.
var (
	errTooLarge      = errors.New("file is larger than cache.max_file_bytes")
	errShortBody     = errors.New("upstream body shorter than its Content-Length")
	errUnexpected304 = errors.New("upstream answered 304 to an unconditional request")
	errShutdown      = errors.New("registryd is shutting down")
)

// fillError is a fill that failed after its headers were promised to
// clients; for a checksum request it becomes a 502.
type fillError struct{ err error }

func (e *fillError) Error() string { return "fill failed: " + e.err.Error() }
func (e *fillError) Unwrap() error { return e.err }

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
		return miss.answer()
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
