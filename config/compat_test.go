package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// UnmarshalYAML is ByteSize's method of the loader before the walk (it was
// dropped in f8e9238), declared here for decodeV3 only: the walk never
// gives yaml.v3 a ByteSize to decode.
func (b *ByteSize) UnmarshalYAML(n *yaml.Node) error {
	v, err := ParseByteSize(n.Value)
	if n.Kind != yaml.ScalarNode {
		err = errors.New("a size must be a number or a string like 4MiB")
	}
	if err != nil {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: %v", n.Line, err)}}
	}
	*b = v
	return nil
}

// decodeV3 is the loader before the walk (config.go before a3ae7ae): the
// defaults, then yaml.v3 decoding the file into the struct with
// KnownFields (ByteSize by the method above), then Validate.
func decodeV3(raw string) (Config, error) {
	cfg := Default()
	dec := yaml.NewDecoder(bytes.NewReader([]byte(raw)))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) {
		return cfg, err
	}
	if cfg.External.URL == "" {
		cfg.External.URL = ExternalURLFor(cfg.Admin.Listen)
	}
	return cfg, cfg.Validate()
}

// TestYAMLAsBefore: every form the yaml.v3 decoder accepted gives the same
// Config from the walk, and what it refused the walk refuses too.
func TestYAMLAsBefore(t *testing.T) {
	accepted := []string{
		// YAML 1.1 booleans, which yaml.v3 reads into a bool field.
		"upstreams:\n  allow_local_network: y\n",
		"upstreams:\n  allow_local_network: Y\n",
		"upstreams:\n  allow_local_network: yes\n",
		"upstreams:\n  allow_local_network: Yes\n",
		"upstreams:\n  allow_local_network: YES\n",
		"upstreams:\n  allow_local_network: on\n",
		"upstreams:\n  allow_local_network: On\n",
		"upstreams:\n  allow_local_network: ON\n",
		"upstreams:\n  allow_local_network: \"yes\"\n",
		"upstreams:\n  allow_local_network: True\n",
		"upstreams:\n  allow_local_network: TRUE\n",
		"proxy:\n  access_log: n\n",
		"proxy:\n  access_log: N\n",
		"proxy:\n  access_log: no\n",
		"proxy:\n  access_log: No\n",
		"proxy:\n  access_log: NO\n",
		"proxy:\n  access_log: off\n",
		"proxy:\n  access_log: Off\n",
		"proxy:\n  access_log: OFF\n",
		"proxy:\n  access_log: 'off'\n",
		"proxy:\n  access_log: False\n",
		"proxy:\n  access_log: FALSE\n",
		"proxy:\n  access_log: false\n",
		// Integers as YAML writes them.
		"cleanup:\n  batch_size: 0x10\n",
		"cleanup:\n  batch_size: 0X10\n",
		"cleanup:\n  batch_size: 0o17\n",
		"cleanup:\n  batch_size: 017\n", // octal, 15
		"cleanup:\n  batch_size: 08\n",  // not octal: a float, 8
		"cleanup:\n  batch_size: 0b101\n",
		"cleanup:\n  batch_size: 1_000\n",
		"cleanup:\n  batch_size: 0x_1_0\n",
		"cleanup:\n  batch_size: +500\n",
		"cleanup:\n  batch_size: 500.0\n",
		"cleanup:\n  batch_size: 500.9\n", // truncated, as yaml.v3 did
		"cleanup:\n  batch_size: 1e3\n",
		"cleanup:\n  batch_size: 5_0_0.\n",
		"proxy:\n  concurrency: 1_000_000\n  max_conns_per_client: 0x100\n",
		"cache:\n  max_bytes: 1073741824\n  memory_bytes: 64MiB\n",
		// Floats.
		"cache:\n  min_free_fraction: .25\n",
		"cache:\n  min_free_fraction: 5e-2\n",
		"cache:\n  min_free_fraction: 0_0.1\n",
		"cache:\n  min_free_fraction: 0\n",
		"cache:\n  min_free_fraction: 0x0\n",
		// Merge keys: explicit keys win, the first of a list wins, a
		// merged mapping's own merge is expanded, at any level.
		"admin: &a\n  read_timeout: 90s\n  write_timeout: 91s\nproxy:\n  <<: *a\n  write_timeout: 2m\n",
		"proxy:\n  write_timeout: 2m\n  <<: {read_timeout: 5s, write_timeout: 7s}\n",
		"proxy:\n  <<: [{read_timeout: 1s}, {read_timeout: 2s, write_timeout: 3s}]\n",
		"admin: &a\n  read_timeout: 3s\nupstreams: &u\n  header_timeout: 4s\nproxy:\n  <<: [*u, *a]\n",
		"admin: &a\n  read_timeout: 3s\nlog: &l\n  level: debug\nproxy:\n  <<: {<<: *a, write_timeout: 4s}\n",
		"admin: &a\n  read_timeout: 3s\nproxy:\n  <<: [*a, *a]\n",
		"<<: {log: {level: debug, format: json}}\nlog:\n  level: warn\n",
		"admin: &a\n  listen: 127.0.0.1:9999\n  read_timeout: 3s\nproxy:\n  <<: *a\n  listen: :0\n", // listen is in both
		"proxy:\n  <<: {listen: }\n  listen: :9090\n",
		// Values that read alike in both.
		"proxy:\n  read_timeout: 90s\n  listen: \"[::1]:9090\"\nlog:\n  level: debug\n",
		"upstreams:\n  checksum_policy: off\n",
		"admin:\n  pprof_listen:\n",
	}
	refused := []string{
		"upstreams:\n  allow_local_network: maybe\n",
		"upstreams:\n  allow_local_network: 2\n",
		"upstreams:\n  allow_local_network: yes please\n",
		"cleanup:\n  batch_size: 0x\n",
		"cleanup:\n  batch_size: many\n",
		"cleanup:\n  batch_size: 1_000_000_000_000_000_000_000\n",
		"cleanup:\n  batch_size: .inf\n",
		"cache:\n  max_bytes: 1_073_741_824\n", // sizes never took YAML's integer forms
		"cache:\n  max_bytes: 0x10\n",
		"cleanup:\n  batch_size: .nan\n",
		"cache:\n  min_free_fraction: .inf\n",
		"proxy:\n  read_timeout: 60\n",
		"proxy:\n  <<: 5\n",
		"proxy:\n  <<:\n",
		"proxy:\n  <<: [{read_timeout: 1s}, 5]\n",
		"proxy:\n  <<: {read_timeout: 1s}\n  <<: {write_timeout: 2s}\n",
		"proxy: &p\n  <<: *p\n  read_timeout: 5s\n",
		"proxy:\n  \"<<\": {read_timeout: 1s}\n",
		"shared: &s\n  read_timeout: 3s\nproxy:\n  <<: *s\n", // an anchor's home must be a real section
		"proxy:\n  <<: {read_timeout: 1s, nope: 2}\n",
		"proxy:\n  <<: {read_timeout: 1s, read_timeout: 2s}\n",
		"admin: &a\n  max_body_bytes: 1024\nproxy:\n  <<: *a\n",
	}
	for _, file := range accepted {
		want, err := decodeV3(file)
		if err != nil {
			t.Fatalf("%q: yaml.v3 refused it: %v", file, err)
		}
		got, err := Load(writeFile(t, file), nil)
		if err != nil {
			t.Errorf("%q: %v", file, err)
			continue
		}
		if got != want {
			t.Errorf("%q:\n got %+v\nwant %+v", file, got, want)
		}
	}
	for _, file := range refused {
		if _, err := decodeV3(file); err == nil {
			t.Errorf("%q: yaml.v3 accepted it; move it to the accepted forms", file)
		}
		path := writeFile(t, file)
		_, err := Load(path, nil)
		if err == nil {
			t.Errorf("%q loads", file)
			continue
		}
		if p, ok := err.(Problems); ok {
			for _, s := range p {
				if goish.MatchString(strings.TrimPrefix(s, path)) {
					t.Errorf("%q: problem speaks Go or YAML internals: %s", file, s)
				}
			}
		}
	}

	// Spot checks, so the table cannot pass by both loaders ignoring a key.
	for _, tc := range []struct {
		file string
		get  func(Config) any
		want any
	}{
		{"upstreams:\n  allow_local_network: on\n", func(c Config) any { return c.Upstreams.AllowLocalNetwork }, true},
		{"proxy:\n  access_log: no\n", func(c Config) any { return c.Proxy.AccessLog }, false},
		{"cleanup:\n  batch_size: 017\n", func(c Config) any { return c.Cleanup.BatchSize }, 15},
		{"cleanup:\n  batch_size: 1_000\n", func(c Config) any { return c.Cleanup.BatchSize }, 1000},
		{"cleanup:\n  batch_size: 500.9\n", func(c Config) any { return c.Cleanup.BatchSize }, 500},
		{"admin: &a\n  read_timeout: 90s\n  write_timeout: 91s\nproxy:\n  <<: *a\n  write_timeout: 2m\n",
			func(c Config) any { return [2]time.Duration{c.Proxy.ReadTimeout, c.Proxy.WriteTimeout} },
			[2]time.Duration{90 * time.Second, 2 * time.Minute}},
		{"proxy:\n  <<: [{read_timeout: 1s}, {read_timeout: 2s, write_timeout: 3s}]\n",
			func(c Config) any { return [2]time.Duration{c.Proxy.ReadTimeout, c.Proxy.WriteTimeout} },
			[2]time.Duration{time.Second, 3 * time.Second}},
	} {
		cfg, err := Load(writeFile(t, tc.file), nil)
		if err != nil || tc.get(cfg) != tc.want {
			t.Errorf("%q: %v, %v; want %v", tc.file, tc.get(cfg), err, tc.want)
		}
	}
}

