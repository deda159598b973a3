package admin

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"registryd/internal/testclock"
	"registryd/store"
)

// listEnv is a small world for the list endpoints:
//
//	pub (public)        pub/site (public project)
//	int (internal)      int/tool (internal project)
//	priv (private)      alice developer;  priv/app (private project)
//	priv/sub (private)  inherits alice;   dave guest here
//	other (private)     bob owner
//	other/team          (private)         other/team/app: carol developer (private project)
//	other/team2         (private)
//	hidden (private)    nobody;           hidden/secret (private project)
//
// Each record is created one second after the one before, so created_at
// orders them as they are listed here.
type listEnv struct {
	t      *testing.T
	dir    string // the database's
	st     *store.Store
	srv    *Server
	clock  *testclock.Clock
	tokens map[string]string
	users  map[string]store.User
	groups map[string]store.Group
	projs  map[string]store.Project
}

const listRootToken = "rdpat-root-token"

func newListEnv(t *testing.T, mutate func(*serverOptions)) *listEnv {
	t.Helper()
	dir := t.TempDir()
	st, srv, clock := newTestServerIn(t, dir, listRootToken, mutate)
	e := &listEnv{t: t, dir: dir, st: st, srv: srv, clock: clock, tokens: map[string]string{"root": listRootToken},
		users: map[string]store.User{}, groups: map[string]store.Group{}, projs: map[string]store.Project{}}
	for _, name := range []string{"alice", "bob", "carol", "dave", "erin"} {
		u, tok := newUserWithToken(t, st, name, strings.ToUpper(name[:1])+name[1:], store.ScopeAPI)
		e.users[name], e.tokens[name] = u, tok
	}
	e.group("pub", "", store.Public)
	e.group("int", "", store.Internal)
	e.group("priv", "", store.Private)
	e.group("sub", "priv", store.Private)
	e.group("other", "", store.Private)
	e.group("team", "other", store.Private)
	e.group("team2", "other", store.Private)
	e.group("hidden", "", store.Private)
	e.project("site", "pub", store.Public)
	e.project("tool", "int", store.Internal)
	e.project("app", "priv", store.Private)
	e.project("teamapp", "team", store.Private)
	e.project("secret", "hidden", store.Private)
	e.groupMember("priv", "alice", store.Developer)
	e.groupMember("sub", "dave", store.Guest)
	e.groupMember("other", "bob", store.Owner)
	e.projectMember("teamapp", "carol", store.Developer)
	return e
}

func (e *listEnv) group(path, parent, visibility string) {
	e.t.Helper()
	e.clock.Advance(time.Second)
	n := store.NewGroup{Name: strings.ToUpper(path[:1]) + path[1:], Path: path, Visibility: visibility, Description: "the " + path + " group"}
	if parent != "" {
		n.ParentID = e.groups[parent].ID
	}
	g, err := e.st.CreateGroup(n)
	if err != nil {
		e.t.Fatal(err)
	}
	e.groups[path] = g
}

func (e *listEnv) project(path, ns, visibility string) {
	e.t.Helper()
	e.clock.Advance(time.Second)
	p, err := e.st.CreateProject(store.NewProject{Name: strings.ToUpper(path[:1]) + path[1:], Path: path,
		Visibility: visibility, NamespaceID: e.groups[ns].ID, Description: "project " + path})
	if err != nil {
		e.t.Fatal(err)
	}
	e.projs[path] = p
}

func (e *listEnv) groupMember(group, user string, level int) {
	e.t.Helper()
	e.clock.Advance(time.Second)
	if _, err := e.st.AddGroupMember(e.groups[group].ID, e.users[user].ID, level, nil); err != nil {
		e.t.Fatal(err)
	}
}

func (e *listEnv) projectMember(project, user string, level int) {
	e.t.Helper()
	e.clock.Advance(time.Second)
	if _, err := e.st.AddProjectMember(e.projs[project].ID, e.users[user].ID, level, nil, 0); err != nil {
		e.t.Fatal(err)
	}
}

