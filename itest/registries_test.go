package itest

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// registryKeys and upstreamKeys are GitLab's field orders (registryd's own,
// merge_metadata and from checksum_policy on, come last).
var (
	registryKeys = []string{"id", "name", "description", "group_id", "created_at", "updated_at", "merge_metadata"}
	upstreamKeys = []string{"id", "name", "description", "group_id", "url", "username", "cache_validity_hours",
		"metadata_cache_validity_hours", "created_at", "updated_at", "checksum_policy",
		"not_found_cache_minutes", "metadata_not_found_cache_minutes",
		"status", "status_since", "last_error", "last_error_at", "retry_at", "failing_paths"}
)

func TestRegistryAnswers(t *testing.T) {
	d := Start(t, nil)
	f := d.Fix(t)
	g := f.Group("acme", 0, "private")
	sub := f.Group("platform", g, "private")

	// Create, by group path: 201 with the registry in GitLab's field order.
	r := d.Do("POST", groupVR("acme", "/registries"), rootToken, map[string]any{"name": "main"})
	wantResp(t, r, 201, "")
	wantKeys(t, r.Body, registryKeys...)
	created := r.Map(t)
	id := int64(created["id"].(float64))
	if created["name"] != "main" || created["description"] != "" || created["group_id"] != float64(g) {
		t.Fatalf("created = %s", r.Body)
	}
	wantTimestamps(t, created, "created_at", "updated_at")
	if r.Header.Get("Content-Type") != "application/json" || r.Header.Get("X-Frame-Options") != "SAMEORIGIN" ||
		r.Header.Get("X-Content-Type-Options") != "nosniff" {
		t.Fatalf("headers %v", r.Header)
	}

	// Get one: the same fields plus registry_upstreams (an empty array, not null).
	r = d.Do("GET", vr("/registries/%d", id), rootToken, nil)
	wantResp(t, r, 200, "")
	wantKeys(t, r.Body, append(registryKeys, "registry_upstreams")...)
	if got := r.Map(t)["registry_upstreams"]; fmt.Sprint(got) != "[]" {
		t.Fatalf("registry_upstreams = %v, want []", got)
	}

	// List: not paginated, ordered by id, the plain shape.
	second := f.Registry(g, "second")
	r = d.Do("GET", groupVR(g, "/registries"), rootToken, nil)
	wantResp(t, r, 200, "")
	var list []map[string]any
	r.JSON(t, &list)
	if len(list) != 2 || list[0]["id"] != float64(id) || list[1]["id"] != float64(second) {
		t.Fatalf("list = %s", r.Body)
	}
	if _, has := list[0]["registry_upstreams"]; has {
		t.Fatalf("list items carry registry_upstreams: %s", r.Body)
	}

	// PATCH: 200 with the updated registry.
	r = d.Do("PATCH", vr("/registries/%d", id), rootToken, map[string]any{"name": "renamed", "description": "all of it"})
	wantResp(t, r, 200, "")
	wantKeys(t, r.Body, registryKeys...)
	patched := r.Map(t)
	if patched["name"] != "renamed" || patched["description"] != "all of it" || patched["created_at"] != created["created_at"] {
		t.Fatalf("patched = %s", r.Body)
	}
	wantTimestamps(t, patched, "created_at", "updated_at")
	if patched["updated_at"].(string) < created["updated_at"].(string) {
		t.Fatalf("updated_at went back: %v -> %v", created["updated_at"], patched["updated_at"])
	}
	d.Do("PATCH", vr("/registries/%d", id), rootToken, map[string]any{"description": "no name"}).Expect(t, 400)

	// Validation and limits.
	wantResp(t, d.Do("POST", groupVR(g, "/registries"), rootToken, map[string]any{"name": "renamed"}),
		400, `{"message":{"name":["has already been taken"]}}`)
	wantResp(t, d.Do("PATCH", vr("/registries/%d", second), rootToken, map[string]any{"name": "renamed"}),
		400, `{"message":{"name":["has already been taken"]}}`)
	wantResp(t, d.Do("POST", groupVR(g, "/registries"), rootToken, map[string]any{"name": strings.Repeat("n", 256)}),
		400, `{"message":{"name":["is too long (maximum is 255 characters)"]}}`)
	wantResp(t, d.Do("POST", groupVR(g, "/registries"), rootToken, map[string]any{"name": "d", "description": strings.Repeat("d", 1025)}),
		400, `{"message":{"description":["is too long (maximum is 1024 characters)"]}}`)
	for _, ref := range []any{sub, "acme%2Fplatform"} {
		// POST answers as GitLab's Registry model does; the group
		// endpoints GitLab guards with bad_request! answer its message.
		wantResp(t, d.Do("POST", groupVR(ref, "/registries"), rootToken, map[string]any{"name": "x"}),
			400, `{"message":{"group":["must be a top level Group"]}}`)
		wantResp(t, d.Do("GET", groupVR(ref, "/registries"), rootToken, nil),
			400, `{"message":"400 Bad request - only available on top-level groups."}`)
		wantResp(t, d.Do("GET", groupVR(ref, "/upstreams"), rootToken, nil),
			400, `{"message":"400 Bad request - only available on top-level groups."}`)
	}
	for i := 2; i < 20; i++ {
		f.Registry(g, fmt.Sprintf("r%d", i))
	}
	wantResp(t, d.Do("POST", groupVR(g, "/registries"), rootToken, map[string]any{"name": "r20"}),
		400, `{"message":{"group":["20 registries is the maximum allowed per group."]}}`)

	// DELETE with If-Unmodified-Since before the last change: 412, nothing deleted.
	updated, err := time.Parse(time.RFC3339, patched["updated_at"].(string))
	if err != nil {
		t.Fatal(err)
	}
	before := updated.Add(-time.Hour).Format(http.TimeFormat)
	wantResp(t, d.Do("DELETE", vr("/registries/%d", id), rootToken, nil, "If-Unmodified-Since", before),
		412, `{"message":"412 Precondition Failed"}`)
	d.Do("GET", vr("/registries/%d", id), rootToken, nil).Expect(t, 200)
	wantResp(t, d.Do("DELETE", vr("/registries/%d", id), rootToken, nil, "If-Unmodified-Since", "yesterday"),
		400, `{"message":"400 Bad request - If-Unmodified-Since is not an HTTP date"}`)
	after := updated.Add(time.Hour).Format(http.TimeFormat)
	r = d.Do("DELETE", vr("/registries/%d", id), rootToken, nil, "If-Unmodified-Since", after)
	wantResp(t, r, 204, "")
	if len(r.Body) != 0 {
		t.Fatalf("204 with a body %q", r.Body)
	}
	wantResp(t, d.Do("GET", vr("/registries/%d", id), rootToken, nil), 404, `{"message":"404 Not found"}`)
	wantResp(t, d.Do("DELETE", vr("/registries/%d", id), rootToken, nil), 404, `{"message":"404 Not found"}`)
	// A freed slot can be used again.
	f.Registry(g, "r20")
	noServerErrors(t, d)
}

