// Package upstream is the HTTP client registryd uses to talk to upstream
// Maven repositories: HEAD, GET and conditional GET with Basic auth, bounded
// redirects, timeouts, an SSRF guard that runs both when a URL is saved
// (CheckURL) and when a connection is dialled, and the connection test.
//
// Failures are typed: *StatusError (matching ErrNotFound or ErrUnavailable by
// status), *NetError (matching ErrUnavailable, ErrTimeout or
// ErrTooManyRedirects) and *AnswerError (matching ErrBadAnswer).
// Credentials never appear in errors or log lines.
//
// # What Get lets through
//
// An upstream answer is untrusted input. Get returns a Response only for a
// 200 or 203 (or a 304 to a conditional Get); every other 2xx, and a 304 to
// an unconditional Get, is an *AnswerError. The body is the file's bytes:
// as sent when there is no Content-Encoding (or "identity"), decoded by Get
// for gzip, x-gzip, deflate and zstd (Response.Encoding says which), and
// refused (*AnswerError) for any other coding or a list of codings. A .gz or
// .tgz file served with Content-Encoding gzip is not decoded: the header
// describes the file there (Apache's habit), not a transfer coding. Checksums
// the upstream offers in headers are on the Response for the caller to
// verify against the bytes it reads; two contradictory SHA-1s are an
// *AnswerError.
//
// A body that ends early fails in Body.Read with a *NetError wrapping
// io.ErrUnexpectedEOF, never a clean io.EOF; a body that does not decode
// fails with an *AnswerError.
//
// # Bodies longer than their Content-Length
//
// Go's transport reads exactly Content-Length bytes and never looks further,
// so extra bytes would go unnoticed (or be taken for the next response on a
// kept-alive connection). Over plain HTTP/1.x, every connection is wrapped in
// a byte counter that also finds where each response's body starts (the end
// of the last header block after the request was written, 1xx blocks
// skipped). For a Get answer framed by Content-Length (> 0), Body.Read
// returns an *AnswerError "body longer than its Content-Length" instead of
// io.EOF when
//
//   - bytes past the body's end were read from the socket together with the
//     body or its headers (the transport reads ahead up to 4 KiB), or
//   - bytes past the end were already waiting in the kernel's receive buffer
//     at the moment the read that delivered the body's last byte returned
//     (a non-blocking MSG_PEEK, on Linux and the BSDs).
//
// So it is detected, deterministically, whenever the excess reached the
// client no later than the body's last byte: the usual shape of a wrong
// Content-Length or a smuggled second answer, written in one go. Not
// detected: excess bytes that arrive later, after a pause (Go's transport
// then logs "Unsolicited response received on idle HTTP channel" and closes
// the connection); answers with Content-Length 0; chunked or close-delimited
// bodies, which announce no length; HEAD; and anything over TLS (HTTP/1.1 or
// HTTP/2), where the counter sees ciphertext: there the offered checksums and
// the require checksum policy are the defence. A connection on which excess
// bytes were seen is never reused.
package upstream

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"registryd/internal/redact"
)

// Defaults for zero Options fields.
const (
	DefaultConnectTimeout  = 10 * time.Second
	DefaultHeaderTimeout   = 10 * time.Second
	DefaultCheckTimeout    = 5 * time.Second
	DefaultBodyIdleTimeout = 60 * time.Second
	DefaultMaxRedirects    = 5
	DefaultMaxRetryAfter   = time.Hour // as Health's MaxRetryAfter
)

// userAgent identifies registryd to upstreams.
const userAgent = "registryd"

