package admin

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"registryd/auth"
	"registryd/store"
)

// auditEnv has a private group "acme" with a subgroup and members at every
// level from reporter to owner, a public group "pub", an outsider, and
// audit events in both groups and of another entity type.
type auditEnv struct {
	t        *testing.T
	st       *store.Store
	srv      *Server
	tokens   map[string]string // role -> token value
	users    map[string]store.User
	acme     store.Group
	sub      store.Group
	pub      store.Group
	byAuthor map[string][]int64 // role -> ids of acme's events by that user, newest first
	acmeIDs  []int64            // every acme event, newest first
}

const auditRootToken = "rdpat-audit-root-token"

func newAuditEnv(t *testing.T, mutate func(*serverOptions)) *auditEnv {
	t.Helper()
	st, srv, clock := newTestServer(t, auditRootToken, mutate)
	e := &auditEnv{t: t, st: st, srv: srv, tokens: map[string]string{"root": auditRootToken},
		users: map[string]store.User{}, byAuthor: map[string][]int64{}}
	mustDo := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	var err error
	e.acme, err = st.CreateGroup(store.NewGroup{Name: "Acme", Path: "acme", Visibility: store.Private})
	mustDo(err)
	e.sub, err = st.CreateGroup(store.NewGroup{Name: "Sub", Path: "sub", Visibility: store.Private, ParentID: e.acme.ID})
	mustDo(err)
	e.pub, err = st.CreateGroup(store.NewGroup{Name: "Pub", Path: "pub", Visibility: store.Public})
	mustDo(err)
	for role, level := range map[string]int{"reporter": store.Reporter, "developer": store.Developer,
		"maintainer": store.Maintainer, "owner": store.Owner} {
		u, tok := newUserWithToken(t, st, role, strings.ToUpper(role[:1])+role[1:], store.ScopeAPI)
		e.users[role], e.tokens[role] = u, tok
		_, err := st.AddGroupMember(e.acme.ID, u.ID, level, nil)
		mustDo(err)
	}
	e.users["outsider"], e.tokens["outsider"] = newUserWithToken(t, st, "outsider", "Outsider", store.ScopeAPI)

	denial := func(g store.Group, author int64, name, file string) store.AuditEvent {
		return store.AuditEvent{EventName: store.AuditUpstreamArtifactDenied, AuthorID: author, AuthorName: name,
			AuthorClass: store.AuditAuthorClassUser, EntityID: g.ID, EntityType: store.AuditEntityGroup,
			EntityPath: g.FullPath, TargetID: 9, TargetType: store.AuditTargetMavenUpstream,
			TargetDetails: "https://repo.example/maven2/" + file, Message: "Blocked package request - View matching patterns",
			IPAddress: "192.0.2.7"}
	}
	record := func(role string, ev store.AuditEvent) {
		t.Helper()
		got, err := st.RecordAudit(ev)
		mustDo(err)
		if ev.EntityType == store.AuditEntityGroup && ev.EntityID == e.acme.ID {
			e.acmeIDs = append([]int64{got[0].ID}, e.acmeIDs...)
			if role != "" {
				e.byAuthor[role] = append([]int64{got[0].ID}, e.byAuthor[role]...)
			}
		}
		clock.Advance(time.Minute)
	}
	dev, mnt := e.users["developer"], e.users["maintainer"]
	record("developer", denial(e.acme, dev.ID, dev.Name, "org/a/1/a-1.jar"))  // 1 at 10:04:05.123
	record("maintainer", denial(e.acme, mnt.ID, mnt.Name, "org/b/1/b-1.jar")) // 2 at 10:05:05.123
	anon := denial(e.acme, store.AuditAuthorUnauthenticated, "", "org/c/1/c-1.jar")
	anon.AuthorClass = "" // the store's defaults
	record("", anon)      // 3 at 10:06
	dt := denial(e.acme, store.AuditAuthorDeployToken, "ci-token", "org/d/1/d-1.jar")
	dt.AuthorClass = store.AuditAuthorClassDeployToken
	record("", dt)                                                 // 4 at 10:07
	record("", denial(e.pub, dev.ID, dev.Name, "org/e/1/e-1.jar")) // 5 at 10:08
	proj := denial(e.acme, dev.ID, dev.Name, "org/f/1/f-1.jar")
	proj.EntityType = store.AuditEntityProject
	record("", proj)                                                         // 6 at 10:09: same id, type Project
	record("developer", denial(e.acme, dev.ID, dev.Name, "org/g/1/g-1.jar")) // 7 at 10:10
	return e
}

