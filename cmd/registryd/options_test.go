package main

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	"registryd/config"
)

// zeroFields lists the fields of the struct v, nested structs walked, that
// hold their zero value, by path ("Cache.MaxBytes").
func zeroFields(v any) []string {
	var out []string
	var walk func(prefix string, rv reflect.Value)
	walk = func(prefix string, rv reflect.Value) {
		for i := 0; i < rv.NumField(); i++ {
			f, fv := rv.Type().Field(i), rv.Field(i)
			switch {
			case f.Type.Kind() == reflect.Struct && f.Type.PkgPath() != "time":
				walk(prefix+f.Name+".", fv)
			case fv.IsZero():
				out = append(out, prefix+f.Name)
			}
		}
	}
	walk("", reflect.ValueOf(v))
	return out
}

// TestOptionsSetEveryField: each mapping sets every setting of its
// component from the configuration, so that none falls back to the
// component's own default unseen. With config's defaults every setting is
// non-zero but for those listed (zero there too, or set by serve: the
// collaborators).
func TestOptionsSetEveryField(t *testing.T) {
	cfg := config.Default()
	cfg.External.URL = config.ExternalURLFor(cfg.Admin.Listen) // as Load derives it
	for _, tc := range []struct {
		name    string
		options any
		zero    []string
	}{
		{"auth", authOptions(cfg), []string{"DisableVirtualRegistry", "Now"}},
		{"upstream", upstreamOptions(cfg, nil), []string{"AllowLocalNetwork", "BodyIdleTimeout", "TLSConfig", "Resolver", "Logger"}},
		{"cleanup", cleanupOptions(cfg), []string{"Store", "Now", "Logger", "Registerer", "BeforeRun", "Rest"}},
		{"advisories", advisoriesOptions(cfg), []string{"Store", "Sources", "Client", "Logger", "Registerer"}},
		{"admin", adminOptions(cfg), nil},
		{"history", historyOptions(cfg), []string{"Gatherer", "Store", "Node", "Now", "Logger"}},
		// Memory (the count bounds of the engine's caches in memory) and
		// Hooks (test hooks) are no configuration: their defaults apply.
		{"proxy", proxyOptions(cfg), []string{"Listener.AccessLogJSON", "Cache.MaxBytes", "Cache.MinFreeFraction",
			"Memory.Registries", "Memory.Entries", "Memory.Verdicts", "Memory.Composed",
			"Memory.SmallBlobs", "Hooks"}},
	} {
		if got := zeroFields(tc.options); !slices.Equal(got, tc.zero) {
			t.Errorf("%s: fields left zero %v, want %v", tc.name, got, tc.zero)
		}
	}
}

// TestOptionsTurnZeroOff: where the configuration's 0 means off or none,
// the components' Options get -1 (their 0 is their default).
func TestOptionsTurnZeroOff(t *testing.T) {
	cfg := config.Default()
	cfg.Proxy.MaxConnsPerClient = 0
	cfg.Cache.MemoryBytes, cfg.Cache.MemoryMaxFileBytes = 0, 0
	cfg.Upstreams.NotFoundTTL, cfg.Upstreams.MetadataNotFoundTTL = 0, 0
	cfg.Upstreams.ReservedSmallRequests, cfg.Upstreams.MaxRedirects = 0, 0
	cfg.Metadata.PartialTTL, cfg.Metadata.MemoryBytes, cfg.Metadata.MergeWait = 0, 0, 0
	cfg.Audit.Retention = 0
	cfg.Cleanup.RunNowInterval = 0
	p := proxyOptions(cfg)
	for name, v := range map[string]int64{
		"proxy.max_conns_per_client":        int64(p.Listener.MaxConnsPerClient),
		"cache.memory_bytes":                p.Cache.MemoryBytes,
		"cache.memory_max_file_bytes":       p.Cache.MemoryMaxFileBytes,
		"upstreams.not_found_ttl":           int64(p.Upstreams.NotFoundTTL),
		"upstreams.metadata_not_found_ttl":  int64(p.Upstreams.MetadataNotFoundTTL),
		"upstreams.reserved_small_requests": int64(p.Upstreams.ReservedSmallRequests),
		"upstreams.max_redirects":           int64(upstreamOptions(cfg, nil).MaxRedirects),
		"metadata.partial_ttl":              int64(p.Metadata.PartialTTL),
		"metadata.memory_bytes":             p.Metadata.MemoryBytes,
		"metadata.merge_wait":               int64(p.Metadata.MergeWait),
		"audit.retention":                   int64(p.Audit.Retention),
		"cleanup.run_now_interval":          int64(cleanupOptions(cfg).RunNowInterval),
	} {
		if v != -1 {
			t.Errorf("%s 0 is %d, want -1", name, v)
		}
	}
	if got := proxyOptions(config.Default()).Upstreams.TrialTimeout; got != 20*time.Second {
		t.Errorf("trial timeout %s, want connect + header timeout", got)
	}
}

// TestAccessLogOffByConfig: proxy.access_log false writes nothing even with
// a destination: the proxy gets no writer, and the file is not created.
func TestAccessLogOffByConfig(t *testing.T) {
	cfg := config.Default()
	cfg.Proxy.AccessLog = false
	cfg.Proxy.AccessLogPath = filepath.Join(t.TempDir(), "access.log")
	w, name, closeFn, err := accessLogWriter(cfg, os.Stderr)
	if err != nil || w != nil || name != "off" {
		t.Fatalf("access log %v %q %v although proxy.access_log is false", w, name, err)
	}
	if err := closeFn(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(cfg.Proxy.AccessLogPath); !os.IsNotExist(err) {
		t.Fatalf("the access log file was created: %v", err)
	}
}
