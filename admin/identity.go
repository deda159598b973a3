package admin

import (
	"errors"
	"net/http"
	"time"

	"registryd/auth"
	"registryd/store"
)

func (s *Server) routesIdentity() {
	s.handle(http.MethodPost, "/api/v4/users", s.createUser)
	s.handle(http.MethodGet, "/api/v4/users", s.listUsers)
	s.handle(http.MethodGet, "/api/v4/users/{id}", s.getUser)
	s.handle(http.MethodGet, "/api/v4/user", s.currentUser)
	s.handle(http.MethodPost, "/api/v4/users/{id}/personal_access_tokens", s.createToken)
	s.handle(http.MethodDelete, "/api/v4/personal_access_tokens/{id}", s.revokeToken)

	s.handle(http.MethodPost, "/api/v4/groups", s.createGroup)
	s.handle(http.MethodGet, "/api/v4/groups/{id}", s.getGroup)
	s.handle(http.MethodPost, "/api/v4/groups/{id}/members", s.addGroupMember)
	s.handle(http.MethodDelete, "/api/v4/groups/{id}/members/{user_id}", s.removeGroupMember)
	s.handle(http.MethodPost, "/api/v4/groups/{id}/deploy_tokens", s.createDeployToken)

	s.handle(http.MethodPost, "/api/v4/projects", s.createProject)
	s.handle(http.MethodGet, "/api/v4/projects/{id}", s.getProject)
	s.handle(http.MethodPost, "/api/v4/projects/{id}/members", s.addProjectMember)
	s.handle(http.MethodDelete, "/api/v4/projects/{id}/members/{user_id}", s.removeProjectMember)
}

// --- users ---

type userView struct {
	userSummary
	CreatedAt jsonTime `json:"created_at"`
	Email     string   `json:"email,omitempty"`
	IsAdmin   *bool    `json:"is_admin,omitempty"`
}

// userView shows email and admin flag to admins and to the user themself, as GitLab does.
func (s *Server) userView(u store.User, viewer auth.Principal) userView {
	v := userView{userSummary: s.userSummary(u), CreatedAt: jsonTime(u.CreatedAt)}
	if viewer.IsAdmin() || viewer.UserID() == u.ID {
		v.Email = u.Email
		admin := u.Admin
		v.IsAdmin = &admin
	}
	return v
}

func (s *Server) createUser(w http.ResponseWriter, r *http.Request) error {
	p, err := s.requireAdmin(r)
	if err != nil {
		return err
	}
	in, err := readParams(r)
	if err != nil {
		return err
	}
	n := store.NewUser{
		Username: in.required("username"),
		Name:     in.required("name"),
		Email:    in.required("email"),
	}
	if pw := in.str("password"); pw != nil {
		n.Password = *pw
	}
	if a := in.boolean("admin"); a != nil {
		n.Admin = *a
	}
	if err := in.err(); err != nil {
		return err
	}
	u, err := s.st.CreateUser(n)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, s.userView(u, p))
	return nil
}

func (s *Server) listUsers(w http.ResponseWriter, r *http.Request) error {
	p, err := s.authenticateScopes(r, readUserScopes)
	if err != nil {
		return err
	}
	in, err := readParams(r)
	if err != nil {
		return err
	}
	pg := in.page()
	username := in.str("username")
	if err := in.err(); err != nil {
		return err
	}
	var users []store.User
	total := 0
	if username != nil {
		u, err := s.st.UserByUsername(*username)
		switch {
		case errors.Is(err, store.ErrNotFound):
		case err != nil:
			return err
		default:
			total = 1
			if pg.Offset() == 0 {
				users = append(users, u)
			}
		}
	} else {
		if users, total, err = s.st.ListUsers(pg.Offset(), pg.PerPage); err != nil {
			return err
		}
	}
	out := make([]userView, 0, len(users))
	for _, u := range users {
		out = append(out, s.userView(u, p))
	}
	s.setPageHeaders(w, r, pg, total)
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) getUser(w http.ResponseWriter, r *http.Request) error {
	p, err := s.authenticateScopes(r, readUserScopes)
	if err != nil {
		return err
	}
	id, err := pathID(r, "id")
	if err != nil {
		return err
	}
	u, err := s.st.User(id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, s.userView(u, p))
	return nil
}

