package upstream

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"syscall"
	"time"
)

// kindError is a sentinel that is also another sentinel, so that one
// errors.Is(err, ErrUnavailable) covers timeouts and redirect loops too.
type kindError struct {
	msg    string
	parent error
}

func (e *kindError) Error() string { return e.msg }
func (e *kindError) Unwrap() error { return e.parent }

// Classes of upstream failure. Callers match them with errors.Is; never
// compare error strings.
var (
	// ErrNotFound: the upstream answered 404 or 410 (as a *StatusError).
	ErrNotFound = errors.New("upstream: not found")
	// ErrUnavailable: the upstream could not be used right now: a network
	// error, a timeout, a redirect loop, a blocked address, a 5xx, or a 3xx
	// that could not be followed. A stale cache copy may be served.
	ErrUnavailable = errors.New("upstream: unavailable")
	// ErrTimeout: a connect, header, body-idle or whole-request timeout.
	// errors.Is(ErrTimeout, ErrUnavailable) is true.
	ErrTimeout error = &kindError{msg: "upstream: timeout", parent: ErrUnavailable}
	// ErrTooManyRedirects: more than MaxRedirects redirects (a loop, usually).
	// errors.Is(ErrTooManyRedirects, ErrUnavailable) is true.
	ErrTooManyRedirects error = &kindError{msg: "upstream: too many redirects", parent: ErrUnavailable}
	// ErrBlocked: a request registryd refused to send on, by its own policy
	// rather than for anything the upstream failed to do: the upstream's
	// name, or a redirect, leads to an address upstreams may not reach
	// (Options.AllowLocalNetwork), or a redirect to a URL that is not
	// http(s). errors.Is(ErrBlocked, ErrUnavailable) is true; it says
	// nothing about the upstream's health.
	ErrBlocked error = &kindError{msg: "upstream: blocked by policy", parent: ErrUnavailable}
	// ErrBadAnswer: the upstream answered, but not with a usable copy of the
	// file (204, an unsolicited 206 or 304, another 2xx, an encoding we do
	// not decode, a body longer than its Content-Length, a body that does not
	// decode, contradictory checksum headers, a malformed checksum file).
	// Never cached; the next upstream is asked or a stale copy served. It is
	// deliberately neither ErrUnavailable nor ErrNotFound.
	ErrBadAnswer = errors.New("upstream: unusable answer")
)

// AnswerError is an upstream answer that must not become a cache entry. It
// comes from Get (status, encoding, checksum headers), from Body.Read (a body
// longer than its Content-Length, a body that does not decode) or from
// GetChecksum. It matches ErrBadAnswer.
type AnswerError struct {
	Op  string // HTTP method
	URL string // request URL without credentials or query
	// Reason is a short fixed phrase, safe to show a client, e.g. "answered
	// 204 No Content" or "body longer than its Content-Length". Any part of
	// it that comes from the upstream (a status or coding name) is reduced
	// to a short printable token first.
	Reason string
}

func (e *AnswerError) Error() string { return "upstream " + e.Op + " " + e.URL + ": " + e.Reason }

func (e *AnswerError) Unwrap() error { return ErrBadAnswer }

// StatusError is an upstream answer with a status the caller has to handle:
// anything but 2xx and 304 (for Get, a 2xx or 304 that is not usable is an
// *AnswerError instead). It matches ErrNotFound for 404 and 410, and
// ErrUnavailable for 5xx and for 3xx that could not be followed (no Location).
type StatusError struct {
	Op     string // HTTP method
	URL    string // request URL without credentials or query
	Code   int    // HTTP status code
	Status string // reason phrase, e.g. "Service Unavailable"
	// RetryAfter is the Retry-After of a 429 or 503 (delta-seconds or an
	// HTTP date, as a duration from the answer), at most the client's
	// MaxRetryAfter; 0 when absent, malformed or in the past.
	RetryAfter time.Duration
}

func (e *StatusError) Error() string {
	return "upstream " + e.Op + " " + e.URL + ": " + strconv.Itoa(e.Code) + " " + e.Status
}