// Options configures a Client. The zero value is usable.
type Options struct {
	// AllowLocalNetwork permits upstreams on loopback, private, CGNAT,
	// link-local, multicast and unspecified addresses, both in CheckURL and at
	// connect time. Default false: they are refused (GitLab's default).
	AllowLocalNetwork bool
	// ConnectTimeout bounds dialling one TCP connection, and separately the
	// TLS handshake. Default 10s.
	ConnectTimeout time.Duration
	// HeaderTimeout bounds waiting for response headers once the request is
	// sent. Default 10s.
	HeaderTimeout time.Duration
	// CheckTimeout bounds a whole Head or Test, redirects included, and the
	// DNS lookups of CheckURL. Default 5s.
	CheckTimeout time.Duration
	// BodyIdleTimeout bounds how long one read of a Get body may wait for
	// upstream bytes; it does not count time the caller spends between reads,
	// so a slow client does not kill the fetch. A whole-download bound is the
	// caller's context. Default 60s; negative disables it.
	BodyIdleTimeout time.Duration
	// MaxRedirects is how many redirects one request follows. Default 5 when
	// zero (Go's convention that the zero value is the default); negative
	// means none: any redirect fails with ErrTooManyRedirects. A config value
	// of 0 meaning "none" must therefore be passed as -1.
	MaxRedirects int
	// TLSConfig is cloned for upstream connections. Default nil: system
	// roots, TLS 1.2 or later.
	TLSConfig *tls.Config
	// Resolver resolves names for CheckURL. Default net.DefaultResolver. The
	// connect-time check looks at the dialled address and needs no resolver.
	Resolver Resolver
	// Logger receives one debug line per upstream request. Default: discard.
	Logger *slog.Logger
	// MaxRetryAfter caps the Retry-After a StatusError carries: an
	// upstream may ask for any pause, but registryd neither waits nor tells
	// its clients to wait longer than its own backoff would
	// (upstreams.max_backoff, which main passes). Default 1h.
	MaxRetryAfter time.Duration
}

// Client talks to upstream repositories. It is safe for concurrent use and
// keeps connections alive across calls; make one per process.
type Client struct {
	hc           *http.Client
	tr           *http.Transport
	resolver     Resolver
	log          *slog.Logger
	allowLocal   bool
	checkTimeout time.Duration
	bodyIdle     time.Duration
	maxRedirects int
	maxRetry     time.Duration
}

// New returns a Client; zero Options fields take the defaults above.
func New(o Options) *Client {
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = DefaultConnectTimeout
	}
	if o.HeaderTimeout <= 0 {
		o.HeaderTimeout = DefaultHeaderTimeout
	}
	if o.CheckTimeout <= 0 {
		o.CheckTimeout = DefaultCheckTimeout
	}
	switch {
	case o.BodyIdleTimeout == 0:
		o.BodyIdleTimeout = DefaultBodyIdleTimeout
	case o.BodyIdleTimeout < 0:
		o.BodyIdleTimeout = 0
	}
	switch {
	case o.MaxRedirects == 0:
		o.MaxRedirects = DefaultMaxRedirects
	case o.MaxRedirects < 0:
		o.MaxRedirects = 0
	}
	if o.MaxRetryAfter <= 0 {
		o.MaxRetryAfter = DefaultMaxRetryAfter
	}
	if o.Resolver == nil {
		o.Resolver = net.DefaultResolver
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	// Request paths are logged, and a client may have written a token
	// into one (Maven paths allow '&' and '=').
	o.Logger = redact.Logger(o.Logger)
	tlsConf := &tls.Config{MinVersion: tls.VersionTLS12}
	if o.TLSConfig != nil {
		tlsConf = o.TLSConfig.Clone()
	}

	dialer := &net.Dialer{Timeout: o.ConnectTimeout, KeepAlive: 30 * time.Second}
	if !o.AllowLocalNetwork {
		dialer.Control = dialControl
	}
	tr := &http.Transport{
		// No environment proxy: a proxy would be dialled instead of the
		// upstream, and the address check would judge the wrong host.
		Proxy: nil,
		// Every connection is wrapped in a countConn, for the check of
		// bodies longer than their Content-Length (longbody.go).
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := dialer.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return newCountConn(conn), nil
		},
		TLSClientConfig:       tlsConf,
		TLSHandshakeTimeout:   o.ConnectTimeout,
		ResponseHeaderTimeout: o.HeaderTimeout,
		ExpectContinueTimeout: time.Second,
		// Bytes are cached and checksummed as the upstream sent them.
		DisableCompression:     true,
		ForceAttemptHTTP2:      true,
		MaxIdleConns:           256,
		MaxIdleConnsPerHost:    32,
		IdleConnTimeout:        90 * time.Second,
		MaxResponseHeaderBytes: 1 << 20,
	}
	c := &Client{
		tr:           tr,
		resolver:     o.Resolver,
		log:          o.Logger,
		allowLocal:   o.AllowLocalNetwork,
		checkTimeout: o.CheckTimeout,
		bodyIdle:     o.BodyIdleTimeout,
		maxRedirects: o.MaxRedirects,
		maxRetry:     o.MaxRetryAfter,
	}
	c.hc = &http.Client{Transport: tr, CheckRedirect: c.checkRedirect}
	return c
}

