package itest

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"registryd/internal/testcert"
)

// tlsFixture is a test CA and the certificate files of a daemon's
// listeners, in a temp dir.
type tlsFixture struct {
	t   *testing.T
	ca  *testcert.CA
	dir string
	// caFile is the CA's certificate (PEM), for clients' trust stores.
	caFile string
}

func newTLSFixture(t *testing.T) *tlsFixture {
	t.Helper()
	ca, err := testcert.NewCA("registryd itest CA")
	if err != nil {
		t.Fatal(err)
	}
	f := &tlsFixture{t: t, ca: ca, dir: t.TempDir()}
	f.caFile = filepath.Join(f.dir, "ca.crt")
	if err := os.WriteFile(f.caFile, ca.PEM, 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

// write issues a server certificate with serial for 127.0.0.1 and
// localhost and writes it as <name>.crt and <name>.key (each renamed into
// place, as a certificate manager does); it returns the two paths.
func (f *tlsFixture) write(name string, serial int64) (certFile, keyFile string, pair testcert.Pair) {
	f.t.Helper()
	pair, err := f.ca.Issue(serial, 24*time.Hour)
	if err != nil {
		f.t.Fatal(err)
	}
	certFile, keyFile, err = pair.Write(f.dir, name)
	if err != nil {
		f.t.Fatal(err)
	}
	return certFile, keyFile, pair
}

// env configures both listeners with the files of name.
func (f *tlsFixture) env(proxyCert, proxyKey, adminCert, adminKey string) map[string]string {
	return map[string]string{
		"REGISTRYD_PROXY_TLS_CERT_FILE": proxyCert, "REGISTRYD_PROXY_TLS_KEY_FILE": proxyKey,
		"REGISTRYD_ADMIN_TLS_CERT_FILE": adminCert, "REGISTRYD_ADMIN_TLS_KEY_FILE": adminKey,
	}
}

// clientConfig trusts the fixture's CA only.
func (f *tlsFixture) clientConfig() *tls.Config { return &tls.Config{RootCAs: f.ca.Pool()} }

// client is an HTTP client that trusts the CA; it tries HTTP/2 where the
// server offers it.
func (f *tlsFixture) client() *http.Client {
	return &http.Client{Transport: &http.Transport{TLSClientConfig: f.clientConfig(), ForceAttemptHTTP2: true,
		DisableCompression: true}}
}

// startTLS starts a daemon with env (the TLS settings among them) and
// points its URLs and Do's client at https.
func startTLS(t *testing.T, f *tlsFixture, env map[string]string) *Daemon {
	t.Helper()
	d := Start(t, env)
	d.Proxy = "https://" + strings.TrimPrefix(d.Proxy, "http://")
	d.Admin = "https://" + strings.TrimPrefix(d.Admin, "http://")
	d.client = f.client()
	return d
}

// servedSerial is the serial number of the certificate a new connection
// to the https URL base sees.
func servedSerial(t *testing.T, f *tlsFixture, base string) int64 {
	t.Helper()
	c, err := tls.Dial("tcp", strings.TrimPrefix(base, "https://"), f.clientConfig())
	if err != nil {
		t.Fatalf("TLS handshake with %s: %v", base, err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
}

// waitSerial polls new handshakes with base until the certificate served
// has serial want.
func waitSerial(t *testing.T, f *tlsFixture, base string, want int64, what string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		got := servedSerial(t, f, base)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s still serves serial %d 20s later, want %d", what, base, got, want)
		}
		time.Sleep(20 * time.Millisecond) // a poll interval, not a synchronisation
	}
}

// TestTLSListeners: both listeners serve TLS from the configured files: a
// Go client that trusts the test CA downloads an artifact (HTTP/1.1, all
// fasthttp speaks) and calls the admin API (HTTP/2, negotiated by ALPN);
// a client that does not trust the CA, and one that offers only TLS 1.1,
// are refused by the handshake; the probes answer over TLS; the
// certificate's expiry is a metric.
func TestTLSListeners(t *testing.T) {
	f := newTLSFixture(t)
	cert, key, pair := f.write("server", 2)
	d := startTLS(t, f, f.env(cert, key, cert, key))
	if tl := logLine(t, d.Logs(), "registryd started")["tls"]; tl != "proxy,admin" {
		t.Errorf("start line tls=%v, want proxy,admin", tl)
	}
	if u := logLine(t, d.Logs(), "registryd started")["external_url"]; !strings.HasPrefix(fmt.Sprint(u), "https://127.0.0.1:") {
		t.Errorf("external_url %v with admin TLS; want https://", u)
	}

	up := newPxUpstream(t)
	body := pxBody("tls", 200<<10)
	up.set("org/acme/lib/1.0/lib-1.0.jar", pxFile{body: body})
	fx := d.Fix(t)
	reg := fx.Registry(fx.Group("tls", 0, "private"), "maven")
	fx.Upstream(reg, up.URL, nil)

	client := f.client()
	get := func(url string, hdr ...string) *http.Response {
		t.Helper()
		req, err := http.NewRequest("GET", url, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		res, err := client.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
		t.Cleanup(func() { res.Body.Close() })
		return res
	}
	res := get(d.pxURL(reg, "org/acme/lib/1.0/lib-1.0.jar"), "PRIVATE-TOKEN", rootToken)
	got, err := io.ReadAll(res.Body)
	if err != nil || res.StatusCode != 200 || !bytes.Equal(got, body) {
		t.Fatalf("download over TLS: %d, %d bytes (want %d), %v", res.StatusCode, len(got), len(body), err)
	}
	if res.ProtoMajor != 1 || res.TLS == nil || res.TLS.NegotiatedProtocol != "http/1.1" {
		t.Errorf("proxy listener: %s, ALPN %q; want HTTP/1.1 negotiated as http/1.1", res.Proto, res.TLS.NegotiatedProtocol)
	}
	if res.TLS.Version < tls.VersionTLS12 {
		t.Errorf("proxy listener: TLS version %x", res.TLS.Version)
	}
	// Twice: the second is a hit from the cache (sendfile's path, over TLS).
	res = get(d.pxURL(reg, "org/acme/lib/1.0/lib-1.0.jar"), "PRIVATE-TOKEN", rootToken)
	if got, err = io.ReadAll(res.Body); err != nil || !bytes.Equal(got, body) || up.calls("org/acme/lib/1.0/lib-1.0.jar") != 1 {
		t.Fatalf("hit over TLS: %d bytes, %v, %d upstream calls", len(got), err, up.calls("org/acme/lib/1.0/lib-1.0.jar"))
	}

	res = get(d.Admin+"/api/v4/user", "PRIVATE-TOKEN", rootToken)
	if res.StatusCode != 200 || res.ProtoMajor != 2 {
		t.Errorf("admin API over TLS: %d %s; want 200 over HTTP/2", res.StatusCode, res.Proto)
	}

	for _, base := range []string{d.Proxy, d.Admin} {
		addr := strings.TrimPrefix(base, "https://")
		// The machine's trust store does not know the test CA.
		c, err := tls.Dial("tcp", addr, &tls.Config{})
		var unknown x509.UnknownAuthorityError
		if err == nil {
			c.Close()
			t.Errorf("%s: a client without the test CA completed the handshake", base)
		} else if !errors.As(err, &unknown) {
			t.Errorf("%s: untrusted client: %v; want an unknown authority", base, err)
		}
		// TLS 1.1 and older are refused.
		old := f.clientConfig()
		old.MinVersion, old.MaxVersion = tls.VersionTLS10, tls.VersionTLS11
		if c, err := tls.Dial("tcp", addr, old); err == nil {
			c.Close()
			t.Errorf("%s: a TLS 1.1 handshake succeeded", base)
		}
		// Plain HTTP to a TLS port gets no answer as HTTP.
		if r, err := http.Get("http://" + addr + "/-/liveness"); err == nil {
			r.Body.Close()
			if r.StatusCode == 200 {
				t.Errorf("%s: plain HTTP answered 200", addr)
			}
		}
		// The probes, over TLS, without credentials.
		for _, p := range []string{"/-/readiness", "/-/liveness"} {
			if r := get(base + p); r.StatusCode != 200 {
				t.Errorf("GET %s%s over TLS: %d", base, p, r.StatusCode)
			}
		}
	}

	m := d.Do("GET", "/metrics", "", nil).Expect(t, 200).Body
	for _, l := range []string{"proxy", "admin"} {
		v, ok := metricSample(t, m, "registryd_tls_certificate_not_after_timestamp_seconds", map[string]string{"listener": l})
		if !ok || int64(v) != pair.NotAfter.Unix() {
			t.Errorf("not_after of %s: %v (%v), want %d", l, v, ok, pair.NotAfter.Unix())
		}
	}
}

// TestTLSReload: a new certificate is served without a restart and without
// dropping a connection. The proxy listener reloads on SIGHUP (its poll is
// off), the admin listener when its files change (polled every 100ms):
//
//   - a download is half sent (the upstream holds the rest) when the proxy's
//     files are replaced and SIGHUP arrives; new connections then see the
//     new certificate while the download goes on, on its old connection,
//     and completes with the right bytes;
//   - the admin listener's files are replaced: the poll serves the new
//     pair; a pair whose key belongs to another certificate is refused,
//     logged and counted, and the certificate served stays.
func TestTLSReload(t *testing.T) {
	f := newTLSFixture(t)
	pCert, pKey, _ := f.write("proxy", 2)
	aCert, aKey, _ := f.write("admin", 20)
	env := f.env(pCert, pKey, aCert, aKey)
	env["REGISTRYD_PROXY_TLS_RELOAD_INTERVAL"] = "0s"
	env["REGISTRYD_ADMIN_TLS_RELOAD_INTERVAL"] = "100ms"
	d := startTLS(t, f, env)

	up := newPxUpstream(t)
	body := pxBody("reload", 4<<20)
	const path = "org/acme/big/1.0/big-1.0.jar"
	up.set(path, pxFile{body: body, hold: true})
	fx := d.Fix(t)
	reg := fx.Registry(fx.Group("reload", 0, "private"), "maven")
	fx.Upstream(reg, up.URL, nil)

	req, err := http.NewRequest("GET", d.pxURL(reg, path), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("PRIVATE-TOKEN", rootToken)
	res, err := f.client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("download: %d", res.StatusCode)
	}
	if s := res.TLS.PeerCertificates[0].SerialNumber.Int64(); s != 2 {
		t.Fatalf("the download's connection saw serial %d, want 2", s)
	}
	select {
	case <-up.midBody:
	case <-time.After(30 * time.Second):
		t.Fatal("the upstream did not send half the body within 30s")
	}
	// Read a first part, so the download is under way on the client side too.
	first := make([]byte, 64<<10)
	if _, err := io.ReadFull(res.Body, first); err != nil {
		t.Fatalf("reading the first part: %v", err)
	}

	// SIGHUP with the proxy's files replaced.
	f.write("proxy", 3)
	if got := servedSerial(t, f, d.Proxy); got != 2 {
		t.Fatalf("the proxy serves serial %d before SIGHUP (its poll is off); want 2", got)
	}
	if err := d.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitSerial(t, f, d.Proxy, 3, "after SIGHUP")
	// The download goes on, on the connection that shook hands with serial 2.
	up.releaseHeld()
	rest, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("the download broke after the reload: %v", err)
	}
	if got := append(first, rest...); !bytes.Equal(got, body) {
		t.Fatalf("the download's bytes differ after the reload (%d bytes, want %d)", len(got), len(body))
	}
	select {
	case <-d.exited:
		t.Fatalf("registryd exited after SIGHUP:\n%s", lastLines(d.Logs(), 20))
	default:
	}

	// The admin listener: its poll sees the new files, no signal.
	f.write("admin", 21)
	waitSerial(t, f, d.Admin, 21, "after the admin files changed")

	// A half rotation: the certificate of a new pair, the key of the old.
	errsBefore, _ := metricSample(t, d.Do("GET", "/metrics", "", nil).Expect(t, 200).Body, "registryd_tls_reloads_total",
		map[string]string{"listener": "admin", "result": "error"})
	bad, err := f.ca.Issue(22, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(aCert+".tmp", bad.Cert, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(aCert+".tmp", aCert); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		m := d.Do("GET", "/metrics", "", nil).Expect(t, 200).Body
		// The rotation above wrote the key, then the certificate: a poll
		// between the two may have found a mismatched pair already (logged,
		// counted, retried at the next change). The refusal looked for here
		// is the one that leaves the last pair served.
		if errs, _ := metricSample(t, m, "registryd_tls_reloads_total", map[string]string{"listener": "admin", "result": "error"}); errs > errsBefore {
			if v, _ := metricSample(t, m, "registryd_tls_reloads_total", map[string]string{"listener": "proxy", "result": "ok"}); v != 1 {
				t.Errorf("proxy reloads ok = %v, want 1 (SIGHUP)", v)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the mismatched pair was not counted within 20s:\n%s", m)
		}
		time.Sleep(20 * time.Millisecond) // a poll interval, not a synchronisation
	}
	if got := servedSerial(t, f, d.Admin); got != 21 {
		t.Errorf("after a mismatched pair the admin listener serves serial %d, want 21 still", got)
	}
	found := false
	for _, l := range strings.Split(d.Logs(), "\n") {
		if strings.Contains(l, `"msg":"tls: the new certificate and key do not load; still serving the previous certificate"`) &&
			strings.Contains(l, `"serial":"21"`) && strings.Contains(l, `"listener":"admin"`) && strings.Contains(l, "private key does not match") {
			found = true
		}
	}
	if !found {
		t.Errorf("no log line of the refused pair (listener admin, serial 21 kept):\n%s", lastLines(d.Logs(), 30))
	}
}

// rawExchange sends raw request bytes on c and reads one answer.
func rawExchange(t *testing.T, c net.Conn, request string) *http.Response {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, request); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	res.Body.Close()
	return res
}

// h2cUpgrade is a request asking to switch to HTTP/2 in the clear (RFC
// 7540 3.2), as curl --http2 sends it.
const h2cUpgrade = "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n" +
	"HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\nUser-Agent: itest\r\nPRIVATE-TOKEN: " + rootToken + "\r\n\r\n"

// checkH2CAnswer fails unless res is a plain HTTP/1.1 answer with want.
func checkH2CAnswer(t *testing.T, what string, res *http.Response, want int) {
	t.Helper()
	if res.StatusCode != want || res.ProtoMajor != 1 || res.ProtoMinor != 1 || res.Header.Get("Upgrade") != "" {
		t.Errorf("%s with Upgrade: h2c: %s %s (Upgrade %q); want HTTP/1.1 %d and no upgrade",
			what, res.Proto, res.Status, res.Header.Get("Upgrade"), want)
	}
}

// TestH2CUpgradeServedAsHTTP1: a request asking to upgrade to h2c is served
// as HTTP/1.1 on both listeners, never 101 and never refused, in the clear
// and over TLS (where h2c has no meaning).
func TestH2CUpgradeServedAsHTTP1(t *testing.T) {
	up := newPxUpstream(t)
	up.set("org/acme/h2c/1.0/h2c-1.0.pom", pxFile{body: []byte("<project/>")})
	check := func(t *testing.T, d *Daemon, dial func(addr string) (net.Conn, error)) {
		fx := d.Fix(t)
		reg := fx.Registry(fx.Group("h2c", 0, "private"), "maven")
		fx.Upstream(reg, up.URL, nil)
		for _, c := range []struct {
			what, base, path string
			want             int
		}{
			{"proxy readiness", d.Proxy, "/-/readiness", 200},
			{"proxy download", d.Proxy, "/api/v4/virtual_registries/packages/maven/" + itoa(reg) + "/org/acme/h2c/1.0/h2c-1.0.pom", 200},
			{"admin liveness", d.Admin, "/-/liveness", 200},
			{"admin API", d.Admin, "/api/v4/version", 200},
		} {
			addr := c.base[strings.Index(c.base, "//")+2:]
			conn, err := dial(addr)
			if err != nil {
				t.Fatalf("%s: %v", c.what, err)
			}
			res := rawExchange(t, conn, fmt.Sprintf(h2cUpgrade, c.path, addr))
			checkH2CAnswer(t, c.what, res, c.want)
			// The connection stays HTTP/1.1: a second request on it.
			res = rawExchange(t, conn, fmt.Sprintf("GET %s HTTP/1.1\r\nHost: %s\r\nPRIVATE-TOKEN: %s\r\n\r\n", c.path, addr, rootToken))
			checkH2CAnswer(t, c.what+" (the next request)", res, c.want)
			conn.Close()
		}
	}
	t.Run("plain", func(t *testing.T) {
		d := Start(t, nil)
		check(t, d, func(addr string) (net.Conn, error) { return net.Dial("tcp", addr) })
	})
	t.Run("tls", func(t *testing.T) {
		f := newTLSFixture(t)
		cert, key, _ := f.write("server", 2)
		d := startTLS(t, f, f.env(cert, key, cert, key))
		check(t, d, func(addr string) (net.Conn, error) {
			cfg := f.clientConfig()
			cfg.NextProtos = []string{"http/1.1"}
			return tls.Dial("tcp", addr, cfg)
		})
	})
}
