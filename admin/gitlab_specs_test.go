package admin

// Cases of GitLab's own request specs, replayed against the handlers:
// spec/requests/api/events_spec.rb and, under
// ee/spec/requests/api/virtual_registries/packages/maven/,
// registries_spec.rb and upstreams_spec.rb (and the upstream model spec's
// url cases). Where registryd answers otherwise on purpose, the case says
// so and docs/api.md lists the choice.

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"registryd/store"
	"registryd/upstream"
)

// events_spec.rb: two closed-issue events of a private project on
// 2016-12-30, one by the user (a member) and one by someone else, filtered
// with GitLab's own unpadded dates.
func TestGitLabSpecEvents(t *testing.T) {
	e := newActEnv(t, nil)
	pr := e.projects["private"]
	user, other := e.users["developer"], e.users["outsider"]
	for i, author := range []int64{user.ID, other.ID} {
		e.importEvents(fmt.Sprintf(`[{"project_id":%d,"author_id":%d,"action":"closed","target_type":"Issue","target_id":%d,"target_title":"closed %d","created_at":"2016-12-30T00:00:00Z"}]`,
			pr.ID, author, i+1, i+1)).want(t, 201)
	}
	const filters = "action=closed&target_type=issue&after=2016-12-1&before=2016-12-31"
	count := func(path, role string) int {
		t.Helper()
		return len(e.do(http.MethodGet, path, role, nil).want(t, 200).list(t))
	}
	// 'returns users events'
	if n := count("/api/v4/events?"+filters, "developer"); n != 1 {
		t.Fatalf("GET /events: %d events, want 1", n)
	}
	// 'accepts filter parameters' (users/:id/events)
	if n := count(fmt.Sprintf("/api/v4/users/%d/events?%s", user.ID, filters), "developer"); n != 1 {
		t.Fatalf("GET /users/:id/events: %d events, want 1", n)
	}
	// 'returns all events across projects' (scope=all), once the other
	// author is a developer of the project too.
	if _, err := e.st.AddProjectMember(pr.ID, other.ID, store.Developer, nil, e.users["root"].ID); err != nil {
		t.Fatal(err)
	}
	if n := count("/api/v4/events?scope=all&"+filters, "developer"); n != 2 {
		t.Fatalf("GET /events?scope=all: %d events, want 2", n)
	}
	// scope=all is the caller's authorized projects, with no admin bypass:
	// root and someone who may read a public project without being its
	// member see none of its events.
	pub := e.projects["public"]
	e.importEvents(fmt.Sprintf(`[{"project_id":%d,"author_id":%d,"action":"closed","target_type":"Issue","target_id":9,"target_title":"public","created_at":"2016-12-30T00:00:00Z"}]`,
		pub.ID, user.ID)).want(t, 201)
	if n := count("/api/v4/events?scope=all&"+filters, "root"); n != 0 {
		t.Fatalf("root, scope=all: %d events, want 0", n)
	}
	if n := count("/api/v4/events?scope=all&"+filters, "reader"); n != 0 {
		t.Fatalf("a non-member, scope=all: %d events, want 0", n)
	}
	if n := count("/api/v4/events?scope=all&"+filters, "developer"); n != 3 {
		t.Fatalf("a member of both, scope=all: %d events, want 3", n)
	}
	// Other forms Date.parse takes for the same days; guesses stay 400.
	for _, q := range []string{"after=20161201&before=20161231", "after=1+Dec+2016&before=Dec+31,+2016",
		"after=2016/12/1&before=2016-12-31T08:00:00%2B05:00"} {
		if n := count("/api/v4/events?action=closed&"+q, "developer"); n != 2 {
			t.Fatalf("%s: %d events, want 2", q, n)
		}
	}
	for _, q := range []string{"after=12/1/2016", "after=2016-12", "before=31", "before=2016-02-30", "after=2016-12-1x"} {
		r := e.do(http.MethodGet, "/api/v4/events?"+q, "developer", nil)
		name, _, _ := strings.Cut(q, "=")
		wantBody(t, r, 400, fmt.Sprintf(`{"error":"%s is invalid"}`, name))
	}
}

