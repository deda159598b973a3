package store

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func ptr[T any](v T) *T { return &v }

func eventIDs(evs []Event) []int64 {
	out := make([]int64, 0, len(evs))
	for _, e := range evs {
		out = append(out, e.ID)
	}
	return out
}

func TestRecordedEvents(t *testing.T) {
	s, c := openTest(t)
	alice, bob := user(t, s, "alice"), user(t, s, "bob")
	g := topGroup(t, s, "acme")
	created := c.Now().UTC().Truncate(time.Millisecond)
	pr := ok(s.CreateProject(NewProject{Name: "app", NamespaceID: g.ID, CreatorID: alice.ID}))(t)
	c.Advance(time.Minute)
	joined := c.Now().UTC().Truncate(time.Millisecond)
	ok(s.AddProjectMember(pr.ID, bob.ID, Developer, nil, alice.ID))(t)
	c.Advance(time.Minute)
	left := c.Now().UTC().Truncate(time.Millisecond)
	noErr(t, s.RemoveProjectMember(pr.ID, bob.ID, alice.ID))

	got, total, err := s.EventsPage(EventQuery{ProjectID: pr.ID, Asc: true, Limit: 10})
	noErr(t, err)
	want := []string{
		fmt.Sprintf("%d created %d %s", alice.ID, pr.ID, created.Format(time.RFC3339Nano)),
		fmt.Sprintf("%d joined %d %s", bob.ID, pr.ID, joined.Format(time.RFC3339Nano)),
		fmt.Sprintf("%d left %d %s", bob.ID, pr.ID, left.Format(time.RFC3339Nano)),
	}
	var lines []string
	for _, e := range got {
		lines = append(lines, fmt.Sprintf("%d %s %d %s", e.AuthorID, e.Action, e.ProjectID, e.CreatedAt.Format(time.RFC3339Nano)))
		if e.TargetType != "" || e.TargetID != nil || e.PushData != nil || e.Note != nil {
			t.Errorf("recorded event has a target: %+v", e)
		}
	}
	if total != 3 || !slices.Equal(lines, want) {
		t.Fatalf("events (total %d):\n got %q\nwant %q", total, lines, want)
	}
	if _, total, _ := s.EventsPage(EventQuery{AuthorID: bob.ID, Limit: 10}); total != 2 {
		t.Fatalf("bob has %d events, want 2", total)
	}

	// Refused changes record nothing.
	before := snapshot(t, s)
	if _, err := s.AddProjectMember(pr.ID, 999, Guest, nil, alice.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("adding an unknown user: %v", err)
	}
	if err := s.RemoveProjectMember(pr.ID, bob.ID, alice.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("removing a non-member: %v", err)
	}
	if snapshot(t, s) != before {
		t.Fatal("a refused membership change wrote something")
	}
	ok(s.AddProjectMember(pr.ID, alice.ID, Maintainer, nil, alice.ID))(t)
	before = snapshot(t, s)
	if _, err := s.AddProjectMember(pr.ID, alice.ID, Maintainer, nil, alice.ID); !errors.Is(err, ErrConflict) {
		t.Fatalf("adding a member twice: %v", err)
	}
	if snapshot(t, s) != before {
		t.Fatal("a refused membership wrote an event")
	}
	if _, total, _ := s.EventsPage(EventQuery{ProjectID: pr.ID, Limit: 10}); total != 4 {
		t.Fatalf("after one more join the project has %d events, want 4", total)
	}
	// A project made by no user has no creation event.
	orphan := ok(s.CreateProject(NewProject{Name: "orphan", NamespaceID: g.ID}))(t)
	if _, total, _ := s.EventsPage(EventQuery{ProjectID: orphan.ID, Limit: 10}); total != 0 {
		t.Fatalf("orphan project has %d events", total)
	}
}

