package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const (
	testKey     = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	testGateway = "a-gateway-secret-of-at-least-32-characters"
	testDSN     = "postgres://registryd:hunter2@db.example:5432/registryd"
	testSecret  = "s3cr3t-access-key-value"
)

// cluster is a valid cluster configuration that each case below breaks.
func cluster() Config {
	c := Default()
	c.Store.Backend = StorePostgres
	c.Store.Postgres.DSN = testDSN
	c.Blobs.Backend = BlobsS3
	c.Blobs.S3.Endpoint = "http://127.0.0.1:9000"
	c.Blobs.S3.Bucket = "registryd"
	c.Blobs.S3.AccessKeyID = "registryd"
	c.Blobs.S3.SecretAccessKey = testSecret
	c.Secrets.Key = testKey
	c.Gateway.Secret = testGateway
	return c
}

func TestClusterConfigValid(t *testing.T) {
	if err := cluster().Validate(); err != nil {
		t.Fatalf("a valid cluster configuration: %v", err)
	}
	if !cluster().Clustered() || Default().Clustered() {
		t.Error("Clustered: a postgres store is a cluster, the default is not")
	}
}

func TestClusterConfigProblems(t *testing.T) {
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cases := []struct {
		name  string
		edit  func(c *Config)
		wants []string
	}{
		{"unknown store backend", func(c *Config) { c.Store.Backend = "mysql" },
			[]string{`store.backend (REGISTRYD_STORE_BACKEND): "mysql" must be bolt or postgres`}},
		{"unknown blobs backend", func(c *Config) { c.Blobs.Backend = "nfs" },
			[]string{`blobs.backend (REGISTRYD_BLOBS_BACKEND): "nfs" must be disk or s3`}},
		{"postgres without dsn", func(c *Config) { c.Store.Postgres.DSN = "" },
			[]string{"store.postgres.dsn (REGISTRYD_STORE_POSTGRES_DSN) or store.postgres.dsn_file is required when store.backend is postgres"}},
		{"dsn and dsn_file", func(c *Config) { c.Store.Postgres.DSNFile = "/x" },
			[]string{"store.postgres.dsn and store.postgres.dsn_file are both set"}},
		{"dsn_file missing", func(c *Config) { c.Store.Postgres.DSN, c.Store.Postgres.DSNFile = "", filepath.Join(dir, "none") },
			[]string{"store.postgres.dsn_file: open " + filepath.Join(dir, "none")}},
		{"dsn_file empty", func(c *Config) { c.Store.Postgres.DSN, c.Store.Postgres.DSNFile = "", file("empty", "\n") },
			[]string{"store.postgres.dsn_file: " + filepath.Join(dir, "empty") + " is empty"}},
		{"dsn not a dsn", func(c *Config) { c.Store.Postgres.DSN = "db.example" },
			[]string{`store.postgres.dsn: "db.example" is not a PostgreSQL connection string`}},
		{"dsn url without host", func(c *Config) { c.Store.Postgres.DSN = "postgres:///registryd" },
			[]string{"names no host"}},
		{"max_conns", func(c *Config) { c.Store.Postgres.MaxConns = 0 },
			[]string{"store.postgres.max_conns (REGISTRYD_STORE_POSTGRES_MAX_CONNS) must be at least 1, got 0"}},
		{"recheck_interval", func(c *Config) { c.Store.Postgres.RecheckInterval = 0 },
			[]string{"store.postgres.recheck_interval must be a positive duration"}},
		{"postgres with disk blobs", func(c *Config) { c.Blobs.Backend = BlobsDisk },
			[]string{"store.backend is postgres but blobs.backend is disk: the nodes sharing the index could not read the files the others cached"}},
		{"s3 with bolt", func(c *Config) { c.Store.Backend = StoreBolt },
			[]string{"blobs.backend is s3 but store.backend is bolt: a second node on the same bucket would keep its own index and delete this node's objects as orphans"}},
		{"cluster without secrets key", func(c *Config) { c.Secrets.Key = "" },
			[]string{"secrets.key (REGISTRYD_SECRETS_KEY) or secrets.key_file is required when store.backend is postgres"}},
		{"cluster with secrets key_file", func(c *Config) { c.Secrets.Key, c.Secrets.KeyFile = "", file("key", testKey+"\n") }, nil},
		{"secrets key and key_file", func(c *Config) { c.Secrets.KeyFile = file("key2", testKey) },
			[]string{"secrets.key and secrets.key_file are both set"}},
		{"secrets key_file not a key", func(c *Config) { c.Secrets.Key, c.Secrets.KeyFile = "", file("badkey", "nope") },
			[]string{"secrets.key_file: " + filepath.Join(dir, "badkey") + " must be 32 bytes"}},
		{"cluster without gateway secret", func(c *Config) { c.Gateway.Secret = "" },
			[]string{"gateway.secret (REGISTRYD_GATEWAY_SECRET) is required when store.backend is postgres"}},
		{"s3 without endpoint", func(c *Config) { c.Blobs.S3.Endpoint = "" },
			[]string{"blobs.s3.endpoint (REGISTRYD_BLOBS_S3_ENDPOINT) is required when blobs.backend is s3"}},
		{"endpoint without scheme", func(c *Config) { c.Blobs.S3.Endpoint = "127.0.0.1:9000" },
			[]string{`blobs.s3.endpoint (REGISTRYD_BLOBS_S3_ENDPOINT): "127.0.0.1:9000" must be an http:// or https:// URL`}},
		{"endpoint ftp", func(c *Config) { c.Blobs.S3.Endpoint = "ftp://s3.example" },
			[]string{`"ftp://s3.example" must be an http:// or https:// URL`}},
		{"endpoint with credentials", func(c *Config) { c.Blobs.S3.Endpoint = "http://u:pw@s3.example" },
			[]string{`"http://u:xxxxx@s3.example" must be an http:// or https:// URL`}},
		{"s3 without bucket", func(c *Config) { c.Blobs.S3.Bucket = "" },
			[]string{"blobs.s3.bucket (REGISTRYD_BLOBS_S3_BUCKET) is required when blobs.backend is s3"}},
		{"bucket name", func(c *Config) { c.Blobs.S3.Bucket = "My_Bucket" },
			[]string{`blobs.s3.bucket: "My_Bucket" is not a bucket name`}},
		{"prefix", func(c *Config) { c.Blobs.S3.Prefix = "/registryd/" },
			[]string{`blobs.s3.prefix: "/registryd/" must not start with /`}},
		{"s3 without credentials", func(c *Config) { c.Blobs.S3.AccessKeyID, c.Blobs.S3.SecretAccessKey = "", "" },
			[]string{"blobs.s3 has no credentials"}},
		{"s3 without secret", func(c *Config) { c.Blobs.S3.SecretAccessKey = "" },
			[]string{"blobs.s3.secret_access_key (REGISTRYD_BLOBS_S3_SECRET_ACCESS_KEY) is required with blobs.s3.access_key_id"}},
		{"s3 without key id", func(c *Config) { c.Blobs.S3.AccessKeyID = "" },
			[]string{"blobs.s3.access_key_id (REGISTRYD_BLOBS_S3_ACCESS_KEY_ID) is required with blobs.s3.secret_access_key"}},
		{"credentials inline and file", func(c *Config) { c.Blobs.S3.CredentialsFile = "/x" },
			[]string{"blobs.s3.access_key_id/secret_access_key and blobs.s3.credentials_file are both set"}},
		{"credentials file", func(c *Config) {
			c.Blobs.S3.AccessKeyID, c.Blobs.S3.SecretAccessKey = "", ""
			c.Blobs.S3.CredentialsFile = file("creds", "# minio\naccess_key_id = registryd\nsecret_access_key="+testSecret+"\n")
		}, nil},
		{"credentials file missing a key", func(c *Config) {
			c.Blobs.S3.AccessKeyID, c.Blobs.S3.SecretAccessKey = "", ""
			c.Blobs.S3.CredentialsFile = file("half", "access_key_id=registryd\n")
		}, []string{"blobs.s3.credentials_file: " + filepath.Join(dir, "half") + " must give both access_key_id and secret_access_key"}},
		{"credentials file not key=value", func(c *Config) {
			c.Blobs.S3.AccessKeyID, c.Blobs.S3.SecretAccessKey = "", ""
			c.Blobs.S3.CredentialsFile = file("bare", "registryd\n"+testSecret+"\n")
		}, []string{"blobs.s3.credentials_file: " + filepath.Join(dir, "bare") + ":1 is not key=value"}},
		{"local_cache_bytes", func(c *Config) { c.Blobs.S3.LocalCacheBytes = 0 },
			[]string{"blobs.s3.local_cache_bytes (REGISTRYD_BLOBS_S3_LOCAL_CACHE_BYTES) must be a positive size, got 0"}},
		{"orphan_grace", func(c *Config) { c.Blobs.S3.OrphanGrace = time.Second },
			[]string{"blobs.s3.orphan_grace must be at least 1m"}},
		{"a disk budget with a bucket", func(c *Config) { c.Cache.MaxBytes = 1 << 30; c.Cache.MinFreeFraction = 0.1 },
			[]string{"cache.max_bytes is the disk budget of a single node's blob store", "cache.min_free_fraction evicts entries to free a single node's disk"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := cluster()
			tc.edit(&c)
			err := c.Validate()
			if tc.wants == nil {
				if err != nil {
					t.Fatalf("want valid, got %v", err)
				}
				return
			}
			wantProblems(t, err, tc.wants...)
			for _, secret := range []string{"hunter2", testSecret} {
				if strings.Contains(err.Error(), secret) {
					t.Errorf("a problem shows a secret:\n%v", err)
				}
			}
		})
	}
}

