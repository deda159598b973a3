package admin

import (
	"context"
	"errors"
	"net/http"
	"net/url"

	"registryd/proxy/upstream"
	"registryd/store"
)

func (s *Server) routesUpstreams() {
	groupBase := "/api/v4/groups/{id}/-/virtual_registries/packages/maven"
	s.handle(http.MethodGet, groupBase+"/upstreams", s.listGroupUpstreams)
	s.handle(http.MethodPost, groupBase+"/upstreams/test", s.testNewUpstream)
	s.handle(http.MethodGet, vrBase+"/registries/{id}/upstreams", s.listRegistryUpstreams)
	s.handle(http.MethodPost, vrBase+"/registries/{id}/upstreams", s.createUpstream)
	s.handle(http.MethodGet, vrBase+"/upstreams/{id}", s.getUpstream)
	s.handle(http.MethodPatch, vrBase+"/upstreams/{id}", s.updateUpstream)
	s.handle(http.MethodDelete, vrBase+"/upstreams/{id}", s.deleteUpstream)
	s.handle(http.MethodDelete, vrBase+"/upstreams/{id}/cache", s.purgeUpstreamCache)
	s.handle(http.MethodGet, vrBase+"/upstreams/{id}/test", s.testUpstream)
	s.handle(http.MethodPost, vrBase+"/upstreams/{id}/test", s.testUpstream)
	s.handle(http.MethodPost, vrBase+"/registry_upstreams", s.associate)
	s.handle(http.MethodPatch, vrBase+"/registry_upstreams/{id}", s.moveAssociation)
	s.handle(http.MethodDelete, vrBase+"/registry_upstreams/{id}", s.deleteAssociation)
}

