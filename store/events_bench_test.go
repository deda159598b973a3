package store

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// BenchmarkEventsPage measures one page of events out of a store holding
// 1,000,000 of them: 200 projects and 500 authors, one hot project and one
// hot author holding a tenth of all events each. The fixture is built once
// per run (it takes a while, in batches of 20,000 events per transaction)
// and removed afterwards; run it with
//
//	go test -run '^$' -bench BenchmarkEventsPage -benchtime 1000x ./store/
func BenchmarkEventsPage(b *testing.B) {
	const (
		total    = 1_000_000
		projects = 200
		authors  = 500
		batch    = 20_000
	)
	s, err := openAt(b, b.TempDir(), Options{SecretKey: make([]byte, 32)})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	g, err := s.CreateGroup(NewGroup{Name: "bench", Path: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	var pids, uids []int64
	for i := range authors {
		u, err := s.CreateUser(NewUser{Username: fmt.Sprintf("u%d", i), Name: "u", Email: fmt.Sprintf("u%d@example.com", i)})
		if err != nil {
			b.Fatal(err)
		}
		uids = append(uids, u.ID)
	}
	for i := range projects {
		p, err := s.CreateProject(NewProject{Name: fmt.Sprintf("p%d", i), NamespaceID: g.ID})
		if err != nil {
			b.Fatal(err)
		}
		pids = append(pids, p.ID)
	}
	hotProject, hotAuthor, typicalAuthor := pids[0], uids[0], uids[1]
	rng := rand.New(rand.NewPCG(7, 11))
	start := time.Now()
	t0 := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	evs := make([]Event, 0, batch)
	for i := range total {
		e := Event{ProjectID: pids[1+rng.IntN(projects-1)], AuthorID: uids[2+rng.IntN(authors-2)],
			CreatedAt: t0.Add(time.Duration(i) * 30 * time.Second)}
		switch {
		case i%10 == 0:
			e.ProjectID = hotProject
		case i%10 == 1:
			e.AuthorID = hotAuthor
		case i%250 == 2:
			e.AuthorID = typicalAuthor
		}
		switch rng.IntN(4) {
		case 0:
			e.Action = ActionPushed
			e.PushData = &PushData{CommitCount: 1, Action: "pushed", RefType: "branch", Ref: "main"}
		case 1:
			e.Action, e.TargetType, e.TargetID = ActionCommented, TargetNote, ptr(int64(i+1))
			e.Note = &EventNote{Body: "looks good"}
		case 2:
			e.Action, e.TargetType, e.TargetID, e.TargetTitle = ActionClosed, TargetIssue, ptr(int64(i+1)), ptr("Crash on start")
		default:
			e.Action, e.TargetType, e.TargetID = ActionMerged, TargetMergeRequest, ptr(int64(i+1))
		}
		evs = append(evs, e)
		if len(evs) == batch {
			if _, err := s.ImportEvents(evs); err != nil {
				b.Fatal(err)
			}
			evs = evs[:0]
		}
	}
	b.Logf("fixture: %d events in %s, database %d MiB", total, time.Since(start).Round(time.Second), s.Stats().FileBytes>>20)

	hidden := map[int64]bool{}
	for _, p := range pids[1:50] {
		hidden[p] = true
	}
	readable := pids[:50]
	cases := []struct {
		name string
		q    EventQuery
	}{
		{"project/page1", EventQuery{ProjectID: hotProject}},
		{"project/page50", EventQuery{ProjectID: hotProject, Offset: 49 * 20}},
		{"project/asc/page1", EventQuery{ProjectID: hotProject, Asc: true}},
		{"project/action/page1", EventQuery{ProjectID: hotProject, Action: ActionMerged}},
		{"project/target_type/page1", EventQuery{ProjectID: hotProject, TargetType: TargetIssue}},
		{"project/after/page1", EventQuery{ProjectID: hotProject, CreatedFrom: t0.AddDate(0, 0, 300)}},
		{"author/page1", EventQuery{AuthorID: hotAuthor}},
		{"author/hidden_projects/page1", EventQuery{AuthorID: hotAuthor, HiddenProjects: hidden}},
		{"author/action/page1", EventQuery{AuthorID: hotAuthor, Action: ActionCommented}},
		{"typical_author/page1", EventQuery{AuthorID: typicalAuthor}},
		{"all/page1", EventQuery{All: true}},
		{"readable_projects/page1", EventQuery{Projects: readable}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			q := c.q
			q.Limit = 20
			b.ReportAllocs()
			for b.Loop() {
				evs, n, err := s.EventsPage(q)
				if err != nil || len(evs) != 20 || n < 20 {
					b.Fatalf("page: %d events of %d, %v", len(evs), n, err)
				}
			}
		})
	}
}
