package itest

import (
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

// permWorld is a private top-level group "acme" with a member at every level,
// an admin, an outsider, a member of a project and one of a subgroup inside
// acme, tokens with too few scopes, and a deploy token.
type permWorld struct {
	d        *Daemon
	stub     *upstreamStub
	group    int64
	callers  []permCaller
	counter  int
	hasCache bool // the cache entry endpoints exist
}

// permCaller is one column of the matrix: who calls, and what they may do.
type permCaller struct {
	name   string
	header []string // credentials; nil for anonymous
	// expect is the status this caller gets from an endpoint.
	expect func(e permEndpoint) int
	// scoped: the token lacks a scope, so a 403 is insufficient_scope.
	scoped bool
}

// permEndpoint is one row of the matrix: an endpoint and the minimum access
// level that may call it (guest: read, maintainer: manage).
type permEndpoint struct {
	name    string
	method  string
	min     int
	success int
	// request builds the path and body against the fresh records of c.
	request func(c *permCell) (path string, body any)
}

// permCell holds the records one matrix cell works on, created by root so
// that a destructive call by one caller cannot disturb the next.
type permCell struct {
	t       *testing.T
	w       *permWorld
	n       int
	reg, up int64
	assoc   int64
	reg2    int64
	entry   string
	creates []int64 // registries to delete afterwards
}

func (c *permCell) second() int64 {
	if c.reg2 == 0 {
		c.reg2 = c.w.d.Fix(c.t).Registry(c.w.group, fmt.Sprintf("cell-%d-b", c.n))
		c.creates = append(c.creates, c.reg2)
	}
	return c.reg2
}

func newPermWorld(t *testing.T) *permWorld {
	t.Helper()
	d := Start(t, nil)
	f := d.Fix(t)
	w := &permWorld{d: d}
	w.stub = newUpstreamStub(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/java-archive")
		_, _ = w.Write([]byte("jar bytes"))
	})
	w.group = f.Group("acme", 0, "private")
	platform := f.Group("platform", w.group, "private")
	project := d.Do("POST", "/projects", rootToken, map[string]any{"name": "app", "namespace_id": platform}).Expect(t, 201).ID(t)

	pat := func(tok string) []string { return []string{"PRIVATE-TOKEN", tok} }
	byLevel := func(level int) func(permEndpoint) int {
		return func(e permEndpoint) int {
			if level >= e.min {
				return e.success
			}
			return http.StatusForbidden
		}
	}
	readOnly := byLevel(guest)
	always := func(status int) func(permEndpoint) int { return func(permEndpoint) int { return status } }

	w.callers = append(w.callers, permCaller{name: "anonymous", expect: always(http.StatusUnauthorized)})
	for _, m := range []struct {
		name  string
		level int
	}{{"guest", guest}, {"reporter", reporter}, {"developer", developer}, {"maintainer", maintainer}, {"owner", owner}} {
		id, tok := f.User(m.name, false)
		f.Member(w.group, id, m.level)
		hdr := pat(tok)
		if m.name == "maintainer" {
			// One member signs in with HTTP Basic, username and token.
			hdr = []string{"Authorization", "Basic " + base64.StdEncoding.EncodeToString([]byte("maintainer:"+tok))}
		}
		w.callers = append(w.callers, permCaller{name: m.name, header: hdr, expect: byLevel(m.level)})
	}
	_, adminTok := f.User("site-admin", true)
	w.callers = append(w.callers, permCaller{name: "admin (Bearer)", header: []string{"Authorization", "Bearer " + adminTok}, expect: byLevel(owner)})

	_, outsider := f.User("outsider", false)
	w.callers = append(w.callers, permCaller{name: "non-member of the private group", header: pat(outsider), expect: always(http.StatusNotFound)})

	projID, projTok := f.User("project-guest", false)
	d.Do("POST", fmt.Sprintf("/projects/%d/members", project), rootToken,
		map[string]any{"user_id": projID, "access_level": guest}).Expect(t, 201)
	w.callers = append(w.callers, permCaller{name: "guest of a project in a subgroup", header: pat(projTok), expect: readOnly})

	subID, subTok := f.User("subgroup-maintainer", false)
	f.Member(platform, subID, maintainer)
	w.callers = append(w.callers, permCaller{name: "maintainer of a subgroup", header: pat(subTok), expect: readOnly})

	ruID, ruTok := f.User("owner-read-user", false, "read_user")
	f.Member(w.group, ruID, owner)
	w.callers = append(w.callers, permCaller{name: "owner's read_user token", header: pat(ruTok), expect: always(http.StatusForbidden), scoped: true})

	raID, raTok := f.User("owner-read-api", false, "read_api")
	f.Member(w.group, raID, owner)
	w.callers = append(w.callers, permCaller{name: "owner's read_api token", header: pat(raTok), scoped: true,
		expect: func(e permEndpoint) int {
			if e.method == "GET" {
				return e.success
			}
			return http.StatusForbidden
		}})

	vrtID, vrtTok := f.User("owner-read-virtual-registry", false, "read_virtual_registry")
	f.Member(w.group, vrtID, owner)
	w.callers = append(w.callers, permCaller{name: "owner's read_virtual_registry token", header: pat(vrtTok), expect: always(http.StatusForbidden), scoped: true})

	deploy := d.Do("POST", fmt.Sprintf("/groups/%d/deploy_tokens", w.group), rootToken,
		map[string]any{"name": "ci", "scopes": []string{"read_virtual_registry"}}).Expect(t, 201).Map(t)["token"].(string)
	w.callers = append(w.callers, permCaller{name: "deploy token", header: []string{"Deploy-Token", deploy}, expect: always(http.StatusUnauthorized)})

	probe := d.Do("GET", vr("/upstreams/1/cache_entries"), rootToken, nil)
	w.hasCache = !(probe.Status == 404 && strings.Contains(string(probe.Body), `"error"`))
	return w
}

