package proxy

import (
	"errors"
	"log/slog"
	"time"

	"registryd/config"
	"registryd/proxy/upstream"
)

// NewHealth builds the upstreams' health tracker from the configuration,
// logging one line per transition; now is its clock (nil: time.Now). A
// trial request is given up on (another
// may go) after a connect and a header timeout: by then it has either
// answered or failed.
func NewHealth(cfg config.Config, log *slog.Logger, now func() time.Time) *upstream.Health {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	u := cfg.Upstreams
	return upstream.NewHealth(upstream.HealthOptions{
		InitialBackoff: u.Backoff,
		MaxBackoff:     u.MaxBackoff,
		Threshold:      u.FailureThreshold,
		TrialTimeout:   u.ConnectTimeout + u.HeaderTimeout,
		Now:            now,
		OnChange: func(id int64, st upstream.HealthStatus) {
			if st.State == upstream.Healthy {
				log.Info("upstream healthy again", "upstream", id, "last_error", st.LastError)
				return
			}
			log.Warn("upstream unhealthy; skipped until a trial request succeeds", "upstream", id,
				"last_error", st.LastError, "retry_at", st.RetryAt.UTC().Format(time.RFC3339),
				"failures", st.Failures)
		},
	})
}

// judge reports a request's end to the health tracker: an answer (the
// file, 304, 404, and an answer refused as content: the server is up) is a
// success; a timeout, a connection failure, 5xx or 429 a failure; anything
// else (a cancelled fill, a 401) says nothing about the upstream's health.
func (s *Server) judge(t upstream.Ticket, err error) {
	if err == nil {
		s.health.Success(t)
		return
	}
	if class, after, ok := upstream.Classify(err); ok {
		s.health.Failure(t, class, failureReason(err), after)
		return
	}
	if errors.Is(err, upstream.ErrNotFound) || errors.Is(err, upstream.ErrBadAnswer) {
		s.health.Success(t)
		return
	}
	s.health.Done(t)
}