type assocView struct {
	ID         int64 `json:"id"`
	RegistryID int64 `json:"registry_id"`
	Position   int   `json:"position"`
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

type upstreamView struct {
	ID                         int64        `json:"id"`
	Name                       string       `json:"name"`
	Description                string       `json:"description"`
	GroupID                    int64        `json:"group_id"`
	URL                        string       `json:"url"`
	Username                   *string      `json:"username"`
	CacheValidityHours         int          `json:"cache_validity_hours"`
	MetadataCacheValidityHours int          `json:"metadata_cache_validity_hours"`
	CreatedAt                  jsonTime     `json:"created_at"`
	UpdatedAt                  jsonTime     `json:"updated_at"`
	RegistryUpstream           *assocView   `json:"registry_upstream,omitempty"`
	RegistryUpstreams          *[]assocView `json:"registry_upstreams,omitempty"`
}

// upstreamJSON never carries the password.
func upstreamJSON(u store.Upstream) upstreamView {
	return upstreamView{ID: u.ID, Name: u.Name, Description: u.Description, GroupID: u.GroupID, URL: u.URL,
		Username: optString(u.Username), CacheValidityHours: u.CacheValidityHours,
		MetadataCacheValidityHours: u.MetadataCacheValidityHours,
		CreatedAt:                  jsonTime(u.CreatedAt), UpdatedAt: jsonTime(u.UpdatedAt)}
}

func positionedJSON(u store.PositionedUpstream) upstreamView {
	v := upstreamJSON(u.Upstream)
	v.RegistryUpstream = &assocView{ID: u.Assoc.ID, RegistryID: u.Assoc.RegistryID, Position: u.Assoc.Position}
	return v
}

// credentials reads username and password, which come together or not at all.
func (p *params) credentials() (user, pass *string) {
	user, pass = p.str("username"), p.str("password")
	if (user == nil) != (pass == nil) {
		p.fail("username, password provide all or none of parameters")
	}
	return user, pass
}

// checkURL normalises an upstream url and applies the network policy; a bad
// url is a validation error on "url".
func (s *Server) checkURL(ctx context.Context, raw string) (string, error) {
	norm, err := upstream.NormalizeURL(raw)
	if err == nil {
		err = s.up.CheckURL(ctx, norm)
	}
	var ue *upstream.URLError
	if errors.As(err, &ue) {
		v := &store.ValidationError{}
		v.Add("url", ue.Reason)
		return "", v
	}
	return norm, err
}

func (s *Server) listGroupUpstreams(w http.ResponseWriter, r *http.Request) error {
	g, _, err := s.vrGroup(r, read)
	if err != nil {
		return err
	}
	in, err := readParams(r)
	if err != nil {
		return err
	}
	pg := in.page()
	name := in.str("upstream_name")
	if err := in.err(); err != nil {
		return err
	}
	filter := ""
	if name != nil {
		filter = *name
	}
	ups, total, err := s.st.GroupUpstreams(g.ID, filter, pg.Offset(), pg.PerPage)
	if err != nil {
		return err
	}
	out := make([]upstreamView, 0, len(ups))
	for _, u := range ups {
		out = append(out, upstreamJSON(u))
	}
	s.setPageHeaders(w, r, pg, total)
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) listRegistryUpstreams(w http.ResponseWriter, r *http.Request) error {
	reg, err := s.registry(r, read)
	if err != nil {
		return err
	}
	ups, err := s.st.RegistryUpstreams(reg.ID)
	if err != nil {
		return err
	}
	out := make([]upstreamView, 0, len(ups))
	for _, u := range ups {
		out = append(out, positionedJSON(u))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) createUpstream(w http.ResponseWriter, r *http.Request) error {
	reg, err := s.registry(r, manage)
	if err != nil {
		return err
	}
	in, err := readParams(r)
	if err != nil {
		return err
	}
	raw := in.required("url")
	n := store.NewUpstream{
		CacheValidityHours:         in.integer("cache_validity_hours"),
		MetadataCacheValidityHours: in.integer("metadata_cache_validity_hours"),
	}
	name, desc := in.str("name"), in.str("description")
	user, pass := in.credentials()
	if err := in.err(); err != nil {
		return err
	}
	if n.URL, err = s.checkURL(r.Context(), raw); err != nil {
		return err
	}
	if name != nil {
		n.Name = *name
	} else if u, err := url.Parse(n.URL); err == nil {
		// The spec makes name optional; it defaults to the url's host.
		n.Name = u.Hostname()
	}
	if desc != nil {
		n.Description = *desc
	}
	if user != nil {
		n.Username, n.Password = *user, *pass
	}
	u, err := s.st.CreateUpstream(reg.ID, n)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, positionedJSON(u))
	return nil
}

// upstreamByID finds the {id} upstream and checks the caller's access to it.
func (s *Server) upstreamByID(r *http.Request, need access) (store.Upstream, error) {
	p, err := s.vrAuth(r)
	if err != nil {
		return store.Upstream{}, err
	}
	id, err := pathID(r, "id")
	if err != nil {
		return store.Upstream{}, err
	}
	u, err := s.st.Upstream(id)
	if err != nil {
		return u, err
	}
	return u, s.authorizeGroupID(p, u.GroupID, need)
}

func (s *Server) getUpstream(w http.ResponseWriter, r *http.Request) error {
	u, err := s.upstreamByID(r, read)
	if err != nil {
		return err
	}
	assocs, err := s.st.UpstreamAssociations(u.ID)
	if err != nil {
		return err
	}
	list := make([]assocView, 0, len(assocs))
	for _, a := range assocs {
		list = append(list, assocView{ID: a.ID, RegistryID: a.RegistryID, Position: a.Position})
	}
	v := upstreamJSON(u)
	v.RegistryUpstreams = &list
	writeJSON(w, http.StatusOK, v)
	return nil
}

// upstreamPatchFields are the optional fields of an upstream PATCH, in the
// order GitLab names them when none is given.
const upstreamPatchFields = "cache_validity_hours, description, metadata_cache_validity_hours, name, password, url, username"

func (s *Server) updateUpstream(w http.ResponseWriter, r *http.Request) error {
	u, err := s.upstreamByID(r, manage)
	if err != nil {
		return err
	}
	in, err := readParams(r)
	if err != nil {
		return err
	}
	var p store.UpstreamPatch
	p.CacheValidityHours = in.integer("cache_validity_hours")
	p.MetadataCacheValidityHours = in.integer("metadata_cache_validity_hours")
	p.Description = in.str("description")
	p.Name = in.str("name")
	p.URL = in.str("url")
	p.Username, p.Password = in.credentials()
	if p.CacheValidityHours == nil && p.MetadataCacheValidityHours == nil && p.Description == nil &&
		p.Name == nil && p.URL == nil && p.Username == nil && p.Password == nil && len(in.errs) == 0 {
		in.fail(upstreamPatchFields + " are missing, at least one parameter must be provided")
	}
	if p.Name != nil && *p.Name == "" {
		in.fail("name is empty")
	}
	if p.URL != nil && *p.URL == "" {
		in.fail("url is empty")
	}
	if err := in.err(); err != nil {
		return err
	}
	if p.URL != nil {
		norm, err := s.checkURL(r.Context(), *p.URL)
		if err != nil {
			return err
		}
		p.URL = &norm
	}
	updated, err := s.st.UpdateUpstream(u.ID, p)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, upstreamJSON(updated))
	return nil
}

