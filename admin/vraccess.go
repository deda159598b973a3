package admin

import (
	"net/http"

	"registryd/auth"
	"registryd/store"
)

// The virtual registry endpoints: those of a group, and those of a record
// addressed by its id.
const (
	vrGroupBase = "/api/v4/groups/{id}/-/virtual_registries/packages/maven"
	vrBase      = "/api/v4/virtual_registries/packages/maven"
)

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
	g, p, err := s.vrGroupOrSubgroup(r)
	if err != nil {
		return g, p, err
	}
	if !g.TopLevel() {
		return g, p, store.ErrNotTopLevel
	}
	return g, p, s.authorizeVR(p, g, need)
}

// vrGroupOrSubgroup runs vrGroup's checks up to the top-level rule, for an
// endpoint that lets the model refuse a subgroup: registry POST, whose
// subgroup answer in GitLab is the Registry model's validation error
// ({"message":{"group":["must be a top level Group"]}}) after the
// permission check, not the group endpoints' "only available on top-level
// groups".
func (s *Server) vrGroupOrSubgroup(r *http.Request) (store.Group, auth.Principal, error) {
	g, err := s.groupRef(r)
	if err != nil {
		return g, auth.Principal{}, err
	}
	p, err := s.vrAuth(r)
	if err != nil {
		return g, p, err
	}
	if !s.canSeeGroup(p, g) {
		return g, p, errGroupNotFound
	}
	return g, p, nil
}

// vrAuth is the gate and authentication of an endpoint addressed by a record id.
func (s *Server) vrAuth(r *http.Request) (auth.Principal, error) {
	return s.authenticateGated(r, s.auth.VirtualRegistryEnabled())
}

// vrRecord runs the checks of an endpoint addressed by a record id in
// GitLab's order: the gate and authentication, the id, the record, then
// access to the group that owns it. find looks the record up and names its
// group.
func vrRecord[T any](s *Server, r *http.Request, need access, find func(id int64) (T, int64, error)) (T, error) {
	var zero T
	p, err := s.vrAuth(r)
	if err != nil {
		return zero, err
	}
	id, err := pathID(r, "id")
	if err != nil {
		return zero, err
	}
	rec, group, err := find(id)
	if err != nil {
		return rec, err
	}
	return rec, s.authorizeGroupID(p, group, need)
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
