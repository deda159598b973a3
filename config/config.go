// Package config holds registryd's one configuration struct: embedded defaults,
// an optional YAML file, REGISTRYD_<SECTION>_<KEY> environment overrides, and a
// Validate that reports every problem at once.
//
// Only cmd (and bench, which writes configurations for the daemons it
// starts) imports it: each component takes Options of its own, which
// cmd/registryd/options.go fills from the validated Config.
package config

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Plan is the licence tier registryd behaves as.
type Plan string

// The licence tiers, lowest first.
const (
	PlanFree     Plan = "free"
	PlanPremium  Plan = "premium"
	PlanUltimate Plan = "ultimate"
)

// valid reports whether p is one of the tiers (auth.Plan ranks them).
func (p Plan) valid() bool {
	return p == PlanFree || p == PlanPremium || p == PlanUltimate
}

// Config is the whole configuration. Every field's default is in Default().
type Config struct {
	Data       Data       `yaml:"data"`
	Store      Store      `yaml:"store"`
	Blobs      Blobs      `yaml:"blobs"`
	Proxy      Proxy      `yaml:"proxy"`
	Admin      Admin      `yaml:"admin"`
	External   External   `yaml:"external"`
	Upstreams  Upstreams  `yaml:"upstreams"`
	License    License    `yaml:"license"`
	Features   Features   `yaml:"features"`
	Root       Root       `yaml:"root"`
	Secrets    Secrets    `yaml:"secrets"`
	Gateway    Gateway    `yaml:"gateway"`
	Auth       Auth       `yaml:"auth"`
	Cache      Cache      `yaml:"cache"`
	Metadata   Metadata   `yaml:"metadata"`
	Cleanup    Cleanup    `yaml:"cleanup"`
	Scrub      Scrub      `yaml:"scrub"`
	Audit      Audit      `yaml:"audit"`
	Advisories Advisories `yaml:"advisories"`
	Shutdown   Shutdown   `yaml:"shutdown"`
	Log        Log        `yaml:"log"`
}

// Data says where registryd keeps its state.
type Data struct {
	// Dir holds registry.db, blobs/, tmp/, secrets.key. Default "./data".
	Dir string `yaml:"dir"`
}

// Proxy is the download listener (fasthttp).
type Proxy struct {
	// Listen is the proxy listener address, host:port (an empty host listens
	// on every interface; port 0 lets the kernel choose, for tests). Default ":8080".
	Listen string `yaml:"listen"`
	// HeaderTimeout bounds receiving one request line plus its headers: on a
	// new connection from when it is served, on a kept-alive one from the
	// first byte of the next request (the wait for that byte is IdleTimeout).
	// A client dribbling its headers (slowloris) is cut off after it. Default 10s.
	HeaderTimeout time.Duration `yaml:"header_timeout"`
	// ReadTimeout bounds reading one request's body, from the end of its
	// headers: an upload gets this long. Default 60s.
	ReadTimeout time.Duration `yaml:"read_timeout"`
	// WriteTimeout bounds writing one response; large artifacts need room. Default 30m.
	WriteTimeout time.Duration `yaml:"write_timeout"`
	// IdleTimeout closes idle keep-alive connections. Default 120s.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// MaxHeaderBytes caps the request header size. Default 16KiB.
	MaxHeaderBytes ByteSize `yaml:"max_header_bytes"`
	// Concurrency caps connections served at once, for all clients together;
	// one more is answered 503 and closed. Default 8192.
	Concurrency int `yaml:"concurrency"`
	// MaxConnsPerClient caps the open connections of one client (the TCP
	// peer, never X-Forwarded-For: an IPv4 address, or an IPv6 /64); one
	// more is answered 429 and closed. Once more than half of Concurrency
	// is open, a client's cap shrinks with the connections left (a fair
	// share, at least 8). It must be less than Concurrency, so that one
	// client cannot take every connection. 0 turns both off. Default 256.
	MaxConnsPerClient int `yaml:"max_conns_per_client"`
	// MaxUploadBytes caps a gateway upload body. Default 5GiB.
	MaxUploadBytes ByteSize `yaml:"max_upload_bytes"`
	// AccessLog writes one line per request of this listener (time, client,
	// registry, path, status, bytes, duration, cache result, upstream, caller
	// ids) in log.format, buffered. Default true.
	AccessLog bool `yaml:"access_log"`
	// AccessLogPath, when set, is a file the access log is appended to
	// (created 0640); "" writes it where the daemon's log goes (stderr).
	// Ignored while AccessLog is false. Default "".
	AccessLogPath string `yaml:"access_log_path"`
	// TLS serves the download listener over TLS (config/tls.go).
	TLS TLS `yaml:"tls"`
}

// Admin is the management listener (net/http).
type Admin struct {
	// Listen is the admin listener address, host:port. Default "127.0.0.1:8081".
	Listen string `yaml:"listen"`
	// MaxBodyBytes caps request bodies of the REST API; larger ones get 413. Default 4MiB.
	MaxBodyBytes ByteSize `yaml:"max_body_bytes"`
	// MaxSBOMBytes caps a dependency SBOM upload. Default 64MiB.
	MaxSBOMBytes ByteSize `yaml:"max_sbom_bytes"`
	// MaxSBOMIngests is how many SBOM uploads are read and stored at once; one
	// more is answered 429 with Retry-After before its body is read. Default 2.
	MaxSBOMIngests int `yaml:"max_sbom_ingests"`
	// ReadTimeout bounds reading one request. Default 60s.
	ReadTimeout time.Duration `yaml:"read_timeout"`
	// WriteTimeout bounds writing one response. Default 60s.
	WriteTimeout time.Duration `yaml:"write_timeout"`
	// PprofListen, when set, serves net/http/pprof there (keep it on loopback). Default "" (off).
	PprofListen string `yaml:"pprof_listen"`
	// ConsoleSessionTTL is how long a web console sign-in lasts; then the
	// console asks for the token again. Default 8h.
	ConsoleSessionTTL time.Duration `yaml:"console_session_ttl"`
	// TLS serves the admin listener over TLS (config/tls.go).
	TLS TLS `yaml:"tls"`
	// TrafficHistoryInterval is how often this node records its traffic
	// counts (per registry and upstream) in the index for the web
	// console's charts. Default 1m; from 1s to 1h.
	TrafficHistoryInterval time.Duration `yaml:"traffic_history_interval"`
}

