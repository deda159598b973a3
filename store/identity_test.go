package store

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestCreateUser(t *testing.T) {
	s, _ := openTest(t)
	alice := ok(s.CreateUser(NewUser{Username: "alice", Name: "Alice", Email: "alice@example.com", Password: "long-enough", Admin: true}))(t)
	if alice.ID == 0 || !alice.Admin || alice.State != "active" || !strings.HasPrefix(alice.PasswordHash, "pbkdf2-sha256$") {
		t.Fatalf("user = %+v", alice)
	}
	if got := ok(s.UserByUsername("ALICE"))(t); got.ID != alice.ID {
		t.Fatalf("UserByUsername is not case-insensitive: %+v", got)
	}

	tests := []struct {
		name       string
		n          NewUser
		field, msg string // validation
		conflict   string
	}{
		{name: "blank username", n: NewUser{Name: "x", Email: "x@e.x"}, field: "username", msg: "can't be blank"},
		{name: "bad username", n: NewUser{Username: "-x", Name: "x", Email: "x@e.x"}, field: "username"},
		{name: "username ending .git", n: NewUser{Username: "x.git", Name: "x", Email: "x@e.x"}, field: "username"},
		{name: "username too long", n: NewUser{Username: strings.Repeat("u", 256), Name: "x", Email: "x@e.x"}, field: "username", msg: "is too long (maximum is 255 characters)"},
		{name: "blank name", n: NewUser{Username: "x", Name: " ", Email: "x@e.x"}, field: "name", msg: "can't be blank"},
		{name: "bad email", n: NewUser{Username: "x", Name: "x", Email: "nope"}, field: "email", msg: "is invalid"},
		{name: "short password", n: NewUser{Username: "x", Name: "x", Email: "x@e.x", Password: "short"}, field: "password"},
		{name: "taken username, other case", n: NewUser{Username: "Alice", Name: "x", Email: "x@e.x"}, conflict: "Username has already been taken"},
		{name: "taken email, other case", n: NewUser{Username: "bob", Name: "x", Email: "ALICE@example.com"}, conflict: "Email has already been taken"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := snapshot(t, s)
			_, err := s.CreateUser(tc.n)
			switch {
			case tc.conflict != "":
				var ce *ConflictError
				if !errors.As(err, &ce) || ce.Reason != tc.conflict || !errors.Is(err, ErrConflict) {
					t.Fatalf("err = %v, want conflict %q", err, tc.conflict)
				}
			case tc.msg != "":
				wantValidation(t, err, tc.field, tc.msg)
			default:
				var ve *ValidationError
				if !errors.As(err, &ve) || len(ve.Fields[tc.field]) == 0 {
					t.Fatalf("err = %v, want a validation error on %s", err, tc.field)
				}
			}
			if snapshot(t, s) != before {
				t.Fatal("a refused user changed the database")
			}
		})
	}
	if _, err := s.User(999); !errors.Is(err, ErrNotFound) {
		t.Fatalf("User(999): %v", err)
	}
}

func TestListUsersPages(t *testing.T) {
	s, _ := openTest(t)
	for i := range 5 {
		user(t, s, fmt.Sprintf("u%d", i))
	}
	for _, tc := range []struct {
		offset, limit int
		want          string
	}{
		{0, 2, "u0 u1"}, {2, 2, "u2 u3"}, {4, 2, "u4"}, {5, 2, ""}, {0, 100, "u0 u1 u2 u3 u4"},
	} {
		users, total, err := s.ListUsers(tc.offset, tc.limit)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, u := range users {
			names = append(names, u.Username)
		}
		if strings.Join(names, " ") != tc.want || total != 5 {
			t.Fatalf("ListUsers(%d, %d) = %v total %d, want %q total 5", tc.offset, tc.limit, names, total, tc.want)
		}
	}
	if n := s.countUsers(); n != 5 {
		t.Fatalf("countUsers = %d", n)
	}
}

