package admin

import (
	"net/http"
	"time"

	"registryd/auth"
	"registryd/store"
)

const vrBase = "/api/v4/virtual_registries/packages/maven"

func (s *Server) routesRegistries() {
	groupBase := "/api/v4/groups/{id}/-/virtual_registries/packages/maven"
	s.handle(http.MethodGet, groupBase+"/registries", s.listRegistries)
	s.handle(http.MethodPost, groupBase+"/registries", s.createRegistry)
	s.handle(http.MethodGet, vrBase+"/registries/{id}", s.getRegistry)
	s.handle(http.MethodPatch, vrBase+"/registries/{id}", s.updateRegistry)
	s.handle(http.MethodDelete, vrBase+"/registries/{id}", s.deleteRegistry)
	s.handle(http.MethodDelete, vrBase+"/registries/{id}/cache", s.purgeRegistryCache)
}

// access is what a virtual registry endpoint needs of its caller.
type access uint8

const (
	read access = iota
	manage
)

// vrGroup runs the checks of a group-level virtual registry endpoint in
// GitLab's order: resolve the group, the feature gates (404 before
// authentication), authenticate (deploy tokens get 401), the top-level rule,
// then authorize.
func (s *Server) vrGroup(r *http.Request, need access) (store.Group, auth.Principal, error) {
	g, err := s.groupRef(r)
	if err != nil {
		return g, auth.Principal{}, err
	}
	if !s.auth.VirtualRegistryEnabled() {
		return g, auth.Principal{}, errNotFound
	}
	p, err := s.authenticate(r)
	if err != nil {
		return g, p, err
	}
	if !s.canSeeGroup(p, g) {
		return g, p, message(http.StatusNotFound, "404 Group Not Found")
	}
	if !g.TopLevel() {
		return g, p, store.ErrNotTopLevel
	}
	return g, p, s.authorizeVR(p, g, need)
}

// vrAuth is the gate and authentication of an endpoint addressed by a record id.
func (s *Server) vrAuth(r *http.Request) (auth.Principal, error) {
	if !s.auth.VirtualRegistryEnabled() {
		return auth.Principal{}, errNotFound
	}
	return s.authenticate(r)
}

// authorizeVR checks read or manage permission on a top-level group's
// registries. A caller who cannot even see the group gets 404, so private
// groups stay invisible; one who can see it but lacks the level gets 403.
func (s *Server) authorizeVR(p auth.Principal, g store.Group, need access) error {
	allowed := s.auth.CanReadRegistries(p, g.ID)
	if need == manage {
		allowed = s.auth.CanManageRegistries(p, g.ID)
	}
	switch {
	case allowed:
		return nil
	case !s.canSeeGroup(p, g):
		return errRecordMissing
	}
	return errForbidden
}

// authorizeGroupID is authorizeVR for a record that names its group by id.
func (s *Server) authorizeGroupID(p auth.Principal, group int64, need access) error {
	g, err := s.st.Group(group)
	if err != nil {
		return err
	}
	return s.authorizeVR(p, g, need)
}

type registryView struct {
	ID                int64            `json:"id"`
	Name              string           `json:"name"`
	Description       string           `json:"description"`
	GroupID           int64            `json:"group_id"`
	CreatedAt         jsonTime         `json:"created_at"`
	UpdatedAt         jsonTime         `json:"updated_at"`
	RegistryUpstreams *[]registryAssoc `json:"registry_upstreams,omitempty"`
}

type registryAssoc struct {
	ID         int64 `json:"id"`
	Position   int   `json:"position"`
	UpstreamID int64 `json:"upstream_id"`
}

func registryJSON(r store.Registry) registryView {
	return registryView{ID: r.ID, Name: r.Name, Description: r.Description, GroupID: r.GroupID,
		CreatedAt: jsonTime(r.CreatedAt), UpdatedAt: jsonTime(r.UpdatedAt)}
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
	out := make([]registryView, 0, len(regs))
	for _, reg := range regs {
		out = append(out, registryJSON(reg))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) createRegistry(w http.ResponseWriter, r *http.Request) error {
	g, _, err := s.vrGroup(r, manage)
	if err != nil {
		return err
	}
	in, err := readParams(r)
	if err != nil {
		return err
	}
	name := in.required("name")
	desc := in.str("description")
	if err := in.err(); err != nil {
		return err
	}
	d := ""
	if desc != nil {
		d = *desc
	}
	reg, err := s.st.CreateRegistry(g.ID, name, d)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, registryJSON(reg))
	return nil
}

// registry finds the {id} registry and checks the caller's access to it.
func (s *Server) registry(r *http.Request, need access) (store.Registry, error) {
	p, err := s.vrAuth(r)
	if err != nil {
		return store.Registry{}, err
	}
	id, err := pathID(r, "id")
	if err != nil {
		return store.Registry{}, err
	}
	reg, err := s.st.Registry(id)
	if err != nil {
		return reg, err
	}
	return reg, s.authorizeGroupID(p, reg.GroupID, need)
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
	assocs := make([]registryAssoc, 0, len(ups))
	for _, u := range ups {
		assocs = append(assocs, registryAssoc{ID: u.Assoc.ID, Position: u.Assoc.Position, UpstreamID: u.ID})
	}
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
	patch := store.RegistryPatch{Name: &name, Description: in.str("description")}
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
	if err := s.st.DeleteRegistry(reg.ID, since); err != nil {
		return err
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
