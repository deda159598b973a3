package itest

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// restartWorld is a realistic state built through the API.
type restartWorld struct {
	groups, projects, users []int64
	tokens                  map[string]string // user name -> token
	revoked, deploy         string
	good, bad, anon         int64 // upstreams: right password, wrong password, none
	registries              []int64
	topGroups               []int64
}

// snapshot is the full JSON of every GET that shows the state, as root and
// as each user (GET /user).
func (w *restartWorld) snapshot(t *testing.T, d *Daemon) string {
	t.Helper()
	var b strings.Builder
	get := func(path, token string) {
		r := d.Do("GET", path, token, nil)
		if r.Status != 200 {
			t.Fatalf("GET %s: %d %s", path, r.Status, r.Body)
		}
		fmt.Fprintf(&b, "%s %s\n", path, strings.TrimSpace(string(r.Body)))
	}
	get("/users?per_page=100", rootToken)
	for _, id := range w.users {
		get(fmt.Sprintf("/users/%d", id), rootToken)
	}
	for _, name := range slices.Sorted(maps.Keys(w.tokens)) {
		b.WriteString(name + ": ")
		get("/user", w.tokens[name])
	}
	for _, id := range w.groups {
		get(fmt.Sprintf("/groups/%d", id), rootToken)
	}
	for _, id := range w.projects {
		get(fmt.Sprintf("/projects/%d", id), rootToken)
	}
	for _, g := range w.topGroups {
		b.WriteString(vrState(t, d, g))
	}
	// web_url and links name the admin address, whose port the kernel
	// chooses afresh at each start (external.url follows it): not state.
	return strings.ReplaceAll(b.String(), d.Admin, "http://ADMIN")
}

