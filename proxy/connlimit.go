package proxy

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
	"github.com/valyala/fasthttp"
)

// connLimiter counts the proxy listener's open connections, in all and per
// client address, and refuses a connection of a client that already holds
// proxy.max_conns_per_client of them. Without it one client could take all
// of fasthttp's Concurrency slots (a slowloris needs only slow headers) and
// every other client would get 503.
//
// It wraps the listener rather than using fasthttp's MaxConnsPerIP, which
// counts IPv4 peers only (every IPv6 client would be unlimited) and has no
// hook for a metric or a log line.
//
// The client is the TCP peer address, never X-Forwarded-For: a header is
// whatever the client wants it to be, so trusting it would let one client
// spread its connections over invented addresses.
type connLimiter struct {
	max int // per client address; 0 counts without limiting
	log *slog.Logger
	now func() time.Time // the clock of the warn rate limit

	open    atomic.Int64  // connections accepted and not yet closed
	refused atomic.Uint64 // connections refused over max

	mu      sync.Mutex
	clients map[netip.Addr]int // open connections by client, only > 0
	// Addresses warned about lately, in two generations of at least
	// warnEvery each: a generation is dropped whole once the next one is
	// warnEvery old, so no sweep is needed and every dropped mark is older
	// than warnEvery.
	warned, warnedPrev map[netip.Addr]time.Time
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

func newConnLimiter(perClient int, log *slog.Logger) *connLimiter {
	return &connLimiter{max: perClient, log: log, now: time.Now, clients: map[netip.Addr]int{}}
}

// listener wraps ln: its Accept hands over only admitted connections.
func (l *connLimiter) listener(ln net.Listener) net.Listener {
	return &limitedListener{Listener: ln, l: l}
}

type limitedListener struct {
	net.Listener
	l *connLimiter
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
func (l *connLimiter) acceptExhausted(err error, retry time.Duration) {
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

// clientAddr is the client of a connection: the peer's IP without port and
// zone, an IPv4-mapped IPv6 address as the IPv4 address it is (a dual-stack
// listener sees IPv4 clients that way). Invalid when the peer is no IP.
func clientAddr(a net.Addr) netip.Addr {
	var ip netip.Addr
	switch a := a.(type) {
	case *net.TCPAddr:
		ip, _ = netip.AddrFromSlice(a.IP)
	default:
		if a == nil {
			return netip.Addr{}
		}
		ap, err := netip.ParseAddrPort(a.String())
		if err != nil {
			return netip.Addr{}
		}
		ip = ap.Addr()
	}
	return ip.Unmap().WithZone("")
}

// admit counts c, or refuses it when its client is at the limit (nil).
func (l *connLimiter) admit(c net.Conn) net.Conn {
	var addr netip.Addr
	if l.max > 0 {
		addr = clientAddr(c.RemoteAddr())
	}
	if addr.IsValid() {
		l.mu.Lock()
		n := l.clients[addr]
		if n >= l.max {
			warn := l.warnNow(addr)
			l.mu.Unlock()
			l.refuse(c, addr, warn)
			return nil
		}
		l.clients[addr] = n + 1
		l.mu.Unlock()
	}
	l.open.Add(1)
	return &limitedConn{Conn: c, l: l, addr: addr}
}

// refuse answers c 429 and closes it. A close with request bytes still
// unread makes the kernel send a reset: a client that already sent its
// request may see that instead of the 429. Reading the request first would
// hold the accept loop, so this is as good as it gets here; either way the
// connection is gone at once.
func (l *connLimiter) refuse(c net.Conn, addr netip.Addr, warn bool) {
	l.refused.Add(1)
	_ = c.SetWriteDeadline(time.Now().Add(refuseWriteTimeout))
	_, _ = c.Write(tooManyConns)
	_ = c.Close()
	if warn {
		l.log.Warn("proxy: client over its connection limit; refusing its further connections",
			"client", addr.String(), "limit", l.max, "setting", "proxy.max_conns_per_client")
	}
}

// warnNow reports whether a refusal of addr is logged: at most once per
// warnEvery per address. l.mu is held.
func (l *connLimiter) warnNow(addr netip.Addr) bool {
	now := l.now()
	if l.warned == nil || now.Sub(l.warnedSince) >= warnEvery {
		l.warnedPrev, l.warned, l.warnedSince = l.warned, map[netip.Addr]time.Time{}, now
	}
	for _, m := range [2]map[netip.Addr]time.Time{l.warned, l.warnedPrev} {
		if at, ok := m[addr]; ok && now.Sub(at) < warnEvery {
			return false
		}
	}
	if len(l.warned) >= warnAddrsMax {
		return false
	}
	l.warned[addr] = now
	return true
}

// release uncounts one closed connection of addr.
func (l *connLimiter) release(addr netip.Addr) {
	l.open.Add(-1)
	if !addr.IsValid() {
		return
	}
	l.mu.Lock()
	if n := l.clients[addr]; n > 1 {
		l.clients[addr] = n - 1
	} else {
		delete(l.clients, addr)
	}
	l.mu.Unlock()
}

// conns is how many connections addr holds now (for tests).
func (l *connLimiter) conns(addr netip.Addr) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.clients[addr]
}

// limitedConn is an admitted connection; its first Close uncounts it.
type limitedConn struct {
	net.Conn
	l      *connLimiter
	addr   netip.Addr
	closed atomic.Bool
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	if c.closed.CompareAndSwap(false, true) {
		c.l.release(c.addr)
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
	refusedConcurrency = "concurrency"
)

// connCollector exports the connection counts at scrape time: the limiter's
// and fasthttp's own count of connections refused over Concurrency.
type connCollector struct {
	l       *connLimiter
	srv     *fasthttp.Server
	open    *prometheus.Desc
	refused *prometheus.Desc
}

func registerConnMetrics(reg prometheus.Registerer, l *connLimiter, srv *fasthttp.Server) error {
	if reg == nil {
		return nil
	}
	return reg.Register(&connCollector{l: l, srv: srv,
		open: prometheus.NewDesc("registryd_proxy_connections_open",
			"Connections of the proxy listener accepted and not yet closed.", nil, nil),
		refused: prometheus.NewDesc("registryd_proxy_connections_refused_total",
			"Connections of the proxy listener refused on accepting, by reason: per_client_limit (the client "+
				"address held proxy.max_conns_per_client, answered 429), concurrency (proxy.concurrency "+
				"connections were served, answered 503).", []string{"reason"}, nil),
	})
}

func (c *connCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.open
	ch <- c.refused
}

func (c *connCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(c.open, prometheus.GaugeValue, float64(c.l.open.Load()))
	ch <- prometheus.MustNewConstMetric(c.refused, prometheus.CounterValue, float64(c.l.refused.Load()), refusedPerClient)
	ch <- prometheus.MustNewConstMetric(c.refused, prometheus.CounterValue,
		float64(c.srv.GetRejectedConnectionsCount()), refusedConcurrency)
}