func TestUpstreamAnswers(t *testing.T) {
	d := Start(t, nil)
	f := d.Fix(t)
	g := f.Group("acme", 0, "private")
	reg := f.Registry(g, "main")
	other := f.Registry(g, "other")
	const base = "http://127.0.0.1:9/maven2"

	// Create: 201 with registry_upstream; the url is normalised, the name
	// defaults to the host, the password never comes back.
	r := d.Do("POST", vr("/registries/%d/upstreams", reg), rootToken, map[string]any{
		"url": " HTTP://127.0.0.1:9/maven2/ ", "username": "bot", "password": "s3cret-pw", "description": "mirror",
	})
	wantResp(t, r, 201, "")
	wantKeys(t, r.Body, append(upstreamKeys, "registry_upstream")...)
	if strings.Contains(string(r.Body), "s3cret-pw") || strings.Contains(string(r.Body), "password") {
		t.Fatalf("the create answer shows the password: %s", r.Body)
	}
	u := r.Map(t)
	upID := int64(u["id"].(float64))
	want := map[string]any{"name": "127.0.0.1", "description": "mirror", "group_id": float64(g), "url": base,
		"username": "bot", "cache_validity_hours": float64(24), "metadata_cache_validity_hours": float64(24)}
	for k, v := range want {
		if u[k] != v {
			t.Errorf("%s = %v, want %v", k, u[k], v)
		}
	}
	wantTimestamps(t, u, "created_at", "updated_at")
	ru := u["registry_upstream"].(map[string]any)
	wantKeys(t, jsonField(t, r.Body, "registry_upstream"), "id", "registry_id", "position")
	if ru["registry_id"] != float64(reg) || ru["position"] != float64(1) {
		t.Fatalf("registry_upstream = %v", ru)
	}

	// Anonymous upstream, explicit validities.
	r = d.Do("POST", vr("/registries/%d/upstreams", reg), rootToken, map[string]any{
		"url": "http://127.0.0.2:9/releases", "name": "releases", "cache_validity_hours": 0, "metadata_cache_validity_hours": 1,
	}).Expect(t, 201)
	anon := r.Map(t)
	if anon["username"] != nil || anon["cache_validity_hours"] != float64(0) || anon["metadata_cache_validity_hours"] != float64(1) ||
		anon["registry_upstream"].(map[string]any)["position"] != float64(2) {
		t.Fatalf("anonymous upstream = %s", r.Body)
	}
	anonID := int64(anon["id"].(float64))
	d.Do("POST", vr("/registry_upstreams"), rootToken, map[string]any{"registry_id": other, "upstream_id": upID}).Expect(t, 201)

	// Get one: registry_upstreams lists every registry it is in.
	r = d.Do("GET", vr("/upstreams/%d", upID), rootToken, nil)
	wantResp(t, r, 200, "")
	wantKeys(t, r.Body, append(upstreamKeys, "registry_upstreams")...)
	var one struct {
		RegistryUpstreams []map[string]any `json:"registry_upstreams"`
	}
	r.JSON(t, &one)
	if len(one.RegistryUpstreams) != 2 || one.RegistryUpstreams[0]["registry_id"] != float64(reg) ||
		one.RegistryUpstreams[1]["registry_id"] != float64(other) || one.RegistryUpstreams[1]["position"] != float64(1) {
		t.Fatalf("registry_upstreams = %v", one.RegistryUpstreams)
	}
	wantKeys(t, jsonItems(t, jsonField(t, r.Body, "registry_upstreams"))[0], "id", "registry_id", "position")

	// GET of the registry lists its associations as {id, position, upstream_id}.
	r = d.Do("GET", vr("/registries/%d", reg), rootToken, nil).Expect(t, 200)
	regAssocs := jsonItems(t, jsonField(t, r.Body, "registry_upstreams"))
	if len(regAssocs) != 2 {
		t.Fatalf("registry_upstreams of the registry: %s", r.Body)
	}
	for _, a := range regAssocs {
		wantKeys(t, a, "id", "position", "upstream_id")
	}

	// A registry's upstreams, by position, each with its association.
	r = d.Do("GET", vr("/registries/%d/upstreams", reg), rootToken, nil)
	wantResp(t, r, 200, "")
	var regUps []map[string]any
	r.JSON(t, &regUps)
	if len(regUps) != 2 || regUps[0]["id"] != float64(upID) || regUps[1]["id"] != float64(anonID) {
		t.Fatalf("registry upstreams = %s", r.Body)
	}
	for _, item := range jsonItems(t, r.Body) {
		wantKeys(t, item, append(upstreamKeys, "registry_upstream")...)
		wantKeys(t, jsonField(t, item, "registry_upstream"), "id", "registry_id", "position")
	}

	// The group list: plain upstreams.
	r = d.Do("GET", groupVR(g, "/upstreams"), rootToken, nil)
	wantResp(t, r, 200, "")
	var groupUps []map[string]any
	r.JSON(t, &groupUps)
	if len(groupUps) != 2 {
		t.Fatalf("group upstreams = %s", r.Body)
	}
	for _, item := range jsonItems(t, r.Body) {
		wantKeys(t, item, upstreamKeys...)
	}
	if strings.Contains(string(r.Body), "s3cret-pw") {
		t.Fatal("the group list shows a password")
	}

	// PATCH: 200 with the upstream.
	r = d.Do("PATCH", vr("/upstreams/%d", upID), rootToken, map[string]any{"name": "mirror", "cache_validity_hours": 12})
	wantResp(t, r, 200, "")
	wantKeys(t, r.Body, upstreamKeys...)
	if m := r.Map(t); m["name"] != "mirror" || m["cache_validity_hours"] != float64(12) || m["username"] != "bot" || m["url"] != base {
		t.Fatalf("patched = %s", r.Body)
	}
	// Changing the url without credentials clears them.
	r = d.Do("PATCH", vr("/upstreams/%d", upID), rootToken, map[string]any{"url": "http://127.0.0.3:9/maven2"}).Expect(t, 200)
	if m := r.Map(t); m["username"] != nil || m["url"] != "http://127.0.0.3:9/maven2" {
		t.Fatalf("after moving: %s", r.Body)
	}

	// Request errors.
	for _, tc := range []struct {
		name   string
		method string
		path   string
		body   any
		status int
		want   string
	}{
		{"PATCH with nothing", "PATCH", vr("/upstreams/%d", upID), map[string]any{}, 400,
			`{"error":"cache_validity_hours, description, metadata_cache_validity_hours, name, password, url, username are missing, at least one parameter must be provided"}`},
		{"PATCH username alone", "PATCH", vr("/upstreams/%d", upID), map[string]any{"username": "bot"}, 400,
			`{"error":"username, password provide all or none of parameters"}`},
		{"PATCH blank name", "PATCH", vr("/upstreams/%d", upID), map[string]any{"name": ""}, 400, `{"error":"name is empty"}`},
		{"PATCH blank url", "PATCH", vr("/upstreams/%d", upID), map[string]any{"url": ""}, 400, `{"error":"url is empty"}`},
		{"create, password alone", "POST", vr("/registries/%d/upstreams", reg), map[string]any{"url": base, "password": "password-alone-pw"}, 400,
			`{"error":"username, password provide all or none of parameters"}`},
		{"create, same url and credentials", "POST", vr("/registries/%d/upstreams", other), map[string]any{"url": "http://127.0.0.2:9/releases"}, 400,
			`{"message":{"group":["already has a remote upstream with the same url and credentials"]}}`},
		{"create, metadata validity 0", "POST", vr("/registries/%d/upstreams", reg), map[string]any{"url": base, "metadata_cache_validity_hours": 0}, 400,
			`{"message":{"metadata_cache_validity_hours":["must be greater than 0"]}}`},
		{"create, negative cache validity", "POST", vr("/registries/%d/upstreams", reg), map[string]any{"url": base, "cache_validity_hours": -1}, 400,
			`{"message":{"cache_validity_hours":["must be greater than or equal to 0"]}}`},
		{"create, ftp url", "POST", vr("/registries/%d/upstreams", reg), map[string]any{"url": "ftp://127.0.0.1/m"}, 400,
			`{"message":{"url":["must be a valid URL"]}}`},
		{"create, url too long", "POST", vr("/registries/%d/upstreams", reg), map[string]any{"url": "http://127.0.0.1/" + strings.Repeat("p", 250)}, 400,
			`{"message":{"url":["is too long (maximum is 255 characters)"]}}`},
		{"create, long username", "POST", vr("/registries/%d/upstreams", reg), map[string]any{"url": base, "username": strings.Repeat("u", 511), "password": "long-username-pw"}, 400,
			`{"message":{"username":["is too long (maximum is 510 characters)"]}}`},
		{"create, no url", "POST", vr("/registries/%d/upstreams", reg), map[string]any{"name": "x"}, 400, `{"error":"url is missing"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := vrState(t, d, g)
			wantResp(t, d.Do(tc.method, tc.path, rootToken, tc.body), tc.status, tc.want)
			if after := vrState(t, d, g); after != before {
				t.Fatalf("a refused request changed the state:\nbefore %s\nafter  %s", before, after)
			}
		})
	}

	// 20 upstreams per registry.
	for i := 3; i <= 20; i++ {
		f.Upstream(reg, fmt.Sprintf("http://127.0.1.%d:9/m", i), nil)
	}
	wantResp(t, d.Do("POST", vr("/registries/%d/upstreams", reg), rootToken, map[string]any{"url": "http://127.0.2.1:9/m"}),
		400, `{"message":{"registry_upstreams.position":["must be less than or equal to 20"]}}`)

	// DELETE: 204, then the upstream is gone everywhere.
	r = d.Do("DELETE", vr("/upstreams/%d", upID), rootToken, nil)
	wantResp(t, r, 204, "")
	wantResp(t, d.Do("GET", vr("/upstreams/%d", upID), rootToken, nil), 404, `{"message":"404 Upstream Not Found"}`)
	var otherUps []map[string]any
	d.Do("GET", vr("/registries/%d/upstreams", other), rootToken, nil).Expect(t, 200).JSON(t, &otherUps)
	if len(otherUps) != 0 {
		t.Fatalf("the deleted upstream is still in the other registry: %v", otherUps)
	}
	noServerErrors(t, d)
}

// TestPositions drives the position rules through the API.
func TestPositions(t *testing.T) {
	d := Start(t, nil)
	f := d.Fix(t)
	g := f.Group("acme", 0, "private")
	og := f.Group("other", 0, "private")
	reg := f.Registry(g, "main")
	reg2 := f.Registry(g, "second")
	foreign := f.Upstream(f.Registry(og, "theirs"), "http://127.0.9.9:9/m", nil)

	ups := make([]int64, 3)
	assocs := make([]int64, 3)
	for i := range ups {
		r := d.Do("POST", vr("/registries/%d/upstreams", reg), rootToken, map[string]any{"url": fmt.Sprintf("http://127.0.0.%d:9/m", i+1)}).Expect(t, 201)
		m := r.Map(t)
		ups[i] = int64(m["id"].(float64))
		ru := m["registry_upstream"].(map[string]any)
		assocs[i] = int64(ru["id"].(float64))
		if ru["position"] != float64(i+1) {
			t.Fatalf("upstream %d at position %v, want %d (append at max+1)", i, ru["position"], i+1)
		}
	}
	order := func(registry int64) string {
		t.Helper()
		var list []map[string]any
		d.Do("GET", vr("/registries/%d/upstreams", registry), rootToken, nil).Expect(t, 200).JSON(t, &list)
		var parts []string
		for i, u := range list {
			pos := u["registry_upstream"].(map[string]any)["position"]
			if pos != float64(i+1) {
				t.Fatalf("positions are not 1..n: %v at index %d", pos, i)
			}
			parts = append(parts, fmt.Sprint(u["id"]))
		}
		return strings.Join(parts, ",")
	}
	ids := func(idx ...int) string {
		var parts []string
		for _, i := range idx {
			parts = append(parts, fmt.Sprint(ups[i]))
		}
		return strings.Join(parts, ",")
	}

	// Associate: 201 {id, registry_id, upstream_id, position}, at max+1.
	f.Upstream(reg2, "http://127.0.8.1:9/m", nil)
	r := d.Do("POST", vr("/registry_upstreams"), rootToken, map[string]any{"registry_id": reg2, "upstream_id": ups[2]})
	wantResp(t, r, 201, "")
	wantKeys(t, r.Body, "id", "registry_id", "upstream_id", "position")
	a := r.Map(t)
	if a["registry_id"] != float64(reg2) || a["upstream_id"] != float64(ups[2]) || a["position"] != float64(2) {
		t.Fatalf("association = %s", r.Body)
	}
	sharedAssoc := int64(a["id"].(float64))
	wantResp(t, d.Do("POST", vr("/registry_upstreams"), rootToken, map[string]any{"registry_id": reg2, "upstream_id": ups[2]}),
		400, `{"message":{"upstream_id":["has already been taken"]}}`)
	wantResp(t, d.Do("POST", vr("/registry_upstreams"), rootToken, map[string]any{"registry_id": reg2, "upstream_id": foreign}),
		404, `{"message":"404 Upstream Not Found"}`)

	// Moves.
	moves := []struct {
		name     string
		assoc    int
		position any
		status   int
		wantPos  int
		order    string
	}{
		{"last to first", 2, 1, 200, 1, ids(2, 0, 1)},
		{"capped at the maximum", 2, 20, 200, 3, ids(0, 1, 2)},
		{"same place", 1, 2, 200, 2, ids(0, 1, 2)},
		{"as a string", 0, "2", 200, 2, ids(1, 0, 2)},
		{"zero", 0, 0, 400, 0, ids(1, 0, 2)},
		{"21", 0, 21, 400, 0, ids(1, 0, 2)},
		{"negative", 0, -1, 400, 0, ids(1, 0, 2)},
		{"a letter", 0, "a", 400, 0, ids(1, 0, 2)},
		{"fractional", 0, 1.5, 400, 0, ids(1, 0, 2)},
	}
	for _, m := range moves {
		t.Run("move "+m.name, func(t *testing.T) {
			r := d.Do("PATCH", vr("/registry_upstreams/%d", assocs[m.assoc]), rootToken, map[string]any{"position": m.position})
			if m.status == 400 {
				wantResp(t, r, 400, `{"error":"position does not have a valid value"}`)
			} else {
				wantResp(t, r, 200, "")
				wantKeys(t, r.Body, "id", "registry_id", "upstream_id", "position")
				if got := r.Map(t); got["position"] != float64(m.wantPos) || got["id"] != float64(assocs[m.assoc]) ||
					got["upstream_id"] != float64(ups[m.assoc]) || got["registry_id"] != float64(reg) {
					t.Fatalf("moved = %s, want position %d", r.Body, m.wantPos)
				}
			}
			if got := order(reg); got != m.order {
				t.Fatalf("order %s, want %s", got, m.order)
			}
		})
	}
	wantResp(t, d.Do("PATCH", vr("/registry_upstreams/%d", assocs[0]), rootToken, map[string]any{}),
		400, `{"error":"position is missing"}`)

	// Removing an association compacts; an upstream still in another
	// registry survives, one left in none is deleted.
	wantResp(t, d.Do("DELETE", vr("/registry_upstreams/%d", assocs[1]), rootToken, nil), 204, "")
	if got := order(reg); got != ids(0, 2) {
		t.Fatalf("after removing the first: %s", got)
	}
	wantResp(t, d.Do("GET", vr("/upstreams/%d", ups[1]), rootToken, nil), 404, `{"message":"404 Upstream Not Found"}`)
	wantResp(t, d.Do("DELETE", vr("/registry_upstreams/%d", assocs[2]), rootToken, nil), 204, "")
	d.Do("GET", vr("/upstreams/%d", ups[2]), rootToken, nil).Expect(t, 200)
	wantResp(t, d.Do("DELETE", vr("/registry_upstreams/%d", assocs[2]), rootToken, nil), 404, `{"message":"404 Not found"}`)

	// Deleting a registry deletes its exclusive upstreams and keeps shared ones.
	d.Do("POST", vr("/registry_upstreams"), rootToken, map[string]any{"registry_id": reg, "upstream_id": ups[2]}).Expect(t, 201)
	wantResp(t, d.Do("DELETE", vr("/registries/%d", reg), rootToken, nil), 204, "")
	wantResp(t, d.Do("GET", vr("/upstreams/%d", ups[0]), rootToken, nil), 404, `{"message":"404 Upstream Not Found"}`)
	r = d.Do("GET", vr("/upstreams/%d", ups[2]), rootToken, nil).Expect(t, 200)
	var shared struct {
		RegistryUpstreams []map[string]any `json:"registry_upstreams"`
	}
	r.JSON(t, &shared)
	if len(shared.RegistryUpstreams) != 1 || shared.RegistryUpstreams[0]["id"] != float64(sharedAssoc) ||
		shared.RegistryUpstreams[0]["position"] != float64(2) {
		t.Fatalf("the shared upstream's associations: %s", r.Body)
	}
	noServerErrors(t, d)
}

func TestPagination(t *testing.T) {
	const external = "https://registry.example.test:8443"
	d := Start(t, map[string]string{"REGISTRYD_EXTERNAL_URL": external + "/"})
	f := d.Fix(t)
	g := f.Group("acme", 0, "private")
	empty := f.Group("empty", 0, "private")
	reg := f.Registry(g, "main")
	var ids []string
	for i := 1; i <= 5; i++ {
		ids = append(ids, fmt.Sprint(f.Upstream(reg, fmt.Sprintf("http://127.0.0.%d:9/m", i), map[string]any{"name": fmt.Sprintf("Mirror %d", i)})))
	}
	all := append(append([]string{}, ids...), fmt.Sprint(f.Upstream(reg, "http://127.0.0.9:9/m", map[string]any{"name": "other"})))
	link := func(page int, rel string) string {
		return fmt.Sprintf(`<%s/api/v4/groups/%d/-/virtual_registries/packages/maven/upstreams?page=%d&per_page=2&upstream_name=mirror>; rel="%s"`,
			external, g, page, rel)
	}
	tests := []struct {
		name    string
		query   string
		ids     []string
		headers map[string]string
	}{
		{"first page", "?upstream_name=mirror&per_page=2", ids[0:2], map[string]string{
			"X-Page": "1", "X-Per-Page": "2", "X-Total": "5", "X-Total-Pages": "3", "X-Next-Page": "2", "X-Prev-Page": "",
			"Link": strings.Join([]string{link(2, "next"), link(1, "first"), link(3, "last")}, ", ")}},
		{"middle page", "?per_page=2&upstream_name=mirror&page=2", ids[2:4], map[string]string{
			"X-Page": "2", "X-Next-Page": "3", "X-Prev-Page": "1",
			"Link": strings.Join([]string{link(1, "prev"), link(3, "next"), link(1, "first"), link(3, "last")}, ", ")}},
		{"last page", "?upstream_name=mirror&per_page=2&page=3", ids[4:5], map[string]string{
			"X-Page": "3", "X-Total": "5", "X-Total-Pages": "3", "X-Next-Page": "", "X-Prev-Page": "2",
			"Link": strings.Join([]string{link(2, "prev"), link(1, "first"), link(3, "last")}, ", ")}},
		{"beyond the last page", "?upstream_name=mirror&per_page=2&page=9", nil, map[string]string{
			"X-Page": "9", "X-Total": "5", "X-Total-Pages": "3", "X-Next-Page": "", "X-Prev-Page": "3",
			"Link": strings.Join([]string{link(3, "prev"), link(1, "first"), link(3, "last")}, ", ")}},
		{"defaults", "", all, map[string]string{
			"X-Page": "1", "X-Per-Page": "20", "X-Total": "6", "X-Total-Pages": "1", "X-Next-Page": "", "X-Prev-Page": ""}},
		{"per_page clamped to 100", "?per_page=1000", all, map[string]string{
			"X-Per-Page": "100", "X-Total-Pages": "1"}},
		{"filter matching nothing", "?upstream_name=zzz", nil, map[string]string{
			"X-Total": "0", "X-Total-Pages": "1", "X-Next-Page": "", "X-Prev-Page": ""}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := d.Do("GET", groupVR(g, "/upstreams"+tc.query), rootToken, nil)
			wantResp(t, r, 200, "")
			for k, v := range tc.headers {
				if got, ok := r.Header[k]; !ok || got[0] != v {
					t.Errorf("%s = %q, want %q", k, got, v)
				}
			}
			var list []map[string]any
			r.JSON(t, &list)
			var got []string
			for _, u := range list {
				got = append(got, fmt.Sprint(u["id"]))
			}
			if strings.Join(got, ",") != strings.Join(tc.ids, ",") {
				t.Fatalf("ids %v, want %v", got, tc.ids)
			}
		})
	}
	r := d.Do("GET", groupVR(empty, "/upstreams"), rootToken, nil)
	wantResp(t, r, 200, `[]`)
	if r.Header.Get("X-Total") != "0" || r.Header.Get("X-Total-Pages") != "1" {
		t.Fatalf("empty list headers %v", r.Header)
	}
	for _, q := range []string{"per_page=0", "per_page=-5", "page=0"} {
		field := strings.Split(q, "=")[0]
		wantResp(t, d.Do("GET", groupVR(g, "/upstreams?"+q), rootToken, nil), 400,
			fmt.Sprintf(`{"error":"%s does not have a valid value"}`, field))
	}
	wantResp(t, d.Do("GET", groupVR(g, "/upstreams?page=abc"), rootToken, nil), 400, `{"error":"page is invalid"}`)
}

// testOutcome is how a fake upstream answers a connection test, and what
// registryd must make of it.
type testOutcome struct {
	name   string
	status int  // what the upstream answers; 0: see hang
	hang   bool // never answer (a timeout)
	result string
}

var testOutcomes = []testOutcome{
	{name: "200", status: 200, result: `{"success":true}`},
	{name: "204", status: 204, result: `{"success":true}`},
	{name: "404", status: 404, result: `{"success":true}`},
	{name: "401", status: 401, result: `{"success":false,"result":"Error: 401 - Unauthorized"}`},
	{name: "403", status: 403, result: `{"success":false,"result":"Error: 403 - Forbidden"}`},
	{name: "500", status: 500, result: `{"success":false,"result":"Error: 500 - Internal Server Error"}`},
	{name: "503", status: 503, result: `{"success":false,"result":"Error: 503 - Service Unavailable"}`},
	{name: "timeout", hang: true, result: `{"success":false,"result":"Error: Connection timeout"}`},
}

func TestConnectionTests(t *testing.T) {
	d := Start(t, map[string]string{"REGISTRYD_UPSTREAMS_CHECK_TIMEOUT": "300ms"})
	release := make(chan struct{})
	var once sync.Once
	stub := newUpstreamStub(t, func(w http.ResponseWriter, r *http.Request) {
		name := strings.Split(strings.TrimPrefix(r.URL.Path, "/"), "/")[0]
		for _, o := range testOutcomes {
			if o.name != name {
				continue
			}
			if o.hang {
				select {
				case <-release:
				case <-r.Context().Done():
				}
				return
			}
			w.WriteHeader(o.status)
			return
		}
		w.WriteHeader(http.StatusTeapot)
	})
	// Registered after the stub: cleanups run last-first, so hanging
	// handlers return before the stub server closes.
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	f := d.Fix(t)
	g := f.Group("acme", 0, "private")
	reg := f.Registry(g, "main")

	for _, o := range testOutcomes {
		t.Run(o.name, func(t *testing.T) {
			url := stub.URL + "/" + o.name
			up := f.Upstream(reg, url, map[string]any{"username": "bot", "password": "upstream-test-pw-" + o.name})
			calls := []struct {
				method, path string
				body         any
			}{
				{"POST", groupVR(g, "/upstreams/test"), map[string]any{"url": url, "username": "bot", "password": "upstream-test-pw-" + o.name}},
				{"GET", vr("/upstreams/%d/test", up), nil},
				{"POST", vr("/upstreams/%d/test", up), nil},
				{"POST", vr("/upstreams/%d/test", up), map[string]any{"username": "bot", "password": "upstream-test-pw-" + o.name}},
			}
			for _, c := range calls {
				before := len(stub.Requests())
				wantResp(t, d.Do(c.method, c.path, rootToken, c.body), 200, o.result)
				reqs := stub.Requests()
				if len(reqs) != before+1 {
					t.Fatalf("%s %s made %d upstream requests, want 1", c.method, c.path, len(reqs)-before)
				}
				got := reqs[len(reqs)-1]
				want := stubRequest{Method: "HEAD", Path: "/" + o.name + "/com/company/app/maven-metadata.xml",
					User: "bot", Pass: "upstream-test-pw-" + o.name, HasAuth: true}
				if got != want {
					t.Fatalf("%s %s: upstream saw %+v, want %+v", c.method, c.path, got, want)
				}
			}
		})
	}

	t.Run("refused", func(t *testing.T) {
		url := "http://" + closedPort(t) + "/m"
		want := `{"success":false,"result":"Error: Connection refused"}`
		wantResp(t, d.Do("POST", groupVR(g, "/upstreams/test"), rootToken, map[string]any{"url": url}), 200, want)
		up := f.Upstream(reg, url, nil)
		wantResp(t, d.Do("GET", vr("/upstreams/%d/test", up), rootToken, nil), 200, want)
	})

	t.Run("overrides", func(t *testing.T) {
		up := f.Upstream(reg, stub.URL+"/200/stored", map[string]any{"username": "stored", "password": "stored-pw"})
		// A new url is tested without the stored credentials.
		wantResp(t, d.Do("POST", vr("/upstreams/%d/test", up), rootToken, map[string]any{"url": stub.URL + "/200/new"}), 200, `{"success":true}`)
		if got := stub.Last(t); got.Path != "/200/new/com/company/app/maven-metadata.xml" || got.HasAuth {
			t.Fatalf("a new url was tested with %+v", got)
		}
		// A new url with new credentials.
		wantResp(t, d.Do("POST", vr("/upstreams/%d/test", up), rootToken,
			map[string]any{"url": stub.URL + "/200/new", "username": "u2", "password": "new-upstream-pw2"}), 200, `{"success":true}`)
		if got := stub.Last(t); got.User != "u2" || got.Pass != "new-upstream-pw2" {
			t.Fatalf("new url and credentials: %+v", got)
		}
		// New credentials against the stored url.
		wantResp(t, d.Do("POST", vr("/upstreams/%d/test", up), rootToken, map[string]any{"username": "u3", "password": "override-pw3"}), 200, `{"success":true}`)
		if got := stub.Last(t); got.Path != "/200/stored/com/company/app/maven-metadata.xml" || got.User != "u3" || got.Pass != "override-pw3" {
			t.Fatalf("credentials only: %+v", got)
		}
		// The stored configuration was not changed by any of that.
		wantResp(t, d.Do("GET", vr("/upstreams/%d/test", up), rootToken, nil), 200, `{"success":true}`)
		if got := stub.Last(t); got.User != "stored" || got.Pass != "stored-pw" {
			t.Fatalf("stored credentials after overrides: %+v", got)
		}
		// Request errors.
		wantResp(t, d.Do("POST", vr("/upstreams/%d/test", up), rootToken, map[string]any{"username": "only"}),
			400, `{"message":{"password":["can't be blank"]}}`)
		wantResp(t, d.Do("POST", groupVR(g, "/upstreams/test"), rootToken, map[string]any{}), 400, `{"error":"url is missing"}`)
		wantResp(t, d.Do("POST", groupVR(g, "/upstreams/test"), rootToken, map[string]any{"url": "invalid-url"}),
			400, `{"message":{"url":["must be a valid URL"]}}`)
	})
	once.Do(func() { close(release) })
	noServerErrors(t, d)
}

func TestSSRFGuard(t *testing.T) {
	d := Start(t, map[string]string{"REGISTRYD_UPSTREAMS_ALLOW_LOCAL_NETWORK": "false"})
	f := d.Fix(t)
	g := f.Group("acme", 0, "private")
	reg := f.Registry(g, "main")
	// A documentation address (TEST-NET-1) is public: allowed, and never dialled here.
	up := f.Upstream(reg, "http://192.0.2.10/maven2", nil)

	blocked := []struct {
		url, reason string
	}{
		{"http://127.0.0.1:8080/m", "is blocked: Requests to localhost are not allowed"},
		{"http://localhost/m", "is blocked: Requests to localhost are not allowed"},
		{"http://[::1]/m", "is blocked: Requests to localhost are not allowed"},
		{"http://0.0.0.0/m", "is blocked: Requests to localhost are not allowed"},
		{"http://10.1.2.3/m", "is blocked: Requests to the local network are not allowed"},
		{"https://192.168.1.1/m", "is blocked: Requests to the local network are not allowed"},
		{"http://169.254.169.254/latest", "is blocked: Requests to the link local network are not allowed"},
	}
	for _, b := range blocked {
		t.Run(b.url, func(t *testing.T) {
			want := fmt.Sprintf(`{"message":{"url":[%q]}}`, b.reason)
			before := vrState(t, d, g)
			wantResp(t, d.Do("POST", vr("/registries/%d/upstreams", reg), rootToken, map[string]any{"url": b.url}), 400, want)
			wantResp(t, d.Do("PATCH", vr("/upstreams/%d", up), rootToken, map[string]any{"url": b.url}), 400, want)
			wantResp(t, d.Do("POST", groupVR(g, "/upstreams/test"), rootToken, map[string]any{"url": b.url}), 400, want)
			wantResp(t, d.Do("POST", vr("/upstreams/%d/test", up), rootToken, map[string]any{"url": b.url}), 400, want)
			if after := vrState(t, d, g); after != before {
				t.Fatalf("a blocked url changed the state:\n%s\n%s", before, after)
			}
		})
	}
	noServerErrors(t, d)
}

// TestFeatureGates: below premium, or with the feature off, every virtual
// registry endpoint answers 404 before authentication.
func TestFeatureGates(t *testing.T) {
	for _, env := range []map[string]string{
		{"REGISTRYD_LICENSE_PLAN": "free"},
		{"REGISTRYD_FEATURES_VIRTUAL_REGISTRY": "false"},
	} {
		t.Run(fmt.Sprint(env), func(t *testing.T) {
			d := Start(t, env)
			f := d.Fix(t)
			g := f.Group("acme", 0, "private")
			probe := d.Do("GET", vr("/upstreams/1/cache_entries"), "", nil)
			w := &permWorld{d: d, group: g, hasCache: !strings.Contains(string(probe.Body), `"error"`),
				stub: newUpstreamStub(t, func(w http.ResponseWriter, r *http.Request) {})}
			c := &permCell{t: t, w: w, reg: 1, up: 1, assoc: 1, reg2: 2, entry: "MSAvYS9iLmphcg=="}
			for _, e := range permEndpoints(w) {
				if e.name == "delete a cache entry" {
					e.request = func(c *permCell) (string, any) { return vr("/cache_entries/%s", c.entry), nil }
				}
				path, body := e.request(c)
				for _, tok := range []string{"", rootToken, "not-a-token"} {
					wantResp(t, d.Do(e.method, path, tok, body), 404, `{"message":"404 Not Found"}`)
				}
			}
			if n := len(w.stub.Requests()); n != 0 {
				t.Fatalf("a gated endpoint reached the upstream %d times", n)
			}
			// The rest of the API is there.
			d.Do("GET", "/user", rootToken, nil).Expect(t, 200)
		})
	}
}

// TestSSRFGuardAppliesToStoredUpstreams: an upstream saved while local
// networks were allowed is not contacted once they are forbidden.
func TestSSRFGuardAppliesToStoredUpstreams(t *testing.T) {
	stub := newUpstreamStub(t, func(w http.ResponseWriter, r *http.Request) {})
	d := Start(t, nil)
	f := d.Fix(t)
	reg := f.Registry(f.Group("acme", 0, "private"), "main")
	up := f.Upstream(reg, stub.URL+"/m", nil)
	wantResp(t, d.Do("GET", vr("/upstreams/%d/test", up), rootToken, nil), 200, `{"success":true}`)
	seen := len(stub.Requests())

	d.Env["REGISTRYD_UPSTREAMS_ALLOW_LOCAL_NETWORK"] = "false"
	d.Restart()
	wantResp(t, d.Do("GET", vr("/upstreams/%d/test", up), rootToken, nil), 200,
		`{"success":false,"result":"Error: is blocked: Requests to localhost are not allowed"}`)
	if n := len(stub.Requests()); n != seen {
		t.Fatalf("the blocked upstream was contacted %d more times", n-seen)
	}
}
