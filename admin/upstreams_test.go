package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"registryd/store"
	"registryd/upstream"
)

// okChecker accepts every url and every connection test, so upstream
// endpoints can be tested without a network.
type okChecker struct{}

func (okChecker) CheckURL(context.Context, string) error { return nil }
func (okChecker) Test(context.Context, upstream.Endpoint, string) upstream.TestResult {
	return upstream.TestResult{Success: true}
}

// newUpstreamEnv is the cache-entry env (group "acme", registry "main",
// upstream "repo", one user per role) with a url checker that needs no network.
func newUpstreamEnv(t *testing.T) *ceEnv {
	t.Helper()
	e := newCacheEntryEnv(t, nil)
	e.srv.up = okChecker{}
	return e
}

// send is do with a JSON body.
func (e *ceEnv) send(method, path, role, body string) testResp {
	e.t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("PRIVATE-TOKEN", e.tokens[role])
	return serve(e.srv, req)
}

// object decodes a JSON object answer, keeping null fields.
func object(t *testing.T, r testResp) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("not a JSON object (%v): %s", err, r.body)
	}
	return m
}

// wantPolicy fails unless the upstream resource m shows policy (nil: null).
func wantPolicy(t *testing.T, m map[string]any, policy any) {
	t.Helper()
	got, present := m["checksum_policy"]
	if !present {
		t.Fatalf("no checksum_policy in %v", m)
	}
	if got != policy {
		t.Fatalf("checksum_policy = %#v, want %#v", got, policy)
	}
}

