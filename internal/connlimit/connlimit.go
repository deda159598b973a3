// Package connlimit bounds the proxy listener's connections per client,
// with a fair share of what is left once half of the listener's capacity
// is taken: plumbing of the listener (it wraps a net.Listener), which
// speaks no HTTP but the 429 written to a refused connection.
package connlimit

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"registryd/internal/clientkey"
)

// Limiter counts the proxy listener's open connections, in all and per
// client, and refuses a connection of a client that already holds its
// share. Without it one client could take all of fasthttp's Concurrency
// slots (a slowloris needs only slow headers) and every other client would
// get 503.
//
// A client's share is proxy.max_conns_per_client while at most half of
// proxy.concurrency is taken. Past half it shrinks with the connections left
// (fairShare), down to fairFloor when none is: a few addresses at their
// limit cannot take the rest (40 addresses at 256 used to take all 8,192),
// and a client that holds few connections always gets in while any is free.
//
// A client is an IPv4 address, or an IPv6 /64 (clientkey.Of): a
// host is given a whole /64 and picks any address in it, so counting IPv6
// addresses one by one would give one host 2^64 clients' worth of
// connections. An IPv4-mapped IPv6 peer (a dual-stack listener) is the IPv4
// client it is.
//
// It wraps the listener rather than using fasthttp's MaxConnsPerIP, which
// counts IPv4 peers only (every IPv6 client would be unlimited) and has no
// hook for a metric or a log line.
//
// The client is the TCP peer address, never X-Forwarded-For: a header is
// whatever the client wants it to be, so trusting it would let one client
// spread its connections over invented addresses.
type Limiter struct {
	max int // per client; 0 counts without limiting (and without fair shares)
	// global is proxy.concurrency, the connections fasthttp serves at once;
	// 0: no fair share, max alone.
	global int
	log    *slog.Logger
	now    func() time.Time // the clock of the warn rate limit

	open        atomic.Int64  // connections accepted and not yet closed
	refused     atomic.Uint64 // connections refused over max
	refusedFair atomic.Uint64 // connections refused over a fair share below max

	mu      sync.Mutex
	clients map[netip.Prefix]int // open connections by client, only > 0
	// Clients warned about lately, in two generations of at least
	// warnEvery each: a generation is dropped whole once the next one is
	// warnEvery old, so no sweep is needed and every dropped mark is older
	// than warnEvery.
	warned, warnedPrev map[netip.Prefix]time.Time
	warnedSince        time.Time
	exhaustedWarned    time.Time // last log line of an exhausted accept
}

const (
	// warnEvery is how often at most one client address is named in a log line.
	warnEvery = time.Minute
	// warnAddrsMax bounds the addresses remembered per generation: past it,
	// refusals of further addresses are counted but not logged, so many
	// addresses (an IPv6 prefix holds plenty) cannot grow the map.
	warnAddrsMax = 1024
	// fairFloor is the share no client is refused below while fasthttp
	// has a connection left: enough for a build (Maven resolves with 5
	// threads), and enough that filling the listener takes
	// proxy.concurrency / fairFloor clients (1,024 with the defaults).
	fairFloor = 8
	// refuseWriteTimeout bounds writing the 429 of a refused connection.
	// The write happens in fasthttp's accept loop; a fresh socket's empty
	// send buffer takes the few bytes at once, the deadline only makes
	// sure a pathological peer cannot hold the loop.
	refuseWriteTimeout = 5 * time.Millisecond
)

// tooManyConns is the whole answer to a connection over its client's limit, in
// GitLab's words. It is written before any of the request is read; the
// connection is closed right after (Connection: close says so).
var tooManyConns = func() []byte {
	body := `{"message":"429 Too Many Requests"}`
	return []byte("HTTP/1.1 429 Too Many Requests\r\n" +
		"Content-Type: application/json\r\n" +
		"Content-Length: " + strconv.Itoa(len(body)) + "\r\n" +
		"Retry-After: 1\r\n" +
		"Connection: close\r\n" +
		"\r\n" + body)
}()

// New limits each client to perClient connections, less when
// more than half of the listener's global (proxy.concurrency) are open.
func New(perClient, global int, log *slog.Logger) *Limiter {
	return &Limiter{max: perClient, global: global, log: log, now: time.Now, clients: map[netip.Prefix]int{}}
}

