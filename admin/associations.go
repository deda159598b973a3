package admin

import (
	"net/http"

	"registryd/store"
)

// The associations of registries with upstreams (GitLab's registry_upstreams).
func (s *Server) routesAssociations() {
	s.handle(http.MethodPost, vrBase+"/registry_upstreams", s.associate)
	s.handle(http.MethodPatch, vrBase+"/registry_upstreams/{id}", s.moveAssociation)
	s.handle(http.MethodDelete, vrBase+"/registry_upstreams/{id}", s.deleteAssociation)
}

// associationView is what POST and PATCH registry_upstreams answer. A struct,
// not a map: GitLab's field order is id, registry_id, upstream_id, position.
type associationView struct {
	ID         int64 `json:"id"`
	RegistryID int64 `json:"registry_id"`
	UpstreamID int64 `json:"upstream_id"`
	Position   int   `json:"position"`
}

func associationJSON(a store.RegistryUpstream) associationView {
	return associationView{ID: a.ID, RegistryID: a.RegistryID, UpstreamID: a.UpstreamID, Position: a.Position}
}

func (s *Server) associate(w http.ResponseWriter, r *http.Request) error {
	p, in, err := authParams(r, s.vrAuth)
	if err != nil {
		return err
	}
	if !in.has("registry_id") {
		in.fail("registry_id is missing")
	}
	if !in.has("upstream_id") {
		in.fail("upstream_id is missing")
	}
	regID, upID := in.integer("registry_id"), in.integer("upstream_id")
	if err := in.err(); err != nil {
		return err
	}
	reg, err := s.st.Registry(int64(*regID))
	if err != nil {
		return err
	}
	if err := s.authorizeGroupID(p, reg.GroupID, manage); err != nil {
		return err
	}
	a, err := s.st.Associate(reg.ID, int64(*upID))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, associationJSON(a))
	return nil
}

// association finds the {id} association and checks manage access.
func (s *Server) association(r *http.Request) (store.RegistryUpstream, error) {
	return vrRecord(s, r, manage, func(id int64) (store.RegistryUpstream, int64, error) {
		a, err := s.st.Association(id)
		if err != nil {
			return a, 0, err
		}
		reg, err := s.st.Registry(a.RegistryID)
		return a, reg.GroupID, err
	})
}

func (s *Server) moveAssociation(w http.ResponseWriter, r *http.Request) error {
	a, err := s.association(r)
	if err != nil {
		return err
	}
	in, err := readParams(r)
	if err != nil {
		return err
	}
	if !in.has("position") {
		in.fail("position is missing")
	}
	pos := in.integer("position")
	if pos != nil && (*pos < 1 || *pos > store.MaxUpstreamsPerRegistry) {
		in.fail("position does not have a valid value")
	}
	if len(in.errs) > 0 && pos == nil && in.has("position") {
		in.errs = []string{"position does not have a valid value"}
	}
	if err := in.err(); err != nil {
		return err
	}
	moved, err := s.st.MoveAssociation(a.ID, *pos)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, associationJSON(moved))
	return nil
}

func (s *Server) deleteAssociation(w http.ResponseWriter, r *http.Request) error {
	a, err := s.association(r)
	if err != nil {
		return err
	}
	if err := s.st.DeleteAssociation(a.ID); err != nil {
		return err
	}
	s.forgetGone(a.UpstreamID)
	w.WriteHeader(http.StatusNoContent)
	return nil
}