// Every problem at once: a cluster configuration with nothing filled in.
func TestClusterConfigListsEveryProblem(t *testing.T) {
	c := Default()
	c.Store.Backend = StorePostgres
	c.Blobs.Backend = BlobsDisk
	wantProblems(t, c.Validate(),
		"store.postgres.dsn (REGISTRYD_STORE_POSTGRES_DSN) or store.postgres.dsn_file is required",
		"secrets.key (REGISTRYD_SECRETS_KEY) or secrets.key_file is required",
		"gateway.secret (REGISTRYD_GATEWAY_SECRET) is required",
		"store.backend is postgres but blobs.backend is disk")

	c = Default()
	c.Blobs.Backend = BlobsS3
	wantProblems(t, c.Validate(),
		"blobs.backend is s3 but store.backend is bolt",
		"blobs.s3.endpoint (REGISTRYD_BLOBS_S3_ENDPOINT) is required",
		"blobs.s3.bucket (REGISTRYD_BLOBS_S3_BUCKET) is required",
		"blobs.s3 has no credentials")
}

func TestClusterConfigFromFileAndEnv(t *testing.T) {
	path := writeFile(t, `
store:
  backend: postgres
  postgres:
    dsn: "host=db.example dbname=registryd user=registryd password='p w'"
    max_conns: 8
blobs:
  backend: s3
  s3:
    endpoint: http://127.0.0.1:9000
    bucket: registryd
    path_style: yes
    local_cache_bytes: 2GiB
secrets:
  key: `+testKey+`
gateway:
  secret: `+testGateway+`
`)
	cfg, err := Load(path, []string{
		"REGISTRYD_BLOBS_S3_ACCESS_KEY_ID=registryd",
		"REGISTRYD_BLOBS_S3_SECRET_ACCESS_KEY=" + testSecret,
		"REGISTRYD_STORE_POSTGRES_RECHECK_INTERVAL=500ms",
		"REGISTRYD_BLOBS_S3_ORPHAN_GRACE=2h",
	})
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"backend", cfg.Store.Backend, StorePostgres},
		{"max_conns", cfg.Store.Postgres.MaxConns, 8},
		{"recheck from env", cfg.Store.Postgres.RecheckInterval, 500 * time.Millisecond},
		{"path_style", cfg.Blobs.S3.PathStyle, true},
		{"local cache", cfg.Blobs.S3.LocalCacheBytes, 2 * GiB},
		{"secret from env", cfg.Blobs.S3.SecretAccessKey.Reveal(), testSecret},
		{"orphan grace from env", cfg.Blobs.S3.OrphanGrace, 2 * time.Hour},
		{"defaults kept", cfg.Blobs.S3.Region, ""},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}

	t.Run("problems in a subsection name their line and key", func(t *testing.T) {
		_, err := Load(writeFile(t, "store:\n  postgres:\n    max_conn: 4\n    recheck_interval: soon\nblobs:\n  s3: nope\n"),
			[]string{"REGISTRYD_STORE_POSTGRES_DNS=x"})
		wantProblems(t, err,
			`registryd.yaml:3: store.postgres: unknown setting "max_conn" (did you mean "max_conns"?)`,
			`registryd.yaml:4: store.postgres.recheck_interval: "soon" is not a duration`,
			`registryd.yaml:6: blobs.s3: expected settings under it`,
			"REGISTRYD_STORE_POSTGRES_DNS is not a known setting (did you mean REGISTRYD_STORE_POSTGRES_DSN?)")
	})
}