// CloseIdleConnections closes kept-alive upstream connections; call it at
// shutdown.
func (c *Client) CloseIdleConnections() { c.tr.CloseIdleConnections() }

// Endpoint is an upstream's base URL and optional Basic credentials. When
// Username is empty and URL carries userinfo, the userinfo is used instead.
type Endpoint struct {
	URL      string
	Username string
	Password string
}

// Response is a usable upstream answer: for Get a 200 or 203, or a 304 to a
// conditional Get; for Head any 2xx or 304. Body is never nil (http.NoBody
// for HEAD and 304) and must be closed.
type Response struct {
	Status int
	// Header is the upstream's header. When Get decoded the body, its
	// Content-Encoding and Content-Length are removed (they described the
	// bytes on the wire, not Body).
	Header http.Header
	Body   io.ReadCloser
	// ContentLength is the length of Body: the Content-Length as sent, or
	// -1 when unknown, which includes every decoded body.
	ContentLength int64
	ETag          string // the ETag header verbatim, quotes and W/ included; "" if none
	ContentType   string
	// Encoding is the content coding Get decoded: "gzip" (also for x-gzip),
	// "deflate" or "zstd"; "" when Body is the bytes as sent.
	Encoding string

	// Checksums the upstream offers for the file, lower-case hex; "" when
	// not offered or malformed (not exactly the right number of hex digits
	// after trimming spaces). They describe the file, that is the bytes Body
	// yields: the decoded bytes when Encoding is set. The caller verifies
	// them; Get only refuses an answer whose two SHA-1s disagree.
	//
	// SHA1 is X-Checksum-Sha1 (Maven Central, Artifactory, Nexus), or else a
	// Nexus ETag "{SHA1{<hex>}}" (quoted, W/ allowed).
	SHA1 string
	// MD5 is X-Checksum-Md5.
	MD5 string
	// SHA256 is X-Checksum-Sha256 (Artifactory).
	SHA256 string
}

// Head sends a HEAD for relPath (revalidation, existence checks). The whole
// request, redirects included, is bounded by CheckTimeout. Errors are
// *StatusError or *NetError, or *URLError when ep.URL is not an http(s) URL
// (a configuration problem, deliberately not ErrUnavailable).
func (c *Client) Head(ctx context.Context, ep Endpoint, relPath string) (*Response, error) {
	ctx, cancel := context.WithTimeout(ctx, c.checkTimeout)
	defer cancel()
	return c.head(ctx, ep, relPath)
}

func (c *Client) head(ctx context.Context, ep Endpoint, relPath string) (*Response, error) {
	resp, err := c.fetch(ctx, http.MethodHead, ep, relPath, "")
	if err != nil {
		return nil, err
	}
	resp.Body.Close()
	resp.Body = http.NoBody
	return resp.Response, nil
}

