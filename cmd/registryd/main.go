// Command registryd is a Maven caching proxy and virtual registry with a
// GitLab-compatible management API. main only wires: parse flags, load
// config and map it onto each component's Options (options.go), open the
// store, start the listeners, and stop in reverse.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"registryd/admin"
	"registryd/advisories"
	"registryd/auth"
	"registryd/cleanup"
	"registryd/config"
	"registryd/internal/history"
	"registryd/proxy"
	"registryd/store"
	"registryd/store/blob"
	"registryd/upstream"
)

// version and revision are set at build time with -ldflags
// "-X main.version=... -X main.revision=..." (the Makefile does, revision
// from git rev-parse); revision "" leaves GET /version the commit the Go
// toolchain recorded, if any.
var (
	version  = "dev"
	revision = ""
)

const usage = `registryd: a Maven caching proxy and virtual registry with a GitLab-compatible API.

Usage:
  registryd serve [--config FILE]   start the daemon (FILE may also come from REGISTRYD_CONFIG)
  registryd migrate --from DATA_DIR --config FILE
                                    copy a single node's index and blobs into the cluster FILE
                                    configures (docs/scale-out.md)
  registryd version                 print the version
  registryd help                    print this help

Configuration: embedded defaults, then the YAML file, then REGISTRYD_<SECTION>_<KEY>
environment variables (for example REGISTRYD_DATA_DIR, REGISTRYD_PROXY_LISTEN,
REGISTRYD_ADMIN_LISTEN, REGISTRYD_EXTERNAL_URL, REGISTRYD_ROOT_TOKEN).
See docs/operations.md for every setting, and config/registryd.example.yaml for a
file with every setting at its default.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "version", "--version", "-v":
		fmt.Fprintln(stdout, "registryd", version)
		return 0
	case "help", "--help", "-h":
		fmt.Fprint(stdout, usage)
		return 0
	case "migrate":
		return runMigrate(args[1:], stdout, stderr)
	case "serve":
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		fs.SetOutput(stderr)
		configPath := fs.String("config", os.Getenv("REGISTRYD_CONFIG"), "YAML configuration file")
		if err := fs.Parse(args[1:]); err != nil {
			return 2
		}
		if fs.NArg() > 0 {
			fmt.Fprintf(stderr, "registryd serve: unexpected argument %q\n", fs.Arg(0))
			return 2
		}
		cfg, err := config.Load(*configPath, os.Environ())
		if err != nil {
			fmt.Fprintf(stderr, "registryd: %v\n", err)
			return 1
		}
		ctx, hurry, stop := stopSignals()
		defer stop()
		if err := serve(ctx, hurry, cfg, stderr); err != nil {
			fmt.Fprintf(stderr, "registryd: %v\n", err)
			return 1
		}
		return 0
	}
	fmt.Fprintf(stderr, "registryd: unknown command %q\n\n%s", args[0], usage)
	return 2
}

// stopSignals turns SIGTERM and SIGINT into two contexts: the first signal
// cancels stop (begin a graceful stop), a second one cancels hurry (skip
// what is left of shutdown.drain_delay and of the wait for in-flight
// requests: an operator pressing Ctrl-C twice wants out now). release stops catching the signals.
func stopSignals() (stop, hurry context.Context, release func()) {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	stop, cancelStop := context.WithCancel(context.Background())
	hurry, cancelHurry := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		for _, cancel := range []context.CancelFunc{cancelStop, cancelHurry} {
			select {
			case <-sigs:
				cancel()
			case <-done:
				return
			}
		}
	}()
	return stop, hurry, func() {
		signal.Stop(sigs)
		close(done)
		cancelStop()
		cancelHurry()
	}
}

func newLogger(cfg config.Config, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.Log.Level))
	opts := &slog.HandlerOptions{Level: level, ReplaceAttr: durationsAsText}
	if cfg.Log.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// durationsAsText writes a duration as Go writes it ("1.5s", "30m0s")
// instead of slog's JSON default, an integer of nanoseconds that a reader
// has to divide in their head and a log pipeline cannot tell from a count.
// The text handler already does so; this makes both formats agree.
func durationsAsText(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
	}
	return a
}

// lockedWriter serialises writes to a log destination that is not a file:
// the main log and the access log write from different goroutines. (An
// *os.File needs no lock: each Write is whole under the file's own lock.)
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// accessLogWriter is where the proxy's access log goes: nowhere when it is
// off, proxy.access_log_path when set (appended to, so logrotate's
// copytruncate works), else the main log's destination. name says which,
// for the start line.
func accessLogWriter(cfg config.Config, logw io.Writer) (w io.Writer, name string, closeFn func() error, err error) {
	switch {
	case !cfg.Proxy.AccessLog:
		return nil, "off", func() error { return nil }, nil
	case cfg.Proxy.AccessLogPath == "":
		return logw, "log", func() error { return nil }, nil
	}
	f, err := os.OpenFile(cfg.Proxy.AccessLogPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
	if err != nil {
		return nil, "", nil, fmt.Errorf("access log: %w", err)
	}
	return f, cfg.Proxy.AccessLogPath, f.Close, nil
}

// serve runs registryd until ctx is cancelled, then stops gracefully: it
// answers /-/readiness 503 while it keeps serving for shutdown.drain_delay
// (cut short when hurry is cancelled), then drains and stops.
func serve(ctx, hurry context.Context, cfg config.Config, logw io.Writer) error {
	if _, ok := logw.(*os.File); !ok {
		logw = &lockedWriter{w: logw}
	}
	log := newLogger(cfg, logw)

	// Bind every listener before anything is written: a port that is taken
	// or a host that is not this machine's fails the start before the data
	// dir, the secrets, root or its token exist, so a bad configuration
	// leaves no trace on disk (config.Validate has already refused what can
	// be seen without trying).
	lns, err := listen(cfg)
	if err != nil {
		return err
	}
	serving := false
	defer func() {
		if !serving {
			lns.close()
		}
	}()
	// external.url derived from an admin.listen with port 0 (tests) names
	// the port the kernel chose, so that links in answers work.
	if cfg.External.URL == cfg.DefaultExternalURL(cfg.Admin.Listen) && strings.HasSuffix(cfg.Admin.Listen, ":0") {
		cfg.External.URL = cfg.DefaultExternalURL(lns.admin.Addr().String())
	}

	if err := blob.MkdirAll(cfg.Data.Dir, 0o750); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	if cfg.Clustered() {
		// bbolt's file lock keeps a second process off a single node's
		// data.dir; a cluster node keeps only tmp/ and its local tier
		// there, which a second node on the same directory would clear.
		unlock, err := lockDataDir(cfg.Data.Dir)
		if err != nil {
			return err
		}
		defer unlock()
	}
	key, err := secretKey(cfg)
	if err != nil {
		return err
	}
	logBackends(log, cfg)
	engine, err := openEngine(ctx, cfg, log)
	if err != nil {
		return err
	}
	var probe *dbProbe
	if cfg.Store.Backend == config.StorePostgres {
		probe = newDBProbe(engine)
	}
	// The store owns the engine from here: its Close, or a failed Open,
	// closes it.
	st, err := openStore(key, engine, cfg.Store)
	if err != nil {
		return err
	}
	var storeOpen atomic.Bool
	storeOpen.Store(true)
	defer func() {
		storeOpen.Store(false)
		if err := st.Close(); err != nil {
			log.Error("closing the store", "err", err)
		}
	}()
	if err := bootstrapRoot(cfg, st, log, rootTokenSource(os.Getenv)); err != nil {
		return err
	}

	reg := prometheus.NewRegistry()
	// The proxy's metrics have a registry of their own, served with the
	// others on /metrics: the traffic history samples them every interval
	// without running every other collector (the index's statistics are a
	// query each on PostgreSQL).
	proxyReg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if err := registerIndexMetrics(reg, st, engine); err != nil {
		return err
	}
	certs, err := loadTLS(cfg, log, reg)
	if err != nil {
		return err
	}
	authSvc := auth.New(st, authOptions(cfg))
	upClient := upstream.New(upstreamOptions(cfg, log))
	defer upClient.CloseIdleConnections()
	proxyOpts := proxyOptions(cfg)
	// One health tracker for both listeners: the proxy reports to it and
	// skips unhealthy upstreams, the admin API shows it.
	health := proxy.NewHealth(proxyOpts.Upstreams, log, nil)

	// Temp files of fills cut short by a crash go first; then blob files
	// that no entry refers to (a crash between a collector commit and its
	// unlink) are removed.
	blobs, err := openBlobs(ctx, cfg, st)
	if err != nil {
		return err
	}
	sweep, err := st.SweepBlobs(blobs)
	if err != nil {
		return err
	}
	log.Info("blob store ready", "blobs", sweep.Blobs, "bytes", sweep.Bytes,
		"orphans_removed", sweep.Removed, "orphan_bytes", sweep.RemovedBytes)
	gwSecret, err := gatewaySecret(cfg)
	if err != nil {
		return err
	}
	// nil when proxy.access_log is off: the proxy then writes none.
	accessW, accessName, closeAccess, err := accessLogWriter(cfg, logw)
	if err != nil {
		return err
	}
	// Closed after the proxy listener's Shutdown (below), which flushes it.
	defer func() {
		if err := closeAccess(); err != nil {
			log.Error("closing the access log", "err", err)
		}
	}()

	var (
		listening atomic.Bool // both listeners serve
		draining  atomic.Bool // a stop has begun: keep serving, but not ready
	)
	ready := func() error {
		switch {
		case draining.Load():
			return errors.New("shutting down")
		case !storeOpen.Load():
			return errors.New("store closed")
		case !listening.Load():
			return errors.New("listeners not serving")
		case probe != nil:
			// A node without its index can serve no miss and no admin
			// request: out of rotation until the database answers.
			return probe.Err()
		}
		return nil
	}
	// The download listener's readiness answers whoever reaches that port:
	// its reasons are fixed words, never the index database's address or
	// error (the admin listener's, on loopback by default, gives those).
	proxyReady := func() error {
		err := ready()
		if err != nil && probe != nil && !draining.Load() && storeOpen.Load() && listening.Load() {
			return errors.New("index database unavailable")
		}
		return err
	}
	// The cleanup scheduler flushes the proxy's download counts before a
	// run, so it needs the proxy server, created below.
	var proxySrv *proxy.Server
	cleanOpts := cleanupOptions(cfg)
	cleanOpts.Store, cleanOpts.Logger, cleanOpts.Registerer = st, log, reg
	cleanOpts.BeforeRun = func() error { return proxySrv.FlushDownloads() }
	cleaner, err := cleanup.New(cleanOpts)
	if err != nil {
		return err
	}
	advOpts := advisoriesOptions(cfg)
	advOpts.Store, advOpts.Logger, advOpts.Registerer = st, log, reg
	importer, err := advisories.New(advOpts)
	if err != nil {
		return err
	}
	scrubber, err := newScrubber(cfg, st, blobs, reg, log)
	if err != nil {
		return err
	}
	adminSrv, err := admin.New(admin.Deps{Options: adminOptions(cfg), Store: st, Auth: authSvc, Upstream: upClient, Health: health,
		Logger: log, Registerer: reg, Gatherer: prometheus.Gatherers{reg, proxyReg}, Ready: ready, Cleanup: cleaner, Advisories: importer, Scrub: scrubber,
		Disk: blobs.DiskStatus, Version: version, Revision: revision})
	if err != nil {
		return err
	}
	proxySrv, err = proxy.New(proxy.Deps{Options: proxyOpts, Store: st, Blobs: blobs, Auth: authSvc, Upstream: upClient,
		Health: health, Logger: log, Registerer: proxyReg, GatewaySecret: gwSecret, AccessLog: accessW, Ready: proxyReady})
	if err != nil {
		return err
	}
	// The console's traffic charts: this node's counts, read from the
	// proxy's metrics, recorded in the index every interval.
	histOpts := historyOptions(cfg)
	histOpts.Gatherer, histOpts.Store, histOpts.Logger = proxyReg, st, log
	sampler := history.New(histOpts)
	httpSrv := &http.Server{
		Handler:           adminSrv,
		ReadTimeout:       cfg.Admin.ReadTimeout,
		ReadHeaderTimeout: 10 * time.Second,
		WriteTimeout:      cfg.Admin.WriteTimeout,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}

	errc := make(chan error, 3)
	serving = true
	if tc := certs.proxyConfig(); tc != nil {
		go func() { errc <- proxySrv.ServeTLS(lns.proxy, tc) }()
	} else {
		go func() { errc <- proxySrv.Serve(lns.proxy) }()
	}
	go func() { errc <- httpSrv.Serve(certs.adminListener(lns.admin)) }()
	// Until serve returns: a certificate may be replaced while draining too.
	stopReload := certs.reload(cfg)
	defer stopReload()
	if lns.pprof != nil {
		go func() { errc <- servePprof(lns.pprof) }()
	}
	proxySrv.Start()
	cleaner.Start()
	importer.Start()
	sampler.Start()
	scrubber.Start()
	listening.Store(true)
	log.Info("registryd started", "version", version, "proxy", lns.proxy.Addr().String(),
		"admin", lns.admin.Addr().String(), "data_dir", cfg.Data.Dir, "access_log", accessName,
		"external_url", cfg.External.URL, "tls", certs.names())

	var runErr error
	select {
	case <-ctx.Done():
		// Not ready first, still serving: a load balancer polling
		// /-/readiness takes registryd out of rotation while requests it
		// still sends are answered, instead of meeting a closed port.
		draining.Store(true)
		log.Info("shutting down: /-/readiness answers 503, still serving until the drain delay is over",
			"drain_delay", cfg.Shutdown.DrainDelay, "timeout", cfg.Shutdown.Timeout)
		if cfg.Shutdown.DrainDelay > 0 {
			t := time.NewTimer(cfg.Shutdown.DrainDelay)
			select {
			case <-t.C:
			case <-hurry.Done():
				log.Info("a second signal: the drain delay is cut short")
			case runErr = <-errc:
				log.Error("listener failed", "err", runErr)
			}
			t.Stop()
		}
		log.Info("closing the listeners; in-flight requests may finish", "timeout", cfg.Shutdown.Timeout)
	case runErr = <-errc:
		log.Error("listener failed", "err", runErr)
	}
	draining.Store(true)
	listening.Store(false)
	// A second signal also ends the wait for in-flight requests: the
	// operator wants out now, not after shutdown.timeout.
	sctx, cancel := context.WithTimeout(hurry, cfg.Shutdown.Timeout)
	defer cancel()
	if err := httpSrv.Shutdown(sctx); err != nil {
		log.Warn("admin listener did not drain in time", "err", err)
	}
	if err := proxySrv.Shutdown(sctx); err != nil {
		log.Warn("proxy listener did not drain in time", "err", err)
	}
	// Reverse order of what depends on what: the listeners are down, so no
	// request adds download counts or starts a cleanup run; stop the
	// cleanup runs at their batch boundary (resumed at the next start),
	// flush the counts, then stop the collector, and only then (deferred
	// above) close the store.
	cleaner.Stop()
	importer.Stop()
	// A cycle in progress stops at its next read; its cursor is kept for
	// the next start.
	scrubber.Stop()
	if err := proxySrv.StopCounting(); err != nil {
		log.Error("flushing download counts", "err", err)
	}
	proxySrv.StopCollector()
	// The listeners count no more: the last interval's counts are
	// recorded before the store closes.
	sampler.Stop()
	log.Info("registryd stopped")
	return runErr
}

// secretKey is the configured key (secrets.key or secrets.key_file), or
// DATA_DIR/secrets.key created on first start. A cluster always has one
// configured (config.Validate): a key per node would differ.
func secretKey(cfg config.Config) ([]byte, error) {
	key, err := cfg.Secrets.SecretKey()
	if err != nil || key != nil {
		return key, err
	}
	return store.LoadOrCreateSecret(cfg.Path("secrets.key"), 32)
}

// gatewaySecret is the configured gateway secret, or DATA_DIR/gateway.secret
// (32 random bytes) created 0600 on first start. It verifies the HS256 JWTs
// gateways send with uploads.
func gatewaySecret(cfg config.Config) ([]byte, error) {
	if cfg.Gateway.Secret != "" {
		return []byte(cfg.Gateway.Secret), nil
	}
	return store.LoadOrCreateSecret(cfg.Path("gateway.secret"), 32)
}

// rootTokenSource names where root.token came from, for the log line of
// the first start: the variable when it is set (it overrides the file),
// else the configuration file.
func rootTokenSource(getenv func(string) string) string {
	if getenv("REGISTRYD_ROOT_TOKEN") != "" {
		return "REGISTRYD_ROOT_TOKEN"
	}
	return "root.token of the configuration file"
}

// bootstrapRoot creates root and its first token on an empty data dir. The
// token is root.token when set (tokenFrom says from where: the file or
// REGISTRYD_ROOT_TOKEN), else random and written to
// DATA_DIR/initial_root_token; the log says where, never the value.
func bootstrapRoot(cfg config.Config, st *store.Store, log *slog.Logger, tokenFrom string) error {
	if st.Initialized() {
		return nil
	}
	token, path := cfg.Root.Token, cfg.Path("initial_root_token")
	if token == "" {
		token = auth.NewTokenValue("rdpat-")
		// The file is written before root exists: a crash in between leaves a
		// file that the next start overwrites with the token it stores.
		if err := store.WriteFileAtomic(path, []byte(token+"\n"), 0o600); err != nil {
			return fmt.Errorf("writing the initial root token: %w", err)
		}
	}
	created, err := st.EnsureRoot(token)
	if err != nil {
		return fmt.Errorf("creating the root user: %w", err)
	}
	switch {
	case !created && cfg.Root.Token == "":
		// Another node of the cluster created root first: the token just
		// written is no one's, and must not be mistaken for root's.
		_ = os.Remove(path)
	case !created:
	case cfg.Root.Token != "":
		log.Info("created the admin user root with the token from " + tokenFrom)
	default:
		abs, _ := filepath.Abs(path)
		log.Info("created the admin user root; its personal access token is in this file", "file", abs)
	}
	return nil
}

// listeners are registryd's bound sockets; pprof is nil when off.
type listeners struct {
	proxy, admin, pprof net.Listener
}

func (l listeners) close() {
	for _, ln := range []net.Listener{l.proxy, l.admin, l.pprof} {
		if ln != nil {
			ln.Close()
		}
	}
}

// listen binds the proxy, admin and (when configured) pprof addresses, or
// none of them.
func listen(cfg config.Config) (listeners, error) {
	var l listeners
	var err error
	if l.proxy, err = net.Listen("tcp", cfg.Proxy.Listen); err != nil {
		return l, fmt.Errorf("proxy listener (proxy.listen %s): %w", cfg.Proxy.Listen, err)
	}
	if l.admin, err = net.Listen("tcp", cfg.Admin.Listen); err != nil {
		l.close()
		return listeners{}, fmt.Errorf("admin listener (admin.listen %s): %w", cfg.Admin.Listen, err)
	}
	if cfg.Admin.PprofListen != "" {
		if l.pprof, err = net.Listen("tcp", cfg.Admin.PprofListen); err != nil {
			l.close()
			return listeners{}, fmt.Errorf("pprof listener (admin.pprof_listen %s): %w", cfg.Admin.PprofListen, err)
		}
	}
	return l, nil
}

func servePprof(ln net.Listener) error {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	return srv.Serve(ln)
}