// get sends GET path as role ("" sends no credentials, any other unknown
// role a wrong token).
func (e *listEnv) get(path, role string) testResp {
	e.t.Helper()
	return e.send(http.MethodGet, path, role)
}

func (e *listEnv) send(method, path, role string) testResp {
	e.t.Helper()
	req := httptest.NewRequest(method, path, nil)
	if role != "" {
		tok, ok := e.tokens[role]
		if !ok {
			tok = "rdpat-wrong-token"
		}
		req.Header.Set("PRIVATE-TOKEN", tok)
	}
	return serve(e.srv, req)
}

// names lists the values of key of a list answer, as strings.
func names(t *testing.T, r testResp, key string) []string {
	t.Helper()
	var out []string
	for _, item := range r.list(t) {
		out = append(out, fmt.Sprint(item[key]))
	}
	return out
}

func wantNames(t *testing.T, r testResp, key string, want ...string) {
	t.Helper()
	got := names(t, r.want(t, http.StatusOK), key)
	if !slices.Equal(got, want) {
		t.Fatalf("%s: got %q, want %q", key, got, want)
	}
}

func TestListGroupsVisibility(t *testing.T) {
	e := newListEnv(t, nil)
	tests := []struct {
		name, role, query string
		want              []string
	}{
		// Admins see every group, by name.
		{"admin", "root", "", []string{"hidden", "int", "other", "priv", "pub", "sub", "team", "team2"}},
		// Others see the groups they are related to, not public or
		// internal ones (all_available defaults to false for them).
		{"member and its subgroup", "alice", "", []string{"priv", "sub"}},
		{"member of a subgroup sees its parent", "dave", "", []string{"priv", "sub"}},
		{"project member sees the namespace and its ancestors", "carol", "", []string{"other", "team"}},
		{"owner of a top group sees its subgroups", "bob", "", []string{"other", "team", "team2"}},
		{"nobody's member", "erin", "", nil},
		{"all_available adds public and internal", "alice", "?all_available=true", []string{"int", "priv", "pub", "sub"}},
		{"all_available for a non-member", "erin", "?all_available=true", []string{"int", "pub"}},
		// An admin asking for all_available=false gets their own groups.
		{"admin without all_available", "root", "?all_available=false", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			wantNames(t, e.get("/api/v4/groups"+tc.query, tc.role), "path", tc.want...)
		})
	}

	// GET /groups/:id agrees with the list: carol sees other/team (her
	// project's namespace), not its sibling.
	e.get(fmt.Sprintf("/api/v4/groups/%d", e.groups["team"].ID), "carol").want(t, http.StatusOK)
	wantBody(t, e.get(fmt.Sprintf("/api/v4/groups/%d", e.groups["team2"].ID), "carol"), 404, `{"message":"404 Group Not Found"}`)
	e.get(fmt.Sprintf("/api/v4/groups/%d", e.groups["priv"].ID), "dave").want(t, http.StatusOK)
}