func (e *auditEnv) get(path, role string) testResp {
	e.t.Helper()
	req := httptest.NewRequest(http.MethodGet, path, nil)
	if role != "" {
		req.Header.Set("PRIVATE-TOKEN", e.tokens[role])
	}
	return serve(e.srv, req)
}

func listIDs(t *testing.T, r testResp) []int64 {
	t.Helper()
	var out []int64
	for _, ev := range r.list(t) {
		out = append(out, int64(ev["id"].(float64)))
	}
	return out
}

func TestAuditEventsInstanceAccess(t *testing.T) {
	e := newAuditEnv(t, nil)
	for _, tt := range []struct {
		name, path, role string
		status           int
		body             string
	}{
		{"anonymous", "/api/v4/audit_events", "", 401, `{"message":"401 Unauthorized"}`},
		{"a group owner", "/api/v4/audit_events", "owner", 403, `{"message":"403 Forbidden"}`},
		{"one, anonymous", "/api/v4/audit_events/1", "", 401, `{"message":"401 Unauthorized"}`},
		{"one, not admin", "/api/v4/audit_events/1", "developer", 403, `{"message":"403 Forbidden"}`},
		{"unknown id", "/api/v4/audit_events/999", "root", 404, `{"message":"404 Not found"}`},
		{"bad id", "/api/v4/audit_events/abc", "root", 400, `{"error":"id is invalid"}`},
		{"entity_id without entity_type", "/api/v4/audit_events?entity_id=1", "root", 400, `{"error":"entity_type is missing"}`},
		{"bad entity_type", "/api/v4/audit_events?entity_type=Namespace", "root", 400,
			`{"error":"entity_type does not have a valid value"}`},
		{"bad created_after", "/api/v4/audit_events?created_after=yesterday", "root", 400, `{"error":"created_after is invalid"}`},
		{"bad both", "/api/v4/audit_events?created_after=x&created_before=2026-13-01", "root", 400,
			`{"error":"created_after is invalid, created_before is invalid"}`},
		{"bad per_page", "/api/v4/audit_events?per_page=0", "root", 400, `{"error":"per_page does not have a valid value"}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := e.get(tt.path, tt.role).want(t, tt.status)
			if got := strings.TrimSpace(string(r.body)); got != tt.body {
				t.Fatalf("body %s, want %s", got, tt.body)
			}
		})
	}
}

func TestAuditEventsInstanceList(t *testing.T) {
	e := newAuditEnv(t, nil)
	for _, tt := range []struct {
		name, query string
		want        []int64
	}{
		{"all, newest first", "", []int64{7, 6, 5, 4, 3, 2, 1}},
		{"groups", "entity_type=Group", []int64{7, 5, 4, 3, 2, 1}},
		{"one group", fmt.Sprintf("entity_type=Group&entity_id=%d", e.acme.ID), []int64{7, 4, 3, 2, 1}},
		{"projects", "entity_type=Project", []int64{6}},
		{"instance scope", "entity_type=Gitlab::Audit::InstanceScope", nil},
		{"created_after, inclusive", "created_after=2026-11-21T10:07:05.123Z", []int64{7, 6, 5, 4}},
		{"created_before, inclusive", "created_before=2026-11-21T10:06:05.123Z", []int64{3, 2, 1}},
		{"created_before without milliseconds", "created_before=2026-11-21T10:06:05Z", []int64{2, 1}},
		{"a zone", "created_after=2026-11-21T11:09:06%2B01:00", []int64{7}},
		{"a date is its midnight", "created_before=2026-11-21", nil},
		{"empty values are absent", "created_after=&created_before=", []int64{7, 6, 5, 4, 3, 2, 1}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := e.get("/api/v4/audit_events?"+tt.query, "root").want(t, 200)
			if got := listIDs(t, r); !slices.Equal(got, tt.want) {
				t.Fatalf("ids %v, want %v", got, tt.want)
			}
			if got := r.header.Get("X-Total"); got != fmt.Sprint(len(tt.want)) {
				t.Fatalf("X-Total %s, want %d", got, len(tt.want))
			}
		})
	}
}

func TestAuditEventsPaginationHeaders(t *testing.T) {
	e := newAuditEnv(t, nil)
	r := e.get("/api/v4/audit_events?per_page=2&page=2&entity_type=Group", "root").want(t, 200)
	if got := listIDs(t, r); !slices.Equal(got, []int64{4, 3}) {
		t.Fatalf("page 2: %v", got)
	}
	for h, want := range map[string]string{"X-Page": "2", "X-Per-Page": "2", "X-Total": "6", "X-Total-Pages": "3",
		"X-Next-Page": "3", "X-Prev-Page": "1",
		"Link": `<http://registry.example:8081/api/v4/audit_events?entity_type=Group&page=1&per_page=2>; rel="prev", ` +
			`<http://registry.example:8081/api/v4/audit_events?entity_type=Group&page=3&per_page=2>; rel="next", ` +
			`<http://registry.example:8081/api/v4/audit_events?entity_type=Group&page=1&per_page=2>; rel="first", ` +
			`<http://registry.example:8081/api/v4/audit_events?entity_type=Group&page=3&per_page=2>; rel="last"`} {
		if got := r.header.Get(h); got != want {
			t.Errorf("%s: %q, want %q", h, got, want)
		}
	}
	r = e.get("/api/v4/audit_events?per_page=5&page=9", "root").want(t, 200)
	if got := strings.TrimSpace(string(r.body)); got != "[]" || r.header.Get("X-Total") != "7" {
		t.Fatalf("past the end: %s, X-Total %s", got, r.header.Get("X-Total"))
	}
}

func TestAuditEventResource(t *testing.T) {
	e := newAuditEnv(t, nil)
	dev := e.users["developer"]
	want := fmt.Sprintf(`{"id":1,"author_id":%d,"entity_id":%d,"entity_type":"Group",`+
		`"event_name":"virtual_registries_packages_maven_upstream_artifact_denied","details":{`+
		`"event_name":"virtual_registries_packages_maven_upstream_artifact_denied",`+
		`"custom_message":"Blocked package request - View matching patterns","author_name":"Developer",`+
		`"author_email":"developer@example.com","author_class":"User","target_id":9,`+
		`"target_type":"VirtualRegistries::Packages::Maven::Upstream",`+
		`"target_details":"https://repo.example/maven2/org/a/1/a-1.jar","ip_address":"192.0.2.7","entity_path":"acme"},`+
		`"created_at":"2026-11-21T10:04:05.123Z"}`, dev.ID, e.acme.ID)
	for _, path := range []string{"/api/v4/audit_events/1", fmt.Sprintf("/api/v4/groups/%d/audit_events/1", e.acme.ID)} {
		if got := strings.TrimSpace(string(e.get(path, "root").want(t, 200).body)); got != want {
			t.Fatalf("%s:\n got %s\nwant %s", path, got, want)
		}
	}
	// The author sees their own email; an owner does not see other users'.
	if got := e.eventDetails(fmt.Sprintf("/api/v4/groups/%d/audit_events/1", e.acme.ID), "developer")["author_email"]; got != "developer@example.com" {
		t.Fatalf("author's own email: %v", got)
	}
	if got := e.eventDetails(fmt.Sprintf("/api/v4/groups/%d/audit_events/1", e.acme.ID), "owner")["author_email"]; got != nil {
		t.Fatalf("owner sees another user's email: %v", got)
	}
	anon := e.eventDetails("/api/v4/audit_events/3", "root")
	dt := e.eventDetails("/api/v4/audit_events/4", "root")
	if anon["author_name"] != "An unauthenticated user" || anon["author_class"] != "Gitlab::Audit::UnauthenticatedAuthor" ||
		anon["author_email"] != nil {
		t.Fatalf("anonymous author: %v", anon)
	}
	if dt["author_name"] != "ci-token" || dt["author_class"] != "DeployToken" || dt["author_email"] != nil {
		t.Fatalf("deploy token author: %v", dt)
	}
	var full map[string]any
	if err := json.Unmarshal(e.get("/api/v4/audit_events/4", "root").body, &full); err != nil || full["author_id"] != float64(-2) {
		t.Fatalf("deploy token author_id: %v (%v)", full["author_id"], err)
	}
}

func (e *auditEnv) eventDetails(path, role string) map[string]any {
	e.t.Helper()
	var v struct {
		Details map[string]any `json:"details"`
	}
	if err := json.Unmarshal(e.get(path, role).want(e.t, 200).body, &v); err != nil {
		e.t.Fatal(err)
	}
	return v.Details
}

func TestGroupAuditEvents(t *testing.T) {
	e := newAuditEnv(t, nil)
	acme := fmt.Sprintf("/api/v4/groups/%d/audit_events", e.acme.ID)
	for _, tt := range []struct {
		name, path, role string
		status           int
		want             []int64 // for 200
		body             string  // otherwise
	}{
		{"anonymous", acme, "", 401, nil, `{"message":"401 Unauthorized"}`},
		{"outsider, private group", acme, "outsider", 404, nil, `{"message":"404 Group Not Found"}`},
		{"outsider, public group", fmt.Sprintf("/api/v4/groups/%d/audit_events", e.pub.ID), "outsider", 403, nil,
			`{"message":"403 Forbidden"}`},
		{"unknown group", "/api/v4/groups/999/audit_events", "root", 404, nil, `{"message":"404 Group Not Found"}`},
		{"reporter", acme, "reporter", 403, nil, `{"message":"403 Forbidden"}`},
		{"developer: own events only", acme, "developer", 200, e.byAuthor["developer"], ""},
		{"maintainer: own events only", acme, "maintainer", 200, e.byAuthor["maintainer"], ""},
		{"owner: every event of the group", acme, "owner", 200, e.acmeIDs, ""},
		{"admin", acme, "root", 200, e.acmeIDs, ""},
		{"by full path", "/api/v4/groups/acme/audit_events", "owner", 200, e.acmeIDs, ""},
		{"date filters", acme + "?created_after=2026-11-21T10:05:05.123Z&created_before=2026-11-21T10:07:05.123Z",
			"owner", 200, []int64{4, 3, 2}, ""},
		{"instance filters are ignored", acme + "?entity_type=Project", "owner", 200, e.acmeIDs, ""},
		{"bad created_before", acme + "?created_before=noon", "owner", 400, nil, `{"error":"created_before is invalid"}`},
		{"subgroup: inherited owner, only the subgroup's events", "/api/v4/groups/acme%2Fsub/audit_events", "owner", 200, nil, ""},
		{"one", acme + "/2", "owner", 200, []int64{2}, ""},
		{"one of another group", fmt.Sprintf("/api/v4/groups/%d/audit_events/5", e.pub.ID), "root", 200, []int64{5}, ""},
		{"one, through the wrong group", acme + "/5", "owner", 404, nil, `{"message":"404 Not found"}`},
		{"one, through the wrong entity type", acme + "/6", "owner", 404, nil, `{"message":"404 Not found"}`},
		{"one, developer's own", acme + "/1", "developer", 200, []int64{1}, ""},
		{"one, another's for a developer", acme + "/2", "developer", 404, nil, `{"message":"404 Not found"}`},
		{"one, reporter", acme + "/1", "reporter", 403, nil, `{"message":"403 Forbidden"}`},
		{"one, unknown", acme + "/999", "owner", 404, nil, `{"message":"404 Not found"}`},
		{"one, bad id", acme + "/x", "owner", 400, nil, `{"error":"audit_event_id is invalid"}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := e.get(tt.path, tt.role).want(t, tt.status)
			if tt.status != 200 {
				if got := strings.TrimSpace(string(r.body)); got != tt.body {
					t.Fatalf("body %s, want %s", got, tt.body)
				}
				return
			}
			var got []int64
			if strings.HasPrefix(strings.TrimSpace(string(r.body)), "{") {
				var one struct{ ID int64 }
				if err := json.Unmarshal(r.body, &one); err != nil {
					t.Fatal(err)
				}
				got = []int64{one.ID}
			} else {
				got = listIDs(t, r)
				if x := r.header.Get("X-Total"); x != fmt.Sprint(len(tt.want)) {
					t.Fatalf("X-Total %s, want %d", x, len(tt.want))
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("ids %v, want %v", got, tt.want)
			}
		})
	}
}

func TestAuditEventsNeedPremium(t *testing.T) {
	e := newAuditEnv(t, func(o *serverOptions) { o.auth.Plan = auth.PlanFree })
	for _, path := range []string{"/api/v4/audit_events", "/api/v4/audit_events/1",
		fmt.Sprintf("/api/v4/groups/%d/audit_events", e.acme.ID), fmt.Sprintf("/api/v4/groups/%d/audit_events/1", e.acme.ID)} {
		for _, role := range []string{"", "root"} {
			if r := e.get(path, role); r.status != 404 || strings.TrimSpace(string(r.body)) != `{"message":"404 Not Found"}` {
				t.Errorf("%s as %q: %d %s", path, role, r.status, r.body)
			}
		}
	}
}

func TestAuditEventsScopes(t *testing.T) {
	e := newAuditEnv(t, nil)
	root, err := e.st.UserByUsername("root")
	if err != nil {
		t.Fatal(err)
	}
	for scope, status := range map[string]int{store.ScopeReadAPI: 200, store.ScopeReadUser: 403} {
		plain := "rdpat-root-" + scope
		if _, err := e.st.CreateToken(store.NewToken{UserID: root.ID, Name: scope, Scopes: []string{scope}, Plain: plain}); err != nil {
			t.Fatal(err)
		}
		e.tokens[scope] = plain
		e.get("/api/v4/audit_events", scope).want(t, status)
	}
}

// An aggregate event (many refusals in one) reads as any audit event, with
// its count, times and first and last files as extra details; the developer
// whose refusals it counts finds it among their own events.
func TestAuditAggregateEvent(t *testing.T) {
	e := newAuditEnv(t, nil)
	dev := e.users["developer"]
	last := time.Date(2026, 11, 21, 10, 30, 59, 456_000_000, time.UTC)
	agg := store.AuditEvent{EventName: store.AuditUpstreamArtifactDenied, AuthorID: dev.ID, AuthorName: dev.Name,
		AuthorClass: store.AuditAuthorClassUser, EntityID: e.acme.ID, EntityType: store.AuditEntityGroup,
		EntityPath: e.acme.FullPath, TargetID: 9, TargetType: store.AuditTargetMavenUpstream,
		TargetDetails: "https://repo.example/maven2", Message: "Blocked package requests - 4950 refusals",
		IPAddress: "192.0.2.7", CreatedAt: last, Count: 4950, FirstAt: last.Add(-59 * time.Second),
		FirstDetails: "https://repo.example/maven2/org/a/1/a-1.jar", LastDetails: "https://repo.example/maven2/org/z/1/z-1.jar"}
	got, err := e.st.RecordAudit(agg)
	if err != nil {
		t.Fatal(err)
	}
	id := got[0].ID
	want := fmt.Sprintf(`{"id":%d,"author_id":%d,"entity_id":%d,"entity_type":"Group",`+
		`"event_name":"virtual_registries_packages_maven_upstream_artifact_denied","details":{`+
		`"event_name":"virtual_registries_packages_maven_upstream_artifact_denied",`+
		`"custom_message":"Blocked package requests - 4950 refusals","author_name":"Developer",`+
		`"author_email":"developer@example.com","author_class":"User","target_id":9,`+
		`"target_type":"VirtualRegistries::Packages::Maven::Upstream",`+
		`"target_details":"https://repo.example/maven2","ip_address":"192.0.2.7","entity_path":"acme",`+
		`"count":4950,"first_at":"2026-11-21T10:30:00.456Z","last_at":"2026-11-21T10:30:59.456Z",`+
		`"first_target_details":"https://repo.example/maven2/org/a/1/a-1.jar",`+
		`"last_target_details":"https://repo.example/maven2/org/z/1/z-1.jar"},`+
		`"created_at":"2026-11-21T10:30:59.456Z"}`, id, dev.ID, e.acme.ID)
	if got := strings.TrimSpace(string(e.get(fmt.Sprintf("/api/v4/audit_events/%d", id), "root").want(t, 200).body)); got != want {
		t.Fatalf("aggregate:\n got %s\nwant %s", got, want)
	}
	ids := listIDs(t, e.get(fmt.Sprintf("/api/v4/groups/%d/audit_events", e.acme.ID), "developer").want(t, 200))
	if len(ids) == 0 || ids[0] != id {
		t.Fatalf("the developer's list %v does not lead with their aggregate %d", ids, id)
	}
}