func (s *Server) currentUser(w http.ResponseWriter, r *http.Request) error {
	p, err := s.authenticateScopes(r, readUserScopes)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, s.userView(p.User, p))
	return nil
}

// --- personal access tokens ---

type tokenView struct {
	ID         int64     `json:"id"`
	Name       string    `json:"name"`
	Revoked    bool      `json:"revoked"`
	CreatedAt  jsonTime  `json:"created_at"`
	Scopes     []string  `json:"scopes"`
	UserID     int64     `json:"user_id"`
	LastUsedAt *jsonTime `json:"last_used_at"`
	Active     bool      `json:"active"`
	ExpiresAt  *jsonDate `json:"expires_at"`
	Token      string    `json:"token,omitempty"`
}

func (s *Server) createToken(w http.ResponseWriter, r *http.Request) error {
	if _, err := s.requireAdmin(r); err != nil {
		return err
	}
	id, err := pathID(r, "id")
	if err != nil {
		return err
	}
	in, err := readParams(r)
	if err != nil {
		return err
	}
	name := in.required("name")
	if !in.has("scopes") {
		in.fail("scopes is missing")
	}
	scopes := in.strings("scopes")
	expires := in.date("expires_at")
	if err := in.err(); err != nil {
		return err
	}
	plain := auth.NewTokenValue("rdpat-")
	t, err := s.st.CreateToken(store.NewToken{UserID: id, Name: name, Scopes: scopes, ExpiresAt: expires, Plain: plain})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, tokenView{ID: t.ID, Name: t.Name, CreatedAt: jsonTime(t.CreatedAt),
		Scopes: t.Scopes, UserID: t.UserID, Active: true, ExpiresAt: optDate(t.ExpiresAt), Token: plain})
	return nil
}

// revokeToken lets admins revoke any token and users their own.
func (s *Server) revokeToken(w http.ResponseWriter, r *http.Request) error {
	p, err := s.authenticate(r)
	if err != nil {
		return err
	}
	id, err := pathID(r, "id")
	if err != nil {
		return err
	}
	t, err := s.st.Token(id)
	if err != nil {
		return err
	}
	if !p.IsAdmin() && t.UserID != p.UserID() {
		return errRecordMissing
	}
	if err := s.st.RevokeToken(id); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// --- groups ---

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
	p, err := s.authenticate(r)
	if err != nil {
		return err
	}
	in, err := readParams(r)
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

func (s *Server) getGroup(w http.ResponseWriter, r *http.Request) error {
	p, err := s.authenticate(r)
	if err != nil {
		return err
	}
	g, err := s.groupRef(r)
	if err != nil {
		return err
	}
	if !s.canSeeGroup(p, g) {
		return message(http.StatusNotFound, "404 Group Not Found")
	}
	writeJSON(w, http.StatusOK, s.groupView(g))
	return nil
}

type memberView struct {
	userSummary
	AccessLevel int       `json:"access_level"`
	CreatedAt   jsonTime  `json:"created_at"`
	ExpiresAt   *jsonDate `json:"expires_at"`
}

func (s *Server) memberView(m store.Member) (memberView, error) {
	u, err := s.st.User(m.UserID)
	if err != nil {
		return memberView{}, err
	}
	return memberView{userSummary: s.userSummary(u), AccessLevel: m.AccessLevel,
		CreatedAt: jsonTime(m.CreatedAt), ExpiresAt: optDate(m.ExpiresAt)}, nil
}

// memberParams reads user_id, access_level and expires_at.
func memberParams(r *http.Request) (user int64, level int, expires *time.Time, err error) {
	in, err := readParams(r)
	if err != nil {
		return 0, 0, nil, err
	}
	if !in.has("user_id") {
		in.fail("user_id is missing")
	}
	if !in.has("access_level") {
		in.fail("access_level is missing")
	}
	uid := in.integer("user_id")
	lvl := in.integer("access_level")
	expires = in.date("expires_at")
	if lvl != nil && !store.ValidAccessLevel(*lvl) {
		in.fail("access_level does not have a valid value")
	}
	if err := in.err(); err != nil {
		return 0, 0, nil, err
	}
	return int64(*uid), *lvl, expires, nil
}

// canManageMembers: maintainers may add members up to maintainer; adding or
// removing owners needs an owner (or an admin).
func canManageMembers(callerLevel, level int) error {
	if callerLevel < store.Maintainer {
		return errForbidden
	}
	if level > callerLevel {
		return errForbidden
	}
	return nil
}

func (s *Server) addGroupMember(w http.ResponseWriter, r *http.Request) error {
	p, err := s.authenticate(r)
	if err != nil {
		return err
	}
	g, err := s.groupRef(r)
	if err != nil {
		return err
	}
	if !s.canSeeGroup(p, g) {
		return message(http.StatusNotFound, "404 Group Not Found")
	}
	user, level, expires, err := memberParams(r)
	if err != nil {
		return err
	}
	if err := canManageMembers(s.auth.GroupLevel(p, g.ID), level); err != nil {
		return err
	}
	m, err := s.st.AddGroupMember(g.ID, user, level, expires)
	if err != nil {
		return err
	}
	v, err := s.memberView(m)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, v)
	return nil
}

