package itest

import (
	"bytes"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	gitlab "gitlab.com/gitlab-org/api/client-go"
)

// TestEventsGitLabClient records and imports events on the real daemon and
// reads them with the official GitLab Go client: the current user's, a
// user's (by id and by username) and a project's, with filters and pages.
func TestEventsGitLabClient(t *testing.T) {
	d := Start(t, nil)
	f := d.Fix(t)
	g := f.Group("acme", 0, "private")
	aliceID, _ := f.User("alice", false)
	bobID, bobTok := f.User("bob", false, "read_user")
	_, outsiderTok := f.User("outsider", false, "read_api")
	f.Member(g, aliceID, 30)
	aliceTok := d.Do("POST", fmt.Sprintf("/users/%d/personal_access_tokens", aliceID), rootToken,
		map[string]any{"name": "read", "scopes": []string{"read_user"}}).Expect(t, 201).Map(t)["token"].(string)

	// Recorded: alice creates the project; root adds bob, removes him, adds him again.
	aliceAPI := d.Do("POST", fmt.Sprintf("/users/%d/personal_access_tokens", aliceID), rootToken,
		map[string]any{"name": "api", "scopes": []string{"api"}}).Expect(t, 201).Map(t)["token"].(string)
	app := createProject(t, d, aliceAPI, g, "app", "private")
	addProjectMember(t, d, app, bobID, 20)
	d.Do("DELETE", fmt.Sprintf("/projects/%d/members/%d", app, bobID), rootToken, nil).Expect(t, 204)
	addProjectMember(t, d, app, bobID, 20)

	// Imported: a week of alice's work, as NDJSON, in time order.
	var b bytes.Buffer
	day := func(n int, hour int) string {
		return time.Date(2026, 5, n, hour, 0, 0, 0, time.UTC).Format("2006-01-02T15:04:05.000Z")
	}
	for n := 1; n <= 7; n++ {
		fmt.Fprintf(&b, `{"project_id":%d,"author_id":%d,"action":"pushed","created_at":%q,"push_data":{"commit_count":%d,"action":"pushed","ref_type":"branch","commit_from":"%07d","commit_to":"%07d","ref":"main","commit_title":"Day %d"}}`+"\n",
			app, aliceID, day(n, 9), n, n, n+1, n)
		fmt.Fprintf(&b, `{"project_id":%d,"author_id":%d,"action":"commented","target_id":%d,"target_title":"Issue %d","created_at":%q,"note":{"body":"Note on day %d","noteable_id":%d,"noteable_type":"Issue","noteable_iid":%d}}`+"\n",
			app, aliceID, 100+n, n, day(n, 10), n, 500+n, n)
	}
	fmt.Fprintf(&b, `{"project_id":%d,"author_id":%d,"action":"merged","target_type":"MergeRequest","target_id":900,"target_iid":12,"target_title":"Add cache","created_at":%q,"imported":true,"imported_from":"gitlab_migration"}`+"\n",
		app, aliceID, day(7, 18))
	r := d.Do("POST", "/admin/events", rootToken, b.Bytes(), "Content-Type", "application/x-ndjson").Expect(t, 201)
	if !strings.HasPrefix(string(r.Body), `{"count":15,`) {
		t.Fatalf("import: %s", r.Body)
	}
	d.Do("POST", "/admin/events", aliceAPI, "[]").Expect(t, 403)

	alice := gitlabClient(t, d, aliceTok)

	// The current user's pushes after May 2 and before May 6: May 3, 4, 5, two a page.
	pushed, asc := gitlab.PushedEventType, "asc"
	after, before := gitlab.ISOTime(time.Date(2026, 5, 2, 0, 0, 0, 0, time.UTC)), gitlab.ISOTime(time.Date(2026, 5, 6, 0, 0, 0, 0, time.UTC))
	opt := &gitlab.ListContributionEventsOptions{ListOptions: gitlab.ListOptions{PerPage: 2},
		Action: &pushed, After: &after, Before: &before, Sort: &asc}
	var titles []string
	for {
		evs, resp, err := alice.Events.ListCurrentUserContributionEvents(opt)
		if err != nil {
			t.Fatal(err)
		}
		if resp.TotalItems != 3 || resp.TotalPages != 2 {
			t.Fatalf("total %d, pages %d", resp.TotalItems, resp.TotalPages)
		}
		for _, e := range evs {
			if e.ActionName != "pushed to" || e.PushData.Ref != "main" || e.PushData.RefType != "branch" ||
				e.Author.Username != "alice" || e.AuthorUsername != "alice" || e.ProjectID != app || e.TargetType != "" ||
				e.CreatedAt == nil || e.CreatedAt.Hour() != 9 {
				t.Fatalf("push event %+v", e)
			}
			titles = append(titles, e.PushData.CommitTitle)
		}
		if resp.NextPage == 0 {
			break
		}
		opt.Page = resp.NextPage
	}
	if !slices.Equal(titles, []string{"Day 3", "Day 4", "Day 5"}) {
		t.Fatalf("pushes %v", titles)
	}

	// A user's events by username and by id: bob joined, left, joined.
	for _, uid := range []any{"bob", bobID} {
		evs, resp, err := alice.Users.ListUserContributionEvents(uid, nil)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range evs {
			names = append(names, e.ActionName)
			if e.AuthorID != bobID || e.TargetID != 0 || e.Author.Username != "bob" {
				t.Fatalf("bob's event %+v", e)
			}
		}
		if !slices.Equal(names, []string{"joined", "left", "joined"}) || resp.TotalItems != 3 {
			t.Fatalf("bob's events %v (total %d)", names, resp.TotalItems)
		}
	}
	// Alice's merge, filtered by target type, with its imported flag.
	mr := gitlab.MergeRequestEventTargetType
	evs, _, err := alice.Users.ListUserContributionEvents(aliceID, &gitlab.ListContributionEventsOptions{TargetType: &mr})
	if err != nil || len(evs) != 1 || evs[0].ActionName != "accepted" || evs[0].TargetIID != 12 || evs[0].TargetTitle != "Add cache" {
		t.Fatalf("merge events %+v, %v", evs, err)
	}

	// The project's note events, newest first, three a page, on page 2.
	note := gitlab.NoteEventTargetType
	pevs, resp, err := gitlabClient(t, d, bobTok).Events.ListProjectVisibleEvents("acme/app", &gitlab.ListProjectVisibleEventsOptions{
		ListOptions: gitlab.ListOptions{Page: 2, PerPage: 3}, TargetType: &note})
	if err != nil {
		t.Fatal(err)
	}
	var bodies []string
	for _, e := range pevs {
		bodies = append(bodies, e.Note.Body)
		if e.ActionName != "commented on" || e.TargetType != "Note" || e.Note.NoteableType != "Issue" || e.Note.Author.Username != "alice" ||
			e.Note.CreatedAt == nil || !strings.HasSuffix(e.CreatedAt, ".000Z") {
			t.Fatalf("note event %+v", e)
		}
	}
	if !slices.Equal(bodies, []string{"Note on day 4", "Note on day 3", "Note on day 2"}) || resp.TotalItems != 7 || resp.CurrentPage != 2 || resp.NextPage != 3 || resp.PreviousPage != 1 {
		t.Fatalf("notes page 2: %v (total %d, page %d, next %d, prev %d)", bodies, resp.TotalItems, resp.CurrentPage, resp.NextPage, resp.PreviousPage)
	}
	// Every event of the project decodes, recorded and imported alike.
	all, resp, err := alice.Events.ListProjectVisibleEvents(app, &gitlab.ListProjectVisibleEventsOptions{ListOptions: gitlab.ListOptions{PerPage: 100}})
	if err != nil || resp.TotalItems != 19 || len(all) != 19 || all[18].ActionName != "created" || all[18].AuthorUsername != "alice" {
		t.Fatalf("all project events: %d of %d, %v", len(all), resp.TotalItems, err)
	}

	// A private project is not there for an outsider.
	if _, _, err := gitlabClient(t, d, outsiderTok).Events.ListProjectVisibleEvents(app, nil); statusOf(err) != http.StatusNotFound {
		t.Fatalf("outsider: %v", err)
	}
	if evs, _, err := gitlabClient(t, d, outsiderTok).Users.ListUserContributionEvents("alice", nil); err != nil || len(evs) != 0 {
		t.Fatalf("outsider reads alice's private events: %v, %v", evs, err)
	}
	if _, _, err := gitlabClient(t, d, "").Events.ListCurrentUserContributionEvents(nil); statusOf(err) != http.StatusUnauthorized {
		t.Fatalf("anonymous /events: %v", err)
	}

	// Events survive a restart.
	d.Restart()
	if _, resp, err := gitlabClient(t, d, aliceTok).Events.ListProjectVisibleEvents(app, nil); err != nil || resp.TotalItems != 19 {
		t.Fatalf("after restart: %v", err)
	}
}