func TestUpstreamChecksumPolicyCreate(t *testing.T) {
	e := newUpstreamEnv(t)
	create := vrBase + fmt.Sprintf("/registries/%d/upstreams", e.registry.ID)
	tests := []struct {
		name   string
		body   string
		status int
		want   any    // the shown policy on success
		errout string // the exact body on failure
	}{
		{"absent follows the default", `{"url":"https://a.example/m"}`, 201, nil, ""},
		{"null follows the default", `{"url":"https://b.example/m","checksum_policy":null}`, 201, nil, ""},
		{"empty follows the default", `{"url":"https://c.example/m","checksum_policy":""}`, 201, nil, ""},
		{"verify", `{"url":"https://d.example/m","checksum_policy":"verify"}`, 201, "verify", ""},
		{"require", `{"url":"https://e.example/m","checksum_policy":"require"}`, 201, "require", ""},
		{"off", `{"url":"https://f.example/m","checksum_policy":"off"}`, 201, "off", ""},
		{"unknown value", `{"url":"https://g.example/m","checksum_policy":"strict"}`, 400, nil,
			`{"message":{"checksum_policy":["is invalid"]}}`},
		{"case matters", `{"url":"https://h.example/m","checksum_policy":"REQUIRE"}`, 400, nil,
			`{"message":{"checksum_policy":["is invalid"]}}`},
		{"not a string", `{"url":"https://i.example/m","checksum_policy":["off"]}`, 400, nil,
			`{"error":"checksum_policy is invalid"}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := e.send(http.MethodPost, create, "maintainer", tc.body).want(t, tc.status)
			if tc.status != 201 {
				if got := strings.TrimSpace(string(r.body)); got != tc.errout {
					t.Fatalf("body %s, want %s", got, tc.errout)
				}
				return
			}
			m := object(t, r)
			wantPolicy(t, m, tc.want)
			stored, err := e.st.Upstream(int64(m["id"].(float64)))
			if err != nil {
				t.Fatal(err)
			}
			if want, _ := tc.want.(string); stored.ChecksumPolicy != want {
				t.Fatalf("stored %q, want %q", stored.ChecksumPolicy, want)
			}
		})
	}
}

func TestUpstreamChecksumPolicyPatch(t *testing.T) {
	e := newUpstreamEnv(t)
	path := vrBase + fmt.Sprintf("/upstreams/%d", e.upstream.ID)
	steps := []struct {
		name   string
		body   string
		status int
		want   any // the stored policy afterwards, nil for none
		errout string
	}{
		{"set require alone", `{"checksum_policy":"require"}`, 200, "require", ""},
		{"another field keeps it", `{"description":"mirror"}`, 200, "require", ""},
		{"set off", `{"checksum_policy":"off"}`, 200, "off", ""},
		{"unknown value", `{"checksum_policy":"sometimes"}`, 400, "off", `{"message":{"checksum_policy":["is invalid"]}}`},
		{"not a string", `{"checksum_policy":1}`, 400, "off", `{"error":"checksum_policy is invalid"}`},
		{"null clears", `{"checksum_policy":null}`, 200, nil, ""},
		{"set verify", `{"checksum_policy":"verify"}`, 200, "verify", ""},
		{"empty clears", `{"checksum_policy":""}`, 200, nil, ""},
		{"nothing at all is still GitLab's error", `{}`, 400, nil,
			`{"error":"` + upstreamPatchFields + ` are missing, at least one parameter must be provided"}`},
	}
	for _, st := range steps {
		r := e.send(http.MethodPatch, path, "maintainer", st.body)
		if r.status != st.status {
			t.Fatalf("%s: status %d, want %d: %s", st.name, r.status, st.status, r.body)
		}
		if st.status == 200 {
			wantPolicy(t, object(t, r), st.want)
		} else if got := strings.TrimSpace(string(r.body)); got != st.errout {
			t.Fatalf("%s: body %s, want %s", st.name, got, st.errout)
		}
		stored, err := e.st.Upstream(e.upstream.ID)
		if err != nil {
			t.Fatal(err)
		}
		if want, _ := st.want.(string); stored.ChecksumPolicy != want {
			t.Fatalf("%s: stored %q, want %q", st.name, stored.ChecksumPolicy, want)
		}
	}
	// A form body sets it too.
	req := httptest.NewRequest(http.MethodPatch, path, strings.NewReader("checksum_policy=require"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("PRIVATE-TOKEN", e.tokens["maintainer"])
	wantPolicy(t, object(t, serve(e.srv, req).want(t, 200)), "require")
	// Only maintainers and up may change it.
	for _, role := range []string{"guest", "reporter", "developer"} {
		e.send(http.MethodPatch, path, role, `{"checksum_policy":"off"}`).want(t, http.StatusForbidden)
	}
	if stored, _ := e.st.Upstream(e.upstream.ID); stored.ChecksumPolicy != "require" {
		t.Fatalf("a refused PATCH changed the policy to %q", stored.ChecksumPolicy)
	}
}

// TestUpstreamChecksumPolicyEverywhere: every answer that renders an
// upstream shows checksum_policy, after updated_at, as the override or null.
func TestUpstreamChecksumPolicyEverywhere(t *testing.T) {
	e := newUpstreamEnv(t)
	policy := store.ChecksumRequire
	if _, err := e.st.UpdateUpstream(e.upstream.ID, store.UpstreamPatch{ChecksumPolicy: &policy}); err != nil {
		t.Fatal(err)
	}
	plain, err := e.st.CreateUpstream(e.registry.ID, store.NewUpstream{URL: "https://plain.example/m", Name: "plain"})
	if err != nil {
		t.Fatal(err)
	}
	one := func(path string) []byte { return e.do(http.MethodGet, path, "guest").want(t, 200).body }
	list := func(path string) [][]byte {
		var items []json.RawMessage
		if err := json.Unmarshal(one(path), &items); err != nil {
			t.Fatal(err)
		}
		out := make([][]byte, len(items))
		for i := range items {
			out[i] = items[i]
		}
		return out
	}
	check := func(where string, raw []byte, want string) {
		t.Helper()
		if !bytes.Contains(raw, []byte(`"updated_at":`)) || !bytes.Contains(raw, []byte(`"checksum_policy":`+want)) {
			t.Fatalf("%s: %s, want checksum_policy %s", where, raw, want)
		}
		if i, j := bytes.Index(raw, []byte(`"updated_at"`)), bytes.Index(raw, []byte(`"checksum_policy"`)); j < i {
			t.Fatalf("%s: checksum_policy before updated_at: %s", where, raw)
		}
	}
	check("get", one(vrBase+fmt.Sprintf("/upstreams/%d", e.upstream.ID)), `"require"`)
	check("get without override", one(vrBase+fmt.Sprintf("/upstreams/%d", plain.ID)), `null`)
	regList := list(vrBase + fmt.Sprintf("/registries/%d/upstreams", e.registry.ID))
	groupList := list(fmt.Sprintf("/api/v4/groups/%d/-/virtual_registries/packages/maven/upstreams", e.group.ID))
	for name, l := range map[string][][]byte{"registry list": regList, "group list": groupList} {
		if len(l) != 2 {
			t.Fatalf("%s: %d items", name, len(l))
		}
		check(name, l[0], `"require"`)
		check(name, l[1], `null`)
	}
	created := e.send(http.MethodPost, vrBase+fmt.Sprintf("/registries/%d/upstreams", e.registry.ID), "owner",
		`{"url":"https://new.example/m","checksum_policy":"off"}`).want(t, 201)
	check("create", created.body, `"off"`)
	// The connection test answers its own shape, without upstream fields.
	if r := e.do(http.MethodGet, vrBase+fmt.Sprintf("/upstreams/%d/test", e.upstream.ID), "guest").want(t, 200); strings.TrimSpace(string(r.body)) != `{"success":true}` {
		t.Fatalf("test: %s", r.body)
	}
}