func (s *Server) removeGroupMember(w http.ResponseWriter, r *http.Request) error {
	p, err := s.authenticate(r)
	if err != nil {
		return err
	}
	g, err := s.groupRef(r)
	if err != nil {
		return err
	}
	if !s.canSeeGroup(p, g) {
		return message(http.StatusNotFound, "404 Group Not Found")
	}
	user, err := pathID(r, "user_id")
	if err != nil {
		return err
	}
	if err := canManageMembers(s.auth.GroupLevel(p, g.ID), s.st.GroupAccessLevel(g.ID, user)); err != nil {
		return err
	}
	if err := s.st.RemoveGroupMember(g.ID, user); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

type deployTokenView struct {
	ID        int64     `json:"id"`
	Name      string    `json:"name"`
	Username  string    `json:"username"`
	ExpiresAt *jsonTime `json:"expires_at"`
	Scopes    []string  `json:"scopes"`
	Revoked   bool      `json:"revoked"`
	Expired   bool      `json:"expired"`
	Token     string    `json:"token,omitempty"`
}

func (s *Server) createDeployToken(w http.ResponseWriter, r *http.Request) error {
	p, err := s.authenticate(r)
	if err != nil {
		return err
	}
	g, err := s.groupRef(r)
	if err != nil {
		return err
	}
	if !s.canSeeGroup(p, g) {
		return message(http.StatusNotFound, "404 Group Not Found")
	}
	if s.auth.GroupLevel(p, g.ID) < store.Maintainer {
		return errForbidden
	}
	in, err := readParams(r)
	if err != nil {
		return err
	}
	n := store.NewDeployToken{GroupID: g.ID, Name: in.required("name")}
	if !in.has("scopes") {
		in.fail("scopes is missing")
	}
	n.Scopes = in.strings("scopes")
	for _, sc := range n.Scopes {
		if sc != store.ScopeReadVirtualRegistry {
			in.fail("scopes does not have a valid value")
			break
		}
	}
	if u := in.str("username"); u != nil {
		n.Username = *u
	}
	n.ExpiresAt = in.date("expires_at")
	if err := in.err(); err != nil {
		return err
	}
	n.Plain = auth.NewTokenValue("rddt-")
	t, err := s.st.CreateDeployToken(n)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, deployTokenView{ID: t.ID, Name: t.Name, Username: t.Username,
		ExpiresAt: optTime(t.ExpiresAt), Scopes: t.Scopes, Token: n.Plain})
	return nil
}

// --- projects ---

type projectView struct {
	ID                int64  `json:"id"`
	Name              string `json:"name"`
	Path              string `json:"path"`
	Description       string `json:"description"`
	Visibility        string `json:"visibility"`
	NameWithNamespace string `json:"name_with_namespace"`
	PathWithNamespace string `json:"path_with_namespace"`
	Namespace         struct {
		ID       int64  `json:"id"`
		Name     string `json:"name"`
		Path     string `json:"path"`
		Kind     string `json:"kind"`
		FullPath string `json:"full_path"`
	} `json:"namespace"`
	CreatorID int64    `json:"creator_id"`
	WebURL    string   `json:"web_url"`
	CreatedAt jsonTime `json:"created_at"`
}

