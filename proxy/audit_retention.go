package proxy

import (
	"time"

	"registryd/internal/every"
)

// Audit retention: events older than audit.retention are deleted in the
// background, batch after batch (store.ExpireAuditEvents, one transaction
// each), at start and every auditExpireInterval. On a cluster one node at
// a time runs it (jobLease).

const (
	jobAuditRetention = "audit_retention"
	// auditExpireBatch is how many events one transaction deletes at most:
	// about 20 ms on a loaded 2-core machine (BenchmarkExpireAuditEvents;
	// the time is the pages of four indexes written and their fsync), so
	// the audit writer and the other writers of the index wait no longer
	// than that for it.
	auditExpireBatch = 500
	// auditExpireInterval is how often the job looks for expired events.
	// Retention is counted in days; an event outlives it by at most this.
	auditExpireInterval = 10 * time.Minute
)

func (s *engine) expireAudit(stop <-chan struct{}) (int, error) {
	retention := s.opts.Audit.Retention
	if retention <= 0 {
		return 0, nil
	}
	unlock, run, err := s.jobLease(jobAuditRetention)
	if err != nil {
		s.audit.met.retentionErrors.Inc()
		return 0, err
	}
	if !run {
		return 0, nil
	}
	defer unlock()
	cutoff := s.now().Add(-retention)
	total := 0
	for {
		start := time.Now()
		n, more, err := s.st.ExpireAuditEvents(cutoff, auditExpireBatch)
		total += n
		s.audit.met.deleted.Add(float64(n))
		if err != nil {
			s.audit.met.retentionErrors.Inc()
			return total, err
		}
		if !more {
			break
		}
		// Rest as long as the batch took, as the collector does: a large
		// backlog (the first start with a retention) leaves the index to
		// the other writers half of the time.
		if !s.rest(stop, time.Since(start)) {
			break
		}
	}
	if total > 0 {
		s.log.Info("deleted audit events past their retention", "events", total, "created_before", cutoff)
	}
	return total, nil
}

// auditRetention runs expireAudit at once and every auditExpireInterval
// until stop closes.
func (s *engine) auditRetention(stop, done chan struct{}) {
	defer close(done)
	every.TickNow(stop, auditExpireInterval, func() {
		if _, err := s.expireAudit(stop); err != nil {
			s.backgroundFailed("deleting audit events past their retention", err)
		}
	})
}

// startAuditRetention starts the retention job when audit.retention is
// set. Call with s.bgMu held.
func (s *engine) startAuditRetention() {
	if s.opts.Audit.Retention <= 0 || s.retentionStop != nil {
		return
	}
	s.retentionStop, s.retentionDone = make(chan struct{}), make(chan struct{})
	go s.auditRetention(s.retentionStop, s.retentionDone)
}

// stopAuditRetention stops the job and waits for a run in progress. Call
// with s.bgMu held.
func (s *engine) stopAuditRetention() {
	if s.retentionStop != nil {
		close(s.retentionStop)
		<-s.retentionDone
		s.retentionStop = nil
	}
}
