package config

import (
	"regexp"
	"strings"
	"testing"
	"time"
)

// goish matches what an operator should never read in a config error: Go
// type and package names, YAML tags, decoder jargon.
var goish = regexp.MustCompile(`config\.|time\.Duration|ByteSize|reflect|!!|unmarshal|in type|struct`)

func TestYAMLProblemsInPlainWords(t *testing.T) {
	tests := []struct {
		name string
		file string
		want []string // each problem, without the "file:" prefix
	}{
		{"misspelt setting", "proxy:\n  read_timout: 5s\n",
			[]string{`2: proxy: unknown setting "read_timout" (did you mean "read_timeout"?)`}},
		{"dashes and capitals", "upstreams:\n  Connect-Timeout: 5s\n",
			[]string{`2: upstreams: unknown setting "Connect-Timeout" (did you mean "connect_timeout"?)`}},
		{"setting of another section", "proxy:\n  pprof_listen: 127.0.0.1:6060\n",
			[]string{`2: proxy: unknown setting "pprof_listen" (it belongs under "admin": admin.pprof_listen)`}},
		{"nothing close", "data:\n  colour: blue\n",
			[]string{`2: data: unknown setting "colour"`}},
		{"misspelt section", "prxy:\n  listen: :9090\n",
			[]string{`1: unknown section "prxy" (did you mean "proxy"?)`}},
		{"unknown section", "nonsense: 1\n",
			[]string{`1: unknown section "nonsense"`}},
		{"a duration without unit", "proxy:\n  read_timeout: 60\n",
			[]string{`2: proxy.read_timeout: "60" is not a duration (like 30s or 5m)`}},
		{"not a boolean", "upstreams:\n  allow_local_network: maybe\n",
			[]string{`2: upstreams.allow_local_network: "maybe" is not a boolean (true or false)`}},
		{"not an integer", "proxy:\n  concurrency: many\n",
			[]string{`2: proxy.concurrency: "many" is not an integer`}},
		{"not a number", "cache:\n  min_free_fraction: some\n",
			[]string{`2: cache.min_free_fraction: "some" is not a number`}},
		{"a list for a value", "admin:\n  listen: [a, b]\n",
			[]string{`2: admin.listen: expected one value, got a list`}},
		{"settings for a value", "log:\n  level:\n    x: 1\n",
			[]string{`3: log.level: expected one value, got a group of settings`}},
		{"a value for a section", "proxy: 9090\n",
			[]string{`1: proxy: expected settings under it (one "key: value" a line), got the single value "9090"`}},
		{"a list at the top", "- proxy\n",
			[]string{`1: expected sections (data:, proxy:, admin:, ...) at the top level, got a list`}},
		{"a setting twice", "log:\n  level: info\n  level: debug\n",
			[]string{`3: log.level is set twice (also on line 2)`}},
		{"a section twice", "log:\n  level: info\nproxy:\n  listen: :1\nlog:\n  format: json\n",
			[]string{`5: section "log" appears twice (also on line 1); write its settings once`}},
		{"every problem at once", "proxy:\n  read_timout: 5s\n  write_timeout: soon\nadmin:\n  max_body_bytes: lots\nlogg: {}\n",
			[]string{
				`2: proxy: unknown setting "read_timout" (did you mean "read_timeout"?)`,
				`3: proxy.write_timeout: "soon" is not a duration (like 30s or 5m)`,
				`5: admin.max_body_bytes: "lots" is not a size (like 4MiB or 5GiB)`,
				`6: unknown section "logg" (did you mean "log"?)`,
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := writeFile(t, tc.file)
			_, err := Load(path, nil)
			p := problems(t, err)
			if len(p) != len(tc.want) {
				t.Fatalf("%d problems, want %d:\n%s", len(p), len(tc.want), err)
			}
			for i, want := range tc.want {
				if p[i] != path+":"+want {
					t.Errorf("problem %d:\n got %s\nwant %s:%s", i, p[i], path, want)
				}
				if goish.MatchString(strings.TrimPrefix(p[i], path)) {
					t.Errorf("problem %d speaks Go or YAML internals: %s", i, p[i])
				}
			}
		})
	}
}

