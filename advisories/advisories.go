// Package advisories keeps registryd's offline advisory database current.
// It imports copies of OSV databases into the store, which re-matches the
// dependency list entries the changed advisories name: copies uploaded by
// admins (admin/advisories.go), and the configured sources (paths and
// URLs, advisories.sources) at start and every advisories.refresh_interval.
//
// One import runs at a time in a process, and one in a cluster (a lease in
// the index): an upload meanwhile is refused with ErrBusy, a refresh that
// finds one running skips its turn. Archives are spooled to a temp file
// (zip needs random access) under advisories.max_bytes; a stream of records
// is spooled too, so that reading the body never waits for the import.
package advisories

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"registryd/osv"
	"registryd/store"
)

// Store is what imports need of the index; *store.Store has it.
type Store interface {
	ImportAdvisories(imp store.AdvisoryImport, advs iter.Seq2[*store.Advisory, error]) (store.AdvisoryImportResult, error)
	// TryLease takes a cluster-wide lease (store.Store.TryLease).
	TryLease(ctx context.Context, key string) (unlock func(), ok bool, err error)
}

// Options configure an Importer. Zero fields take the defaults below,
// which are registryd's (config.Default).
type Options struct {
	// Store is the index. Required.
	Store Store
	// Sources are the copies of OSV databases imported at start and then
	// every RefreshInterval (advisories.sources): absolute paths (a zip
	// archive, a directory of OSV JSON files, a file of records) or http(s)
	// URLs. Default none: admins import through the API.
	Sources []string
	// RefreshInterval is how often the sources are imported again
	// (advisories.refresh_interval). Default 24h.
	RefreshInterval time.Duration
	// MaxBytes caps one archive or record file, fetched or uploaded
	// (advisories.max_bytes). Default 1GiB.
	MaxBytes int64
	// BatchSize is how many changed advisories one transaction writes
	// (advisories.batch_size). Default 200.
	BatchSize int
	// TempDir holds spooled archives (DATA_DIR/tmp, cleared at start).
	TempDir string
	// Client fetches URL sources. Default: a client with a 30s header
	// timeout.
	Client *http.Client
	Logger *slog.Logger
	// Registerer receives the import metrics; nil registers none.
	Registerer prometheus.Registerer
}

// Result is an import's outcome: the store's counts and what the reader
// skipped.
type Result struct {
	store.AdvisoryImportResult
	osv.Stats
	// NotModified: a URL source answered 304; nothing was imported.
	NotModified bool `json:"not_modified,omitempty"`
}

// Errors of an import. An import refused by ErrBusy or ErrTooLarge changed
// nothing.
var (
	ErrBusy     = errors.New("another advisory import is running")
	ErrTooLarge = errors.New("the advisory database is larger than advisories.max_bytes")
	ErrStopped  = errors.New("the advisory importer is stopped")
)

// ReadError is a copy that could not be read to its end (not a zip, a
// stream cut short): the batches before it are committed, the sweep of a
// full import is not done.
type ReadError struct{ Err error }

func (e *ReadError) Error() string { return "reading the advisory database: " + e.Err.Error() }

func (e *ReadError) Unwrap() error { return e.Err }

// leaseKey serialises imports across a cluster.
const leaseKey = "registryd:advisories:import"

// Importer imports advisory databases.
type Importer struct {
	st       Store
	sources  []string
	interval time.Duration // Options.RefreshInterval
	maxBytes int64
	batch    int // Options.BatchSize
	tmp      string
	client   *http.Client
	log      *slog.Logger
	met      *metrics

	running sync.Mutex // held by the import in progress (TryLock)
	mu      sync.Mutex
	seen    map[string]validators // per URL source, what the last fetch answered
	stop    chan struct{}
	wake    chan struct{}
	done    sync.WaitGroup
	started bool
	stopped bool
}

type validators struct{ etag, lastModified string }

