package admin

import (
	"bytes"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"registryd/store"
)

func TestActionName(t *testing.T) {
	push := func(action string) *store.PushData { return &store.PushData{Action: action} }
	tests := []struct {
		name string
		e    store.Event
		want string
	}{
		{"push to a branch", store.Event{Action: "pushed", PushData: push("pushed")}, "pushed to"},
		{"new branch", store.Event{Action: "pushed", PushData: push("created")}, "pushed new"},
		{"deleted branch", store.Event{Action: "pushed", PushData: push("removed")}, "deleted"},
		{"merged", store.Event{Action: "merged", TargetType: "MergeRequest"}, "accepted"},
		{"commented", store.Event{Action: "commented", TargetType: "Note"}, "commented on"},
		{"expired", store.Event{Action: "expired"}, "removed due to membership expiration from"},
		{"closed", store.Event{Action: "closed", TargetType: "Issue"}, "closed"},
		{"joined", store.Event{Action: "joined"}, "joined"},
		{"left", store.Event{Action: "left"}, "left"},
		{"destroyed", store.Event{Action: "destroyed", TargetType: "Milestone"}, "destroyed"},
		{"approved", store.Event{Action: "approved", TargetType: "MergeRequest"}, "approved"},
		{"issue created", store.Event{Action: "created", TargetType: "Issue"}, "opened"},
		{"issue updated", store.Event{Action: "updated", TargetType: "Issue"}, "opened"},
		{"issue reopened", store.Event{Action: "reopened", TargetType: "Issue"}, "opened"},
		{"project created", store.Event{Action: "created"}, "created"},
		{"project imported", store.Event{Action: "created", Imported: true}, "imported"},
		{"wiki created", store.Event{Action: "created", TargetType: "WikiPage::Meta"}, "created"},
		{"wiki updated", store.Event{Action: "updated", TargetType: "WikiPage::Meta"}, "updated"},
		{"design created", store.Event{Action: "created", TargetType: "DesignManagement::Design"}, "added"},
		{"design updated", store.Event{Action: "updated", TargetType: "DesignManagement::Design"}, "updated"},
		{"design destroyed", store.Event{Action: "destroyed", TargetType: "DesignManagement::Design"}, "removed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := actionName(tt.e); got != tt.want {
				t.Fatalf("actionName = %q, want %q", got, tt.want)
			}
		})
	}
}

func (e *actEnv) importEvents(body string) testResp {
	e.t.Helper()
	return e.do(http.MethodPost, "/api/v4/admin/events", "root", strings.NewReader(body), "Content-Type", "application/json")
}

