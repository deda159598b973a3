package admin

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"registryd/auth"
	"registryd/config"
	"registryd/store"
)

// actClock is a store clock the activity tests move by hand.
type actClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *actClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *actClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// actEnv is an admin Server on a real store with one project of each
// visibility in group "acme" (private), users at every project level on all
// three, an outsider, and tokens of several scopes.
type actEnv struct {
	t        *testing.T
	st       *store.Store
	srv      *Server
	clock    *actClock
	projects map[string]store.Project // "private", "internal", "public"
	users    map[string]store.User    // role -> user
	tokens   map[string]string        // role -> token value
}

const actRootToken = "rdpat-activity-root-token"

var actRoles = map[string]int{"guest": store.Guest, "reporter": store.Reporter, "developer": store.Developer,
	"maintainer": store.Maintainer, "owner": store.Owner}

func newActEnv(t *testing.T, mutate func(*config.Config)) *actEnv {
	t.Helper()
	clock := &actClock{t: time.Date(2026, 11, 21, 10, 4, 5, 123e6, time.UTC)}
	st, err := store.Open(t.TempDir(), store.Options{SecretKey: make([]byte, 32), Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	cfg := config.Default()
	cfg.External.URL = "http://registry.example:8081"
	if mutate != nil {
		mutate(&cfg)
	}
	srv, err := New(Deps{Config: cfg, Store: st, Auth: auth.New(st, cfg, clock.Now), Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	e := &actEnv{t: t, st: st, srv: srv, clock: clock, projects: map[string]store.Project{},
		users: map[string]store.User{}, tokens: map[string]string{"root": actRootToken}}
	if _, err := st.EnsureRoot(actRootToken); err != nil {
		t.Fatal(err)
	}
	root, err := st.UserByUsername("root")
	if err != nil {
		t.Fatal(err)
	}
	e.users["root"] = root
	g, err := st.CreateGroup(store.NewGroup{Name: "acme", Path: "acme", Visibility: store.Private})
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
	u, err := e.st.CreateUser(store.NewUser{Username: role, Name: strings.ToUpper(role[:1]) + role[1:], Email: role + "@example.com"})
	if err != nil {
		e.t.Fatal(err)
	}
	plain := "rdpat-" + role + "-token"
	if _, err := e.st.CreateToken(store.NewToken{UserID: u.ID, Name: "t", Scopes: []string{scope}, Plain: plain}); err != nil {
		e.t.Fatal(err)
	}
	e.users[role], e.tokens[role] = u, plain
	return u
}

type actResp struct {
	status int
	header http.Header
	body   []byte
}

// do sends a request as role ("" for anonymous); body may be nil.
func (e *actEnv) do(method, path, role string, body io.Reader, hdr ...string) actResp {
	e.t.Helper()
	req := httptest.NewRequest(method, path, body)
	if role != "" {
		req.Header.Set("PRIVATE-TOKEN", e.tokens[role])
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	e.srv.ServeHTTP(rec, req)
	res := rec.Result()
	raw, _ := io.ReadAll(res.Body)
	return actResp{status: res.StatusCode, header: res.Header, body: raw}
}

func (r actResp) want(t *testing.T, status int) actResp {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d: %s", r.status, status, r.body)
	}
	return r
}

func (r actResp) list(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	if err := json.Unmarshal(r.body, &out); err != nil {
		t.Fatalf("body is not a JSON array (%v): %s", err, r.body)
	}
	return out
}

func (r actResp) object(t *testing.T) map[string]any {
	t.Helper()
	var out map[string]any
	if err := json.Unmarshal(r.body, &out); err != nil {
		t.Fatalf("body is not a JSON object (%v): %s", err, r.body)
	}
	return out
}