// withDefaults fills the zero fields of o.
func (o Options) withDefaults() Options {
	if o.RefreshInterval <= 0 {
		o.RefreshInterval = 24 * time.Hour
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = 1 << 30
	}
	if o.BatchSize <= 0 {
		o.BatchSize = 200
	}
	if o.Client == nil {
		o.Client = &http.Client{Transport: &http.Transport{Proxy: http.ProxyFromEnvironment,
			ResponseHeaderTimeout: 30 * time.Second, TLSHandshakeTimeout: 10 * time.Second}}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.TempDir == "" {
		o.TempDir = os.TempDir()
	}
	return o
}

// New returns an importer; Start starts the scheduled refresh.
func New(o Options) (*Importer, error) {
	if o.Store == nil {
		return nil, errors.New("advisories: no store")
	}
	o = o.withDefaults()
	met, err := newMetrics(o.Registerer)
	if err != nil {
		return nil, err
	}
	return &Importer{st: o.Store, sources: o.Sources, interval: o.RefreshInterval, maxBytes: o.MaxBytes,
		batch: o.BatchSize, tmp: o.TempDir, client: o.Client, log: o.Logger, met: met,
		seen: map[string]validators{}, stop: make(chan struct{}), wake: make(chan struct{}, 1)}, nil
}

// Start imports the configured sources now and then every refresh
// interval, in the background, until Stop.
func (im *Importer) Start() {
	im.mu.Lock()
	defer im.mu.Unlock()
	if im.started || im.stopped || len(im.sources) == 0 {
		return
	}
	im.started = true
	im.done.Add(1)
	go im.loop()
}

// Stop ends the scheduled refresh; an import in progress finishes its
// batch and stops (what it committed stays).
func (im *Importer) Stop() {
	im.mu.Lock()
	if im.stopped {
		im.mu.Unlock()
		return
	}
	im.stopped = true
	close(im.stop)
	im.mu.Unlock()
	im.done.Wait()
}

// RefreshNow asks the scheduled refresh to run at once (in the
// background). It returns how many sources the refresh imports: 0 when
// none is configured, and then nothing runs.
func (im *Importer) RefreshNow() int {
	if len(im.sources) == 0 {
		return 0
	}
	select {
	case im.wake <- struct{}{}:
	default: // one is pending already
	}
	return len(im.sources)
}

func (im *Importer) loop() {
	defer im.done.Done()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-im.stop:
			return
		case <-t.C:
		case <-im.wake:
			if !t.Stop() {
				select {
				case <-t.C:
				default:
				}
			}
		}
		im.Refresh(context.Background())
		t.Reset(im.interval)
	}
}

// Refresh imports every configured source once, one after the other, and
// returns their results (a failed source is logged and counted).
func (im *Importer) Refresh(ctx context.Context) []Result {
	var out []Result
	for _, src := range im.sources {
		select {
		case <-im.stop:
			return out
		default:
		}
		res, err := im.importSource(ctx, src)
		name := redact(src)
		switch {
		case errors.Is(err, ErrBusy):
			im.log.Info("advisory refresh skipped: another import is running", "source", name)
		case err != nil:
			im.log.Error("advisory refresh failed", "source", name, "err", err)
		case res.NotModified:
			im.log.Info("advisory source not modified", "source", name)
		default:
			im.log.Info("advisories imported", "source", name, "read", res.Read, "added", res.Added,
				"changed", res.Changed, "removed", res.Removed, "projects", res.Projects, "dependencies", res.Dependencies,
				"dur", res.FinishedAt.Sub(res.StartedAt))
		}
		out = append(out, res)
	}
	return out
}

// redact hides a URL source's credentials for logs and results.
func redact(src string) string {
	if u, err := url.Parse(src); err == nil && u.Scheme != "" && u.Host != "" {
		return u.Redacted()
	}
	return src
}