func TestYAMLMergeProblemsInPlainWords(t *testing.T) {
	for _, tc := range []struct{ file, want string }{
		{"proxy:\n  <<: 5\n", `2: proxy: "<<" merges groups of settings ("<<: *name" or "<<: [*a, *b]"), got the single value "5"`},
		{"proxy:\n  <<:\n", `2: proxy: "<<" merges groups of settings ("<<: *name" or "<<: [*a, *b]"), got no value`},
		{"proxy:\n  <<: [{read_timeout: 1s}, [x]]\n", `2: proxy: "<<" merges groups of settings ("<<: *name" or "<<: [*a, *b]"), got a list in its list`},
		{"proxy:\n  <<: {read_timeout: 1s}\n  <<: {write_timeout: 2s}\n", `3: proxy: "<<" is written twice (also on line 2); merge a list instead: "<<: [*a, *b]"`},
		{"proxy: &p\n  <<: *p\n", `2: proxy: "<<" names the anchor of the settings it is in, so they would merge themselves`},
		{"admin: &a\n  max_body_bytes: 1024\nproxy:\n  <<: *a\n", `2: proxy: unknown setting "max_body_bytes" (it belongs under "admin": admin.max_body_bytes)`},
	} {
		path := writeFile(t, tc.file)
		_, err := Load(path, nil)
		p := problems(t, err)
		if len(p) != 1 || p[0] != path+":"+tc.want {
			t.Errorf("%q:\n got %q\nwant %s:%s", tc.file, p, path, tc.want)
		}
	}
}