// newCell creates a registry with one upstream for one cell.
func (w *permWorld) newCell(t *testing.T) *permCell {
	t.Helper()
	w.counter++
	c := &permCell{t: t, w: w, n: w.counter}
	f := w.d.Fix(t)
	c.reg = f.Registry(w.group, fmt.Sprintf("cell-%d", c.n))
	c.creates = append(c.creates, c.reg)
	created := w.d.Do("POST", vr("/registries/%d/upstreams", c.reg), rootToken,
		map[string]any{"url": fmt.Sprintf("%s/cell-%d", w.stub.URL, c.n), "username": "bot", "password": "cell-bot-pw"}).Expect(t, 201).Map(t)
	c.up = int64(created["id"].(float64))
	c.assoc = int64(created["registry_upstream"].(map[string]any)["id"].(float64))
	return c
}

// cleanup deletes the cell's registries (and with them their upstreams).
func (c *permCell) cleanup() {
	for _, id := range c.creates {
		r := c.w.d.Do("DELETE", vr("/registries/%d", id), rootToken, nil)
		if r.Status != 204 && r.Status != 404 {
			c.t.Errorf("cleanup of registry %d: %d %s", id, r.Status, r.Body)
		}
	}
}

// cacheEntry fills the cache through the proxy and returns the entry's id.
// The .sha1 request is the synchronisation: the proxy answers a checksum
// only from a stored entry, waiting for a fill in progress to commit.
func (c *permCell) cacheEntry() string {
	base := c.w.d.Proxy + "/api/v4" + vr("/%d/com/example/lib/1.0/lib-1.0.jar", c.reg)
	for _, url := range []string{base, base + ".sha1"} {
		req, err := http.NewRequest("GET", url, nil)
		if err != nil {
			c.t.Fatal(err)
		}
		req.Header.Set("PRIVATE-TOKEN", rootToken)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			c.t.Fatalf("filling the cache: %v", err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != 200 {
			c.t.Fatalf("filling the cache: GET %s: %d", url, res.StatusCode)
		}
	}
	var entries []map[string]any
	c.w.d.Do("GET", vr("/upstreams/%d/cache_entries", c.up), rootToken, nil).Expect(c.t, 200).JSON(c.t, &entries)
	if len(entries) == 0 {
		c.t.Fatal("the proxy filled the cache but no entry is listed")
	}
	return entries[0]["id"].(string)
}

// permEndpoints is every virtual registry management endpoint with the
// least access level that may call it.
func permEndpoints(w *permWorld) []permEndpoint {
	eps := []permEndpoint{
		{"list registries", "GET", guest, 200, func(c *permCell) (string, any) {
			return groupVR(w.group, "/registries"), nil
		}},
		{"create registry", "POST", maintainer, 201, func(c *permCell) (string, any) {
			return groupVR(w.group, "/registries"), map[string]any{"name": fmt.Sprintf("new-%d", c.n)}
		}},
		{"get registry", "GET", guest, 200, func(c *permCell) (string, any) {
			return vr("/registries/%d", c.reg), nil
		}},
		{"update registry", "PATCH", maintainer, 200, func(c *permCell) (string, any) {
			return vr("/registries/%d", c.reg), map[string]any{"name": fmt.Sprintf("renamed-%d", c.n)}
		}},
		{"delete registry", "DELETE", maintainer, 204, func(c *permCell) (string, any) {
			return vr("/registries/%d", c.reg), nil
		}},
		{"purge registry cache", "DELETE", maintainer, 204, func(c *permCell) (string, any) {
			return vr("/registries/%d/cache", c.reg), nil
		}},
		{"list group upstreams", "GET", guest, 200, func(c *permCell) (string, any) {
			return groupVR(w.group, "/upstreams"), nil
		}},
		{"test a new upstream", "POST", guest, 200, func(c *permCell) (string, any) {
			return groupVR(w.group, "/upstreams/test"), map[string]any{"url": w.stub.URL + "/probe"}
		}},
		{"list registry upstreams", "GET", guest, 200, func(c *permCell) (string, any) {
			return vr("/registries/%d/upstreams", c.reg), nil
		}},
		{"create upstream", "POST", maintainer, 201, func(c *permCell) (string, any) {
			return vr("/registries/%d/upstreams", c.reg), map[string]any{"url": fmt.Sprintf("%s/new-%d", w.stub.URL, c.n)}
		}},
		{"get upstream", "GET", guest, 200, func(c *permCell) (string, any) {
			return vr("/upstreams/%d", c.up), nil
		}},
		{"update upstream", "PATCH", maintainer, 200, func(c *permCell) (string, any) {
			return vr("/upstreams/%d", c.up), map[string]any{"description": "changed"}
		}},
		{"delete upstream", "DELETE", maintainer, 204, func(c *permCell) (string, any) {
			return vr("/upstreams/%d", c.up), nil
		}},
		{"purge upstream cache", "DELETE", maintainer, 204, func(c *permCell) (string, any) {
			return vr("/upstreams/%d/cache", c.up), nil
		}},
		{"test an upstream", "GET", guest, 200, func(c *permCell) (string, any) {
			return vr("/upstreams/%d/test", c.up), nil
		}},
		{"test an upstream with overrides", "POST", guest, 200, func(c *permCell) (string, any) {
			return vr("/upstreams/%d/test", c.up), map[string]any{"username": "other", "password": "other-test-pw"}
		}},
		{"associate an upstream", "POST", maintainer, 201, func(c *permCell) (string, any) {
			return vr("/registry_upstreams"), map[string]any{"registry_id": c.second(), "upstream_id": c.up}
		}},
		{"move an upstream", "PATCH", maintainer, 200, func(c *permCell) (string, any) {
			return vr("/registry_upstreams/%d", c.assoc), map[string]any{"position": 1}
		}},
		{"remove an association", "DELETE", maintainer, 204, func(c *permCell) (string, any) {
			return vr("/registry_upstreams/%d", c.assoc), nil
		}},
	}
	if w.hasCache {
		eps = append(eps,
			permEndpoint{"list cache entries", "GET", guest, 200, func(c *permCell) (string, any) {
				return vr("/upstreams/%d/cache_entries", c.up), nil
			}},
			permEndpoint{"delete a cache entry", "DELETE", maintainer, 204, func(c *permCell) (string, any) {
				c.entry = c.cacheEntry()
				return vr("/cache_entries/%s", c.entry), nil
			}},
		)
	}
	return eps
}

// TestPermissionMatrix calls every management endpoint as every kind of
// caller and checks the status and the error envelope.
func TestPermissionMatrix(t *testing.T) {
	w := newPermWorld(t)
	if !w.hasCache {
		t.Log("the cache entry endpoints are not there: their rows are left out")
	}
	for _, e := range permEndpoints(w) {
		t.Run(e.name, func(t *testing.T) {
			for _, caller := range w.callers {
				t.Run(caller.name, func(t *testing.T) {
					c := w.newCell(t)
					defer c.cleanup()
					path, body := e.request(c)
					r := w.d.Do(e.method, path, "", body, caller.header...)
					want := caller.expect(e)
					if r.Status == 201 {
						if id, ok := r.Map(t)["id"].(float64); ok && e.name == "create registry" {
							c.creates = append(c.creates, int64(id))
						}
					}
					if r.Status != want {
						t.Fatalf("%s %s: status %d, want %d; body %s", e.method, path, r.Status, want, r.Body)
					}
					switch {
					case want == http.StatusUnauthorized:
						wantResp(t, r, want, `{"message":"401 Unauthorized"}`)
					case want == http.StatusForbidden && caller.scoped:
						if m := r.Map(t); m["error"] != "insufficient_scope" {
							t.Fatalf("body %s, want an insufficient_scope error", r.Body)
						}
					case want == http.StatusForbidden:
						wantResp(t, r, want, `{"message":"403 Forbidden"}`)
					case want == http.StatusNotFound:
						if msg, _ := r.Map(t)["message"].(string); !strings.HasPrefix(msg, "404 ") {
							t.Fatalf("body %s, want a 404 message", r.Body)
						}
					case want == http.StatusNoContent:
						if len(r.Body) != 0 {
							t.Fatalf("204 with a body: %q", r.Body)
						}
					}
				})
			}
		})
	}
	noServerErrors(t, w.d)
}

// TestPermissionsOnPublicGroup: a public group is visible to everyone, so a
// signed-in non-member is refused with 403 rather than 404.
func TestPermissionsOnPublicGroup(t *testing.T) {
	d := Start(t, nil)
	f := d.Fix(t)
	g := f.Group("open", 0, "public")
	reg := f.Registry(g, "main")
	_, tok := f.User("passer-by", false)
	for _, tc := range []struct {
		method, path string
		body         any
	}{
		{"GET", groupVR(g, "/registries"), nil},
		{"GET", vr("/registries/%d", reg), nil},
		{"POST", groupVR(g, "/registries"), map[string]any{"name": "mine"}},
		{"DELETE", vr("/registries/%d", reg), nil},
	} {
		wantResp(t, d.Do(tc.method, tc.path, tok, tc.body), 403, `{"message":"403 Forbidden"}`)
		wantResp(t, d.Do(tc.method, tc.path, "", tc.body), 401, `{"message":"401 Unauthorized"}`)
	}
	d.Do("GET", vr("/registries/%d", reg), rootToken, nil).Expect(t, 200)
}

// TestCredentialKinds: every way the REST API takes a token, and each way a
// bad one is refused.
func TestCredentialKinds(t *testing.T) {
	d := Start(t, nil)
	f := d.Fix(t)
	g := f.Group("acme", 0, "private")
	id, tok := f.User("alice", false)
	f.Member(g, id, guest)
	deploy := d.Do("POST", fmt.Sprintf("/groups/%d/deploy_tokens", g), rootToken,
		map[string]any{"name": "ci", "scopes": []string{"read_virtual_registry"}, "username": "ci-bot"}).Expect(t, 201).Map(t)["token"].(string)
	basic := func(user, pass string) string {
		return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
	}
	path := groupVR(g, "/registries")
	tests := []struct {
		name   string
		query  string
		header []string
		status int
	}{
		{"PRIVATE-TOKEN", "", []string{"PRIVATE-TOKEN", tok}, 200},
		{"Bearer", "", []string{"Authorization", "Bearer " + tok}, 200},
		{"Basic", "", []string{"Authorization", basic("alice", tok)}, 200},
		{"private_token query", "?private_token=" + tok, nil, 200},
		{"access_token query", "?access_token=" + tok, nil, 200},
		{"nothing", "", nil, 401},
		{"unknown token", "", []string{"PRIVATE-TOKEN", "rdpat-unknown"}, 401},
		{"Basic with another username", "", []string{"Authorization", basic("root", tok)}, 401},
		{"Bearer with a deploy token", "", []string{"Authorization", "Bearer " + deploy}, 401},
		{"Deploy-Token header", "", []string{"Deploy-Token", deploy}, 401},
		{"deploy token over Basic", "", []string{"Authorization", basic("ci-bot", deploy)}, 401},
		{"unknown private_token query", "?private_token=nope", nil, 401},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := d.Do("GET", path+tc.query, "", nil, tc.header...)
			if tc.status == 401 {
				wantResp(t, r, 401, `{"message":"401 Unauthorized"}`)
				return
			}
			wantResp(t, r, tc.status, `[]`)
		})
	}
}

