package admin

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

func (s *Server) routesHealth(g prometheus.Gatherer) {
	s.handle(http.MethodGet, "/-/health", func(w http.ResponseWriter, r *http.Request) error {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, err := w.Write([]byte("GitLab OK\n"))
		return err
	})
	s.handle(http.MethodGet, "/-/liveness", func(w http.ResponseWriter, r *http.Request) error {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
		return nil
	})
	s.handle(http.MethodGet, "/-/readiness", func(w http.ResponseWriter, r *http.Request) error {
		if err := s.ready(); err != nil {
			writeJSON(w, http.StatusServiceUnavailable, map[string]any{"status": "failed", "message": err.Error()})
			return nil
		}
		// Ready for hits even when the data volume is full: misses are
		// then served uncached. The body says so, for operators.
		body := map[string]any{"status": "ok"}
		if s.disk != nil {
			st := s.disk()
			cache := map[string]any{"filling": st.Filling}
			if !st.Filling {
				cache["reason"] = st.Reason
			}
			body["cache"] = cache
		}
		writeJSON(w, http.StatusOK, body)
		return nil
	})
	if g != nil {
		h := promhttp.HandlerFor(g, promhttp.HandlerOpts{})
		s.handle(http.MethodGet, "/metrics", func(w http.ResponseWriter, r *http.Request) error {
			h.ServeHTTP(w, r)
			return nil
		})
	}
}
