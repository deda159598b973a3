package config

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestCleanupSettings(t *testing.T) {
	d := Default().Cleanup
	if d.CheckInterval != time.Minute || d.BatchSize != 500 || d.RunNowInterval != time.Minute {
		t.Fatalf("defaults %+v", d)
	}
	cfg, err := Load("", []string{"REGISTRYD_CLEANUP_CHECK_INTERVAL=30s", "REGISTRYD_CLEANUP_BATCH_SIZE=100",
		"REGISTRYD_CLEANUP_RUN_NOW_INTERVAL=5m"})
	if err != nil || cfg.Cleanup.CheckInterval != 30*time.Second || cfg.Cleanup.BatchSize != 100 ||
		cfg.Cleanup.RunNowInterval != 5*time.Minute {
		t.Fatalf("env: %+v, %v", cfg.Cleanup, err)
	}
	// 0 turns the minimum interval between run nows off.
	if cfg, err := Load("", []string{"REGISTRYD_CLEANUP_RUN_NOW_INTERVAL=0"}); err != nil || cfg.Cleanup.RunNowInterval != 0 {
		t.Fatalf("run_now_interval 0: %+v, %v", cfg.Cleanup, err)
	}
	for _, tc := range []struct {
		env  string
		want string
	}{
		{"REGISTRYD_CLEANUP_CHECK_INTERVAL=0s", "cleanup.check_interval (REGISTRYD_CLEANUP_CHECK_INTERVAL) must be at least 1s, got 0s"},
		{"REGISTRYD_CLEANUP_CHECK_INTERVAL=500ms", "must be at least 1s, got 500ms"},
		{"REGISTRYD_CLEANUP_BATCH_SIZE=0", "cleanup.batch_size (REGISTRYD_CLEANUP_BATCH_SIZE) must be between 1 and 10000, got 0"},
		{"REGISTRYD_CLEANUP_BATCH_SIZE=10001", "must be between 1 and 10000, got 10001"},
		{"REGISTRYD_CLEANUP_RUN_NOW_INTERVAL=-1s",
			"cleanup.run_now_interval (REGISTRYD_CLEANUP_RUN_NOW_INTERVAL) must be 0 (off) or at least 1s, got -1s"},
		{"REGISTRYD_CLEANUP_RUN_NOW_INTERVAL=500ms", "must be 0 (off) or at least 1s, got 500ms"},
		{"REGISTRYD_CLEANUP_RUN_NOW_INTERVAL=soon", "REGISTRYD_CLEANUP_RUN_NOW_INTERVAL"},
	} {
		_, err := Load("", []string{tc.env})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.env, err, tc.want)
		}
	}
}

func TestAdvisoriesSettings(t *testing.T) {
	cfg, err := Load("", []string{"REGISTRYD_ADVISORIES_SOURCES=/srv/osv/npm.zip, https://mirror.example/osv/Maven/all.zip,/srv/osv/go",
		"REGISTRYD_ADVISORIES_REFRESH_INTERVAL=6h", "REGISTRYD_ADVISORIES_MAX_BYTES=256MiB", "REGISTRYD_ADVISORIES_BATCH_SIZE=50"})
	if err != nil {
		t.Fatal(err)
	}
	a := cfg.Advisories
	if got := a.AdvisorySources(); !slices.Equal(got, []string{"/srv/osv/npm.zip", "https://mirror.example/osv/Maven/all.zip", "/srv/osv/go"}) ||
		a.RefreshInterval != 6*time.Hour || a.MaxBytes != 256*MiB || a.BatchSize != 50 {
		t.Fatalf("advisories %+v (sources %q)", a, a.AdvisorySources())
	}
	_, err = Load("", []string{"REGISTRYD_ADVISORIES_SOURCES=osv/npm.zip,ftp://x/y", "REGISTRYD_ADVISORIES_REFRESH_INTERVAL=30s",
		"REGISTRYD_ADVISORIES_BATCH_SIZE=0"})
	for _, want := range []string{`"osv/npm.zip" is neither an absolute path nor an http(s) URL`, `"ftp://x/y" is neither`,
		"advisories.refresh_interval (REGISTRYD_ADVISORIES_REFRESH_INTERVAL) must be at least 1m, got 30s",
		"advisories.batch_size (REGISTRYD_ADVISORIES_BATCH_SIZE) must be between 1 and 10000, got 0"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
}

func TestScrubSettings(t *testing.T) {
	d := Default().Scrub
	if d.Interval != 168*time.Hour || d.BytesPerSecond != 16*MiB || d.QuarantineMaxBytes != 1*GiB {
		t.Fatalf("defaults %+v", d)
	}
	cfg, err := Load("", []string{"REGISTRYD_SCRUB_INTERVAL=0", "REGISTRYD_SCRUB_BYTES_PER_SECOND=64MiB",
		"REGISTRYD_SCRUB_QUARANTINE_MAX_BYTES=0"})
	if err != nil || cfg.Scrub.Interval != 0 || cfg.Scrub.BytesPerSecond != 64*MiB || cfg.Scrub.QuarantineMaxBytes != 0 {
		t.Fatalf("env: %+v, %v", cfg.Scrub, err)
	}
	for _, tc := range []struct{ env, want string }{
		{"REGISTRYD_SCRUB_INTERVAL=30s", "scrub.interval (REGISTRYD_SCRUB_INTERVAL) must be 0 (no scheduled cycle) or at least 1m, got 30s"},
		{"REGISTRYD_SCRUB_BYTES_PER_SECOND=1KiB", "scrub.bytes_per_second (REGISTRYD_SCRUB_BYTES_PER_SECOND) must be at least 64KiB, got 1024"},
	} {
		_, err := Load("", []string{tc.env})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.env, err, tc.want)
		}
	}
	// A value from the file is named by its file and line.
	path := t.TempDir() + "/registryd.yaml"
	if err := os.WriteFile(path, []byte("scrub:\n  interval: 10s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path, nil); err == nil || !strings.Contains(err.Error(), path+":2: scrub.interval must be 0") {
		t.Fatalf("file: %v", err)
	}
}