func TestListGroupsFilters(t *testing.T) {
	e := newListEnv(t, nil)
	e.groupMember("team", "alice", store.Maintainer)
	tests := []struct {
		name, role, query string
		want              []string
	}{
		// owned: explicit owner memberships only, not their subgroups.
		{"owned", "bob", "?owned=true", []string{"other"}},
		{"owned by nobody", "alice", "?owned=true", nil},
		// An admin's owned groups are their own, not every group.
		{"owned admin", "root", "?owned=true", nil},
		// min_access_level: groups where the effective level is enough.
		{"min_access_level developer", "alice", "?min_access_level=30", []string{"priv", "sub", "team"}},
		{"min_access_level maintainer", "alice", "?min_access_level=40", []string{"team"}},
		{"min_access_level guest", "dave", "?min_access_level=10", []string{"sub"}},
		{"top_level_only", "root", "?top_level_only=true", []string{"hidden", "int", "other", "priv", "pub"}},
		{"top_level_only member", "alice", "?top_level_only=true", []string{"other", "priv"}},
		// search: a name or path containing every term of 3+ characters.
		{"search", "root", "?search=TEAM", []string{"team", "team2"}},
		// Terms under 3 characters are dropped when a longer one is there.
		{"search two terms", "root", "?search=te%20am2", []string{"team2"}},
		{"search every term", "root", "?search=team%20hid", nil},
		{"search quoted", "root", `?search="team2"`, []string{"team2"}},
		// Two phrases side by side are both phrases (each must match).
		{"search two quoted", "root", `?search="team"%20"am2"`, []string{"team2"}},
		{"search in the name", "root", "?search=Hidd", []string{"hidden"}},
		// Shorter than 3 characters: the whole name or path only.
		{"search short", "root", "?search=in", nil},
		{"search short exact", "root", "?search=INT", []string{"int"}},
		{"blank search", "root", "?search=%20", []string{"hidden", "int", "other", "priv", "pub", "sub", "team", "team2"}},
		{"visibility", "root", "?visibility=internal", []string{"int"}},
		{"skip_groups", "alice", fmt.Sprintf("?skip_groups[]=%d&skip_groups[]=%d", e.groups["sub"].ID, e.groups["team"].ID), []string{"other", "priv"}},
		{"order by id desc", "alice", "?order_by=id&sort=desc", []string{"team", "other", "sub", "priv"}},
		{"order by name desc", "alice", "?sort=desc", []string{"team", "sub", "priv", "other"}},
		{"order by path", "carol", "?order_by=path", []string{"other", "team"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			wantNames(t, e.get("/api/v4/groups"+tc.query, tc.role), "path", tc.want...)
		})
	}

	for _, tc := range []struct{ query, body string }{
		{"?min_access_level=15", `{"error":"min_access_level does not have a valid value"}`},
		{"?order_by=similarity", `{"error":"order_by does not have a valid value"}`},
		{"?sort=up", `{"error":"sort does not have a valid value"}`},
		{"?owned=maybe", `{"error":"owned is invalid"}`},
		{"?skip_groups=a", `{"error":"skip_groups is invalid"}`},
		{"?per_page=0", `{"error":"per_page does not have a valid value"}`},
	} {
		wantBody(t, e.get("/api/v4/groups"+tc.query, "alice"), 400, tc.body)
	}
}

func TestListGroupsPages(t *testing.T) {
	e := newListEnv(t, nil)
	r := e.get("/api/v4/groups?per_page=3&page=2", "root")
	wantNames(t, r, "path", "priv", "pub", "sub")
	for k, v := range map[string]string{"X-Page": "2", "X-Per-Page": "3", "X-Total": "8", "X-Total-Pages": "3",
		"X-Next-Page": "3", "X-Prev-Page": "1"} {
		if got := r.header.Get(k); got != v {
			t.Fatalf("%s: %q, want %q", k, got, v)
		}
	}
	if link := r.header.Get("Link"); !strings.Contains(link, `<http://registry.example:8081/api/v4/groups?page=3&per_page=3>; rel="next"`) {
		t.Fatalf("Link: %s", link)
	}
	wantNames(t, e.get("/api/v4/groups?per_page=3&page=3", "root"), "path", "team", "team2")
	wantNames(t, e.get("/api/v4/groups?per_page=3&page=4", "root"), "path")

	// The items are the group resource of GET /groups/:id.
	one := e.get("/api/v4/groups?search=sub", "root").list(t)
	single := object(t, e.get(fmt.Sprintf("/api/v4/groups/%d", e.groups["sub"].ID), "root"))
	if len(one) != 1 || fmt.Sprint(one[0]) != fmt.Sprint(single) {
		t.Fatalf("list item %v, GET %v", one, single)
	}
	if single["full_path"] != "priv/sub" || single["parent_id"] != float64(e.groups["priv"].ID) {
		t.Fatalf("group %v", single)
	}
}

