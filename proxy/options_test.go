package proxy

import (
	"reflect"
	"testing"

	"registryd/config"
)

// TestDefaultsAreConfigs: an Options field left zero takes registryd's own
// default (config.Default), so that a test leaving it zero runs what the
// daemon runs by default. (withDefaults turns "off" into 0, the
// configuration's own word for it, so config's values compare as they are.)
func TestDefaultsAreConfigs(t *testing.T) {
	c := config.Default()
	p, ca, u, m, a := c.Proxy, c.Cache, c.Upstreams, c.Metadata, c.Audit
	want := Options{
		Listener: ListenerOptions{
			HeaderTimeout: p.HeaderTimeout, ReadTimeout: p.ReadTimeout, WriteTimeout: p.WriteTimeout,
			IdleTimeout: p.IdleTimeout, MaxHeaderBytes: int(p.MaxHeaderBytes), Concurrency: p.Concurrency,
			MaxConnsPerClient: p.MaxConnsPerClient, MaxUploadBytes: int64(p.MaxUploadBytes),
			AccessLogJSON: c.Log.Format == "json",
		},
		Cache: CacheOptions{
			MaxFileBytes: int64(ca.MaxFileBytes), CollectInterval: ca.CollectInterval, FlushInterval: ca.FlushInterval,
			MemoryBytes: int64(ca.MemoryBytes), MemoryMaxFileBytes: int64(ca.MemoryMaxFileBytes),
			MaxBytes: int64(ca.MaxBytes), MaxPendingStores: ca.MaxPendingStores, MinFreeFraction: ca.MinFreeFraction,
			MaxLocks: c.Store.Postgres.MaxLocks,
		},
		Upstreams: UpstreamOptions{
			FillTimeout: u.FillTimeout, NotFoundTTL: u.NotFoundTTL, MetadataNotFoundTTL: u.MetadataNotFoundTTL,
			MaxConcurrentRequests: u.MaxConcurrentRequests, ReservedSmallRequests: u.ReservedSmallRequests,
			SmallFileBytes: int64(u.SmallFileBytes), Backoff: u.Backoff, MaxBackoff: u.MaxBackoff,
			FailureThreshold: u.FailureThreshold, PathFailureThreshold: u.PathFailureThreshold,
			FailureWindow: u.FailureWindow, MaxFailingPaths: u.MaxFailingPaths,
			TrialTimeout: u.ConnectTimeout + u.HeaderTimeout,
		},
		Metadata: MetadataOptions{
			MaxDocumentBytes: int64(m.MaxDocumentBytes), PartialTTL: m.PartialTTL, MemoryBytes: int64(m.MemoryBytes),
			MaxVersions: m.MaxVersions, MaxElements: m.MaxElements, MaxMergingBytes: int64(m.MaxMergingBytes),
			MergeWait: m.MergeWait,
		},
		Audit: AuditOptions{
			Retention: a.Retention, CallerDenialsPerMinute: a.CallerDenialsPerMinute,
			RegistryDenialsPerMinute: a.RegistryDenialsPerMinute, AggregateInterval: a.AggregateInterval,
		},
		// Not configuration keys: the defaults MemoryOptions states.
		Memory: MemoryOptions{Paths: 131072, Registries: 1024, Entries: 32768, Verdicts: 16384, Composed: 8192,
			SmallBlobs: 1 << 20},
	}
	// The default policy is "": the code reads it as verify.
	if u.ChecksumPolicy != "verify" {
		t.Fatalf("config's checksum policy %q", u.ChecksumPolicy)
	}
	if got := (Options{}).withDefaults(); !reflect.DeepEqual(got, want) {
		t.Fatalf("defaults\n%+v\ndiffer from config's\n%+v", got, want)
	}
}

// TestNegativeIsOff: a negative field is the configuration's 0 (off,
// none); a positive one stays.
func TestNegativeIsOff(t *testing.T) {
	o := Options{
		Listener: ListenerOptions{MaxConnsPerClient: -1},
		Cache:    CacheOptions{MemoryBytes: -1, MemoryMaxFileBytes: -1, MaxBytes: 7},
		Upstreams: UpstreamOptions{NotFoundTTL: -1, MetadataNotFoundTTL: -1, ReservedSmallRequests: -1,
			MaxConcurrentRequests: 3},
		Metadata: MetadataOptions{PartialTTL: -1, MemoryBytes: -1, MergeWait: -1},
		Audit:    AuditOptions{Retention: -1},
	}.withDefaults()
	if o.Listener.MaxConnsPerClient != 0 || o.Cache.MemoryBytes != 0 || o.Cache.MemoryMaxFileBytes != 0 ||
		o.Upstreams.NotFoundTTL != 0 || o.Upstreams.MetadataNotFoundTTL != 0 || o.Upstreams.ReservedSmallRequests != 0 ||
		o.Metadata.PartialTTL != 0 || o.Metadata.MemoryBytes != 0 || o.Metadata.MergeWait != 0 || o.Audit.Retention != 0 {
		t.Fatalf("negative fields not off: %+v", o)
	}
	if o.Cache.MaxBytes != 7 || o.Upstreams.MaxConcurrentRequests != 3 {
		t.Fatalf("set fields changed: %+v", o)
	}
}
