package proxy

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"registryd/internal/testclock"
	"registryd/upstream"
)

// TestHealthLog: one line per transition, with the reason and the backoff
// when an upstream goes out, and how long it was out when it is back.
func TestHealthLog(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	clock := testclock.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	h := upstream.NewHealth(upstream.HealthOptions{Now: clock.Now, OnChange: healthLog(log)})

	host := func(reason string) upstream.Fault { return upstream.Fault{Class: upstream.FailHost, Reason: reason} }
	tk, _, _ := h.Begin(7, "a")
	h.Failure(tk, host("Connection timeout"))
	if _, _, ok := h.Begin(7, "a"); ok {
		t.Fatal("Begin allowed during the backoff")
	}
	clock.Advance(10 * time.Second)
	tk, _, _ = h.Begin(7, "a")
	h.Failure(tk, host("Connection refused")) // a failed trial: no transition
	clock.Advance(20 * time.Second)
	tk, _, _ = h.Begin(7, "a")
	h.Success(tk)

	var lines []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("%v: %s", err, l)
		}
		lines = append(lines, m)
	}
	if len(lines) != 2 {
		t.Fatalf("%d lines, want 2:\n%s", len(lines), buf.String())
	}
	down, up := lines[0], lines[1]
	if down["level"] != "WARN" || down["msg"] != "upstream unhealthy" || down["upstream"] != 7.0 ||
		down["last_error"] != "Connection timeout" || down["retry_at"] != "2026-01-02T03:04:15Z" ||
		down["backoff"] != float64(10*time.Second) {
		t.Fatalf("unhealthy line %v", down)
	}
	if up["level"] != "INFO" || up["msg"] != "upstream healthy again" || up["upstream"] != 7.0 ||
		up["down_for"] != float64(30*time.Second) {
		t.Fatalf("healthy line %v", up)
	}
}
