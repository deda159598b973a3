// Package accesslog is the access log of the proxy listener: one line per
// request, in the main log's format (logfmt or JSON), written without slog.
// It knows nothing of HTTP: the listener fills a Record.
//
// slog costs microseconds and several allocations per line; at ~100k
// hits/s on two cores that is most of a core. Here a line is encoded by
// hand into a pooled buffer (no allocation), copied under a mutex into a
// 64 KiB batch, and batches are written by one goroutine: a request never
// waits for the destination. When the destination stalls, at most
// maxAccessBufs batches (2 MiB) wait; further lines are dropped and counted
// in registryd_proxy_access_log_dropped_total rather than slowing
// downloads.
//
// Nothing secret reaches a line: the path is cut at '?' (a query may carry
// private_token=) and what a client wrote into the path itself
// (";private_token=", "%3Fprivate_token%3D", a token as a segment) is
// redacted (internal/redact), the listener puts no header but User-Agent in
// a Record, the caller appears as user and token ids, and error reasons are
// the listener's fixed phrases.
package accesslog

import (
	"io"
	"log/slog"
	"net"
	"net/netip"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"registryd/internal/redact"
)

// Record is one access log line. Zero ids, an empty result and empty
// strings are left out of the line. Strings may alias request memory: the
// line is encoded (copied) inside Write, so Write must run before the listener
// reuses the RequestCtx (in the handler, or in a body stream's Close).
type Record struct {
	Time     time.Time     // when the request arrived
	Duration time.Duration // until the answer was complete (or handed to fasthttp)
	Client   net.IP        // remote address
	Method   string
	// Path is the request path as sent. A query is cut off at '?' here as
	// well, but callers pass the path without it (rawPath).
	Path     string
	Registry int64 // registry id, 0 when not known
	Status   int
	Bytes    int64 // body bytes sent
	// Result is how a download was answered, one fixed word (hit, miss,
	// ...); "" for an answer given before resolution.
	Result   string
	Upstream int64 // the upstream that served or failed, 0 when none
	// Merge is how a merged document was built: complete, partial (an
	// upstream failed: Error names it), single; "" for other answers.
	Merge       string
	User        int64 // caller's user id (personal access tokens)
	Token       int64 // personal access token id
	DeployToken int64 // group deploy token id
	RequestID   string
	// Error is a short reason for a 4xx or 5xx that is safe to log (see
	// accessError): fixed phrases and upstream ids, never err.Error().
	Error string
	UA    string // User-Agent
}

// Bounds of the free-text fields of a line: a line stays small whatever a
// client sends.
const (
	maxLogMethod = 32
	maxLogPath   = 2048
	maxLogUA     = 256
	maxLogError  = 1024
	maxLogReqID  = 64
)

// Batching of the writer.
const (
	accessBufSize       = 64 << 10
	maxAccessBufs       = 32 // 2 MiB waiting for a slow destination at most
	accessFlushInterval = 200 * time.Millisecond
	accessCloseWait     = 5 * time.Second
	accessErrorEvery    = time.Minute
)

type accessBuf struct {
	b     []byte
	lines int
}

type lineBuf struct{ b []byte }