// TestEventsImportLarge streams 100,000 events in one NDJSON body into one
// transaction and pages through them.
func TestEventsImportLarge(t *testing.T) {
	if testing.Short() {
		t.Skip("imports 100,000 events")
	}
	d := Start(t, nil)
	f := d.Fix(t)
	g := f.Group("acme", 0, "internal")
	uid, tok := f.User("dev", false, "read_api")
	p := createProject(t, d, rootToken, g, "app", "internal")
	const n = 100_000
	var b bytes.Buffer
	for i := range n {
		fmt.Fprintf(&b, `{"project_id":%d,"author_id":%d,"action":"closed","target_type":"Issue","target_id":%d,"target_title":"Issue %d"}`+"\n",
			p, uid, i+1, i+1)
	}
	r := d.Do("POST", "/admin/events", rootToken, b.Bytes(), "Content-Type", "application/x-ndjson").Expect(t, 201)
	if !strings.HasPrefix(string(r.Body), fmt.Sprintf(`{"count":%d,`, n)) {
		t.Fatalf("import: %s", r.Body)
	}
	closed := gitlab.ClosedEventType
	evs, resp, err := gitlabClient(t, d, tok).Events.ListProjectVisibleEvents(p, &gitlab.ListProjectVisibleEventsOptions{
		ListOptions: gitlab.ListOptions{Page: 4000, PerPage: 25}, Action: &closed})
	if err != nil || resp.TotalItems != n || resp.TotalPages != n/25 || len(evs) != 25 {
		t.Fatalf("last page: %d events, total %d, %v", len(evs), resp.TotalItems, err)
	}
	if evs[0].TargetID != 25 || evs[24].TargetID != 1 {
		t.Fatalf("last page holds %d..%d", evs[0].TargetID, evs[24].TargetID)
	}
	// One bad event among 100,000 stores none of them.
	b.Reset()
	for i := range n {
		action := "closed"
		if i == n-1 {
			action = "shipped"
		}
		fmt.Fprintf(&b, `{"project_id":%d,"author_id":%d,"action":%q}`+"\n", p, uid, action)
	}
	r = d.Do("POST", "/admin/events", rootToken, b.Bytes()).Expect(t, 400)
	if want := fmt.Sprintf(`{"message":{"events[%d].action":["does not have a valid value"]}}`, n-1); strings.TrimSpace(string(r.Body)) != want {
		t.Fatalf("answer %s, want %s", r.Body, want)
	}
	if _, resp, _ := gitlabClient(t, d, tok).Events.ListProjectVisibleEvents(p, nil); resp.TotalItems != n+1 {
		t.Fatalf("after a refused import the project has %d events, want %d", resp.TotalItems, n+1)
	}
}
