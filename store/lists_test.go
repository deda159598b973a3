package store

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// The snapshot a list decides with must agree with the one-at-a-time reads
// the single-resource endpoints use, for every user, group and project of a
// random tree with random (some expired) memberships.
func TestUserAccessAgreesWithSingleReads(t *testing.T) {
	for seed := uint64(1); seed <= 5; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			s, c := openTest(t)
			rnd := rand.New(rand.NewPCG(seed, 7))
			var users []User
			for i := range 4 {
				users = append(users, user(t, s, fmt.Sprintf("u%d", i)))
			}
			var groups []Group
			for i := range 12 {
				n := NewGroup{Name: fmt.Sprintf("g%d", i), Path: fmt.Sprintf("g%d", i)}
				if i > 2 {
					n.ParentID = groups[rnd.IntN(len(groups))].ID
				}
				groups = append(groups, ok(s.CreateGroup(n))(t))
			}
			var projects []Project
			for i := range 10 {
				projects = append(projects, ok(s.CreateProject(NewProject{Name: fmt.Sprintf("p%d", i),
					NamespaceID: groups[rnd.IntN(len(groups))].ID}))(t))
			}
			levels := []int{Guest, Reporter, Developer, Maintainer, Owner}
			expiry := c.Now().Add(time.Hour)
			for range 14 {
				u := users[rnd.IntN(len(users))].ID
				var exp *time.Time
				if rnd.IntN(4) == 0 {
					exp = &expiry
				}
				if rnd.IntN(2) == 0 {
					_, _ = s.AddGroupMember(groups[rnd.IntN(len(groups))].ID, u, levels[rnd.IntN(5)], exp)
				} else {
					_, _ = s.AddProjectMember(projects[rnd.IntN(len(projects))].ID, u, levels[rnd.IntN(5)], exp, 0)
				}
			}
			c.Advance(2 * time.Hour) // the memberships with an expiry have expired
			for _, u := range users {
				a := ok(s.UserAccess(u.ID))(t)
				for _, g := range groups {
					if got, want := a.GroupLevel(g.ID), s.GroupAccessLevel(g.ID, u.ID); got != want {
						t.Fatalf("user %d group %d: level %d, single read %d", u.ID, g.ID, got, want)
					}
					if got, want := a.MemberUnder(g.ID), s.HasMembershipUnder(g.ID, u.ID); got != want {
						t.Fatalf("user %d group %d: member under %v, single read %v", u.ID, g.ID, got, want)
					}
				}
				for _, p := range projects {
					if got, want := a.ProjectLevel(p), s.ProjectAccessLevel(p.ID, u.ID); got != want {
						t.Fatalf("user %d project %d: level %d, single read %d", u.ID, p.ID, got, want)
					}
				}
			}
		})
	}
}

func TestInheritedMembers(t *testing.T) {
	s, c := openTest(t)
	top := topGroup(t, s, "top")
	mid := ok(s.CreateGroup(NewGroup{Name: "mid", Path: "mid", ParentID: top.ID}))(t)
	p := ok(s.CreateProject(NewProject{Name: "app", NamespaceID: mid.ID}))(t)
	a, b, d := user(t, s, "a"), user(t, s, "b"), user(t, s, "d")
	add := func(err error) {
		t.Helper()
		c.Advance(time.Second)
		if err != nil {
			t.Fatal(err)
		}
	}
	_, err := s.AddGroupMember(top.ID, a.ID, Maintainer, nil)
	add(err)
	_, err = s.AddGroupMember(mid.ID, a.ID, Developer, nil) // lower: top's wins
	add(err)
	_, err = s.AddProjectMember(p.ID, b.ID, Reporter, nil, 0)
	add(err)
	_, err = s.AddGroupMember(top.ID, b.ID, Reporter, nil) // equal: the project's, nearer, wins
	add(err)
	_, err = s.AddGroupMember(mid.ID, d.ID, Owner, nil)
	add(err)

	got := ok(s.AllProjectMembers(p.ID))(t)
	want := []Member{{SourceID: top.ID, UserID: a.ID, AccessLevel: Maintainer}, {SourceID: p.ID, UserID: b.ID, AccessLevel: Reporter},
		{SourceID: mid.ID, UserID: d.ID, AccessLevel: Owner}}
	if len(got) != len(want) {
		t.Fatalf("got %+v", got)
	}
	for i := range want {
		if got[i].SourceID != want[i].SourceID || got[i].UserID != want[i].UserID || got[i].AccessLevel != want[i].AccessLevel {
			t.Fatalf("member %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	if direct := ok(s.ProjectMembers(p.ID))(t); len(direct) != 1 || direct[0].UserID != b.ID {
		t.Fatalf("direct %+v", direct)
	}
	if all := ok(s.AllGroupMembers(mid.ID))(t); len(all) != 3 || all[0].AccessLevel != Maintainer {
		t.Fatalf("mid all %+v", all)
	}
	if _, err := s.AllGroupMembers(999); err == nil {
		t.Fatal("unknown group listed")
	}
	if _, err := s.ProjectMembers(999); err == nil {
		t.Fatal("unknown project listed")
	}
}