// Log writes access lines to w. A nil *Log is off: Write does
// nothing.
type Log struct {
	w       io.Writer
	json    bool
	log     *slog.Logger // reports write errors, at most once a minute
	dropped prometheus.Counter
	ndrop   atomic.Int64
	// writerIdle is false while the writer is inside the destination's
	// Write: then a full queue means a slow destination, not a starved writer.
	writerIdle atomic.Bool
	lines      sync.Pool

	mu     sync.Mutex
	cur    *accessBuf
	nbufs  int  // batches allocated, at most maxAccessBufs
	closed bool // after Close lines are dropped

	free chan *accessBuf
	full chan *accessBuf // in order; never blocks: its capacity is every batch there is
	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// New starts an access log writing to w in JSON (json) or logfmt.
// reg (may be nil) receives registryd_proxy_access_log_dropped_total; log
// (may be nil) hears of write errors.
func New(w io.Writer, json bool, reg prometheus.Registerer, log *slog.Logger) (*Log, error) {
	return start(w, json, reg, log, accessFlushInterval)
}

func start(w io.Writer, json bool, reg prometheus.Registerer, log *slog.Logger, every time.Duration) (*Log, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	l := &Log{
		w: w, json: json, log: log,
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "registryd", Subsystem: "proxy", Name: "access_log_dropped_total",
			Help: "Access log lines dropped because the destination could not keep up (or failed).",
		}),
		cur:   &accessBuf{b: make([]byte, 0, accessBufSize)},
		nbufs: 1,
		free:  make(chan *accessBuf, maxAccessBufs),
		full:  make(chan *accessBuf, maxAccessBufs),
		stop:  make(chan struct{}),
		done:  make(chan struct{}),
	}
	l.lines.New = func() any { return &lineBuf{b: make([]byte, 0, 1024)} }
	l.writerIdle.Store(true)
	if reg != nil {
		if err := reg.Register(l.dropped); err != nil {
			return nil, err
		}
	}
	go l.run(every)
	return l, nil
}

// Write encodes r and queues the line. It never waits for the destination.
func (l *Log) Write(r *Record) {
	if l == nil {
		return
	}
	lb := l.lines.Get().(*lineBuf)
	if l.json {
		lb.b = appendAccessJSON(lb.b[:0], r)
	} else {
		lb.b = appendAccessText(lb.b[:0], r)
	}
	l.mu.Lock()
	for try := 0; ; try++ {
		if l.closed {
			// A request that outlived Shutdown's drain: the writer is gone,
			// and writing here could block on a stalled destination.
			l.drop(1)
			break
		}
		if len(l.cur.b)+len(lb.b) <= cap(l.cur.b) || len(l.cur.b) == 0 || l.rotateLocked() {
			l.cur.b = append(l.cur.b, lb.b...)
			l.cur.lines++
			break
		}
		// Every batch waits for the writer. Either the destination is
		// slow, or the writer has not been scheduled: it was woken onto
		// this P and a goroutine that never blocks keeps it from running.
		// Yielding once lets it run; if that frees nothing, the line is
		// dropped rather than the request kept waiting.
		if try > 0 || !l.writerIdle.Load() {
			l.drop(1)
			break
		}
		l.mu.Unlock()
		runtime.Gosched()
		l.mu.Lock()
	}
	l.mu.Unlock()
	if cap(lb.b) <= 64<<10 {
		l.lines.Put(lb)
	}
}

func (l *Log) drop(n int) {
	l.ndrop.Add(int64(n))
	l.dropped.Add(float64(n))
}

// rotateLocked queues the current batch for the writer and takes an empty
// one; false when every batch is waiting for the destination.
func (l *Log) rotateLocked() bool {
	var next *accessBuf
	select {
	case next = <-l.free:
	default:
		if l.nbufs >= maxAccessBufs {
			return false
		}
		l.nbufs++
		next = &accessBuf{b: make([]byte, 0, accessBufSize)}
	}
	l.full <- l.cur
	l.cur = next
	return true
}

// run writes batches as they fill, and the current one every interval.
func (l *Log) run(every time.Duration) {
	defer close(l.done)
	t := time.NewTicker(every)
	defer t.Stop()
	var lastErr time.Time
	for {
		select {
		case b := <-l.full:
			l.flush(b, &lastErr)
		case <-t.C:
			l.mu.Lock()
			if len(l.cur.b) > 0 {
				// When no batch is free the writer is behind anyway; the
				// lines wait in the current batch.
				l.rotateLocked()
			}
			l.mu.Unlock()
		case <-l.stop:
			// No line is added after closed is set, so what is queued and
			// the current batch are every line, in order. The lock is not
			// held while writing: a stalled destination must not block a
			// late request.
			l.mu.Lock()
			l.closed = true
			last := l.cur
			l.mu.Unlock()
			for len(l.full) > 0 {
				l.flush(<-l.full, &lastErr)
			}
			l.flush(last, &lastErr)
			return
		}
	}
}

