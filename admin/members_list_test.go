package admin

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"registryd/store"
)

func TestListMembers(t *testing.T) {
	e := newListEnv(t, nil)
	g := func(path string) string { return fmt.Sprintf("/api/v4/groups/%d", e.groups[path].ID) }
	p := func(path string) string { return fmt.Sprintf("/api/v4/projects/%d", e.projs[path].ID) }
	e.groupMember("priv", "bob", store.Maintainer)
	e.groupMember("sub", "alice", store.Guest) // lower than what priv gives her
	e.groupMember("sub", "bob", store.Owner)   // higher than what priv gives him
	e.projectMember("app", "carol", store.Reporter)
	e.projectMember("teamapp", "bob", store.Guest) // bob owns other: owner wins
	// An expired membership grants nothing and is not listed.
	expires := e.clock.Now().Add(24 * time.Hour)
	if _, err := e.st.AddGroupMember(e.groups["priv"].ID, e.users["erin"].ID, store.Developer, &expires); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(48 * time.Hour)

	tests := []struct {
		name, role, path string
		want             []string
	}{
		// Direct members, in the order they joined.
		{"group", "root", g("priv") + "/members", []string{"alice", "bob"}},
		{"subgroup", "alice", g("sub") + "/members", []string{"dave", "alice", "bob"}},
		{"project", "carol", p("teamapp") + "/members", []string{"carol", "bob"}},
		{"public group", "erin", g("pub") + "/members", nil},
		// With ancestors: one membership a user, the highest.
		{"subgroup all", "dave", g("sub") + "/members/all", []string{"alice", "dave", "bob"}},
		// bob's membership of other is older than carol's of the project.
		{"project all", "bob", p("teamapp") + "/members/all", []string{"bob", "carol"}},
		{"project all through its group", "alice", p("app") + "/members/all", []string{"alice", "bob", "carol"}},
		{"query", "root", g("sub") + "/members/all?query=ALI", []string{"alice"}},
		{"query at username", "root", g("sub") + "/members/all?query=@bo", []string{"bob"}},
		{"query a name", "root", g("sub") + "/members?query=Dave", []string{"dave"}},
		{"query no match", "root", g("sub") + "/members?query=zed", nil},
		{"user_ids", "root", fmt.Sprintf("%s/members/all?user_ids=%d,%d", g("sub"), e.users["bob"].ID, e.users["dave"].ID), []string{"dave", "bob"}},
		{"skip_users", "root", fmt.Sprintf("%s/members/all?skip_users[]=%d", g("sub"), e.users["alice"].ID), []string{"dave", "bob"}},
		{"page", "root", g("sub") + "/members/all?per_page=2&page=2", []string{"bob"}},
		// A path works as the id.
		{"by path", "root", "/api/v4/groups/priv%2Fsub/members", []string{"dave", "alice", "bob"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			wantNames(t, e.get(tc.path, tc.role), "username", tc.want...)
		})
	}

	levels := map[string]float64{}
	for _, m := range e.get(g("sub")+"/members/all", "root").want(t, 200).list(t) {
		levels[m["username"].(string)] = m["access_level"].(float64)
	}
	if levels["alice"] != store.Developer || levels["bob"] != store.Owner || levels["dave"] != store.Guest {
		t.Fatalf("levels %v", levels)
	}
	r := e.get(g("sub")+"/members/all?per_page=2", "root")
	if r.header.Get("X-Total") != "3" || r.header.Get("X-Next-Page") != "2" {
		t.Fatalf("headers %v", r.header)
	}

	// One member.
	m := object(t, e.get(fmt.Sprintf("%s/members/%d", g("sub"), e.users["alice"].ID), "dave").want(t, 200))
	if m["username"] != "alice" || m["access_level"] != float64(store.Guest) || m["expires_at"] != nil ||
		m["web_url"] != "http://registry.example:8081/alice" || m["state"] != "active" {
		t.Fatalf("member %v", m)
	}
	m = object(t, e.get(fmt.Sprintf("%s/members/all/%d", g("sub"), e.users["alice"].ID), "dave").want(t, 200))
	if m["access_level"] != float64(store.Developer) {
		t.Fatalf("inherited member %v", m)
	}
	m = object(t, e.get(fmt.Sprintf("%s/members/all/%d", p("app"), e.users["bob"].ID), "root").want(t, 200))
	if m["access_level"] != float64(store.Maintainer) {
		t.Fatalf("inherited project member %v", m)
	}
	e.get(fmt.Sprintf("%s/members/%d", p("teamapp"), e.users["carol"].ID), "carol").want(t, 200)

	for _, tc := range []struct {
		name, role, path string
		status           int
		body             string
	}{
		{"inherited is not direct", "root", fmt.Sprintf("%s/members/%d", g("sub"), e.users["carol"].ID), 404, `{"message":"404 Not found"}`},
		{"not a member", "root", fmt.Sprintf("%s/members/%d", g("priv"), e.users["dave"].ID), 404, `{"message":"404 Not found"}`},
		{"expired", "root", fmt.Sprintf("%s/members/%d", g("priv"), e.users["erin"].ID), 404, `{"message":"404 Not found"}`},
		{"not a member at all", "root", fmt.Sprintf("%s/members/all/%d", g("priv"), e.users["carol"].ID), 404, `{"message":"404 Not found"}`},
		{"unknown user", "root", g("priv") + "/members/999", 404, `{"message":"404 Not found"}`},
		{"bad user id", "root", g("priv") + "/members/all/x", 400, `{"error":"user_id is invalid"}`},
		{"invisible group", "erin", g("priv") + "/members", 404, `{"message":"404 Group Not Found"}`},
		{"expired member sees nothing", "erin", fmt.Sprintf("%s/members/all/%d", g("priv"), e.users["alice"].ID), 404, `{"message":"404 Group Not Found"}`},
		{"invisible project", "erin", p("secret") + "/members/all", 404, `{"message":"404 Project Not Found"}`},
		{"unknown group", "root", "/api/v4/groups/999/members", 404, `{"message":"404 Group Not Found"}`},
		{"bad user_ids", "root", g("priv") + "/members?user_ids=x", 400, `{"error":"user_ids is invalid"}`},
		{"no token", "", g("pub") + "/members", 401, `{"message":"401 Unauthorized"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantBody(t, e.get(tc.path, tc.role), tc.status, tc.body)
		})
	}
	// DELETE of "all" is no member endpoint.
	wantBody(t, e.send(http.MethodDelete, g("priv")+"/members/all", "root"), 405, `{"error":"405 Not Allowed"}`)
}