// TestRestart builds users, tokens, groups, members, a project, registries,
// upstreams with credentials and moved positions; after a clean restart and
// after a kill, everything reads back identical and still works.
func TestRestart(t *testing.T) {
	stub := newUpstreamStub(t, func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != "bot" || p != "s3cret-releases-pw" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	d := Start(t, nil)
	f := d.Fix(t)
	w := &restartWorld{tokens: map[string]string{}}

	acme := f.Group("acme", 0, "private")
	platform := f.Group("platform", acme, "private") // no more visible than acme (GitLab refuses)
	open := f.Group("open", 0, "public")
	w.groups = []int64{acme, platform, open}
	w.topGroups = []int64{acme, open}
	project := d.Do("POST", "/projects", rootToken, map[string]any{"name": "App", "namespace_id": platform, "visibility": "private"}).Expect(t, 201).ID(t)
	w.projects = []int64{project}
	for _, u := range []struct {
		name   string
		level  int
		scopes []string
	}{{"alice", maintainer, nil}, {"bob", developer, []string{"read_api", "read_user"}}, {"carol", 0, nil}} {
		id, tok := f.User(u.name, false, u.scopes...)
		w.users = append(w.users, id)
		w.tokens[u.name] = tok
		if u.level > 0 {
			f.Member(acme, id, u.level)
		}
	}
	d.Do("POST", fmt.Sprintf("/projects/%d/members", project), rootToken, map[string]any{"user_id": w.users[2], "access_level": reporter}).Expect(t, 201)
	d.Do("POST", fmt.Sprintf("/groups/%d/members", open), rootToken, map[string]any{"user_id": w.users[1], "access_level": owner, "expires_at": "2099-12-31"}).Expect(t, 201)
	expiring := d.Do("POST", fmt.Sprintf("/users/%d/personal_access_tokens", w.users[0]), rootToken,
		map[string]any{"name": "later", "scopes": []string{"api"}, "expires_at": "2099-01-01"}).Expect(t, 201).Map(t)
	w.tokens["alice-expiring"] = expiring["token"].(string)
	revoked := d.Do("POST", fmt.Sprintf("/users/%d/personal_access_tokens", w.users[0]), rootToken,
		map[string]any{"name": "gone", "scopes": []string{"api"}}).Expect(t, 201).Map(t)
	w.revoked = revoked["token"].(string)
	d.Do("DELETE", fmt.Sprintf("/personal_access_tokens/%d", int64(revoked["id"].(float64))), rootToken, nil).Expect(t, 204)
	w.deploy = d.Do("POST", fmt.Sprintf("/groups/%d/deploy_tokens", acme), rootToken,
		map[string]any{"name": "ci", "scopes": []string{"read_virtual_registry"}, "username": "maven+ci"}).Expect(t, 201).Map(t)["token"].(string)

	main := f.Registry(acme, "main")
	d.Do("PATCH", vr("/registries/%d", main), w.tokens["alice"], map[string]any{"name": "main", "description": "everything"}).Expect(t, 200)
	extra := f.Registry(acme, "extra")
	public := f.Registry(open, "public")
	w.registries = []int64{main, extra, public}
	w.good = f.Upstream(main, stub.URL+"/releases", map[string]any{"username": "bot", "password": "s3cret-releases-pw", "name": "Releases", "cache_validity_hours": 0})
	w.bad = f.Upstream(main, stub.URL+"/snapshots", map[string]any{"username": "bot", "password": "wrong-snapshots-pw", "metadata_cache_validity_hours": 2})
	w.anon = f.Upstream(main, stub.URL+"/public", map[string]any{"description": "anonymous"})
	f.Upstream(public, stub.URL+"/open", nil)
	d.Do("POST", vr("/registry_upstreams"), rootToken, map[string]any{"registry_id": extra, "upstream_id": w.good}).Expect(t, 201)
	var list []map[string]any
	d.Do("GET", vr("/registries/%d/upstreams", main), rootToken, nil).Expect(t, 200).JSON(t, &list)
	anonAssoc := int64(list[2]["registry_upstream"].(map[string]any)["id"].(float64))
	d.Do("PATCH", vr("/registry_upstreams/%d", anonAssoc), rootToken, map[string]any{"position": 1}).Expect(t, 200)

	check := func(t *testing.T) {
		t.Helper()
		for name, tok := range w.tokens {
			if r := d.Do("GET", "/user", tok, nil); r.Status != 200 {
				t.Fatalf("%s's token: %d %s", name, r.Status, r.Body)
			}
		}
		wantResp(t, d.Do("GET", "/user", w.revoked, nil), 401, `{"message":"401 Unauthorized"}`)
		wantResp(t, d.Do("GET", "/user", "", nil, "Deploy-Token", w.deploy), 401, `{"message":"401 Unauthorized"}`)
		// Permissions survive: alice manages, bob reads but may not write, carol reads through her project.
		d.Do("GET", groupVR(acme, "/registries"), w.tokens["carol"], nil).Expect(t, 200)
		d.Do("GET", groupVR(acme, "/registries"), w.tokens["bob"], nil).Expect(t, 200)
		d.Do("POST", groupVR(acme, "/registries"), w.tokens["carol"], map[string]any{"name": "no"}).Expect(t, 403)
		// The sealed passwords still open: the right one passes the
		// upstream's Basic auth, the wrong one still fails it.
		before := len(stub.Requests())
		wantResp(t, d.Do("GET", vr("/upstreams/%d/test", w.good), w.tokens["alice"], nil), 200, `{"success":true}`)
		if got := stub.Last(t); got.User != "bot" || got.Pass != "s3cret-releases-pw" || got.Path != "/releases/com/company/app/maven-metadata.xml" {
			t.Fatalf("the upstream saw %+v", got)
		}
		wantResp(t, d.Do("GET", vr("/upstreams/%d/test", w.bad), w.tokens["alice"], nil), 200,
			`{"success":false,"result":"Error: 401 - Unauthorized"}`)
		wantResp(t, d.Do("GET", vr("/upstreams/%d/test", w.anon), w.tokens["alice"], nil), 200,
			`{"success":false,"result":"Error: 401 - Unauthorized"}`)
		if got := stub.Last(t); got.HasAuth {
			t.Fatalf("the anonymous upstream sent credentials: %+v", got)
		}
		if n := len(stub.Requests()) - before; n != 3 {
			t.Fatalf("%d upstream requests, want 3", n)
		}
	}
	check(t)
	want := w.snapshot(t, d)

	t.Run("clean restart", func(t *testing.T) {
		d.Restart()
		if got := w.snapshot(t, d); got != want {
			t.Fatalf("state changed across a restart:\nbefore:\n%s\nafter:\n%s", want, got)
		}
		check(t)
	})

	t.Run("kill and start", func(t *testing.T) {
		// One more change, then SIGKILL: every committed transaction survives.
		late := f.Registry(acme, "late")
		want := w.snapshot(t, d)
		d.Kill()
		d.start()
		if got := w.snapshot(t, d); got != want {
			t.Fatalf("state changed across a kill:\nbefore:\n%s\nafter:\n%s", want, got)
		}
		d.Do("GET", vr("/registries/%d", late), rootToken, nil).Expect(t, 200)
		check(t)
	})
	noServerErrors(t, d)
}
