package main

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"

	"registryd/config"
	"registryd/internal/tlsfiles"
)

// tlsCerts are the certificates of the listeners that serve TLS; nil for a
// plain HTTP one.
type tlsCerts struct {
	proxy, admin *tlsfiles.Reloader
}

// loadTLS loads the certificate of each listener with proxy.tls or
// admin.tls set (config.Validate has checked the pairs already).
func loadTLS(cfg config.Config, log *slog.Logger, reg prometheus.Registerer) (tlsCerts, error) {
	var c tlsCerts
	m, err := tlsfiles.NewMetrics(reg)
	if err != nil {
		return c, err
	}
	load := func(name string, t config.TLS) (*tlsfiles.Reloader, error) {
		if !t.Enabled() {
			return nil, nil
		}
		r, err := tlsfiles.New(tlsfiles.Options{Listener: name, CertFile: t.CertFile, KeyFile: t.KeyFile, Logger: log, Metrics: m})
		if err != nil {
			return nil, err
		}
		leaf := r.Certificate().Leaf
		log.Info("tls: serving a certificate", "listener", name, "subject", leaf.Subject.String(),
			"serial", leaf.SerialNumber.String(), "not_after", leaf.NotAfter.UTC().Format("2006-01-02T15:04:05Z"),
			"reload_interval", t.ReloadInterval)
		return r, nil
	}
	if c.proxy, err = load("proxy", cfg.Proxy.TLS); err != nil {
		return c, err
	}
	if c.admin, err = load("admin", cfg.Admin.TLS); err != nil {
		return c, err
	}
	return c, nil
}

// names is how the start line says which listeners serve TLS.
func (c tlsCerts) names() string {
	switch {
	case c.proxy != nil && c.admin != nil:
		return "proxy,admin"
	case c.proxy != nil:
		return "proxy"
	case c.admin != nil:
		return "admin"
	}
	return "off"
}

// adminListener is ln, under TLS when the admin listener serves it. The
// admin listener offers HTTP/2 by ALPN (net/http serves it on a *tls.Conn
// that negotiated h2), then HTTP/1.1.
func (c tlsCerts) adminListener(ln net.Listener) net.Listener {
	if c.admin == nil {
		return ln
	}
	return tls.NewListener(ln, tlsfiles.ServerConfig(c.admin, "h2", "http/1.1"))
}

// proxyConfig is the download listener's TLS configuration, nil for plain
// HTTP. fasthttp speaks HTTP/1.1 only, which is all it offers by ALPN.
func (c tlsCerts) proxyConfig() *tls.Config {
	if c.proxy == nil {
		return nil
	}
	return tlsfiles.ServerConfig(c.proxy, "http/1.1")
}

// reload keeps the certificates fresh until the returned stop is called:
// each listener's files are polled every tls.reload_interval (unless 0),
// and SIGHUP reloads both. SIGHUP is caught only when a listener serves
// TLS; without one it keeps its default (the process ends), as before TLS
// existed.
func (c tlsCerts) reload(cfg config.Config) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var all []*tlsfiles.Reloader
	for _, l := range []struct {
		r *tlsfiles.Reloader
		t config.TLS
	}{{c.proxy, cfg.Proxy.TLS}, {c.admin, cfg.Admin.TLS}} {
		if l.r == nil {
			continue
		}
		all = append(all, l.r)
		if l.t.ReloadInterval > 0 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				l.r.Watch(ctx, l.t.ReloadInterval)
			}()
		}
	}
	if len(all) > 0 {
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer signal.Stop(hup)
			for {
				select {
				case <-ctx.Done():
					return
				case <-hup:
					for _, r := range all {
						_ = r.Reload("SIGHUP") // logged and counted; the old certificate stays
					}
				}
			}
		}()
	}
	return func() {
		cancel()
		wg.Wait()
	}
}
