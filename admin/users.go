package admin

import (
	"errors"
	"net/http"

	"registryd/auth"
	"registryd/store"
)

func (s *Server) routesUsers() {
	s.handle(http.MethodPost, "/api/v4/users", s.createUser)
	s.handle(http.MethodGet, "/api/v4/users", s.listUsers)
	s.handle(http.MethodGet, "/api/v4/users/{id}", s.getUser)
	s.handle(http.MethodDelete, "/api/v4/users/{id}", s.deleteUser)
	s.handle(http.MethodGet, "/api/v4/user", s.currentUser)
}

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
	p, in, err := authParams(r, s.requireAdmin)
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

// listUsers lists every user, or with username the one of that name (an
// empty list when there is none).
func (s *Server) listUsers(w http.ResponseWriter, r *http.Request) error {
	p, err := s.authenticateReadUser(r)
	if err != nil {
		return err
	}
	pg, username, err := readListParams(r, "username")
	if err != nil {
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
	s.writePage(w, r, pg, total, mapViews(users, func(u store.User) userView { return s.userView(u, p) }))
	return nil
}

func (s *Server) getUser(w http.ResponseWriter, r *http.Request) error {
	p, err := s.authenticateReadUser(r)
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
	p, err := s.authenticateReadUser(r)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, s.userView(p.User, p))
	return nil
}

// deleteUser answers DELETE /users/:id as GitLab does: admins only, 204. A
// user who is the only direct owner of a group is refused with 409 unless
// hard_delete is true, which deletes those groups and the user's events too
// (store.DeleteUser). registryd also refuses (409) the last administrator.
func (s *Server) deleteUser(w http.ResponseWriter, r *http.Request) error {
	_, in, err := authParams(r, s.requireAdmin)
	if err != nil {
		return err
	}
	hard := deref(in.boolean("hard_delete"))
	if err := in.err(); err != nil {
		return err
	}
	id, err := pathID(r, "id")
	if err != nil {
		return err
	}
	d, err := s.st.DeleteUser(id, hard)
	if err != nil {
		return err
	}
	s.forgetGone(d.Upstreams...)
	w.WriteHeader(http.StatusNoContent)
	return nil
}
