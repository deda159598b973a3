package admin

import (
	"errors"
	"net/http"
	"strings"

	"registryd/auth"
	"registryd/store"
)

// credentials reads every credential the REST API accepts.
func credentials(r *http.Request) auth.Credentials {
	c := auth.Credentials{
		PrivateToken: r.Header.Get("Private-Token"),
		DeployToken:  r.Header.Get("Deploy-Token"),
	}
	if c.PrivateToken == "" {
		c.PrivateToken = r.URL.Query().Get("private_token")
	}
	c.ParseAuthorization(r.Header.Get("Authorization"))
	if c.Bearer == "" {
		c.Bearer = r.URL.Query().Get("access_token")
	}
	return c
}

// principal authenticates the caller, who may be anonymous.
func (s *Server) principal(r *http.Request) (auth.Principal, error) {
	p, err := s.auth.Authenticate(credentials(r), auth.API)
	switch {
	case errors.Is(err, auth.ErrUnauthorized):
		return p, errUnauthorized
	case err != nil:
		return p, err
	}
	return p, nil
}

// Scope sets per kind of request.
var (
	readScopes     = []string{store.ScopeAPI, store.ScopeReadAPI}
	writeScopes    = []string{store.ScopeAPI}
	readUserScopes = []string{store.ScopeAPI, store.ScopeReadAPI, store.ScopeReadUser}
)

// authenticate requires a signed-in caller whose token carries one of the
// scopes: read scopes for GET and HEAD, api otherwise.
func (s *Server) authenticate(r *http.Request) (auth.Principal, error) {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return s.authenticateScopes(r, readScopes)
	}
	return s.authenticateScopes(r, writeScopes)
}

func (s *Server) authenticateScopes(r *http.Request, scopes []string) (auth.Principal, error) {
	p, err := s.principal(r)
	if err != nil {
		return p, err
	}
	if !p.Authenticated() {
		return p, errUnauthorized
	}
	return p, requireScope(p, scopes)
}

func requireScope(p auth.Principal, scopes []string) error {
	if !p.HasScope(scopes...) {
		return insufficientScope(strings.Join(scopes, " "))
	}
	return nil
}

// authenticateAnyScope requires a signed-in caller whatever the token's
// scopes: for what any token may do to itself (GET and DELETE
// /personal_access_tokens/self) and to learn that a route has no such
// method.
func (s *Server) authenticateAnyScope(r *http.Request) (auth.Principal, error) {
	p, err := s.principal(r)
	if err != nil {
		return p, err
	}
	if !p.Authenticated() {
		return p, errUnauthorized
	}
	return p, nil
}

// authenticateReadUser is for the endpoints that read users and their
// events: a token must carry read_user, read_api or api.
func (s *Server) authenticateReadUser(r *http.Request) (auth.Principal, error) {
	return s.authenticateScopes(r, readUserScopes)
}

// authenticateReadUserOrAnonymous is authenticateReadUser for lists that
// anonymous callers may read too (they see only what is public).
func (s *Server) authenticateReadUserOrAnonymous(r *http.Request) (auth.Principal, error) {
	p, err := s.principal(r)
	if err != nil || !p.Authenticated() {
		return p, err
	}
	return p, requireScope(p, readUserScopes)
}

// requireAdmin allows only instance administrators.
func (s *Server) requireAdmin(r *http.Request) (auth.Principal, error) {
	p, err := s.authenticate(r)
	if err != nil {
		return p, err
	}
	if !p.IsAdmin() {
		return p, errForbidden
	}
	return p, nil
}

// authenticateGated is authenticate behind a feature gate: a disabled
// feature is 404 before any authentication, as GitLab's plan checks are.
func (s *Server) authenticateGated(r *http.Request, enabled bool) (auth.Principal, error) {
	if !enabled {
		return auth.Principal{}, errNotFound
	}
	return s.authenticate(r)
}

// authParams authenticates the caller with authn, then reads the request's
// parameters: a bad credential answers before a bad body.
func authParams(r *http.Request, authn func(*http.Request) (auth.Principal, error)) (auth.Principal, *params, error) {
	p, err := authn(r)
	if err != nil {
		return p, nil, err
	}
	in, err := readParams(r)
	if err != nil {
		return p, nil, err
	}
	return p, in, nil
}