// Get fetches relPath. With a non-empty etag it sends If-None-Match: etag
// (verbatim, as stored from Response.ETag), and a 304 answer is returned as a
// Response with Status 304 and an empty body. Only connect, header and
// body-idle timeouts apply; bound the whole download with ctx.
//
// Errors are as for Head, plus *AnswerError (ErrBadAnswer) for an answer that
// is not a usable copy of the file: a 2xx other than 200 and 203, a 304 to an
// unconditional Get, a Content-Encoding Get does not decode, contradictory
// SHA-1 headers. See the package comment for what is decoded.
//
// Body.Read errors other than io.EOF are *NetError (transport failures) or
// *AnswerError (a body longer than its Content-Length, a body that does not
// decode). A body shorter than its Content-Length fails with
// io.ErrUnexpectedEOF (wrapped in *NetError), never a clean io.EOF. Decoded
// output is not bounded here: the caller applies its maximum file size.
func (c *Client) Get(ctx context.Context, ep Endpoint, relPath, etag string) (*Response, error) {
	resp, err := c.get(ctx, ep, relPath, etag, 0)
	if err != nil {
		return nil, err
	}
	return resp.Response, nil
}

// Revalidate is Get for the revalidation of a cached copy: the wait for the
// answer's headers, redirects included, is bounded by CheckTimeout (a stale
// copy is at hand, so a slow upstream is not waited for as long as on a
// miss). A body that follows is bounded as Get's is.
func (c *Client) Revalidate(ctx context.Context, ep Endpoint, relPath, etag string) (*Response, error) {
	resp, err := c.get(ctx, ep, relPath, etag, c.checkTimeout)
	if err != nil {
		return nil, err
	}
	return resp.Response, nil
}

// get sends a GET; headerTimeout, when positive, bounds the time until the
// answer's headers (on top of the transport's per-response header timeout).
func (c *Client) get(ctx context.Context, ep Endpoint, relPath, etag string, headerTimeout time.Duration) (response, error) {
	ctx, cancel := context.WithCancel(ctx)
	var expired atomic.Bool
	var timer *time.Timer
	if headerTimeout > 0 {
		timer = time.AfterFunc(headerTimeout, func() { expired.Store(true); cancel() })
	}
	resp, err := c.fetch(ctx, http.MethodGet, ep, relPath, etag)
	if timer != nil && !timer.Stop() && err == nil {
		// The headers came just as the bound ran out: the request is
		// cancelled already, its body unusable.
		resp.Body.Close()
		err = &NetError{Op: http.MethodGet, URL: resp.target, Reason: "Connection timeout", Err: context.DeadlineExceeded, kind: ErrTimeout}
	}
	if err != nil {
		cancel()
		var ne *NetError
		if expired.Load() && errors.As(err, &ne) {
			ne.Reason, ne.Err, ne.kind = "Connection timeout", context.DeadlineExceeded, ErrTimeout
		}
		return response{}, err
	}
	if resp.Status == http.StatusNotModified {
		resp.Body.Close()
		resp.Body = http.NoBody
		cancel()
		return resp, nil
	}
	coding, reason := contentCoding(resp.Header, relPath)
	if reason != "" {
		drain(resp.Body, resp.check)
		cancel()
		return response{}, &AnswerError{Op: http.MethodGet, URL: resp.target, Reason: reason}
	}
	b := &body{rc: resp.Body, cancel: cancel, idle: c.bodyIdle, target: resp.target, check: resp.check}
	if b.idle > 0 {
		b.timer = time.AfterFunc(time.Hour, b.expire)
		b.timer.Stop()
	}
	resp.Body = b
	if coding != "" {
		resp.Body = newDecodeBody(coding, b, resp.target)
		resp.Encoding = coding
		resp.ContentLength = -1
		resp.Header.Del("Content-Encoding")
		resp.Header.Del("Content-Length")
	}
	return resp, nil
}