// External is how clients reach registryd.
type External struct {
	// URL is the base for web_url and pagination links: the address clients
	// use to reach the admin API. GitLab clients (python-gitlab) warn when the
	// links differ from the URL they were given. Default "": derived from
	// admin.listen by ExternalURLFor ("127.0.0.1:8081" -> "http://127.0.0.1:8081").
	URL string `yaml:"url"`
}

// Upstreams governs how registryd talks to upstream repositories.
type Upstreams struct {
	// AllowLocalNetwork permits upstream URLs on loopback, private and link-local
	// addresses. Default false.
	AllowLocalNetwork bool `yaml:"allow_local_network"`
	// ConnectTimeout bounds dialing an upstream. Default 10s.
	ConnectTimeout time.Duration `yaml:"connect_timeout"`
	// HeaderTimeout bounds waiting for an upstream's response headers. Default 10s.
	HeaderTimeout time.Duration `yaml:"header_timeout"`
	// CheckTimeout bounds a revalidation or a connection test. Default 5s.
	CheckTimeout time.Duration `yaml:"check_timeout"`
	// FillTimeout bounds one whole upstream fetch into the cache. Default 30m.
	FillTimeout time.Duration `yaml:"fill_timeout"`
	// MaxRedirects is how many redirects an upstream request follows. Default 5.
	MaxRedirects int `yaml:"max_redirects"`
	// ChecksumPolicy is what a fill checks of an upstream's checksums, for
	// every upstream without its own checksum_policy: "verify" (a checksum the
	// upstream offers in a header or ETag must match the bytes), "require"
	// (also fetch <file>.sha1 when none is offered, and refuse a file whose
	// checksum is missing or wrong) or "off" (check none). Default "verify".
	ChecksumPolicy string `yaml:"checksum_policy"`
	// MaxConcurrentRequests caps the requests registryd has out to one
	// upstream at once (fills and revalidations, bodies included); more
	// wait their turn in a queue instead of opening more connections.
	// Default 20 (the per-route pool of Nexus's HTTP client).
	MaxConcurrentRequests int `yaml:"max_concurrent_requests"`
	// NotFoundTTL is how long an upstream's 404 or 410 for a file is
	// remembered (the negative cache): the upstream is not asked for that
	// path again meanwhile. 0 turns it off. An upstream's
	// not_found_cache_minutes overrides it. Default 1h.
	NotFoundTTL time.Duration `yaml:"not_found_ttl"`
	// MetadataNotFoundTTL is NotFoundTTL for maven-metadata.xml (and its
	// checksums), which appears when a first version is published. An
	// upstream's metadata_not_found_cache_minutes overrides it. Default 5m.
	MetadataNotFoundTTL time.Duration `yaml:"metadata_not_found_ttl"`
	// FailureThreshold is how many distinct paths failing within
	// FailureWindow (error answers, timeouts or resets once connected), with
	// no answer from the upstream in between, mark it unhealthy; a
	// connection that cannot be made, a 429 or a 503 with Retry-After marks
	// it at once. Default 3.
	FailureThreshold int `yaml:"failure_threshold"`
	// PathFailureThreshold is how many failures of one path within
	// FailureWindow open that path's breaker: the upstream is not asked for
	// the path until its own trial after a backoff (Backoff, doubling).
	// Default 2.
	PathFailureThreshold int `yaml:"path_failure_threshold"`
	// FailureWindow is how long a failure counts towards FailureThreshold
	// and PathFailureThreshold. Default 1m.
	FailureWindow time.Duration `yaml:"failure_window"`
	// MaxFailingPaths bounds the (upstream, path) breakers kept in memory,
	// least recently used out. Default 10000.
	MaxFailingPaths int `yaml:"max_failing_paths"`
	// ReservedSmallRequests is how many of an upstream's
	// MaxConcurrentRequests slots only small files may take (metadata,
	// POMs, checksums, signatures, or any answer announcing at most
	// SmallFileBytes): large bodies hold the others at most. At most half
	// of MaxConcurrentRequests is reserved, whatever this says. Default 4.
	ReservedSmallRequests int `yaml:"reserved_small_requests"`
	// SmallFileBytes is the largest Content-Length that counts a fill as
	// small; a POM or metadata file announcing more counts as large.
	// Default 1MiB.
	SmallFileBytes ByteSize `yaml:"small_file_bytes"`
	// Backoff is how long an unhealthy upstream is skipped before one trial
	// request; it doubles after each failed trial. Default 10s.
	Backoff time.Duration `yaml:"backoff"`
	// MaxBackoff caps Backoff's doubling. Default 10m.
	MaxBackoff time.Duration `yaml:"max_backoff"`
}

// License is the tier registryd behaves as.
type License struct {
	// Plan is free, premium or ultimate. Default "ultimate".
	Plan Plan `yaml:"plan"`
}

// Features switches whole features on and off.
type Features struct {
	// VirtualRegistry enables the Maven virtual registry. Default true.
	VirtualRegistry bool `yaml:"virtual_registry"`
}

// Root configures the admin user created on first start.
type Root struct {
	// Token, when set, is root's first personal access token; otherwise a random
	// one is written to DATA_DIR/initial_root_token. Default "".
	Token string `yaml:"token"`
}

// Secrets configures encryption of upstream passwords at rest.
type Secrets struct {
	// Key is a base64 or hex encoded 32-byte AES key. Default "": KeyFile,
	// else DATA_DIR/secrets.key, created on first start. A cluster
	// (store.backend postgres) needs Key or KeyFile: every node must use the same.
	Key string `yaml:"key"`
	// KeyFile is a file holding the key (hex or base64), for a secret
	// mounted as a file; set Key or KeyFile, not both. Default "".
	KeyFile string `yaml:"key_file"`
}

