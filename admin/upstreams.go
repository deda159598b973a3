package admin

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"

	"registryd/store"
	"registryd/upstream"
)

func (s *Server) routesUpstreams() {
	s.handle(http.MethodGet, vrGroupBase+"/upstreams", s.listGroupUpstreams)
	s.handle(http.MethodPost, vrGroupBase+"/upstreams/test", s.testNewUpstream)
	s.handle(http.MethodGet, vrBase+"/registries/{id}/upstreams", s.listRegistryUpstreams)
	s.handle(http.MethodPost, vrBase+"/registries/{id}/upstreams", s.createUpstream)
	s.handle(http.MethodGet, vrBase+"/upstreams/{id}", s.getUpstream)
	s.handle(http.MethodPatch, vrBase+"/upstreams/{id}", s.updateUpstream)
	s.handle(http.MethodDelete, vrBase+"/upstreams/{id}", s.deleteUpstream)
	s.handle(http.MethodDelete, vrBase+"/upstreams/{id}/cache", s.purgeUpstreamCache)
	s.handle(http.MethodGet, vrBase+"/upstreams/{id}/test", s.testUpstream)
	s.handle(http.MethodPost, vrBase+"/upstreams/{id}/test", s.testUpstream)
}

type assocView struct {
	ID         int64 `json:"id"`
	RegistryID int64 `json:"registry_id"`
	Position   int   `json:"position"`
}

// upstreamView is the spec's Upstream registry in GitLab's field order, plus
// registryd's own fields, which GitLab clients ignore: checksum_policy,
// not_found_cache_minutes and metadata_not_found_cache_minutes (the
// upstream's overrides of upstreams.checksum_policy, not_found_ttl and
// metadata_not_found_ttl, null when it follows the global setting), and its
// health (upstreamHealthView).
type upstreamView struct {
	ID                           int64    `json:"id"`
	Name                         string   `json:"name"`
	Description                  string   `json:"description"`
	GroupID                      int64    `json:"group_id"`
	URL                          string   `json:"url"`
	Username                     *string  `json:"username"`
	CacheValidityHours           int      `json:"cache_validity_hours"`
	MetadataCacheValidityHours   int      `json:"metadata_cache_validity_hours"`
	CreatedAt                    jsonTime `json:"created_at"`
	UpdatedAt                    jsonTime `json:"updated_at"`
	ChecksumPolicy               *string  `json:"checksum_policy"`
	NotFoundCacheMinutes         *int     `json:"not_found_cache_minutes"`
	MetadataNotFoundCacheMinutes *int     `json:"metadata_not_found_cache_minutes"`
	upstreamHealthView
	RegistryUpstream  *assocView   `json:"registry_upstream,omitempty"`
	RegistryUpstreams *[]assocView `json:"registry_upstreams,omitempty"`
}

// upstreamJSON never carries the password.
func (s *Server) upstreamJSON(u store.Upstream) upstreamView {
	return upstreamView{
		ID: u.ID, Name: u.Name, Description: u.Description, GroupID: u.GroupID, URL: u.URL,
		Username:                     optString(u.Username),
		CacheValidityHours:           u.CacheValidityHours,
		MetadataCacheValidityHours:   u.MetadataCacheValidityHours,
		CreatedAt:                    jsonTime(u.CreatedAt),
		UpdatedAt:                    jsonTime(u.UpdatedAt),
		ChecksumPolicy:               optString(u.ChecksumPolicy),
		NotFoundCacheMinutes:         u.NotFoundCacheMinutes,
		MetadataNotFoundCacheMinutes: u.MetadataNotFoundCacheMinutes,
		upstreamHealthView:           s.upstreamHealthJSON(u.ID),
	}
}

