package proxy

import (
	"net/http"
	"testing"
	"time"

	"registryd/upstream"
)

// An upstream asking for a day's pause (as seconds or as a date) is passed
// on capped at upstreams.max_backoff, like our own backoff: the client is
// told to come back within it, and registryd asks the upstream again once
// it has passed, not a day later.
func TestRetryAfterCappedAtMaxBackoff(t *testing.T) {
	for _, value := range []string{"86400", time.Now().Add(48 * time.Hour).UTC().Format(http.TimeFormat)} {
		t.Run(value, func(t *testing.T) {
			e := newEnv(t, func(o *envOptions) { o.Upstreams.Backoff, o.Upstreams.MaxBackoff = 10*time.Second, 2*time.Minute })
			up := newFakeUpstream(t)
			up.set(jarPath, fakeFile{custom: func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Retry-After", value)
				w.WriteHeader(http.StatusTooManyRequests)
			}})
			id := e.upstream(up.URL, nil, nil)
			r := e.get(jarPath).expect(t, 429)
			if got := r.header.Get("Retry-After"); got != "120" {
				t.Fatalf("Retry-After %q, want 120 (upstreams.max_backoff)", got)
			}
			st := e.srv.health.Status(id)
			if st.State != upstream.Unhealthy || st.RetryAt.Sub(e.clock.Now()) > 2*time.Minute {
				t.Fatalf("health %+v: backing off past max_backoff", st)
			}
			// While it backs off, what the client hears stays within the cap.
			e.clock.Advance(30 * time.Second)
			if got := e.get(jarPath).expect(t, 503).header.Get("Retry-After"); got != "90" {
				t.Fatalf("Retry-After %q while backing off, want 90", got)
			}
			calls := up.total()
			e.clock.Advance(91 * time.Second)
			e.get(jarPath)
			if up.total() != calls+1 {
				t.Fatalf("the upstream was not asked again once max_backoff had passed (%d calls, want %d)", up.total(), calls+1)
			}
		})
	}
}
