package admin

import (
	"net/http"
	"time"

	"registryd/store"
)

func (s *Server) routesRegistries() {
	s.handle(http.MethodGet, vrGroupBase+"/registries", s.listRegistries)
	s.handle(http.MethodPost, vrGroupBase+"/registries", s.createRegistry)
	s.handle(http.MethodGet, vrBase+"/registries/{id}", s.getRegistry)
	s.handle(http.MethodPatch, vrBase+"/registries/{id}", s.updateRegistry)
	s.handle(http.MethodDelete, vrBase+"/registries/{id}", s.deleteRegistry)
	s.handle(http.MethodDelete, vrBase+"/registries/{id}/cache", s.purgeRegistryCache)
}

// registryView is the spec's Registry, plus registryd's merge_metadata
// (whether maven-metadata.xml is merged across the upstreams; GitLab
// clients ignore it).
type registryView struct {
	ID                int64            `json:"id"`
	Name              string           `json:"name"`
	Description       string           `json:"description"`
	GroupID           int64            `json:"group_id"`
	CreatedAt         jsonTime         `json:"created_at"`
	UpdatedAt         jsonTime         `json:"updated_at"`
	MergeMetadata     bool             `json:"merge_metadata"`
	RegistryUpstreams *[]registryAssoc `json:"registry_upstreams,omitempty"`
}

type registryAssoc struct {
	ID         int64 `json:"id"`
	Position   int   `json:"position"`
	UpstreamID int64 `json:"upstream_id"`
}

func registryJSON(r store.Registry) registryView {
	return registryView{ID: r.ID, Name: r.Name, Description: r.Description, GroupID: r.GroupID,
		CreatedAt: jsonTime(r.CreatedAt), UpdatedAt: jsonTime(r.UpdatedAt), MergeMetadata: r.MergeMetadata()}
}

func (s *Server) listRegistries(w http.ResponseWriter, r *http.Request) error {
	g, _, err := s.vrGroup(r, read)
	if err != nil {
		return err
	}
	regs, err := s.st.GroupRegistries(g.ID)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, mapViews(regs, registryJSON))
	return nil
}

// createRegistry is registry POST. On a subgroup, a caller who may manage
// registries there gets the model's validation error (the store's), as in
// GitLab, not the group endpoints' 400.
func (s *Server) createRegistry(w http.ResponseWriter, r *http.Request) error {
	g, p, err := s.vrGroupOrSubgroup(r)
	if err != nil {
		return err
	}
	if err := s.authorizeVR(p, g, manage); err != nil {
		return err
	}
	in, err := readParams(r)
	if err != nil {
		return err
	}
	n := store.NewRegistry{Name: in.required("name"), Description: deref(in.str("description")),
		MergeMetadata: in.boolean("merge_metadata")}
	if err := in.err(); err != nil {
		return err
	}
	reg, err := s.st.CreateRegistryFrom(g.ID, n)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, registryJSON(reg))
	return nil
}

// registry finds the {id} registry and checks the caller's access to it.
func (s *Server) registry(r *http.Request, need access) (store.Registry, error) {
	return vrRecord(s, r, need, func(id int64) (store.Registry, int64, error) {
		reg, err := s.st.Registry(id)
		return reg, reg.GroupID, err
	})
}

func (s *Server) getRegistry(w http.ResponseWriter, r *http.Request) error {
	reg, err := s.registry(r, read)
	if err != nil {
		return err
	}
	ups, err := s.st.RegistryUpstreams(reg.ID)
	if err != nil {
		return err
	}
	assocs := mapViews(ups, func(u store.PositionedUpstream) registryAssoc {
		return registryAssoc{ID: u.Assoc.ID, Position: u.Assoc.Position, UpstreamID: u.ID}
	})
	v := registryJSON(reg)
	v.RegistryUpstreams = &assocs
	writeJSON(w, http.StatusOK, v)
	return nil
}

func (s *Server) updateRegistry(w http.ResponseWriter, r *http.Request) error {
	reg, err := s.registry(r, manage)
	if err != nil {
		return err
	}
	in, err := readParams(r)
	if err != nil {
		return err
	}
	name := in.required("name")
	// GitLab declares description allow_blank: false on PATCH (not on
	// POST): "", spaces or null is "description is empty".
	var desc *string
	if !in.blank("description") {
		desc = in.str("description")
	}
	patch := store.RegistryPatch{Name: &name, Description: desc, MergeMetadata: in.boolean("merge_metadata")}
	if err := in.err(); err != nil {
		return err
	}
	updated, err := s.st.UpdateRegistry(reg.ID, patch)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, registryJSON(updated))
	return nil
}

func (s *Server) deleteRegistry(w http.ResponseWriter, r *http.Request) error {
	reg, err := s.registry(r, manage)
	if err != nil {
		return err
	}
	var since *time.Time
	if h := r.Header.Get("If-Unmodified-Since"); h != "" {
		t, err := http.ParseTime(h)
		if err != nil {
			return badRequest("If-Unmodified-Since is not an HTTP date")
		}
		since = &t
	}
	ups, err := s.st.RegistryUpstreams(reg.ID)
	if err != nil {
		return err
	}
	if err := s.st.DeleteRegistry(reg.ID, since); err != nil {
		return err
	}
	for _, u := range ups {
		s.forgetGone(u.ID)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) purgeRegistryCache(w http.ResponseWriter, r *http.Request) error {
	reg, err := s.registry(r, manage)
	if err != nil {
		return err
	}
	if _, err := s.st.PurgeRegistryCache(reg.ID); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
