package proxy

import (
	"errors"
	"log/slog"
	"sync"
	"time"

	"registryd/upstream"
)

// NewHealth builds the upstreams' health tracker from u (zero fields take
// their defaults), logging one line per transition; now is its clock (nil:
// time.Now). u.TrialTimeout should be the upstream client's connect +
// header timeout: by then the client has an answer or an error for the
// trial, so a trial still without a verdict lost its report, and another
// request may re-test instead of the upstream staying out. A trial that
// legitimately runs longer (a redirect chain) costs at worst one extra
// request, whose report Health tells apart.
func NewHealth(u UpstreamOptions, log *slog.Logger, now func() time.Time) *upstream.Health {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	u = engineOptions{Upstreams: u}.withDefaults().Upstreams
	return upstream.NewHealth(upstream.HealthOptions{
		InitialBackoff: u.Backoff,
		MaxBackoff:     u.MaxBackoff,
		// An upstream's Retry-After keeps it out no longer than our own
		// backoff would (and the client hears no longer a pause).
		MaxRetryAfter: u.MaxBackoff,
		Threshold:     u.FailureThreshold,
		PathThreshold: u.PathFailureThreshold,
		Window:        u.FailureWindow,
		MaxPaths:      u.MaxFailingPaths,
		TrialTimeout:  u.TrialTimeout,
		Now:           now,
		OnChange:      healthLog(log),
	})
}

// healthLog writes one line per upstream health transition: a warning when
// an upstream is skipped from now on (why, and until when), a line when it
// is back (and how long it was out).
func healthLog(log *slog.Logger) func(int64, upstream.HealthStatus) {
	var mu sync.Mutex
	down := map[int64]time.Time{}
	return func(id int64, st upstream.HealthStatus) {
		mu.Lock()
		defer mu.Unlock()
		if st.State == upstream.Unhealthy {
			down[id] = st.Since
			log.Warn("upstream unhealthy", "upstream", id, "last_error", st.LastError,
				"retry_at", st.RetryAt.UTC().Format(time.RFC3339), "backoff", st.RetryAt.Sub(st.Since))
			return
		}
		args := []any{"upstream", id}
		if since, ok := down[id]; ok {
			args = append(args, "down_for", st.Since.Sub(since).Round(time.Millisecond))
			delete(down, id)
		}
		log.Info("upstream healthy again", args...)
	}
}

// judge reports a request's end to the health tracker: an answer (the
// file, 304, 404, and an answer refused as content: the server is up) is a
// success; a timeout, a connection failure, 5xx or 429 a failure, of the
// path or of the host (upstream.Classify); anything else (a cancelled
// fill, a 401, a redirect refused by policy) says nothing about the
// upstream's health.
func (s *engine) judge(t upstream.Ticket, err error) {
	if err == nil {
		s.health.Success(t)
		return
	}
	if class, after, ok := upstream.Classify(err); ok {
		s.health.Failure(t, healthFault(class, err, after))
		return
	}
	if errors.Is(err, upstream.ErrNotFound) || errors.Is(err, upstream.ErrBadAnswer) {
		s.health.Success(t)
		return
	}
	s.health.Done(t)
}

// healthFault describes err for the health tracker.
func healthFault(class int, err error, retryAfter time.Duration) upstream.Fault {
	return upstream.Fault{Class: class, Reason: failureReason(err), RetryAfter: retryAfter,
		Timeout: errors.Is(err, upstream.ErrTimeout)}
}
