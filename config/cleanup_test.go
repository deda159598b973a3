package config

import (
	"strings"
	"testing"
	"time"
)

func TestCleanupSettings(t *testing.T) {
	d := Default().Cleanup
	if d.CheckInterval != time.Minute || d.BatchSize != 500 {
		t.Fatalf("defaults %+v", d)
	}
	cfg, err := Load("", []string{"REGISTRYD_CLEANUP_CHECK_INTERVAL=30s", "REGISTRYD_CLEANUP_BATCH_SIZE=100"})
	if err != nil || cfg.Cleanup.CheckInterval != 30*time.Second || cfg.Cleanup.BatchSize != 100 {
		t.Fatalf("env: %+v, %v", cfg.Cleanup, err)
	}
	for _, tc := range []struct {
		env  string
		want string
	}{
		{"REGISTRYD_CLEANUP_CHECK_INTERVAL=0s", "cleanup.check_interval (REGISTRYD_CLEANUP_CHECK_INTERVAL) must be at least 1s, got 0s"},
		{"REGISTRYD_CLEANUP_CHECK_INTERVAL=500ms", "must be at least 1s, got 500ms"},
		{"REGISTRYD_CLEANUP_BATCH_SIZE=0", "cleanup.batch_size (REGISTRYD_CLEANUP_BATCH_SIZE) must be between 1 and 10000, got 0"},
		{"REGISTRYD_CLEANUP_BATCH_SIZE=10001", "must be between 1 and 10000, got 10001"},
	} {
		_, err := Load("", []string{tc.env})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.env, err, tc.want)
		}
	}
}
