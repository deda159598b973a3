// Package admin is the management listener: the GitLab-compatible REST API
// under /api/v4, /metrics, and the health endpoints. Handlers return errors;
// one wrapper maps them to GitLab's JSON envelopes.
package admin

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"registryd/auth"
	"registryd/internal/redact"
	"registryd/store"
	"registryd/store/blob"
	"registryd/upstream"
)

// UpstreamChecker is what the connection tests and url validation need from
// the upstream client.
type UpstreamChecker interface {
	CheckURL(ctx context.Context, raw string) error
	Test(ctx context.Context, ep upstream.Endpoint, path string) upstream.TestResult
}

// Options are the admin listener's settings. Zero fields take the defaults
// below, which are registryd's (config.Default).
type Options struct {
	// MaxBodyBytes caps request bodies of the REST API; larger ones get 413
	// (admin.max_body_bytes). Default 4MiB.
	MaxBodyBytes int64
	// MaxSBOMBytes caps a dependency SBOM upload and an event import, which
	// are streamed (admin.max_sbom_bytes). Default 64MiB.
	MaxSBOMBytes int64
	// MaxSBOMIngests is how many SBOM uploads are read and stored at once;
	// one more is answered 429 with Retry-After before its body is read
	// (admin.max_sbom_ingests). Default 2.
	MaxSBOMIngests int
	// ExternalURL is the base of web_url and pagination links: the address
	// clients reach the admin API at (external.url). Default "": links
	// carry the path only.
	ExternalURL string
	// ConsoleSessionTTL is how long a web console sign-in lasts before the
	// console asks for the token again (admin.console_session_ttl).
	// Default 8h.
	ConsoleSessionTTL time.Duration
}

// withDefaults fills the zero fields of o.
func (o Options) withDefaults() Options {
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = 4 << 20
	}
	if o.MaxSBOMBytes <= 0 {
		o.MaxSBOMBytes = 64 << 20
	}
	if o.MaxSBOMIngests <= 0 {
		o.MaxSBOMIngests = 2
	}
	if o.ConsoleSessionTTL <= 0 {
		o.ConsoleSessionTTL = 8 * time.Hour
	}
	return o
}

// Deps are the admin listener's collaborators.
type Deps struct {
	Options  Options
	Store    *store.Store
	Auth     *auth.Service
	Upstream UpstreamChecker
	// Health is the upstreams' health, shared with the proxy: the upstream
	// resource shows it, and deleting an upstream or changing its url
	// forgets it. Default: a tracker of its own, where all stay healthy.
	Health *upstream.Health
	Logger *slog.Logger
	// Registerer receives the admin metrics; Gatherer serves /metrics.
	Registerer prometheus.Registerer
	Gatherer   prometheus.Gatherer
	// Ready reports why registryd is not ready, or nil when it is.
	Ready func() error
	// Cleanup starts cleanup policy runs at once (run now); nil: that
	// endpoint answers 503.
	Cleanup CleanupRunner
	// Advisories imports advisory databases; nil: those endpoints answer
	// 503. Its MaxBytes caps an upload.
	Advisories AdvisoryImporter
	// Scrub is this node's scrub of the blobs; nil: its endpoints answer
	// 503.
	Scrub Scrubber
	// Disk reports whether fills write to the cache (the data volume has
	// room), for the body of /-/readiness; nil leaves it out.
	Disk func() blob.DiskStatus
	// Version is registryd's version, shown by GET /version and /metadata.
	// Default: "unknown".
	Version string
	// Revision is the commit registryd was built from (the Makefile sets
	// it from git), shown by GET /version and /metadata abbreviated to 11
	// hex digits. Default: the commit the Go toolchain recorded in the
	// binary (vcs.revision), else "unknown".
	Revision string
}

// Server is the admin HTTP handler.
type Server struct {
	opts   Options
	st     *store.Store
	auth   *auth.Service
	up     UpstreamChecker
	health *upstream.Health
	log    *slog.Logger
	ready  func() error
	disk   func() blob.DiskStatus
	mux    *http.ServeMux
	met    *metrics
	// console is the web console's sessions and templates (/-/console/).
	console *console

	routes map[string]map[string]handler // pattern -> method -> handler
	order  []string

	cleanup    CleanupRunner    // starts cleanup policy runs; nil when there is none
	advisories AdvisoryImporter // imports advisory databases; nil when there is none
	scrub      Scrubber         // the scrub of the blobs; nil when there is none
	version    string           // registryd's version, for GET /version
	revision   string           // the commit it was built from, for GET /version
}

type handler func(w http.ResponseWriter, r *http.Request) error

type ctxKey int

const reqIDKey ctxKey = 0