func TestTokens(t *testing.T) {
	s, c := openTest(t)
	u := user(t, s, "alice")
	tomorrow := c.Now().Add(24 * time.Hour)
	tok := ok(s.CreateToken(NewToken{UserID: u.ID, Name: "ci", Scopes: []string{ScopeReadAPI, ScopeAPI, ScopeAPI}, ExpiresAt: &tomorrow, Plain: "value-1"}))(t)
	if strings.Join(tok.Scopes, ",") != "api,read_api" {
		t.Fatalf("scopes %v, want sorted and without duplicates", tok.Scopes)
	}
	if !tok.Active(c.Now()) || tok.Active(tomorrow) || tok.Active(tomorrow.Add(time.Hour)) {
		t.Fatal("a token is active before its expiry and not from it on")
	}

	past := c.Now().Add(-time.Hour)
	tests := []struct {
		name       string
		n          NewToken
		field, msg string
		notFound   bool
		conflict   bool
	}{
		{name: "blank name", n: NewToken{UserID: u.ID, Scopes: []string{ScopeAPI}, Plain: "v"}, field: "name", msg: "can't be blank"},
		{name: "no scopes", n: NewToken{UserID: u.ID, Name: "x", Plain: "v"}, field: "scopes", msg: "can't be blank"},
		{name: "unknown scope", n: NewToken{UserID: u.ID, Name: "x", Scopes: []string{ScopeAPI, "sudo"}, Plain: "v"}, field: "scopes", msg: "can only contain available scopes"},
		{name: "expiry in the past", n: NewToken{UserID: u.ID, Name: "x", Scopes: []string{ScopeAPI}, ExpiresAt: &past, Plain: "v"}, field: "expires_at", msg: "must be in the future"},
		{name: "unknown user", n: NewToken{UserID: 999, Name: "x", Scopes: []string{ScopeAPI}, Plain: "v"}, notFound: true},
		{name: "same value twice", n: NewToken{UserID: u.ID, Name: "x", Scopes: []string{ScopeAPI}, Plain: "value-1"}, conflict: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := snapshot(t, s)
			_, err := s.CreateToken(tc.n)
			switch {
			case tc.notFound:
				if !errors.Is(err, ErrNotFound) {
					t.Fatalf("err = %v, want not found", err)
				}
			case tc.conflict:
				if !errors.Is(err, ErrConflict) {
					t.Fatalf("err = %v, want conflict", err)
				}
			default:
				wantValidation(t, err, tc.field, tc.msg)
			}
			if snapshot(t, s) != before {
				t.Fatal("a refused token changed the database")
			}
		})
	}

	noErr(t, s.RevokeToken(tok.ID))
	noErr(t, s.RevokeToken(tok.ID)) // revoking twice is fine
	if got := ok(s.Token(tok.ID))(t); !got.Revoked || got.Active(c.Now()) {
		t.Fatalf("revoked token = %+v", got)
	}
	if err := s.RevokeToken(999); !errors.Is(err, ErrNotFound) {
		t.Fatalf("revoking an unknown token: %v", err)
	}
	if _, _, err := s.TokenByHash(hashToken("no such token")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("TokenByHash of an unknown value: %v", err)
	}
}

func TestDeployTokens(t *testing.T) {
	s, _ := openTest(t)
	g := topGroup(t, s, "acme")
	d := ok(s.CreateDeployToken(NewDeployToken{GroupID: g.ID, Name: "ci", Scopes: []string{ScopeReadVirtualRegistry}, Plain: "dt-1"}))(t)
	if d.Username != fmt.Sprintf("gitlab+deploy-token-%d", d.ID) {
		t.Fatalf("default username %q", d.Username)
	}
	named := ok(s.CreateDeployToken(NewDeployToken{GroupID: g.ID, Name: "ci", Username: "maven-bot+ci", Scopes: []string{ScopeReadVirtualRegistry}, Plain: "dt-2"}))(t)
	if named.Username != "maven-bot+ci" {
		t.Fatalf("username %q", named.Username)
	}
	u := user(t, s, "alice")
	ok(s.CreateToken(NewToken{UserID: u.ID, Name: "pat", Scopes: []string{ScopeAPI}, Plain: "pat-1"}))(t)

	tests := []struct {
		name       string
		n          NewDeployToken
		field, msg string
		notFound   bool
		conflict   bool
	}{
		{name: "api scope", n: NewDeployToken{GroupID: g.ID, Name: "x", Scopes: []string{ScopeAPI}, Plain: "v"}, field: "scopes", msg: "can only contain available scopes"},
		{name: "no scope", n: NewDeployToken{GroupID: g.ID, Name: "x", Plain: "v"}, field: "scopes", msg: "can't be blank"},
		{name: "bad username", n: NewDeployToken{GroupID: g.ID, Name: "x", Username: "a b", Scopes: []string{ScopeReadVirtualRegistry}, Plain: "v"}, field: "username"},
		{name: "unknown group", n: NewDeployToken{GroupID: 999, Name: "x", Scopes: []string{ScopeReadVirtualRegistry}, Plain: "v"}, notFound: true},
		{name: "value of a personal token", n: NewDeployToken{GroupID: g.ID, Name: "x", Scopes: []string{ScopeReadVirtualRegistry}, Plain: "pat-1"}, conflict: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := snapshot(t, s)
			_, err := s.CreateDeployToken(tc.n)
			switch {
			case tc.notFound:
				if !errors.Is(err, ErrNotFound) {
					t.Fatalf("err = %v, want not found", err)
				}
			case tc.conflict:
				if !errors.Is(err, ErrConflict) {
					t.Fatalf("err = %v, want conflict", err)
				}
			case tc.msg != "":
				wantValidation(t, err, tc.field, tc.msg)
			default:
				var ve *ValidationError
				if !errors.As(err, &ve) || len(ve.Fields[tc.field]) == 0 {
					t.Fatalf("err = %v, want a validation error on %s", err, tc.field)
				}
			}
			if snapshot(t, s) != before {
				t.Fatal("a refused deploy token changed the database")
			}
		})
	}
}