// Secrets never reach a log, whichever way the configuration is logged.
func TestClusterSecretsNotLogged(t *testing.T) {
	c := cluster()
	for _, format := range []string{"text", "json"} {
		var buf bytes.Buffer
		var h slog.Handler = slog.NewTextHandler(&buf, nil)
		if format == "json" {
			h = slog.NewJSONHandler(&buf, nil)
		}
		log := slog.New(h)
		log.Info("start", "store", c.Store.Postgres, "blobs", c.Blobs.S3, "config", c, "dsn", c.Store.Postgres.DSN)
		out := buf.String()
		for _, secret := range []string{"hunter2", testSecret} {
			if strings.Contains(out, secret) {
				t.Errorf("%s log shows a secret:\n%s", format, out)
			}
		}
		if !strings.Contains(out, "db.example") || !strings.Contains(out, "127.0.0.1:9000") {
			t.Errorf("%s log does not say where the backends are:\n%s", format, out)
		}
	}
	for _, s := range []string{fmt.Sprint(c), fmt.Sprintf("%+v", c), fmt.Sprintf("%#v", c)} {
		if strings.Contains(s, "hunter2") || strings.Contains(s, testSecret) {
			t.Errorf("fmt shows a secret: %s", s)
		}
	}
	b, _ := json.Marshal(c)
	if strings.Contains(string(b), "hunter2") || strings.Contains(string(b), testSecret) {
		t.Errorf("JSON shows a secret: %s", b)
	}
}