func TestListProjects(t *testing.T) {
	e := newListEnv(t, nil)
	tests := []struct {
		name, role, query string
		want              []string
	}{
		// Newest first.
		{"admin sees all", "root", "", []string{"secret", "teamapp", "app", "tool", "site"}},
		{"member", "alice", "", []string{"app", "tool", "site"}},
		{"project member", "carol", "", []string{"teamapp", "tool", "site"}},
		{"inherited from a top group", "bob", "", []string{"teamapp", "tool", "site"}},
		{"nobody's member sees public and internal", "erin", "", []string{"tool", "site"}},
		{"membership", "alice", "?membership=true", []string{"app"}},
		{"membership of an admin", "root", "?membership=true", nil},
		{"owned through the group", "bob", "?owned=true", []string{"teamapp"}},
		{"owned", "carol", "?owned=true", nil},
		{"min_access_level", "carol", "?min_access_level=30", []string{"teamapp"}},
		{"min_access_level above", "carol", "?min_access_level=40", nil},
		// A guest of a subgroup has no project there.
		{"guest elsewhere", "dave", "?membership=true", nil},
		{"search name", "root", "?search=APP", []string{"teamapp", "app"}},
		{"search description", "root", "?search=project%20sec", []string{"secret"}},
		{"search hidden from a non-member", "erin", "?search=secret", nil},
		{"search namespaces", "root", "?search=priv/&search_namespaces=true", []string{"app"}},
		{"visibility", "alice", "?visibility=private", []string{"app"}},
		{"archived", "root", "?archived=true", nil},
		{"not archived", "alice", "?archived=false", []string{"app", "tool", "site"}},
		{"order by name", "root", "?order_by=name&sort=asc", []string{"app", "secret", "site", "teamapp", "tool"}},
		{"order by id", "root", "?order_by=id&sort=asc", []string{"site", "tool", "app", "teamapp", "secret"}},
		{"updated_at is created_at", "root", "?order_by=updated_at", []string{"secret", "teamapp", "app", "tool", "site"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			wantNames(t, e.get("/api/v4/projects"+tc.query, tc.role), "path", tc.want...)
		})
	}
	r := e.get("/api/v4/projects?per_page=2&page=3", "root")
	wantNames(t, r, "path", "site")
	if r.header.Get("X-Total") != "5" || r.header.Get("X-Total-Pages") != "3" || r.header.Get("X-Next-Page") != "" {
		t.Fatalf("headers %v", r.header)
	}
	item := e.get("/api/v4/projects?search=teamapp", "carol").list(t)[0]
	ns, _ := item["namespace"].(map[string]any)
	if item["path_with_namespace"] != "other/team/teamapp" || ns["full_path"] != "other/team" || item["visibility"] != "private" {
		t.Fatalf("project %v", item)
	}
	wantBody(t, e.get("/api/v4/projects?min_access_level=5", "carol"), 400, `{"error":"min_access_level does not have a valid value"}`)
	wantBody(t, e.get("/api/v4/projects?order_by=stars", "carol"), 400, `{"error":"order_by does not have a valid value"}`)
}

// TestSearchQuotedPhrases: a "quoted phrase" is one term when blanks or the
// ends stand on both sides, as GitLab's (?<=^| )"[^"]+"(?= |$); two side by
// side are two phrases (they used to lose the second one to the shared blank).
func TestSearchQuotedPhrases(t *testing.T) {
	tests := []struct {
		q    string
		want []string
	}{
		{`"a b" "c d"`, []string{"a b", "c d"}},
		{`"a b" "c d" "e f"`, []string{"a b", "c d", "e f"}},
		{`xyz "a b" uvw`, []string{"xyz", "uvw", "a b"}},
		{`  "one two"   "three four"  `, []string{"one two", "three four"}},
		{`x"abc" "def"`, []string{`x"abc"`, "def"}},
		{`"abc"x`, []string{`"abc"x`}},
		{`a"b "cde"`, []string{`a"b`, "cde"}},
		{`"" "abc"`, []string{`""`, "abc"}},
		{`"unclosed phrase`, []string{`"unclosed`, "phrase"}},
	}
	for _, tc := range tests {
		s := newSearch(&tc.q, true)
		if !slices.Equal(s.terms, tc.want) {
			t.Errorf("%s: terms %q, want %q", tc.q, s.terms, tc.want)
		}
	}
}
