package main

import (
	"log/slog"
	"os"

	"github.com/prometheus/client_golang/prometheus"

	"registryd/config"
	"registryd/internal/clusterjob"
	"registryd/store"
	"registryd/store/blob"
)

// newScrubber prepares the scrub of this node's blobs (docs/operations.md,
// "Scrub") and registers its metrics on reg. In a cluster, the holder of
// the lease "job:scrub" scrubs the bucket's objects for a cycle; every node
// its local files, under a cursor of its own (host name and data dir).
func newScrubber(cfg config.Config, st *store.Store, blobs *blob.Store, reg prometheus.Registerer, log *slog.Logger) (*store.Scrubber, error) {
	o := store.ScrubOptions{
		Interval:           cfg.Scrub.Interval,
		BytesPerSecond:     int64(cfg.Scrub.BytesPerSecond),
		QuarantineMaxBytes: int64(cfg.Scrub.QuarantineMaxBytes),
		Logger:             log,
	}
	if cfg.Clustered() {
		skipped, err := clusterjob.NewSkipped(reg, "scrub")
		if err != nil {
			return nil, err
		}
		host, _ := os.Hostname()
		o.Node = host + ":" + cfg.Data.Dir
		o.Shared = func() (func(), bool) {
			unlock, run, err := clusterjob.Try(st, "scrub", skipped, log)
			if err != nil {
				log.Warn("scrub: the lease of the bucket's scrub", "err", err)
			}
			return unlock, run
		}
	}
	sc := st.NewScrubber(blobs, o)
	counter := func(name, help string, v func() int64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "registryd", Subsystem: "scrub", Name: name, Help: help},
			func() float64 { return float64(v()) })
	}
	cs := []prometheus.Collector{
		counter("blobs_checked_total", "Blobs the scrub re-read and re-hashed (or found missing).", sc.Stats.Checked.Load),
		counter("blobs_corrupt_total", "Blobs (a local file or a bucket object) whose bytes did not match their digest: quarantined or deleted, their entries dropped.", sc.Stats.Corrupt.Load),
		counter("blobs_missing_total", "Referenced blobs the scrub found missing: their entries dropped.", sc.Stats.Missing.Load),
		counter("bytes_hashed_total", "Bytes the scrub read and hashed.", sc.Stats.BytesHashed.Load),
		counter("entries_dropped_total", "Cache entries the scrub dropped because their blob was bad or missing (the next download fills them again).", sc.Stats.EntriesDropped.Load),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "registryd", Subsystem: "scrub", Name: "last_completed_timestamp_seconds",
			Help: "When this process last completed a scrub cycle, Unix seconds (0: none yet)."},
			func() float64 { return float64(sc.Stats.LastCompleted.Load()) }),
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return sc, nil
}