func TestRedactDSN(t *testing.T) {
	cases := map[string]string{
		"postgres://registryd:hunter2@db:5432/registryd":        "postgres://registryd:[redacted]@db:5432/registryd",
		"postgresql://registryd@db/registryd?password=hunter2":  "postgresql://registryd@db/registryd?password=[redacted]",
		"postgres://registryd@db/registryd":                     "postgres://registryd@db/registryd",
		"host=db password=hunter2 dbname=registryd":             "host=db password=[redacted] dbname=registryd",
		"host=db password = 'hunter 2' dbname=registryd":        "host=db password = [redacted] dbname=registryd",
		"host=db PASSWORD='hun\\'ter2' dbname=registryd":        "host=db PASSWORD=[redacted] dbname=registryd",
		"postgres://registryd:hunter2@db:5432/registryd%zz":     "[redacted]",
		"host=/var/run/postgresql dbname=registryd sslmode=off": "host=/var/run/postgresql dbname=registryd sslmode=off",
	}
	for in, want := range cases {
		if got := RedactDSN(in); got != want {
			t.Errorf("RedactDSN(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParseCredentials(t *testing.T) {
	id, secret, err := parseCredentials("f", []byte("[ignored?]\n"))
	if err == nil {
		t.Errorf("a section header is not a credential: %q %q", id, secret)
	}
	id, secret, err = parseCredentials("f", []byte("aws_access_key_id=AKIA\nAWS_SECRET_ACCESS_KEY = x=y\n"))
	if err != nil || id != "AKIA" || secret != "x=y" {
		t.Errorf("aws_ names: %q %q %v", id, secret, err)
	}
	_, _, err = parseCredentials("f", []byte("access_key_id=a\nsecret_access_key=b\nsession_token=c\n"))
	if err == nil || !strings.Contains(err.Error(), `f:3: unknown key "session_token"`) {
		t.Errorf("unknown key: %v", err)
	}
}
