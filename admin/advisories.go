package admin

import (
	"context"
	"errors"
	"net/http"
	"strconv"

	"registryd/advisories"
	"registryd/store"
)

// AdvisoryImporter imports advisory databases (package advisories'
// Importer).
type AdvisoryImporter interface {
	ImportUpload(ctx context.Context, u advisories.Upload) (advisories.Result, error)
	// RefreshNow starts an import of the configured sources in the
	// background and returns how many there are; 0 when none is
	// configured.
	RefreshNow() int
	// MaxBytes is the largest copy an upload may send
	// (advisories.max_bytes).
	MaxBytes() int64
}

// advisoriesPath is the advisory database resource (registryd's own; GitLab
// keeps its advisory database out of its API).
const advisoriesPath = "/api/v4/admin/advisories"

func (s *Server) routesAdvisories() {
	s.handle(http.MethodGet, advisoriesPath, s.advisoryStatus)
	s.handle(http.MethodPost, advisoriesPath, s.importAdvisories)
	s.handle(http.MethodPost, advisoriesPath+"/refresh", s.refreshAdvisories)
}

// advisoryStatus is GET /admin/advisories: the database's size and each
// source's last import.
func (s *Server) advisoryStatus(w http.ResponseWriter, r *http.Request) error {
	if _, err := s.requireAdmin(r); err != nil {
		return err
	}
	st, err := s.st.AdvisoryStatus()
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, st)
	return nil
}

// importAdvisories is POST /admin/advisories?source=NAME&full=BOOL: the body
// is a zip archive (osv.dev's all.zip, the vulndb module) or OSV records
// (one, an array, NDJSON). It is spooled to disk (at most
// advisories.max_bytes), then imported; the answer says what changed.
func (s *Server) importAdvisories(w http.ResponseWriter, r *http.Request) error {
	p, err := s.requireAdmin(r)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	source := q.Get("source")
	if source == "" {
		source = "upload"
	}
	if len(source) > store.MaxAdvisorySource {
		return badRequest("source is longer than " + strconv.Itoa(store.MaxAdvisorySource) + " bytes")
	}
	full := false
	if v := q.Get("full"); v != "" {
		if full, err = strconv.ParseBool(v); err != nil {
			return badRequest("full is invalid")
		}
	}
	if s.advisories == nil {
		return message(http.StatusServiceUnavailable, "503 Service Unavailable - advisory imports are not available")
	}
	limit := s.advisories.MaxBytes()
	tooLarge := message(http.StatusRequestEntityTooLarge,
		"413 Request Entity Too Large - the advisory database is larger than "+sizeText(limit)+" (advisories.max_bytes)")
	if r.ContentLength > limit {
		return tooLarge
	}
	res, err := s.advisories.ImportUpload(r.Context(), advisories.Upload{Source: source, Full: full, Body: r.Body})
	var mbe *http.MaxBytesError
	var re *advisories.ReadError
	switch {
	case errors.Is(err, advisories.ErrBusy):
		return message(http.StatusConflict, "409 Conflict - another advisory import is running; retry when it is over")
	case errors.Is(err, advisories.ErrTooLarge), errors.As(err, &mbe):
		return tooLarge
	case errors.As(err, &re):
		// A broken archive or stream: what was read before it is committed.
		s.log.Warn("advisory import cut short", "req_id", requestID(r), "source", source, "err", err)
		return badRequest("the advisory database could not be read to its end (" + re.Err.Error() + "); " +
			strconv.Itoa(res.Added+res.Changed+res.Removed) + " advisories were changed before that")
	case err != nil:
		return err
	}
	s.log.Info("advisories imported", "req_id", requestID(r), "user", p.User.Username, "source", source, "full", full,
		"read", res.Read, "added", res.Added, "changed", res.Changed, "removed", res.Removed,
		"projects", res.Projects, "dependencies", res.Dependencies)
	writeJSON(w, http.StatusOK, res)
	return nil
}

// refreshAdvisories is POST /admin/advisories/refresh: import the
// configured sources now, in the background (202).
func (s *Server) refreshAdvisories(w http.ResponseWriter, r *http.Request) error {
	if _, err := s.requireAdmin(r); err != nil {
		return err
	}
	if s.advisories == nil {
		return message(http.StatusServiceUnavailable, "503 Service Unavailable - advisory imports are not available")
	}
	n := s.advisories.RefreshNow()
	if n == 0 {
		return badRequest("no advisory source is configured (advisories.sources)")
	}
	writeJSON(w, http.StatusAccepted, map[string]any{"sources": n})
	return nil
}