// registries_spec.rb, PATCH 'for params': description is allow_blank: false.
// registryd also requires name (the spec's rule), so GitLab's rows without
// a name are 400 here.
func TestGitLabSpecRegistryPatch(t *testing.T) {
	e := newUpstreamEnv(t)
	path := fmt.Sprintf("%s/registries/%d", vrBase, e.registry.ID)
	tests := []struct {
		body   string
		status int
		answer string
	}{
		{`{"name":"foo"}`, 200, ""},
		{`{"name":"foo","description":"bar"}`, 200, ""},
		{`{"name":"","description":"bar"}`, 400, `{"error":"name is empty"}`},
		{`{"name":"foo","description":""}`, 400, `{"error":"description is empty"}`},
		{`{"name":"foo","description":"   "}`, 400, `{"error":"description is empty"}`},
		{`{"name":"foo","description":null}`, 400, `{"error":"description is empty"}`},
		{`{"name":"","description":""}`, 400, `{"error":"name is empty, description is empty"}`},
		// GitLab: 200 and 400 ("name, description are missing, …"); the
		// spec makes name required.
		{`{"description":"bar"}`, 400, `{"error":"name is missing"}`},
		{`{}`, 400, `{"error":"name is missing"}`},
	}
	for _, tc := range tests {
		r := e.send(http.MethodPatch, path, "maintainer", tc.body)
		if tc.status == 200 {
			r.want(t, 200)
			continue
		}
		wantBody(t, r, tc.status, tc.answer)
	}
	reg, err := e.st.Registry(e.registry.ID)
	if err != nil || reg.Description != "bar" {
		t.Fatalf("stored %+v, %v: a refused PATCH changed it", reg, err)
	}
	// A form body says it the same way; POST still takes a blank
	// description (GitLab does not forbid it there).
	req := formRequest(http.MethodPatch, path, e.tokens["maintainer"], "name=foo&description=")
	wantBody(t, serve(e.srv, req), 400, `{"error":"description is empty"}`)
	e.send(http.MethodPost, fmt.Sprintf("/api/v4/groups/%d/-/virtual_registries/packages/maven/registries", e.group.ID),
		"maintainer", `{"name":"blank","description":""}`).want(t, 201)
}

// registries_spec.rb, POST 'with subgroup': 400 and the model's message,
// after the permission check. The group endpoints that GitLab guards with
// bad_request! keep theirs (upstreams_spec.rb, 'with a non top level
// group': 400).
func TestGitLabSpecSubgroup(t *testing.T) {
	e := newUpstreamEnv(t)
	sub, err := e.st.CreateGroup(store.NewGroup{Name: "platform", Path: "platform", ParentID: e.group.ID, Visibility: store.Private})
	if err != nil {
		t.Fatal(err)
	}
	base := fmt.Sprintf("/api/v4/groups/%d/-/virtual_registries/packages/maven", sub.ID)
	wantBody(t, e.send(http.MethodPost, base+"/registries", "maintainer", `{"name":"foo"}`),
		400, `{"message":{"group":["must be a top level Group"]}}`)
	wantBody(t, e.send(http.MethodPost, base+"/registries", "owner", `{"name":"`+strings.Repeat("n", 256)+`"}`),
		400, `{"message":{"group":["must be a top level Group"],"name":["is too long (maximum is 255 characters)"]}}`)
	wantBody(t, e.send(http.MethodPost, base+"/registries", "developer", `{"name":"foo"}`), 403, `{"message":"403 Forbidden"}`)
	wantBody(t, e.send(http.MethodPost, base+"/registries", "outsider", `{"name":"foo"}`), 404, `{"message":"404 Group Not Found"}`)
	const old = `{"message":"400 Bad request - only available on top-level groups."}`
	wantBody(t, e.do(http.MethodGet, base+"/registries", "maintainer"), 400, old)
	wantBody(t, e.do(http.MethodGet, base+"/upstreams", "maintainer"), 400, old)
	wantBody(t, e.send(http.MethodPost, base+"/upstreams/test", "maintainer", `{"url":"http://example.com"}`), 400, old)
	if regs, _ := e.st.GroupRegistries(sub.ID); len(regs) != 0 {
		t.Fatalf("a subgroup holds %v", regs)
	}
}

