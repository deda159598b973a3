package admin

import (
	"cmp"
	"net/http"
	"slices"
	"strings"

	"registryd/auth"
	"registryd/store"
)

func (s *Server) routesGroups() {
	s.handle(http.MethodPost, "/api/v4/groups", s.createGroup)
	s.handle(http.MethodGet, "/api/v4/groups", s.listGroups)
	s.handle(http.MethodGet, "/api/v4/groups/{id}", s.getGroup)
	s.handle(http.MethodDelete, "/api/v4/groups/{id}", s.deleteGroup)
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
// users, private ones to members of the group (or of an ancestor) and of
// anything inside it, as GitLab's read_group. listGroups applies the same
// rule to many groups at once (groupVisible).
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
	if g.TopLevel() {
		// Cached: every registry request of the group asks the same.
		return s.auth.CanReadRegistries(p, g.ID)
	}
	return p.Kind == auth.PersonalToken && s.st.HasMembershipUnder(g.ID, p.UserID())
}

// groupVisible is canSeeGroup for a signed-in user, decided on a's snapshot of
// their memberships: the group is public or internal, or the user is a member
// of it, of an ancestor, or of something inside it.
func groupVisible(a store.Access, g store.Group) bool {
	return g.Visibility == store.Public || g.Visibility == store.Internal || related(a, g)
}

// related is GitLab's authorized_groups.self_and_ancestors: the groups the
// user is a member of, with their descendants, the namespaces of their
// projects, and the ancestors of all these.
func related(a store.Access, g store.Group) bool {
	return a.GroupLevel(g.ID) >= store.Guest || a.MemberUnder(g.ID)
}

// listGroups answers GET /groups as GitLab's GroupsFinder: admins see every
// group; others the groups they are related to (see related), and with
// all_available=true every public and internal group too. owned (direct
// owner memberships) and min_access_level (effective level) replace that
// set, for admins too. Ordered by name (order_by name, path or id; sort asc
// or desc), ties by id ascending.
func (s *Server) listGroups(w http.ResponseWriter, r *http.Request) error {
	p, in, err := authParams(r, s.authenticate)
	if err != nil {
		return err
	}
	pg := in.page()
	q := newSearch(in.str("search"), false)
	owned := deref(in.boolean("owned"))
	minLevel := in.minAccessLevel()
	topOnly := deref(in.boolean("top_level_only"))
	allAvailable := in.boolean("all_available")
	visibility := in.oneOf("visibility", store.Private, store.Internal, store.Public)
	skip := in.ints("skip_groups")
	orderBy, desc := in.ordering("name", "asc", "name", "path", "id")
	if err := in.err(); err != nil {
		return err
	}
	all, err := s.st.Groups()
	if err != nil {
		return err
	}
	acc, err := s.st.UserAccess(p.UserID())
	if err != nil {
		return err
	}
	everything := p.IsAdmin() && (allAvailable == nil || *allAvailable)
	withPublic := allAvailable != nil && *allAvailable
	listed := func(g store.Group) bool {
		switch {
		case owned:
			return acc.DirectGroupLevel(g.ID) == store.Owner
		case minLevel != nil:
			return acc.GroupLevel(g.ID) >= *minLevel
		case everything:
			return true
		case withPublic:
			return groupVisible(acc, g)
		}
		return related(acc, g)
	}
	groups := make([]store.Group, 0, len(all))
	for _, g := range all {
		if !listed(g) || (topOnly && !g.TopLevel()) || (visibility != nil && g.Visibility != *visibility) ||
			slices.Contains(skip, g.ID) || !q.matches(g.Name, g.Path) {
			continue
		}
		groups = append(groups, g)
	}
	slices.SortFunc(groups, func(a, b store.Group) int {
		var c int
		switch orderBy {
		case "name":
			c = compareFold(a.Name, b.Name)
		case "path":
			c = compareFold(a.Path, b.Path)
		}
		if c == 0 && orderBy == "id" {
			c = cmp.Compare(a.ID, b.ID)
		}
		if desc {
			c = -c
		}
		return cmp.Or(c, cmp.Compare(a.ID, b.ID))
	})
	s.writePage(w, r, pg, len(groups), mapViews(pageOf(groups, pg), s.groupView))
	return nil
}

// compareFold orders names case-insensitively, then by their bytes.
func compareFold(a, b string) int {
	return cmp.Or(strings.Compare(strings.ToLower(a), strings.ToLower(b)), strings.Compare(a, b))
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

// accepted is GitLab's answer to a deletion it carries out in the
// background (groups, projects): 202 {"message": "202 Accepted"}. registryd
// has already done it when it answers.
func accepted(w http.ResponseWriter) {
	writeJSON(w, http.StatusAccepted, map[string]any{"message": "202 Accepted"})
}

// deleteGroup answers DELETE /groups/:id as GitLab does (owners and admins;
// 202), deleting at once what GitLab deletes in the background: the group,
// its subgroups and everything in them (store.DeleteGroup; docs/api.md,
// "Deleting groups, projects and users"). GitLab's permanently_remove and
// full_path are accepted: the deletion is always immediate and permanent.
func (s *Server) deleteGroup(w http.ResponseWriter, r *http.Request) error {
	p, in, err := authParams(r, s.authenticate)
	if err != nil {
		return err
	}
	in.boolean("permanently_remove")
	in.str("full_path")
	if err := in.err(); err != nil {
		return err
	}
	g, err := s.visibleGroup(r, p)
	if err != nil {
		return err
	}
	if s.auth.GroupLevel(p, g.ID) < store.Owner {
		return errForbidden
	}
	d, err := s.st.DeleteGroup(g.ID)
	if err != nil {
		return err
	}
	s.forgetGone(d.Upstreams...)
	accepted(w)
	return nil
}
