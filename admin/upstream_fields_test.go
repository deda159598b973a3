package admin

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"registryd/internal/testclock"
	"registryd/store"
	"registryd/upstream"
)

// upstreamKeyOrder is the upstream resource's field order: GitLab's, then
// registryd's own.
var upstreamKeyOrder = []string{"id", "name", "description", "group_id", "url", "username",
	"cache_validity_hours", "metadata_cache_validity_hours", "created_at", "updated_at",
	"checksum_policy", "not_found_cache_minutes", "metadata_not_found_cache_minutes",
	"status", "status_since", "last_error", "last_error_at", "retry_at", "failing_paths"}

// keysOf lists a JSON object's keys in order.
func keysOf(t *testing.T, raw []byte) []string {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("not an object: %s", raw)
	}
	var keys []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, tok.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			t.Fatal(err)
		}
	}
	return keys
}

// wantMinutes fails unless the upstream resource m shows both overrides
// (nil: null).
func wantMinutes(t *testing.T, m map[string]any, art, meta any) {
	t.Helper()
	for field, want := range map[string]any{"not_found_cache_minutes": art, "metadata_not_found_cache_minutes": meta} {
		got, present := m[field]
		if !present {
			t.Fatalf("no %s in %v", field, m)
		}
		if want != nil {
			want = float64(want.(int))
		}
		if got != want {
			t.Fatalf("%s = %#v, want %#v", field, got, want)
		}
	}
}

// storedMinutes is what the store keeps, as "nil/nil" or "30/5".
func storedMinutes(t *testing.T, st *store.Store, id int64) string {
	t.Helper()
	u, err := st.Upstream(id)
	if err != nil {
		t.Fatal(err)
	}
	show := func(p *int) string {
		if p == nil {
			return "nil"
		}
		return fmt.Sprint(*p)
	}
	return show(u.NotFoundCacheMinutes) + "/" + show(u.MetadataNotFoundCacheMinutes)
}

func TestUpstreamNotFoundMinutesCreate(t *testing.T) {
	e := newUpstreamEnv(t)
	create := vrBase + fmt.Sprintf("/registries/%d/upstreams", e.registry.ID)
	tests := []struct {
		name      string
		fields    string
		status    int
		art, meta any    // shown on success
		errout    string // the exact body on failure
	}{
		{"absent follows the config", ``, 201, nil, nil, ""},
		{"null follows the config", `,"not_found_cache_minutes":null,"metadata_not_found_cache_minutes":null`, 201, nil, nil, ""},
		{"empty follows the config", `,"not_found_cache_minutes":"","metadata_not_found_cache_minutes":""`, 201, nil, nil, ""},
		{"zero", `,"not_found_cache_minutes":0,"metadata_not_found_cache_minutes":0`, 201, 0, 0, ""},
		{"values", `,"not_found_cache_minutes":120,"metadata_not_found_cache_minutes":5`, 201, 120, 5, ""},
		{"one alone", `,"metadata_not_found_cache_minutes":1`, 201, nil, 1, ""},
		{"a numeric string", `,"not_found_cache_minutes":"30"`, 201, 30, nil, ""},
		{"the maximum", `,"not_found_cache_minutes":10080,"metadata_not_found_cache_minutes":10080`, 201, 10080, 10080, ""},
		{"negative", `,"not_found_cache_minutes":-1`, 400, nil, nil,
			`{"message":{"not_found_cache_minutes":["must be greater than or equal to 0"]}}`},
		{"over a week", `,"metadata_not_found_cache_minutes":10081`, 400, nil, nil,
			`{"message":{"metadata_not_found_cache_minutes":["must be less than or equal to 10080"]}}`},
		{"both wrong", `,"not_found_cache_minutes":-5,"metadata_not_found_cache_minutes":99999`, 400, nil, nil,
			`{"message":{"metadata_not_found_cache_minutes":["must be less than or equal to 10080"],"not_found_cache_minutes":["must be greater than or equal to 0"]}}`},
		{"fractional", `,"not_found_cache_minutes":1.5`, 400, nil, nil, `{"error":"not_found_cache_minutes is invalid"}`},
		{"not a number", `,"metadata_not_found_cache_minutes":"soon"`, 400, nil, nil, `{"error":"metadata_not_found_cache_minutes is invalid"}`},
		{"a boolean", `,"not_found_cache_minutes":true`, 400, nil, nil, `{"error":"not_found_cache_minutes is invalid"}`},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			body := fmt.Sprintf(`{"url":"https://n%d.example/m"%s}`, i, tc.fields)
			r := e.send(http.MethodPost, create, "maintainer", body).want(t, tc.status)
			if tc.status != 201 {
				if got := strings.TrimSpace(string(r.body)); got != tc.errout {
					t.Fatalf("body %s, want %s", got, tc.errout)
				}
				return
			}
			m := object(t, r)
			wantMinutes(t, m, tc.art, tc.meta)
			want := func(v any) string {
				if v == nil {
					return "nil"
				}
				return fmt.Sprint(v)
			}
			if got := storedMinutes(t, e.st, int64(m["id"].(float64))); got != want(tc.art)+"/"+want(tc.meta) {
				t.Fatalf("stored %s", got)
			}
		})
	}
}