// The store's own defaults: the clock for events without created_at, UTC
// milliseconds, the note's created_at. The others are eventimport.CheckEvent's.
func TestImportEventsDefaults(t *testing.T) {
	s, c := openTest(t)
	alice := user(t, s, "alice")
	g := topGroup(t, s, "acme")
	pr := ok(s.CreateProject(NewProject{Name: "app", NamespaceID: g.ID}))(t)
	at := time.Date(2025, 6, 1, 12, 30, 45, 123456789, time.FixedZone("CEST", 2*3600))
	res := ok(s.ImportEvents([]Event{
		{ProjectID: pr.ID, AuthorID: alice.ID, Action: ActionCommented, TargetType: TargetNote, TargetID: ptr(int64(77)), CreatedAt: at,
			Note: &EventNote{Body: "LGTM", NoteableType: "MergeRequest", NoteableID: ptr(int64(5)), NoteableIID: ptr(int64(2))}},
		{ProjectID: pr.ID, AuthorID: alice.ID, Action: ActionClosed, TargetType: TargetIssue, TargetID: ptr(int64(9)), TargetTitle: ptr("Bug")},
		{ProjectID: pr.ID, AuthorID: alice.ID, Action: ActionPushed, Imported: true, ImportedFrom: "github",
			PushData: &PushData{CommitCount: 2, Action: "pushed", RefType: "branch", Ref: "main", CommitTo: ptr("0123abc")}},
	}))(t)
	if res.Count != 3 || res.LastID-res.FirstID != 2 {
		t.Fatalf("result = %+v", res)
	}
	note := ok(s.Event(res.FirstID))(t)
	if note.TargetType != TargetNote || !note.CreatedAt.Equal(at.Truncate(time.Millisecond)) || note.CreatedAt.Location() != time.UTC ||
		!note.Note.CreatedAt.Equal(note.CreatedAt) {
		t.Fatalf("note event = %+v, note %+v", note, note.Note)
	}
	closed := ok(s.Event(res.FirstID + 1))(t)
	if closed.TargetType != TargetIssue || *closed.TargetTitle != "Bug" || !closed.CreatedAt.Equal(c.Now().Truncate(time.Millisecond)) {
		t.Fatalf("closed event = %+v", closed)
	}
	push := ok(s.Event(res.LastID))(t)
	if push.TargetIID != nil || push.PushData.Ref != "main" || !push.Imported || push.ImportedFrom != "github" {
		t.Fatalf("push event = %+v", push)
	}
}

// The store refuses what its indexes cannot hold and what does not exist;
// the fields' rules are eventimport.CheckEvent's (eventimport/check_test.go).
func TestImportEventsRefusals(t *testing.T) {
	s, _ := openTest(t)
	alice := user(t, s, "alice")
	g := topGroup(t, s, "acme")
	pr := ok(s.CreateProject(NewProject{Name: "app", NamespaceID: g.ID}))(t)
	good := Event{ProjectID: pr.ID, AuthorID: alice.ID, Action: ActionCreated, TargetType: TargetIssue, TargetID: ptr(int64(1))}
	with := func(f func(e *Event)) Event {
		e := good
		f(&e)
		return e
	}
	tests := []struct {
		name       string
		ev         Event
		field, msg string
	}{
		{"no action", with(func(e *Event) { e.Action = "" }), "action", "is missing"},
		{"unknown action", with(func(e *Event) { e.Action = "deployed" }), "action", "does not have a valid value"},
		{"unknown target type", with(func(e *Event) { e.TargetType = "Pipeline" }), "target_type", "does not have a valid value"},
		{"a filter name, not a class name", with(func(e *Event) { e.TargetType = "issue" }), "target_type", "does not have a valid value"},
		{"no project", with(func(e *Event) { e.ProjectID = 0 }), "project_id", "does not exist"},
		{"unknown project", with(func(e *Event) { e.ProjectID = 999 }), "project_id", "does not exist"},
		{"unknown author", with(func(e *Event) { e.AuthorID = 999 }), "author_id", "does not exist"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := snapshot(t, s)
			// The bad event is the third: the good ones before it are not stored either.
			_, err := s.ImportEvents([]Event{good, good, tt.ev, good})
			wantValidation(t, err, "events[2]."+tt.field, tt.msg)
			if snapshot(t, s) != before {
				t.Fatal("a refused import changed the database")
			}
		})
	}
	// Many bad events: the report stops at MaxImportProblems.
	bad := make([]Event, 50)
	_, err := s.ImportEvents(bad)
	var ve *ValidationError
	if !errors.As(err, &ve) || len(ve.Fields) > MaxImportProblems+3 {
		t.Fatalf("err = %v", err)
	}
}