func (s *Server) positionedJSON(u store.PositionedUpstream) upstreamView {
	v := s.upstreamJSON(u.Upstream)
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

// checksumPolicy reads the optional checksum_policy: nil when absent; "" for
// "" or null, which on PATCH clears the override. Whether a string is one of
// the policies is the store's validation (400 {"message": {"checksum_policy":
// ["is invalid"]}}); a value that is not a string at all is a parameter error.
func (p *params) checksumPolicy() *string {
	v, ok := p.values["checksum_policy"]
	if !ok {
		return nil
	}
	policy, isString := v.(string)
	if v != nil && !isString {
		p.fail("checksum_policy is invalid")
		return nil
	}
	return &policy
}

// notFoundMinutes reads an optional negative-cache override
// (not_found_cache_minutes, metadata_not_found_cache_minutes): nil when
// absent; a pointer to nil for null or "" (a form body cannot say null),
// which follows the global setting and on PATCH clears the override; else
// a pointer to the integer. Its range is the store's validation (400
// {"message": {field: [...]}}); a value that is no integer at all is a
// parameter error.
func (p *params) notFoundMinutes(name string) **int {
	v, ok := p.values[name]
	if !ok {
		return nil
	}
	if str, isString := v.(string); v == nil || (isString && str == "") {
		var none *int
		return &none
	}
	n := p.integer(name)
	if n == nil {
		return nil
	}
	return &n
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

// splitUserinfo takes credentials written into an upstream url
// (https://user:pass@host/...) out of it: the url is returned without them
// and they become the upstream's username and password, so the password is
// sealed at rest like any other and never shown again (the url is
// returned by every read of the upstream). ok is false when the url has
// none.
func splitUserinfo(norm string) (base, user, pass string, ok bool) {
	u, err := url.Parse(norm)
	if err != nil || u.User == nil {
		return norm, "", "", false
	}
	user = u.User.Username()
	pass, _ = u.User.Password()
	u.User = nil
	return u.String(), user, pass, true
}

func (s *Server) listGroupUpstreams(w http.ResponseWriter, r *http.Request) error {
	g, _, err := s.vrGroup(r, read)
	if err != nil {
		return err
	}
	pg, name, err := readListParams(r, "upstream_name")
	if err != nil {
		return err
	}
	ups, total, err := s.st.GroupUpstreams(g.ID, deref(name), pg.Offset(), pg.PerPage)
	if err != nil {
		return err
	}
	s.writePage(w, r, pg, total, mapViews(ups, s.upstreamJSON))
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
	writeJSON(w, http.StatusOK, mapViews(ups, s.positionedJSON))
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
	n.ChecksumPolicy = deref(in.checksumPolicy())
	n.NotFoundCacheMinutes = deref(in.notFoundMinutes("not_found_cache_minutes"))
	n.MetadataNotFoundCacheMinutes = deref(in.notFoundMinutes("metadata_not_found_cache_minutes"))
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
	if base, iu, ip, ok := splitUserinfo(n.URL); ok {
		n.URL, n.Username, n.Password = base, iu, ip
	}
	if user != nil {
		n.Username, n.Password = *user, *pass
	}
	u, err := s.st.CreateUpstream(reg.ID, n)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, s.positionedJSON(u))
	return nil
}

// upstreamByID finds the {id} upstream and checks the caller's access to it.
func (s *Server) upstreamByID(r *http.Request, need access) (store.Upstream, error) {
	return vrRecord(s, r, need, func(id int64) (store.Upstream, int64, error) {
		u, err := s.st.Upstream(id)
		return u, u.GroupID, err
	})
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
	list := mapViews(assocs, func(a store.RegistryUpstream) assocView {
		return assocView{ID: a.ID, RegistryID: a.RegistryID, Position: a.Position}
	})
	v := s.upstreamJSON(u)
	v.RegistryUpstreams = &list
	writeJSON(w, http.StatusOK, v)
	return nil
}

// upstreamPatchFields are the optional fields of an upstream PATCH, in the
// order GitLab names them when none is given. registryd's own
// (checksum_policy, not_found_cache_minutes,
// metadata_not_found_cache_minutes) count as fields but stay out of the
// message, which is GitLab's.
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
	p.ChecksumPolicy = in.checksumPolicy()
	p.NotFoundCacheMinutes = in.notFoundMinutes("not_found_cache_minutes")
	p.MetadataNotFoundCacheMinutes = in.notFoundMinutes("metadata_not_found_cache_minutes")
	if p.CacheValidityHours == nil && p.MetadataCacheValidityHours == nil && p.Description == nil &&
		p.Name == nil && p.URL == nil && p.Username == nil && p.Password == nil && p.ChecksumPolicy == nil &&
		p.NotFoundCacheMinutes == nil && p.MetadataNotFoundCacheMinutes == nil && len(in.errs) == 0 {
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
		if base, iu, ip, ok := splitUserinfo(norm); ok {
			norm = base
			if p.Username == nil && p.Password == nil {
				p.Username, p.Password = &iu, &ip
			}
		}
		p.URL = &norm
	}
	updated, err := s.st.UpdateUpstream(u.ID, p)
	if err != nil {
		return err
	}
	if updated.URL != u.URL {
		// A new url is a new server: what its predecessor did says nothing.
		s.health.Forget(u.ID)
	}
	writeJSON(w, http.StatusOK, s.upstreamJSON(updated))
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
	s.health.Forget(u.ID)
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
	ep := upstream.Endpoint{Username: deref(user), Password: deref(pass)}
	v := &store.ValidationError{}
	norm, err := s.checkURL(r.Context(), raw)
	if !errors.As(err, &v) && err != nil {
		return err
	}
	ep.URL = norm
	if err := validTestCredentials(v, &ep); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, s.up.Test(r.Context(), ep, upstream.DefaultTestPath))
	return nil
}

