package proxy

import (
	"errors"
	"strconv"
	"strings"
	"time"

	"registryd/store/objects"
	"registryd/upstream"
)

// The engine's failures, typed: what resolution and fills return. The
// listener maps them to answers in one place (errors.go, toAPI).

// statusServiceUnavailable is the 503 an upstream answers (with a
// Retry-After) or that stands for an upstream backing off.
const statusServiceUnavailable = 503

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
			code, d = statusServiceUnavailable, ue.retryAfter()
		default:
			continue
		}
		if after == 0 || d < after {
			status, after = code, d
		}
	}
	return status, after
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
