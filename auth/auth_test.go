package auth

import (
	"bytes"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"

	"registryd/internal/boltstore"
	"registryd/internal/testclock"
	"registryd/store"
)

// world is a store with a small hierarchy and a Service over it. Both share
// one clock, so expiry can be tested without sleeping.
type world struct {
	st  *store.Store
	svc *Service
	clk *testclock.Clock

	acme, plat, other store.Group
	app               store.Project
	users             map[string]store.User
	tokens            map[string]string // name -> plain value
}

func newWorld(t *testing.T) *world {
	t.Helper()
	clk := testclock.New(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC))
	st, err := boltstore.Open(t.TempDir(), store.Options{SecretKey: bytes.Repeat([]byte{1}, 32), Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	w := &world{st: st, clk: clk, svc: New(st, Options{Now: clk.Now}),
		users: map[string]store.User{}, tokens: map[string]string{}}
	if w.acme, err = st.CreateGroup(store.NewGroup{Name: "acme", Path: "acme"}); err != nil {
		t.Fatal(err)
	}
	if w.plat, err = st.CreateGroup(store.NewGroup{Name: "platform", Path: "platform", ParentID: w.acme.ID}); err != nil {
		t.Fatal(err)
	}
	if w.other, err = st.CreateGroup(store.NewGroup{Name: "other", Path: "other", Visibility: store.Public}); err != nil {
		t.Fatal(err)
	}
	if w.app, err = st.CreateProject(store.NewProject{Name: "app", NamespaceID: w.plat.ID}); err != nil {
		t.Fatal(err)
	}
	return w
}

// user creates a user with one token of the given scopes; the token value is
// w.tokens[name].
func (w *world) user(t *testing.T, name string, admin bool, scopes ...string) store.User {
	t.Helper()
	u, err := w.st.CreateUser(store.NewUser{Username: name, Name: name, Email: name + "@example.com", Admin: admin})
	if err != nil {
		t.Fatal(err)
	}
	w.users[name] = u
	w.token(t, name, name, nil, scopes...)
	return u
}

func (w *world) token(t *testing.T, userName, tokenName string, expires *time.Time, scopes ...string) store.Token {
	t.Helper()
	if len(scopes) == 0 {
		scopes = []string{store.ScopeAPI}
	}
	plain := NewTokenValue("rdpat-")
	tok, err := w.st.CreateToken(store.NewToken{UserID: w.users[userName].ID, Name: tokenName, Scopes: scopes, ExpiresAt: expires, Plain: plain})
	if err != nil {
		t.Fatal(err)
	}
	w.tokens[tokenName] = plain
	return tok
}

func (w *world) deploy(t *testing.T, name string, group int64, username string, expires *time.Time) store.DeployToken {
	t.Helper()
	plain := NewTokenValue("rddt-")
	d, err := w.st.CreateDeployToken(store.NewDeployToken{GroupID: group, Name: name, Username: username,
		Scopes: []string{store.ScopeReadVirtualRegistry}, ExpiresAt: expires, Plain: plain})
	if err != nil {
		t.Fatal(err)
	}
	w.tokens[name] = plain
	return d
}

func (w *world) pat(t *testing.T, tokenName string) Principal {
	t.Helper()
	p, err := w.svc.Authenticate(Credentials{PrivateToken: w.tokens[tokenName]}, API)
	if err != nil {
		t.Fatalf("authenticating %s: %v", tokenName, err)
	}
	return p
}

func basic(user, pass string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
}

func TestParseAuthorization(t *testing.T) {
	tests := []struct {
		name   string
		header string
		want   Credentials
	}{
		{"bearer", "Bearer abc", Credentials{Bearer: "abc"}},
		{"bearer any case, extra space", "  bEaReR   abc ", Credentials{Bearer: "abc"}},
		{"basic", basic("alice", "tok"), Credentials{BasicUser: "alice", BasicPass: "tok", HasBasic: true}},
		{"basic with a colon in the password", basic("alice", "a:b"), Credentials{BasicUser: "alice", BasicPass: "a:b", HasBasic: true}},
		{"basic, empty password", basic("alice", ""), Credentials{BasicUser: "alice", HasBasic: true}},
		{"basic, not base64", "Basic !!!", Credentials{}},
		{"basic, no colon", "Basic " + base64.StdEncoding.EncodeToString([]byte("alice")), Credentials{}},
		{"no scheme", "abc", Credentials{}},
		{"unknown scheme", "Digest abc", Credentials{}},
		{"empty", "", Credentials{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var c Credentials
			c.ParseAuthorization(tc.header)
			if c != tc.want {
				t.Fatalf("got %+v, want %+v", c, tc.want)
			}
		})
	}
}

func TestAuthenticateCredentialKinds(t *testing.T) {
	w := newWorld(t)
	alice := w.user(t, "alice", false, store.ScopeReadAPI)
	d := w.deploy(t, "dt", w.acme.ID, "", nil)
	pat, dt := w.tokens["alice"], w.tokens["dt"]

	tests := []struct {
		name     string
		creds    Credentials
		surface  Surface
		wantKind Kind
		wantErr  bool
	}{
		{"no credentials is anonymous", Credentials{}, API, Anonymous, false},
		{"PRIVATE-TOKEN", Credentials{PrivateToken: pat}, API, PersonalToken, false},
		{"Bearer", Credentials{Bearer: pat}, API, PersonalToken, false},
		{"Basic with the username", Credentials{BasicUser: "alice", BasicPass: pat, HasBasic: true}, API, PersonalToken, false},
		{"Basic, username in another case", Credentials{BasicUser: "ALICE", BasicPass: pat, HasBasic: true}, API, PersonalToken, false},
		{"Basic with someone else's username", Credentials{BasicUser: "root", BasicPass: pat, HasBasic: true}, API, Anonymous, true},
		{"Basic without a password", Credentials{BasicUser: "alice", HasBasic: true}, API, Anonymous, true},
		{"PRIVATE-TOKEN wins over Deploy-Token", Credentials{PrivateToken: pat, DeployToken: dt}, Download, PersonalToken, false},
		{"unknown token", Credentials{PrivateToken: "rdpat-nope"}, API, Anonymous, true},
		{"personal token in Deploy-Token", Credentials{DeployToken: pat}, Download, Anonymous, true},
		{"deploy token in PRIVATE-TOKEN", Credentials{PrivateToken: dt}, Download, Anonymous, true},
		{"Deploy-Token on the download path", Credentials{DeployToken: dt}, Download, DeployToken, false},
		{"Deploy-Token on the API", Credentials{DeployToken: dt}, API, Anonymous, true},
		{"deploy token over Basic on the download path", Credentials{BasicUser: d.Username, BasicPass: dt, HasBasic: true}, Download, DeployToken, false},
		{"deploy token over Basic on the API", Credentials{BasicUser: d.Username, BasicPass: dt, HasBasic: true}, API, Anonymous, true},
		{"deploy token over Basic, wrong username", Credentials{BasicUser: "alice", BasicPass: dt, HasBasic: true}, Download, Anonymous, true},
		{"personal token over Basic on the download path", Credentials{BasicUser: "alice", BasicPass: pat, HasBasic: true}, Download, PersonalToken, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// Twice: the second answer comes from the cache and must agree.
			for range 2 {
				p, err := w.svc.Authenticate(tc.creds, tc.surface)
				if tc.wantErr {
					if !errors.Is(err, ErrUnauthorized) {
						t.Fatalf("err = %v, want ErrUnauthorized", err)
					}
					if p.Authenticated() {
						t.Fatalf("a refused credential gave principal %+v", p)
					}
					continue
				}
				if err != nil {
					t.Fatalf("err = %v", err)
				}
				if p.Kind != tc.wantKind {
					t.Fatalf("kind = %v, want %v", p.Kind, tc.wantKind)
				}
				switch p.Kind {
				case PersonalToken:
					if p.UserID() != alice.ID || p.User.Username != "alice" || p.IsAdmin() {
						t.Fatalf("principal = %+v", p)
					}
				case DeployToken:
					if p.UserID() != 0 || p.Deploy.ID != d.ID || p.IsAdmin() {
						t.Fatalf("principal = %+v", p)
					}
				}
			}
		})
	}
}