// upstreams_spec.rb 'with existing duplicate credentials' and the upstream
// model spec's url normalisation cases: the same url and credentials in a
// group is refused, whatever the scheme, the host's case, a default port or
// a trailing slash or .git; on POST and on PATCH.
func TestGitLabSpecUpstreamDuplicates(t *testing.T) {
	e := newUpstreamEnv(t)
	create := fmt.Sprintf("%s/registries/%d/upstreams", vrBase, e.registry.ID)
	const dup = `{"message":{"group":["already has a remote upstream with the same url and credentials"]}}`
	e.send(http.MethodPost, create, "maintainer",
		`{"url":"https://example.com/protocol-test","name":"a","username":"user","password":"pass"}`).want(t, 201)
	for _, u := range []string{"http://example.com/protocol-test", "https://EXAMPLE.COM:443/protocol-test/.git/",
		"http://example.com:80/protocol-test/", "https://example.com/protocol-test.git"} {
		wantBody(t, e.send(http.MethodPost, create, "maintainer",
			`{"url":"`+u+`","name":"b","username":"user","password":"pass"}`), 400, dup)
	}
	// Different credentials, or another port, make another upstream.
	e.send(http.MethodPost, create, "maintainer",
		`{"url":"http://example.com/protocol-test","name":"c","username":"different_user","password":"different_pass"}`).want(t, 201)
	e.send(http.MethodPost, create, "maintainer",
		`{"url":"https://example.com:8443/protocol-test","name":"d","username":"user","password":"pass"}`).want(t, 201)
	// The env's upstream (https://repo.example/maven2, no credentials) too.
	wantBody(t, e.send(http.MethodPost, create, "maintainer", `{"url":"http://repo.example/maven2/"}`), 400, dup)

	// PATCH: 'prevents update to protocol variant of existing URL'.
	other := object(t, e.send(http.MethodPost, create, "maintainer",
		`{"url":"https://example2.com/other-path","name":"e","username":"user","password":"pass"}`).want(t, 201))
	patch := fmt.Sprintf("%s/upstreams/%d", vrBase, int64(other["id"].(float64)))
	wantBody(t, e.send(http.MethodPatch, patch, "maintainer",
		`{"url":"http://example.com/protocol-test","username":"user","password":"pass"}`), 400, dup)
	wantBody(t, e.send(http.MethodPatch, patch, "maintainer",
		`{"url":"https://example.com/protocol-test","username":"user","password":"pass"}`), 400, dup)
	// A url change without credentials clears them: no longer the same.
	e.send(http.MethodPatch, patch, "maintainer", `{"url":"http://example.com/protocol-test"}`).want(t, 200)

	// Credentials sent together but one blank: GitLab's model messages.
	wantBody(t, e.send(http.MethodPost, create, "maintainer", `{"url":"https://f.example/m2","username":"test","password":""}`),
		400, `{"message":{"password":["can't be blank"]}}`)
	wantBody(t, e.send(http.MethodPost, create, "maintainer", `{"url":"https://f.example/m2","username":"","password":"test"}`),
		400, `{"message":{"username":["can't be blank"]}}`)
}

// testChecker records what the connection tests were asked to test.
type testChecker struct {
	okChecker
	mu  sync.Mutex
	eps []upstream.Endpoint
}

func (c *testChecker) Test(_ context.Context, ep upstream.Endpoint, _ string) upstream.TestResult {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.eps = append(c.eps, ep)
	return upstream.TestResult{Success: true}
}

func (c *testChecker) last(t *testing.T) upstream.Endpoint {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.eps) == 0 {
		t.Fatal("nothing was tested")
	}
	ep := c.eps[len(c.eps)-1]
	c.eps = nil
	return ep
}