func (s *Server) deleteUpstream(w http.ResponseWriter, r *http.Request) error {
	u, err := s.upstreamByID(r, manage)
	if err != nil {
		return err
	}
	if err := s.st.DeleteUpstream(u.ID); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) purgeUpstreamCache(w http.ResponseWriter, r *http.Request) error {
	u, err := s.upstreamByID(r, manage)
	if err != nil {
		return err
	}
	if _, err := s.st.PurgeUpstreamCache(u.ID); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// testNewUpstream tests a url and credentials before an upstream exists. It
// needs read access only, as in GitLab.
func (s *Server) testNewUpstream(w http.ResponseWriter, r *http.Request) error {
	if _, _, err := s.vrGroup(r, read); err != nil {
		return err
	}
	in, err := readParams(r)
	if err != nil {
		return err
	}
	raw := in.required("url")
	user, pass := in.credentials()
	if err := in.err(); err != nil {
		return err
	}
	ep := upstream.Endpoint{}
	if ep.URL, err = s.checkURL(r.Context(), raw); err != nil {
		return err
	}
	if user != nil {
		ep.Username, ep.Password = *user, *pass
	}
	writeJSON(w, http.StatusOK, s.up.Test(r.Context(), ep, upstream.DefaultTestPath))
	return nil
}

// testUpstream tests an existing upstream (GET), or with overrides (POST):
// a url (with both credentials or none), or credentials alone against the
// stored url.
func (s *Server) testUpstream(w http.ResponseWriter, r *http.Request) error {
	u, err := s.upstreamByID(r, read)
	if err != nil {
		return err
	}
	ep := upstream.Endpoint{URL: u.URL, Username: u.Username, Password: u.Password}
	if r.Method == http.MethodPost {
		in, err := readParams(r)
		if err != nil {
			return err
		}
		raw := in.str("url")
		user, pass := in.credentials()
		if err := in.err(); err != nil {
			return err
		}
		if raw != nil {
			if ep.URL, err = s.checkURL(r.Context(), *raw); err != nil {
				return err
			}
			// A new url never gets the stored credentials.
			ep.Username, ep.Password = "", ""
		}
		if user != nil {
			ep.Username, ep.Password = *user, *pass
		}
	}
	path := upstream.DefaultTestPath
	if entries, _, err := s.st.ListCacheEntries(u.ID, "", 0, 1); err == nil && len(entries) > 0 {
		path = entries[0].RelativePath[1:]
	}
	writeJSON(w, http.StatusOK, s.up.Test(r.Context(), ep, path))
	return nil
}

func (s *Server) associate(w http.ResponseWriter, r *http.Request) error {
	p, err := s.vrAuth(r)
	if err != nil {
		return err
	}
	in, err := readParams(r)
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
	p, err := s.vrAuth(r)
	if err != nil {
		return store.RegistryUpstream{}, err
	}
	id, err := pathID(r, "id")
	if err != nil {
		return store.RegistryUpstream{}, err
	}
	a, err := s.st.Association(id)
	if err != nil {
		return a, err
	}
	reg, err := s.st.Registry(a.RegistryID)
	if err != nil {
		return a, err
	}
	return a, s.authorizeGroupID(p, reg.GroupID, manage)
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
	w.WriteHeader(http.StatusNoContent)
	return nil
}
