// Package tlsfiles serves a listener's certificate from a certificate and
// key file pair and reloads it without a restart: on Reload (cmd/registryd
// calls it on SIGHUP) and when Watch sees either file change. The listener's
// tls.Config asks GetCertificate for every handshake, which reads an
// atomically swapped pointer: a reload touches no open connection (each keeps
// the certificate it shook hands with) and only new handshakes see the new
// one. A pair that does not load (half written, a key of another
// certificate, unreadable) is logged and counted, and the certificate
// served stays.
package tlsfiles

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the reload counters and expiry gauges of every listener,
// registered once on the injected registerer.
type Metrics struct {
	reloads  *prometheus.CounterVec
	notAfter *prometheus.GaugeVec
}

// Reload results, the result label of registryd_tls_reloads_total.
const (
	ResultOK    = "ok"
	ResultError = "error"
)

// NewMetrics registers the metrics on reg (none when reg is nil).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "registryd", Subsystem: "tls", Name: "reloads_total",
			Help: "Reloads of a listener's certificate and key files (SIGHUP or a change the poll saw), by listener " +
				"(proxy, admin) and result: ok (the new pair is served), error (it did not load: the old one is kept).",
		}, []string{"listener", "result"}),
		notAfter: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "registryd", Subsystem: "tls", Name: "certificate_not_after_timestamp_seconds",
			Help: "When the certificate a listener serves expires (its NotAfter), in Unix seconds, by listener.",
		}, []string{"listener"}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.reloads, m.notAfter} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Options say which files a Reloader serves.
type Options struct {
	// Listener names the listener ("proxy", "admin"): the metrics' label
	// and the log lines' listener key.
	Listener          string
	CertFile, KeyFile string
	Logger            *slog.Logger
	// Metrics, when not nil, count reloads and show the expiry.
	Metrics *Metrics
	// Now is the clock of the expiry warnings; default time.Now.
	Now func() time.Time
}

// Reloader holds a listener's current certificate.
type Reloader struct {
	o    Options
	cert atomic.Pointer[tls.Certificate]

	mu   sync.Mutex // serialises loads; guards seen
	seen [2]stamp   // the files as the last load attempt found them
}

// stamp is what the poll compares of a file: a rename over it (a new
// inode), a write (modification time, size).
type stamp struct {
	ok      bool
	mod     time.Time
	size    int64
	dev     uint64
	ino     uint64
	errText string
}

func stampOf(path string) stamp {
	fi, err := os.Stat(path)
	if err != nil {
		return stamp{errText: err.Error()}
	}
	s := stamp{ok: true, mod: fi.ModTime(), size: fi.Size()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		s.dev, s.ino = uint64(st.Dev), st.Ino
	}
	return s
}

// New loads the pair once; an error means the listener cannot start.
func New(o Options) (*Reloader, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	r := &Reloader{o: o}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen = r.stamps()
	cert, err := LoadPair(o.CertFile, o.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("%s.tls: %w", o.Listener, err)
	}
	r.install(cert)
	return r, nil
}

func (r *Reloader) stamps() [2]stamp {
	return [2]stamp{stampOf(r.o.CertFile), stampOf(r.o.KeyFile)}
}

// LoadPair loads a PEM certificate chain and its private key, with the
// leaf parsed. Its error says in an operator's words what is wrong with
// the pair (config.Validate reports it at start).
func LoadPair(certFile, keyFile string) (*tls.Certificate, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("%s and %s are not a certificate and its private key: %s", certFile, keyFile,
			strings.TrimPrefix(err.Error(), "tls: "))
	}
	if cert.Leaf == nil {
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, fmt.Errorf("%s: the certificate does not parse: %w", certFile, err)
		}
	}
	return &cert, nil
}

// install serves cert from the next handshake on. r.mu is held.
func (r *Reloader) install(cert *tls.Certificate) {
	r.cert.Store(cert)
	leaf := cert.Leaf
	if r.o.Metrics != nil {
		r.o.Metrics.notAfter.WithLabelValues(r.o.Listener).Set(float64(leaf.NotAfter.Unix()))
	}
	now := r.o.Now()
	switch {
	case now.After(leaf.NotAfter):
		r.o.Logger.Warn("tls: the certificate has expired; clients will refuse it", "listener", r.o.Listener,
			"file", r.o.CertFile, "not_after", leaf.NotAfter.UTC().Format(time.RFC3339))
	case now.Before(leaf.NotBefore):
		r.o.Logger.Warn("tls: the certificate is not valid yet; clients will refuse it", "listener", r.o.Listener,
			"file", r.o.CertFile, "not_before", leaf.NotBefore.UTC().Format(time.RFC3339))
	}
}

// Certificate is the certificate served now.
func (r *Reloader) Certificate() *tls.Certificate { return r.cert.Load() }

// GetCertificate is tls.Config.GetCertificate: the certificate served now.
func (r *Reloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return r.cert.Load(), nil
}

// Reload loads the files again and serves them from the next handshake on;
// when they do not load, the error is logged and counted and the
// certificate served stays. why says what asked for it ("SIGHUP",
// "files changed"), for the log.
func (r *Reloader) Reload(why string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reload(why)
}

// reload is Reload with r.mu held.
func (r *Reloader) reload(why string) error {
	r.seen = r.stamps()
	cert, err := LoadPair(r.o.CertFile, r.o.KeyFile)
	if err != nil {
		r.count(ResultError)
		old := r.cert.Load().Leaf
		r.o.Logger.Error("tls: the new certificate and key do not load; still serving the previous certificate",
			"listener", r.o.Listener, "reason", why, "err", err,
			"serial", old.SerialNumber.String(), "not_after", old.NotAfter.UTC().Format(time.RFC3339))
		return err
	}
	r.install(cert)
	r.count(ResultOK)
	r.o.Logger.Info("tls: certificate reloaded", "listener", r.o.Listener, "reason", why,
		"subject", cert.Leaf.Subject.String(), "serial", cert.Leaf.SerialNumber.String(),
		"not_after", cert.Leaf.NotAfter.UTC().Format(time.RFC3339))
	return nil
}

func (r *Reloader) count(result string) {
	if r.o.Metrics != nil {
		r.o.Metrics.reloads.WithLabelValues(r.o.Listener, result).Inc()
	}
}

// ErrUnchanged is ReloadIfChanged's answer when neither file changed.
var ErrUnchanged = errors.New("tlsfiles: unchanged")

// ReloadIfChanged reloads when either file differs from what the last
// load attempt found (replaced, written, removed or back): ErrUnchanged
// when neither does. A pair that failed to load is tried again only once a
// file changes again, so a certificate manager that writes the key and the
// certificate one after the other is logged once and then served.
func (r *Reloader) ReloadIfChanged() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stamps() == r.seen {
		return ErrUnchanged
	}
	return r.reload("files changed")
}

// Watch calls ReloadIfChanged every interval until ctx ends.
func (r *Reloader) Watch(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_ = r.ReloadIfChanged()
		}
	}
}

// ServerConfig is a listener's TLS configuration over r: TLS 1.2 at least,
// Go's default cipher suites and curves, the certificate from r at each
// handshake, and protos offered by ALPN (nil offers none).
func ServerConfig(r *Reloader, protos ...string) *tls.Config {
	return &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: r.GetCertificate,
		NextProtos:     protos,
	}
}