// upstreams_spec.rb, POST …/upstreams/:id/test 'with override params', and
// POST …/groups/:id/-/…/upstreams/test 'with invalid params'.
func TestGitLabSpecUpstreamTestOverrides(t *testing.T) {
	e := newUpstreamEnv(t)
	c := &testChecker{}
	e.srv.up = c
	created := object(t, e.send(http.MethodPost, fmt.Sprintf("%s/registries/%d/upstreams", vrBase, e.registry.ID), "maintainer",
		`{"url":"https://stored.example/m2","name":"s","username":"stored-user","password":"stored-pass"}`).want(t, 201))
	test := fmt.Sprintf("%s/upstreams/%d/test", vrBase, int64(created["id"].(float64)))
	stored := upstream.Endpoint{URL: "https://stored.example/m2", Username: "stored-user", Password: "stored-pass"}
	const newURL = "http://new-example.com"
	tests := []struct {
		name, body string
		status     int
		answer     string            // for a 400
		want       upstream.Endpoint // what is tested, for a 200
	}{
		{"no override params", `{}`, 200, "", stored},
		{"a new url with no username and password", `{"url":"` + newURL + `"}`, 200, "", upstream.Endpoint{URL: newURL}},
		{"a new url with new username and password", `{"url":"` + newURL + `","username":"new-username","password":"new-password"}`, 200, "",
			upstream.Endpoint{URL: newURL, Username: "new-username", Password: "new-password"}},
		{"a new url with the existing username and no password", `{"url":"` + newURL + `","username":"stored-user","password":""}`, 400,
			`{"message":{"password":["can't be blank"]}}`, upstream.Endpoint{}},
		{"a new url with a new username and no password", `{"url":"` + newURL + `","username":"new-username","password":""}`, 400,
			`{"message":{"password":["can't be blank"]}}`, upstream.Endpoint{}},
		{"a new url with a new password and no username", `{"url":"` + newURL + `","username":"","password":"new-password"}`, 400,
			`{"message":{"username":["can't be blank"]}}`, upstream.Endpoint{}},
		{"a new username and no password", `{"username":"new-username","password":""}`, 400,
			`{"message":{"password":["can't be blank"]}}`, upstream.Endpoint{}},
		{"a new username alone", `{"username":"new-username"}`, 400, `{"message":{"password":["can't be blank"]}}`, upstream.Endpoint{}},
		{"no username and a new password", `{"username":"","password":"new-password"}`, 400,
			`{"message":{"username":["can't be blank"]}}`, upstream.Endpoint{}},
		{"a new password alone", `{"password":"new-password"}`, 400, `{"message":{"username":["can't be blank"]}}`, upstream.Endpoint{}},
		{"the existing username and no password", `{"username":"stored-user","password":""}`, 200, "", stored},
		{"the existing username and password", `{"username":"stored-user","password":"stored-pass"}`, 200, "", stored},
		{"the existing url and empty credentials", `{"url":"https://stored.example/m2","username":"","password":""}`, 200, "",
			upstream.Endpoint{URL: "https://stored.example/m2"}},
		{"the existing url, spelt otherwise", `{"url":"https://STORED.example:443/m2/"}`, 200, "", stored},
		{"new credentials for the stored url", `{"username":"bot","password":"new"}`, 200, "",
			upstream.Endpoint{URL: "https://stored.example/m2", Username: "bot", Password: "new"}},
		{"invalid override params", `{"url":""}`, 400, `{"error":"url is empty"}`, upstream.Endpoint{}},
		{"a blank url", `{"url":"  ","username":"x"}`, 400, `{"error":"url is empty"}`, upstream.Endpoint{}},
		{"an invalid url", `{"url":"invalid-url"}`, 400, `{"message":{"url":["must be a valid URL"]}}`, upstream.Endpoint{}},
		{"an invalid url and half the credentials", `{"url":"invalid-url","username":"u"}`, 400,
			`{"message":{"password":["can't be blank"],"url":["must be a valid URL"]}}`, upstream.Endpoint{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := e.send(http.MethodPost, test, "maintainer", tc.body)
			if tc.status != 200 {
				wantBody(t, r, tc.status, tc.answer)
				if len(c.eps) != 0 {
					t.Fatalf("tested %+v after a 400", c.eps)
				}
				return
			}
			wantBody(t, r, 200, `{"success":true}`)
			if got := c.last(t); got != tc.want {
				t.Fatalf("tested %+v, want %+v", got, tc.want)
			}
		})
	}

	// The group's test of an unsaved upstream ('with invalid params').
	group := fmt.Sprintf("/api/v4/groups/%d/-/virtual_registries/packages/maven/upstreams/test", e.group.ID)
	for body, answer := range map[string]string{
		`{"url":""}`:            `{"error":"url is empty"}`,
		`{"url":"invalid-url"}`: `{"message":{"url":["must be a valid URL"]}}`,
		`{}`:                    `{"error":"url is missing"}`,
		`{"username":"user"}`:   `{"error":"url is missing, username, password provide all or none of parameters"}`,
		`{"password":"test"}`:   `{"error":"url is missing, username, password provide all or none of parameters"}`,
		`{"url":"http://example.com","username":"user"}`:               `{"error":"username, password provide all or none of parameters"}`,
		`{"url":"http://example.com","password":"test"}`:               `{"error":"username, password provide all or none of parameters"}`,
		`{"url":"http://example.com","username":"user","password":""}`: `{"message":{"password":["can't be blank"]}}`,
	} {
		wantBody(t, e.send(http.MethodPost, group, "maintainer", body), 400, answer)
	}
	wantBody(t, e.send(http.MethodPost, group, "maintainer", `{"url":"http://example.com","username":"user","password":"test"}`),
		200, `{"success":true}`)
	if got := c.last(t); got != (upstream.Endpoint{URL: "http://example.com", Username: "user", Password: "test"}) {
		t.Fatalf("tested %+v", got)
	}
}