func TestGroupsAndProjects(t *testing.T) {
	s, _ := openTest(t)
	owner := user(t, s, "owner")
	acme := ok(s.CreateGroup(NewGroup{Name: "Acme Corp", Path: "acme", CreatorID: owner.ID}))(t)
	if acme.Visibility != Private || !acme.TopLevel() || acme.FullPath != "acme" {
		t.Fatalf("group = %+v", acme)
	}
	if lvl := s.GroupAccessLevel(acme.ID, owner.ID); lvl != Owner {
		t.Fatalf("creator's level %d, want owner", lvl)
	}
	plat := ok(s.CreateGroup(NewGroup{Name: "Platform", Path: "platform", ParentID: acme.ID, Visibility: Private}))(t)
	if plat.FullPath != "acme/platform" || plat.FullName != "Acme Corp / Platform" || plat.TopLevel() {
		t.Fatalf("subgroup = %+v", plat)
	}
	deep := ok(s.CreateGroup(NewGroup{Name: "Deep", Path: "deep", ParentID: plat.ID}))(t)
	if top := ok(s.topLevelGroup(deep.ID))(t); top.ID != acme.ID {
		t.Fatalf("topLevelGroup(deep) = %+v", top)
	}
	if got := ok(s.GroupByRef("Acme/Platform"))(t); got.ID != plat.ID {
		t.Fatalf("GroupByRef by path: %+v", got)
	}
	pr := ok(s.CreateProject(NewProject{Name: "My App", NamespaceID: plat.ID, CreatorID: owner.ID}))(t)
	if pr.Path != "my-app" || pr.FullPath != "acme/platform/my-app" || pr.Visibility != Private {
		t.Fatalf("project = %+v", pr)
	}
	if got := ok(s.ProjectByRef("acme/platform/MY-APP"))(t); got.ID != pr.ID {
		t.Fatalf("ProjectByRef: %+v", got)
	}

	groupTests := []struct {
		name       string
		n          NewGroup
		field, msg string
		resource   string // not found
	}{
		{name: "path taken, other case", n: NewGroup{Name: "x", Path: "ACME"}, field: "path", msg: "has already been taken"},
		{name: "path of a project", n: NewGroup{Name: "x", Path: "my-app", ParentID: plat.ID}, field: "path", msg: "has already been taken"},
		{name: "bad path", n: NewGroup{Name: "x", Path: "a/b"}, field: "path"},
		{name: "bad visibility", n: NewGroup{Name: "x", Path: "x", Visibility: "secret"}, field: "visibility_level", msg: "is invalid"},
		{name: "long description", n: NewGroup{Name: "x", Path: "x", Description: strings.Repeat("d", 1025)}, field: "description", msg: "is too long (maximum is 1024 characters)"},
		{name: "unknown parent", n: NewGroup{Name: "x", Path: "x", ParentID: 999}, resource: "Parent Group"},
		// The group is written before the creator is checked: the
		// transaction must roll all of it back.
		{name: "unknown creator", n: NewGroup{Name: "x", Path: "x", CreatorID: 999}, resource: "User"},
	}
	for _, tc := range groupTests {
		t.Run("group "+tc.name, func(t *testing.T) {
			before := snapshot(t, s)
			_, err := s.CreateGroup(tc.n)
			switch {
			case tc.resource != "":
				var nf *NotFoundError
				if !errors.As(err, &nf) || nf.Resource != tc.resource {
					t.Fatalf("err = %v, want %s not found", err, tc.resource)
				}
			case tc.msg != "":
				wantValidation(t, err, tc.field, tc.msg)
			default:
				var ve *ValidationError
				if !errors.As(err, &ve) || len(ve.Fields[tc.field]) == 0 {
					t.Fatalf("err = %v, want a validation error on %s", err, tc.field)
				}
			}
			if snapshot(t, s) != before {
				t.Fatal("a refused group changed the database")
			}
		})
	}
	if _, err := s.GroupByRef("x"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a refused group is findable: %v", err)
	}

	projectTests := []struct {
		name       string
		n          NewProject
		field, msg string
		notFound   bool
	}{
		{name: "path taken", n: NewProject{Name: "My App", NamespaceID: plat.ID}, field: "path", msg: "has already been taken"},
		{name: "path of a subgroup", n: NewProject{Name: "x", Path: "deep", NamespaceID: plat.ID}, field: "path", msg: "has already been taken"},
		{name: "unknown namespace", n: NewProject{Name: "x", NamespaceID: 999}, notFound: true},
		{name: "blank name", n: NewProject{Name: " ", Path: "p", NamespaceID: plat.ID}, field: "name", msg: "can't be blank"},
		{name: "bad visibility", n: NewProject{Name: "x", NamespaceID: plat.ID, Visibility: "open"}, field: "visibility_level", msg: "is invalid"},
	}
	for _, tc := range projectTests {
		t.Run("project "+tc.name, func(t *testing.T) {
			before := snapshot(t, s)
			_, err := s.CreateProject(tc.n)
			if tc.notFound {
				if !errors.Is(err, ErrNotFound) {
					t.Fatalf("err = %v, want not found", err)
				}
			} else {
				wantValidation(t, err, tc.field, tc.msg)
			}
			if snapshot(t, s) != before {
				t.Fatal("a refused project changed the database")
			}
		})
	}
}

