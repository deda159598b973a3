package config

import (
	"strings"
	"testing"
	"time"
)

func TestAuditSettings(t *testing.T) {
	d := Default().Audit
	if d.Retention != 26280*time.Hour || d.CallerDenialsPerMinute != 30 || d.RegistryDenialsPerMinute != 300 ||
		d.AggregateInterval != time.Minute {
		t.Fatalf("defaults %+v", d)
	}
	cfg, err := Load("", []string{"REGISTRYD_AUDIT_RETENTION=0s", "REGISTRYD_AUDIT_CALLER_DENIALS_PER_MINUTE=5",
		"REGISTRYD_AUDIT_REGISTRY_DENIALS_PER_MINUTE=6", "REGISTRYD_AUDIT_AGGREGATE_INTERVAL=10s"})
	if err != nil || cfg.Audit != (Audit{CallerDenialsPerMinute: 5, RegistryDenialsPerMinute: 6, AggregateInterval: 10 * time.Second}) {
		t.Fatalf("env: %+v, %v", cfg.Audit, err)
	}
	for _, tc := range []struct {
		env  []string
		want string
	}{
		{[]string{"REGISTRYD_AUDIT_RETENTION=59m"}, "audit.retention (REGISTRYD_AUDIT_RETENTION) must be 0 (keep forever) or at least 1h, got 59m0s"},
		{[]string{"REGISTRYD_AUDIT_RETENTION=-1h"}, "must be 0 (keep forever) or at least 1h"},
		{[]string{"REGISTRYD_AUDIT_CALLER_DENIALS_PER_MINUTE=0"}, "audit.caller_denials_per_minute must be at least 1, got 0"},
		{[]string{"REGISTRYD_AUDIT_REGISTRY_DENIALS_PER_MINUTE=30"},
			"audit.registry_denials_per_minute (30) must be greater than audit.caller_denials_per_minute (30)"},
		{[]string{"REGISTRYD_AUDIT_AGGREGATE_INTERVAL=500ms"}, "audit.aggregate_interval must be between 1s and 1h, got 500ms"},
		{[]string{"REGISTRYD_AUDIT_AGGREGATE_INTERVAL=2h"}, "must be between 1s and 1h, got 2h0m0s"},
	} {
		_, err := Load("", tc.env)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.env, err, tc.want)
		}
	}
}