// TestEventsPageMatchesScan checks every kind of query against a plain scan
// of all events: scopes, filters, both orders, offsets and limits.
func TestEventsPageMatchesScan(t *testing.T) {
	s, c := openTest(t)
	g := topGroup(t, s, "acme")
	var users []User
	for i := range 4 {
		users = append(users, user(t, s, fmt.Sprintf("u%d", i)))
	}
	var projects []Project
	for i := range 4 {
		projects = append(projects, ok(s.CreateProject(NewProject{Name: fmt.Sprintf("p%d", i), NamespaceID: g.ID, CreatorID: users[i].ID}))(t))
	}
	rng := rand.New(rand.NewPCG(1, 2))
	day0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	targets := []string{"", TargetIssue, TargetMergeRequest, TargetNote, TargetDiffNote, TargetWiki, TargetDesign, TargetMilestone}
	var batch []Event
	for range 600 {
		e := Event{ProjectID: projects[rng.IntN(len(projects))].ID, AuthorID: users[rng.IntN(len(users))].ID,
			// Imported events arrive out of time order, as they do.
			CreatedAt: day0.Add(time.Duration(rng.IntN(20*24*60)) * time.Minute)}
		switch tt := targets[rng.IntN(len(targets))]; tt {
		case "":
			e.Action = ActionPushed
			e.PushData = &PushData{Action: "pushed", RefType: "branch", Ref: "main"}
		case TargetNote, TargetDiffNote:
			e.Action, e.TargetType, e.TargetID = ActionCommented, tt, ptr(int64(rng.IntN(100)+1))
			e.Note = &EventNote{Body: "b"}
		default:
			e.Action = []string{ActionCreated, ActionUpdated, ActionClosed, ActionMerged}[rng.IntN(4)]
			e.TargetType, e.TargetID = tt, ptr(int64(rng.IntN(100)+1))
		}
		batch = append(batch, e)
	}
	ok(s.ImportEvents(batch[:300]))(t)
	c.Advance(time.Hour)
	ok(s.AddProjectMember(projects[0].ID, users[3].ID, Guest, nil, users[0].ID))(t)
	ok(s.ImportEvents(batch[300:]))(t)

	var all []Event
	for id := int64(1); ; id++ {
		e, err := s.Event(id)
		if errors.Is(err, ErrNotFound) {
			break
		}
		noErr(t, err)
		all = append(all, e)
	}
	if len(all) != 605 {
		t.Fatalf("%d events stored, want 605", len(all))
	}
	scan := func(q EventQuery) ([]int64, int) {
		var ids []int64
		for _, e := range all {
			switch {
			case q.ProjectID != 0 && e.ProjectID != q.ProjectID,
				q.ProjectID == 0 && q.AuthorID != 0 && (e.AuthorID != q.AuthorID || q.HiddenProjects[e.ProjectID]),
				q.ProjectID == 0 && q.AuthorID == 0 && q.Projects != nil && !slices.Contains(q.Projects, e.ProjectID),
				q.Action != "" && e.Action != q.Action,
				q.TargetType != "" && e.TargetType != q.TargetType,
				!q.CreatedBefore.IsZero() && !e.CreatedAt.Before(q.CreatedBefore),
				!q.CreatedFrom.IsZero() && e.CreatedAt.Before(q.CreatedFrom):
				continue
			}
			ids = append(ids, e.ID)
		}
		if !q.Asc {
			slices.Reverse(ids)
		}
		total := len(ids)
		ids = ids[min(q.Offset, len(ids)):]
		return ids[:min(q.Limit, len(ids))], total
	}
	scopes := []struct {
		name string
		q    EventQuery
	}{
		{"project", EventQuery{ProjectID: projects[1].ID}},
		{"author", EventQuery{AuthorID: users[2].ID}},
		{"author with hidden projects", EventQuery{AuthorID: users[3].ID, HiddenProjects: map[int64]bool{projects[0].ID: true, projects[2].ID: true}}},
		{"projects", EventQuery{Projects: []int64{projects[3].ID, projects[0].ID}}},
		{"no projects", EventQuery{Projects: []int64{}}},
		{"all", EventQuery{All: true}},
	}
	filters := []struct {
		name string
		f    func(q *EventQuery)
	}{
		{"none", func(q *EventQuery) {}},
		{"action", func(q *EventQuery) { q.Action = ActionCommented }},
		{"rare action", func(q *EventQuery) { q.Action = ActionJoined }},
		{"target type", func(q *EventQuery) { q.TargetType = TargetMergeRequest }},
		{"before", func(q *EventQuery) { q.CreatedBefore = day0.AddDate(0, 0, 7) }},
		{"after", func(q *EventQuery) { q.CreatedFrom = day0.AddDate(0, 0, 12) }},
		{"everything", func(q *EventQuery) {
			q.Action, q.TargetType = ActionCreated, TargetIssue
			q.CreatedFrom, q.CreatedBefore = day0.AddDate(0, 0, 2), day0.AddDate(0, 0, 15)
		}},
	}
	pages := []struct{ offset, limit int }{{0, 20}, {20, 20}, {5, 7}, {0, 1000}, {590, 20}, {2000, 20}}
	for _, sc := range scopes {
		for _, f := range filters {
			for _, asc := range []bool{false, true} {
				for _, pg := range pages {
					q := sc.q
					f.f(&q)
					q.Asc, q.Offset, q.Limit = asc, pg.offset, pg.limit
					name := fmt.Sprintf("%s/%s/asc=%v/%d+%d", sc.name, f.name, asc, pg.offset, pg.limit)
					got, total, err := s.EventsPage(q)
					if err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					wantIDs, wantTotal := scan(q)
					if total != wantTotal || !slices.Equal(eventIDs(got), wantIDs) {
						t.Fatalf("%s:\n got %v (total %d)\nwant %v (total %d)", name, eventIDs(got), total, wantIDs, wantTotal)
					}
				}
			}
		}
	}

	authorProjects := ok(s.EventProjectIDs(users[3].ID))(t)
	allProjects := ok(s.EventProjectIDs(0))(t)
	var want []int64
	for _, p := range projects {
		want = append(want, p.ID)
	}
	if !slices.Equal(allProjects, want) || !slices.Equal(authorProjects, want) {
		t.Fatalf("EventProjectIDs: all %v, u3 %v, want %v", allProjects, authorProjects, want)
	}
	if _, _, err := s.EventsPage(EventQuery{All: true, Action: "deployed", Limit: 1}); err == nil {
		t.Fatal("an unknown action is not refused")
	}
}
