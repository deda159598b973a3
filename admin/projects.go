package admin

import (
	"cmp"
	"errors"
	"net/http"
	"slices"

	"registryd/auth"
	"registryd/store"
)

func (s *Server) routesProjects() {
	s.handle(http.MethodPost, "/api/v4/projects", s.createProject)
	s.handle(http.MethodGet, "/api/v4/projects", s.listProjects)
	s.handle(http.MethodGet, "/api/v4/projects/{id}", s.getProject)
	s.handle(http.MethodDelete, "/api/v4/projects/{id}", s.deleteProject)
}

// deleteProject answers DELETE /projects/:id as GitLab does (owners, through
// the project or its groups, and admins; 202), deleting the project, its
// memberships, dependency list and events at once (store.DeleteProject).
// GitLab's permanently_remove and full_path are accepted, as for groups.
func (s *Server) deleteProject(w http.ResponseWriter, r *http.Request) error {
	p, in, err := authParams(r, s.authenticate)
	if err != nil {
		return err
	}
	in.boolean("permanently_remove")
	in.str("full_path")
	if err := in.err(); err != nil {
		return err
	}
	pr, err := s.visibleProject(r, p)
	if err != nil {
		return err
	}
	if s.auth.ProjectLevel(p, pr.ID) < store.Owner {
		return errForbidden
	}
	if err := s.st.DeleteProject(pr.ID); err != nil {
		return err
	}
	accepted(w)
	return nil
}

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
	p, in, err := authParams(r, s.authenticate)
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

// listProjects answers GET /projects as GitLab's ProjectsFinder: admins see
// every project, others the public and internal ones and those they are
// members of (directly or through a group). membership (level guest or
// more), min_access_level and owned (level owner) narrow the list to the
// caller's own access, for admins too. search looks at the path, name and
// description (and the namespace's with search_namespaces). Ordered by
// created_at descending (order_by id, name, path, created_at; updated_at and
// last_activity_at are created_at here), ties by id in the same direction.
func (s *Server) listProjects(w http.ResponseWriter, r *http.Request) error {
	p, in, err := authParams(r, s.authenticate)
	if err != nil {
		return err
	}
	pg := in.page()
	q := newSearch(in.str("search"), false)
	inNamespaces := deref(in.boolean("search_namespaces"))
	owned := deref(in.boolean("owned"))
	membership := deref(in.boolean("membership"))
	minLevel := in.minAccessLevel()
	visibility := in.oneOf("visibility", store.Private, store.Internal, store.Public)
	archived := in.boolean("archived")
	in.boolean("simple") // accepted; every item is the full project
	orderBy, desc := in.ordering("created_at", "desc", "id", "name", "path", "created_at", "updated_at", "last_activity_at")
	if err := in.err(); err != nil {
		return err
	}
	all, err := s.st.Projects()
	if err != nil {
		return err
	}
	acc, err := s.st.UserAccess(p.UserID())
	if err != nil {
		return err
	}
	listed := func(pr store.Project) bool {
		lvl := acc.ProjectLevel(pr)
		switch {
		case owned && lvl < store.Owner, membership && lvl < store.Guest, minLevel != nil && lvl < *minLevel:
			return false
		case visibility != nil && pr.Visibility != *visibility:
			return false
		// registryd has no archived projects.
		case archived != nil && *archived:
			return false
		}
		if inNamespaces {
			return q.matches(pr.FullPath, pr.FullName, pr.Description)
		}
		return q.matches(pr.Path, pr.Name, pr.Description)
	}
	projects := make([]store.Project, 0, len(all))
	for _, pr := range all {
		visible := p.IsAdmin() || pr.Visibility != store.Private || acc.ProjectLevel(pr) >= store.Guest
		if visible && listed(pr) {
			projects = append(projects, pr)
		}
	}
	slices.SortFunc(projects, func(a, b store.Project) int {
		var c int
		switch orderBy {
		case "name":
			c = compareFold(a.Name, b.Name)
		case "path":
			c = compareFold(a.Path, b.Path)
		case "created_at", "updated_at", "last_activity_at":
			c = a.CreatedAt.Compare(b.CreatedAt)
		}
		c = cmp.Or(c, cmp.Compare(a.ID, b.ID))
		if desc {
			c = -c
		}
		return c
	})
	views := make([]projectView, 0, pg.PerPage)
	for _, pr := range pageOf(projects, pg) {
		v, err := s.projectView(pr)
		if err != nil {
			return err
		}
		views = append(views, v)
	}
	s.writePage(w, r, pg, len(projects), views)
	return nil
}