func TestUpstreamNotFoundMinutesPatch(t *testing.T) {
	e := newUpstreamEnv(t)
	path := vrBase + fmt.Sprintf("/upstreams/%d", e.upstream.ID)
	steps := []struct {
		name   string
		body   string
		status int
		stored string // afterwards
		errout string
	}{
		{"set artifacts alone", `{"not_found_cache_minutes":60}`, 200, "60/nil", ""},
		{"set metadata alone", `{"metadata_not_found_cache_minutes":2}`, 200, "60/2", ""},
		{"another field keeps them", `{"description":"mirror"}`, 200, "60/2", ""},
		{"zero", `{"not_found_cache_minutes":0}`, 200, "0/2", ""},
		{"negative", `{"not_found_cache_minutes":-3}`, 400, "0/2",
			`{"message":{"not_found_cache_minutes":["must be greater than or equal to 0"]}}`},
		{"too long", `{"metadata_not_found_cache_minutes":20000}`, 400, "0/2",
			`{"message":{"metadata_not_found_cache_minutes":["must be less than or equal to 10080"]}}`},
		{"not an integer", `{"metadata_not_found_cache_minutes":[1]}`, 400, "0/2",
			`{"error":"metadata_not_found_cache_minutes is invalid"}`},
		{"a bad one spoils a good one", `{"not_found_cache_minutes":5,"metadata_not_found_cache_minutes":-1}`, 400, "0/2",
			`{"message":{"metadata_not_found_cache_minutes":["must be greater than or equal to 0"]}}`},
		{"null clears", `{"not_found_cache_minutes":null}`, 200, "nil/2", ""},
		{"empty clears", `{"metadata_not_found_cache_minutes":""}`, 200, "nil/nil", ""},
		{"both at once", `{"not_found_cache_minutes":10080,"metadata_not_found_cache_minutes":10}`, 200, "10080/10", ""},
		{"nothing at all is still GitLab's error", `{}`, 400, "10080/10",
			`{"error":"` + upstreamPatchFields + ` are missing, at least one parameter must be provided"}`},
	}
	for _, st := range steps {
		r := e.send(http.MethodPatch, path, "maintainer", st.body)
		if r.status != st.status {
			t.Fatalf("%s: status %d, want %d: %s", st.name, r.status, st.status, r.body)
		}
		if st.status != 200 {
			if got := strings.TrimSpace(string(r.body)); got != st.errout {
				t.Fatalf("%s: body %s, want %s", st.name, got, st.errout)
			}
		} else {
			m := object(t, r)
			art, meta, _ := strings.Cut(st.stored, "/")
			show := func(s string) any {
				if s == "nil" {
					return nil
				}
				var n int
				fmt.Sscan(s, &n)
				return n
			}
			wantMinutes(t, m, show(art), show(meta))
		}
		if got := storedMinutes(t, e.st, e.upstream.ID); got != st.stored {
			t.Fatalf("%s: stored %s, want %s", st.name, got, st.stored)
		}
	}
	// A form body sets and clears them too.
	form := func(body string) testResp {
		req := httptest.NewRequest(http.MethodPatch, path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("PRIVATE-TOKEN", e.tokens["maintainer"])
		return serve(e.srv, req).want(t, 200)
	}
	form("not_found_cache_minutes=15&metadata_not_found_cache_minutes=")
	if got := storedMinutes(t, e.st, e.upstream.ID); got != "15/nil" {
		t.Fatalf("form: stored %s", got)
	}
	// Only maintainers and up may change them.
	for _, role := range []string{"guest", "reporter", "developer"} {
		e.send(http.MethodPatch, path, role, `{"not_found_cache_minutes":1}`).want(t, http.StatusForbidden)
	}
	if got := storedMinutes(t, e.st, e.upstream.ID); got != "15/nil" {
		t.Fatalf("a refused PATCH changed them: %s", got)
	}
}

// healthEnv is the upstream env with a Health on a clock of its own.
type healthEnv struct {
	*ceEnv
	healthClock *testclock.Clock
	health      *upstream.Health
}

func newHealthEnv(t *testing.T) *healthEnv {
	e := &healthEnv{ceEnv: newUpstreamEnv(t), healthClock: testclock.New(time.Date(2026, 11, 21, 11, 0, 0, 250e6, time.UTC))}
	e.health = upstream.NewHealth(upstream.HealthOptions{Now: e.healthClock.Now})
	e.srv.health = e.health
	return e
}

// fail reports a hard failure of upstream id.
func (e *healthEnv) fail(id int64, reason string) {
	e.t.Helper()
	tk, _, ok := e.health.Begin(id, "org/example/a/1/a-1.jar")
	if !ok {
		e.t.Fatal("Begin refused")
	}
	e.health.Failure(tk, upstream.Fault{Class: upstream.FailHost, Reason: reason})
}

func (e *healthEnv) get(id int64) map[string]any {
	e.t.Helper()
	return object(e.t, e.do(http.MethodGet, vrBase+fmt.Sprintf("/upstreams/%d", id), "guest").want(e.t, 200))
}

// wantHealth fails unless m shows the health fields (nil: null).
func wantHealth(t *testing.T, m map[string]any, status string, since, lastErr, lastErrAt, retryAt any) {
	t.Helper()
	want := map[string]any{"status": status, "status_since": since, "last_error": lastErr,
		"last_error_at": lastErrAt, "retry_at": retryAt}
	for field, w := range want {
		got, present := m[field]
		if !present || got != w {
			t.Fatalf("%s = %#v (present %v), want %#v; in %v", field, got, present, w, m)
		}
	}
}

func TestUpstreamHealthShown(t *testing.T) {
	e := newHealthEnv(t)
	id := e.upstream.ID
	wantHealth(t, e.get(id), "healthy", nil, nil, nil, nil)

	e.fail(id, "Connection timeout")
	down := "2026-11-21T11:00:00.250Z"
	retry := "2026-11-21T11:00:10.250Z"
	wantHealth(t, e.get(id), "unhealthy", down, "Connection timeout", down, retry)

	// The lists and the PATCH answer show it as well.
	var list []map[string]any
	for _, path := range []string{
		vrBase + fmt.Sprintf("/registries/%d/upstreams", e.registry.ID),
		fmt.Sprintf("/api/v4/groups/%d/-/virtual_registries/packages/maven/upstreams", e.group.ID),
	} {
		if err := json.Unmarshal(e.do(http.MethodGet, path, "guest").want(t, 200).body, &list); err != nil || len(list) != 1 {
			t.Fatalf("%s: %v %v", path, err, list)
		}
		wantHealth(t, list[0], "unhealthy", down, "Connection timeout", down, retry)
	}
	patched := object(t, e.send(http.MethodPatch, vrBase+fmt.Sprintf("/upstreams/%d", id), "maintainer",
		`{"description":"still down"}`).want(t, 200))
	wantHealth(t, patched, "unhealthy", down, "Connection timeout", down, retry)

	// Another upstream, created now, is healthy.
	created := object(t, e.send(http.MethodPost, vrBase+fmt.Sprintf("/registries/%d/upstreams", e.registry.ID),
		"maintainer", `{"url":"https://other.example/m"}`).want(t, 201))
	wantHealth(t, created, "healthy", nil, nil, nil, nil)

	// The trial succeeds: healthy since then, the last error kept as history.
	e.healthClock.Advance(10 * time.Second)
	tk, _, ok := e.health.Begin(id, "org/example/b/1/b-1.jar")
	if !ok || !tk.Trial() {
		t.Fatal("no trial")
	}
	e.health.Success(tk)
	wantHealth(t, e.get(id), "healthy", retry, "Connection timeout", down, nil)
	if n := e.get(id)["failing_paths"]; n != 0.0 {
		t.Fatalf("failing_paths %v, want 0", n)
	}

	// One file failing twice opens its breaker: counted, while the
	// upstream stays healthy.
	for range 2 {
		tk, _, ok := e.health.Begin(id, "org/example/c/1/c-1.jar")
		if !ok {
			t.Fatal("Begin refused")
		}
		e.health.Failure(tk, upstream.Fault{Class: upstream.FailPath, Reason: "answered 502 Bad Gateway"})
	}
	at := "2026-11-21T11:00:10.250Z"
	shown := e.get(id)
	wantHealth(t, shown, "healthy", retry, "answered 502 Bad Gateway", at, nil)
	if n := shown["failing_paths"]; n != 1.0 {
		t.Fatalf("failing_paths %v, want 1", n)
	}
}

// TestUpstreamFieldOrder: every answer that renders an upstream has
// GitLab's fields, then registryd's own, in one order.
func TestUpstreamFieldOrder(t *testing.T) {
	e := newHealthEnv(t)
	e.fail(e.upstream.ID, "503 Service Unavailable")
	want := strings.Join(upstreamKeyOrder, ",")
	check := func(where string, raw []byte, extra ...string) {
		t.Helper()
		if got := strings.Join(keysOf(t, raw), ","); got != strings.Join(append([]string{want}, extra...), ",") {
			t.Fatalf("%s: keys %s", where, got)
		}
	}
	check("get", e.do(http.MethodGet, vrBase+fmt.Sprintf("/upstreams/%d", e.upstream.ID), "guest").want(t, 200).body,
		"registry_upstreams")
	check("patch", e.send(http.MethodPatch, vrBase+fmt.Sprintf("/upstreams/%d", e.upstream.ID), "maintainer",
		`{"not_found_cache_minutes":3}`).want(t, 200).body)
	check("create", e.send(http.MethodPost, vrBase+fmt.Sprintf("/registries/%d/upstreams", e.registry.ID), "maintainer",
		`{"url":"https://order.example/m","metadata_not_found_cache_minutes":4}`).want(t, 201).body, "registry_upstream")
	var items []json.RawMessage
	if err := json.Unmarshal(e.do(http.MethodGet, vrBase+fmt.Sprintf("/registries/%d/upstreams", e.registry.ID), "guest").want(t, 200).body, &items); err != nil {
		t.Fatal(err)
	}
	for _, it := range items {
		check("registry list", it, "registry_upstream")
	}
	if err := json.Unmarshal(e.do(http.MethodGet, fmt.Sprintf("/api/v4/groups/%d/-/virtual_registries/packages/maven/upstreams", e.group.ID), "guest").want(t, 200).body, &items); err != nil {
		t.Fatal(err)
	}
	for _, it := range items {
		check("group list", it)
	}
}

func TestUpstreamHealthForgotten(t *testing.T) {
	e := newHealthEnv(t)
	id := e.upstream.ID
	path := vrBase + fmt.Sprintf("/upstreams/%d", id)
	unhealthy := func() bool { return e.health.Status(id).State == upstream.Unhealthy }

	// Edits that keep the url keep the health.
	e.fail(id, "Connection refused")
	for _, body := range []string{`{"name":"renamed"}`, `{"url":"https://repo.example/maven2"}`,
		`{"username":"u","password":"p"}`, `{"not_found_cache_minutes":1}`} {
		e.send(http.MethodPatch, path, "maintainer", body).want(t, 200)
		if !unhealthy() {
			t.Fatalf("PATCH %s forgot the health", body)
		}
	}
	// A refused url change keeps it.
	e.send(http.MethodPatch, path, "maintainer", `{"url":"ftp://x.example/m"}`).want(t, 400)
	if !unhealthy() {
		t.Fatal("a refused PATCH forgot the health")
	}
	// A new url is a new server.
	m := object(t, e.send(http.MethodPatch, path, "maintainer", `{"url":"https://mirror.example/maven2"}`).want(t, 200))
	wantHealth(t, m, "healthy", nil, nil, nil, nil)
	if e.health.Status(id) != (upstream.HealthStatus{State: upstream.Healthy}) {
		t.Fatalf("after a url change: %+v", e.health.Status(id))
	}

	// DELETE forgets.
	e.fail(id, "Connection refused")
	e.do(http.MethodDelete, path, "maintainer").want(t, http.StatusNoContent)
	if unhealthy() {
		t.Fatal("DELETE kept the health")
	}

	// Removing an upstream from a registry forgets it only when that deletes it.
	reg2, err := e.st.CreateRegistry(e.group.ID, "second", "")
	if err != nil {
		t.Fatal(err)
	}
	shared, err := e.st.CreateUpstream(e.registry.ID, store.NewUpstream{URL: "https://shared.example/m", Name: "shared"})
	if err != nil {
		t.Fatal(err)
	}
	other, err := e.st.Associate(reg2.ID, shared.ID)
	if err != nil {
		t.Fatal(err)
	}
	e.fail(shared.ID, "Connection timeout")
	e.do(http.MethodDelete, vrBase+fmt.Sprintf("/registry_upstreams/%d", shared.Assoc.ID), "maintainer").want(t, http.StatusNoContent)
	if e.health.Status(shared.ID).State != upstream.Unhealthy {
		t.Fatal("removing a still-used upstream from one registry forgot its health")
	}
	e.do(http.MethodDelete, vrBase+fmt.Sprintf("/registry_upstreams/%d", other.ID), "maintainer").want(t, http.StatusNoContent)
	if e.health.Status(shared.ID).State != upstream.Healthy {
		t.Fatal("removing the upstream from its last registry kept its health")
	}

	// Deleting a registry forgets the upstreams it takes with it.
	only, err := e.st.CreateUpstream(reg2.ID, store.NewUpstream{URL: "https://only.example/m", Name: "only"})
	if err != nil {
		t.Fatal(err)
	}
	kept, err := e.st.CreateUpstream(reg2.ID, store.NewUpstream{URL: "https://kept.example/m", Name: "kept"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.Associate(e.registry.ID, kept.ID); err != nil {
		t.Fatal(err)
	}
	e.fail(only.ID, "Connection timeout")
	e.fail(kept.ID, "Connection timeout")
	e.do(http.MethodDelete, vrBase+fmt.Sprintf("/registries/%d", reg2.ID), "maintainer").want(t, http.StatusNoContent)
	if e.health.Status(only.ID).State != upstream.Healthy {
		t.Fatal("deleting the registry kept the health of its deleted upstream")
	}
	if e.health.Status(kept.ID).State != upstream.Unhealthy {
		t.Fatal("deleting a registry forgot the health of an upstream another registry still uses")
	}
}

// Credentials written into an upstream url become its username and
// password, on POST and on PATCH: the url every read returns carries none.
func TestUpstreamURLUserinfoBecomesCredentials(t *testing.T) {
	e := newUpstreamEnv(t)
	create := vrBase + fmt.Sprintf("/registries/%d/upstreams", e.registry.ID)
	r := e.send(http.MethodPost, create, "maintainer", `{"url":"https://bot:s3cret-in-url@creds.example/m2"}`).want(t, 201)
	m := object(t, r)
	if m["url"] != "https://creds.example/m2" || m["username"] != "bot" || bytes.Contains(r.body, []byte("s3cret-in-url")) {
		t.Fatalf("created %s", r.body)
	}
	id := int64(m["id"].(float64))
	if u, err := e.st.Upstream(id); err != nil || u.Username != "bot" || u.Password != "s3cret-in-url" || strings.Contains(u.URL, "@") {
		t.Fatalf("stored %+v, %v", u, err)
	}
	r = e.send(http.MethodPatch, vrBase+fmt.Sprintf("/upstreams/%d", id), "maintainer",
		`{"url":"https://robot:other-pw-in-url@creds2.example/m2"}`).want(t, 200)
	if m = object(t, r); m["url"] != "https://creds2.example/m2" || m["username"] != "robot" || bytes.Contains(r.body, []byte("other-pw-in-url")) {
		t.Fatalf("patched %s", r.body)
	}
	if u, _ := e.st.Upstream(id); u.Password != "other-pw-in-url" {
		t.Fatal("the url's password was not kept as the password")
	}
}