func TestMembershipInheritance(t *testing.T) {
	s, c := openTest(t)
	acme := topGroup(t, s, "acme")
	plat := ok(s.CreateGroup(NewGroup{Name: "platform", Path: "platform", ParentID: acme.ID}))(t)
	deep := ok(s.CreateGroup(NewGroup{Name: "deep", Path: "deep", ParentID: plat.ID}))(t)
	other := topGroup(t, s, "other")
	app := ok(s.CreateProject(NewProject{Name: "app", NamespaceID: deep.ID}))(t)
	otherApp := ok(s.CreateProject(NewProject{Name: "app", NamespaceID: other.ID}))(t)

	top, mid, proj, temp, nobody := user(t, s, "top"), user(t, s, "mid"), user(t, s, "proj"), user(t, s, "temp"), user(t, s, "nobody")
	ok(s.AddGroupMember(acme.ID, top.ID, Reporter, nil))(t)
	ok(s.AddGroupMember(plat.ID, top.ID, Maintainer, nil))(t) // higher on a subgroup
	ok(s.AddGroupMember(plat.ID, mid.ID, Developer, nil))(t)
	ok(s.AddProjectMember(app.ID, proj.ID, Guest, nil, 0))(t)
	ok(s.AddProjectMember(app.ID, mid.ID, Reporter, nil, 0))(t) // lower than inherited
	expires := c.Now().Add(time.Hour)
	ok(s.AddGroupMember(acme.ID, temp.ID, Owner, &expires))(t)

	tests := []struct {
		name         string
		user         User
		acme, plat   int
		deep, app    int
		under, other bool
	}{
		{"member of the top group and higher on a subgroup", top, Reporter, Maintainer, Maintainer, Maintainer, true, false},
		{"member of a subgroup only", mid, NoAccess, Developer, Developer, Developer, true, false},
		{"member of a project only", proj, NoAccess, NoAccess, NoAccess, Guest, true, false},
		{"expiring membership, still valid", temp, Owner, Owner, Owner, Owner, true, false},
		{"nobody", nobody, NoAccess, NoAccess, NoAccess, NoAccess, false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := []int{s.GroupAccessLevel(acme.ID, tc.user.ID), s.GroupAccessLevel(plat.ID, tc.user.ID),
				s.GroupAccessLevel(deep.ID, tc.user.ID), s.ProjectAccessLevel(app.ID, tc.user.ID)}
			want := []int{tc.acme, tc.plat, tc.deep, tc.app}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("levels acme/platform/deep/app = %v, want %v", got, want)
			}
			if s.HasMembershipUnder(acme.ID, tc.user.ID) != tc.under {
				t.Fatalf("HasMembershipUnder(acme) = %v", !tc.under)
			}
			if s.HasMembershipUnder(other.ID, tc.user.ID) != tc.other || s.ProjectAccessLevel(otherApp.ID, tc.user.ID) != NoAccess {
				t.Fatal("a membership leaked into another hierarchy")
			}
		})
	}

	t.Run("expired membership counts for nothing", func(t *testing.T) {
		c.Advance(2 * time.Hour)
		if lvl := s.GroupAccessLevel(deep.ID, temp.ID); lvl != NoAccess {
			t.Fatalf("level after expiry %d", lvl)
		}
		if s.HasMembershipUnder(acme.ID, temp.ID) {
			t.Fatal("an expired membership still counts under acme")
		}
	})

	t.Run("adding and removing", func(t *testing.T) {
		before := snapshot(t, s)
		if _, err := s.AddGroupMember(acme.ID, top.ID, Owner, nil); !errors.Is(err, ErrConflict) {
			t.Fatalf("duplicate member: %v", err)
		}
		_, err := s.AddGroupMember(acme.ID, nobody.ID, 35, nil)
		wantValidation(t, err, "access_level", "is not included in the list")
		if _, err := s.AddGroupMember(999, nobody.ID, Guest, nil); !errors.Is(err, ErrNotFound) {
			t.Fatalf("unknown group: %v", err)
		}
		if _, err := s.AddGroupMember(acme.ID, 999, Guest, nil); !errors.Is(err, ErrNotFound) {
			t.Fatalf("unknown user: %v", err)
		}
		if _, err := s.AddProjectMember(999, nobody.ID, Guest, nil, 0); !errors.Is(err, ErrNotFound) {
			t.Fatalf("unknown project: %v", err)
		}
		if err := s.RemoveGroupMember(acme.ID, nobody.ID); !errors.Is(err, ErrNotFound) {
			t.Fatalf("removing a non-member: %v", err)
		}
		if snapshot(t, s) != before {
			t.Fatal("refused membership changes changed the database")
		}
		noErr(t, s.RemoveGroupMember(plat.ID, top.ID))
		if lvl := s.GroupAccessLevel(deep.ID, top.ID); lvl != Reporter {
			t.Fatalf("after removal from platform, deep level %d, want the inherited reporter", lvl)
		}
		noErr(t, s.RemoveProjectMember(app.ID, proj.ID, 0))
		if s.HasMembershipUnder(acme.ID, proj.ID) {
			t.Fatal("removed project member still counts")
		}
	})
}

