package tlsfiles

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"registryd/internal/testcert"
)

func issue(t *testing.T, ca *testcert.CA, serial int64) testcert.Pair {
	t.Helper()
	p, err := ca.Issue(serial, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// handshake connects a client trusting ca to a server over cfg through a
// pipe and returns the serial number of the certificate the client saw.
func handshake(t *testing.T, cfg *tls.Config, ca *testcert.CA) int64 {
	t.Helper()
	c, s := netPipe(t)
	srv := tls.Server(s, cfg)
	errc := make(chan error, 1)
	go func() { errc <- srv.Handshake() }()
	cli := tls.Client(c, &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost"})
	if err := cli.Handshake(); err != nil {
		t.Fatalf("client handshake: %v", err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("server handshake: %v", err)
	}
	defer cli.Close()
	defer srv.Close()
	return cli.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
}

func TestReload(t *testing.T) {
	dir := t.TempDir()
	ca, err := testcert.NewCA("tlsfiles test CA")
	if err != nil {
		t.Fatal(err)
	}
	first := issue(t, ca, 10)
	certFile, keyFile, err := first.Write(dir, "server")
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	r, err := New(Options{Listener: "proxy", CertFile: certFile, KeyFile: keyFile, Metrics: m,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	cfg := ServerConfig(r, "http/1.1")
	if cfg.MinVersion != tls.VersionTLS12 {
		t.Errorf("MinVersion %x", cfg.MinVersion)
	}
	if got := handshake(t, cfg, ca); got != 10 {
		t.Fatalf("serial %d, want 10", got)
	}
	if got := sample(t, reg, "registryd_tls_certificate_not_after_timestamp_seconds", ""); got != float64(first.NotAfter.Unix()) {
		t.Errorf("not_after gauge %v, want %d", got, first.NotAfter.Unix())
	}

	// Nothing changed: no reload.
	if err := r.ReloadIfChanged(); !errors.Is(err, ErrUnchanged) {
		t.Fatalf("ReloadIfChanged on unchanged files: %v", err)
	}

	// A new pair, renamed into place: the poll sees it.
	second := issue(t, ca, 11)
	if _, _, err := second.Write(dir, "server"); err != nil {
		t.Fatal(err)
	}
	if err := r.ReloadIfChanged(); err != nil {
		t.Fatalf("ReloadIfChanged after a new pair: %v", err)
	}
	if got := handshake(t, cfg, ca); got != 11 {
		t.Fatalf("serial %d after the reload, want 11", got)
	}

	// Half a rotation: the certificate of a third pair with the key of the
	// second. Refused, counted, logged; serial 11 stays.
	third := issue(t, ca, 12)
	if err := os.WriteFile(certFile, third.Cert, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := r.ReloadIfChanged(); err == nil || !strings.Contains(err.Error(), "private key does not match") {
		t.Fatalf("ReloadIfChanged with a mismatched pair: %v", err)
	}
	if got := handshake(t, cfg, ca); got != 11 {
		t.Fatalf("serial %d after a failed reload, want 11 still", got)
	}
	if !strings.Contains(logs.String(), "still serving the previous certificate") || !strings.Contains(logs.String(), "serial=11") {
		t.Errorf("the failed reload's log:\n%s", logs.String())
	}
	// Not retried until a file changes again...
	if err := r.ReloadIfChanged(); !errors.Is(err, ErrUnchanged) {
		t.Fatalf("a failed pair retried without a change: %v", err)
	}
	// ...as the key arriving does; SIGHUP (Reload) loads whatever is there.
	if err := os.WriteFile(keyFile, third.Key, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := r.Reload("SIGHUP"); err != nil {
		t.Fatal(err)
	}
	if got := handshake(t, cfg, ca); got != 12 {
		t.Fatalf("serial %d after SIGHUP, want 12", got)
	}
	if err := r.ReloadIfChanged(); !errors.Is(err, ErrUnchanged) {
		t.Fatalf("the poll reloads what SIGHUP loaded: %v", err)
	}
	// Files removed: an error, the certificate stays.
	os.Remove(keyFile)
	if err := r.ReloadIfChanged(); err == nil {
		t.Fatal("a missing key reloaded")
	}
	if got := handshake(t, cfg, ca); got != 12 {
		t.Fatalf("serial %d after the key was removed, want 12 still", got)
	}

	for result, want := range map[string]float64{ResultOK: 2, ResultError: 2} {
		if got := sample(t, reg, "registryd_tls_reloads_total", result); got != want {
			t.Errorf("reloads{result=%s} = %v, want %v", result, got, want)
		}
	}
}

func TestWatch(t *testing.T) {
	dir := t.TempDir()
	ca, err := testcert.NewCA("tlsfiles test CA")
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile, err := issue(t, ca, 20).Write(dir, "server")
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(Options{Listener: "admin", CertFile: certFile, KeyFile: keyFile})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Watch(ctx, 10*time.Millisecond); close(done) }()
	defer func() { cancel(); <-done }()
	if _, _, err := issue(t, ca, 21).Write(dir, "server"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for r.Certificate().Leaf.SerialNumber.Int64() != 21 {
		if time.Now().After(deadline) {
			t.Fatal("Watch did not load the new pair within 10s")
		}
		time.Sleep(5 * time.Millisecond) // a poll interval, not a synchronisation
	}
}

func TestNewRefusesABadPair(t *testing.T) {
	dir := t.TempDir()
	ca, err := testcert.NewCA("tlsfiles test CA")
	if err != nil {
		t.Fatal(err)
	}
	certFile, _, err := issue(t, ca, 30).Write(dir, "a")
	if err != nil {
		t.Fatal(err)
	}
	_, otherKey, err := issue(t, ca, 31).Write(dir, "b")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(Options{Listener: "proxy", CertFile: certFile, KeyFile: otherKey}); err == nil ||
		!strings.HasPrefix(err.Error(), "proxy.tls: ") {
		t.Fatalf("New with a mismatched pair: %v", err)
	}
}

// sample is the value of the proxy listener's series of metric name in
// reg (with result, when not "").
func sample(t *testing.T, reg *prometheus.Registry, name, result string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if (l.GetName() == "listener" && l.GetValue() != "proxy") || (l.GetName() == "result" && l.GetValue() != result) {
					continue metrics
				}
			}
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("no %s{listener=proxy,result=%q}", name, result)
	return 0
}
