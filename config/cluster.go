package config

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"
)

// The backends of store.backend and blobs.backend.
const (
	StoreBolt     = "bolt"
	StorePostgres = "postgres"
	BlobsDisk     = "disk"
	BlobsS3       = "s3"
)

// Store chooses the index database (docs/scale-out.md).
type Store struct {
	// Backend is "bolt" (DATA_DIR/registry.db, one node alone) or
	// "postgres" (one database shared by every node of a cluster; needs
	// blobs.backend s3). Default "bolt".
	Backend string `yaml:"backend"`
	// Postgres is read when Backend is "postgres".
	Postgres Postgres `yaml:"postgres"`
	// BatchMaxEntries bounds the cache entry writes (fills, revalidations,
	// download counts) that share one index transaction under load (group
	// commit). 1 turns group commit off: a transaction per write. Default 256.
	BatchMaxEntries int `yaml:"batch_max_entries"`
	// BatchMaxHold bounds how long one shared transaction runs writes
	// before it commits: an admin write or a collector batch waits for
	// about this much of them, plus a commit. Default 10ms.
	BatchMaxHold time.Duration `yaml:"batch_max_hold"`
}

// Postgres is the shared index database of a cluster.
type Postgres struct {
	// DSN is the connection string, a URL (postgres://user:pass@host:5432/db)
	// or keyword/value ("host=db dbname=registryd user=registryd"); a
	// password may also come from PGPASSWORD or ~/.pgpass. Never logged with
	// its password. Default "".
	DSN Secret `yaml:"dsn"`
	// DSNFile is a file holding the DSN (surrounding blank space ignored),
	// for a secret mounted as a file; set DSN or DSNFile, not both.
	// Default "".
	DSNFile string `yaml:"dsn_file"`
	// MaxConns caps the connections of this node's pool. Default 16.
	MaxConns int `yaml:"max_conns"`
	// MaxLocks caps the cluster locks (fill leases, job leases, blob locks)
	// this node holds or waits for at once; each holds its own connection,
	// opened when needed, beside the pool. Default 32.
	MaxLocks int `yaml:"max_locks"`
	// RecheckInterval is how often a node compares what was published with
	// what it received, so that a lost notification only delays a change
	// (tokens revoked, entries deleted) by this much. Default 2s.
	RecheckInterval time.Duration `yaml:"recheck_interval"`
}

// Blobs chooses where cached files live (docs/scale-out.md).
type Blobs struct {
	// Backend is "disk" (DATA_DIR/blobs) or "s3" (an S3-compatible bucket
	// shared by every node, with a local tier on each node's disk; needs
	// store.backend postgres). Default "disk".
	Backend string `yaml:"backend"`
	// S3 is read when Backend is "s3".
	S3 S3 `yaml:"s3"`
}

// S3 is the shared bucket of a cluster.
type S3 struct {
	// Endpoint is the server's URL, http:// or https://
	// (https://s3.eu-west-1.amazonaws.com, http://127.0.0.1:9000). Default "".
	Endpoint string `yaml:"endpoint"`
	// Bucket is the bucket's name; it must exist. Default "".
	Bucket string `yaml:"bucket"`
	// Region is the bucket's region; "" lets the client ask the server.
	// Default "".
	Region string `yaml:"region"`
	// AccessKeyID and SecretAccessKey are the credentials, when not in
	// CredentialsFile. Default "".
	AccessKeyID string `yaml:"access_key_id"`
	// SecretAccessKey goes with AccessKeyID; never logged. Default "".
	SecretAccessKey Secret `yaml:"secret_access_key"`
	// CredentialsFile is a file of key=value lines, access_key_id=... and
	// secret_access_key=... (an aws_ prefix is accepted; blank lines and
	// lines starting with # are ignored). Default "".
	CredentialsFile string `yaml:"credentials_file"`
	// PathStyle addresses the bucket as ENDPOINT/BUCKET/KEY instead of
	// BUCKET.ENDPOINT/KEY (MinIO and Ceph usually want it). Default false.
	PathStyle bool `yaml:"path_style"`
	// Prefix is put before every object key, to share a bucket with other
	// data ("registryd/"). Default "".
	Prefix string `yaml:"prefix"`
	// LocalCacheBytes bounds this node's disk tier of hot blobs (under
	// DATA_DIR), least recently used out first. Default 10GiB.
	LocalCacheBytes ByteSize `yaml:"local_cache_bytes"`
	// OrphanGrace is how old an object no index entry refers to must be
	// before it is deleted (a node that died between upload and commit left
	// it). Default 1h.
	OrphanGrace time.Duration `yaml:"orphan_grace"`
}