// TestDecisionsFollowChanges: cached permission decisions change the moment
// a membership or a token does.
func TestDecisionsFollowChanges(t *testing.T) {
	d := Start(t, nil)
	f := d.Fix(t)
	g := f.Group("acme", 0, "private")
	reg := f.Registry(g, "main")
	id, tok := f.User("alice", false)
	get := vr("/registries/%d", reg)
	members := fmt.Sprintf("/groups/%d/members", g)

	wantResp(t, d.Do("GET", get, tok, nil), 404, `{"message":"404 Not found"}`)
	f.Member(g, id, guest)
	d.Do("GET", get, tok, nil).Expect(t, 200)
	wantResp(t, d.Do("PATCH", get, tok, map[string]any{"name": "x"}), 403, `{"message":"403 Forbidden"}`)

	d.Do("DELETE", fmt.Sprintf("%s/%d", members, id), rootToken, nil).Expect(t, 204)
	wantResp(t, d.Do("GET", get, tok, nil), 404, `{"message":"404 Not found"}`)
	f.Member(g, id, maintainer)
	d.Do("PATCH", get, tok, map[string]any{"name": "renamed"}).Expect(t, 200)

	// A user revokes a token of their own; it is refused from the next request on.
	created := d.Do("POST", fmt.Sprintf("/users/%d/personal_access_tokens", id), rootToken,
		map[string]any{"name": "second", "scopes": []string{"api"}}).Expect(t, 201).Map(t)
	second := created["token"].(string)
	d.Do("GET", get, second, nil).Expect(t, 200)
	d.Do("DELETE", fmt.Sprintf("/personal_access_tokens/%d", int64(created["id"].(float64))), second, nil).Expect(t, 204)
	wantResp(t, d.Do("GET", get, second, nil), 401, `{"message":"401 Unauthorized"}`)
	d.Do("GET", get, tok, nil).Expect(t, 200)
}
