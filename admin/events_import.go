package admin

import (
	"net/http"

	"registryd/eventimport"
)

type importView struct {
	Count   int    `json:"count"`
	FirstID *int64 `json:"first_id"`
	LastID  *int64 `json:"last_id"`
}

// importEvents is POST /admin/events: a JSON array of events, or NDJSON
// (one event object a line), validated whole and stored in one transaction.
// The body is decoded one event at a time; only the decoded events are kept.
func (s *Server) importEvents(w http.ResponseWriter, r *http.Request) error {
	if _, err := s.requireAdmin(r); err != nil {
		return err
	}
	evs, err := eventimport.DecodeEvents(r.Body)
	if err != nil {
		return err
	}
	res, err := s.st.ImportEvents(evs)
	if err != nil {
		return err
	}
	s.log.Info("events imported", "req_id", requestID(r), "count", res.Count)
	v := importView{Count: res.Count}
	if res.Count > 0 {
		v.FirstID, v.LastID = &res.FirstID, &res.LastID
	}
	writeJSON(w, http.StatusCreated, v)
	return nil
}
