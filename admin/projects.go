package admin

import (
	"errors"
	"net/http"

	"registryd/auth"
	"registryd/store"
)

func (s *Server) routesProjects() {
	s.handle(http.MethodPost, "/api/v4/projects", s.createProject)
	s.handle(http.MethodGet, "/api/v4/projects/{id}", s.getProject)
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
