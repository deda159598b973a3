package admin

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"registryd/eventimport"
	"registryd/sbom"
	"registryd/store"
	"registryd/store/blob"
)

// httpError is an error that already knows its status and GitLab body.
type httpError struct {
	status int
	body   any
	// header, when set, is added to the answer (a 429's Retry-After).
	header http.Header
}

func (e *httpError) Error() string {
	raw, _ := json.Marshal(e.body)
	return http.StatusText(e.status) + ": " + string(raw)
}

func message(status int, msg string) *httpError {
	return &httpError{status: status, body: map[string]any{"message": msg}}
}

// paramError is a request parameter failure: 400 {"error": "..."}.
func paramError(msg string) *httpError {
	return &httpError{status: http.StatusBadRequest, body: map[string]any{"error": msg}}
}

func badRequest(reason string) *httpError {
	if reason == "" {
		return message(http.StatusBadRequest, "400 Bad request")
	}
	return message(http.StatusBadRequest, "400 Bad request - "+reason)
}

var (
	errUnauthorized  = message(http.StatusUnauthorized, "401 Unauthorized")
	errForbidden     = message(http.StatusForbidden, "403 Forbidden")
	errNotFound      = message(http.StatusNotFound, "404 Not Found")
	errRecordMissing = message(http.StatusNotFound, "404 Not found")
	errGroupNotFound = message(http.StatusNotFound, "404 Group Not Found")
	errRouteNotFound = &httpError{status: http.StatusNotFound, body: map[string]any{"error": "404 Not Found"}}
	errTooLarge      = message(http.StatusRequestEntityTooLarge, "413 Request Entity Too Large")
	// errInsufficientStorage answers a write that failed because the data
	// volume is full (blob.IsDiskFull): nothing was changed.
	errInsufficientStorage = message(http.StatusInsufficientStorage, "507 Insufficient Storage - the data volume is full")
)

func insufficientScope(scopes string) *httpError {
	return &httpError{status: http.StatusForbidden, body: map[string]any{
		"error":             "insufficient_scope",
		"error_description": "The request requires higher privileges than provided by the access token.",
		"scope":             scopes,
	}}
}

// namedNotFound are the resources GitLab names in its 404 message; records
// looked up by id elsewhere answer "404 Not found".
var namedNotFound = map[string]bool{
	"Group": true, "User": true, "Project": true, "Upstream": true, "Namespace": true,
	"Member": true, "Parent Group": true,
}

// toHTTP maps a domain error to its status and body. It is the one place
// where errors become HTTP on the admin listener.
func toHTTP(err error) *httpError {
	var he *httpError
	var nf *store.NotFoundError
	var ve *store.ValidationError
	var ce *store.ConflictError
	var mbe *http.MaxBytesError
	var sbe *sbom.Error
	var ae *eventimport.Error
	var tse *store.CleanupTooSoonError
	switch {
	case errors.As(err, &he):
		return he
	case errors.As(err, &mbe):
		return errTooLarge
	case errors.As(err, &sbe):
		// After the 413: a body cut at the limit is too large, not bad.
		return badRequest(sbe.Reason)
	case errors.As(err, &ae):
		return badRequest(ae.Reason)
	case errors.Is(err, store.ErrUnavailable):
		// The index's database is down or unreachable (a cluster node):
		// retry later; nothing was changed.
		return message(http.StatusServiceUnavailable, "503 Service Unavailable - the index database is unavailable")
	case blob.IsDiskFull(err):
		// A write that the data volume could not take (an index commit,
		// mostly): the admin's to fix, not a bug of ours.
		return errInsufficientStorage
	case errors.As(err, &ve):
		return &httpError{status: http.StatusBadRequest, body: map[string]any{"message": ve.Fields}}
	case errors.Is(err, store.ErrNotTopLevel):
		return badRequest("only available on top-level groups.")
	case errors.Is(err, store.ErrPreconditionFailed):
		return message(http.StatusPreconditionFailed, "412 Precondition Failed")
	case errors.As(err, &ce):
		return message(http.StatusConflict, ce.Reason)
	case errors.As(err, &tse):
		return cleanupTooSoon(tse)
	case errors.As(err, &nf):
		if namedNotFound[nf.Resource] {
			return message(http.StatusNotFound, "404 "+nf.Resource+" Not Found")
		}
		return errRecordMissing
	}
	return nil
}

// cleanupTooSoon answers a run now within cleanup.run_now_interval of the
// last run's start: 429 with Retry-After in whole seconds, rounded up.
func cleanupTooSoon(e *store.CleanupTooSoonError) *httpError {
	secs := strconv.FormatInt(int64(max((e.RetryAfter+time.Second-1)/time.Second, 1)), 10)
	he := message(http.StatusTooManyRequests, "429 Too Many Requests - the cleanup policy's last run started less than "+
		shortDuration(e.Interval)+" ago; retry after "+secs+" seconds")
	he.header = http.Header{"Retry-After": {secs}}
	return he
}

// shortDuration writes d as time.Duration does, without its zero minutes
// and seconds: 1m, 1h, 1h30m, 90s as 1m30s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// writeError answers err. An unexpected error is logged with the request id
// and answered 500 without its text.
func writeError(w http.ResponseWriter, r *http.Request, log *slog.Logger, err error) {
	he := toHTTP(err)
	if he == nil {
		id := requestID(r)
		log.Error("request failed", "req_id", id, "method", r.Method, "path", r.URL.Path, "err", err)
		writeJSON(w, http.StatusInternalServerError, map[string]any{"message": "500 Internal Server Error", "request_id": id})
		return
	}
	for k, v := range he.header {
		w.Header()[k] = v
	}
	writeJSON(w, he.status, he.body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
