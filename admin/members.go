package admin

import (
	"net/http"
	"slices"
	"strings"
	"time"

	"registryd/auth"
	"registryd/store"
)

// Groups and projects have the same member endpoints; each resolves {id} to
// a memberList and the handlers below do the rest.
func (s *Server) routesMembers() {
	for _, base := range []struct {
		path string
		find findMembers
	}{{"/api/v4/groups/{id}", s.groupMembers}, {"/api/v4/projects/{id}", s.projectMembers}} {
		s.handle(http.MethodGet, base.path+"/members", s.listMembers(base.find, false))
		s.handle(http.MethodPost, base.path+"/members", s.addMember(base.find))
		s.handle(http.MethodGet, base.path+"/members/all", s.listMembers(base.find, true))
		s.handle(http.MethodGet, base.path+"/members/{user_id}", s.getMember(base.find, false))
		s.handle(http.MethodDelete, base.path+"/members/{user_id}", s.removeMember(base.find))
		s.handle(http.MethodGet, base.path+"/members/all/{user_id}", s.getMember(base.find, true))
	}
}

// memberList is the member list of one group or project, as seen by the
// caller it was resolved for.
type memberList struct {
	// callerLevel is the caller's access level on the group or project.
	callerLevel func() int
	// level is a user's own access level there (0 for none).
	level  func(user int64) int
	add    func(user int64, level int, expires *time.Time) (store.Member, error)
	remove func(user int64) error
	// direct lists the active direct members; all adds those inherited
	// from ancestor groups, one per user with the highest level.
	direct, all func() ([]store.Member, error)
}

// findMembers resolves the {id} of a member endpoint for the caller p; a
// group or project p cannot see is 404.
type findMembers func(r *http.Request, p auth.Principal) (memberList, error)

func (s *Server) groupMembers(r *http.Request, p auth.Principal) (memberList, error) {
	g, err := s.visibleGroup(r, p)
	if err != nil {
		return memberList{}, err
	}
	return memberList{
		callerLevel: func() int { return s.auth.GroupLevel(p, g.ID) },
		level:       func(user int64) int { return s.st.GroupAccessLevel(g.ID, user) },
		add: func(user int64, level int, expires *time.Time) (store.Member, error) {
			return s.st.AddGroupMember(g.ID, user, level, expires)
		},
		remove: func(user int64) error { return s.st.RemoveGroupMember(g.ID, user) },
		direct: func() ([]store.Member, error) { return s.st.GroupMembers(g.ID) },
		all:    func() ([]store.Member, error) { return s.st.AllGroupMembers(g.ID) },
	}, nil
}

// projectMembers passes the caller on to the store as the actor of each
// membership change (groups record none).
func (s *Server) projectMembers(r *http.Request, p auth.Principal) (memberList, error) {
	pr, err := s.visibleProject(r, p)
	if err != nil {
		return memberList{}, err
	}
	return memberList{
		callerLevel: func() int { return s.auth.ProjectLevel(p, pr.ID) },
		level:       func(user int64) int { return s.st.ProjectAccessLevel(pr.ID, user) },
		add: func(user int64, level int, expires *time.Time) (store.Member, error) {
			return s.st.AddProjectMember(pr.ID, user, level, expires, p.UserID())
		},
		remove: func(user int64) error { return s.st.RemoveProjectMember(pr.ID, user, p.UserID()) },
		direct: func() ([]store.Member, error) { return s.st.ProjectMembers(pr.ID) },
		all:    func() ([]store.Member, error) { return s.st.AllProjectMembers(pr.ID) },
	}, nil
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

// addMember answers POST .../members: resolve, then parameters, then
// permission.
func (s *Server) addMember(find findMembers) handler {
	return func(w http.ResponseWriter, r *http.Request) error {
		p, err := s.authenticate(r)
		if err != nil {
			return err
		}
		members, err := find(r, p)
		if err != nil {
			return err
		}
		user, level, expires, err := memberParams(r)
		if err != nil {
			return err
		}
		if err := canManageMembers(members.callerLevel(), level); err != nil {
			return err
		}
		m, err := members.add(user, level, expires)
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
}

// removeMember answers DELETE .../members/{user_id}.
func (s *Server) removeMember(find findMembers) handler {
	return func(w http.ResponseWriter, r *http.Request) error {
		p, err := s.authenticate(r)
		if err != nil {
			return err
		}
		members, err := find(r, p)
		if err != nil {
			return err
		}
		user, err := pathID(r, "user_id")
		if err != nil {
			return err
		}
		if err := canManageMembers(members.callerLevel(), members.level(user)); err != nil {
			return err
		}
		if err := members.remove(user); err != nil {
			return err
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
}

// listMembers answers GET .../members (inherited: .../members/all). Whoever
// can see the group or project may list its members, as in GitLab. query
// matches a name or username (a leading @ is dropped; every word must be
// found, whatever its length); user_ids keeps those users, skip_users drops
// them. Ordered as the members joined.
func (s *Server) listMembers(find findMembers, inherited bool) handler {
	return func(w http.ResponseWriter, r *http.Request) error {
		p, err := s.authenticate(r)
		if err != nil {
			return err
		}
		members, err := find(r, p)
		if err != nil {
			return err
		}
		in, err := readParams(r)
		if err != nil {
			return err
		}
		pg := in.page()
		var q *search
		if v := in.str("query"); v != nil {
			trimmed := strings.TrimPrefix(strings.TrimSpace(*v), "@")
			q = newSearch(&trimmed, true)
		}
		only := in.ints("user_ids")
		skip := in.ints("skip_users")
		if err := in.err(); err != nil {
			return err
		}
		list := members.direct
		if inherited {
			list = members.all
		}
		ms, err := list()
		if err != nil {
			return err
		}
		views := make([]memberView, 0, len(ms))
		for _, m := range ms {
			if (only != nil && !slices.Contains(only, m.UserID)) || slices.Contains(skip, m.UserID) {
				continue
			}
			v, err := s.memberView(m)
			if err != nil {
				return err
			}
			if q.matches(v.Name, v.Username) {
				views = append(views, v)
			}
		}
		s.writePage(w, r, pg, len(views), pageOf(views, pg))
		return nil
	}
}

// getMember answers GET .../members/{user_id} (inherited:
// .../members/all/{user_id}); a user who is not a member is 404 Not found.
func (s *Server) getMember(find findMembers, inherited bool) handler {
	return func(w http.ResponseWriter, r *http.Request) error {
		p, err := s.authenticate(r)
		if err != nil {
			return err
		}
		members, err := find(r, p)
		if err != nil {
			return err
		}
		user, err := pathID(r, "user_id")
		if err != nil {
			return err
		}
		list := members.direct
		if inherited {
			list = members.all
		}
		ms, err := list()
		if err != nil {
			return err
		}
		i := slices.IndexFunc(ms, func(m store.Member) bool { return m.UserID == user })
		if i < 0 {
			return errRecordMissing
		}
		v, err := s.memberView(ms[i])
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, v)
		return nil
	}
}
