package admin

import (
	"net/http"

	"registryd/auth"
	"registryd/store"
)

func (s *Server) routesGroups() {
	s.handle(http.MethodPost, "/api/v4/groups", s.createGroup)
	s.handle(http.MethodGet, "/api/v4/groups/{id}", s.getGroup)
}

type groupView struct {
	ID          int64    `json:"id"`
	Name        string   `json:"name"`
	Path        string   `json:"path"`
	Description string   `json:"description"`
	Visibility  string   `json:"visibility"`
	FullName    string   `json:"full_name"`
	FullPath    string   `json:"full_path"`
	ParentID    *int64   `json:"parent_id"`
	WebURL      string   `json:"web_url"`
	CreatedAt   jsonTime `json:"created_at"`
}

func (s *Server) groupView(g store.Group) groupView {
	v := groupView{ID: g.ID, Name: g.Name, Path: g.Path, Description: g.Description, Visibility: g.Visibility,
		FullName: g.FullName, FullPath: g.FullPath, WebURL: s.webURL("groups/" + g.FullPath), CreatedAt: jsonTime(g.CreatedAt)}
	if g.ParentID != 0 {
		pid := g.ParentID
		v.ParentID = &pid
	}
	return v
}

func (s *Server) createGroup(w http.ResponseWriter, r *http.Request) error {
	p, in, err := authParams(r, s.authenticate)
	if err != nil {
		return err
	}
	n := store.NewGroup{Name: in.required("name"), Path: in.required("path"), CreatorID: p.UserID()}
	if v := in.oneOf("visibility", store.Private, store.Internal, store.Public); v != nil {
		n.Visibility = *v
	}
	if d := in.str("description"); d != nil {
		n.Description = *d
	}
	if pid := in.integer("parent_id"); pid != nil {
		n.ParentID = int64(*pid)
	}
	if err := in.err(); err != nil {
		return err
	}
	if n.ParentID != 0 {
		parent, err := s.st.Group(n.ParentID)
		if err != nil {
			return err
		}
		if !s.canSeeGroup(p, parent) {
			return message(http.StatusNotFound, "404 Parent Group Not Found")
		}
		if s.auth.GroupLevel(p, parent.ID) < store.Maintainer {
			return errForbidden
		}
	}
	g, err := s.st.CreateGroup(n)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, s.groupView(g))
	return nil
}

// canSeeGroup: public groups are visible to all, internal ones to signed-in
// users, private ones to members of the group or of anything inside it.
func (s *Server) canSeeGroup(p auth.Principal, g store.Group) bool {
	switch {
	case p.IsAdmin(), g.Visibility == store.Public:
		return true
	case g.Visibility == store.Internal && p.Kind == auth.PersonalToken:
		return true
	}
	if s.auth.GroupLevel(p, g.ID) >= store.Guest {
		return true
	}
	top, err := s.st.TopLevelGroup(g.ID)
	return err == nil && top.ID == g.ID && s.auth.CanReadRegistries(p, top.ID)
}

// groupRef resolves the {id} path parameter: an id or a URL-encoded full path.
func (s *Server) groupRef(r *http.Request) (store.Group, error) {
	return s.st.GroupByRef(r.PathValue("id"))
}

// visibleGroup resolves {id} to a group the caller can see; others are 404
// as if they did not exist.
func (s *Server) visibleGroup(r *http.Request, p auth.Principal) (store.Group, error) {
	g, err := s.groupRef(r)
	if err != nil {
		return g, err
	}
	if !s.canSeeGroup(p, g) {
		return g, errGroupNotFound
	}
	return g, nil
}

func (s *Server) getGroup(w http.ResponseWriter, r *http.Request) error {
	p, err := s.authenticate(r)
	if err != nil {
		return err
	}
	g, err := s.visibleGroup(r, p)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, s.groupView(g))
	return nil
}
