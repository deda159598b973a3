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