func (s *Server) projectView(pr store.Project) (projectView, error) {
	ns, err := s.st.Group(pr.NamespaceID)
	if err != nil {
		return projectView{}, err
	}
	v := projectView{ID: pr.ID, Name: pr.Name, Path: pr.Path, Description: pr.Description, Visibility: pr.Visibility,
		NameWithNamespace: pr.FullName, PathWithNamespace: pr.FullPath, CreatorID: pr.CreatorID,
		WebURL: s.webURL(pr.FullPath), CreatedAt: jsonTime(pr.CreatedAt)}
	v.Namespace.ID, v.Namespace.Name, v.Namespace.Path, v.Namespace.Kind, v.Namespace.FullPath = ns.ID, ns.Name, ns.Path, "group", ns.FullPath
	return v, nil
}

func (s *Server) createProject(w http.ResponseWriter, r *http.Request) error {
	p, err := s.authenticate(r)
	if err != nil {
		return err
	}
	in, err := readParams(r)
	if err != nil {
		return err
	}
	n := store.NewProject{Name: in.required("name"), CreatorID: p.UserID()}
	if v := in.str("path"); v != nil {
		n.Path = *v
	}
	if d := in.str("description"); d != nil {
		n.Description = *d
	}
	if v := in.oneOf("visibility", store.Private, store.Internal, store.Public); v != nil {
		n.Visibility = *v
	}
	if !in.has("namespace_id") {
		in.fail("namespace_id is missing")
	}
	if ns := in.integer("namespace_id"); ns != nil {
		n.NamespaceID = int64(*ns)
	}
	if err := in.err(); err != nil {
		return err
	}
	ns, err := s.st.Group(n.NamespaceID)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return message(http.StatusNotFound, "404 Namespace Not Found")
		}
		return err
	}
	if !s.canSeeGroup(p, ns) {
		return message(http.StatusNotFound, "404 Namespace Not Found")
	}
	if s.auth.GroupLevel(p, ns.ID) < store.Developer {
		return errForbidden
	}
	pr, err := s.st.CreateProject(n)
	if err != nil {
		return err
	}
	v, err := s.projectView(pr)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, v)
	return nil
}

// visibleProject resolves {id} (an id or URL-encoded path) to a project the
// caller can see; others are 404 as if they did not exist.
func (s *Server) visibleProject(r *http.Request, p auth.Principal) (store.Project, error) {
	pr, err := s.st.ProjectByRef(r.PathValue("id"))
	if err != nil {
		return pr, err
	}
	if !p.IsAdmin() && !s.auth.CanSeeProject(p, pr) {
		return pr, message(http.StatusNotFound, "404 Project Not Found")
	}
	return pr, nil
}

func (s *Server) getProject(w http.ResponseWriter, r *http.Request) error {
	p, err := s.authenticate(r)
	if err != nil {
		return err
	}
	pr, err := s.visibleProject(r, p)
	if err != nil {
		return err
	}
	v, err := s.projectView(pr)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, v)
	return nil
}

func (s *Server) addProjectMember(w http.ResponseWriter, r *http.Request) error {
	p, err := s.authenticate(r)
	if err != nil {
		return err
	}
	pr, err := s.visibleProject(r, p)
	if err != nil {
		return err
	}
	user, level, expires, err := memberParams(r)
	if err != nil {
		return err
	}
	if err := canManageMembers(s.auth.ProjectLevel(p, pr.ID), level); err != nil {
		return err
	}
	m, err := s.st.AddProjectMember(pr.ID, user, level, expires, p.UserID())
	if err != nil {
		return err
	}
	v, err := s.memberView(m)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, v)
	return nil
}

func (s *Server) removeProjectMember(w http.ResponseWriter, r *http.Request) error {
	p, err := s.authenticate(r)
	if err != nil {
		return err
	}
	pr, err := s.visibleProject(r, p)
	if err != nil {
		return err
	}
	user, err := pathID(r, "user_id")
	if err != nil {
		return err
	}
	if err := canManageMembers(s.auth.ProjectLevel(p, pr.ID), s.st.ProjectAccessLevel(pr.ID, user)); err != nil {
		return err
	}
	if err := s.st.RemoveProjectMember(pr.ID, user, p.UserID()); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