func TestGenerations(t *testing.T) {
	s, _ := openTest(t)
	u := user(t, s, "alice")
	g := topGroup(t, s, "acme")

	auth := s.AuthGeneration()
	ok(s.AddGroupMember(g.ID, u.ID, Guest, nil))(t)
	if s.AuthGeneration() == auth {
		t.Fatal("adding a member did not change the auth generation")
	}
	auth = s.AuthGeneration()
	if _, err := s.AddGroupMember(g.ID, u.ID, Guest, nil); err == nil {
		t.Fatal("duplicate member accepted")
	}
	if s.AuthGeneration() != auth {
		t.Fatal("a failed mutation changed the auth generation")
	}
	tok := ok(s.CreateToken(NewToken{UserID: u.ID, Name: "t", Scopes: []string{ScopeAPI}, Plain: "p"}))(t)
	auth = s.AuthGeneration()
	noErr(t, s.RevokeToken(tok.ID))
	if s.AuthGeneration() == auth {
		t.Fatal("revoking a token did not change the auth generation")
	}

	cache := s.CacheGeneration()
	r := ok(s.CreateRegistry(g.ID, "main", ""))(t)
	a := up(t, s, r.ID, "https://a.example/m")
	if s.CacheGeneration() == cache {
		t.Fatal("creating an upstream did not change the cache generation")
	}
	cache = s.CacheGeneration()
	noErr(t, s.DeleteAssociation(a.Assoc.ID))
	if s.CacheGeneration() == cache {
		t.Fatal("removing an upstream from a registry did not change the cache generation")
	}
}

func TestEnsureRoot(t *testing.T) {
	s, _ := openTest(t)
	if s.Initialized() {
		t.Fatal("a new store says it is initialised")
	}
	if created := ok(s.EnsureRoot("first-root-token-value"))(t); !created {
		t.Fatal("root not created")
	}
	if created := ok(s.EnsureRoot("second-root-token-value"))(t); created {
		t.Fatal("root created twice")
	}
	if !s.Initialized() {
		t.Fatal("not initialised after EnsureRoot")
	}
	tok, u, err := s.TokenByHash(hashToken("first-root-token-value"))
	if err != nil || u.Username != rootUsername || !u.Admin || strings.Join(tok.Scopes, ",") != ScopeAPI {
		t.Fatalf("root token: %+v %+v %v", tok, u, err)
	}
	if _, _, err := s.TokenByHash(hashToken("second-root-token-value")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the second EnsureRoot stored a token: %v", err)
	}
}