func (l *Log) flush(b *accessBuf, lastErr *time.Time) {
	if len(b.b) > 0 {
		l.writerIdle.Store(false)
		_, err := l.w.Write(b.b)
		l.writerIdle.Store(true)
		if err != nil {
			l.drop(b.lines)
			if now := time.Now(); now.Sub(*lastErr) >= accessErrorEvery {
				*lastErr = now
				l.log.Warn("access log: writing failed; its lines are dropped", "err", err, "lines", b.lines)
			}
		}
	}
	b.b, b.lines = b.b[:0], 0
	select {
	case l.free <- b:
	default: // cannot happen: free holds at most every batch there is
	}
}

// Close writes every pending line and stops the writer. It waits at most
// accessCloseWait for a stalled destination; lines still waiting then are lost.
func (l *Log) Close() {
	if l == nil {
		return
	}
	l.once.Do(func() { close(l.stop) })
	select {
	case <-l.done:
	case <-time.After(accessCloseWait):
	}
}

// Dropped is how many lines were dropped so far.
func (l *Log) Dropped() int64 { return l.ndrop.Load() }

// --- encoding ---

// appendAccessText appends r as one logfmt line, keys as slog's
// TextHandler writes them: time level msg, then the fields.
func appendAccessText(b []byte, r *Record) []byte {
	b = append(b, "time="...)
	b = appendLogTime(b, r.Time)
	b = append(b, " level=INFO msg=access client="...)
	b = appendIP(b, r.Client)
	b = append(b, " method="...)
	b = appendTextValue(b, r.Method, maxLogMethod)
	if r.Registry != 0 {
		b = append(b, " registry="...)
		b = strconv.AppendInt(b, r.Registry, 10)
	}
	b = append(b, " path="...)
	b = appendTextValue(b, logPath(r.Path), maxLogPath)
	b = append(b, " status="...)
	b = strconv.AppendInt(b, int64(r.Status), 10)
	b = append(b, " bytes="...)
	b = strconv.AppendInt(b, r.Bytes, 10)
	b = append(b, " duration="...)
	b = appendSeconds(b, r.Duration)
	if r.Result != "" {
		b = append(b, " result="...)
		b = append(b, r.Result...)
	}
	b = appendTextID(b, " upstream=", r.Upstream)
	if r.Merge != "" {
		b = append(b, " merge="...)
		b = append(b, r.Merge...)
	}
	b = appendTextID(b, " user=", r.User)
	b = appendTextID(b, " token=", r.Token)
	b = appendTextID(b, " deploy_token=", r.DeployToken)
	if r.RequestID != "" {
		b = append(b, " request_id="...)
		b = appendTextValue(b, r.RequestID, maxLogReqID)
	}
	if r.Error != "" {
		b = append(b, " error="...)
		b = appendTextValue(b, r.Error, maxLogError)
	}
	if r.UA != "" {
		b = append(b, " ua="...)
		b = appendTextValue(b, r.UA, maxLogUA)
	}
	return append(b, '\n')
}

func appendTextID(b []byte, key string, id int64) []byte {
	if id == 0 {
		return b
	}
	return strconv.AppendInt(append(b, key...), id, 10)
}