func TestScopes(t *testing.T) {
	w := newWorld(t)
	w.user(t, "alice", false, store.ScopeReadAPI, store.ScopeReadUser)
	w.deploy(t, "dt", w.acme.ID, "", nil)
	p := w.pat(t, "alice")
	d, err := w.svc.Authenticate(Credentials{DeployToken: w.tokens["dt"]}, Download)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		p      Principal
		scopes []string
		want   bool
	}{
		{"one of them", p, []string{store.ScopeAPI, store.ScopeReadAPI}, true},
		{"another one", p, []string{store.ScopeReadUser}, true},
		{"none of them", p, []string{store.ScopeAPI}, false},
		{"no scope asked", p, nil, false},
		{"deploy token's scope", d, []string{store.ScopeReadVirtualRegistry}, true},
		{"deploy token, api", d, []string{store.ScopeAPI, store.ScopeReadAPI}, false},
		{"anonymous", Principal{}, []string{store.ScopeAPI}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.p.HasScope(tc.scopes...); got != tc.want {
				t.Fatalf("HasScope(%v) = %v", tc.scopes, got)
			}
		})
	}
}

func TestExpiredAndRevokedTokens(t *testing.T) {
	w := newWorld(t)
	w.user(t, "alice", false)
	tomorrow := w.clk.Now().Add(24 * time.Hour)
	expiring := w.token(t, "alice", "expiring", &tomorrow)
	w.deploy(t, "dt", w.acme.ID, "", &tomorrow)

	creds := Credentials{PrivateToken: w.tokens["expiring"]}
	if _, err := w.svc.Authenticate(creds, API); err != nil {
		t.Fatalf("before expiry: %v", err)
	}
	dcreds := Credentials{DeployToken: w.tokens["dt"]}
	if _, err := w.svc.Authenticate(dcreds, Download); err != nil {
		t.Fatalf("deploy token before expiry: %v", err)
	}

	// The principal is cached now; expiry must still bite at once.
	w.clk.Advance(24 * time.Hour)
	if _, err := w.svc.Authenticate(creds, API); !errors.Is(err, ErrUnauthorized) {
		t.Fatalf("expired personal token: err = %v", err)
	}
	if _, err := w.svc.Authenticate(dcreds, Download); !errors.Is(err, ErrUnauthorized) {
		t.Fatalf("expired deploy token: err = %v", err)
	}
	if got, err := w.st.Token(expiring.ID); err != nil || got.Active(w.clk.Now()) {
		t.Fatalf("store says the expired token is active (%v)", err)
	}

	// Revocation empties the cache at once.
	live := w.token(t, "alice", "live", nil)
	lcreds := Credentials{Bearer: w.tokens["live"]}
	if _, err := w.svc.Authenticate(lcreds, API); err != nil {
		t.Fatal(err)
	}
	if err := w.st.RevokeToken(live.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := w.svc.Authenticate(lcreds, API); !errors.Is(err, ErrUnauthorized) {
		t.Fatalf("revoked token: err = %v", err)
	}
	// Other tokens of the user are unaffected.
	w.token(t, "alice", "other", nil)
	if _, err := w.svc.Authenticate(Credentials{PrivateToken: w.tokens["other"]}, API); err != nil {
		t.Fatalf("another token of the user: %v", err)
	}
}

func TestUnknownTokenLaterCreated(t *testing.T) {
	// A refusal is cached too; it must not outlive the token's creation.
	w := newWorld(t)
	w.user(t, "alice", false)
	plain := NewTokenValue("rdpat-")
	creds := Credentials{PrivateToken: plain}
	if _, err := w.svc.Authenticate(creds, API); !errors.Is(err, ErrUnauthorized) {
		t.Fatalf("unknown token: %v", err)
	}
	if _, err := w.st.CreateToken(store.NewToken{UserID: w.users["alice"].ID, Name: "late", Scopes: []string{store.ScopeAPI}, Plain: plain}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.svc.Authenticate(creds, API); err != nil {
		t.Fatalf("token created after a refusal: %v", err)
	}
}

func TestAccessLevelsAndInheritance(t *testing.T) {
	w := newWorld(t)
	w.user(t, "admin", true)
	for _, name := range []string{"guest", "reporter", "developer", "maintainer", "owner", "sub", "proj", "outsider", "deep-maint"} {
		w.user(t, name, false)
	}
	levels := map[string]int{"guest": store.Guest, "reporter": store.Reporter, "developer": store.Developer,
		"maintainer": store.Maintainer, "owner": store.Owner}
	for name, lvl := range levels {
		if _, err := w.st.AddGroupMember(w.acme.ID, w.users[name].ID, lvl, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.st.AddGroupMember(w.plat.ID, w.users["sub"].ID, store.Developer, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := w.st.AddGroupMember(w.plat.ID, w.users["deep-maint"].ID, store.Maintainer, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := w.st.AddProjectMember(w.app.ID, w.users["proj"].ID, store.Guest, nil, 0); err != nil {
		t.Fatal(err)
	}
	w.deploy(t, "acme-dt", w.acme.ID, "", nil)
	w.deploy(t, "other-dt", w.other.ID, "", nil)

	type want struct {
		acme, plat, app int
		read, manage    bool
		readOther       bool
	}
	tests := []struct {
		name string
		p    func(t *testing.T) Principal
		want want
	}{
		{"anonymous", func(*testing.T) Principal { return Principal{} }, want{}},
		{"admin", func(t *testing.T) Principal { return w.pat(t, "admin") },
			want{store.Owner, store.Owner, store.Owner, true, true, true}},
		{"guest", func(t *testing.T) Principal { return w.pat(t, "guest") },
			want{store.Guest, store.Guest, store.Guest, true, false, false}},
		{"reporter", func(t *testing.T) Principal { return w.pat(t, "reporter") },
			want{store.Reporter, store.Reporter, store.Reporter, true, false, false}},
		{"developer", func(t *testing.T) Principal { return w.pat(t, "developer") },
			want{store.Developer, store.Developer, store.Developer, true, false, false}},
		{"maintainer", func(t *testing.T) Principal { return w.pat(t, "maintainer") },
			want{store.Maintainer, store.Maintainer, store.Maintainer, true, true, false}},
		{"owner", func(t *testing.T) Principal { return w.pat(t, "owner") },
			want{store.Owner, store.Owner, store.Owner, true, true, false}},
		{"developer of a subgroup reads, no more", func(t *testing.T) Principal { return w.pat(t, "sub") },
			want{store.NoAccess, store.Developer, store.Developer, true, false, false}},
		{"maintainer of a subgroup does not manage the top group", func(t *testing.T) Principal { return w.pat(t, "deep-maint") },
			want{store.NoAccess, store.Maintainer, store.Maintainer, true, false, false}},
		{"member of a project reads", func(t *testing.T) Principal { return w.pat(t, "proj") },
			want{store.NoAccess, store.NoAccess, store.Guest, true, false, false}},
		{"outsider", func(t *testing.T) Principal { return w.pat(t, "outsider") }, want{}},
		{"deploy token of the group reads only", func(t *testing.T) Principal {
			p, err := w.svc.Authenticate(Credentials{DeployToken: w.tokens["acme-dt"]}, Download)
			if err != nil {
				t.Fatal(err)
			}
			return p
		}, want{read: true}},
		{"deploy token of another group", func(t *testing.T) Principal {
			p, err := w.svc.Authenticate(Credentials{DeployToken: w.tokens["other-dt"]}, Download)
			if err != nil {
				t.Fatal(err)
			}
			return p
		}, want{readOther: true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.p(t)
			got := want{
				acme: w.svc.GroupLevel(p, w.acme.ID), plat: w.svc.GroupLevel(p, w.plat.ID), app: w.svc.ProjectLevel(p, w.app.ID),
				read: w.svc.CanReadRegistries(p, w.acme.ID), manage: w.svc.CanManageRegistries(p, w.acme.ID),
				readOther: w.svc.CanReadRegistries(p, w.other.ID),
			}
			if got != tc.want {
				t.Fatalf("got %+v\nwant %+v", got, tc.want)
			}
			if w.svc.CanManageRegistries(p, w.other.ID) != p.IsAdmin() {
				t.Fatal("manage permission leaked into another group")
			}
		})
	}
}

func TestDecisionCacheInvalidation(t *testing.T) {
	w := newWorld(t)
	w.user(t, "alice", false)
	alice := w.users["alice"]
	p := w.pat(t, "alice")

	steps := []struct {
		name   string
		change func(t *testing.T)
		acme   int
		app    int
		read   bool
		manage bool
	}{
		{"no membership", func(*testing.T) {}, store.NoAccess, store.NoAccess, false, false},
		{"project membership", func(t *testing.T) {
			if _, err := w.st.AddProjectMember(w.app.ID, alice.ID, store.Reporter, nil, 0); err != nil {
				t.Fatal(err)
			}
		}, store.NoAccess, store.Reporter, true, false},
		{"group maintainer", func(t *testing.T) {
			if _, err := w.st.AddGroupMember(w.acme.ID, alice.ID, store.Maintainer, nil); err != nil {
				t.Fatal(err)
			}
		}, store.Maintainer, store.Maintainer, true, true},
		{"group membership removed", func(t *testing.T) {
			if err := w.st.RemoveGroupMember(w.acme.ID, alice.ID); err != nil {
				t.Fatal(err)
			}
		}, store.NoAccess, store.Reporter, true, false},
		{"project membership removed", func(t *testing.T) {
			if err := w.st.RemoveProjectMember(w.app.ID, alice.ID, 0); err != nil {
				t.Fatal(err)
			}
		}, store.NoAccess, store.NoAccess, false, false},
	}
	for _, st := range steps {
		st.change(t)
		// Ask twice: the first fills the cache, the second must agree.
		for i := range 2 {
			got := []any{w.svc.GroupLevel(p, w.acme.ID), w.svc.ProjectLevel(p, w.app.ID),
				w.svc.CanReadRegistries(p, w.acme.ID), w.svc.CanManageRegistries(p, w.acme.ID)}
			want := []any{st.acme, st.app, st.read, st.manage}
			for j := range got {
				if got[j] != want[j] {
					t.Fatalf("after %q (ask %d): group/project/read/manage = %v, want %v", st.name, i+1, got, want)
				}
			}
		}
	}
}

func TestCanSeeProject(t *testing.T) {
	w := newWorld(t)
	w.user(t, "member", false)
	w.user(t, "outsider", false)
	w.user(t, "admin", true)
	projects := map[string]store.Project{}
	for _, vis := range []string{store.Public, store.Internal, store.Private} {
		pr, err := w.st.CreateProject(store.NewProject{Name: "p-" + vis, NamespaceID: w.other.ID, Visibility: vis})
		if err != nil {
			t.Fatal(err)
		}
		projects[vis] = pr
		if _, err := w.st.AddProjectMember(pr.ID, w.users["member"].ID, store.Guest, nil, 0); err != nil {
			t.Fatal(err)
		}
	}
	w.deploy(t, "dt", w.other.ID, "", nil)
	dt, err := w.svc.Authenticate(Credentials{DeployToken: w.tokens["dt"]}, Download)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name                      string
		p                         Principal
		public, internal, private bool
	}{
		{"anonymous", Principal{}, true, false, false},
		{"deploy token", dt, true, false, false},
		{"outsider", w.pat(t, "outsider"), true, true, false},
		{"member", w.pat(t, "member"), true, true, true},
		{"admin", w.pat(t, "admin"), true, true, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := [3]bool{w.svc.CanSeeProject(tc.p, projects[store.Public]), w.svc.CanSeeProject(tc.p, projects[store.Internal]),
				w.svc.CanSeeProject(tc.p, projects[store.Private])}
			if want := [3]bool{tc.public, tc.internal, tc.private}; got != want {
				t.Fatalf("public/internal/private = %v, want %v", got, want)
			}
		})
	}
}

func TestGates(t *testing.T) {
	tests := []struct {
		plan           Plan
		feature        bool
		vr, dependency bool
	}{
		{PlanFree, true, false, false},
		{PlanPremium, true, true, false},
		{PlanUltimate, true, true, true},
		{PlanUltimate, false, false, true},
		{PlanPremium, false, false, false},
	}
	for _, tc := range tests {
		t.Run(string(tc.plan)+map[bool]string{true: "+vr", false: "-vr"}[tc.feature], func(t *testing.T) {
			s := New(nil, Options{Plan: tc.plan, DisableVirtualRegistry: !tc.feature})
			if s.VirtualRegistryEnabled() != tc.vr || s.DependencyListEnabled() != tc.dependency {
				t.Fatalf("virtual registry %v, dependency list %v; want %v, %v",
					s.VirtualRegistryEnabled(), s.DependencyListEnabled(), tc.vr, tc.dependency)
			}
		})
	}
}

func TestPlanAtLeast(t *testing.T) {
	tests := []struct {
		p, min Plan
		want   bool
	}{
		{PlanFree, PlanPremium, false},
		{PlanPremium, PlanPremium, true},
		{PlanUltimate, PlanPremium, true},
		{PlanPremium, PlanUltimate, false},
		{"gold", PlanFree, false},
	}
	for _, tc := range tests {
		if got := tc.p.AtLeast(tc.min); got != tc.want {
			t.Errorf("%s.AtLeast(%s) = %v", tc.p, tc.min, got)
		}
	}
}

func TestNewTokenValue(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		v := NewTokenValue("rdpat-")
		if !strings.HasPrefix(v, "rdpat-") || len(v) != len("rdpat-")+32 || seen[v] {
			t.Fatalf("token value %q (length %d, seen before %v)", v, len(v), seen[v])
		}
		seen[v] = true
	}
}
