package main

import (
	"log/slog"
	"time"

	"registryd/admin"
	"registryd/advisories"
	"registryd/auth"
	"registryd/cleanup"
	"registryd/config"
	"registryd/internal/history"
	"registryd/proxy"
	"registryd/upstream"
)

// The components take Options of their own, not config.Config: only cmd
// (and bench, which writes configurations for the daemons it starts)
// imports config. Each function below maps the validated configuration
// onto one component's Options, setting every field the component reads,
// so that config's defaults are the daemon's whatever the components
// default to. Where the configuration's 0 means off or none, the
// components' Options say it with a negative value (their 0 is "the
// default"): off turns one into the other.

func authOptions(cfg config.Config) auth.Options {
	return auth.Options{
		CacheTTL:               cfg.Auth.CacheTTL,
		CacheSize:              cfg.Auth.CacheSize,
		Plan:                   auth.Plan(cfg.License.Plan),
		DisableVirtualRegistry: !cfg.Features.VirtualRegistry,
	}
}

func upstreamOptions(cfg config.Config, log *slog.Logger) upstream.Options {
	u := cfg.Upstreams
	return upstream.Options{
		AllowLocalNetwork: u.AllowLocalNetwork,
		ConnectTimeout:    u.ConnectTimeout,
		HeaderTimeout:     u.HeaderTimeout,
		CheckTimeout:      u.CheckTimeout,
		MaxRedirects:      off(u.MaxRedirects),
		MaxRetryAfter:     u.MaxBackoff,
		Logger:            log,
	}
}

// cleanupOptions are the scheduler's settings; serve adds its
// collaborators.
func cleanupOptions(cfg config.Config) cleanup.Options {
	c := cfg.Cleanup
	return cleanup.Options{
		CheckInterval:  c.CheckInterval,
		BatchSize:      c.BatchSize,
		RunNowInterval: off(c.RunNowInterval),
	}
}

// advisoriesOptions are the importer's settings; serve adds its
// collaborators.
func advisoriesOptions(cfg config.Config) advisories.Options {
	a := cfg.Advisories
	return advisories.Options{
		Sources:         a.AdvisorySources(),
		RefreshInterval: a.RefreshInterval,
		MaxBytes:        int64(a.MaxBytes),
		BatchSize:       a.BatchSize,
		TempDir:         cfg.Path("tmp"),
	}
}

// historyOptions are the traffic history sampler's; run sets what it
// records from (the metrics registry) and into (the store).
func historyOptions(cfg config.Config) history.Options {
	return history.Options{Interval: cfg.Admin.TrafficHistoryInterval}
}

func adminOptions(cfg config.Config) admin.Options {
	return admin.Options{
		MaxBodyBytes:      int64(cfg.Admin.MaxBodyBytes),
		MaxSBOMBytes:      int64(cfg.Admin.MaxSBOMBytes),
		MaxSBOMIngests:    cfg.Admin.MaxSBOMIngests,
		ExternalURL:       cfg.External.URL,
		ConsoleSessionTTL: cfg.Admin.ConsoleSessionTTL,
	}
}

func proxyOptions(cfg config.Config) proxy.Options {
	p, c, u, m, a := cfg.Proxy, cfg.Cache, cfg.Upstreams, cfg.Metadata, cfg.Audit
	return proxy.Options{
		Listener: proxy.ListenerOptions{
			HeaderTimeout:     p.HeaderTimeout,
			ReadTimeout:       p.ReadTimeout,
			WriteTimeout:      p.WriteTimeout,
			IdleTimeout:       p.IdleTimeout,
			MaxHeaderBytes:    int(p.MaxHeaderBytes),
			Concurrency:       p.Concurrency,
			MaxConnsPerClient: off(p.MaxConnsPerClient),
			MaxUploadBytes:    int64(p.MaxUploadBytes),
			AccessLogJSON:     cfg.Log.Format == "json",
		},
		Cache: proxy.CacheOptions{
			MaxFileBytes:       int64(c.MaxFileBytes),
			CollectInterval:    c.CollectInterval,
			FlushInterval:      c.FlushInterval,
			MemoryBytes:        off(int64(c.MemoryBytes)),
			MemoryMaxFileBytes: off(int64(c.MemoryMaxFileBytes)),
			MaxBytes:           int64(c.MaxBytes),
			MaxPendingStores:   c.MaxPendingStores,
			MinFreeFraction:    c.MinFreeFraction,
			MaxLocks:           cfg.Store.Postgres.MaxLocks,
		},
		Memory: proxy.MemoryOptions{Paths: c.RememberedPaths},
		Upstreams: proxy.UpstreamOptions{
			FillTimeout:           u.FillTimeout,
			ChecksumPolicy:        u.ChecksumPolicy,
			NotFoundTTL:           off(u.NotFoundTTL),
			MetadataNotFoundTTL:   off(u.MetadataNotFoundTTL),
			MaxConcurrentRequests: u.MaxConcurrentRequests,
			ReservedSmallRequests: off(u.ReservedSmallRequests),
			SmallFileBytes:        int64(u.SmallFileBytes),
			Backoff:               u.Backoff,
			MaxBackoff:            u.MaxBackoff,
			FailureThreshold:      u.FailureThreshold,
			PathFailureThreshold:  u.PathFailureThreshold,
			FailureWindow:         u.FailureWindow,
			MaxFailingPaths:       u.MaxFailingPaths,
			TrialTimeout:          u.ConnectTimeout + u.HeaderTimeout,
		},
		Metadata: proxy.MetadataOptions{
			MaxDocumentBytes: int64(m.MaxDocumentBytes),
			PartialTTL:       off(m.PartialTTL),
			MemoryBytes:      off(int64(m.MemoryBytes)),
			MaxVersions:      m.MaxVersions,
			MaxElements:      m.MaxElements,
			MaxMergingBytes:  int64(m.MaxMergingBytes),
			MergeWait:        off(m.MergeWait),
		},
		Audit: proxy.AuditOptions{
			Retention:                off(a.Retention),
			CallerDenialsPerMinute:   a.CallerDenialsPerMinute,
			RegistryDenialsPerMinute: a.RegistryDenialsPerMinute,
			AggregateInterval:        a.AggregateInterval,
		},
	}
}

// off maps the configuration's 0 (off, none) onto the components' -1.
func off[T int | int64 | time.Duration](v T) T {
	if v == 0 {
		return -1
	}
	return v
}