// response is a Response plus what Get needs to wrap its body.
type response struct {
	*Response
	target string
	check  *lengthCheck // nil when the body's length is not checked
}

// fetch sends one request (following redirects) and sorts the answer.
func (c *Client) fetch(ctx context.Context, method string, ep Endpoint, relPath, etag string) (response, error) {
	target, display, user, pass, err := requestURL(ep, relPath)
	if err != nil {
		return response{}, err
	}
	req, err := http.NewRequestWithContext(ctx, method, target.String(), nil)
	if err != nil {
		return response{}, &URLError{Reason: ReasonInvalid}
	}
	req.Header.Set("User-Agent", userAgent)
	// Explicit, because DisableCompression alone sends no Accept-Encoding and
	// some servers then pick gzip anyway.
	req.Header.Set("Accept-Encoding", "identity")
	if user != "" {
		req.SetBasicAuth(user, pass)
	}
	if etag != "" {
		req.Header.Set("If-None-Match", etag)
	}
	errURL := displayURL(target)

	// The connection the final answer came on (the last one obtained:
	// redirects and retries get their own), when it is a plain one; and
	// whether any was obtained, which tells a host that cannot be reached
	// from a failure once connected (NetError.Unreached).
	var conn atomic.Pointer[countConn]
	var connected atomic.Bool
	req = req.WithContext(httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn: func(info httptrace.GotConnInfo) {
			cc, _ := info.Conn.(*countConn)
			conn.Store(cc)
			connected.Store(true)
		},
	}))

	start := time.Now()
	hr, err := c.hc.Do(req)
	dur := time.Since(start)
	if err != nil {
		if hr != nil && hr.Body != nil {
			hr.Body.Close()
		}
		nerr := newNetError(method, errURL, err)
		nerr.unreached = !connected.Load()
		c.log.LogAttrs(ctx, slog.LevelDebug, "upstream request",
			slog.String("method", method), slog.String("upstream", display),
			slog.String("path", relPath), slog.Int("status", 0),
			slog.Duration("dur", dur), slog.String("err", nerr.Reason))
		return response{}, nerr
	}
	c.log.LogAttrs(ctx, slog.LevelDebug, "upstream request",
		slog.String("method", method), slog.String("upstream", display),
		slog.String("path", relPath), slog.Int("status", hr.StatusCode),
		slog.Duration("dur", dur))

	// Armed before anything reads the body, error pages included, so that a
	// connection that carried excess bytes is never reused.
	var check *lengthCheck
	if method == http.MethodGet {
		check = armLengthCheck(conn.Load(), hr)
	}

	code := hr.StatusCode
	if method == http.MethodGet {
		if reason := badAnswerStatus(hr, etag != ""); reason != "" {
			drain(hr.Body, check)
			return response{}, &AnswerError{Op: method, URL: errURL, Reason: reason}
		}
	}
	if code >= 200 && code < 300 || code == http.StatusNotModified {
		sha1, md5, sha256, conflict := offeredChecksums(hr.Header)
		if conflict {
			if method == http.MethodGet && code != http.StatusNotModified {
				drain(hr.Body, check)
				return response{}, &AnswerError{Op: method, URL: errURL, Reason: "X-Checksum-Sha1 and ETag name different SHA-1s"}
			}
			sha1 = "" // neither is trusted
		}
		return response{
			Response: &Response{
				Status:        code,
				Header:        hr.Header,
				Body:          hr.Body,
				ContentLength: hr.ContentLength,
				ETag:          hr.Header.Get("ETag"),
				ContentType:   hr.Header.Get("Content-Type"),
				SHA1:          sha1,
				MD5:           md5,
				SHA256:        sha256,
			},
			target: errURL,
			check:  check,
		}, nil
	}
	drain(hr.Body, check)
	se := &StatusError{Op: method, URL: errURL, Code: code, Status: reasonPhrase(hr)}
	if code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable {
		se.RetryAfter = min(parseRetryAfter(hr.Header.Get("Retry-After"), time.Now()), c.maxRetry)
	}
	return response{}, se
}