// TestEnvValuesAsInTheFile: the environment shares the file's parser, so it
// takes the same words and numbers, and what it took before.
func TestEnvValuesAsInTheFile(t *testing.T) {
	for _, tc := range []struct {
		env  string
		get  func(Config) any
		want any
	}{
		{"REGISTRYD_UPSTREAMS_ALLOW_LOCAL_NETWORK=yes", func(c Config) any { return c.Upstreams.AllowLocalNetwork }, true},
		{"REGISTRYD_UPSTREAMS_ALLOW_LOCAL_NETWORK=1", func(c Config) any { return c.Upstreams.AllowLocalNetwork }, true},
		{"REGISTRYD_UPSTREAMS_ALLOW_LOCAL_NETWORK=t", func(c Config) any { return c.Upstreams.AllowLocalNetwork }, true},
		{"REGISTRYD_PROXY_ACCESS_LOG=OFF", func(c Config) any { return c.Proxy.AccessLog }, false},
		{"REGISTRYD_PROXY_ACCESS_LOG=0", func(c Config) any { return c.Proxy.AccessLog }, false},
		{"REGISTRYD_CLEANUP_BATCH_SIZE=1_000", func(c Config) any { return c.Cleanup.BatchSize }, 1000},
		{"REGISTRYD_CLEANUP_BATCH_SIZE=0x10", func(c Config) any { return c.Cleanup.BatchSize }, 16},
		{"REGISTRYD_CLEANUP_BATCH_SIZE=250", func(c Config) any { return c.Cleanup.BatchSize }, 250},
		{"REGISTRYD_CACHE_MIN_FREE_FRACTION=0.1", func(c Config) any { return c.Cache.MinFreeFraction }, 0.1},
		{"REGISTRYD_LOG_LEVEL=off", func(c Config) any { return c.Log.Level }, "off"}, // a string stays one (and is then refused)
	} {
		cfg, err := Load("", []string{tc.env})
		if strings.Contains(tc.env, "LOG_LEVEL") {
			err = nil
		}
		if err != nil || tc.get(cfg) != tc.want {
			t.Errorf("%s: %v, %v; want %v", tc.env, tc.get(cfg), err, tc.want)
		}
	}
	for _, tc := range []struct{ env, want string }{
		{"REGISTRYD_UPSTREAMS_ALLOW_LOCAL_NETWORK=", `REGISTRYD_UPSTREAMS_ALLOW_LOCAL_NETWORK: "" is not a boolean (true or false)`},
		{"REGISTRYD_UPSTREAMS_ALLOW_LOCAL_NETWORK=~", `REGISTRYD_UPSTREAMS_ALLOW_LOCAL_NETWORK: "~" is not a boolean (true or false)`},
		{"REGISTRYD_CLEANUP_BATCH_SIZE=", `REGISTRYD_CLEANUP_BATCH_SIZE: "" is not an integer`},
		{"REGISTRYD_CLEANUP_BATCH_SIZE=null", `REGISTRYD_CLEANUP_BATCH_SIZE: "null" is not an integer`},
		{"REGISTRYD_CACHE_MIN_FREE_FRACTION=", `REGISTRYD_CACHE_MIN_FREE_FRACTION: "" is not a number`},
	} {
		_, err := Load("", []string{tc.env})
		wantProblems(t, err, tc.want)
	}
}