// New builds the admin handler.
func New(d Deps) (*Server, error) {
	s := &Server{
		opts: d.Options.withDefaults(), st: d.Store, auth: d.Auth, up: d.Upstream, health: d.Health, log: d.Logger, ready: d.Ready,
		cleanup: d.Cleanup, advisories: d.Advisories, scrub: d.Scrub, disk: d.Disk, mux: http.NewServeMux(), routes: map[string]map[string]handler{},
		version: cmp.Or(d.Version, "unknown"), revision: revisionOf(d.Revision),
	}
	if s.health == nil {
		s.health = upstream.NewHealth(upstream.HealthOptions{})
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	// Paths are logged (a request that failed): a token a client wrote
	// into one must not reach the log.
	s.log = redact.Logger(s.log)
	if s.ready == nil {
		s.ready = func() error { return nil }
	}
	var err error
	if s.met, err = newMetrics(d.Registerer); err != nil {
		return nil, err
	}
	s.routesHealth(d.Gatherer)
	s.routesUsers()
	s.routesTokens()
	s.routesGroups()
	s.routesProjects()
	s.routesMembers()
	s.routesDeployTokens()
	s.routesRegistries()
	s.routesUpstreams()
	s.routesRules()
	s.routesAssociations()
	s.routesDependencies()
	s.routesEvents()
	s.routesAuditEvents()
	s.routesCacheEntries()
	s.routesCleanupPolicies()
	s.routesAdvisories()
	s.routesScrub()
	s.routesVersion()
	if s.console, err = newConsole(s, s.opts.ConsoleSessionTTL); err != nil {
		return nil, err
	}
	s.routesConsole()
	s.mount()
	return s, nil
}

// handle registers h for method on a ServeMux pattern (without method).
func (s *Server) handle(method, pattern string, h handler) {
	if s.routes[pattern] == nil {
		s.routes[pattern] = map[string]handler{}
		s.order = append(s.order, pattern)
	}
	s.routes[pattern][method] = h
}

// mount registers one dispatcher per pattern, so a wrong method gets GitLab's
// 405 JSON rather than ServeMux's plain text, and an unknown route GitLab's
// 404 {"error": ...}. Under /api/v4 both come after authentication: a bad
// token is 401 whatever the method or route (an unknown route without
// credentials stays 404, so that it does not look like a missing token).
func (s *Server) mount() {
	for _, pattern := range s.order {
		methods := s.routes[pattern]
		if h, ok := methods[http.MethodGet]; ok && methods[http.MethodHead] == nil {
			methods[http.MethodHead] = h
		}
		allow := make([]string, 0, len(methods))
		for m := range methods {
			allow = append(allow, m)
		}
		route := pattern
		s.mux.Handle(pattern, s.wrap(route, func(w http.ResponseWriter, r *http.Request) error {
			h, ok := methods[r.Method]
			if !ok {
				if strings.HasPrefix(route, apiPrefix) {
					if _, err := s.authenticateAnyScope(r); err != nil {
						return err
					}
				}
				w.Header().Set("Allow", strings.Join(allow, ", "))
				return &httpError{status: http.StatusMethodNotAllowed, body: map[string]any{"error": "405 Not Allowed"}}
			}
			return h(w, r)
		}))
	}
	s.mux.Handle("/", s.wrap("unmatched", func(w http.ResponseWriter, r *http.Request) error {
		if strings.HasPrefix(r.URL.Path, apiPrefix) {
			if _, err := s.principal(r); err != nil {
				return err
			}
		}
		return errRouteNotFound
	}))
}

// apiPrefix is where the REST API lives; the health and metrics endpoints
// are outside it and need no credentials.
const apiPrefix = "/api/v4/"

// ServeHTTP serves the admin API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// statusWriter remembers the status for logs and metrics.
type statusWriter struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// wrap adds what every request gets: a request id, security headers, a body
// limit, panic recovery, the error mapping, a log line and metrics.
func (s *Server) wrap(route string, h handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		id := newRequestID()
		r = r.WithContext(context.WithValue(r.Context(), reqIDKey, id))
		sw := &statusWriter{ResponseWriter: w}
		hdr := sw.Header()
		hdr.Set("X-Request-Id", id)
		hdr.Set("X-Frame-Options", "SAMEORIGIN")
		hdr.Set("X-Content-Type-Options", "nosniff")
		hdr.Set("Cache-Control", "no-store")
		if r.Body != nil {
			r.Body = http.MaxBytesReader(sw, r.Body, s.bodyLimit(r))
		}
		defer func() {
			if rec := recover(); rec != nil {
				if rec == http.ErrAbortHandler {
					panic(rec)
				}
				// The log line of the 500 has the stack where it happened.
				writeError(sw, r, s.log.With("stack", string(debug.Stack())), fmt.Errorf("panic: %v", rec))
			}
			if sw.status == 0 {
				sw.status = http.StatusOK
			}
			code := strconv.Itoa(sw.status)
			s.met.requests.WithLabelValues(route, methodLabel(r.Method), code).Inc()
			s.met.duration.WithLabelValues(route).Observe(time.Since(start).Seconds())
			s.log.Debug("admin request", "req_id", id, "method", r.Method, "route", route,
				"status", sw.status, "bytes", sw.bytes, "dur", time.Since(start))
		}()
		if err := h(sw, r); err != nil {
			writeError(sw, r, s.log, err)
		}
	})
}

// bodyLimit is the admin body cap; SBOM uploads and event imports, which
// are streamed, get the larger SBOM one.
func (s *Server) bodyLimit(r *http.Request) int64 {
	if (r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, "/dependencies")) ||
		(r.Method == http.MethodPost && r.URL.Path == "/api/v4/admin/events") {
		return s.opts.MaxSBOMBytes
	}
	if r.Method == http.MethodPost && r.URL.Path == advisoriesPath && s.advisories != nil {
		return s.advisories.MaxBytes() // spooled to disk, not held
	}
	return s.opts.MaxBodyBytes
}

func newRequestID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func requestID(r *http.Request) string {
	id, _ := r.Context().Value(reqIDKey).(string)
	return id
}