func (e *StatusError) Unwrap() error {
	switch {
	case e.Code == http.StatusNotFound || e.Code == http.StatusGone:
		return ErrNotFound
	case e.Code >= 500, e.Code >= 300 && e.Code < 400:
		return ErrUnavailable
	}
	return nil
}

// NetError is a request that got no usable HTTP answer: dial, TLS, timeout,
// redirect or mid-body failures. It matches ErrUnavailable (and ErrTimeout or
// ErrTooManyRedirects when that is the cause) and also its cause, so
// errors.Is(err, context.Canceled) and errors.As(err, new(*URLError)) work.
type NetError struct {
	Op     string // HTTP method
	URL    string // request URL without credentials or query
	Reason string // short, human, safe to show: "Connection refused", "Connection timeout", ...
	Err    error  // the cause; never an *url.Error, so no URL (and no userinfo) hides in it
	kind   error
	// unreached: no connection to the upstream's own host was made (the
	// name did not resolve, the connect or the TLS handshake failed or
	// timed out). Any failure after one was made, on it or on a
	// redirect's, is not.
	unreached bool
}

func (e *NetError) Error() string { return "upstream " + e.Op + " " + e.URL + ": " + e.Reason }

func (e *NetError) Unwrap() []error { return []error{e.kind, e.Err} }

// Timeout reports whether the failure was a timeout, for net.Error-style checks.
func (e *NetError) Timeout() bool { return errors.Is(e.kind, ErrTimeout) }

// Unreached reports whether no connection to the upstream's host could be
// made at all (DNS, refused, connect or TLS failure or timeout): a verdict
// on the host, whatever the path, unlike a failure once connected (a reset,
// a wait for the answer that timed out), which may be one path's.
func (e *NetError) Unreached() bool { return e.unreached }

// newNetError classifies a transport error. The *url.Error wrapper is
// dropped: its text carries the request URL, and ours is already redacted.
func newNetError(op, target string, err error) *NetError {
	cause := err
	if ue, ok := err.(*url.Error); ok && ue.Err != nil {
		cause = ue.Err
	}
	kind, reason := classify(cause)
	return &NetError{Op: op, URL: target, Reason: reason, Err: cause, kind: kind}
}

// classify sorts a transport error into a class and a short reason that is
// safe to show an admin: fixed phrases only, never the error text, which may
// contain addresses or URLs.
func classify(err error) (kind error, reason string) {
	var (
		blocked *URLError
		dnsErr  *net.DNSError
		netErr  net.Error
		recErr  tls.RecordHeaderError
		alert   tls.AlertError
		verify  *tls.CertificateVerificationError
		unknown x509.UnknownAuthorityError
		hostErr x509.HostnameError
		invalid x509.CertificateInvalidError
	)
	switch {
	case errors.Is(err, ErrTooManyRedirects):
		return ErrTooManyRedirects, "Too many redirects"
	case errors.As(err, &blocked):
		if blocked.Reason == ReasonInvalid {
			return ErrBlocked, "Redirected to a URL that is not http(s)"
		}
		return ErrBlocked, blocked.Reason
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		return ErrTimeout, "Connection timeout"
	case errors.Is(err, context.Canceled):
		return ErrUnavailable, "Request canceled"
	case errors.As(err, &dnsErr):
		// Not found or no answer: the same words as the URL check's.
		return ErrUnavailable, HostUnresolvable
	case errors.Is(err, syscall.ECONNREFUSED):
		return ErrUnavailable, "Connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		return ErrUnavailable, "Connection reset by peer"
	case errors.Is(err, syscall.ENETUNREACH):
		return ErrUnavailable, "Network is unreachable"
	case errors.Is(err, syscall.EHOSTUNREACH):
		return ErrUnavailable, "No route to host"
	case errors.As(err, &verify), errors.As(err, &unknown), errors.As(err, &hostErr), errors.As(err, &invalid):
		return ErrUnavailable, "TLS certificate verification failed"
	case errors.As(err, &recErr), errors.As(err, &alert):
		return ErrUnavailable, "TLS handshake failed"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return ErrUnavailable, "Connection closed by upstream"
	}
	return ErrUnavailable, "Connection failed"
}
