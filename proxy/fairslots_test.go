package proxy

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// dripper serves large files slowly, as a far repository does: the
// headers and a first piece at once, then a piece every few milliseconds
// until the test lets the file finish (done), cuts it (the test's end) or
// the request is cancelled. It counts the bodies in progress and the
// cancelled ones.
type dripper struct {
	size      int
	running   atomic.Int32
	cancelled atomic.Int32
	finish    chan struct{}
	cut       chan struct{}
	once      [2]sync.Once
}

// newDripper returns a dripper of size-byte files whose bodies are cut
// when the test ends.
func newDripper(t *testing.T, size int) *dripper {
	d := &dripper{size: size, finish: make(chan struct{}), cut: make(chan struct{})}
	t.Cleanup(func() { d.once[1].Do(func() { close(d.cut) }) })
	return d
}

// done lets every body in progress end.
func (d *dripper) done() { d.once[0].Do(func() { close(d.finish) }) }

// dripPiece is the unit of a dripped body, which repeats it.
const dripPiece = 1024

// dripBody is the whole body the dripper sends for p.
func (d *dripper) body(p string) []byte {
	piece := jarBytes(p, dripPiece)
	out := make([]byte, 0, d.size)
	for len(out) < d.size {
		out = append(out, piece[:min(dripPiece, d.size-len(out))]...)
	}
	return out
}

func (d *dripper) file(p string) fakeFile {
	piece := jarBytes(p, dripPiece)
	return fakeFile{custom: func(w http.ResponseWriter, r *http.Request) {
		d.running.Add(1)
		defer d.running.Add(-1)
		w.Header().Set("Content-Type", "application/java-archive")
		w.Header().Set("Content-Length", strconv.Itoa(d.size))
		w.Write(piece)
		w.(http.Flusher).Flush()
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for off := dripPiece; off < d.size; off += dripPiece {
			select {
			case <-r.Context().Done():
				d.cancelled.Add(1)
				return
			case <-d.cut:
				return
			case <-d.finish:
				tick.Reset(time.Nanosecond)
			case <-tick.C:
			}
			if _, err := w.Write(piece[:min(dripPiece, d.size-off)]); err != nil {
				d.cancelled.Add(1)
				return
			}
			w.(http.Flusher).Flush()
		}
	}}
}

// rawGet sends a GET of path on a connection of its own, as a client that
// may hang up: the caller closes it. wait waits for the answer's headers.
func (e *env) rawGet(path string, wait bool) net.Conn {
	e.t.Helper()
	u, err := url.Parse(e.base)
	if err != nil {
		e.t.Fatal(err)
	}
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		e.t.Fatal(err)
	}
	fmt.Fprintf(conn, "GET %s/%d/%s HTTP/1.1\r\nHost: %s\r\nPrivate-Token: %s\r\n\r\n", u.Path, e.registry, path, u.Host, rootToken)
	if wait {
		if line, err := readAnswerHead(bufio.NewReader(conn)); err != nil || !strings.Contains(line, " 200 ") {
			e.t.Fatalf("GET %s: %q, %v", path, line, err)
		}
	}
	return conn
}

// readAnswerHead reads an answer's status line and headers.
func readAnswerHead(r *bufio.Reader) (status string, err error) {
	status, err = r.ReadString('\n')
	for err == nil {
		var line string
		if line, err = r.ReadString('\n'); line == "\r\n" {
			break
		}
	}
	return status, err
}

