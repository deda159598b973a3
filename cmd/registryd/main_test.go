package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"registryd/config"
)

// TestLogDurationsAsText: both log formats write a duration as Go writes
// it, never as nanoseconds.
func TestLogDurationsAsText(t *testing.T) {
	for _, tc := range []struct{ format, want string }{
		{"json", `"dur":"1.5s"`},
		{"text", `dur=1.5s`},
	} {
		t.Run(tc.format, func(t *testing.T) {
			cfg := config.Default()
			cfg.Log.Format = tc.format
			var buf bytes.Buffer
			log := newLogger(cfg, &buf)
			log.Info("x", "dur", 1500*time.Millisecond, "n", 3)
			log.WithGroup("g").Info("y", "timeout", 30*time.Minute)
			out := buf.String()
			if !strings.Contains(out, tc.want) || strings.Contains(out, "1500000000") {
				t.Fatalf("%s log: %s", tc.format, out)
			}
			if !strings.Contains(out, "30m0s") {
				t.Fatalf("a duration inside a group: %s", out)
			}
		})
	}
}

// TestRootTokenSource: the first start's log line says where root's token
// came from: the configuration file's root.token, or REGISTRYD_ROOT_TOKEN
// when that is set (it overrides the file); never the token.
func TestRootTokenSource(t *testing.T) {
	const token = "rdpat-root-token-from-somewhere-0123"
	for _, tc := range []struct {
		env, want string
	}{
		{"", "created the admin user root with the token from root.token of the configuration file"},
		{token, "created the admin user root with the token from REGISTRYD_ROOT_TOKEN"},
	} {
		cfg := config.Default()
		cfg.Data.Dir = t.TempDir()
		cfg.Root.Token = token
		engine, err := openBolt(cfg.Data.Dir)
		if err != nil {
			t.Fatal(err)
		}
		st, err := openStore(bytes.Repeat([]byte{1}, 32), engine, cfg.Store)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		getenv := func(name string) string {
			if name == "REGISTRYD_ROOT_TOKEN" {
				return tc.env
			}
			return ""
		}
		err = bootstrapRoot(cfg, st, newLogger(cfg, &buf), rootTokenSource(getenv))
		st.Close()
		if err != nil {
			t.Fatal(err)
		}
		if out := buf.String(); !strings.Contains(out, tc.want) || strings.Contains(out, token) {
			t.Errorf("REGISTRYD_ROOT_TOKEN=%q: log %q, want %q", tc.env, out, tc.want)
		}
	}
}