// Clustered reports whether the configuration makes this node one of a
// cluster sharing its index (and so its blobs) with other nodes.
func (c Config) Clustered() bool { return c.Store.Backend == StorePostgres }

// Secret is a setting that must never appear in logs or error messages: it
// prints, logs and marshals as "[redacted]" (empty stays empty, so that a
// log can say whether it is set). Reveal gives the value.
type Secret string

const redacted = "[redacted]"

// Reveal is the secret's value.
func (s Secret) Reveal() string { return string(s) }

func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return redacted
}

// LogValue keeps the value out of slog.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.String()) }

// MarshalJSON keeps the value out of JSON (a config dumped by slog's JSON
// handler, or by a debugging endpoint).
func (s Secret) MarshalJSON() ([]byte, error) { return json.Marshal(s.String()) }

// GoString keeps the value out of %#v.
func (s Secret) GoString() string { return fmt.Sprintf("%q", s.String()) }

// ConnString is the DSN, from store.postgres.dsn or the file
// store.postgres.dsn_file. The error never quotes the file's content.
func (p Postgres) ConnString() (string, error) {
	if p.DSNFile == "" {
		return strings.TrimSpace(p.DSN.Reveal()), nil
	}
	raw, err := os.ReadFile(p.DSNFile)
	if err != nil {
		return "", fmt.Errorf("store.postgres.dsn_file: %w", err)
	}
	dsn := strings.TrimSpace(string(raw))
	if dsn == "" {
		return "", fmt.Errorf("store.postgres.dsn_file: %s is empty", p.DSNFile)
	}
	return dsn, nil
}

// LogValue describes the database without its password.
func (p Postgres) LogValue() slog.Value {
	dsn, err := p.ConnString()
	if err != nil {
		dsn = "(unreadable " + p.DSNFile + ")"
	}
	return slog.GroupValue(slog.String("dsn", RedactDSN(dsn)), slog.Int("max_conns", p.MaxConns),
		slog.Duration("recheck_interval", p.RecheckInterval))
}

var dsnPassword = regexp.MustCompile(`(?i)(password\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s]*)`)

// RedactDSN is a PostgreSQL connection string with its password replaced
// by [redacted], whether it is a URL (postgres://u:pw@h/db, or ?password=)
// or keyword/value (password=pw or password='p w'). A URL that does not
// parse is redacted whole: it cannot be known where its password is.
func RedactDSN(dsn string) string {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return redacted
		}
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		}
		if q := u.Query(); q.Has("password") {
			q.Set("password", "xxxxx")
			u.RawQuery = q.Encode()
		}
		// url.UserPassword would escape brackets: mark it plainly instead.
		return strings.ReplaceAll(u.String(), "xxxxx", redacted)
	}
	return dsnPassword.ReplaceAllString(dsn, "${1}"+redacted)
}

// checkDSN says what is wrong with a connection string's shape, or "".
// pgx parses it for real when connecting; this catches a value that is
// clearly something else (a host name alone, a file path) before start.
func checkDSN(dsn string) string {
	switch {
	case strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://"):
		u, err := url.Parse(dsn)
		if err != nil {
			return "is not a valid postgres:// URL"
		}
		if u.Host == "" && u.Query().Get("host") == "" {
			return "names no host (postgres://user@host:5432/dbname)"
		}
		return ""
	case strings.Contains(dsn, "="):
		return ""
	}
	return `is not a PostgreSQL connection string (postgres://user@host:5432/dbname, or "host=... dbname=...")`
}

// Credentials are the S3 access key pair, from the settings or from
// blobs.s3.credentials_file. The error never quotes a value.
func (s S3) Credentials() (accessKeyID, secretAccessKey string, err error) {
	if s.CredentialsFile == "" {
		return s.AccessKeyID, s.SecretAccessKey.Reveal(), nil
	}
	raw, err := os.ReadFile(s.CredentialsFile)
	if err != nil {
		return "", "", fmt.Errorf("blobs.s3.credentials_file: %w", err)
	}
	return parseCredentials(s.CredentialsFile, raw)
}

func parseCredentials(file string, raw []byte) (id, secret string, err error) {
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			return "", "", fmt.Errorf("blobs.s3.credentials_file: %s:%d is not key=value (access_key_id=... and secret_access_key=...)", file, n)
		}
		k = strings.TrimPrefix(strings.ToLower(strings.TrimSpace(k)), "aws_")
		v = strings.TrimSpace(v)
		switch k {
		case "access_key_id":
			id = v
		case "secret_access_key":
			secret = v
		default:
			return "", "", fmt.Errorf("blobs.s3.credentials_file: %s:%d: unknown key %q (access_key_id or secret_access_key)", file, n, k)
		}
	}
	if id == "" || secret == "" {
		return "", "", fmt.Errorf("blobs.s3.credentials_file: %s must give both access_key_id and secret_access_key", file)
	}
	return id, secret, nil
}