// Listener wraps ln: its Accept hands over only admitted connections.
func (l *Limiter) Listener(ln net.Listener) net.Listener {
	return &limitedListener{Listener: ln, l: l}
}

type limitedListener struct {
	net.Listener
	l *Limiter
}

// Accept returns the next admitted connection. A refused one is answered
// and closed here, and the loop goes on to the next: fasthttp never sees it.
//
// Running out of file descriptors (or kernel memory) is waited out here,
// as net/http does: fasthttp takes every accept error but a timeout as the
// listener's end, and the daemon would stop over a passing flood.
func (ln *limitedListener) Accept() (net.Conn, error) {
	var delay time.Duration
	for {
		c, err := ln.Listener.Accept()
		if err != nil {
			if !exhausted(err) {
				return nil, err
			}
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			ln.l.acceptExhausted(err, delay)
			time.Sleep(delay)
			continue
		}
		delay = 0
		if lc := ln.l.admit(c); lc != nil {
			return lc, nil
		}
	}
}

// exhausted reports an accept error that passes once connections close.
func exhausted(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
		errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM)
}

// acceptExhausted logs an exhausted accept, at most once per warnEvery.
func (l *Limiter) acceptExhausted(err error, retry time.Duration) {
	l.mu.Lock()
	now := l.now()
	warn := now.Sub(l.exhaustedWarned) >= warnEvery
	if warn {
		l.exhaustedWarned = now
	}
	l.mu.Unlock()
	if warn {
		l.log.Warn("proxy: cannot accept connections, out of file descriptors or memory; retrying "+
			"(raise the open files limit above proxy.concurrency, see docs/operations.md)",
			"err", err, "retry_in", retry)
	}
}

// clientName is how a log line names a client: an IPv4 address as such, an
// IPv6 client as its /64.
func clientName(c netip.Prefix) string {
	if c.Addr().Is4() {
		return c.Addr().String()
	}
	return c.String()
}

// share is how many connections one client may hold now, and the
// refusal reason when it holds that many: max while at most half of global
// is open; past half, max scaled by the connections left over the half
// (max at half, 0 when full), never below fairFloor (nor above max).
// Scaling instead of a fixed second limit leaves no step to game: the more
// is taken, the less each client may add, so clients at their share stop
// where some room is still left for others (with 40 at 256 of 8,192, about
// 1,600 connections stay free).
func (l *Limiter) share() (int, string) {
	open := int(l.open.Load())
	half := l.global / 2
	if l.global <= 0 || open <= half {
		return l.max, refusedPerClient
	}
	left := max(l.global-open, 0)
	n := max(l.max*left/(l.global-half), min(fairFloor, l.max))
	if n >= l.max {
		return l.max, refusedPerClient
	}
	return n, refusedFairShare
}

// admit counts c, or refuses it when its client holds its share (nil).
func (l *Limiter) admit(c net.Conn) net.Conn {
	var client netip.Prefix
	if l.max > 0 {
		client = clientkey.Of(clientkey.Addr(c.RemoteAddr()))
	}
	if client.IsValid() {
		l.mu.Lock()
		n := l.clients[client]
		if limit, reason := l.share(); n >= limit {
			if n >= l.max { // at its own limit anyway: the reason that says most
				limit, reason = l.max, refusedPerClient
			}
			warn := l.warnNow(client)
			l.mu.Unlock()
			l.refuse(c, client, limit, reason, warn)
			return nil
		}
		l.clients[client] = n + 1
		l.mu.Unlock()
	}
	l.open.Add(1)
	return &limitedConn{Conn: c, l: l, client: client}
}

// refuse answers c 429 and closes it. A close with request bytes still
// unread makes the kernel send a reset: a client that already sent its
// request may see that instead of the 429. Reading the request first would
// hold the accept loop, so this is as good as it gets here; either way the
// connection is gone at once.
func (l *Limiter) refuse(c net.Conn, client netip.Prefix, limit int, reason string, warn bool) {
	if reason == refusedFairShare {
		l.refusedFair.Add(1)
	} else {
		l.refused.Add(1)
	}
	_ = c.SetWriteDeadline(time.Now().Add(refuseWriteTimeout))
	_, _ = c.Write(tooManyConns)
	_ = c.Close()
	if !warn {
		return
	}
	if reason == refusedFairShare {
		l.log.Warn("proxy: client over its fair share of the connections left; refusing its further connections",
			"client", clientName(client), "limit", limit, "open", l.open.Load(),
			"setting", "proxy.concurrency", "per_client", l.max)
		return
	}
	l.log.Warn("proxy: client over its connection limit; refusing its further connections",
		"client", clientName(client), "limit", limit, "setting", "proxy.max_conns_per_client")
}