// Gateway configures the proof a gateway upload must carry.
type Gateway struct {
	// Secret signs Svc-Gateway-Api-Request JWTs (HS256). Default "": DATA_DIR/gateway.secret,
	// created on first start. A cluster (store.backend postgres) needs it set: every node
	// must verify the same tokens.
	Secret string `yaml:"secret"`
}

// Auth tunes authentication.
type Auth struct {
	// CacheTTL is how long a token or permission decision is cached. Default 60s.
	CacheTTL time.Duration `yaml:"cache_ttl"`
	// CacheSize is how many decisions are cached. Default 10000.
	CacheSize int `yaml:"cache_size"`
}

// Cache tunes the artifact cache.
type Cache struct {
	// MaxFileBytes refuses to cache larger files. Default 5GiB.
	MaxFileBytes ByteSize `yaml:"max_file_bytes"`
	// CollectInterval is how often the collector looks for entries pending destruction
	// (deleted or purged); each delete or purge also wakes it at once, and a run goes on,
	// batch after batch, until nothing waits. Default 2s.
	CollectInterval time.Duration `yaml:"collect_interval"`
	// FlushInterval is how often download counters are written. Default 1s.
	FlushInterval time.Duration `yaml:"flush_interval"`
	// MemoryBytes is how many bytes of small cached files are also kept in
	// memory, so a hit on them touches no file. 0 turns it off. Default 32MiB.
	MemoryBytes ByteSize `yaml:"memory_bytes"`
	// MemoryMaxFileBytes is the largest file kept in memory. Default 64KiB.
	MemoryMaxFileBytes ByteSize `yaml:"memory_max_file_bytes"`
	// RememberedPaths is how many (upstream, path) answers the negative
	// cache keeps in memory: not found (for upstreams.not_found_ttl) or
	// refused by a rule. About 300 bytes each. Default 131072.
	RememberedPaths int `yaml:"remembered_paths"`
	// MaxBytes is the disk budget of the cached files (the blob store):
	// past it, entries are evicted least recently downloaded first until
	// the blobs take 90% of it. 0 sets no budget. Default 0.
	MaxBytes ByteSize `yaml:"max_bytes"`
	// MaxPendingStores bounds the fills whose file is being stored (blob
	// written and placed, entry committed) after their clients were
	// answered: past it, a fill's clients still get the whole file but it
	// is not cached, and a revalidation's check is not recorded. Default 512.
	MaxPendingStores int `yaml:"max_pending_stores"`
	// MinFreeFraction is the share of the data volume kept free: no new
	// file is cached below it, and entries are evicted least recently
	// downloaded first until 2 points more of the volume are free. Off by
	// default: on a volume shared with other data it would give the whole
	// cache away to them (docs/operations.md). 0 turns it off; at most 0.5.
	// Default 0.
	MinFreeFraction float64 `yaml:"min_free_fraction"`
}

// Metadata is how a registry answers maven-metadata.xml and
// .meta/prefixes.txt out of its upstreams' documents (merged; see
// docs/api.md, "Merged metadata").
type Metadata struct {
	// MaxDocumentBytes bounds one upstream's maven-metadata.xml or prefix
	// file: a larger one is not downloaded past it nor stored (whoever asked
	// for it), and is that upstream's failure in a merge. A merged answer is
	// held to it too. Maven Central's largest metadata files are a few MB.
	// Default 16 MiB.
	MaxDocumentBytes ByteSize `yaml:"max_document_bytes"`
	// PartialTTL is how long a merge that lacks the document of an upstream
	// that failed is reused before the upstreams are asked again. Default 1m.
	PartialTTL time.Duration `yaml:"partial_ttl"`
	// MemoryBytes bounds the merged documents kept in memory (they are
	// rebuilt from the cached upstream documents when dropped). Default 32 MiB.
	MemoryBytes ByteSize `yaml:"memory_bytes"`
	// MaxVersions bounds the versions one upstream's maven-metadata.xml
	// lists (more: that upstream's failure) and a merged answer lists (more:
	// 502). Default 100000.
	MaxVersions int `yaml:"max_versions"`
	// MaxElements bounds the XML elements of one upstream's
	// maven-metadata.xml and of a merged answer, as MaxVersions does.
	// Default 1048576.
	MaxElements int `yaml:"max_elements"`
	// MaxMergingBytes bounds the upstream documents being merged at once,
	// in bytes (a merge costs about four times its documents): a merge
	// waits up to MergeWait for room, then is answered 503 with
	// Retry-After; one whose documents alone are larger is answered 502.
	// An answer kept in memory costs no merge. Default 64 MiB.
	MaxMergingBytes ByteSize `yaml:"max_merging_bytes"`
	// MergeWait is how long a merge waits for room under MaxMergingBytes.
	// 0 refuses at once. Default 2s.
	MergeWait time.Duration `yaml:"merge_wait"`
}

// Cleanup runs the groups' cache cleanup policies (docs/api.md, "Cleanup
// policies"; docs/operations.md, "Cache cleanup").
type Cleanup struct {
	// CheckInterval is how often registryd looks for policies that are due
	// (and for runs a crash or a stop cut short, which it resumes). A policy
	// runs at the first check after its next_run_at. Default 1m.
	CheckInterval time.Duration `yaml:"check_interval"`
	// BatchSize is how many cache entries one transaction of a run deletes
	// at most (it visits at most four times as many); a run pauses after
	// each batch for as long as the batch took, so hits and fills keep the
	// database. Default 500.
	BatchSize int `yaml:"batch_size"`
	// RunNowInterval is the shortest time between the start of a group's
	// last run (scheduled or manual) and a run now: one asked for sooner
	// gets 429 with Retry-After. It counts from the start recorded in the
	// index, so it holds across restarts and nodes. 0 turns it off;
	// otherwise at least 1s. Default 1m.
	RunNowInterval time.Duration `yaml:"run_now_interval"`
}

