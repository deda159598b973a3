package main

import (
	"github.com/prometheus/client_golang/prometheus"

	"registryd/store"
	"registryd/store/kv"
)

// clusterEngine is what a shared engine (pgkv) reports beside kv.Stats.
type clusterEngine interface {
	Retries() uint64
	Resyncs() uint64
	LocksHeld() int
}

// registerIndexMetrics exposes the index engine's figures, read at scrape
// time: its size and open transactions and the group commit's counters on
// every engine, and on a shared one
// the transactions retried after a serialization conflict, the resyncs (a
// notification possibly lost: every in-memory view dropped) and the cluster
// locks held.
func registerIndexMetrics(reg prometheus.Registerer, st *store.Store, engine kv.DB) error {
	cs := []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "registryd", Subsystem: "index", Name: "bytes",
			Help: "Size of the index: the bbolt file, or the PostgreSQL table with its indexes.",
		}, func() float64 { return float64(st.Stats().FileBytes) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "registryd", Subsystem: "index", Name: "open_transactions",
			Help: "Open index transactions (bbolt) or PostgreSQL connections in use.",
		}, func() float64 { return float64(st.Stats().TxOpen) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "registryd", Subsystem: "index", Name: "free_bytes",
			Help: "Part of the bbolt file no data uses, reused before the file grows (0 on PostgreSQL).",
		}, func() float64 { return float64(st.Stats().FreeBytes) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "registryd", Subsystem: "index", Name: "pending_free_bytes",
			Help: "Part of the bbolt file freed by commits but still visible to an open read transaction; reused once those end (0 on PostgreSQL).",
		}, func() float64 { return float64(st.Stats().PendingBytes) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: "registryd", Subsystem: "index", Name: "batch_commits_total",
			Help: "Index transactions committed by the group commit, each carrying one or more cache entry writes.",
		}, func() float64 { return float64(st.BatchStats().Commits) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: "registryd", Subsystem: "index", Name: "batched_writes_total",
			Help: "Cache entry writes (fills, revalidations, download counts) committed by the group commit; divided by batch_commits_total, the mean batch.",
		}, func() float64 { return float64(st.BatchStats().Writes) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: "registryd", Subsystem: "index", Name: "batch_solo_retries_total",
			Help: "Cache entry writes that failed inside a shared transaction and ran again alone.",
		}, func() float64 { return float64(st.BatchStats().Alone) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "registryd", Subsystem: "index", Name: "batch_queued_writes",
			Help: "Cache entry writes waiting for the commit of their shared transaction.",
		}, func() float64 { return float64(st.BatchStats().Queued) }),
	}
	if c, ok := engine.(clusterEngine); ok {
		cs = append(cs,
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Namespace: "registryd", Subsystem: "index", Name: "transaction_retries_total",
				Help: "Index write transactions run again after a PostgreSQL serialization failure or deadlock.",
			}, func() float64 { return float64(c.Retries()) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Namespace: "registryd", Subsystem: "cluster", Name: "resyncs_total",
				Help: "Times this node dropped every in-memory view because a change notification may have been lost.",
			}, func() float64 { return float64(c.Resyncs()) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Namespace: "registryd", Subsystem: "cluster", Name: "locks_held",
				Help: "Cluster locks (fill, job and blob leases) this node holds or waits for, each on its own connection.",
			}, func() float64 { return float64(c.LocksHeld()) }),
		)
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
