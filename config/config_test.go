package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func writeFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "registryd.yaml")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// problems returns the individual problems of a Load or Validate error.
func problems(t *testing.T, err error) Problems {
	t.Helper()
	var p Problems
	if !errors.As(err, &p) {
		t.Fatalf("err = %v (%T), want Problems", err, err)
	}
	return p
}

// wantProblems fails unless every fragment appears in some problem and there
// are exactly len(fragments) problems.
func wantProblems(t *testing.T, err error, fragments ...string) {
	t.Helper()
	p := problems(t, err)
	for _, f := range fragments {
		if !slices.ContainsFunc(p, func(s string) bool { return strings.Contains(s, f) }) {
			t.Errorf("no problem mentions %q; problems:\n%s", f, err)
		}
	}
	if len(p) != len(fragments) {
		t.Errorf("%d problems, want %d:\n%s", len(p), len(fragments), err)
	}
}

func TestDefaults(t *testing.T) {
	cfg, err := Load("", nil)
	if err != nil {
		t.Fatalf("the defaults do not validate: %v", err)
	}
	if cfg != loadedDefaults() {
		t.Fatalf("Load without file or env differs from Default() with external.url derived")
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"data dir", cfg.Data.Dir, "./data"},
		{"proxy listen", cfg.Proxy.Listen, ":8080"},
		{"admin listen", cfg.Admin.Listen, "127.0.0.1:8081"},
		{"admin body limit", cfg.Admin.MaxBodyBytes, 4 * MiB},
		{"allow local network", cfg.Upstreams.AllowLocalNetwork, false},
		{"check timeout", cfg.Upstreams.CheckTimeout, 5 * time.Second},
		{"checksum policy", cfg.Upstreams.ChecksumPolicy, "verify"},
		{"plan", cfg.License.Plan, PlanUltimate},
		{"virtual registry", cfg.Features.VirtualRegistry, true},
		{"root token", cfg.Root.Token, ""},
		{"external url, from admin.listen", cfg.External.URL, "http://127.0.0.1:8081"},
		{"shutdown drain delay", cfg.Shutdown.DrainDelay, 5 * time.Second},
		{"proxy header timeout", cfg.Proxy.HeaderTimeout, 10 * time.Second},
		{"proxy read timeout", cfg.Proxy.ReadTimeout, 60 * time.Second},
		{"proxy concurrency", cfg.Proxy.Concurrency, 8192},
		{"proxy max conns per client", cfg.Proxy.MaxConnsPerClient, 256},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	if got := cfg.Path("secrets.key"); got != filepath.Join("data", "secrets.key") {
		t.Errorf("Path = %q", got)
	}
}

// loadedDefaults is what Load gives without file or environment: the
// defaults, with external.url derived from admin.listen.
func loadedDefaults() Config {
	cfg := Default()
	cfg.External.URL = "http://127.0.0.1:8081"
	return cfg
}