// Scrub re-reads the stored blobs in the background and heals bad ones
// (docs/operations.md, "Scrub").
type Scrub struct {
	// Interval is how long after the end of a cycle the next one starts
	// (0: none on a schedule; POST /api/v4/registryd/scrub still starts
	// one); otherwise at least 1m. Default 168h: a whole cycle of a 1 TiB
	// cache at the default budget takes about 18h, so a week keeps the
	// scrub's reads under a ninth of the time while bounding how long a
	// rotten byte can be served to about a week and a cycle.
	Interval time.Duration `yaml:"interval"`
	// BytesPerSecond is the scrub's read budget (a token bucket with a
	// burst of one second), at least 64KiB. Default 16MiB: a few percent of
	// a disk's or a bucket link's throughput, so fills are not starved.
	BytesPerSecond ByteSize `yaml:"bytes_per_second"`
	// QuarantineMaxBytes bounds DATA_DIR/quarantine, where bad local blob
	// files are moved (the oldest are deleted first; 0 keeps none). Default
	// 1GiB.
	QuarantineMaxBytes ByteSize `yaml:"quarantine_max_bytes"`
}

// Audit bounds the audit events registryd writes (docs/operations.md,
// "Audit events: limits, retention and size").
type Audit struct {
	// Retention is how long audit events are kept: older ones are deleted
	// in the background, in small batches. 0 keeps them forever; otherwise
	// at least 1h. Default 26280h (3 years, the age at which GitLab prunes
	// its activity events).
	Retention time.Duration `yaml:"retention"`
	// CallerDenialsPerMinute is how many rule refusals of one caller (a
	// user, a deploy token, an anonymous client address: IPv6 per /64) are
	// recorded as audit events of their own per minute, in all registries
	// together, in bursts of as many. Further refusals are counted in one
	// aggregate event per registry, upstream and caller. Default 30.
	CallerDenialsPerMinute int `yaml:"caller_denials_per_minute"`
	// RegistryDenialsPerMinute is the same bound for all callers of one
	// registry together. It must be greater than CallerDenialsPerMinute,
	// so that one caller cannot spend a registry's whole budget. Default 300.
	RegistryDenialsPerMinute int `yaml:"registry_denials_per_minute"`
	// AggregateInterval is how long refusals past those bounds are counted
	// before their aggregate events are written (1s to 1h). Default 1m.
	AggregateInterval time.Duration `yaml:"aggregate_interval"`
}

// Advisories is the offline advisory database dependency lists are matched
// against (docs/api.md, "Advisory database"; docs/operations.md, "Advisory
// database").
type Advisories struct {
	// Sources are copies of OSV advisory databases imported at start and
	// then every RefreshInterval, separated by commas: each an absolute path
	// (a zip archive such as osv.dev's <ecosystem>/all.zip, a directory of
	// OSV JSON files, or a file of records) or an http(s) URL of an archive
	// or record file. Each is a full copy of its source: the advisories it
	// no longer has are removed. Default "" (none; admins import through
	// the API).
	Sources string `yaml:"sources"`
	// RefreshInterval is how often the sources are imported again; a URL
	// whose ETag or Last-Modified did not change is not fetched again, and
	// unchanged advisories cost a comparison each. Default 24h; at least 1m.
	RefreshInterval time.Duration `yaml:"refresh_interval"`
	// MaxBytes caps one archive or record file, fetched from a source or
	// uploaded (POST /admin/advisories: 413 above it). Default 1GiB.
	MaxBytes ByteSize `yaml:"max_bytes"`
	// BatchSize is how many changed advisories one transaction writes,
	// together with the re-match of the dependency list entries they name.
	// Default 200.
	BatchSize int `yaml:"batch_size"`
}

