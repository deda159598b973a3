package itest

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Loopback addresses of the two clients: Linux routes all of 127/8 on lo,
// so each is a client address of its own to the proxy.
var (
	attackerIP = net.IPv4(127, 0, 0, 1)
	victimIP   = net.IPv4(127, 0, 0, 2)
)

// slowloris holds connections to the proxy from attackerIP, each of which
// sent half a request line and then adds one byte at a time, never
// finishing it. A connection the proxy closes is dropped.
type slowloris struct {
	mu      sync.Mutex
	conns   []net.Conn
	stop    chan struct{}
	done    chan struct{}
	started bool
	once    sync.Once
}

func startSlowloris(t *testing.T, d *Daemon, n int) *slowloris {
	t.Helper()
	s := &slowloris{stop: make(chan struct{}), done: make(chan struct{})}
	t.Cleanup(s.close)
	dialer := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: attackerIP}}
	for i := 0; i < n; i++ {
		c, err := dialer.Dial("tcp", strings.TrimPrefix(d.Proxy, "http://"))
		if err != nil {
			t.Fatalf("attacker connection %d: %v", i, err)
		}
		s.conns = append(s.conns, c)
		// A refused connection may be closed already: the dribble drops it
		// when its write fails.
		c.Write([]byte("GET /api/v4/virtual_registries/packages/maven/1/"))
	}
	s.started = true
	go s.dribble()
	return s
}

// open is how many of the attacker's connections the proxy has not closed
// (as far as the attacker has noticed).
func (s *slowloris) open() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

func (s *slowloris) dribble() {
	defer close(s.done)
	tick := time.NewTicker(100 * time.Millisecond) // the attacker's pace
	defer tick.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-tick.C:
		}
		s.mu.Lock()
		live := s.conns[:0]
		for _, c := range s.conns {
			if _, err := c.Write([]byte("a")); err != nil {
				c.Close()
				continue
			}
			live = append(live, c)
		}
		s.conns = live
		s.mu.Unlock()
	}
}

func (s *slowloris) close() {
	s.once.Do(func() {
		close(s.stop)
		if s.started {
			<-s.done
		}
		for _, c := range s.conns {
			c.Close()
		}
	})
}

// raiseNoFile makes sure this process may hold n more descriptors,
// raising the soft RLIMIT_NOFILE up to the hard one when needed (the Go
// runtime usually did already). It skips the test when the hard limit is
// too low.
func raiseNoFile(t *testing.T, n uint64) {
	t.Helper()
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	need := n + 256 // the test's own files, the http clients, the upstream
	if lim.Cur >= need {
		return
	}
	if lim.Max < need {
		t.Skipf("RLIMIT_NOFILE hard limit %d is below the %d descriptors this test needs", lim.Max, need)
	}
	lim.Cur = need
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatalf("raising RLIMIT_NOFILE to %d: %v", need, err)
	}
}