// warnNow reports whether a refusal of client is logged: at most once per
// warnEvery per client. l.mu is held.
func (l *Limiter) warnNow(client netip.Prefix) bool {
	now := l.now()
	if l.warned == nil || now.Sub(l.warnedSince) >= warnEvery {
		l.warnedPrev, l.warned, l.warnedSince = l.warned, map[netip.Prefix]time.Time{}, now
	}
	for _, m := range [2]map[netip.Prefix]time.Time{l.warned, l.warnedPrev} {
		if at, ok := m[client]; ok && now.Sub(at) < warnEvery {
			return false
		}
	}
	if len(l.warned) >= warnAddrsMax {
		return false
	}
	l.warned[client] = now
	return true
}

// release uncounts one closed connection of client.
func (l *Limiter) release(client netip.Prefix) {
	l.open.Add(-1)
	if !client.IsValid() {
		return
	}
	l.mu.Lock()
	if n := l.clients[client]; n > 1 {
		l.clients[client] = n - 1
	} else {
		delete(l.clients, client)
	}
	l.mu.Unlock()
}

// conns is how many connections the client of addr holds now (for tests).
func (l *Limiter) conns(addr netip.Addr) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.clients[clientkey.Of(addr)]
}

// limitedConn is an admitted connection; its first Close uncounts it.
type limitedConn struct {
	net.Conn
	l      *Limiter
	client netip.Prefix
	closed atomic.Bool
}

// NetConn is the connection under the limiter's wrapper (as tls.Conn's),
// where the engine finds the socket to look whether its client left.
func (c *limitedConn) NetConn() net.Conn { return c.Conn }

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	if c.closed.CompareAndSwap(false, true) {
		c.l.release(c.client)
	}
	return err
}

// ReadFrom keeps the sendfile(2) path of cached files: fasthttp's buffered
// writer hands a file to its connection's ReadFrom, which only the
// *net.TCPConn underneath has.
func (c *limitedConn) ReadFrom(r io.Reader) (int64, error) {
	if rf, ok := c.Conn.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(struct{ io.Writer }{c.Conn}, r)
}

// Reasons of registryd_proxy_connections_refused_total.
const (
	refusedPerClient   = "per_client_limit"
	refusedFairShare   = "fair_share"
	refusedConcurrency = "concurrency"
)

// connCollector exports the connection counts at scrape time: the limiter's
// and the listener's own count of connections refused over its
// concurrency.
type connCollector struct {
	l           *Limiter
	concurrency func() uint64
	open        *prometheus.Desc
	refused     *prometheus.Desc
}

// Register registers l's metrics on reg; concurrency is the listener's
// count of connections refused over proxy.concurrency (fasthttp's).
func Register(reg prometheus.Registerer, l *Limiter, concurrency func() uint64) error {
	if reg == nil {
		return nil
	}
	return reg.Register(&connCollector{l: l, concurrency: concurrency,
		open: prometheus.NewDesc("registryd_proxy_connections_open",
			"Connections of the proxy listener accepted and not yet closed.", nil, nil),
		refused: prometheus.NewDesc("registryd_proxy_connections_refused_total",
			"Connections of the proxy listener refused on accepting, by reason: per_client_limit (the client "+
				"held proxy.max_conns_per_client, answered 429), fair_share (more than half of proxy.concurrency "+
				"was open and the client held its share of the rest, fewer than its limit; answered 429), concurrency "+
				"(proxy.concurrency connections were served, answered 503).", []string{"reason"}, nil),
	})
}

func (c *connCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.open
	ch <- c.refused
}

func (c *connCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(c.open, prometheus.GaugeValue, float64(c.l.open.Load()))
	ch <- prometheus.MustNewConstMetric(c.refused, prometheus.CounterValue, float64(c.l.refused.Load()), refusedPerClient)
	ch <- prometheus.MustNewConstMetric(c.refused, prometheus.CounterValue, float64(c.l.refusedFair.Load()), refusedFairShare)
	ch <- prometheus.MustNewConstMetric(c.refused, prometheus.CounterValue,
		float64(c.concurrency()), refusedConcurrency)
}