func TestYAMLFile(t *testing.T) {
	path := writeFile(t, `
data:
  dir: /var/lib/registryd
proxy:
  listen: 0.0.0.0:9090
  max_upload_bytes: 1GiB
  read_timeout: 90s
admin:
  max_body_bytes: 1048576
upstreams:
  allow_local_network: true
  check_timeout: 250ms
  checksum_policy: require
license:
  plan: premium
features:
  virtual_registry: false
log:
  level: debug
`)
	cfg, err := Load(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"data dir", cfg.Data.Dir, "/var/lib/registryd"},
		{"proxy listen", cfg.Proxy.Listen, "0.0.0.0:9090"},
		{"upload limit with a unit", cfg.Proxy.MaxUploadBytes, GiB},
		{"duration", cfg.Proxy.ReadTimeout, 90 * time.Second},
		{"body limit as a plain integer", cfg.Admin.MaxBodyBytes, MiB},
		{"bool", cfg.Upstreams.AllowLocalNetwork, true},
		{"short duration", cfg.Upstreams.CheckTimeout, 250 * time.Millisecond},
		{"checksum policy", cfg.Upstreams.ChecksumPolicy, "require"},
		{"plan", cfg.License.Plan, PlanPremium},
		{"feature", cfg.Features.VirtualRegistry, false},
		{"log level", cfg.Log.Level, "debug"},
		{"untouched default", cfg.Admin.Listen, "127.0.0.1:8081"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}

	t.Run("empty file", func(t *testing.T) {
		cfg, err := Load(writeFile(t, ""), nil)
		if err != nil || cfg != loadedDefaults() {
			t.Fatalf("an empty file: %v", err)
		}
	})
	t.Run("missing file", func(t *testing.T) {
		_, err := Load(filepath.Join(t.TempDir(), "nope.yaml"), nil)
		if !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("syntax error", func(t *testing.T) {
		_, err := Load(writeFile(t, "data: [unclosed\n"), nil)
		if err == nil || !strings.Contains(err.Error(), "registryd.yaml") {
			t.Fatalf("err = %v, want one naming the file", err)
		}
	})
	t.Run("unknown and ill-typed keys are all listed", func(t *testing.T) {
		_, err := Load(writeFile(t, `
data:
  dir: ./d
  colour: blue
proxy:
  read_timeout: soon
  max_upload_bytes: lots
nonsense: 1
`), nil)
		wantProblems(t, err, `registryd.yaml:4: data: unknown setting "colour"`,
			`registryd.yaml:6: proxy.read_timeout: "soon" is not a duration (like 30s or 5m)`,
			`registryd.yaml:7: proxy.max_upload_bytes: "lots" is not a size`,
			`registryd.yaml:8: unknown section "nonsense"`)
	})
}

func TestEnvOverrides(t *testing.T) {
	path := writeFile(t, "data:\n  dir: /from/file\nproxy:\n  listen: 127.0.0.1:7000\n")
	cfg, err := Load(path, []string{
		"HOME=/root",                       // not ours: ignored
		"REGISTRYD_CONFIG=/elsewhere.yaml", // read by main, not a setting
		"REGISTRYD_DATA_DIR=/from/env",
		"REGISTRYD_ADMIN_LISTEN=127.0.0.1:0",
		"REGISTRYD_ADMIN_MAX_BODY_BYTES=8MiB",
		"REGISTRYD_UPSTREAMS_CHECK_TIMEOUT=1500ms",
		"REGISTRYD_UPSTREAMS_ALLOW_LOCAL_NETWORK=true",
		"REGISTRYD_UPSTREAMS_MAX_REDIRECTS=2",
		"REGISTRYD_UPSTREAMS_CHECKSUM_POLICY=off",
		"REGISTRYD_LICENSE_PLAN=free",
		"REGISTRYD_FEATURES_VIRTUAL_REGISTRY=false",
		"REGISTRYD_ROOT_TOKEN=rdpat-a-token-of-enough-length",
	})
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"env beats file", cfg.Data.Dir, "/from/env"},
		{"file beats default", cfg.Proxy.Listen, "127.0.0.1:7000"},
		{"string", cfg.Admin.Listen, "127.0.0.1:0"},
		{"byte size", cfg.Admin.MaxBodyBytes, 8 * MiB},
		{"duration", cfg.Upstreams.CheckTimeout, 1500 * time.Millisecond},
		{"bool", cfg.Upstreams.AllowLocalNetwork, true},
		{"int", cfg.Upstreams.MaxRedirects, 2},
		{"checksum policy", cfg.Upstreams.ChecksumPolicy, "off"},
		{"plan", cfg.License.Plan, PlanFree},
		{"feature", cfg.Features.VirtualRegistry, false},
		{"root token", cfg.Root.Token, "rdpat-a-token-of-enough-length"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}

	t.Run("unknown and malformed variables are all listed", func(t *testing.T) {
		_, err := Load("", []string{
			"REGISTRYD_DATA_DIRR=/typo",
			"REGISTRYD_ADMIN_MAX_BODY_BYTES=huge",
			"REGISTRYD_UPSTREAMS_CHECK_TIMEOUT=5",
			"REGISTRYD_UPSTREAMS_ALLOW_LOCAL_NETWORK=maybe",
			"REGISTRYD_PROXY_CONCURRENCY=many",
		})
		wantProblems(t, err,
			"REGISTRYD_DATA_DIRR is not a known setting",
			"REGISTRYD_ADMIN_MAX_BODY_BYTES",
			`REGISTRYD_UPSTREAMS_CHECK_TIMEOUT: "5" is not a duration`,
			`REGISTRYD_UPSTREAMS_ALLOW_LOCAL_NETWORK: "maybe" is not a boolean`,
			`REGISTRYD_PROXY_CONCURRENCY: "many" is not an integer`)
	})
	t.Run("variable, file and value problems together", func(t *testing.T) {
		_, err := Load(writeFile(t, "log:\n  level: loud\n  colour: red\n"), []string{
			"REGISTRYD_NOPE=1",
			"REGISTRYD_LICENSE_PLAN=gold",
		})
		wantProblems(t, err, `log: unknown setting "colour"`, "REGISTRYD_NOPE is not a known setting",
			`license.plan (REGISTRYD_LICENSE_PLAN): "gold"`, `registryd.yaml:2: log.level: "loud"`)
	})
}

// TestFileValueProblemsNameTheFile: a value the file sets that Validate
// refuses is reported at its file:line under its key, without the name of
// an environment variable the operator did not use; the same value from a
// variable still names the variable.
func TestFileValueProblemsNameTheFile(t *testing.T) {
	path := writeFile(t, "proxy:\n  listen: nocolon\n  concurrency: 0\nlog:\n  level: loud\n  format: xml\nroot:\n  token: short\n")
	_, err := Load(path, nil)
	wantProblems(t, err,
		path+`:2: proxy.listen: "nocolon" is not host:port`,
		path+":3: proxy.concurrency must be at least 1, got 0",
		path+`:5: log.level: "loud" must be debug, info, warn or error`,
		path+`:6: log.format: "xml" must be text or json`,
		path+":8: root.token must be at least 20 characters")
	if strings.Contains(err.Error(), "REGISTRYD_") {
		t.Errorf("a problem of the file names a variable:\n%s", err)
	}

	// A problem of two settings, the second from the file: its line.
	path2 := writeFile(t, "metadata:\n  max_document_bytes: 1GiB\n")
	_, err = Load(path2, nil)
	wantProblems(t, err, path2+":2: metadata.max_merging_bytes (64MiB) must be at least metadata.max_document_bytes (1GiB)")

	// A variable overrides the file: its problem names the variable.
	_, err = Load(path, []string{"REGISTRYD_LOG_LEVEL=noisy", "REGISTRYD_PROXY_LISTEN=:8080", "REGISTRYD_PROXY_CONCURRENCY=1024", "REGISTRYD_LOG_FORMAT=text", "REGISTRYD_ROOT_TOKEN="})
	wantProblems(t, err, `log.level (REGISTRYD_LOG_LEVEL): "noisy"`)
}

func TestEnvNamesCoverEverySetting(t *testing.T) {
	fieldCfg := Default()
	var names []string
	for n := range envFields(&fieldCfg) {
		names = append(names, n)
	}
	for _, want := range []string{
		"REGISTRYD_DATA_DIR", "REGISTRYD_PROXY_LISTEN", "REGISTRYD_ADMIN_LISTEN", "REGISTRYD_EXTERNAL_URL",
		"REGISTRYD_UPSTREAMS_ALLOW_LOCAL_NETWORK", "REGISTRYD_LICENSE_PLAN", "REGISTRYD_FEATURES_VIRTUAL_REGISTRY",
		"REGISTRYD_ROOT_TOKEN", "REGISTRYD_SECRETS_KEY", "REGISTRYD_ADMIN_MAX_BODY_BYTES", "REGISTRYD_UPSTREAMS_CHECK_TIMEOUT",
		"REGISTRYD_UPSTREAMS_CHECKSUM_POLICY",
	} {
		if !slices.Contains(names, want) {
			t.Errorf("no environment variable %s", want)
		}
	}
	// Every field of every section has a name: a new setting cannot be
	// forgotten by the environment.
	cfg := Default()
	want := 0
	var count func(t reflect.Type)
	count = func(t reflect.Type) { // a subsection (store.postgres) counts its settings
		for i := 0; i < t.NumField(); i++ {
			if t.Field(i).Type.Kind() == reflect.Struct {
				count(t.Field(i).Type)
			} else {
				want++
			}
		}
	}
	for _, sec := range []any{cfg.Data, cfg.Store, cfg.Blobs, cfg.Proxy, cfg.Admin, cfg.External, cfg.Upstreams, cfg.License, cfg.Features,
		cfg.Root, cfg.Secrets, cfg.Gateway, cfg.Auth, cfg.Cache, cfg.Metadata, cfg.Cleanup, cfg.Audit, cfg.Advisories, cfg.Shutdown, cfg.Log} {
		count(reflect.TypeOf(sec))
	}
	if len(names) != want {
		t.Fatalf("%d variable names for %d settings", len(names), want)
	}
}

func TestValidateListsEveryProblem(t *testing.T) {
	cfg := Default()
	cfg.Data.Dir = " "
	cfg.Proxy.Listen = "nocolon"
	cfg.Admin.Listen = "also-bad"
	cfg.Admin.PprofListen = "x"
	cfg.External.URL = "ftp://example.com"
	cfg.License.Plan = "gold"
	cfg.Proxy.ReadTimeout = 0
	cfg.Proxy.HeaderTimeout = -time.Second
	cfg.Proxy.MaxConnsPerClient = -1
	cfg.Upstreams.CheckTimeout = -time.Second
	cfg.Admin.MaxBodyBytes = 0
	cfg.Proxy.Concurrency = 0
	cfg.Auth.CacheSize = 0
	cfg.Upstreams.MaxRedirects = -1
	cfg.Upstreams.ChecksumPolicy = "strict"
	cfg.Root.Token = "short"
	cfg.Secrets.Key = "not-a-key"
	cfg.Gateway.Secret = "short"
	cfg.Log.Level = "loud"
	cfg.Log.Format = "xml"
	err := cfg.Validate()
	wantProblems(t, err,
		"data.dir (REGISTRYD_DATA_DIR) must not be empty",
		`proxy.listen (REGISTRYD_PROXY_LISTEN): "nocolon" is not host:port`,
		`admin.listen (REGISTRYD_ADMIN_LISTEN): "also-bad" is not host:port`,
		"admin.pprof_listen",
		"external.url (REGISTRYD_EXTERNAL_URL)",
		"license.plan (REGISTRYD_LICENSE_PLAN)",
		"proxy.read_timeout must be a positive duration",
		"proxy.header_timeout must be a positive duration",
		"proxy.max_conns_per_client must not be negative",
		"upstreams.check_timeout must be a positive duration",
		"admin.max_body_bytes must be a positive size",
		"proxy.concurrency must be at least 1",
		"auth.cache_size must be at least 1",
		"upstreams.max_redirects must not be negative",
		`upstreams.checksum_policy (REGISTRYD_UPSTREAMS_CHECKSUM_POLICY): "strict" must be verify, require or off`,
		"root.token (REGISTRYD_ROOT_TOKEN) must be at least 20 characters",
		"secrets.key (REGISTRYD_SECRETS_KEY): must be 32 bytes",
		"gateway.secret (REGISTRYD_GATEWAY_SECRET) must be at least 32 characters",
		`log.level (REGISTRYD_LOG_LEVEL): "loud"`,
		`log.format (REGISTRYD_LOG_FORMAT): "xml"`,
	)
	if msg := err.Error(); !strings.HasPrefix(msg, "invalid configuration:\n  - ") || strings.Count(msg, "\n  - ") != 20 {
		t.Fatalf("message is not one problem per line:\n%s", msg)
	}

	t.Run("same listen address twice", func(t *testing.T) {
		cfg := Default()
		cfg.Proxy.Listen, cfg.Admin.Listen = "127.0.0.1:9000", "127.0.0.1:9000"
		wantProblems(t, cfg.Validate(), "proxy.listen and admin.listen must differ")
		cfg.Proxy.Listen, cfg.Admin.Listen = "127.0.0.1:0", "127.0.0.1:0"
		if err := cfg.Validate(); err != nil {
			t.Fatalf("two kernel-chosen ports are fine: %v", err)
		}
	})
}

func TestMaxConnsPerClient(t *testing.T) {
	tests := []struct {
		name    string
		env     []string
		want    int
		problem string
	}{
		{"default", nil, 256, ""},
		{"off", []string{"REGISTRYD_PROXY_MAX_CONNS_PER_CLIENT=0"}, 0, ""},
		{"off even above concurrency", []string{"REGISTRYD_PROXY_MAX_CONNS_PER_CLIENT=0", "REGISTRYD_PROXY_CONCURRENCY=1"}, 0, ""},
		{"just below concurrency", []string{"REGISTRYD_PROXY_MAX_CONNS_PER_CLIENT=99", "REGISTRYD_PROXY_CONCURRENCY=100"}, 99, ""},
		{"equal to concurrency", []string{"REGISTRYD_PROXY_MAX_CONNS_PER_CLIENT=100", "REGISTRYD_PROXY_CONCURRENCY=100"}, 0,
			"proxy.max_conns_per_client (100) must be less than proxy.concurrency (100)"},
		{"above concurrency", []string{"REGISTRYD_PROXY_CONCURRENCY=200"}, 0,
			"proxy.max_conns_per_client (256) must be less than proxy.concurrency (200)"},
		{"negative", []string{"REGISTRYD_PROXY_MAX_CONNS_PER_CLIENT=-1"}, 0, "proxy.max_conns_per_client must not be negative"},
		{"not a number", []string{"REGISTRYD_PROXY_MAX_CONNS_PER_CLIENT=lots"}, 0, "REGISTRYD_PROXY_MAX_CONNS_PER_CLIENT"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Load("", tc.env)
			if tc.problem != "" {
				wantProblems(t, err, tc.problem)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Proxy.MaxConnsPerClient != tc.want {
				t.Fatalf("max conns per client = %d, want %d", cfg.Proxy.MaxConnsPerClient, tc.want)
			}
		})
	}
}

func TestChecksumPolicy(t *testing.T) {
	tests := []struct {
		name    string
		file    string
		env     []string
		want    string
		problem string
	}{
		{"default", "", nil, "verify", ""},
		{"file", "upstreams:\n  checksum_policy: off\n", nil, "off", ""},
		{"env beats file", "upstreams:\n  checksum_policy: off\n", []string{"REGISTRYD_UPSTREAMS_CHECKSUM_POLICY=require"}, "require", ""},
		{"explicit verify", "", []string{"REGISTRYD_UPSTREAMS_CHECKSUM_POLICY=verify"}, "verify", ""},
		{"empty is not the default", "", []string{"REGISTRYD_UPSTREAMS_CHECKSUM_POLICY="}, "", `""`},
		{"case matters", "", []string{"REGISTRYD_UPSTREAMS_CHECKSUM_POLICY=Require"}, "", `"Require"`},
		{"unknown", "upstreams:\n  checksum_policy: strict\n", nil, "", `"strict"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := ""
			if tc.file != "" {
				path = writeFile(t, tc.file)
			}
			cfg, err := Load(path, tc.env)
			if tc.problem != "" {
				where := "upstreams.checksum_policy (REGISTRYD_UPSTREAMS_CHECKSUM_POLICY): "
				if tc.env == nil {
					where = path + ":2: upstreams.checksum_policy: " // from the file
				}
				wantProblems(t, err, where+tc.problem+" must be verify, require or off")
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Upstreams.ChecksumPolicy != tc.want {
				t.Fatalf("checksum policy = %q, want %q", cfg.Upstreams.ChecksumPolicy, tc.want)
			}
		})
	}
}

func TestParseByteSize(t *testing.T) {
	tests := []struct {
		in   string
		want ByteSize
		err  bool
	}{
		{"0", 0, false},
		{"1048576", MiB, false},
		{"512KiB", 512 * KiB, false},
		{"64MiB", 64 * MiB, false},
		{"5GiB", 5 * GiB, false},
		{"1TiB", TiB, false},
		{"4mb", 4 * MiB, false},
		{" 2 G ", 2 * GiB, false},
		{"10B", 10, false},
		{"", 0, true},
		{"-1", 0, true},
		{"1.5GiB", 0, true},
		{"lots", 0, true},
		{"99999999999TiB", 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseByteSize(tc.in)
			if (err != nil) != tc.err || got != tc.want {
				t.Fatalf("ParseByteSize(%q) = %d, %v; want %d, error %v", tc.in, got, err, tc.want, tc.err)
			}
		})
	}
	for _, tc := range []struct {
		in   ByteSize
		want string
	}{{5 * GiB, "5GiB"}, {4 * MiB, "4MiB"}, {16 * KiB, "16KiB"}, {1000, "1000"}, {MiB + 1, "1048577"}} {
		if got := tc.in.String(); got != tc.want {
			t.Errorf("%d.String() = %q, want %q", int64(tc.in), got, tc.want)
		}
	}
}

func TestDecodeKey(t *testing.T) {
	raw := []byte("0123456789abcdef0123456789abcdef")
	tests := []struct {
		name string
		in   string
		ok   bool
	}{
		{"hex", "3031323334353637383961626364656630313233343536373839616263646566", true},
		{"base64", "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=", true},
		{"raw base64 with spaces", "  MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY  ", true},
		{"too short", "MDEy", false},
		{"garbage", "not a key at all", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecodeKey(tc.in)
			if tc.ok != (err == nil) || (tc.ok && string(got) != string(raw)) {
				t.Fatalf("DecodeKey = %q, %v", got, err)
			}
		})
	}
}

func TestMaxSBOMIngests(t *testing.T) {
	if got := Default().Admin.MaxSBOMIngests; got != 2 {
		t.Fatalf("default admin.max_sbom_ingests = %d, want 2", got)
	}
	cfg, err := Load("", []string{"REGISTRYD_ADMIN_MAX_SBOM_INGESTS=5"})
	if err != nil || cfg.Admin.MaxSBOMIngests != 5 {
		t.Fatalf("from the environment: %d, %v", cfg.Admin.MaxSBOMIngests, err)
	}
	cfg = Default()
	cfg.Admin.MaxSBOMIngests = 0
	wantProblems(t, cfg.Validate(), "admin.max_sbom_ingests must be at least 1, got 0")
}

func TestAccessLogSettings(t *testing.T) {
	if cfg := Default(); !cfg.Proxy.AccessLog || cfg.Proxy.AccessLogPath != "" {
		t.Fatalf("defaults: access_log %v, path %q; want on, to the main log", cfg.Proxy.AccessLog, cfg.Proxy.AccessLogPath)
	}
	cfg, err := Load("", []string{"REGISTRYD_PROXY_ACCESS_LOG=false", "REGISTRYD_PROXY_ACCESS_LOG_PATH=/var/log/registryd/access.log"})
	if err != nil || cfg.Proxy.AccessLog || cfg.Proxy.AccessLogPath != "/var/log/registryd/access.log" {
		t.Fatalf("from the environment: %v, %+v", err, cfg.Proxy)
	}
	for _, bad := range []string{" access.log", "logs/", "a\x00b"} {
		cfg := Default()
		cfg.Proxy.AccessLogPath = bad
		wantProblems(t, cfg.Validate(), "proxy.access_log_path (REGISTRYD_PROXY_ACCESS_LOG_PATH)")
	}
	if _, err := Load("", []string{"REGISTRYD_PROXY_ACCESS_LOG=maybe"}); err == nil ||
		!strings.Contains(err.Error(), "REGISTRYD_PROXY_ACCESS_LOG") {
		t.Fatalf("a non-boolean switch: %v", err)
	}
}

func TestDiskBudgetSettings(t *testing.T) {
	if cfg := Default(); cfg.Cache.MaxBytes != 0 || cfg.Cache.MinFreeFraction != 0 {
		t.Fatalf("defaults: max_bytes %d, min_free_fraction %v", cfg.Cache.MaxBytes, cfg.Cache.MinFreeFraction)
	}
	cfg, err := Load("", []string{"REGISTRYD_CACHE_MAX_BYTES=200GiB", "REGISTRYD_CACHE_MIN_FREE_FRACTION=0.1"})
	if err != nil || cfg.Cache.MaxBytes != 200*GiB || cfg.Cache.MinFreeFraction != 0.1 {
		t.Fatalf("from the environment: %v, %+v", err, cfg.Cache)
	}
	cfg, err = Load(writeFile(t, "cache:\n  max_bytes: 1TiB\n  min_free_fraction: 0\n"), nil)
	if err != nil || cfg.Cache.MaxBytes != TiB || cfg.Cache.MinFreeFraction != 0 {
		t.Fatalf("from a file: %v, %+v", err, cfg.Cache)
	}
	if _, err := Load("", []string{"REGISTRYD_CACHE_MIN_FREE_FRACTION=five"}); err == nil ||
		!strings.Contains(err.Error(), "REGISTRYD_CACHE_MIN_FREE_FRACTION") {
		t.Fatalf("not a number: %v", err)
	}
	for _, bad := range []float64{-0.01, 0.51, 1} {
		cfg := Default()
		cfg.Cache.MinFreeFraction = bad
		wantProblems(t, cfg.Validate(), "cache.min_free_fraction must be between 0 (off) and 0.5")
	}
	cfg = Default()
	cfg.Cache.MaxBytes = -1
	wantProblems(t, cfg.Validate(), "cache.max_bytes must not be negative")
}

func TestMergeBoundSettings(t *testing.T) {
	m := Default().Metadata
	if m.MaxVersions != 100000 || m.MaxElements != 1<<20 || m.MaxMergingBytes != 64*MiB || m.MergeWait != 2*time.Second {
		t.Fatalf("defaults: %+v", m)
	}
	cfg, err := Load("", []string{"REGISTRYD_METADATA_MAX_VERSIONS=500", "REGISTRYD_METADATA_MAX_ELEMENTS=2000",
		"REGISTRYD_METADATA_MAX_MERGING_BYTES=128MiB", "REGISTRYD_METADATA_MERGE_WAIT=0s"})
	if err != nil || cfg.Metadata.MaxVersions != 500 || cfg.Metadata.MaxElements != 2000 ||
		cfg.Metadata.MaxMergingBytes != 128*MiB || cfg.Metadata.MergeWait != 0 {
		t.Fatalf("from the environment: %v, %+v", err, cfg.Metadata)
	}
	cfg = Default()
	cfg.Metadata.MaxVersions = 0
	cfg.Metadata.MaxMergingBytes = cfg.Metadata.MaxDocumentBytes - 1
	cfg.Metadata.MergeWait = -time.Second
	wantProblems(t, cfg.Validate(), "metadata.max_versions and metadata.max_elements must be at least 1",
		"metadata.max_merging_bytes", "metadata.merge_wait must not be negative")
}

func TestGroupCommitAndPendingStores(t *testing.T) {
	d := Default()
	if d.Store.BatchMaxEntries != 256 || d.Store.BatchMaxHold != 10*time.Millisecond || d.Cache.MaxPendingStores != 512 {
		t.Fatalf("defaults: batch_max_entries %d, batch_max_hold %s, max_pending_stores %d",
			d.Store.BatchMaxEntries, d.Store.BatchMaxHold, d.Cache.MaxPendingStores)
	}
	cfg, err := Load("", []string{"REGISTRYD_STORE_BATCH_MAX_ENTRIES=1", "REGISTRYD_STORE_BATCH_MAX_HOLD=20ms",
		"REGISTRYD_CACHE_MAX_PENDING_STORES=64"})
	if err != nil || cfg.Store.BatchMaxEntries != 1 || cfg.Store.BatchMaxHold != 20*time.Millisecond || cfg.Cache.MaxPendingStores != 64 {
		t.Fatalf("from the environment: %v, %+v, %d", err, cfg.Store, cfg.Cache.MaxPendingStores)
	}
	cfg = Default()
	cfg.Store.BatchMaxEntries, cfg.Store.BatchMaxHold, cfg.Cache.MaxPendingStores = 0, 0, 0
	wantProblems(t, cfg.Validate(), "store.batch_max_entries must be at least 1", "store.batch_max_hold must be a positive duration",
		"cache.max_pending_stores must be at least 1")
}

func TestTrafficHistoryInterval(t *testing.T) {
	if got := Default().Admin.TrafficHistoryInterval; got != time.Minute {
		t.Fatalf("default admin.traffic_history_interval = %s, want 1m", got)
	}
	cfg, err := Load("", []string{"REGISTRYD_ADMIN_TRAFFIC_HISTORY_INTERVAL=2s"})
	if err != nil || cfg.Admin.TrafficHistoryInterval != 2*time.Second {
		t.Fatalf("from the environment: %s, %v", cfg.Admin.TrafficHistoryInterval, err)
	}
	for _, d := range []time.Duration{0, 500 * time.Millisecond, 2 * time.Hour} {
		cfg.Admin.TrafficHistoryInterval = d
		wantProblems(t, cfg.Validate(), "admin.traffic_history_interval (REGISTRYD_ADMIN_TRAFFIC_HISTORY_INTERVAL) must be from 1s to 1h, got "+d.String())
	}
}

func TestConsoleSessionTTL(t *testing.T) {
	if got := Default().Admin.ConsoleSessionTTL; got != 8*time.Hour {
		t.Fatalf("default admin.console_session_ttl = %s, want 8h", got)
	}
	cfg, err := Load("", []string{"REGISTRYD_ADMIN_CONSOLE_SESSION_TTL=30m"})
	if err != nil || cfg.Admin.ConsoleSessionTTL != 30*time.Minute {
		t.Fatalf("from the environment: %s, %v", cfg.Admin.ConsoleSessionTTL, err)
	}
	cfg.Admin.ConsoleSessionTTL = 0
	wantProblems(t, cfg.Validate(), "admin.console_session_ttl must be a positive duration, got 0s")
}