// AdvisorySources lists Sources.
func (a Advisories) AdvisorySources() []string {
	var out []string
	for _, s := range strings.Split(a.Sources, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// Shutdown bounds a graceful stop.
type Shutdown struct {
	// DrainDelay is how long registryd keeps serving after SIGTERM or
	// SIGINT with /-/readiness answering 503, before it stops accepting
	// connections, so that load balancers polling readiness take it out of
	// rotation while it still answers. A second signal ends it early. 0
	// stops accepting at once. Default 5s.
	DrainDelay time.Duration `yaml:"drain_delay"`
	// Timeout is how long in-flight requests may then drain. Default 30s.
	Timeout time.Duration `yaml:"timeout"`
}

// Log configures structured logging.
type Log struct {
	// Level is debug, info, warn or error. Default "info".
	Level string `yaml:"level"`
	// Format is text or json. Default "text".
	Format string `yaml:"format"`
}

// Default returns the embedded defaults.
func Default() Config {
	return Config{
		Data:  Data{Dir: "./data"},
		Store: Store{Backend: StoreBolt, Postgres: Postgres{MaxConns: 16, MaxLocks: 32, RecheckInterval: 2 * time.Second}, BatchMaxEntries: 256, BatchMaxHold: 10 * time.Millisecond},
		Blobs: Blobs{Backend: BlobsDisk, S3: S3{LocalCacheBytes: 10 * GiB, OrphanGrace: time.Hour}},
		Proxy: Proxy{
			Listen:            ":8080",
			HeaderTimeout:     10 * time.Second,
			ReadTimeout:       60 * time.Second,
			WriteTimeout:      30 * time.Minute,
			IdleTimeout:       120 * time.Second,
			MaxHeaderBytes:    16 * KiB,
			Concurrency:       8192,
			MaxConnsPerClient: 256,
			MaxUploadBytes:    5 * GiB,
			AccessLog:         true,
			TLS:               TLS{ReloadInterval: 10 * time.Second},
		},
		Admin: Admin{
			Listen:         "127.0.0.1:8081",
			MaxBodyBytes:   4 * MiB,
			MaxSBOMBytes:   64 * MiB,
			MaxSBOMIngests: 2,
			ReadTimeout:    60 * time.Second,
			WriteTimeout:   60 * time.Second,
			// A working day: long enough not to interrupt, short enough that
			// a forgotten browser does not stay signed in overnight.
			ConsoleSessionTTL: 8 * time.Hour,
			TLS:               TLS{ReloadInterval: 10 * time.Second},
			// The charts' finest step is a minute.
			TrafficHistoryInterval: time.Minute,
		},
		Upstreams: Upstreams{
			ConnectTimeout: 10 * time.Second,
			HeaderTimeout:  10 * time.Second,
			CheckTimeout:   5 * time.Second,
			FillTimeout:    30 * time.Minute,
			MaxRedirects:   5,
			ChecksumPolicy: "verify",

			MaxConcurrentRequests: 20,
			NotFoundTTL:           time.Hour,
			MetadataNotFoundTTL:   5 * time.Minute,
			FailureThreshold:      3,
			PathFailureThreshold:  2,
			FailureWindow:         time.Minute,
			MaxFailingPaths:       10000,
			ReservedSmallRequests: 4,
			SmallFileBytes:        MiB,
			Backoff:               10 * time.Second,
			MaxBackoff:            10 * time.Minute,
		},
		License:  License{Plan: PlanUltimate},
		Features: Features{VirtualRegistry: true},
		Auth:     Auth{CacheTTL: 60 * time.Second, CacheSize: 10000},
		Cache: Cache{
			MaxFileBytes:       5 * GiB,
			CollectInterval:    2 * time.Second,
			FlushInterval:      time.Second,
			MemoryBytes:        32 * MiB,
			MemoryMaxFileBytes: 64 * KiB,
			RememberedPaths:    131072,
			MaxPendingStores:   512,
		},
		Metadata: Metadata{
			MaxDocumentBytes: 16 * MiB,
			PartialTTL:       time.Minute,
			MemoryBytes:      32 * MiB,
			MaxVersions:      100000,
			MaxElements:      1 << 20,
			MaxMergingBytes:  64 * MiB,
			MergeWait:        2 * time.Second,
		},
		Cleanup: Cleanup{CheckInterval: time.Minute, BatchSize: 500, RunNowInterval: time.Minute},
		Scrub:   Scrub{Interval: 168 * time.Hour, BytesPerSecond: 16 * MiB, QuarantineMaxBytes: 1 * GiB},
		Audit: Audit{Retention: 3 * 365 * 24 * time.Hour, CallerDenialsPerMinute: 30, RegistryDenialsPerMinute: 300,
			AggregateInterval: time.Minute},
		Shutdown:   Shutdown{DrainDelay: 5 * time.Second, Timeout: 30 * time.Second},
		Log:        Log{Level: "info", Format: "text"},
		Advisories: Advisories{RefreshInterval: 24 * time.Hour, MaxBytes: 1 * GiB, BatchSize: 200},
	}
}

// Load returns the defaults, overlaid by the YAML file at path (when path is not
// empty), overlaid by REGISTRYD_* variables from environ, with external.url
// derived from admin.listen when neither set it, and validated. Every problem
// found on the way (unknown or ill-typed keys in the file, unknown or
// malformed variables, invalid values) is reported at once as Problems, in an
// operator's words; only an unreadable file or a YAML syntax error stops
// earlier.
func Load(path string, environ []string) (Config, error) {
	cfg := Default()
	var all Problems
	origin := map[string]string{} // setting -> "file:line" or the variable that set it
	if path != "" {
		raw, err := os.ReadFile(path)
		if err != nil {
			return cfg, fmt.Errorf("config: %w", err)
		}
		p, err := applyYAML(&cfg, path, raw, origin)
		if err != nil {
			return cfg, fmt.Errorf("config: %w", err)
		}
		all = append(all, p...)
	}
	var p Problems
	if err := applyEnv(&cfg, environ, origin); errors.As(err, &p) {
		all = append(all, p...)
	}
	if cfg.External.URL == "" {
		cfg.External.URL = cfg.DefaultExternalURL(cfg.Admin.Listen)
	}
	if err := cfg.Validate(); errors.As(err, &p) {
		for _, problem := range p {
			all = append(all, locate(problem, origin))
		}
	}
	if len(all) > 0 {
		return cfg, all
	}
	return cfg, nil
}

// problemKey is the setting a problem of Validate begins with, and the
// variable it names after it, if any: `proxy.listen (REGISTRYD_PROXY_LISTEN): ...`.
var problemKey = regexp.MustCompile(`^([a-z0-9_]+(?:\.[a-z0-9_]+)+)(?: \((REGISTRYD_[A-Z0-9_]+)\))?`)

// locate rewrites a problem of Validate about a value from the file to say
// so, by origin (setting -> "file:line" or variable name): it begins with
// the file's "file:line: " and loses the variable's name, which the
// operator did not use. A problem about a value from a variable or a
// default is left as Validate wrote it; one whose first setting has its
// default but which names another from the file gets that one's line.
func locate(problem string, origin map[string]string) string {
	m := problemKey.FindStringSubmatchIndex(problem)
	if m == nil {
		return problem
	}
	key, rest := problem[m[2]:m[3]], problem[m[1]:]
	if from, ok := origin[key]; ok {
		if strings.HasPrefix(from, "REGISTRYD_") {
			return problem
		}
		return from + ": " + key + rest
	}
	// A problem of two settings (max_merging_bytes and max_document_bytes)
	// whose first is not the file's: the line of another one it names.
	for _, other := range settingName.FindAllString(rest, -1) {
		if from, ok := origin[other]; ok && !strings.HasPrefix(from, "REGISTRYD_") {
			return from + ": " + problem
		}
	}
	return problem
}

// settingName is a setting's name in a problem's text.
var settingName = regexp.MustCompile(`\b[a-z0-9_]+(?:\.[a-z0-9_]+)+\b`)

// Problems lists every validation failure of a Config.
type Problems []string

func (p Problems) Error() string {
	return "invalid configuration:\n  - " + strings.Join(p, "\n  - ")
}

// Validate reports every problem of the configuration at once.
func (c Config) Validate() error {
	var p Problems
	add := func(format string, a ...any) { p = append(p, fmt.Sprintf(format, a...)) }

	if strings.TrimSpace(c.Data.Dir) == "" {
		add("data.dir (REGISTRYD_DATA_DIR) must not be empty")
	}
	listens := []struct{ name, addr string }{
		{"proxy.listen (REGISTRYD_PROXY_LISTEN)", c.Proxy.Listen},
		{"admin.listen (REGISTRYD_ADMIN_LISTEN)", c.Admin.Listen},
	}
	if c.Admin.PprofListen != "" {
		listens = append(listens, struct{ name, addr string }{"admin.pprof_listen (REGISTRYD_ADMIN_PPROF_LISTEN)", c.Admin.PprofListen})
	}
	for i, l := range listens {
		if why := checkListen(l.addr); why != "" {
			add("%s: %q %s", l.name, l.addr, why)
			continue
		}
		for _, m := range listens[:i] {
			if checkListen(m.addr) == "" && listensOverlap(l.addr, m.addr) {
				add("%s and %s must differ (%q and %q take the same port)", firstWord(m.name), firstWord(l.name), m.addr, l.addr)
			}
		}
	}
	if c.External.URL != "" {
		if u, err := url.Parse(c.External.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			add("external.url (REGISTRYD_EXTERNAL_URL): %q must be an absolute http(s) URL", c.External.URL)
		}
	}
	if !c.License.Plan.valid() {
		add("license.plan (REGISTRYD_LICENSE_PLAN): %q must be free, premium or ultimate", c.License.Plan)
	}
	positive := []struct {
		name string
		d    time.Duration
	}{
		{"proxy.header_timeout", c.Proxy.HeaderTimeout},
		{"proxy.read_timeout", c.Proxy.ReadTimeout},
		{"proxy.write_timeout", c.Proxy.WriteTimeout},
		{"proxy.idle_timeout", c.Proxy.IdleTimeout},
		{"admin.read_timeout", c.Admin.ReadTimeout},
		{"admin.write_timeout", c.Admin.WriteTimeout},
		{"admin.console_session_ttl", c.Admin.ConsoleSessionTTL},
		{"upstreams.connect_timeout", c.Upstreams.ConnectTimeout},
		{"upstreams.header_timeout", c.Upstreams.HeaderTimeout},
		{"upstreams.check_timeout", c.Upstreams.CheckTimeout},
		{"upstreams.fill_timeout", c.Upstreams.FillTimeout},
		{"upstreams.backoff", c.Upstreams.Backoff},
		{"upstreams.max_backoff", c.Upstreams.MaxBackoff},
		{"upstreams.failure_window", c.Upstreams.FailureWindow},
		{"auth.cache_ttl", c.Auth.CacheTTL},
		{"cache.collect_interval", c.Cache.CollectInterval},
		{"cache.flush_interval", c.Cache.FlushInterval},
		{"shutdown.timeout", c.Shutdown.Timeout},
	}
	for _, d := range positive {
		if d.d <= 0 {
			add("%s must be a positive duration, got %s", d.name, d.d)
		}
	}
	sizes := []struct {
		name string
		v    ByteSize
	}{
		{"proxy.max_header_bytes", c.Proxy.MaxHeaderBytes},
		{"proxy.max_upload_bytes", c.Proxy.MaxUploadBytes},
		{"admin.max_body_bytes", c.Admin.MaxBodyBytes},
		{"admin.max_sbom_bytes", c.Admin.MaxSBOMBytes},
		{"cache.max_file_bytes", c.Cache.MaxFileBytes},
		{"upstreams.small_file_bytes", c.Upstreams.SmallFileBytes},
	}
	for _, s := range sizes {
		if s.v <= 0 {
			add("%s must be a positive size, got %d", s.name, s.v)
		}
	}
	if c.Cache.MemoryBytes < 0 || c.Cache.MemoryMaxFileBytes < 0 {
		add("cache.memory_bytes and cache.memory_max_file_bytes must not be negative")
	}
	if c.Cache.RememberedPaths < 1 {
		add("cache.remembered_paths must be at least 1, got %d", c.Cache.RememberedPaths)
	}
	if c.Cache.MaxBytes < 0 {
		add("cache.max_bytes must not be negative (0 sets no budget), got %d", c.Cache.MaxBytes)
	}
	if !(c.Cache.MinFreeFraction >= 0 && c.Cache.MinFreeFraction <= 0.5) {
		add("cache.min_free_fraction must be between 0 (off) and 0.5, got %v", c.Cache.MinFreeFraction)
	}
	if c.Cache.MaxPendingStores < 1 {
		add("cache.max_pending_stores must be at least 1, got %d", c.Cache.MaxPendingStores)
	}
	if c.Admin.MaxSBOMIngests < 1 {
		add("admin.max_sbom_ingests must be at least 1, got %d", c.Admin.MaxSBOMIngests)
	}
	if c.Proxy.Concurrency < 1 {
		add("proxy.concurrency must be at least 1, got %d", c.Proxy.Concurrency)
	}
	switch {
	case c.Proxy.MaxConnsPerClient < 0:
		add("proxy.max_conns_per_client must not be negative (0 turns it off), got %d", c.Proxy.MaxConnsPerClient)
	case c.Proxy.MaxConnsPerClient > 0 && c.Proxy.Concurrency >= 1 && c.Proxy.MaxConnsPerClient >= c.Proxy.Concurrency:
		add("proxy.max_conns_per_client (%d) must be less than proxy.concurrency (%d), or one client could take every connection",
			c.Proxy.MaxConnsPerClient, c.Proxy.Concurrency)
	}
	if c.Auth.CacheSize < 1 {
		add("auth.cache_size must be at least 1, got %d", c.Auth.CacheSize)
	}
	if c.Upstreams.MaxConcurrentRequests < 1 {
		add("upstreams.max_concurrent_requests must be at least 1, got %d", c.Upstreams.MaxConcurrentRequests)
	}
	if c.Upstreams.FailureThreshold < 1 {
		add("upstreams.failure_threshold must be at least 1, got %d", c.Upstreams.FailureThreshold)
	}
	if c.Upstreams.PathFailureThreshold < 1 {
		add("upstreams.path_failure_threshold must be at least 1, got %d", c.Upstreams.PathFailureThreshold)
	}
	if c.Upstreams.MaxFailingPaths < 1 {
		add("upstreams.max_failing_paths must be at least 1, got %d", c.Upstreams.MaxFailingPaths)
	}
	if c.Upstreams.ReservedSmallRequests < 0 {
		add("upstreams.reserved_small_requests must not be negative (0 reserves none), got %d", c.Upstreams.ReservedSmallRequests)
	}
	if c.Upstreams.NotFoundTTL < 0 || c.Upstreams.MetadataNotFoundTTL < 0 {
		add("upstreams.not_found_ttl and upstreams.metadata_not_found_ttl must not be negative")
	}
	if c.Upstreams.MaxBackoff < c.Upstreams.Backoff {
		add("upstreams.max_backoff (%s) must not be shorter than upstreams.backoff (%s)", c.Upstreams.MaxBackoff, c.Upstreams.Backoff)
	}
	if c.Metadata.MaxDocumentBytes < 1 {
		add("metadata.max_document_bytes must be at least 1, got %d", c.Metadata.MaxDocumentBytes)
	}
	if c.Metadata.PartialTTL < 0 {
		add("metadata.partial_ttl must not be negative, got %s", c.Metadata.PartialTTL)
	}
	if c.Metadata.MemoryBytes < 0 {
		add("metadata.memory_bytes must not be negative (0 keeps no merged document), got %d", c.Metadata.MemoryBytes)
	}
	if c.Metadata.MaxVersions < 1 || c.Metadata.MaxElements < 1 {
		add("metadata.max_versions and metadata.max_elements must be at least 1, got %d and %d",
			c.Metadata.MaxVersions, c.Metadata.MaxElements)
	}
	if c.Metadata.MaxMergingBytes < c.Metadata.MaxDocumentBytes {
		add("metadata.max_merging_bytes (%s) must be at least metadata.max_document_bytes (%s), or a document that may be merged never would be",
			c.Metadata.MaxMergingBytes, c.Metadata.MaxDocumentBytes)
	}
	if c.Metadata.MergeWait < 0 {
		add("metadata.merge_wait must not be negative (0 refuses at once), got %s", c.Metadata.MergeWait)
	}
	if d := c.Admin.TrafficHistoryInterval; d < time.Second || d > time.Hour {
		add("admin.traffic_history_interval (REGISTRYD_ADMIN_TRAFFIC_HISTORY_INTERVAL) must be from 1s to 1h, got %s", d)
	}
	if c.Cleanup.CheckInterval < time.Second {
		add("cleanup.check_interval (REGISTRYD_CLEANUP_CHECK_INTERVAL) must be at least 1s, got %s", c.Cleanup.CheckInterval)
	}
	if c.Cleanup.BatchSize < 1 || c.Cleanup.BatchSize > 10000 {
		add("cleanup.batch_size (REGISTRYD_CLEANUP_BATCH_SIZE) must be between 1 and 10000, got %d", c.Cleanup.BatchSize)
	}
	if r := c.Cleanup.RunNowInterval; r < 0 || (r > 0 && r < time.Second) {
		add("cleanup.run_now_interval (REGISTRYD_CLEANUP_RUN_NOW_INTERVAL) must be 0 (off) or at least 1s, got %s", r)
	}
	if d := c.Scrub.Interval; d < 0 || (d > 0 && d < time.Minute) {
		add("scrub.interval (REGISTRYD_SCRUB_INTERVAL) must be 0 (no scheduled cycle) or at least 1m, got %s", d)
	}
	if c.Scrub.BytesPerSecond < 64*KiB {
		add("scrub.bytes_per_second (REGISTRYD_SCRUB_BYTES_PER_SECOND) must be at least 64KiB, got %d", c.Scrub.BytesPerSecond)
	}
	c.validateAudit(add)
	for _, src := range c.Advisories.AdvisorySources() {
		u, err := url.Parse(src)
		switch {
		case err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "":
		case filepath.IsAbs(src):
		default:
			add("advisories.sources (REGISTRYD_ADVISORIES_SOURCES): %q is neither an absolute path nor an http(s) URL", src)
		}
	}
	if c.Advisories.RefreshInterval < time.Minute {
		add("advisories.refresh_interval (REGISTRYD_ADVISORIES_REFRESH_INTERVAL) must be at least 1m, got %s", c.Advisories.RefreshInterval)
	}
	if c.Advisories.MaxBytes < 1*MiB {
		add("advisories.max_bytes (REGISTRYD_ADVISORIES_MAX_BYTES) must be at least 1MiB, got %d", c.Advisories.MaxBytes)
	}
	if c.Advisories.BatchSize < 1 || c.Advisories.BatchSize > 10000 {
		add("advisories.batch_size (REGISTRYD_ADVISORIES_BATCH_SIZE) must be between 1 and 10000, got %d", c.Advisories.BatchSize)
	}
	if c.Shutdown.DrainDelay < 0 {
		add("shutdown.drain_delay (REGISTRYD_SHUTDOWN_DRAIN_DELAY) must not be negative (0 stops accepting at once), got %s", c.Shutdown.DrainDelay)
	}
	if c.Upstreams.MaxRedirects < 0 {
		add("upstreams.max_redirects must not be negative, got %d", c.Upstreams.MaxRedirects)
	}
	// The same values as store.ChecksumVerify, ChecksumRequire and ChecksumOff.
	switch c.Upstreams.ChecksumPolicy {
	case "verify", "require", "off":
	default:
		add("upstreams.checksum_policy (REGISTRYD_UPSTREAMS_CHECKSUM_POLICY): %q must be verify, require or off", c.Upstreams.ChecksumPolicy)
	}
	if c.Root.Token != "" && len(c.Root.Token) < 20 {
		add("root.token (REGISTRYD_ROOT_TOKEN) must be at least 20 characters")
	}
	if c.Secrets.Key != "" {
		if _, err := DecodeKey(c.Secrets.Key); err != nil {
			add("secrets.key (REGISTRYD_SECRETS_KEY): %v", err)
		}
	}
	if c.Gateway.Secret != "" && len(c.Gateway.Secret) < 32 {
		add("gateway.secret (REGISTRYD_GATEWAY_SECRET) must be at least 32 characters")
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		add("log.level (REGISTRYD_LOG_LEVEL): %q must be debug, info, warn or error", c.Log.Level)
	}
	switch c.Log.Format {
	case "text", "json":
	default:
		add("log.format (REGISTRYD_LOG_FORMAT): %q must be text or json", c.Log.Format)
	}
	c.validateCluster(add)
	c.Proxy.TLS.validate("proxy", add)
	c.Admin.TLS.validate("admin", add)
	if c.Proxy.AccessLogPath != "" {
		// A path with access_log false is allowed: switching the log off
		// from the environment must not require editing the file.
		switch {
		case strings.TrimSpace(c.Proxy.AccessLogPath) != c.Proxy.AccessLogPath || strings.ContainsRune(c.Proxy.AccessLogPath, 0):
			add("proxy.access_log_path (REGISTRYD_PROXY_ACCESS_LOG_PATH): %q is not a usable file name", c.Proxy.AccessLogPath)
		case strings.HasSuffix(c.Proxy.AccessLogPath, "/"):
			add("proxy.access_log_path (REGISTRYD_PROXY_ACCESS_LOG_PATH): %q names a directory, not a file", c.Proxy.AccessLogPath)
		}
	}
	if len(p) > 0 {
		return p
	}
	return nil
}

func (c Config) validateAudit(add func(string, ...any)) {
	a := c.Audit
	if a.Retention != 0 && a.Retention < time.Hour {
		add("audit.retention (REGISTRYD_AUDIT_RETENTION) must be 0 (keep forever) or at least 1h, got %s", a.Retention)
	}
	if a.CallerDenialsPerMinute < 1 {
		add("audit.caller_denials_per_minute must be at least 1, got %d", a.CallerDenialsPerMinute)
	}
	if a.RegistryDenialsPerMinute <= a.CallerDenialsPerMinute {
		add("audit.registry_denials_per_minute (%d) must be greater than audit.caller_denials_per_minute (%d), or one caller could spend a registry's whole budget",
			a.RegistryDenialsPerMinute, a.CallerDenialsPerMinute)
	}
	if a.AggregateInterval < time.Second || a.AggregateInterval > time.Hour {
		add("audit.aggregate_interval must be between 1s and 1h, got %s", a.AggregateInterval)
	}
}

// checkListen says what is wrong with a listen address, or "" when it is
// host:port with a numeric port 0..65535 (0: the kernel chooses) and a host
// that is empty (every interface), an IP address or a host name. net.Listen
// would also take service names (":http") and find out about a port past
// 65535 only when binding; both are refused here, before anything starts.
func checkListen(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "is not host:port (like :8080 or 127.0.0.1:8080)"
	}
	n, err := strconv.Atoi(port)
	if port == "" || strings.Trim(port, "0123456789") != "" || err != nil {
		return "has no port number (like :8080 or 127.0.0.1:8080)"
	}
	if n > 65535 {
		return fmt.Sprintf("has port %s; a port is 1 to 65535 (0 lets the system choose one)", port)
	}
	if host == "" {
		return ""
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return ""
	}
	for _, label := range strings.Split(host, ".") {
		if label == "" || len(label) > 63 || strings.Trim(strings.ToLower(label), "abcdefghijklmnopqrstuvwxyz0123456789-_") != "" {
			return fmt.Sprintf("has host %q, which is neither an IP address nor a host name", host)
		}
	}
	return ""
}

// listensOverlap reports whether two valid listen addresses would take the
// same port: equal ports (not 0, which the kernel picks afresh) on the same
// host, or one of them on every interface.
func listensOverlap(a, b string) bool {
	ha, pa, _ := net.SplitHostPort(a)
	hb, pb, _ := net.SplitHostPort(b)
	if pa != pb || strings.Trim(pa, "0") == "" {
		return false
	}
	return ha == hb || isWildcard(ha) || isWildcard(hb)
}

func isWildcard(host string) bool {
	if host == "" {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.IsUnspecified()
}

func firstWord(s string) string {
	w, _, _ := strings.Cut(s, " ")
	return w
}

// ExternalURLFor is external.url's default for an admin listen address:
// http:// and the address, with a wildcard host ("", 0.0.0.0, ::) replaced
// by localhost, since a client cannot connect to a wildcard. "" when listen
// is not a valid listen address (Validate says why).
func ExternalURLFor(listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil || checkListen(listen) != "" {
		return ""
	}
	if isWildcard(host) {
		host = "localhost"
	}
	return "http://" + net.JoinHostPort(host, port)
}

// DefaultExternalURL is external.url's default for the admin listener
// bound at listen: ExternalURLFor, https:// when admin.tls is on.
func (c Config) DefaultExternalURL(listen string) string {
	u := ExternalURLFor(listen)
	if u != "" && c.Admin.TLS.Enabled() {
		u = "https://" + strings.TrimPrefix(u, "http://")
	}
	return u
}

// Path joins elem under the data directory.
func (c Config) Path(elem ...string) string {
	return filepath.Join(append([]string{c.Data.Dir}, elem...)...)
}
