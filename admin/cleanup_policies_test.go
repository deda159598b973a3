package admin

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"registryd/cleanup"
	"registryd/store"
)

// The cleanup policy API against GitLab's request spec
// (ee/spec/requests/api/virtual_registries/cleanup/policies_spec.rb) and
// its entity, plus registryd's run now and dry run.

func cleanupPath(group string) string {
	return "/api/v4/groups/" + group + "/-/virtual_registries/cleanup/policy"
}

// cleanupKeyOrder is GitLab's entity's field order.
var cleanupKeyOrder = []string{"group_id", "next_run_at", "last_run_at", "last_run_deleted_size",
	"last_run_deleted_entries_count", "keep_n_days_after_download", "status", "cadence", "enabled",
	"failure_message", "last_run_detailed_metrics", "notify_on_success", "notify_on_failure", "created_at", "updated_at"}

func (e *ceEnv) acmePath() string { return cleanupPath(fmt.Sprint(e.group.ID)) }

func TestCleanupPolicyCreateAndGet(t *testing.T) {
	e := newCacheEntryEnv(t, nil)
	r := e.send(http.MethodPost, e.acmePath(), "owner", "").want(t, http.StatusCreated)
	if got := strings.Join(keysOf(t, r.body), ","); got != strings.Join(cleanupKeyOrder, ",") {
		t.Fatalf("keys %s", got)
	}
	want := fmt.Sprintf(`{"group_id":%d,"next_run_at":"2026-11-28T10:04:05.123Z","last_run_at":null,`+
		`"last_run_deleted_size":0,"last_run_deleted_entries_count":0,"keep_n_days_after_download":30,`+
		`"status":"scheduled","cadence":7,"enabled":false,"failure_message":null,"last_run_detailed_metrics":{},`+
		`"notify_on_success":false,"notify_on_failure":false,"created_at":"2026-11-21T10:04:05.123Z",`+
		`"updated_at":"2026-11-21T10:04:05.123Z"}`, e.group.ID)
	wantBody(t, r, http.StatusCreated, want)
	// GET shows the same; by full path too.
	wantBody(t, e.send(http.MethodGet, e.acmePath(), "owner", ""), http.StatusOK, want)
	wantBody(t, e.send(http.MethodGet, cleanupPath("acme"), "root", ""), http.StatusOK, want)

	// A second policy for the group: GitLab's uniqueness validation.
	wantBody(t, e.send(http.MethodPost, e.acmePath(), "root", `{"enabled":true}`), http.StatusBadRequest,
		`{"message":{"group":["has already been taken"]}}`)

	// Every field given, as a form body, on another group.
	g2 := must(e.st.CreateGroup(store.NewGroup{Name: "beta", Path: "beta"}))(t)
	req := httptest.NewRequest(http.MethodPost, cleanupPath("beta"),
		strings.NewReader("enabled=true&keep_n_days_after_download=365&cadence=90&notify_on_success=true&notify_on_failure=true"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("PRIVATE-TOKEN", e.tokens["root"])
	m := object(t, serve(e.srv, req).want(t, http.StatusCreated))
	if m["group_id"] != float64(g2.ID) || m["enabled"] != true || m["keep_n_days_after_download"] != float64(365) ||
		m["cadence"] != float64(90) || m["notify_on_success"] != true || m["notify_on_failure"] != true ||
		m["next_run_at"] != "2027-02-19T10:04:05.123Z" {
		t.Fatalf("created %v", m)
	}
}

func must[T any](v T, err error) func(testing.TB) T {
	return func(t testing.TB) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func TestCleanupPolicyAccess(t *testing.T) {
	e := newCacheEntryEnv(t, nil)
	sub := must(e.st.CreateGroup(store.NewGroup{Name: "sub", Path: "sub", ParentID: e.group.ID}))(t)
	type call struct{ method, path, body string }
	calls := []call{
		{http.MethodGet, "", ""},
		{http.MethodPost, "", `{"enabled":true}`},
		{http.MethodPatch, "", `{"enabled":true}`},
		{http.MethodDelete, "", ""},
		{http.MethodPost, "/run", ""},
		{http.MethodGet, "/dry_run", ""},
	}
	for _, c := range calls {
		path := e.acmePath() + c.path
		for _, role := range []string{"maintainer", "developer", "reporter", "guest"} {
			wantBody(t, e.send(c.method, path, role, c.body), http.StatusForbidden, `{"message":"403 Forbidden"}`)
		}
		// Not a member of the private group: it does not exist for them.
		wantBody(t, e.send(c.method, path, "outsider", c.body), http.StatusNotFound, `{"message":"404 Group Not Found"}`)
		wantBody(t, e.send(c.method, path, "", c.body), http.StatusUnauthorized, `{"message":"401 Unauthorized"}`)
		wantBody(t, e.do(c.method, path, "deploy"), http.StatusUnauthorized, `{"message":"401 Unauthorized"}`)
		// A subgroup: 403 even for its owners and admins (GitLab's
		// admin_virtual_registry exists on top-level groups only).
		for _, role := range []string{"owner", "root"} {
			wantBody(t, e.send(c.method, cleanupPath(fmt.Sprint(sub.ID))+c.path, role, c.body), http.StatusForbidden,
				`{"message":"403 Forbidden"}`)
		}
		for _, g := range []string{"999999", "foo"} {
			wantBody(t, e.send(c.method, cleanupPath(g)+c.path, "root", c.body), http.StatusNotFound,
				`{"message":"404 Group Not Found"}`)
		}
	}
	// Scopes: read_api reads, but cannot write.
	owner := e.member("owner_ro", store.Owner, store.ScopeReadAPI)
	e.tokens["owner_ro"] = owner
	e.send(http.MethodPost, e.acmePath(), "owner", "").want(t, http.StatusCreated)
	e.send(http.MethodGet, e.acmePath(), "owner_ro", "").want(t, http.StatusOK)
	e.send(http.MethodGet, e.acmePath()+"/dry_run", "owner_ro", "").want(t, http.StatusOK)
	for _, c := range calls[2:5] {
		if r := e.send(c.method, e.acmePath()+c.path, "owner_ro", c.body); r.status != http.StatusForbidden ||
			!strings.Contains(string(r.body), "insufficient_scope") {
			t.Fatalf("%s%s with read_api: %d %s", c.method, c.path, r.status, r.body)
		}
	}
	// The feature gate: 404 before anything else.
	g := newCacheEntryEnv(t, func(o *serverOptions) { o.auth.DisableVirtualRegistry = true })
	wantBody(t, g.send(http.MethodGet, g.acmePath(), "owner", ""), http.StatusNotFound, `{"message":"404 Not Found"}`)
}

// TestCleanupPolicyInvalidParams: GitLab's table of invalid values, for POST
// and PATCH, and the cases around it.
func TestCleanupPolicyInvalidParams(t *testing.T) {
	e := newCacheEntryEnv(t, nil)
	rows := []struct{ body, err string }{
		// GitLab's spec.
		{`{"enabled":"","keep_n_days_after_download":30,"cadence":7,"notify_on_success":true,"notify_on_failure":true}`, "enabled is empty"},
		{`{"enabled":true,"keep_n_days_after_download":370,"cadence":7,"notify_on_success":true,"notify_on_failure":true}`, "keep_n_days_after_download does not have a valid value"},
		{`{"enabled":true,"keep_n_days_after_download":30,"cadence":0,"notify_on_success":true,"notify_on_failure":true}`, "cadence does not have a valid value"},
		{`{"enabled":true,"keep_n_days_after_download":30,"cadence":7,"notify_on_success":"","notify_on_failure":true}`, "notify_on_success is empty"},
		{`{"enabled":true,"keep_n_days_after_download":30,"cadence":7,"notify_on_success":true,"notify_on_failure":""}`, "notify_on_failure is empty"},
		// Around it.
		{`{"keep_n_days_after_download":0}`, "keep_n_days_after_download does not have a valid value"},
		{`{"keep_n_days_after_download":366}`, "keep_n_days_after_download does not have a valid value"},
		{`{"keep_n_days_after_download":""}`, "keep_n_days_after_download is empty"},
		{`{"keep_n_days_after_download":"ten"}`, "keep_n_days_after_download is invalid"},
		{`{"keep_n_days_after_download":1.5}`, "keep_n_days_after_download is invalid"},
		{`{"cadence":2}`, "cadence does not have a valid value"},
		{`{"cadence":null}`, "cadence is empty"},
		{`{"enabled":null}`, "enabled is empty"},
		{`{"enabled":"  "}`, "enabled is empty"},
		{`{"enabled":"maybe"}`, "enabled is invalid"},
		{`{"enabled":1}`, "enabled is invalid"},
		{`{"enabled":"","cadence":3,"keep_n_days_after_download":0}`, "enabled is empty, keep_n_days_after_download does not have a valid value, cadence does not have a valid value"},
	}
	for _, row := range rows {
		want := `{"error":"` + row.err + `"}`
		wantBody(t, e.send(http.MethodPost, e.acmePath(), "owner", row.body), http.StatusBadRequest, want)
	}
	if _, err := e.st.CleanupPolicy(e.group.ID); err == nil {
		t.Fatal("a refused POST created a policy")
	}
	e.send(http.MethodPost, e.acmePath(), "owner", "").want(t, http.StatusCreated)
	before := e.send(http.MethodGet, e.acmePath(), "owner", "").want(t, http.StatusOK)
	for _, row := range rows {
		wantBody(t, e.send(http.MethodPatch, e.acmePath(), "owner", row.body), http.StatusBadRequest, `{"error":"`+row.err+`"}`)
	}
	missing := `{"error":"enabled, keep_n_days_after_download, cadence, notify_on_success, notify_on_failure are missing, at least one parameter must be provided"}`
	for _, body := range []string{"", "{}", `{"group_id":3,"status":"running"}`} {
		wantBody(t, e.send(http.MethodPatch, e.acmePath(), "owner", body), http.StatusBadRequest, missing)
	}
	wantBody(t, e.send(http.MethodGet, e.acmePath(), "owner", ""), http.StatusOK, strings.TrimSpace(string(before.body)))
	wantBody(t, e.send(http.MethodPost, e.acmePath(), "owner", `{"enabled":"x"}`), http.StatusBadRequest, `{"error":"enabled is invalid"}`)
}

func TestCleanupPolicyUpdateAndDelete(t *testing.T) {
	e := newCacheEntryEnv(t, nil)
	path := e.acmePath()
	for _, m := range []string{http.MethodGet, http.MethodPatch, http.MethodDelete} {
		wantBody(t, e.send(m, path, "owner", `{"enabled":true}`), http.StatusNotFound, `{"message":"404 Not found"}`)
	}
	e.send(http.MethodPost, path, "owner", "").want(t, http.StatusCreated)
	e.clock.Advance(48 * time.Hour)
	// GitLab's spec: enabled, keep_n_days_after_download and the
	// notifications change; next_run_at moves to now plus the cadence, as
	// on every save.
	m := object(t, e.send(http.MethodPatch, path, "owner",
		`{"enabled":true,"keep_n_days_after_download":60,"notify_on_success":true,"notify_on_failure":true}`).want(t, http.StatusOK))
	if m["enabled"] != true || m["keep_n_days_after_download"] != float64(60) || m["notify_on_success"] != true ||
		m["notify_on_failure"] != true || m["cadence"] != float64(7) || m["next_run_at"] != "2026-11-30T10:04:05.123Z" ||
		m["updated_at"] != "2026-11-23T10:04:05.123Z" || m["created_at"] != "2026-11-21T10:04:05.123Z" {
		t.Fatalf("patched %v", m)
	}
	m = object(t, e.send(http.MethodPatch, path, "root", `{"cadence":1}`).want(t, http.StatusOK))
	if m["cadence"] != float64(1) || m["next_run_at"] != "2026-11-24T10:04:05.123Z" || m["keep_n_days_after_download"] != float64(60) {
		t.Fatalf("patched %v", m)
	}

	// DELETE honours If-Unmodified-Since, as GitLab's destroy_conditionally!.
	req := httptest.NewRequest(http.MethodDelete, path, nil)
	req.Header.Set("PRIVATE-TOKEN", e.tokens["owner"])
	req.Header.Set("If-Unmodified-Since", "Sat, 21 Nov 2026 10:04:05 GMT")
	wantBody(t, serve(e.srv, req), http.StatusPreconditionFailed, `{"message":"412 Precondition Failed"}`)
	req.Header.Set("If-Unmodified-Since", "yesterday")
	serve(e.srv, req).want(t, http.StatusBadRequest)
	e.send(http.MethodDelete, path, "owner", "").want(t, http.StatusNoContent)
	wantBody(t, e.send(http.MethodGet, path, "owner", ""), http.StatusNotFound, `{"message":"404 Not found"}`)
	e.send(http.MethodPost, path, "owner", "").want(t, http.StatusCreated)
}

// fakeRunner answers RunNow with err, or marks the policy running as the
// scheduler would.
type fakeRunner struct {
	st  *store.Store
	err error
	got []string
}

func (f *fakeRunner) RunNow(group, author int64, name string) (store.CleanupPolicy, error) {
	f.got = append(f.got, fmt.Sprintf("%d %d %s", group, author, name))
	if f.err != nil {
		return store.CleanupPolicy{}, f.err
	}
	return f.st.StartCleanupRun(group, store.CleanupStart{AuthorID: author, AuthorName: name})
}

func TestCleanupPolicyRunNowAnswers(t *testing.T) {
	e := newCacheEntryEnv(t, nil)
	path := e.acmePath() + "/run"
	wantBody(t, e.send(http.MethodPost, path, "owner", ""), http.StatusServiceUnavailable,
		`{"message":"503 Service Unavailable - cleanup policy runs are not available"}`)
	f := &fakeRunner{st: e.st}
	e.srv.cleanup = f
	wantBody(t, e.send(http.MethodPost, path, "owner", ""), http.StatusNotFound, `{"message":"404 Not found"}`)
	e.send(http.MethodPost, e.acmePath(), "owner", "").want(t, http.StatusCreated)
	m := object(t, e.send(http.MethodPost, path, "root", "").want(t, http.StatusAccepted))
	if m["status"] != "running" || m["group_id"] != float64(e.group.ID) {
		t.Fatalf("run now: %v", m)
	}
	if f.got[len(f.got)-1] != fmt.Sprintf("%d 1 Administrator", e.group.ID) {
		t.Fatalf("runner got %v", f.got)
	}
	wantBody(t, e.send(http.MethodPost, path, "owner", ""), http.StatusConflict,
		`{"message":"409 Conflict: the cleanup policy is running"}`)
	f.err = store.ErrCleanupRunning
	wantBody(t, e.send(http.MethodPost, path, "owner", ""), http.StatusConflict,
		`{"message":"409 Conflict: the cleanup policy is running"}`)
	wantBody(t, e.send(http.MethodGet, path, "owner", ""), http.StatusMethodNotAllowed, `{"error":"405 Not Allowed"}`)
}

// TestCleanupPolicyRunNowInterval: with the real scheduler and the default
// cleanup.run_now_interval (1m), a run now while a run goes on is 409; one
// right after the run ended is 429 with Retry-After (whole seconds, rounded
// up) and GitLab's message form; once the interval since the last run's
// start has passed, 202.
func TestCleanupPolicyRunNowInterval(t *testing.T) {
	e := newCacheEntryEnv(t, nil)
	e.send(http.MethodPost, e.acmePath(), "owner", "").want(t, http.StatusCreated)
	hold := make(chan struct{})
	// RunNowInterval left zero: the scheduler's default, which is
	// cleanup.run_now_interval's (cleanup.TestDefaultsAreConfigs).
	sch, err := cleanup.New(cleanup.Options{Store: e.st, Now: e.clock.Now, Rest: -1,
		BeforeRun: func() error { <-hold; return nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer sch.Stop()
	e.srv.cleanup = sch
	path := e.acmePath() + "/run"
	e.send(http.MethodPost, path, "owner", "").want(t, http.StatusAccepted)
	wantBody(t, e.send(http.MethodPost, path, "owner", ""), http.StatusConflict,
		`{"message":"409 Conflict: the cleanup policy is running"}`)
	close(hold)
	sch.Wait()

	tooSoon := func(retry string) {
		t.Helper()
		r := e.send(http.MethodPost, path, "owner", "")
		wantBody(t, r, http.StatusTooManyRequests, `{"message":"429 Too Many Requests - the cleanup policy's last run `+
			`started less than 1m ago; retry after `+retry+` seconds"}`)
		if got := r.header.Get("Retry-After"); got != retry {
			t.Fatalf("Retry-After %q, want %q", got, retry)
		}
		if ct := r.header.Get("Content-Type"); ct != "application/json" {
			t.Fatalf("Content-Type %q", ct)
		}
	}
	tooSoon("60")
	e.clock.Advance(30*time.Second + 500*time.Millisecond)
	tooSoon("30") // 29.5s left, rounded up
	e.clock.Advance(29*time.Second + 499*time.Millisecond)
	tooSoon("1") // 1ms left
	if m := object(t, e.send(http.MethodGet, e.acmePath(), "owner", "").want(t, http.StatusOK)); m["status"] != "scheduled" {
		t.Fatalf("refused runs changed the policy: %v", m)
	}
	e.clock.Advance(time.Millisecond)
	m := object(t, e.send(http.MethodPost, path, "owner", "").want(t, http.StatusAccepted))
	if m["status"] != "running" {
		t.Fatalf("run now after the interval: %v", m)
	}
	sch.Wait()
	tooSoon("60")
}

// TestCleanupPolicyDryRunAndRunNow: the dry run lists what a run would
// delete; a run now (the real scheduler) deletes exactly that.
func TestCleanupPolicyDryRunAndRunNow(t *testing.T) {
	e := newCacheEntryEnv(t, nil)
	// Five entries at t0; two of them downloaded 20 days later; the clock
	// then stands 40 days after t0.
	var rels []string
	for i := range 5 {
		rels = append(rels, fmt.Sprintf("/org/example/lib/1.%d/lib-1.%d.jar", i, i))
		e.put(e.upstream.ID, rels[i])
	}
	e.clock.Advance(20 * 24 * time.Hour)
	if err := e.st.AddDownloads([]store.DownloadCount{{UpstreamID: e.upstream.ID, Rel: rels[1], Count: 1, Last: e.clock.Now()},
		{UpstreamID: e.upstream.ID, Rel: rels[3], Count: 1, Last: e.clock.Now()}}); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(20 * 24 * time.Hour)
	dry := e.acmePath() + "/dry_run"
	wantBody(t, e.send(http.MethodGet, dry, "owner", ""), http.StatusNotFound, `{"message":"404 Not found"}`)
	// A setting previewed before any policy exists.
	r := e.send(http.MethodGet, dry+"?keep_n_days_after_download=30&per_page=2", "owner", "").want(t, http.StatusOK)
	m := object(t, r)
	entries := m["entries"].([]any)
	if m["deleted_entries_count"] != float64(3) || len(entries) != 2 || r.header.Get("X-Total") != "3" ||
		r.header.Get("X-Total-Pages") != "2" || m["downloaded_before"] != "2026-12-01T10:04:10.123Z" {
		t.Fatalf("dry run %v %v", m, r.header)
	}
	first := entries[0].(map[string]any)
	if first["relative_path"] != rels[0] || first["id"] == nil || first["upstream_id"] != float64(e.upstream.ID) {
		t.Fatalf("first entry %v", first)
	}
	wantSize := 0
	for _, i := range []int{0, 2, 4} {
		wantSize += len("content of " + rels[i])
	}
	if m["deleted_size"] != float64(wantSize) {
		t.Fatalf("deleted_size %v, want %d", m["deleted_size"], wantSize)
	}
	r = e.send(http.MethodGet, dry+"?keep_n_days_after_download=30&per_page=2&page=2", "owner", "").want(t, http.StatusOK)
	if got := object(t, r)["entries"].([]any); len(got) != 1 || got[0].(map[string]any)["relative_path"] != rels[4] {
		t.Fatalf("page 2: %v", got)
	}
	// Keeping 10 days, the files downloaded 20 days ago go too.
	if m := object(t, e.send(http.MethodGet, dry+"?keep_n_days_after_download=10", "owner", "")); m["deleted_entries_count"] != float64(5) {
		t.Fatalf("10 days: %v", m)
	}
	wantBody(t, e.send(http.MethodGet, dry+"?keep_n_days_after_download=0", "owner", ""), http.StatusBadRequest,
		`{"error":"keep_n_days_after_download does not have a valid value"}`)

	// The policy, then a run now with the real scheduler.
	e.send(http.MethodPost, e.acmePath(), "owner", `{"keep_n_days_after_download":30}`).want(t, http.StatusCreated)
	m = object(t, e.send(http.MethodGet, dry, "owner", "").want(t, http.StatusOK))
	if m["deleted_entries_count"] != float64(3) {
		t.Fatalf("dry run of the policy: %v", m)
	}
	sch, err := cleanup.New(cleanup.Options{Store: e.st, Now: e.clock.Now, Rest: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer sch.Stop()
	e.srv.cleanup = sch
	m = object(t, e.send(http.MethodPost, e.acmePath()+"/run", "owner", "").want(t, http.StatusAccepted))
	if m["status"] != "running" || m["enabled"] != false {
		t.Fatalf("run now: %v", m)
	}
	sch.Wait()
	m = object(t, e.send(http.MethodGet, e.acmePath(), "owner", "").want(t, http.StatusOK))
	if m["status"] != "scheduled" || m["last_run_deleted_entries_count"] != float64(3) ||
		m["last_run_deleted_size"] != float64(wantSize) || m["last_run_at"] != "2026-12-31T10:04:10.123Z" ||
		fmt.Sprint(m["last_run_detailed_metrics"]) != fmt.Sprintf("map[maven:map[deleted_entries_count:3 deleted_size:%d]]", wantSize) {
		t.Fatalf("after the run: %v", m)
	}
	list := e.list("owner", "")
	if len(list) != 2 || list[0]["relative_path"] != rels[3] || list[1]["relative_path"] != rels[1] {
		t.Fatalf("entries left: %v", list)
	}
	if m := object(t, e.send(http.MethodGet, dry, "owner", "")); m["deleted_entries_count"] != float64(0) ||
		len(m["entries"].([]any)) != 0 {
		t.Fatalf("dry run after the run: %v", m)
	}
}