// The attack of issue 20, item 6: 20 downloads of large files, abandoned
// by their clients, held all 20 slots of an upstream, and a 10-byte POM
// waited for them. Large bodies now hold at most the cap less the slots
// reserved for small files: the POM reaches the upstream while the large
// ones are held, before and after their clients hang up. Once they hung
// up, the fills go on (into the cache) while nobody else needs their
// slots, and give one up as soon as another large file waits for one.
func TestSmallFileNotBehindAbandonedDownloads(t *testing.T) {
	e := newEnv(t) // max_concurrent_requests 20, reserved_small_requests 4
	e.hooks.ClientPoll = 5 * time.Millisecond
	up := newFakeUpstream(t)
	uid := e.upstream(up.URL, nil, nil)
	id := strconv.FormatInt(uid, 10)
	// Far longer than the test: the bodies drip until it ends.
	d := newDripper(t, 64<<20)
	large := files(20)
	for _, p := range large {
		up.set(p, d.file(p))
	}
	pomReached := make(chan struct{}, 2)
	pomFile := fakeFile{custom: func(w http.ResponseWriter, r *http.Request) {
		pomReached <- struct{}{}
		w.Header().Set("Content-Type", "text/xml")
		w.Write([]byte("<project/>"))
	}}
	poms := 0
	fetchPOM := func(when string) {
		t.Helper()
		poms++
		pom := fmt.Sprintf("org/example/small%d/1.0/small%d-1.0.pom", poms, poms)
		up.set(pom, pomFile)
		got := make(chan resp, 1)
		go func() { got <- e.getNow(pom) }()
		waitFor(t, "the POM to reach the upstream "+when, func() bool {
			select {
			case <-pomReached:
				return true
			default:
				return false
			}
		})
		(<-got).expect(t, 200).expectBody(t, "<project/>")
	}

	// Twenty clients ask for a large file each; a client knows its
	// download started when the answer's headers come.
	conns := make([]net.Conn, len(large))
	answered := make(chan int, len(large))
	for i, p := range large {
		conns[i] = e.rawGet(p, false)
		go func() {
			if line, err := readAnswerHead(bufio.NewReader(conns[i])); err == nil && strings.Contains(line, " 200 ") {
				answered <- i
			}
		}()
	}
	streaming := map[int]bool{}
	for range 16 {
		streaming[<-answered] = true
	}
	fetchPOM("while large downloads run")
	waitFor(t, "the other four large downloads to queue", func() bool {
		return e.metric("registryd_upstream_queued_requests", "upstream", id) == 4
	})
	if n := d.running.Load(); n != 16 {
		t.Fatalf("%d large bodies out at once, want 16 (20 less the 4 reserved)", n)
	}

	// Every client hangs up: first those still waiting, whose fills are
	// dequeued; then those downloading, whose fills go on, idle, holding
	// their slots while nobody else needs them.
	for i, c := range conns {
		if !streaming[i] {
			c.Close()
		}
	}
	waitFor(t, "the queued fills to be dequeued", func() bool {
		return e.metric("registryd_upstream_queued_requests", "upstream", id) == 0 &&
			e.metric("registryd_upstream_fills_abandoned_total", "stage", "queued") == 4
	})
	for i, c := range conns {
		if streaming[i] {
			c.Close()
		}
	}
	waitFor(t, "the abandoned downloads to be idle", func() bool {
		return e.metric("registryd_upstream_idle_requests", "upstream", id) == 16
	})
	if n := d.running.Load(); n != 16 {
		t.Fatalf("%d large bodies out, want the 16 idle ones", n)
	}
	if n := e.metric("registryd_upstream_active_requests", "upstream", id); n != 16 {
		t.Fatalf("%v requests out, want the 16 idle ones", n)
	}
	fetchPOM("while 16 abandoned downloads hold their slots")
	if n := e.metric("registryd_upstream_fills_abandoned_total"); n != 4 {
		t.Fatalf("the POM cancelled an abandoned download (%v abandoned, want 4)", n)
	}

	// Another large file: it takes the slot of an abandoned download,
	// cancelled for it, while the other fifteen are still held.
	other := "org/example/other/1.0/other-1.0.jar"
	up.set(other, fakeFile{body: jarBytes(other, 4096)})
	cancelled := d.cancelled.Load()
	e.getNow(other).expect(t, 200).expectBody(t, string(jarBytes(other, 4096)))
	waitFor(t, "the abandoned download's upstream request to end", func() bool {
		return d.cancelled.Load() == cancelled+1
	})
	if n := d.running.Load(); n != 15 {
		t.Fatalf("%d large bodies out, want 15", n)
	}
	if n := e.metric("registryd_upstream_fills_abandoned_total"); n != 5 {
		t.Fatalf("fills_abandoned_total %v, want 5", n)
	}
}

// A fill whose client hung up while it waited for a slot is dequeued: the
// upstream is never asked for it.
func TestAbandonedQueuedFillDequeued(t *testing.T) {
	e := newEnv(t, func(o *envOptions) { o.Upstreams.MaxConcurrentRequests = 1 })
	e.hooks.ClientPoll = 5 * time.Millisecond
	up := newFakeUpstream(t)
	uid := e.upstream(up.URL, nil, nil)
	id := strconv.FormatInt(uid, 10)
	d := newDripper(t, 256<<10)
	held, queued := "org/example/held/1.0/held-1.0.jar", "org/example/queued/1.0/queued-1.0.jar"
	up.set(held, d.file(held))
	up.set(queued, d.file(queued))

	first := e.rawGet(held, true)
	defer first.Close()
	second := e.rawGet(queued, false)
	waitFor(t, "the second fill to queue", func() bool {
		return e.metric("registryd_upstream_queued_requests", "upstream", id) == 1
	})
	second.Close()
	waitFor(t, "the queued fill to be dequeued", func() bool {
		return e.metric("registryd_upstream_fills_abandoned_total", "stage", "queued") == 1 &&
			e.metric("registryd_upstream_queued_requests", "upstream", id) == 0
	})
	d.done()
	e.waitFills()
	if n := up.calls(queued); n != 0 {
		t.Fatalf("the upstream was asked %d times for a file whose client had left", n)
	}
	if n := e.metric("registryd_proxy_requests_total", "code", "499"); n != 1 {
		t.Fatalf("requests{code=499} %v, want 1", n)
	}
	// A new request for it starts afresh.
	up.set(queued, fakeFile{body: jarBytes(queued, 1024)})
	e.get(queued).expect(t, 200).expectBody(t, string(jarBytes(queued, 1024)))
}

// A download whose client hung up goes on while nobody waits for its
// slot: the file is cached for the next build.
func TestAbandonedFillFinishesWhenNobodyWaits(t *testing.T) {
	e := newEnv(t, func(o *envOptions) { o.Upstreams.MaxConcurrentRequests = 1 })
	up := newFakeUpstream(t)
	uid := e.upstream(up.URL, nil, nil)
	id := strconv.FormatInt(uid, 10)
	d := newDripper(t, 256<<10)
	up.set(jarPath, d.file(jarPath))

	e.rawGet(jarPath, true).Close()
	waitFor(t, "the fill to be idle", func() bool {
		return e.metric("registryd_upstream_idle_requests", "upstream", id) == 1
	})
	d.done()
	e.waitFills()
	if n := e.metric("registryd_upstream_fills_abandoned_total"); n != 0 {
		t.Fatalf("%v fills abandoned, want 0: nobody needed the slot", n)
	}
	if _, ok := e.entry(uid, "/"+jarPath); !ok {
		t.Fatal("the abandoned download was not cached")
	}
	e.get(jarPath).expect(t, 200).expectBody(t, string(d.body(jarPath)))
	if n := up.calls(jarPath); n != 1 {
		t.Fatalf("%d upstream requests, want 1", n)
	}
}