func TestImportEventsEndpoint(t *testing.T) {
	e := newActEnv(t, nil)
	pub, alice := e.projects["public"].ID, e.users["developer"].ID
	ev := func(extra string) string {
		return fmt.Sprintf(`{"project_id":%d,"author_id":%d%s}`, pub, alice, extra)
	}
	tests := []struct {
		name   string
		role   string
		body   string
		status int
		answer string
	}{
		{"array", "root", "[" + ev(`,"action":"closed","target_type":"Issue","target_id":5,"target_iid":2,"target_title":"Bug"`) + "," +
			ev(`,"action":"pushed","push_data":{"commit_count":1,"action":"created","ref_type":"tag","ref":"v1","commit_to":"abcdef0"}`) + "]",
			201, `{"count":2,"first_id":`},
		{"NDJSON", "root", ev(`,"action":"merged","target_type":"merge_request","target_id":7`) + "\n" +
			ev(`,"action":"commented","target_id":8,"note":{"body":"LGTM","noteable_type":"MergeRequest"}`) + "\n\n",
			201, `{"count":2,"first_id":`},
		{"a GitLab export without action", "root", "[" + ev(`,"id":4242,"title":null,"action_name":"accepted","target_type":"MergeRequest","target_id":9,"author":{"id":1},"author_username":"x","data":null`) + "]",
			201, `{"count":1,"first_id":`},
		{"empty array", "root", " [ ] ", 201, `{"count":0,"first_id":null,"last_id":null}`},
		{"anonymous", "", "[]", 401, `{"message":"401 Unauthorized"}`},
		{"not an admin", "owner", "[]", 403, `{"message":"403 Forbidden"}`},
		{"empty body", "root", "  \n", 400, `{"message":"400 Bad request - the body holds no events"}`},
		{"neither array nor object", "root", `"events"`, 400,
			`{"message":"400 Bad request - the body must be a JSON array of events or NDJSON, one event object a line"}`},
		{"element not an object", "root", "[" + ev(`,"action":"closed"`) + `,42]`, 400, `{"message":{"events[1]":["must be a JSON object"]}}`},
		{"bad JSON in the third line", "root", ev(`,"action":"closed"`) + "\n" + ev(`,"action":"closed"`) + "\n{oops}\n", 400,
			`{"message":"400 Bad request - events[2] is not valid JSON`},
		{"cut short", "root", "[" + ev(`,"action":"closed"`) + `,{"project_id":`, 400, `{"message":"400 Bad request - the body ends inside events[1]"}`},
		{"unknown action", "root", "[" + ev(`,"action":"closed"`) + "," + ev(`,"action":"deployed"`) + "]", 400,
			`{"message":{"events[1].action":["does not have a valid value"]}}`},
		{"unknown field", "root", "[" + ev(`,"action":"closed","project":"x"`) + "]", 400,
			`{"message":{"events[0].project":["is not a known field"]}}`},
		{"wrong types", "root", "[" + ev(`,"action":"closed","target_id":"seven","imported":"yes","created_at":"yesterday"`) + "]", 400,
			`{"message":{"events[0].created_at":["must be an ISO 8601 time such as 2026-11-21T10:04:05.123Z"],"events[0].imported":["must be true or false"],"events[0].target_id":["must be an integer"]}}`},
		{"push without push_data", "root", "[" + ev(`,"action":"pushed"`) + "]", 400, `{"message":{"events[0].push_data":["is missing"]}}`},
		{"comment without note", "root", "[" + ev(`,"action":"commented","target_type":"Note"`) + "]", 400, `{"message":{"events[0].note":["is missing"]}}`},
		{"unknown project", "root", `[{"project_id":999,"author_id":1,"action":"closed"}]`, 400, `{"message":{"events[0].project_id":["does not exist"]}}`},
		{"unknown author", "root", fmt.Sprintf(`[{"project_id":%d,"author_id":999,"action":"closed"}]`, pub), 400,
			`{"message":{"events[0].author_id":["does not exist"]}}`},
		{"unknown action_name", "root", "[" + ev(`,"action_name":"deployed to"`) + "]", 400,
			`{"message":{"events[0].action":["is missing"],"events[0].action_name":["does not have a valid value"]}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before, _, _ := e.st.EventsPage(store.EventQuery{All: true, Limit: 1000})
			r := e.do(http.MethodPost, "/api/v4/admin/events", tt.role, strings.NewReader(tt.body))
			r.want(t, tt.status)
			if !strings.HasPrefix(string(r.body), tt.answer) {
				t.Fatalf("body %s, want %s", r.body, tt.answer)
			}
			after, _, _ := e.st.EventsPage(store.EventQuery{All: true, Limit: 1000})
			if tt.status != 201 && len(after) != len(before) {
				t.Fatalf("a refused import stored %d events", len(after)-len(before))
			}
		})
	}
	got, _, _ := e.st.EventsPage(store.EventQuery{ProjectID: pub, Action: "merged", Limit: 10})
	if len(got) != 2 || got[1].TargetType != "MergeRequest" || got[0].TargetType != "MergeRequest" {
		t.Fatalf("merged events: %+v", got)
	}
}

// One large NDJSON import is streamed into one transaction.
func TestImportEventsLarge(t *testing.T) {
	e := newActEnv(t, nil)
	var b bytes.Buffer
	const n = 20000
	for i := range n {
		fmt.Fprintf(&b, `{"project_id":%d,"author_id":%d,"action":"pushed","push_data":{"commit_count":%d,"action":"pushed","ref_type":"branch","ref":"main"},"created_at":"2026-01-01T00:00:%02d.000Z"}`+"\n",
			e.projects["internal"].ID, e.users["developer"].ID, i, i%60)
	}
	r := e.do(http.MethodPost, "/api/v4/admin/events", "root", &b, "Content-Type", "application/x-ndjson").want(t, 201)
	if !strings.HasPrefix(string(r.body), fmt.Sprintf(`{"count":%d,`, n)) {
		t.Fatalf("body %s", r.body)
	}
	r = e.do(http.MethodGet, fmt.Sprintf("/api/v4/projects/%d/events?action=pushed&per_page=1", e.projects["internal"].ID), "root", nil).want(t, 200)
	if r.header.Get("X-Total") != fmt.Sprint(n) {
		t.Fatalf("X-Total = %s", r.header.Get("X-Total"))
	}
	// Over the import limit: 413 and nothing stored.
	small := newActEnv(t, func(o *serverOptions) { o.admin.MaxSBOMBytes = 8 << 10 })
	var big bytes.Buffer
	for range 200 {
		fmt.Fprintf(&big, `{"project_id":%d,"author_id":1,"action":"closed"}`+"\n", small.projects["public"].ID)
	}
	small.do(http.MethodPost, "/api/v4/admin/events", "root", &big).want(t, http.StatusRequestEntityTooLarge)
	if _, total, _ := small.st.EventsPage(store.EventQuery{All: true, Action: "closed", Limit: 1}); total != 0 {
		t.Fatalf("%d events stored from a refused import", total)
	}
}

func TestEventJSON(t *testing.T) {
	e := newActEnv(t, nil)
	pr := e.projects["private"]
	dev := e.users["developer"]
	e.importEvents(fmt.Sprintf(`[
		{"project_id":%[1]d,"author_id":%[2]d,"action":"pushed","created_at":"2026-11-20T08:00:00.5Z",
		 "push_data":{"commit_count":3,"action":"pushed","ref_type":"branch","commit_from":"1111111","commit_to":"2222222","ref":"main","commit_title":"Fix it"}},
		{"project_id":%[1]d,"author_id":%[2]d,"action":"commented","target_id":91,"target_title":"Add cache","created_at":"2026-11-20T09:00:00Z",
		 "note":{"body":"Looks good","noteable_id":12,"noteable_type":"MergeRequest","noteable_iid":3}},
		{"project_id":%[1]d,"author_id":%[2]d,"action":"created","target_type":"Issue","target_id":55,"target_iid":4,"target_title":"Crash","imported":true,"imported_from":"github","created_at":"2026-11-20T10:00:00Z"}
	]`, pr.ID, dev.ID)).want(t, 201)

	author := fmt.Sprintf(`{"id":%d,"username":"developer","name":"Developer","state":"active","avatar_url":null,"web_url":"http://registry.example:8081/developer"}`, dev.ID)
	r := e.do(http.MethodGet, "/api/v4/users/developer/events?target_type=issue", "root", nil).want(t, 200)
	want := fmt.Sprintf(`[{"id":%d,"title":null,"project_id":%d,"action_name":"opened","target_id":55,"target_iid":4,"target_type":"Issue",`+
		`"author_id":%d,"target_title":"Crash","created_at":"2026-11-20T10:00:00.000Z","author":%s,"imported":true,"imported_from":"github",`+
		`"author_username":"developer"}]`+"\n", lastEventID(t, e), pr.ID, dev.ID, author)
	if string(r.body) != want {
		t.Fatalf("issue event\n got %s\nwant %s", r.body, want)
	}

	r = e.do(http.MethodGet, fmt.Sprintf("/api/v4/projects/%d/events?action=pushed", pr.ID), "developer", nil).want(t, 200)
	want = fmt.Sprintf(`[{"id":%d,"title":null,"project_id":%d,"action_name":"pushed to","target_id":null,"target_iid":null,"target_type":null,`+
		`"author_id":%d,"target_title":null,"created_at":"2026-11-20T08:00:00.500Z","author":%s,"imported":false,"imported_from":"none",`+
		`"push_data":{"commit_count":3,"action":"pushed","ref_type":"branch","commit_from":"1111111","commit_to":"2222222","ref":"main","commit_title":"Fix it","ref_count":null},`+
		`"author_username":"developer","data":null}]`+"\n", lastEventID(t, e)-2, pr.ID, dev.ID, author)
	if string(r.body) != want {
		t.Fatalf("push event\n got %s\nwant %s", r.body, want)
	}

	r = e.do(http.MethodGet, "/api/v4/events?action=commented", "developer", nil).want(t, 200)
	want = fmt.Sprintf(`[{"id":%d,"title":null,"project_id":%d,"action_name":"commented on","target_id":91,"target_iid":91,"target_type":"Note",`+
		`"author_id":%d,"target_title":"Add cache","created_at":"2026-11-20T09:00:00.000Z",`+
		`"note":{"id":91,"body":"Looks good","attachment":null,"author":%s,"created_at":"2026-11-20T09:00:00.000Z","system":false,"noteable_id":12,"noteable_type":"MergeRequest","noteable_iid":3},`+
		`"author":%s,"imported":false,"imported_from":"none","author_username":"developer"}]`+"\n", lastEventID(t, e)-1, pr.ID, dev.ID, author, author)
	if string(r.body) != want {
		t.Fatalf("note event\n got %s\nwant %s", r.body, want)
	}

	// The events registryd recorded itself: root created the project, the
	// developer joined it.
	r = e.do(http.MethodGet, fmt.Sprintf("/api/v4/projects/%d/events?sort=asc&per_page=2", pr.ID), "root", nil).want(t, 200)
	list := r.list(t)
	if list[0]["action_name"] != "created" || list[0]["author_username"] != "root" || list[0]["target_type"] != nil ||
		list[0]["created_at"] != "2026-11-21T10:04:05.123Z" || list[1]["action_name"] != "joined" {
		t.Fatalf("recorded events: %v", list)
	}
}

func lastEventID(t *testing.T, e *actEnv) int64 {
	t.Helper()
	evs, _, err := e.st.EventsPage(store.EventQuery{All: true, Limit: 1})
	if err != nil || len(evs) != 1 {
		t.Fatalf("last event: %v %v", evs, err)
	}
	return evs[0].ID
}

func eventList(t *testing.T, r testResp) []string {
	t.Helper()
	var out []string
	for _, ev := range r.list(t) {
		out = append(out, fmt.Sprintf("%v %v %v", ev["author_username"], ev["action_name"], ev["project_id"]))
	}
	return out
}

func TestEventsVisibility(t *testing.T) {
	e := newActEnv(t, nil)
	dev := e.users["developer"]
	for _, vis := range []string{"private", "internal", "public"} {
		e.importEvents(fmt.Sprintf(`[{"project_id":%d,"author_id":%d,"action":"closed","target_type":"Issue","target_id":1,"target_title":"%s"}]`,
			e.projects[vis].ID, dev.ID, vis)).want(t, 201)
	}
	titles := func(r testResp) []string {
		var out []string
		for _, ev := range r.list(t) {
			if s, ok := ev["target_title"].(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	userTests := []struct {
		role string
		want []string
	}{
		{"", []string{"public"}},
		{"outsider", []string{"internal", "public"}},
		{"reader", []string{"internal", "public"}},
		{"guest", []string{"private", "internal", "public"}},
		{"root", []string{"private", "internal", "public"}},
	}
	for _, tt := range userTests {
		t.Run("user events as "+tt.role, func(t *testing.T) {
			for _, ref := range []string{fmt.Sprint(dev.ID), "developer", "DEVELOPER"} {
				r := e.do(http.MethodGet, "/api/v4/users/"+ref+"/events?action=closed&sort=asc", tt.role, nil).want(t, 200)
				if got := titles(r); !slices.Equal(got, tt.want) {
					t.Fatalf("%s: %v, want %v", ref, got, tt.want)
				}
				if r.header.Get("X-Total") != fmt.Sprint(len(tt.want)) {
					t.Fatalf("X-Total %s, want %d", r.header.Get("X-Total"), len(tt.want))
				}
			}
		})
	}
	projectTests := []struct {
		role   string
		vis    string
		status int
	}{
		{"", "public", 200}, {"", "internal", 404}, {"", "private", 404},
		{"outsider", "internal", 200}, {"outsider", "private", 404},
		{"guest", "private", 200}, {"root", "private", 200}, {"reader", "internal", 200},
		{"vr_only", "public", 403},
	}
	for _, tt := range projectTests {
		t.Run(fmt.Sprintf("project events of %s as %q", tt.vis, tt.role), func(t *testing.T) {
			r := e.do(http.MethodGet, fmt.Sprintf("/api/v4/projects/%d/events", e.projects[tt.vis].ID), tt.role, nil).want(t, tt.status)
			if tt.status == 404 && strings.TrimSpace(string(r.body)) != `{"message":"404 Project Not Found"}` {
				t.Fatalf("body %s", r.body)
			}
		})
	}
	// The project can also be named by its path.
	e.do(http.MethodGet, "/api/v4/projects/acme%2Fpublic/events", "", nil).want(t, 200)

	// GET /events: the caller's own, or with scope=all those of the projects they are a member of.
	e.do(http.MethodGet, "/api/v4/events", "", nil).want(t, 401)
	e.do(http.MethodGet, "/api/v4/events", "vr_only", nil).want(t, 403)
	r := e.do(http.MethodGet, "/api/v4/events?action=closed", "developer", nil).want(t, 200)
	if got := titles(r); !slices.Equal(got, []string{"public", "internal", "private"}) {
		t.Fatalf("developer's own events: %v", got)
	}
	r = e.do(http.MethodGet, "/api/v4/events?action=closed", "outsider", nil).want(t, 200)
	if len(r.list(t)) != 0 {
		t.Fatalf("outsider's own events: %s", r.body)
	}
	// scope=all: the events of the projects the caller is a member of
	// (GitLab's authorized_projects). Reading a project is not enough, and
	// admins get no more than their memberships give them.
	for role, want := range map[string][]string{
		"outsider": nil, "root": nil, "reader": nil,
		"guest": {"public", "internal", "private"},
	} {
		r = e.do(http.MethodGet, "/api/v4/events?action=closed&scope=all", role, nil).want(t, 200)
		if got := titles(r); !slices.Equal(got, want) || r.header.Get("X-Total") != fmt.Sprint(len(want)) {
			t.Fatalf("%s, scope=all: %v (X-Total %s), want %v", role, got, r.header.Get("X-Total"), want)
		}
	}
	// Membership events: each member joined each project once.
	r = e.do(http.MethodGet, "/api/v4/events?action=joined&scope=all&per_page=100", "guest", nil).want(t, 200)
	if n := len(r.list(t)); n != 3*len(actRoles) {
		t.Fatalf("guest sees %d joined events, want %d", n, 3*len(actRoles))
	}
	e.do(http.MethodGet, "/api/v4/users/nobody/events", "root", nil).want(t, 404)
	if r := e.do(http.MethodGet, "/api/v4/users/999/events", "root", nil).want(t, 404); strings.TrimSpace(string(r.body)) != `{"message":"404 User Not Found"}` {
		t.Fatalf("body %s", r.body)
	}
}

func TestEventFilters(t *testing.T) {
	e := newActEnv(t, nil)
	pr := e.projects["public"]
	dev := e.users["developer"]
	var lines []string
	for i, at := range []string{"2026-03-01T23:59:59.999Z", "2026-03-02T00:00:00Z", "2026-03-02T12:00:00Z", "2026-03-02T23:59:59.999Z",
		"2026-03-03T00:00:00Z", "2026-03-04T08:00:00Z"} {
		lines = append(lines, fmt.Sprintf(`{"project_id":%d,"author_id":%d,"action":"updated","target_type":"MergeRequest","target_id":%d,"target_title":"%s","created_at":"%s"}`,
			pr.ID, dev.ID, i+1, at, at))
	}
	e.importEvents(strings.Join(lines, "\n")).want(t, 201)
	titles := func(r testResp) []string {
		var out []string
		for _, ev := range r.list(t) {
			out = append(out, ev["target_title"].(string))
		}
		return out
	}
	tests := []struct {
		query string
		want  []string
	}{
		{"before=2026-03-02", []string{"2026-03-01T23:59:59.999Z"}},
		{"after=2026-03-02", []string{"2026-03-04T08:00:00Z", "2026-03-03T00:00:00Z"}},
		{"after=2026-03-01&before=2026-03-03", []string{"2026-03-02T23:59:59.999Z", "2026-03-02T12:00:00Z", "2026-03-02T00:00:00Z"}},
		{"after=2026-03-02&before=2026-03-03", nil},
		{"after=2026-03-01&before=2026-03-03&sort=asc&per_page=2&page=2", []string{"2026-03-02T23:59:59.999Z"}},
		{"before=2026-03-02T15:00:00Z", []string{"2026-03-01T23:59:59.999Z"}},
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			r := e.do(http.MethodGet, fmt.Sprintf("/api/v4/projects/%d/events?target_type=merge_request&%s", pr.ID, tt.query), "", nil).want(t, 200)
			if got := titles(r); !slices.Equal(got, tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
		})
	}
	bad := []struct{ query, answer string }{
		{"action=deployed", `{"error":"action does not have a valid value"}`},
		{"target_type=pipeline", `{"error":"target_type does not have a valid value"}`},
		{"target_type=Issue", `{"error":"target_type does not have a valid value"}`},
		{"before=yesterday", `{"error":"before is invalid"}`},
		{"after=2026-13-01", `{"error":"after is invalid"}`},
		{"sort=newest", `{"error":"sort does not have a valid value"}`},
		{"per_page=0", `{"error":"per_page does not have a valid value"}`},
	}
	for _, tt := range bad {
		for _, path := range []string{"/api/v4/events", fmt.Sprintf("/api/v4/users/%d/events", dev.ID), fmt.Sprintf("/api/v4/projects/%d/events", pr.ID)} {
			t.Run(path+"?"+tt.query, func(t *testing.T) {
				r := e.do(http.MethodGet, path+"?"+tt.query, "developer", nil).want(t, 400)
				if strings.TrimSpace(string(r.body)) != tt.answer {
					t.Fatalf("body %s, want %s", r.body, tt.answer)
				}
			})
		}
	}
	// Every target_type value of the spec, and GitLab's wiki and design, is accepted.
	for f := range store.EventTargetFilters {
		e.do(http.MethodGet, "/api/v4/events?target_type="+f, "developer", nil).want(t, 200)
	}
	for _, a := range store.EventActions {
		e.do(http.MethodGet, "/api/v4/events?action="+a, "developer", nil).want(t, 200)
	}
}

func TestEventPages(t *testing.T) {
	e := newActEnv(t, nil)
	pr := e.projects["internal"]
	var lines []string
	for i := range 45 {
		lines = append(lines, fmt.Sprintf(`{"project_id":%d,"author_id":%d,"action":"closed","target_type":"Issue","target_id":%d}`,
			pr.ID, e.users["reporter"].ID, i+1))
	}
	e.importEvents(strings.Join(lines, "\n")).want(t, 201)
	r := e.do(http.MethodGet, fmt.Sprintf("/api/v4/projects/%d/events?action=closed&page=3", pr.ID), "outsider", nil).want(t, 200)
	list := r.list(t)
	if len(list) != 5 || list[0]["target_id"].(float64) != 5 || list[4]["target_id"].(float64) != 1 {
		t.Fatalf("page 3: %v", list)
	}
	for k, v := range map[string]string{"X-Total": "45", "X-Total-Pages": "3", "X-Page": "3", "X-Per-Page": "20", "X-Next-Page": "", "X-Prev-Page": "2"} {
		if got := r.header.Get(k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	if !strings.Contains(r.header.Get("Link"), `<http://registry.example:8081/api/v4/projects/2/events?action=closed&page=2&per_page=20>; rel="prev"`) {
		t.Errorf("Link %s", r.header.Get("Link"))
	}
	got := eventList(t, e.do(http.MethodGet, "/api/v4/users/reporter/events?sort=asc&per_page=3", "reporter", nil).want(t, 200))
	want := []string{
		fmt.Sprintf("reporter joined %d", e.projects["private"].ID),
		fmt.Sprintf("reporter joined %d", e.projects["internal"].ID),
		fmt.Sprintf("reporter joined %d", e.projects["public"].ID),
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("reporter's first events: %v, want %v", got, want)
	}
}