// badAnswerStatus is why a GET answer's 2xx or 304 status does not carry a
// usable copy of the file, or "" when it does (200, 203, and 304 to a
// conditional GET) or when the status is not 2xx or 304 (a StatusError).
func badAnswerStatus(hr *http.Response, conditional bool) string {
	switch code := hr.StatusCode; {
	case code == http.StatusOK, code == http.StatusNonAuthoritativeInfo:
		return ""
	case code == http.StatusNotModified:
		if conditional {
			return ""
		}
		return "answered 304 Not Modified to a request without If-None-Match"
	case code == http.StatusPartialContent:
		return "answered 206 Partial Content to a request without Range"
	case code >= 200 && code < 300:
		return "answered " + strconv.Itoa(code) + " " + reasonPhrase(hr)
	}
	return ""
}

// drain reads a little of an unwanted body so the connection can be reused,
// without letting a large error page hold us up. A body already known to be
// followed by excess bytes is closed unread, which retires the connection.
func drain(rc io.ReadCloser, check *lengthCheck) {
	if check == nil || !check.long.Load() {
		_, _ = io.CopyN(io.Discard, rc, 4<<10)
	}
	rc.Close()
}

// reasonPhrase prefers the standard phrase, so a result never depends on (or
// echoes) what an upstream chose to write; HTTP/2 has no phrase anyway.
func reasonPhrase(hr *http.Response) string {
	if t := http.StatusText(hr.StatusCode); t != "" {
		return t
	}
	p := strings.TrimSpace(strings.TrimPrefix(hr.Status, strconv.Itoa(hr.StatusCode)))
	if len(p) > 64 {
		p = p[:64]
	}
	for i := 0; i < len(p); i++ {
		if p[i] < 0x20 || p[i] > 0x7e {
			return "Unknown"
		}
	}
	if p == "" {
		return "Unknown"
	}
	return p
}

// requestURL builds the request URL for relPath and takes the credentials
// out of it: they travel only in the Authorization header, which
// checkRedirect controls. display is the base URL redacted, for logs.
func requestURL(ep Endpoint, relPath string) (target *url.URL, display, user, pass string, err error) {
	u, perr := url.Parse(strings.TrimSpace(ep.URL))
	if perr != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
		return nil, "", "", "", &URLError{Reason: ReasonInvalid}
	}
	display = displayURL(u)
	user, pass = ep.Username, ep.Password
	if user == "" && u.User != nil {
		user = u.User.Username()
		pass, _ = u.User.Password()
	}
	base := u.Scheme + "://" + u.Host + u.EscapedPath()
	full := Join(base, relPath)
	if u.RawQuery != "" {
		full += "?" + u.RawQuery
	}
	target, perr = url.Parse(full)
	if perr != nil {
		return nil, "", "", "", &URLError{Reason: ReasonInvalid}
	}
	return target, display, user, pass, nil
}

// displayURL is u without password, query or fragment, for errors and logs.
func displayURL(u *url.URL) string {
	v := *u
	v.RawQuery, v.ForceQuery, v.Fragment, v.RawFragment = "", false, "", ""
	return v.Redacted()
}