// lock takes the process's and the cluster's import lock.
func (im *Importer) lock(ctx context.Context) (func(), error) {
	if !im.running.TryLock() {
		return nil, ErrBusy
	}
	unlock, ok, err := im.st.TryLease(ctx, leaseKey)
	if err != nil || !ok {
		im.running.Unlock()
		if err != nil {
			return nil, err
		}
		return nil, ErrBusy
	}
	return func() { unlock(); im.running.Unlock() }, nil
}

// importSource imports one configured source (a full copy).
func (im *Importer) importSource(ctx context.Context, src string) (Result, error) {
	unlock, err := im.lock(ctx)
	if err != nil {
		im.met.imports.WithLabelValues("refresh", outcome(err)).Inc()
		return Result{}, err
	}
	defer unlock()
	var res Result
	if u, perr := url.Parse(src); perr == nil && (u.Scheme == "http" || u.Scheme == "https") {
		res, err = im.importURL(ctx, src)
	} else {
		res, err = im.importPath(src)
	}
	im.count("refresh", res, err)
	return res, err
}

func (im *Importer) importPath(path string) (Result, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return Result{}, err
	}
	imp := store.AdvisoryImport{Source: path, Full: true, BatchSize: im.batch}
	if fi.IsDir() {
		return im.run(imp, func(st *osv.Stats) iter.Seq2[*store.Advisory, error] { return osv.ReadDir(os.DirFS(path), st) })
	}
	if fi.Size() > im.maxBytes {
		return Result{}, ErrTooLarge
	}
	f, err := os.Open(path)
	if err != nil {
		return Result{}, err
	}
	defer f.Close()
	return im.importFile(imp, f, fi.Size())
}

// importFile imports an archive or a record file: a zip by its magic
// number, records otherwise.
func (im *Importer) importFile(imp store.AdvisoryImport, f *os.File, size int64) (Result, error) {
	magic := make([]byte, 4)
	n, _ := f.ReadAt(magic, 0)
	if n == 4 && string(magic) == "PK\x03\x04" {
		return im.run(imp, func(st *osv.Stats) iter.Seq2[*store.Advisory, error] { return osv.ReadZip(f, size, st) })
	}
	return im.run(imp, func(st *osv.Stats) iter.Seq2[*store.Advisory, error] {
		return osv.ReadStream(bufio.NewReader(io.NewSectionReader(f, 0, size)), st)
	})
}

func (im *Importer) run(imp store.AdvisoryImport, read func(*osv.Stats) iter.Seq2[*store.Advisory, error]) (Result, error) {
	var res Result
	advs := read(&res.Stats)
	stopping := func(yield func(*store.Advisory, error) bool) {
		for a, err := range advs {
			select {
			case <-im.stop:
				yield(nil, ErrStopped)
				return
			default:
			}
			if err != nil {
				err = &ReadError{Err: err}
			}
			if !yield(a, err) {
				return
			}
		}
	}
	r, err := im.st.ImportAdvisories(imp, stopping)
	res.AdvisoryImportResult = r
	return res, err
}

func (im *Importer) importURL(ctx context.Context, src string) (Result, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, src, nil)
	if err != nil {
		return Result{}, err
	}
	im.mu.Lock()
	v := im.seen[src]
	im.mu.Unlock()
	if v.etag != "" {
		req.Header.Set("If-None-Match", v.etag)
	}
	if v.lastModified != "" {
		req.Header.Set("If-Modified-Since", v.lastModified)
	}
	resp, err := im.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // its text names the URL, credentials included
		}
		return Result{}, fmt.Errorf("fetching %s: %w", redact(src), err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotModified:
		return Result{AdvisoryImportResult: store.AdvisoryImportResult{Source: redact(src), Full: true, Complete: true},
			NotModified: true}, nil
	case resp.StatusCode != http.StatusOK:
		return Result{}, fmt.Errorf("fetching %s: %s", redact(src), resp.Status)
	}
	if resp.ContentLength > im.maxBytes {
		return Result{}, ErrTooLarge
	}
	f, size, err := im.spool(resp.Body)
	if err != nil {
		return Result{}, err
	}
	defer f.Close()
	res, err := im.importFile(store.AdvisoryImport{Source: redact(src), Full: true, BatchSize: im.batch}, f, size)
	if err == nil {
		im.mu.Lock()
		im.seen[src] = validators{etag: resp.Header.Get("ETag"), lastModified: resp.Header.Get("Last-Modified")}
		im.mu.Unlock()
	}
	return res, err
}