// LogValue describes the bucket without its secret.
func (s S3) LogValue() slog.Value {
	from := "settings"
	if s.CredentialsFile != "" {
		from = s.CredentialsFile
	}
	return slog.GroupValue(slog.String("endpoint", s.Endpoint), slog.String("bucket", s.Bucket),
		slog.String("region", s.Region), slog.String("prefix", s.Prefix), slog.Bool("path_style", s.PathStyle),
		slog.String("access_key_id", s.AccessKeyID), slog.String("credentials", from),
		slog.String("local_cache_bytes", s.LocalCacheBytes.String()), slog.Duration("orphan_grace", s.OrphanGrace))
}

// bucketName is S3's rule for bucket names (3 to 63 lower-case letters,
// digits, dots and hyphens, starting and ending with a letter or digit).
var bucketName = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$`)

// SecretKey is the configured key of upstream passwords (secrets.key or the
// file secrets.key_file), decoded; nil when neither is set (the key then
// lives in DATA_DIR/secrets.key).
func (s Secrets) SecretKey() ([]byte, error) {
	switch {
	case s.Key != "":
		return DecodeKey(s.Key)
	case s.KeyFile != "":
		raw, err := os.ReadFile(s.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("secrets.key_file: %w", err)
		}
		k, err := DecodeKey(string(raw))
		if err != nil {
			return nil, fmt.Errorf("secrets.key_file: %s %v", s.KeyFile, err)
		}
		return k, nil
	}
	return nil, nil
}

// validateCluster adds the problems of the store, blobs and secrets
// settings that cluster mode brings.
func (c Config) validateCluster(add func(string, ...any)) {
	switch c.Store.Backend {
	case StoreBolt, StorePostgres:
	default:
		add("store.backend (REGISTRYD_STORE_BACKEND): %q must be bolt or postgres", c.Store.Backend)
	}
	switch c.Blobs.Backend {
	case BlobsDisk, BlobsS3:
	default:
		add("blobs.backend (REGISTRYD_BLOBS_BACKEND): %q must be disk or s3", c.Blobs.Backend)
	}
	if c.Secrets.Key != "" && c.Secrets.KeyFile != "" {
		add("secrets.key and secrets.key_file are both set: set one")
	} else if c.Secrets.KeyFile != "" {
		if _, err := c.Secrets.SecretKey(); err != nil {
			add("%v", err)
		}
	}

	if c.Store.BatchMaxEntries < 1 {
		add("store.batch_max_entries must be at least 1 (1 turns group commit off), got %d", c.Store.BatchMaxEntries)
	}
	if c.Store.BatchMaxHold <= 0 {
		add("store.batch_max_hold must be a positive duration, got %s", c.Store.BatchMaxHold)
	}
	pg := c.Store.Postgres
	if pg.MaxConns < 1 {
		add("store.postgres.max_conns (REGISTRYD_STORE_POSTGRES_MAX_CONNS) must be at least 1, got %d", pg.MaxConns)
	}
	if pg.MaxLocks < 1 {
		add("store.postgres.max_locks (REGISTRYD_STORE_POSTGRES_MAX_LOCKS) must be at least 1, got %d", pg.MaxLocks)
	}
	if pg.RecheckInterval <= 0 {
		add("store.postgres.recheck_interval must be a positive duration, got %s", pg.RecheckInterval)
	}
	if c.Store.Backend == StorePostgres {
		switch {
		case pg.DSN == "" && pg.DSNFile == "":
			add("store.postgres.dsn (REGISTRYD_STORE_POSTGRES_DSN) or store.postgres.dsn_file is required when store.backend is postgres")
		case pg.DSN != "" && pg.DSNFile != "":
			add("store.postgres.dsn and store.postgres.dsn_file are both set: set one")
		default:
			dsn, err := pg.ConnString()
			if err != nil {
				add("%v", err)
			} else if why := checkDSN(dsn); why != "" {
				add("store.postgres.dsn: %q %s", RedactDSN(dsn), why)
			}
		}
		// Each node would otherwise create its own key in its data.dir: an
		// upstream password sealed on one node could not be opened on the
		// next, nor a gateway's token verified.
		if c.Secrets.Key == "" && c.Secrets.KeyFile == "" {
			add("secrets.key (REGISTRYD_SECRETS_KEY) or secrets.key_file is required when store.backend is postgres: " +
				"every node must seal and open upstream passwords with the same key, and a key created in each node's data.dir would differ " +
				"(a single node moving to a cluster uses its DATA_DIR/secrets.key)")
		}
		if c.Gateway.Secret == "" {
			add("gateway.secret (REGISTRYD_GATEWAY_SECRET) is required when store.backend is postgres: " +
				"a gateway upload's token must verify on every node, and a secret created in each node's data.dir would differ")
		}
		if c.Blobs.Backend == BlobsDisk {
			add("store.backend is postgres but blobs.backend is disk: the nodes sharing the index could not read the files the others cached; " +
				"set blobs.backend to s3 (a bucket every node reads)")
		}
	}

	s3 := c.Blobs.S3
	if s3.LocalCacheBytes <= 0 {
		add("blobs.s3.local_cache_bytes (REGISTRYD_BLOBS_S3_LOCAL_CACHE_BYTES) must be a positive size, got %d", s3.LocalCacheBytes)
	}
	if s3.OrphanGrace < time.Minute {
		add("blobs.s3.orphan_grace must be at least 1m (an object is uploaded before the entry that refers to it is committed), got %s", s3.OrphanGrace)
	}
	if c.Blobs.Backend == BlobsS3 {
		// The evictor measures this node's disk, which with a bucket holds
		// only the local tier: it would delete entries of the whole cluster
		// to make room on one node.
		if c.Cache.MaxBytes > 0 {
			add("cache.max_bytes is the disk budget of a single node's blob store; with blobs.backend s3 the local tier is bounded " +
				"by blobs.s3.local_cache_bytes and the bucket by cleanup policies: unset cache.max_bytes")
		}
		if c.Cache.MinFreeFraction > 0 {
			add("cache.min_free_fraction evicts entries to free a single node's disk; with blobs.backend s3 the local tier is bounded " +
				"by blobs.s3.local_cache_bytes: unset cache.min_free_fraction")
		}
		if c.Store.Backend == StoreBolt {
			add("blobs.backend is s3 but store.backend is bolt: a second node on the same bucket would keep its own index " +
				"and delete this node's objects as orphans (and this node its); set store.backend to postgres (one index for every node of the bucket)")
		}
		if s3.Endpoint == "" {
			add("blobs.s3.endpoint (REGISTRYD_BLOBS_S3_ENDPOINT) is required when blobs.backend is s3")
		} else if u, err := url.Parse(s3.Endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
			u.RawQuery != "" || u.Fragment != "" || u.User != nil {
			add("blobs.s3.endpoint (REGISTRYD_BLOBS_S3_ENDPOINT): %q must be an http:// or https:// URL (like https://s3.eu-west-1.amazonaws.com), "+
				"without credentials or query", redactURL(s3.Endpoint))
		}
		if s3.Bucket == "" {
			add("blobs.s3.bucket (REGISTRYD_BLOBS_S3_BUCKET) is required when blobs.backend is s3")
		} else if !bucketName.MatchString(s3.Bucket) {
			add("blobs.s3.bucket: %q is not a bucket name (3 to 63 lower-case letters, digits, dots and hyphens)", s3.Bucket)
		}
		if strings.HasPrefix(s3.Prefix, "/") {
			add("blobs.s3.prefix: %q must not start with /", s3.Prefix)
		}
		inline := s3.AccessKeyID != "" || s3.SecretAccessKey != ""
		switch {
		case inline && s3.CredentialsFile != "":
			add("blobs.s3.access_key_id/secret_access_key and blobs.s3.credentials_file are both set: set one")
		case s3.CredentialsFile != "":
			if _, _, err := s3.Credentials(); err != nil {
				add("%v", err)
			}
		case s3.AccessKeyID == "" && s3.SecretAccessKey == "":
			add("blobs.s3 has no credentials: set blobs.s3.access_key_id and blobs.s3.secret_access_key " +
				"(REGISTRYD_BLOBS_S3_ACCESS_KEY_ID, REGISTRYD_BLOBS_S3_SECRET_ACCESS_KEY) or blobs.s3.credentials_file")
		case s3.AccessKeyID == "":
			add("blobs.s3.access_key_id (REGISTRYD_BLOBS_S3_ACCESS_KEY_ID) is required with blobs.s3.secret_access_key")
		case s3.SecretAccessKey == "":
			add("blobs.s3.secret_access_key (REGISTRYD_BLOBS_S3_SECRET_ACCESS_KEY) is required with blobs.s3.access_key_id")
		}
	}
}

// redactURL hides a password in a URL that an operator wrote where none
// belongs.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		return s
	}
	return u.Redacted()
}
