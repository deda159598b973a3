package admin

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"registryd/internal/testclock"
	"registryd/store"
)

// actEnv is an admin Server on a real store with one project of each
// visibility in group "acme" (private), users at every project level on all
// three, an outsider, and tokens of several scopes.
type actEnv struct {
	t        *testing.T
	st       *store.Store
	srv      *Server
	clock    *testclock.Clock
	projects map[string]store.Project // "private", "internal", "public"
	users    map[string]store.User    // role -> user
	tokens   map[string]string        // role -> token value
}

const actRootToken = "rdpat-activity-root-token"

var actRoles = map[string]int{"guest": store.Guest, "reporter": store.Reporter, "developer": store.Developer,
	"maintainer": store.Maintainer, "owner": store.Owner}

func newActEnv(t *testing.T, mutate func(*serverOptions)) *actEnv {
	t.Helper()
	st, srv, clock := newTestServer(t, actRootToken, mutate)
	e := &actEnv{t: t, st: st, srv: srv, clock: clock, projects: map[string]store.Project{},
		users: map[string]store.User{}, tokens: map[string]string{"root": actRootToken}}
	root, err := st.UserByUsername("root")
	if err != nil {
		t.Fatal(err)
	}
	e.users["root"] = root
	// Public, so that it may hold projects of every visibility.
	g, err := st.CreateGroup(store.NewGroup{Name: "acme", Path: "acme", Visibility: store.Public})
	if err != nil {
		t.Fatal(err)
	}
	for _, vis := range []string{store.Private, store.Internal, store.Public} {
		p, err := st.CreateProject(store.NewProject{Name: vis + " app", Path: vis, NamespaceID: g.ID,
			Visibility: vis, CreatorID: root.ID})
		if err != nil {
			t.Fatal(err)
		}
		e.projects[vis] = p
	}
	for role, level := range actRoles {
		u := e.user(role, store.ScopeAPI)
		for _, p := range e.projects {
			if _, err := st.AddProjectMember(p.ID, u.ID, level, nil, root.ID); err != nil {
				t.Fatal(err)
			}
		}
	}
	e.user("outsider", store.ScopeAPI)
	e.user("reader", store.ScopeReadUser)
	e.user("read_api", store.ScopeReadAPI)
	e.user("vr_only", store.ScopeReadVirtualRegistry)
	return e
}

// user creates a user with one token of scope, kept under role.
func (e *actEnv) user(role, scope string) store.User {
	e.t.Helper()
	u, plain := newUserWithToken(e.t, e.st, role, strings.ToUpper(role[:1])+role[1:], scope)
	e.users[role], e.tokens[role] = u, plain
	return u
}

// do sends a request as role ("" for anonymous); body may be nil.
func (e *actEnv) do(method, path, role string, body io.Reader, hdr ...string) testResp {
	e.t.Helper()
	req := httptest.NewRequest(method, path, body)
	if role != "" {
		req.Header.Set("PRIVATE-TOKEN", e.tokens[role])
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	return serve(e.srv, req)
}
