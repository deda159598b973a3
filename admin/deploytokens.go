package admin

import (
	"net/http"

	"registryd/auth"
	"registryd/store"
)

func (s *Server) routesDeployTokens() {
	s.handle(http.MethodPost, "/api/v4/groups/{id}/deploy_tokens", s.createDeployToken)
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
	g, err := s.visibleGroup(r, p)
	if err != nil {
		return err
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
	n.ExpiresAt = in.dateTime("expires_at") // a date-time, as GitLab's deploy token API
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