// spool copies r to an unlinked temp file, at most MaxBytes of it.
func (im *Importer) spool(r io.Reader) (*os.File, int64, error) {
	if err := os.MkdirAll(im.tmp, 0o750); err != nil {
		return nil, 0, err
	}
	f, err := os.CreateTemp(im.tmp, "advisories-*")
	if err != nil {
		return nil, 0, err
	}
	os.Remove(f.Name()) // gone with the last descriptor, even after a crash
	n, err := io.Copy(f, io.LimitReader(r, im.maxBytes+1))
	if err == nil && n > im.maxBytes {
		err = ErrTooLarge
	}
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	return f, n, nil
}

// Upload is an admin's import of a copy sent in a request body.
type Upload struct {
	// Source names the copy (default "upload"); Full removes the source's
	// advisories the copy lacks.
	Source string
	Full   bool
	// Body is a zip archive or records (one, an array, NDJSON), recognised
	// by its first bytes.
	Body io.Reader
}

// ImportUpload spools and imports an uploaded copy. The body is read whole
// before the import starts. ErrBusy when another import runs (nothing is
// read), ErrTooLarge past advisories.max_bytes.
func (im *Importer) ImportUpload(ctx context.Context, u Upload) (Result, error) {
	unlock, err := im.lock(ctx)
	if err != nil {
		im.met.imports.WithLabelValues("upload", outcome(err)).Inc()
		return Result{}, err
	}
	defer unlock()
	f, size, err := im.spool(u.Body)
	if err != nil {
		im.met.imports.WithLabelValues("upload", outcome(err)).Inc()
		return Result{}, err
	}
	defer f.Close()
	res, err := im.importFile(store.AdvisoryImport{Source: u.Source, Full: u.Full, BatchSize: im.batch}, f, size)
	im.count("upload", res, err)
	return res, err
}

// MaxBytes is the largest copy an upload may send.
func (im *Importer) MaxBytes() int64 { return im.maxBytes }

func outcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, ErrBusy):
		return "busy"
	case errors.Is(err, ErrTooLarge):
		return "too_large"
	}
	return "failed"
}

func (im *Importer) count(how string, res Result, err error) {
	o := outcome(err)
	if err == nil && res.NotModified {
		o = "not_modified"
	}
	im.met.imports.WithLabelValues(how, o).Inc()
	im.met.changes.WithLabelValues("added").Add(float64(res.Added))
	im.met.changes.WithLabelValues("changed").Add(float64(res.Changed))
	im.met.changes.WithLabelValues("removed").Add(float64(res.Removed))
	im.met.rematched.Add(float64(res.Dependencies))
	if err == nil && !res.NotModified {
		im.met.lastSuccess.SetToCurrentTime()
	}
}

type metrics struct {
	imports     *prometheus.CounterVec
	changes     *prometheus.CounterVec
	rematched   prometheus.Counter
	lastSuccess prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		imports: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "registryd_advisory_imports_total",
			Help: "Advisory database imports, by how they started (upload, refresh) and outcome (ok, not_modified, busy, too_large, failed)."},
			[]string{"how", "outcome"}),
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "registryd_advisory_changes_total",
			Help: "Advisories added, changed and removed by imports."}, []string{"change"}),
		rematched: prometheus.NewCounter(prometheus.CounterOpts{Name: "registryd_advisory_rematched_dependencies_total",
			Help: "Dependency list entries whose vulnerabilities an advisory import changed."}),
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{Name: "registryd_advisory_last_import_timestamp_seconds",
			Help: "When this process last completed an advisory import."}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.imports, m.changes, m.rematched, m.lastSuccess} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}