func TestYAMLValues(t *testing.T) {
	cfg, err := Load(writeFile(t, `
# A key without a value keeps its default; anchors and aliases work.
admin:
  pprof_listen:
  read_timeout: &t 90s
  write_timeout: *t
upstreams:
  checksum_policy: off     # a string here, whatever YAML 1.1 thought of "off"
  allow_local_network: true
cache:
  min_free_fraction: 0.1
  max_bytes: 200GiB
proxy:
  listen: "[::1]:9090"
log:
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"null keeps the default", cfg.Admin.PprofListen, ""},
		{"anchor", cfg.Admin.ReadTimeout, 90 * time.Second},
		{"alias", cfg.Admin.WriteTimeout, 90 * time.Second},
		{"off is a string", cfg.Upstreams.ChecksumPolicy, "off"},
		{"bool", cfg.Upstreams.AllowLocalNetwork, true},
		{"float", cfg.Cache.MinFreeFraction, 0.1},
		{"size", cfg.Cache.MaxBytes, 200 * GiB},
		{"ipv6 listen", cfg.Proxy.Listen, "[::1]:9090"},
		{"empty section keeps its defaults", cfg.Log, Default().Log},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}

	t.Run("syntax error names the file and the line", func(t *testing.T) {
		path := writeFile(t, "proxy:\n  listen: [unclosed\n")
		_, err := Load(path, nil)
		if err == nil || !strings.HasPrefix(err.Error(), "config: "+path+" is not valid YAML: line ") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("only comments", func(t *testing.T) {
		if cfg, err := Load(writeFile(t, "# nothing yet\n"), nil); err != nil || cfg != loadedDefaults() {
			t.Fatalf("%v", err)
		}
	})
}

func TestEnvSuggestions(t *testing.T) {
	_, err := Load("", []string{
		"REGISTRYD_UPSTRAEMS_ALLOW_LOCAL_NETWORK=true",
		"REGISTRYD_PROXY_READ_TIMOUT=5s",
		"REGISTRYD_SOMETHING_ELSE=1",
	})
	wantProblems(t, err,
		"REGISTRYD_UPSTRAEMS_ALLOW_LOCAL_NETWORK is not a known setting (did you mean REGISTRYD_UPSTREAMS_ALLOW_LOCAL_NETWORK?)",
		"REGISTRYD_PROXY_READ_TIMOUT is not a known setting (did you mean REGISTRYD_PROXY_READ_TIMEOUT?)",
		"REGISTRYD_SOMETHING_ELSE is not a known setting")
	if strings.Contains(err.Error(), "SOMETHING_ELSE is not a known setting (") {
		t.Fatalf("a far-off name got a suggestion:\n%s", err)
	}
}

func TestListenAddresses(t *testing.T) {
	tests := []struct {
		addr    string
		problem string // "" when valid
	}{
		{":8080", ""},
		{"127.0.0.1:8081", ""},
		{"0.0.0.0:1", ""},
		{"[::]:65535", ""},
		{"[::1]:8080", ""},
		{"localhost:8080", ""},
		{"registry.internal:8080", ""},
		{"127.0.0.1:0", ""}, // the kernel chooses: the tests' way
		{":99999", `":99999" has port 99999; a port is 1 to 65535 (0 lets the system choose one)`},
		{":65536", `has port 65536`},
		{":-1", `":-1" has no port number`},
		{":http", `":http" has no port number`},
		{"127.0.0.1:", `"127.0.0.1:" has no port number`},
		{"8080", `"8080" is not host:port (like :8080 or 127.0.0.1:8080)`},
		{"", `"" is not host:port`},
		{"http://127.0.0.1:8080", `is not host:port`},
		{"bad host:8080", `has host "bad host", which is neither an IP address nor a host name`},
		{"a..b:8080", `has host "a..b"`},
	}
	for _, tc := range tests {
		t.Run(tc.addr, func(t *testing.T) {
			for _, setting := range []struct{ env, name string }{
				{"REGISTRYD_PROXY_LISTEN", "proxy.listen (REGISTRYD_PROXY_LISTEN)"},
				{"REGISTRYD_ADMIN_LISTEN", "admin.listen (REGISTRYD_ADMIN_LISTEN)"},
				{"REGISTRYD_ADMIN_PPROF_LISTEN", "admin.pprof_listen (REGISTRYD_ADMIN_PPROF_LISTEN)"},
			} {
				// The other listeners on kernel-chosen ports, so that only
				// this address can be wrong.
				env := []string{"REGISTRYD_PROXY_LISTEN=127.0.0.1:0", "REGISTRYD_ADMIN_LISTEN=127.0.0.1:0",
					setting.env + "=" + tc.addr}
				if setting.env == "REGISTRYD_ADMIN_PPROF_LISTEN" && tc.addr == "" {
					continue // empty is "off" for pprof
				}
				_, err := Load("", env)
				if tc.problem == "" {
					if err != nil {
						t.Fatalf("%s=%q: %v", setting.env, tc.addr, err)
					}
					continue
				}
				wantProblems(t, err, setting.name+": ")
				if !strings.Contains(err.Error(), tc.problem) {
					t.Fatalf("%s=%q:\n%s\nwant it to say %s", setting.env, tc.addr, err, tc.problem)
				}
			}
		})
	}

	t.Run("two listeners on one port", func(t *testing.T) {
		for _, tc := range []struct {
			proxy, admin, pprof string
			clash               bool
		}{
			{":8080", "127.0.0.1:8080", "", true},
			{"127.0.0.1:9000", "127.0.0.1:9000", "", true},
			{"[::]:9000", "127.0.0.1:9000", "", true},
			{"127.0.0.1:9000", "127.0.0.2:9000", "", false},
			{":8080", "127.0.0.1:8081", "127.0.0.1:8081", true},
			{":8080", "127.0.0.1:8081", "127.0.0.1:6060", false},
			{"127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", false},
		} {
			cfg := Default()
			cfg.Proxy.Listen, cfg.Admin.Listen, cfg.Admin.PprofListen = tc.proxy, tc.admin, tc.pprof
			err := cfg.Validate()
			if !tc.clash {
				if err != nil {
					t.Errorf("%+v: %v", tc, err)
				}
				continue
			}
			if err == nil || !strings.Contains(err.Error(), "must differ") {
				t.Errorf("%+v: %v, want a clash", tc, err)
			}
		}
	})
}

func TestExternalURLDefault(t *testing.T) {
	for _, tc := range []struct{ listen, want string }{
		{"127.0.0.1:8081", "http://127.0.0.1:8081"},
		{":8081", "http://localhost:8081"},
		{"0.0.0.0:8081", "http://localhost:8081"},
		{"[::]:8081", "http://localhost:8081"},
		{"[::1]:8081", "http://[::1]:8081"},
		{"registry.internal:80", "http://registry.internal:80"},
		{"nonsense", ""},
	} {
		if got := ExternalURLFor(tc.listen); got != tc.want {
			t.Errorf("ExternalURLFor(%q) = %q, want %q", tc.listen, got, tc.want)
		}
	}
	if got := Default().External.URL; got != "" {
		t.Fatalf("Default().External.URL = %q, want empty (derived by Load)", got)
	}
	for _, tc := range []struct {
		name, file string
		env        []string
		want       string
	}{
		{"default", "", nil, "http://127.0.0.1:8081"},
		{"admin.listen from the file", "admin:\n  listen: 0.0.0.0:9091\n", nil, "http://localhost:9091"},
		{"admin.listen from the environment", "", []string{"REGISTRYD_ADMIN_LISTEN=10.0.0.5:8081"}, "http://10.0.0.5:8081"},
		{"set in the file", "external:\n  url: https://registry.example.com\n", nil, "https://registry.example.com"},
		{"set in the environment", "admin:\n  listen: :9091\n", []string{"REGISTRYD_EXTERNAL_URL=https://r.example"}, "https://r.example"},
		{"empty in the environment is the default", "", []string{"REGISTRYD_EXTERNAL_URL="}, "http://127.0.0.1:8081"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := ""
			if tc.file != "" {
				path = writeFile(t, tc.file)
			}
			cfg, err := Load(path, tc.env)
			if err != nil || cfg.External.URL != tc.want {
				t.Fatalf("external.url = %q, %v; want %q", cfg.External.URL, err, tc.want)
			}
		})
	}
	t.Run("a bad admin.listen is one problem, not two", func(t *testing.T) {
		_, err := Load("", []string{"REGISTRYD_ADMIN_LISTEN=nope"})
		wantProblems(t, err, `admin.listen (REGISTRYD_ADMIN_LISTEN): "nope" is not host:port`)
	})
}

func TestShutdownSettings(t *testing.T) {
	cfg, err := Load("", []string{"REGISTRYD_SHUTDOWN_DRAIN_DELAY=0s", "REGISTRYD_SHUTDOWN_TIMEOUT=1m"})
	if err != nil || cfg.Shutdown.DrainDelay != 0 || cfg.Shutdown.Timeout != time.Minute {
		t.Fatalf("%+v, %v", cfg.Shutdown, err)
	}
	_, err = Load("", []string{"REGISTRYD_SHUTDOWN_DRAIN_DELAY=-1s"})
	wantProblems(t, err, "shutdown.drain_delay (REGISTRYD_SHUTDOWN_DRAIN_DELAY) must not be negative")
}
