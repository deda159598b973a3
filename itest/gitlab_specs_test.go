package itest

// Cases of GitLab's own request specs replayed against the real daemon:
// spec/requests/api/events_spec.rb and, under
// ee/spec/requests/api/virtual_registries/packages/maven/,
// registries_spec.rb, upstreams_spec.rb and endpoints (the headers of a
// download). Where registryd differs on purpose the case says so; the
// choice is in docs/api.md.

import (
	"fmt"
	"net/http"
	"testing"
)

func TestGitLabSpecsReplayed(t *testing.T) {
	d := Start(t, nil)
	f := d.Fix(t)
	userID, userTok := f.User("spec-user", false)
	otherID, _ := f.User("spec-other", false)
	_, adminTok := f.User("spec-admin", true)
	// Public, so that it may hold the public project below (a private group
	// may hold only private projects).
	g := f.Group("specs", 0, "public")
	f.Member(g, userID, maintainer)

	t.Run("events: unpadded dates and scope=all", func(t *testing.T) {
		project := createProject(t, d, userTok, g, "private-project", "private")
		public := createProject(t, d, rootToken, g, "public-project", "public")
		body := fmt.Sprintf(`[
{"project_id":%[1]d,"author_id":%[2]d,"action":"closed","target_type":"Issue","target_id":1,"target_title":"closed_issue","created_at":"2016-12-30T00:00:00Z"},
{"project_id":%[1]d,"author_id":%[3]d,"action":"closed","target_type":"Issue","target_id":2,"target_title":"closed_issue2","created_at":"2016-12-30T00:00:00Z"},
{"project_id":%[4]d,"author_id":%[3]d,"action":"closed","target_type":"Issue","target_id":3,"target_title":"public_issue","created_at":"2016-12-30T00:00:00Z"}]`,
			project, userID, otherID, public)
		d.Do("POST", "/admin/events", rootToken, body).Expect(t, 201)
		const filters = "action=closed&target_type=issue&after=2016-12-1&before=2016-12-31"
		count := func(path, token string) int {
			t.Helper()
			var items []map[string]any
			r := d.Do("GET", path, token, nil).Expect(t, 200)
			r.JSON(t, &items)
			if r.Header.Get("X-Total") != fmt.Sprint(len(items)) {
				t.Fatalf("%s: X-Total %s for %d items", path, r.Header.Get("X-Total"), len(items))
			}
			return len(items)
		}
		// 'returns users events'
		if n := count("/events?"+filters, userTok); n != 1 {
			t.Fatalf("GET /events: %d, want 1", n)
		}
		// 'returns all events across projects': the user's group holds both
		// projects, so both are authorized projects of the user.
		addProjectMember(t, d, project, otherID, developer)
		if n := count("/events?scope=all&"+filters, userTok); n != 3 {
			t.Fatalf("GET /events?scope=all: %d, want 3", n)
		}
		// No admin bypass: an admin who is a member of nothing lists nothing.
		if n := count("/events?scope=all&"+filters, adminTok); n != 0 {
			t.Fatalf("admin, scope=all: %d, want 0", n)
		}
		// A bad date is still a clear 400.
		wantResp(t, d.Do("GET", "/events?after=12/1/2016", userTok, nil), 400, `{"error":"after is invalid"}`)
	})

	t.Run("registry PATCH refuses a blank description", func(t *testing.T) {
		reg := f.Registry(g, "patched")
		wantResp(t, d.Do("PATCH", vr("/registries/%d", reg), userTok, map[string]any{"name": "foo", "description": ""}),
			400, `{"error":"description is empty"}`)
		wantResp(t, d.Do("PATCH", vr("/registries/%d", reg), userTok, map[string]any{"name": "", "description": "bar"}),
			400, `{"error":"name is empty"}`)
		d.Do("PATCH", vr("/registries/%d", reg), userTok, map[string]any{"name": "foo", "description": "bar"}).Expect(t, 200)
	})

	t.Run("registry POST on a subgroup", func(t *testing.T) {
		sub := f.Group("sub", g, "private")
		wantResp(t, d.Do("POST", groupVR(sub, "/registries"), userTok, map[string]any{"name": "foo"}),
			400, `{"message":{"group":["must be a top level Group"]}}`)
		wantResp(t, d.Do("POST", groupVR(sub, "/upstreams/test"), userTok, map[string]any{"url": "http://example.com"}),
			400, `{"message":"400 Bad request - only available on top-level groups."}`)
	})

	// Upstreams on loopback addresses: no name to resolve (the daemon allows local
	// upstreams in these tests), nothing is connected to.
	reg := f.Registry(g, "main")
	ups := vr("/registries/%d/upstreams", reg)
	const dup = `{"message":{"group":["already has a remote upstream with the same url and credentials"]}}`

	t.Run("the same upstream url with the other scheme is a duplicate", func(t *testing.T) {
		d.Do("POST", ups, userTok, map[string]any{"url": "https://127.0.0.1/protocol-test", "name": "a",
			"username": "user", "password": "spec-replay-pass-1"}).Expect(t, 201)
		wantResp(t, d.Do("POST", ups, userTok, map[string]any{"url": "http://127.0.0.1/protocol-test", "name": "b",
			"username": "user", "password": "spec-replay-pass-1"}), 400, dup)
		d.Do("POST", ups, userTok, map[string]any{"url": "http://127.0.0.1/protocol-test", "name": "c",
			"username": "different_user", "password": "spec-replay-pass-2"}).Expect(t, 201)
		other := d.Do("POST", ups, userTok, map[string]any{"url": "https://127.0.0.2/other-path", "name": "d",
			"username": "user", "password": "spec-replay-pass-1"}).Expect(t, 201).ID(t)
		wantResp(t, d.Do("PATCH", vr("/upstreams/%d", other), userTok, map[string]any{"url": "http://127.0.0.1:80/protocol-test/",
			"username": "user", "password": "spec-replay-pass-1"}), 400, dup)
	})

	t.Run("test endpoint overrides", func(t *testing.T) {
		stub := newUpstreamStub(t, func(w http.ResponseWriter, r *http.Request) {})
		up := d.Do("POST", ups, userTok, map[string]any{"url": stub.URL + "/stored", "name": "stub",
			"username": "stored", "password": "spec-replay-stored-pw"}).Expect(t, 201).ID(t)
		test := vr("/upstreams/%d/test", up)
		wantResp(t, d.Do("POST", test, userTok, map[string]any{"url": ""}), 400, `{"error":"url is empty"}`)
		wantResp(t, d.Do("POST", test, userTok, map[string]any{"url": stub.URL + "/new", "username": "new-username", "password": ""}),
			400, `{"message":{"password":["can't be blank"]}}`)
		wantResp(t, d.Do("POST", test, userTok, map[string]any{"username": "", "password": "spec-replay-new-pw"}),
			400, `{"message":{"username":["can't be blank"]}}`)
		if n := len(stub.Requests()); n != 0 {
			t.Fatalf("refused tests reached the upstream %d times", n)
		}
		// The stored username with an empty password tests the stored upstream.
		wantResp(t, d.Do("POST", test, userTok, map[string]any{"username": "stored", "password": ""}), 200, `{"success":true}`)
		if got := stub.Last(t); got.User != "stored" || got.Pass != "spec-replay-stored-pw" {
			t.Fatalf("tested with %+v", got)
		}
	})

	t.Run("upstream PATCH takes username and password together (the spec's rule)", func(t *testing.T) {
		up := d.Do("POST", ups, userTok, map[string]any{"url": "https://127.0.0.3/m2", "name": "p"}).Expect(t, 201).ID(t)
		// GitLab's row: 200 there.
		wantResp(t, d.Do("PATCH", vr("/upstreams/%d", up), userTok, map[string]any{"name": "foo", "description": "bar",
			"url": "http://127.0.0.4/m2", "password": "spec-replay-pass-3", "cache_validity_hours": 3, "metadata_cache_validity_hours": 5}),
			400, `{"error":"username, password provide all or none of parameters"}`)
	})

	t.Run("downloads carry GitLab's hardening headers", func(t *testing.T) {
		u := newPxUpstream(t)
		const jar = "org/example/spec/1.0/spec-1.0.jar"
		u.set(jar, pxFile{body: pxBody("spec", 40<<10)})
		dl := f.Registry(g, "downloads")
		f.Upstream(dl, u.URL, nil)
		for _, path := range []string{jar, jar, jar + ".sha1"} { // a miss, a hit, a sidecar
			r := d.pxGet(t, dl, path, "Private-Token", userTok).Expect(t, 200)
			if got := r.Header.Get("Content-Security-Policy"); got != "sandbox; default-src 'none'; require-trusted-types-for 'script'" {
				t.Fatalf("%s: Content-Security-Policy %q", path, got)
			}
			if got := r.Header.Get("X-Content-Type-Options"); got != "nosniff" {
				t.Fatalf("%s: X-Content-Type-Options %q", path, got)
			}
		}
	})
	noServerErrors(t, d)
}