// upstreams_spec.rb, PATCH 'for params': GitLab's rows with only one of
// username and password are 200 there. The spec's rule (both or neither on
// PATCH) is kept on purpose: docs/api.md, "Choices".
func TestGitLabSpecUpstreamPatchCredentials(t *testing.T) {
	e := newUpstreamEnv(t)
	path := fmt.Sprintf("%s/upstreams/%d", vrBase, e.upstream.ID)
	const rule = `{"error":"username, password provide all or none of parameters"}`
	wantBody(t, e.send(http.MethodPatch, path, "maintainer",
		`{"name":"foo","description":"bar","url":"http://example.com","password":"test","cache_validity_hours":3,"metadata_cache_validity_hours":5}`),
		400, rule)
	wantBody(t, e.send(http.MethodPatch, path, "maintainer",
		`{"name":"foo","description":"bar","url":"http://example.com","username":"test","cache_validity_hours":3,"metadata_cache_validity_hours":5}`),
		400, rule)
	// Both, and a blank description (allowed on upstreams), are GitLab's 200s.
	e.send(http.MethodPatch, path, "maintainer",
		`{"name":"foo","description":"","url":"http://example.com","username":"test","password":"test","cache_validity_hours":3,"metadata_cache_validity_hours":5}`).want(t, 200)
	// Blank credentials are GitLab's 400s ('' for username or password).
	for _, body := range []string{`{"username":"","password":"test"}`, `{"username":"test","password":""}`} {
		r := e.send(http.MethodPatch, path, "maintainer", body)
		if r.status != 400 {
			t.Fatalf("%s: %d %s", body, r.status, r.body)
		}
	}
}

// formRequest is a PATCH or POST with a form body.
func formRequest(method, path, token, form string) *http.Request {
	req, _ := http.NewRequest(method, path, strings.NewReader(form))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("PRIVATE-TOKEN", token)
	req.RemoteAddr = "192.0.2.1:1234"
	return req
}
