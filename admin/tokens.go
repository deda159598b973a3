package admin

import (
	"net/http"

	"registryd/auth"
	"registryd/store"
)

func (s *Server) routesTokens() {
	s.handle(http.MethodPost, "/api/v4/users/{id}/personal_access_tokens", s.createToken)
	s.handle(http.MethodGet, "/api/v4/personal_access_tokens", s.listTokens)
	s.handle(http.MethodGet, "/api/v4/personal_access_tokens/self", s.selfToken)
	s.handle(http.MethodDelete, "/api/v4/personal_access_tokens/self", s.revokeSelfToken)
	s.handle(http.MethodGet, "/api/v4/personal_access_tokens/{id}", s.getToken)
	s.handle(http.MethodDelete, "/api/v4/personal_access_tokens/{id}", s.revokeToken)
}

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
	v := s.tokenView(t)
	v.Token = plain
	writeJSON(w, http.StatusCreated, v)
	return nil
}

// tokenView is GitLab's PersonalAccessToken entity. registryd does not
// record when a token was last used: last_used_at is null.
func (s *Server) tokenView(t store.Token) tokenView {
	return tokenView{ID: t.ID, Name: t.Name, Revoked: t.Revoked, CreatedAt: jsonTime(t.CreatedAt), Scopes: t.Scopes,
		UserID: t.UserID, Active: t.Active(s.st.Now()), ExpiresAt: optDate(t.ExpiresAt)}
}

// listTokens answers GET /personal_access_tokens: the caller's own tokens;
// admins see every user's, or with user_id one user's. A non-admin naming
// another user gets 401, as in GitLab. Filters: state (active: neither
// revoked nor expired; inactive: the others), revoked, search (the name, as
// GitLab's fuzzy search). Ordered by id.
func (s *Server) listTokens(w http.ResponseWriter, r *http.Request) error {
	p, in, err := authParams(r, s.authenticate)
	if err != nil {
		return err
	}
	pg := in.page()
	userID := in.integer("user_id")
	state := in.oneOf("state", "active", "inactive")
	revoked := in.boolean("revoked")
	q := newSearch(in.str("search"), false)
	if err := in.err(); err != nil {
		return err
	}
	owner := p.UserID()
	switch {
	case userID != nil && !p.IsAdmin() && int64(*userID) != owner:
		return errUnauthorized
	case userID != nil:
		owner = int64(*userID)
	case p.IsAdmin():
		owner = 0 // every user's
	}
	var tokens []store.Token
	// An unknown user has no tokens (GitLab's finder would drop the filter
	// and list every user's).
	if userID == nil || *userID > 0 {
		if tokens, err = s.st.Tokens(owner); err != nil {
			return err
		}
	}
	now := s.st.Now()
	kept := tokens[:0]
	for _, t := range tokens {
		switch {
		case state != nil && t.Active(now) != (*state == "active"):
		case revoked != nil && t.Revoked != *revoked:
		case !q.matches(t.Name):
		default:
			kept = append(kept, t)
		}
	}
	s.writePage(w, r, pg, len(kept), mapViews(pageOf(kept, pg), s.tokenView))
	return nil
}

// selfToken answers GET /personal_access_tokens/self: the token the request
// carries. Any scope may read itself, as in GitLab.
func (s *Server) selfToken(w http.ResponseWriter, r *http.Request) error {
	p, err := s.authenticateAnyScope(r)
	if err != nil {
		return err
	}
	t, err := s.st.Token(p.Token.ID)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, s.tokenView(t))
	return nil
}

// revokeSelfToken answers DELETE /personal_access_tokens/self: any token may
// revoke itself.
func (s *Server) revokeSelfToken(w http.ResponseWriter, r *http.Request) error {
	p, err := s.authenticateAnyScope(r)
	if err != nil {
		return err
	}
	if err := s.st.RevokeToken(p.Token.ID); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// getToken answers GET /personal_access_tokens/{id}: admins read any token,
// users their own; another user's token is 404 Not found, as for DELETE.
func (s *Server) getToken(w http.ResponseWriter, r *http.Request) error {
	t, err := s.pathToken(r)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, s.tokenView(t))
	return nil
}

// pathToken is the token named by the path's {id} that the caller may see:
// admins any, users their own; another user's token is 404 Not found.
func (s *Server) pathToken(r *http.Request) (store.Token, error) {
	p, err := s.authenticate(r)
	if err != nil {
		return store.Token{}, err
	}
	id, err := pathID(r, "id")
	if err != nil {
		return store.Token{}, err
	}
	t, err := s.st.Token(id)
	if err != nil {
		return store.Token{}, err
	}
	if !p.IsAdmin() && t.UserID != p.UserID() {
		return store.Token{}, errRecordMissing
	}
	return t, nil
}

// revokeToken lets admins revoke any token and users their own.
func (s *Server) revokeToken(w http.ResponseWriter, r *http.Request) error {
	t, err := s.pathToken(r)
	if err != nil {
		return err
	}
	if err := s.st.RevokeToken(t.ID); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