// waitMetrics scrapes the admin /metrics until cond holds, for up to 30s.
func waitMetrics(t *testing.T, d *Daemon, what string, cond func(metrics []byte) bool) []byte {
	t.Helper()
	end := time.Now().Add(30 * time.Second)
	for {
		m := d.Do("GET", "/metrics", "", nil).Expect(t, 200).Body
		if cond(m) {
			return m
		}
		if time.Now().After(end) {
			t.Fatalf("within 30s, /metrics did not show %s:\n%s", what, sampleLines(m))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// sampleLines are registryd's samples in a /metrics answer (no HELP, TYPE
// or Go runtime lines): what a failed wait shows.
func sampleLines(b []byte) string {
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "registryd_") && !strings.Contains(l, "_bucket{") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

const (
	seriesRefusedPerClient   = `registryd_proxy_connections_refused_total{reason="per_client_limit"}`
	seriesRefusedConcurrency = `registryd_proxy_connections_refused_total{reason="concurrency"}`
	seriesOpen               = `registryd_proxy_connections_open`
)

// victimClient is a download client from victimIP.
func victimClient() *http.Client {
	return &http.Client{
		Timeout: 30 * time.Second,
		Transport: &http.Transport{DialContext: (&net.Dialer{Timeout: 5 * time.Second,
			LocalAddr: &net.TCPAddr{IP: victimIP}}).DialContext},
	}
}

// readAnswer reads what the proxy sends on a raw connection until it closes.
func readAnswer(t *testing.T, c net.Conn) (*http.Response, []byte) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("reading the answer's body: %v", err)
	}
	return res, body
}

// TestSlowloris: one client address opening many slow connections (a
// slowloris) cannot take the proxy from the others. Concurrency is lowered
// to 100 so that the attack would exhaust it; the per-client limit of 50
// keeps it out of reach.
func TestSlowloris(t *testing.T) {
	const (
		perClient   = 50
		concurrency = 100
		attack      = 600
	)
	raiseNoFile(t, attack+concurrency)

	t.Run("per-client limit keeps the proxy up for everyone", func(t *testing.T) {
		d := Start(t, map[string]string{
			"REGISTRYD_PROXY_MAX_CONNS_PER_CLIENT": itoa(perClient),
			"REGISTRYD_PROXY_CONCURRENCY":          itoa(concurrency),
			// Longer than the test: only the per-client limit protects here.
			"REGISTRYD_PROXY_HEADER_TIMEOUT": "10m",
		})
		f := d.Fix(t)
		reg := f.Registry(f.Group("acme", 0, "private"), "main")
		up := newPxUpstream(t)
		body := pxBody("lib", 200<<10)
		up.set(pxJar, pxFile{body: body})
		f.Upstream(reg, up.URL, nil)

		startSlowloris(t, d, attack)
		// Every connection past the first perClient was refused on accepting,
		// and the first perClient are held by the proxy.
		waitMetrics(t, d, "the attack in place", func(m []byte) bool {
			return metricValue(t, m, seriesRefusedPerClient) == attack-perClient && metricValue(t, m, seriesOpen) >= perClient
		})

		// Another client downloads as usual: a miss, then a hit.
		cl := victimClient()
		defer cl.CloseIdleConnections()
		for _, what := range []string{"miss", "hit"} {
			req, _ := http.NewRequest(http.MethodGet, d.pxURL(reg, pxJar), nil)
			req.Header.Set("PRIVATE-TOKEN", rootToken)
			res, err := cl.Do(req)
			if err != nil {
				t.Fatalf("the other client's %s: %v", what, err)
			}
			got, err := io.ReadAll(res.Body)
			res.Body.Close()
			if err != nil || res.StatusCode != 200 || !bytes.Equal(got, body) {
				t.Fatalf("the other client's %s: %d, %d bytes, %v", what, res.StatusCode, len(got), err)
			}
		}

		// The attacker's next connection, a whole request, is answered 429.
		c, err := (&net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: attackerIP}}).
			Dial("tcp", strings.TrimPrefix(d.Proxy, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		res, msg := readAnswer(t, c)
		if res.StatusCode != 429 || !res.Close || string(msg) != `{"message":"429 Too Many Requests"}` {
			t.Fatalf("the attacker's next connection: %d close=%v %s", res.StatusCode, res.Close, msg)
		}

		m := d.Do("GET", "/metrics", "", nil).Expect(t, 200).Body
		if n := metricValue(t, m, seriesRefusedPerClient); n != attack-perClient+1 {
			t.Errorf("%s = %v, want %d", seriesRefusedPerClient, n, attack-perClient+1)
		}
		if n := metricValue(t, m, seriesRefusedConcurrency); n != 0 {
			t.Errorf("%s = %v: one client reached the global limit", seriesRefusedConcurrency, n)
		}
		promtoolCheck(t, m)

		// One warning names the attacker, however many refusals.
		var warned int
		end := time.Now().Add(10 * time.Second)
		for warned == 0 && time.Now().Before(end) {
			warned = strings.Count(d.Logs(), `"client":"127.0.0.1"`)
			if warned == 0 {
				time.Sleep(20 * time.Millisecond)
			}
		}
		if warned != 1 {
			t.Errorf("%d log lines name the attacker, want 1:\n%s", warned, d.Logs())
		}
	})

	t.Run("without it one client takes every connection", func(t *testing.T) {
		// The control: the same attack with the limit off reaches
		// concurrency, and the other client is turned away.
		d := Start(t, map[string]string{
			"REGISTRYD_PROXY_MAX_CONNS_PER_CLIENT": "0",
			"REGISTRYD_PROXY_CONCURRENCY":          itoa(concurrency),
			"REGISTRYD_PROXY_HEADER_TIMEOUT":       "10m",
		})
		const n = concurrency + 50
		startSlowloris(t, d, n)
		waitMetrics(t, d, "the global limit reached", func(m []byte) bool {
			return metricValue(t, m, seriesRefusedConcurrency) == n-concurrency
		})
		c, err := (&net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: victimIP}}).
			Dial("tcp", strings.TrimPrefix(d.Proxy, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if res, _ := readAnswer(t, c); res.StatusCode != 503 {
			t.Fatalf("the other client got %d, want the 503 of a full proxy", res.StatusCode)
		}
	})

	t.Run("header timeout cuts the slow connections", func(t *testing.T) {
		// With the default read timeout (60s), the header timeout alone
		// closes every connection that keeps dribbling its request line,
		// well within the 30s this waits.
		d := Start(t, map[string]string{
			"REGISTRYD_PROXY_MAX_CONNS_PER_CLIENT": itoa(perClient),
			"REGISTRYD_PROXY_CONCURRENCY":          itoa(concurrency),
			"REGISTRYD_PROXY_HEADER_TIMEOUT":       "1s",
		})
		s := startSlowloris(t, d, perClient)
		end := time.Now().Add(30 * time.Second)
		for s.open() > 0 {
			if time.Now().After(end) {
				t.Fatalf("%d slow connections still open after 30s", s.open())
			}
			time.Sleep(20 * time.Millisecond)
		}
		m := waitMetrics(t, d, "no connection open", func(m []byte) bool { return metricValue(t, m, seriesOpen) == 0 })
		if n := metricValue(t, m, seriesRefusedPerClient); n != 0 {
			t.Fatalf("%s = %v, want 0", seriesRefusedPerClient, n)
		}
	})
}