// Join appends relPath to an upstream base URL with exactly one slash
// between them. relPath is unescaped (as a Maven path is after parsing);
// each segment is escaped here, so "?" or "#" in a file name stays in the
// path.
func Join(base, relPath string) string {
	segs := strings.Split(strings.TrimLeft(relPath, "/"), "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return strings.TrimRight(base, "/") + "/" + strings.Join(segs, "/")
}

// checkRedirect bounds redirects and keeps credentials on the upstream's own
// origin. Go's own rule forwards Authorization to subdomains and to other
// ports of the same host; ours does not, and once a chain has left the
// origin it never gets them back (A -> B -> A).
func (c *Client) checkRedirect(req *http.Request, via []*http.Request) error {
	if len(via) > c.maxRedirects {
		return ErrTooManyRedirects
	}
	if req.URL.Scheme != "http" && req.URL.Scheme != "https" {
		// Refused here, as a policy (ErrBlocked), rather than as the
		// transport's "unsupported protocol scheme", which would read as a
		// connection failure.
		return &URLError{Reason: ReasonInvalid}
	}
	orig := via[0].URL
	left := !sameOrigin(orig, req.URL)
	for _, r := range via[1:] {
		left = left || !sameOrigin(orig, r.URL)
	}
	if left {
		req.Header.Del("Authorization")
	}
	return nil
}

// sameOrigin reports whether credentials for orig may be sent to next: same
// host name and port, except that the usual http:80 -> https:443 upgrade is
// allowed; a downgrade from https to http is not.
func sameOrigin(orig, next *url.URL) bool {
	if !strings.EqualFold(orig.Hostname(), next.Hostname()) {
		return false
	}
	if orig.Scheme == "https" && next.Scheme != "https" {
		return false
	}
	op, np := effectivePort(orig), effectivePort(next)
	if op == np && orig.Scheme == next.Scheme {
		return true
	}
	return orig.Scheme == "http" && op == "80" && next.Scheme == "https" && np == "443"
}

func effectivePort(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	if u.Scheme == "https" {
		return "443"
	}
	return "80"
}

// body wraps a Get body: it turns read errors into *NetError, aborts a
// read that waits longer than the idle timeout for upstream bytes, and turns
// the end of a body followed by excess bytes into an *AnswerError.
type body struct {
	rc       io.ReadCloser
	cancel   context.CancelFunc
	timer    *time.Timer // nil when the idle timeout is off
	idle     time.Duration
	target   string
	check    *lengthCheck // nil when the length is not checked
	timedOut atomic.Bool
}

func (b *body) tooLong() bool { return b.check != nil && b.check.long.Load() }

func (b *body) tooLongErr() error {
	return &AnswerError{Op: http.MethodGet, URL: b.target, Reason: "body longer than its Content-Length"}
}

func (b *body) expire() {
	b.timedOut.Store(true)
	b.cancel()
}

func (b *body) Read(p []byte) (int, error) {
	// Known before the body is read (the excess came with the headers):
	// fail at once; Close then retires the connection unread.
	if b.tooLong() {
		return 0, b.tooLongErr()
	}
	// The timer runs only while we wait inside Read: time the caller spends
	// writing to a slow client is not the upstream's fault.
	if b.timer != nil {
		b.timer.Reset(b.idle)
	}
	n, err := b.rc.Read(p)
	if b.timer != nil {
		b.timer.Stop()
	}
	if err == io.EOF && b.tooLong() {
		// The verdict is in before the transport reports the end: it is
		// reached in the connection read that delivered the last byte.
		return n, b.tooLongErr()
	}
	if err == nil || err == io.EOF {
		return n, err
	}
	if b.timedOut.Load() {
		return n, &NetError{Op: http.MethodGet, URL: b.target, Reason: "Connection timeout", Err: context.DeadlineExceeded, kind: ErrTimeout}
	}
	return n, newNetError(http.MethodGet, b.target, err)
}

func (b *body) Close() error {
	if b.timer != nil {
		b.timer.Stop()
	}
	err := b.rc.Close()
	b.cancel()
	return err
}

// parseRetryAfter reads a Retry-After value (RFC 9110 10.2.3): a number of
// seconds or an HTTP date. It returns 0 for anything else, or a date in the
// past; callers bound the result.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if n, err := strconv.ParseUint(v, 10, 32); err == nil {
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now).Round(time.Second)
	}
	return 0
}