// appendTextValue appends s (cut to max bytes, marked "..." when cut) bare
// when it is printable ASCII without space, '=' or '"', else quoted as
// slog's TextHandler quotes (a Go string literal: strconv.Unquote reads it
// back): control characters, DEL and invalid UTF-8 escaped, printable
// Unicode as is. Hand-rolled: strconv.AppendQuote was half the line's cost.
func appendTextValue(b []byte, s string, max int) []byte {
	s, cut := bound(s, max)
	i := 0
	for i < len(s) && textBare[s[i]] {
		i++
	}
	if i == len(s) && !cut && s != "" {
		return append(b, s...)
	}
	b = append(b, '"')
	b = append(b, s[:i]...)
	b = appendGoEscaped(b, s[i:])
	if cut {
		b = append(b, "..."...)
	}
	return append(b, '"')
}

// textBare is what may stand in an unquoted value; textRaw what may stand
// unescaped inside a quoted one (ASCII only; other bytes are decoded).
var textBare, textRaw = func() (bare, raw [256]bool) {
	for c := 0x21; c < 0x7f; c++ {
		bare[c] = c != '=' && c != '"'
		raw[c] = c != '"' && c != '\\'
	}
	raw[' '] = true
	return
}()

func appendGoEscaped(b []byte, s string) []byte {
	start := 0
	for i := 0; i < len(s); {
		for i < len(s) && textRaw[s[i]] {
			i++
		}
		if i == len(s) {
			break
		}
		c := s[i]
		if c < utf8.RuneSelf {
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'x', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case size == 1: // invalid UTF-8
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'x', hexDigits[c>>4], hexDigits[c&0xf])
		case !strconv.IsPrint(r):
			b = append(b, s[start:i]...)
			if r < 0x10000 {
				b = append(b, '\\', 'u')
				b = appendHex(b, uint32(r), 4)
			} else {
				b = append(b, '\\', 'U')
				b = appendHex(b, uint32(r), 8)
			}
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	return append(b, s[start:]...)
}

func appendHex(b []byte, v uint32, width int) []byte {
	for k := width - 1; k >= 0; k-- {
		b = append(b, hexDigits[(v>>(4*k))&0xf])
	}
	return b
}

// appendAccessJSON appends r as one JSON object line, with the keys of
// the text form.
func appendAccessJSON(b []byte, r *Record) []byte {
	b = append(b, `{"time":"`...)
	b = appendLogTime(b, r.Time)
	b = append(b, `","level":"INFO","msg":"access","client":"`...)
	b = appendIP(b, r.Client)
	b = append(b, `","method":`...)
	b = appendJSONString(b, r.Method, maxLogMethod)
	if r.Registry != 0 {
		b = append(b, `,"registry":`...)
		b = strconv.AppendInt(b, r.Registry, 10)
	}
	b = append(b, `,"path":`...)
	b = appendJSONString(b, logPath(r.Path), maxLogPath)
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(r.Status), 10)
	b = append(b, `,"bytes":`...)
	b = strconv.AppendInt(b, r.Bytes, 10)
	b = append(b, `,"duration":`...)
	b = appendSeconds(b, r.Duration)
	if r.Result != "" {
		b = append(b, `,"result":"`...)
		b = append(b, r.Result...)
		b = append(b, '"')
	}
	b = appendJSONID(b, `,"upstream":`, r.Upstream)
	if r.Merge != "" {
		b = append(b, `,"merge":"`...)
		b = append(b, r.Merge...)
		b = append(b, '"')
	}
	b = appendJSONID(b, `,"user":`, r.User)
	b = appendJSONID(b, `,"token":`, r.Token)
	b = appendJSONID(b, `,"deploy_token":`, r.DeployToken)
	if r.RequestID != "" {
		b = append(b, `,"request_id":`...)
		b = appendJSONString(b, r.RequestID, maxLogReqID)
	}
	if r.Error != "" {
		b = append(b, `,"error":`...)
		b = appendJSONString(b, r.Error, maxLogError)
	}
	if r.UA != "" {
		b = append(b, `,"ua":`...)
		b = appendJSONString(b, r.UA, maxLogUA)
	}
	return append(b, "}\n"...)
}

func appendJSONID(b []byte, key string, id int64) []byte {
	if id == 0 {
		return b
	}
	return strconv.AppendInt(append(b, key...), id, 10)
}