// testUpstream tests an existing upstream (GET), or with overrides (POST).
// The overrides are GitLab's: a url that differs from the stored one
// (after normalisation) or credentials that differ from the stored ones
// make a new, unsaved upstream of the url (the given one, else the stored
// one) and the given credentials only, never the stored ones; it is
// validated as the model validates one (a url refused as on create, a
// username without a password or the reverse:
// {"message":{"password":["can't be blank"]}}). A blank url is a parameter
// error ({"error":"url is empty"}, Grape's allow_blank: false). A blank
// password is no change of password, so the stored username with an empty
// password tests the stored upstream.
func (s *Server) testUpstream(w http.ResponseWriter, r *http.Request) error {
	u, err := s.upstreamByID(r, read)
	if err != nil {
		return err
	}
	ep := upstream.Endpoint{URL: u.URL, Username: u.Username, Password: u.Password}
	if r.Method == http.MethodPost {
		if ep, err = s.testOverrides(r, u); err != nil {
			return err
		}
	}
	path := upstream.DefaultTestPath
	if entries, _, err := s.st.ListCacheEntries(u.ID, "", 0, 1); err == nil && len(entries) > 0 {
		path = entries[0].RelativePath[1:]
	}
	writeJSON(w, http.StatusOK, s.up.Test(r.Context(), ep, path))
	return nil
}

// testOverrides is the endpoint POST …/upstreams/:id/test tests: u's, or
// the unsaved upstream its overrides make (see testUpstream).
func (s *Server) testOverrides(r *http.Request, u store.Upstream) (upstream.Endpoint, error) {
	stored := upstream.Endpoint{URL: u.URL, Username: u.Username, Password: u.Password}
	in, err := readParams(r)
	if err != nil {
		return stored, err
	}
	raw := in.str("url")
	if raw != nil && strings.TrimSpace(*raw) == "" {
		in.fail("url is empty")
	}
	user, pass := in.str("username"), in.str("password")
	if err := in.err(); err != nil {
		return stored, err
	}
	ep := upstream.Endpoint{URL: u.URL, Username: deref(user), Password: deref(pass)}
	v := &store.ValidationError{}
	urlChanged := false
	if raw != nil {
		norm, err := s.checkURL(r.Context(), *raw)
		var ve *store.ValidationError
		switch {
		case errors.As(err, &ve):
			v = ve
			urlChanged = true
		case err != nil:
			return stored, err
		default:
			ep.URL, urlChanged = norm, norm != u.URL
		}
	}
	userChanged := user != nil && *user != u.Username
	passChanged := pass != nil && *pass != "" && *pass != u.Password
	if !urlChanged && !userChanged && !passChanged {
		return stored, nil
	}
	if err := validTestCredentials(v, &ep); err != nil {
		return stored, err
	}
	return ep, nil
}

// validTestCredentials validates the credentials of an unsaved upstream
// to test as GitLab's model validates them, adding to v what it finds (v
// may hold the url's errors already), and returns v's errors. Blank
// credentials are none: GitLab sends Basic credentials only when both are
// present.
func validTestCredentials(v *store.ValidationError, ep *upstream.Endpoint) error {
	user, pass := strings.TrimSpace(ep.Username) != "", strings.TrimSpace(ep.Password) != ""
	switch {
	case user && !pass:
		v.Add("password", "can't be blank")
	case pass && !user:
		v.Add("username", "can't be blank")
	}
	for _, f := range []struct{ name, value string }{{"username", ep.Username}, {"password", ep.Password}} {
		if utf8.RuneCountInString(f.value) > 510 {
			v.Add(f.name, "is too long (maximum is 510 characters)")
		}
	}
	if !user || !pass {
		ep.Username, ep.Password = "", ""
	}
	return v.Err()
}
