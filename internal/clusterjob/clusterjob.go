// Package clusterjob runs scheduled jobs once per cluster: a job's round
// runs under a lease named "job:<name>" (store.Store.TryLease), held for the
// round; when another node holds it, that node runs the job and this node
// skips the round. On a single node the lease is always granted. The proxy
// (collector, evictor) and package cleanup (the policy scheduler) share the
// skip counter defined here, so that it is registered once.
package clusterjob

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Leaser is what a job needs of the index; *store.Store has it.
type Leaser interface {
	TryLease(ctx context.Context, key string) (unlock func(), ok bool, err error)
}

// leaseTimeout bounds the request for a job's lease: a job loop must not
// hang on an index that does not answer.
const leaseTimeout = 10 * time.Second

// Skipped is registryd_cluster_job_skipped_total{job}. Register it with
// NewSkipped.
type Skipped struct{ c *prometheus.CounterVec }

// NewSkipped registers the counter on reg (nil: none), or takes the one
// another package registered there, and creates the series of jobs at 0.
func NewSkipped(reg prometheus.Registerer, jobs ...string) (*Skipped, error) {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "registryd", Subsystem: "cluster", Name: "job_skipped_total",
		Help: "Rounds of a scheduled job (collect, evict, cleanup, audit_retention; scrub: the bucket's part of a cycle) this node skipped because another node of the cluster held the job's lease and ran it.",
	}, []string{"job"})
	if reg != nil {
		if err := reg.Register(c); err != nil {
			are := prometheus.AlreadyRegisteredError{}
			if !errors.As(err, &are) {
				return nil, err
			}
			existing, ok := are.ExistingCollector.(*prometheus.CounterVec)
			if !ok {
				return nil, err
			}
			c = existing
		}
	}
	for _, j := range jobs {
		c.WithLabelValues(j)
	}
	return &Skipped{c}, nil
}

// Try takes the lease of job for one round. run is false when another node
// holds it (counted and logged at debug) or on err (the index is
// unavailable: the round cannot run either); unlock is then a no-op.
func Try(l Leaser, job string, skipped *Skipped, log *slog.Logger) (unlock func(), run bool, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), leaseTimeout)
	defer cancel()
	unlock, ok, err := l.TryLease(ctx, "job:"+job)
	if err != nil {
		return func() {}, false, err
	}
	if !ok {
		if skipped != nil {
			skipped.c.WithLabelValues(job).Inc()
		}
		if log != nil {
			log.Debug("cluster: another node runs this job; skipped this round", "job", job)
		}
		return func() {}, false, nil
	}
	return unlock, true, nil
}