// FuzzLoadYAML: no file makes the walk panic, and a file the yaml.v3
// decoder accepted (and Validate passed) loads to the same Config.
func FuzzLoadYAML(f *testing.F) {
	for _, s := range []string{
		"proxy:\n  <<: [{read_timeout: 1s}, {read_timeout: 2s, write_timeout: 3s}]\n",
		"admin: &a\n  read_timeout: 90s\nproxy:\n  <<: *a\n  write_timeout: 2m\n",
		"<<: {log: {level: debug}}\n",
		"proxy: &p\n  <<: *p\n",
		"upstreams:\n  allow_local_network: yes\n",
		"cleanup:\n  batch_size: 0x10\n",
		"cleanup:\n  batch_size: 500.0\n",
		"cache:\n  min_free_fraction: .1\n",
		"a: &a [*a]\n",
		"- 1\n",
		"? [a]\n: b\n",
		"---\nproxy: {}\n---\nlog: {}\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		if len(raw) > 4096 {
			return
		}
		got := Default()
		p, err := applyYAML(&got, "f.yaml", []byte(raw), nil) // must not panic
		want, werr := decodeV3(raw)
		if werr != nil || strings.Contains(raw, "!!binary") {
			return // refused before (the walk may be kinder), or base64 strings
		}
		if err != nil || len(p) > 0 {
			t.Fatalf("%q: loaded before, now: %v %v", raw, err, p)
		}
		if got.External.URL == "" {
			got.External.URL = ExternalURLFor(got.Admin.Listen)
		}
		if got != want {
			t.Fatalf("%q:\n got %+v\nwant %+v", raw, got, want)
		}
	})
}
