package admin

import (
	"net/http"

	"registryd/auth"
	"registryd/store"
)

func (s *Server) routesTokens() {
	s.handle(http.MethodPost, "/api/v4/users/{id}/personal_access_tokens", s.createToken)
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
