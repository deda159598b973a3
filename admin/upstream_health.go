package admin

import (
	"errors"

	"registryd/store"
	"registryd/upstream"
)

// upstreamHealthView is an upstream's health as the upstream resource shows
// it, after registryd's other own fields. It comes from the proxy's
// in-memory tracker (upstream.Health): every upstream starts healthy after
// a restart.
type upstreamHealthView struct {
	// Status is "healthy" or "unhealthy" (skipped for misses and
	// revalidations until RetryAt).
	Status string `json:"status"`
	// StatusSince is when Status last changed; null when healthy since start.
	StatusSince jsonTime `json:"status_since"`
	// LastError is the last failure's short reason ("Connection timeout",
	// "503 Service Unavailable"), kept after a recovery; null when none.
	LastError   *string  `json:"last_error"`
	LastErrorAt jsonTime `json:"last_error_at"`
	// RetryAt is when the next trial request may go; null while healthy. A
	// time in the past means the next request to the upstream is the trial.
	RetryAt jsonTime `json:"retry_at"`
	// FailingPaths is how many files fail on this upstream lately (their
	// path breaker is open): they are not asked for until their own trial,
	// while the upstream stays healthy for every other file.
	FailingPaths int `json:"failing_paths"`
}

func (s *Server) upstreamHealthJSON(id int64) upstreamHealthView {
	st := s.health.Status(id)
	v := upstreamHealthView{Status: st.State, StatusSince: jsonTime(st.Since), LastError: optString(st.LastError),
		FailingPaths: st.FailingPaths}
	if st.LastError != "" {
		v.LastErrorAt = jsonTime(st.LastErrorAt)
	}
	if st.State == upstream.Unhealthy {
		v.RetryAt = jsonTime(st.RetryAt)
	}
	return v
}

// forgetGone drops the health of those upstreams that no longer exist (a
// registry or an association was deleted, taking the upstreams left in no
// registry with them).
func (s *Server) forgetGone(ids ...int64) {
	for _, id := range ids {
		if _, err := s.st.Upstream(id); errors.Is(err, store.ErrNotFound) {
			s.health.Forget(id)
		}
	}
}
