package admin

import (
	"errors"
	"net/http"

	"registryd/store"
)

// Scrubber is the scrub of this node's blobs (store.Scrubber).
type Scrubber interface {
	Report() store.ScrubReport
	// StartNow starts a cycle; store.ErrScrubRunning when one runs.
	StartNow() error
}

// scrubPath is the scrub's report (registryd's own; docs/operations.md,
// "Scrub").
const scrubPath = "/api/v4/admin/scrub"

func (s *Server) routesScrub() {
	s.handle(http.MethodGet, scrubPath, s.scrubReport)
	s.handle(http.MethodPost, scrubPath, s.startScrub)
}

var errNoScrub = message(http.StatusServiceUnavailable, "503 Service Unavailable - the scrub is not available")

// scrubReport is GET /admin/scrub: this node's current and last cycle.
func (s *Server) scrubReport(w http.ResponseWriter, r *http.Request) error {
	if _, err := s.requireAdmin(r); err != nil {
		return err
	}
	if s.scrub == nil {
		return errNoScrub
	}
	writeJSON(w, http.StatusOK, s.scrub.Report())
	return nil
}

// startScrub is POST /admin/scrub: a cycle now, in the background (202);
// 409 while one runs.
func (s *Server) startScrub(w http.ResponseWriter, r *http.Request) error {
	if _, err := s.requireAdmin(r); err != nil {
		return err
	}
	if s.scrub == nil {
		return errNoScrub
	}
	if err := s.scrub.StartNow(); errors.Is(err, store.ErrScrubRunning) {
		return message(http.StatusConflict, "409 Conflict - a scrub cycle is running")
	} else if err != nil {
		return err
	}
	writeJSON(w, http.StatusAccepted, s.scrub.Report())
	return nil
}
