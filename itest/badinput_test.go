package itest

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// TestBadInput sends malformed, mistyped, incomplete, unknown, misaddressed,
// oversized and overlong requests. Each must get a clear 4xx in GitLab's
// envelope, never a 500, and leave nothing behind: the whole API state is
// compared before and after.
func TestBadInput(t *testing.T) {
	d := Start(t, nil)
	f := d.Fix(t)
	g := f.Group("acme", 0, "private")
	sub := f.Group("platform", g, "private")
	other := f.Group("other", 0, "private")
	d.Do("POST", "/projects", rootToken, map[string]any{"name": "app", "namespace_id": sub}).Expect(t, 201)
	reg := f.Registry(g, "main")
	reg2 := f.Registry(g, "second")
	stub := newUpstreamStub(t, func(w http.ResponseWriter, r *http.Request) {})
	up := f.Upstream(reg, stub.URL+"/maven", map[string]any{"username": "bot", "password": "badinput-bot-pw"})
	var assoc int64
	{
		var list []map[string]any
		d.Do("GET", vr("/registries/%d/upstreams", reg), rootToken, nil).Expect(t, 200).JSON(t, &list)
		assoc = int64(list[0]["registry_upstream"].(map[string]any)["id"].(float64))
	}
	uid, _ := f.User("alice", false)

	// Ids of the wrong kind: each names a record that exists, but of
	// another kind, and no record of the kind the endpoint wants.
	notRegistry := other // a group id; only registries reg and reg2 exist
	notUpstream := reg2  // a registry id; only upstream up exists
	notAssoc := reg2     // a registry id; only association assoc exists
	if notRegistry == reg || notRegistry == reg2 || notUpstream == up || notAssoc == assoc {
		t.Fatalf("ids collide: groups %d, registries %d %d, upstream %d, association %d", other, reg, reg2, up, assoc)
	}

	big := `{"name":"` + strings.Repeat("a", 4<<20) + `"}`
	deep := `{"name":` + strings.Repeat("[", 100000) + `}`
	regs := groupVR(g, "/registries")
	regUps := vr("/registries/%d/upstreams", reg)

	tests := []struct {
		name   string
		method string
		path   string
		body   any // string: sent as is
		ct     string
		status int
		want   string
	}{
		// Malformed bodies.
		{"truncated JSON", "POST", regs, `{"name":`, "", 400, `{"message":"400 Bad request - the request body is not a valid JSON object"}`},
		{"JSON array", "POST", regs, `["main"]`, "", 400, `{"message":"400 Bad request - the request body is not a valid JSON object"}`},
		{"JSON string", "PATCH", vr("/registries/%d", reg), `"name"`, "", 400, `{"message":"400 Bad request - the request body is not a valid JSON object"}`},
		{"data after the object", "POST", regs, `{"name":"x"} {"name":"y"}`, "", 400, `{"message":"400 Bad request - the request body has data after the JSON object"}`},
		{"deeply nested", "POST", regs, deep, "", 400, `{"message":"400 Bad request - the request body is not a valid JSON object"}`},
		{"not JSON at all", "POST", regUps, "url=http://x", "text/plain", 400, `{"message":"400 Bad request - the request body is not a valid JSON object"}`},
		{"malformed form", "POST", regs, "name=%zz", "application/x-www-form-urlencoded", 400, `{"message":"400 Bad request - the form body is malformed"}`},

		// Missing fields.
		{"registry without name", "POST", regs, `{}`, "", 400, `{"error":"name is missing"}`},
		{"registry with a blank name", "POST", regs, `{"name":"   "}`, "", 400, `{"error":"name is empty"}`},
		{"registry PATCH without name", "PATCH", vr("/registries/%d", reg), `{"description":"d"}`, "", 400, `{"error":"name is missing"}`},
		{"upstream without url", "POST", regUps, `{"name":"x"}`, "", 400, `{"error":"url is missing"}`},
		{"association without ids", "POST", vr("/registry_upstreams"), `{}`, "", 400, `{"error":"registry_id is missing, upstream_id is missing"}`},
		{"move without position", "PATCH", vr("/registry_upstreams/%d", assoc), `{}`, "", 400, `{"error":"position is missing"}`},
		{"test without url", "POST", groupVR(g, "/upstreams/test"), `{"username":"u","password":"no-url-test-pw"}`, "", 400, `{"error":"url is missing"}`},
		{"user without anything", "POST", "/users", `{}`, "", 400, `{"error":"username is missing, name is missing, email is missing"}`},
		{"member without level", "POST", fmt.Sprintf("/groups/%d/members", g), map[string]any{"user_id": uid}, "", 400, `{"error":"access_level is missing"}`},

		// Wrong types.
		{"name as an object", "POST", regs, `{"name":{"a":1}}`, "", 400, `{"error":"name is invalid"}`},
		{"description as an array", "POST", regs, `{"name":"x","description":[1]}`, "", 400, `{"error":"description is invalid"}`},
		{"url as a number", "POST", regUps, `{"url":5}`, "", 400, `{"message":{"url":["must be a valid URL"]}}`},
		{"validity as a word", "PATCH", vr("/upstreams/%d", up), `{"cache_validity_hours":"soon"}`, "", 400, `{"error":"cache_validity_hours is invalid"}`},
		{"validity fractional", "PATCH", vr("/upstreams/%d", up), `{"metadata_cache_validity_hours":1.5}`, "", 400, `{"error":"metadata_cache_validity_hours is invalid"}`},
		{"validity huge", "POST", regUps, `{"url":"http://127.0.0.7/m","cache_validity_hours":99999999999}`, "", 400, `{"error":"cache_validity_hours is invalid"}`},
		{"validity as a bool", "POST", regUps, `{"url":"http://127.0.0.7/m","cache_validity_hours":true}`, "", 400, `{"error":"cache_validity_hours is invalid"}`},
		{"username as an array", "POST", regUps, `{"url":"http://127.0.0.7/m","username":["u"],"password":"array-user-test-pw"}`, "", 400, `{"error":"username is invalid, username, password provide all or none of parameters"}`},
		{"registry_id as a word", "POST", vr("/registry_upstreams"), map[string]any{"registry_id": "second", "upstream_id": up}, "", 400, `{"error":"registry_id is invalid"}`},
		{"position as an object", "PATCH", vr("/registry_upstreams/%d", assoc), `{"position":{}}`, "", 400, `{"error":"position does not have a valid value"}`},
		{"scopes as numbers", "POST", fmt.Sprintf("/users/%d/personal_access_tokens", uid), `{"name":"t","scopes":[1]}`, "", 400, `{"error":"scopes is invalid"}`},
		{"admin flag as a word", "POST", "/users", `{"username":"bob","name":"Bob","email":"bob@example.com","admin":"perhaps"}`, "", 400, `{"error":"admin is invalid"}`},
		{"visibility not allowed", "POST", "/groups", `{"name":"x","path":"x","visibility":"secret"}`, "", 400, `{"error":"visibility does not have a valid value"}`},

		// Unknown ids.
		{"unknown group", "GET", groupVR(9999, "/registries"), nil, "", 404, `{"message":"404 Group Not Found"}`},
		{"unknown group path", "POST", groupVR("nope%2Fnothing", "/registries"), `{"name":"x"}`, "", 404, `{"message":"404 Group Not Found"}`},
		{"unknown registry", "GET", vr("/registries/9999"), nil, "", 404, `{"message":"404 Not found"}`},
		{"unknown registry, PATCH", "PATCH", vr("/registries/9999"), `{"name":"x"}`, "", 404, `{"message":"404 Not found"}`},
		{"unknown upstream", "DELETE", vr("/upstreams/9999"), nil, "", 404, `{"message":"404 Upstream Not Found"}`},
		{"unknown association", "DELETE", vr("/registry_upstreams/9999"), nil, "", 404, `{"message":"404 Not found"}`},
		{"association with an unknown registry", "POST", vr("/registry_upstreams"), map[string]any{"registry_id": 9999, "upstream_id": up}, "", 404, `{"message":"404 Not found"}`},
		{"association with an unknown upstream", "POST", vr("/registry_upstreams"), map[string]any{"registry_id": reg2, "upstream_id": 9999}, "", 404, `{"message":"404 Upstream Not Found"}`},
		{"token for an unknown user", "POST", "/users/9999/personal_access_tokens", `{"name":"t","scopes":["api"]}`, "", 404, `{"message":"404 User Not Found"}`},

		// Ids of the wrong kind.
		{"a project path as a group", "GET", groupVR("acme%2Fplatform%2Fapp", "/registries"), nil, "", 404, `{"message":"404 Group Not Found"}`},
		{"a group id as a registry", "GET", vr("/registries/%d", notRegistry), nil, "", 404, `{"message":"404 Not found"}`},
		{"a registry id as an upstream", "GET", vr("/upstreams/%d", notUpstream), nil, "", 404, `{"message":"404 Upstream Not Found"}`},
		{"a registry id as an association", "PATCH", vr("/registry_upstreams/%d", notAssoc), `{"position":1}`, "", 404, `{"message":"404 Not found"}`},
		{"a registry id as the upstream of an association", "POST", vr("/registry_upstreams"), map[string]any{"registry_id": reg2, "upstream_id": notUpstream}, "", 404, `{"message":"404 Upstream Not Found"}`},
		{"a project path as a group to join", "POST", "/groups/acme%2Fplatform%2Fapp/members", map[string]any{"user_id": uid, "access_level": 10}, "", 404, `{"message":"404 Group Not Found"}`},

		// Non-integer path ids.
		{"word id", "GET", vr("/registries/main"), nil, "", 400, `{"error":"id is invalid"}`},
		{"zero id", "PATCH", vr("/registries/0"), `{"name":"x"}`, "", 400, `{"error":"id is invalid"}`},
		{"negative id", "DELETE", vr("/upstreams/-1"), nil, "", 400, `{"error":"id is invalid"}`},
		{"fractional id", "GET", vr("/upstreams/1.5/test"), nil, "", 400, `{"error":"id is invalid"}`},
		{"huge id", "DELETE", vr("/registry_upstreams/99999999999999999999"), nil, "", 400, `{"error":"id is invalid"}`},
		{"word user id", "DELETE", fmt.Sprintf("/groups/%d/members/alice", g), nil, "", 400, `{"error":"user_id is invalid"}`},

		// Oversized bodies.
		{"oversized registry", "POST", regs, big, "", 413, `{"message":"413 Request Entity Too Large"}`},
		{"oversized upstream PATCH", "PATCH", vr("/upstreams/%d", up), big, "", 413, `{"message":"413 Request Entity Too Large"}`},
		{"oversized form", "POST", regs, "name=" + strings.Repeat("a", 4<<20), "application/x-www-form-urlencoded", 413, `{"message":"413 Request Entity Too Large"}`},

		// Overlong strings.
		{"long registry name", "POST", regs, map[string]any{"name": strings.Repeat("n", 256)}, "", 400, `{"message":{"name":["is too long (maximum is 255 characters)"]}}`},
		{"long registry description", "PATCH", vr("/registries/%d", reg), map[string]any{"name": "main", "description": strings.Repeat("d", 1025)}, "", 400, `{"message":{"description":["is too long (maximum is 1024 characters)"]}}`},
		{"long upstream name", "PATCH", vr("/upstreams/%d", up), map[string]any{"name": strings.Repeat("é", 256)}, "", 400, `{"message":{"name":["is too long (maximum is 255 characters)"]}}`},
		{"long upstream description", "POST", regUps, map[string]any{"url": "http://127.0.0.7/m", "description": strings.Repeat("d", 1025)}, "", 400, `{"message":{"description":["is too long (maximum is 1024 characters)"]}}`},
		{"long password", "PATCH", vr("/upstreams/%d", up), map[string]any{"username": "u", "password": strings.Repeat("p", 511)}, "", 400, `{"message":{"password":["is too long (maximum is 510 characters)"]}}`},
		{"long url", "POST", regUps, map[string]any{"url": "http://127.0.0.7/" + strings.Repeat("p", 300)}, "", 400, `{"message":{"url":["is too long (maximum is 255 characters)"]}}`},
		{"long token name", "POST", fmt.Sprintf("/users/%d/personal_access_tokens", uid), map[string]any{"name": strings.Repeat("t", 256), "scopes": []string{"api"}}, "", 400, `{"message":{"name":["is too long (maximum is 255 characters)"]}}`},

		// Routes and methods.
		{"unknown route", "GET", vr("/nothing"), nil, "", 404, `{"error":"404 Not Found"}`},
		{"wrong method", "PUT", vr("/registries/%d", reg), `{"name":"x"}`, "", 405, `{"error":"405 Not Allowed"}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := apiState(t, d, g)
			var hdr []string
			if tc.ct != "" {
				hdr = []string{"Content-Type", tc.ct}
			}
			r := d.Do(tc.method, tc.path, rootToken, tc.body, hdr...)
			wantResp(t, r, tc.status, tc.want)
			if ct := r.Header.Get("Content-Type"); ct != "application/json" {
				t.Fatalf("Content-Type %q", ct)
			}
			if after := apiState(t, d, g); after != before {
				t.Fatalf("a refused request changed the state:\nbefore %s\nafter  %s", before, after)
			}
		})
	}

	// Just under the limit is not 413: the body is read and validated.
	justUnder := `{"name":"` + strings.Repeat("a", 4<<20-100) + `"}`
	wantResp(t, d.Do("POST", regs, rootToken, justUnder), 400, `{"message":{"name":["is too long (maximum is 255 characters)"]}}`)
	noServerErrors(t, d)
}

// apiState is the virtual registry state of group plus the users.
func apiState(t testing.TB, d *Daemon, group int64) string {
	t.Helper()
	users := d.Do("GET", "/users?per_page=100", rootToken, nil).Expect(t, 200)
	return vrState(t, d, group) + "users " + string(users.Body)
}
