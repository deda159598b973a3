package store

import (
	"testing"

	"registryd/store/kv"
)

// TestVisibilityNotAboveParent: a project or subgroup may be as visible as
// its parent or less, never more, with GitLab's messages; the refusal
// writes nothing.
func TestVisibilityNotAboveParent(t *testing.T) {
	s, _ := openTest(t)
	pub := ok(s.CreateGroup(NewGroup{Name: "Pub", Path: "pub", Visibility: Public}))(t)
	in := ok(s.CreateGroup(NewGroup{Name: "In", Path: "in", ParentID: pub.ID, Visibility: Internal}))(t)
	priv := ok(s.CreateGroup(NewGroup{Name: "Priv", Path: "priv", Visibility: Private}))(t)

	groups := []struct {
		name        string
		parent      int64
		vis, errMsg string
	}{
		{"public under public", pub.ID, Public, ""},
		{"private under public", pub.ID, Private, ""},
		{"internal under internal", in.ID, Internal, ""},
		{"public under internal", in.ID, Public, "public is not allowed since the parent group has a internal visibility."},
		{"internal under private", priv.ID, Internal, "internal is not allowed since the parent group has a private visibility."},
		{"public under private", priv.ID, Public, "public is not allowed since the parent group has a private visibility."},
		{"default (private) under private", priv.ID, "", ""},
	}
	for i, tc := range groups {
		t.Run("group "+tc.name, func(t *testing.T) {
			before := snapshot(t, s)
			g, err := s.CreateGroup(NewGroup{Name: "g", Path: "g" + string(rune('a'+i)), ParentID: tc.parent, Visibility: tc.vis})
			if tc.errMsg == "" {
				noErr(t, err)
				if got := ok(s.Group(g.ID))(t); got.Visibility != g.Visibility {
					t.Fatalf("read back %q, created %q", got.Visibility, g.Visibility)
				}
				return
			}
			wantValidation(t, err, "visibility_level", tc.errMsg)
			if snapshot(t, s) != before {
				t.Fatal("a refused group changed the database")
			}
		})
	}

	projects := []struct {
		name        string
		ns          int64
		vis, errMsg string
	}{
		{"public in public", pub.ID, Public, ""},
		{"internal in internal", in.ID, Internal, ""},
		{"private in private", priv.ID, Private, ""},
		{"public in internal", in.ID, Public, "public is not allowed in a internal group."},
		{"internal in private", priv.ID, Internal, "internal is not allowed in a private group."},
		{"public in private", priv.ID, Public, "public is not allowed in a private group."},
	}
	for i, tc := range projects {
		t.Run("project "+tc.name, func(t *testing.T) {
			before := snapshot(t, s)
			_, err := s.CreateProject(NewProject{Name: "p", Path: "p" + string(rune('a'+i)), NamespaceID: tc.ns, Visibility: tc.vis})
			if tc.errMsg == "" {
				noErr(t, err)
				return
			}
			wantValidation(t, err, "visibility_level", tc.errMsg)
			if snapshot(t, s) != before {
				t.Fatal("a refused project changed the database")
			}
		})
	}
}

// forceVisibility rewrites a stored group's or project's visibility as a
// registryd without the parent rule could have written it.
func forceVisibility(t *testing.T, s *Store, bucket []byte, id int64, vis string) {
	t.Helper()
	noErr(t, s.db.Update(func(tx kv.Tx) error {
		b := tx.Bucket(bucket)
		var rec map[string]any
		if !getJSON(b, itob(id), &rec) {
			t.Fatalf("no record %d in %s", id, bucket)
		}
		rec["visibility"] = vis
		return putJSON(b, itob(id), rec)
	}))
}

// TestLegacyVisibilityCapped: records written before the rule (a public
// project and a public subgroup, its own public project, in a private group)
// read as no more visible than their most private ancestor, through every
// read that returns them.
func TestLegacyVisibilityCapped(t *testing.T) {
	s, _ := openTest(t)
	hidden := ok(s.CreateGroup(NewGroup{Name: "Hidden", Path: "hidden"}))(t)
	sub := ok(s.CreateGroup(NewGroup{Name: "Sub", Path: "sub", ParentID: hidden.ID}))(t)
	app := ok(s.CreateProject(NewProject{Name: "App", NamespaceID: hidden.ID}))(t)
	deep := ok(s.CreateProject(NewProject{Name: "Deep", NamespaceID: sub.ID}))(t)
	open := ok(s.CreateGroup(NewGroup{Name: "Open", Path: "open", Visibility: Public}))(t)
	mid := ok(s.CreateGroup(NewGroup{Name: "Mid", Path: "mid", ParentID: open.ID, Visibility: Internal}))(t)
	low := ok(s.CreateGroup(NewGroup{Name: "Low", Path: "low", ParentID: mid.ID, Visibility: Internal}))(t)
	lowApp := ok(s.CreateProject(NewProject{Name: "LowApp", NamespaceID: low.ID, Visibility: Internal}))(t)
	forceVisibility(t, s, bktGroups, sub.ID, Public)
	forceVisibility(t, s, bktProjects, app.ID, Public)
	forceVisibility(t, s, bktProjects, deep.ID, Public)
	forceVisibility(t, s, bktGroups, low.ID, Public)
	forceVisibility(t, s, bktProjects, lowApp.ID, Public)

	wantGroups := map[int64]string{hidden.ID: Private, sub.ID: Private, open.ID: Public, mid.ID: Internal, low.ID: Internal}
	wantProjects := map[int64]string{app.ID: Private, deep.ID: Private, lowApp.ID: Internal}
	for id, want := range wantGroups {
		if g := ok(s.Group(id))(t); g.Visibility != want {
			t.Errorf("Group(%s): %s, want %s", g.FullPath, g.Visibility, want)
		}
		g := ok(s.Group(id))(t)
		if byRef := ok(s.GroupByRef(g.FullPath))(t); byRef.Visibility != want {
			t.Errorf("GroupByRef(%s): %s, want %s", g.FullPath, byRef.Visibility, want)
		}
	}
	for _, g := range ok(s.Groups())(t) {
		if g.Visibility != wantGroups[g.ID] {
			t.Errorf("Groups: %s is %s, want %s", g.FullPath, g.Visibility, wantGroups[g.ID])
		}
	}
	for id, want := range wantProjects {
		p := ok(s.Project(id))(t)
		if p.Visibility != want {
			t.Errorf("Project(%s): %s, want %s", p.FullPath, p.Visibility, want)
		}
		if byRef := ok(s.ProjectByRef(p.FullPath))(t); byRef.Visibility != want {
			t.Errorf("ProjectByRef(%s): %s, want %s", p.FullPath, byRef.Visibility, want)
		}
	}
	for _, p := range ok(s.Projects())(t) {
		if p.Visibility != wantProjects[p.ID] {
			t.Errorf("Projects: %s is %s, want %s", p.FullPath, p.Visibility, wantProjects[p.ID])
		}
	}
	// New children are checked against the effective level, not the
	// stored one: low reads internal, so it takes no public project.
	_, err := s.CreateProject(NewProject{Name: "x", NamespaceID: low.ID, Visibility: Public})
	wantValidation(t, err, "visibility_level", "public is not allowed in a internal group.")
	_, err = s.CreateGroup(NewGroup{Name: "x", Path: "x", ParentID: sub.ID, Visibility: Public})
	wantValidation(t, err, "visibility_level", "public is not allowed since the parent group has a private visibility.")
}