const hexDigits = "0123456789abcdef"

// jsonRaw is the ASCII that stands unescaped in a JSON string.
var jsonRaw = func() (raw [256]bool) {
	for c := 0x20; c < 0x7f; c++ {
		raw[c] = c != '"' && c != '\\'
	}
	return
}()

// appendJSONString appends s (cut to max bytes, marked "..." when cut) as
// a JSON string: quotes, backslashes and control characters escaped, DEL
// and U+2028/U+2029 too (a terminal or a JavaScript reader trips on them),
// invalid UTF-8 replaced by U+FFFD as encoding/json does.
func appendJSONString(b []byte, s string, max int) []byte {
	s, cut := bound(s, max)
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		for i < len(s) && jsonRaw[s[i]] {
			i++
		}
		if i == len(s) {
			break
		}
		c := s[i]
		if c < utf8.RuneSelf {
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i++
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	if cut {
		b = append(b, "..."...)
	}
	return append(b, '"')
}

// bound cuts s to at most max bytes, on a UTF-8 boundary when s is valid
// there, and says whether it cut.
func bound(s string, max int) (string, bool) {
	if len(s) <= max {
		return s, false
	}
	cut := max
	for k := 0; k < utf8.UTFMax-1 && cut > 0 && !utf8.RuneStart(s[cut]); k++ {
		cut--
	}
	return s[:cut], true
}

// logPath is the path as the access log shows it: without a query and with
// any credential written into it redacted. It allocates only for a path
// that holds one (or a percent-escape).
func logPath(p string) string { return redact.Text(cutQuery(p)) }

// cutQuery defends the rule that no query reaches the log (it may hold
// private_token=): callers pass the path without one, but a path that
// still has it loses it here.
func cutQuery(p string) string {
	if i := strings.IndexByte(p, '?'); i >= 0 {
		return p[:i]
	}
	return p
}

// appendLogTime appends t in UTC as RFC 3339 with milliseconds,
// 2026-05-01T12:00:00.123Z, the API's timestamp form.
func appendLogTime(b []byte, t time.Time) []byte {
	t = t.UTC()
	year, month, day := t.Date()
	hour, min, sec := t.Clock()
	ms := t.Nanosecond() / 1e6
	if year < 0 || year > 9999 {
		year = 0
	}
	b = append2(append2(b, year/100), year%100)
	b = append2(append(b, '-'), int(month))
	b = append2(append(b, '-'), day)
	b = append2(append(b, 'T'), hour)
	b = append2(append(b, ':'), min)
	b = append2(append(b, ':'), sec)
	b = append2(append(b, '.', byte('0'+ms/100)), ms%100)
	return append(b, 'Z')
}

// twoDigits is "000102...99": two digits per lookup.
var twoDigits = func() (t [200]byte) {
	for i := range 100 {
		t[2*i], t[2*i+1] = byte('0'+i/10), byte('0'+i%10)
	}
	return
}()

// append2 appends 0 <= n < 100 as two digits.
func append2(b []byte, n int) []byte { return append(b, twoDigits[2*n], twoDigits[2*n+1]) }

// appendSeconds appends d as seconds with microseconds, 0.000183: a plain
// number for log tools, in the unit of the Prometheus histograms.
func appendSeconds(b []byte, d time.Duration) []byte {
	us := max(d.Microseconds(), 0)
	b = strconv.AppendInt(b, us/1e6, 10)
	f := int(us % 1e6)
	return append2(append2(append2(append(b, '.'), f/10000), f/100%100), f%100)
}

// appendIP appends the client address, an IPv4-mapped one as IPv4; "-"
// when there is none.
func appendIP(b []byte, ip net.IP) []byte {
	a, ok := netip.AddrFromSlice(ip)
	if !ok {
		return append(b, '-')
	}
	return a.Unmap().AppendTo(b)
}
