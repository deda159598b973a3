package store

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"registryd/store/kv"
)

// deleteFixture is what populate made in one top-level group.
type deleteFixture struct {
	top, sub         Group
	project          Project
	registry         int64
	upstreams        []int64
	deployTokenPlain string
}

// populate fills a top-level group named path, owned by owner, with one of
// everything a group deletion must take away: a subgroup, a project in it
// with a member (guest), a dependency list with a vulnerability, events
// (created, joined, imported), a registry with two upstreams and their cache
// entries (one blob shared with nothing, one per upstream), a deploy token,
// a cleanup policy and a direct group membership of guest.
func populate(t *testing.T, s *Store, path string, owner, guest User) deleteFixture {
	t.Helper()
	var f deleteFixture
	f.top = ok(s.CreateGroup(NewGroup{Name: path, Path: path, CreatorID: owner.ID}))(t)
	f.sub = ok(s.CreateGroup(NewGroup{Name: "sub", Path: "sub", ParentID: f.top.ID, CreatorID: owner.ID}))(t)
	f.project = ok(s.CreateProject(NewProject{Name: "app", NamespaceID: f.sub.ID, CreatorID: owner.ID}))(t)
	ok(s.AddProjectMember(f.project.ID, guest.ID, Developer, nil, owner.ID))(t)
	ok(s.AddGroupMember(f.top.ID, guest.ID, Guest, nil))(t)
	ok(s.ReplaceDependencies(f.project.ID, []NewDependency{
		{Name: "commons-lang3", Version: "3.12.0", PackageManager: "maven", FilePath: "pom.xml",
			Licenses: []License{{SPDX: "Apache-2.0", Name: "Apache License 2.0"}}, Vulnerabilities: []string{"CVE-2025-48924"}},
		{Name: "guava", Version: "31.0", PackageManager: "gradle", FilePath: "build.gradle"},
	}, []NewVulnerability{{ExternalID: "CVE-2025-48924", Name: "recursion", Severity: "medium"}}))(t)
	ok(s.ImportEvents([]Event{{ProjectID: f.project.ID, AuthorID: guest.ID, Action: "pushed", CreatedAt: s.clock(),
		PushData: &PushData{CommitCount: 1, Action: "pushed", RefType: "branch", Ref: "main"}}}))(t)
	f.registry = ok(s.CreateRegistry(f.top.ID, "main", ""))(t).ID
	for i, url := range []string{"https://a.example/" + path, "https://b.example/" + path} {
		u := up(t, s, f.registry, url)
		f.upstreams = append(f.upstreams, u.ID)
		ok(s.PutCacheEntry(CacheEntry{UpstreamID: u.ID, RelativePath: "/org/x/1.0/x-1.0.jar", Size: 10,
			SHA256: fmt.Sprintf("%064x", 1000+i)}))(t)
	}
	f.deployTokenPlain = "gldt-" + path + "-0123456789abcdef"
	ok(s.CreateDeployToken(NewDeployToken{GroupID: f.top.ID, Name: "ci", Scopes: []string{ScopeReadVirtualRegistry},
		Plain: f.deployTokenPlain}))(t)
	enabled := true
	ok(s.CreateCleanupPolicy(f.top.ID, CleanupPolicyPatch{Enabled: &enabled}))(t)
	return f
}

// withoutSequences is a snapshot without the buckets' sequences, which
// only grow (ids a deletion freed are not drawn again), and without the
// key check, sealed with a random nonce in each store. The key counts are
// compared summed (a line per counted bucket), not shard by shard: on an
// engine whose counts are sharded (counts.go) each transaction adds to a
// shard drawn at random.
func withoutSequences(t *testing.T, s *Store) string {
	t.Helper()
	keyCheck := fmt.Sprintf("meta %x=", metaKeyCheck)
	countLines := fmt.Sprintf("%s ", bktCounts)
	var keep []string
	for _, l := range strings.Split(snapshot(t, s), "\n") {
		if !strings.Contains(l, " seq=") && !strings.HasPrefix(l, keyCheck) && !strings.HasPrefix(l, countLines) {
			keep = append(keep, l)
		}
	}
	noErr(t, s.db.View(func(tx kv.Tx) error {
		for i, n := range keyCounts(tx) {
			keep = append(keep, fmt.Sprintf("%s of %s: %d", bktCounts, countedBuckets[i], n))
		}
		return nil
	}))
	return strings.Join(keep, "\n")
}

// sameAsNever opens two stores on one clock, runs base on both, then add
// and del on the second only, collects what the deletion marked, and wants
// the two databases equal but for sequences: the deletion left nothing
// behind (no record, index entry, count, membership, token, cache entry or
// blob reference) and took nothing else.
func sameAsNever(t *testing.T, base func(*Store), add func(*Store), del func(*Store)) {
	t.Helper()
	var stores [2]*Store
	for i := range stores {
		c := newClock()
		s, err := openAt(t, t.TempDir(), Options{SecretKey: testKey, Now: c.Now})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		stores[i] = s
		base(s)
	}
	add(stores[1])
	del(stores[1])
	collectAll(t, stores[1], 1000)
	want, got := withoutSequences(t, stores[0]), withoutSequences(t, stores[1])
	if want != got {
		wl, gl := strings.Split(want, "\n"), strings.Split(got, "\n")
		in := func(l string, ls []string) bool {
			for _, x := range ls {
				if x == l {
					return true
				}
			}
			return false
		}
		for _, l := range gl {
			if !in(l, wl) {
				t.Errorf("left behind: %s", l)
			}
		}
		for _, l := range wl {
			if !in(l, gl) {
				t.Errorf("taken away: %s", l)
			}
		}
	}
}

func TestDeleteGroupLeavesNothing(t *testing.T) {
	var owner, guest User
	base := func(s *Store) {
		owner, guest = user(t, s, "owner"), user(t, s, "guest")
		populate(t, s, "other", owner, guest)
	}
	var f deleteFixture
	sameAsNever(t, base,
		func(s *Store) { f = populate(t, s, "acme", owner, guest) },
		func(s *Store) { ok(s.DeleteGroup(f.top.ID))(t) })
}

func TestDeleteSubgroupLeavesNothing(t *testing.T) {
	var owner, guest User
	var f deleteFixture
	base := func(s *Store) {
		owner, guest = user(t, s, "owner"), user(t, s, "guest")
		f = populate(t, s, "acme", owner, guest)
	}
	sameAsNever(t, base,
		func(s *Store) {
			g := ok(s.CreateGroup(NewGroup{Name: "deep", Path: "deep", ParentID: f.sub.ID, CreatorID: owner.ID}))(t)
			p := ok(s.CreateProject(NewProject{Name: "lib", NamespaceID: g.ID, CreatorID: guest.ID}))(t)
			ok(s.AddProjectMember(p.ID, owner.ID, Maintainer, nil, guest.ID))(t)
			f.sub = g
		},
		func(s *Store) { ok(s.DeleteGroup(f.sub.ID))(t) })
}

func TestDeleteProjectLeavesNothing(t *testing.T) {
	var owner, guest User
	var f deleteFixture
	base := func(s *Store) {
		owner, guest = user(t, s, "owner"), user(t, s, "guest")
		f = populate(t, s, "acme", owner, guest)
	}
	var p Project
	sameAsNever(t, base,
		func(s *Store) {
			p = ok(s.CreateProject(NewProject{Name: "second", NamespaceID: f.top.ID, CreatorID: guest.ID}))(t)
			ok(s.AddProjectMember(p.ID, owner.ID, Reporter, nil, guest.ID))(t)
			ok(s.ReplaceDependencies(p.ID, []NewDependency{{Name: "guava", Version: "31.0", PackageManager: "maven",
				FilePath: "pom.xml", Vulnerabilities: []string{"GHSA-1"}}}, []NewVulnerability{{ExternalID: "GHSA-1", Name: "x", Severity: "low"}}))(t)
		},
		func(s *Store) { noErr(t, s.DeleteProject(p.ID)) })
}

func TestDeleteUserHardLeavesNothing(t *testing.T) {
	var owner, guest User
	base := func(s *Store) {
		owner, guest = user(t, s, "owner"), user(t, s, "guest")
		populate(t, s, "other", owner, guest)
	}
	var leaver User
	sameAsNever(t, base,
		func(s *Store) {
			leaver = user(t, s, "leaver")
			ok(s.CreateToken(NewToken{UserID: leaver.ID, Name: "laptop", Scopes: []string{ScopeAPI}, Plain: "rdpat-leaver-0123456789"}))(t)
			// Sole owner of acme (deleted with them); a member of other and of its project.
			populate(t, s, "acme", leaver, guest)
			other := ok(s.GroupByRef("other"))(t)
			ok(s.AddGroupMember(other.ID, leaver.ID, Developer, nil))(t)
			p := ok(s.ProjectByRef("other/sub/app"))(t)
			ok(s.AddProjectMember(p.ID, leaver.ID, Developer, nil, owner.ID))(t)
			ok(s.ImportEvents([]Event{{ProjectID: p.ID, AuthorID: leaver.ID, Action: "pushed", CreatedAt: s.clock(),
				PushData: &PushData{CommitCount: 2, Action: "pushed", RefType: "branch", Ref: "main"}}}))(t)
		},
		func(s *Store) {
			// The joined event of other/sub/app is by leaver: hard deletes it too.
			ok(s.DeleteUser(leaver.ID, true))(t)
		})
}

func TestDeleteUserRefusals(t *testing.T) {
	s, _ := openTest(t)
	root := ok(s.CreateUser(NewUser{Username: "root", Name: "root", Email: "root@example.com", Admin: true}))(t)
	owner := user(t, s, "owner")
	g := ok(s.CreateGroup(NewGroup{Name: "acme", Path: "acme", CreatorID: owner.ID}))(t)

	if _, err := s.DeleteUser(root.ID, false); !errors.Is(err, ErrLastAdmin) {
		t.Fatalf("deleting the last admin: %v, want ErrLastAdmin", err)
	}
	before := snapshot(t, s)
	if _, err := s.DeleteUser(owner.ID, false); !errors.Is(err, ErrSoleOwner) {
		t.Fatalf("deleting a sole owner: %v, want ErrSoleOwner", err)
	}
	if snapshot(t, s) != before {
		t.Fatal("a refused deletion wrote")
	}
	// A second owner: owner may go, and acme stays with its other owner.
	second := user(t, s, "second")
	ok(s.AddGroupMember(g.ID, second.ID, Owner, nil))(t)
	ok(s.DeleteUser(owner.ID, false))(t)
	if _, err := s.User(owner.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("deleted user: %v", err)
	}
	if _, err := s.UserByUsername("owner"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("deleted user by name: %v", err)
	}
	if lvl := s.GroupAccessLevel(g.ID, second.ID); lvl != Owner {
		t.Fatalf("the other owner's level: %d", lvl)
	}
	// The name and email are free again.
	user(t, s, "owner")

	// A second admin: root may go.
	ok(s.CreateUser(NewUser{Username: "admin2", Name: "a", Email: "a2@example.com", Admin: true}))(t)
	ok(s.DeleteUser(root.ID, false))(t)

	_, errUser := s.DeleteUser(9999, false)
	_, errGroup := s.DeleteGroup(9999)
	for _, err := range []error{errUser, errGroup, s.DeleteProject(9999)} {
		if !errors.Is(err, ErrNotFound) {
			t.Errorf("deleting what does not exist: %v, want ErrNotFound", err)
		}
	}
}

// TestDeleteUserSoftKeepsEvents: without hard, the user's events stay (by
// an author who no longer exists), and the tokens go at once.
func TestDeleteUserSoftKeepsEvents(t *testing.T) {
	s, _ := openTest(t)
	owner, leaver := user(t, s, "owner"), user(t, s, "leaver")
	tok := ok(s.CreateToken(NewToken{UserID: leaver.ID, Name: "t", Scopes: []string{ScopeAPI}, Plain: "rdpat-soft-0123456789"}))(t)
	g := ok(s.CreateGroup(NewGroup{Name: "acme", Path: "acme", CreatorID: owner.ID}))(t)
	p := ok(s.CreateProject(NewProject{Name: "app", NamespaceID: g.ID, CreatorID: owner.ID}))(t)
	ok(s.AddProjectMember(p.ID, leaver.ID, Developer, nil, owner.ID))(t)
	ok(s.DeleteUser(leaver.ID, false))(t)
	if _, _, err := s.TokenByHash(tok.Hash); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the deleted user's token: %v", err)
	}
	evs, total := ok2(s.EventsPage(EventQuery{ProjectID: p.ID, Limit: 20}))(t)
	if total != 2 || evs[0].AuthorID != leaver.ID {
		t.Fatalf("events after a soft delete: %d %+v, want created and leaver's joined", total, evs)
	}
	if s.ProjectAccessLevel(p.ID, leaver.ID) != NoAccess {
		t.Fatal("the deleted user kept a membership")
	}
}

// TestDeleteGroupFreesBlobs: the cache entries of a deleted group's
// upstreams are absent at once and their blobs unreferenced once the
// collector ran; the deletion woke it.
func TestDeleteGroupFreesBlobs(t *testing.T) {
	s, _ := openTest(t)
	owner, guest := user(t, s, "owner"), user(t, s, "guest")
	f := populate(t, s, "acme", owner, guest)
	sha := fmt.Sprintf("%064x", 1000)
	if refs(t, s, sha) != 1 {
		t.Fatal("fixture: no blob reference")
	}
	gen := s.CacheGeneration()
	epoch := s.ForgetEpoch(f.upstreams[0])
	if d := ok(s.DeleteGroup(f.top.ID))(t); fmt.Sprint(d.Upstreams) != fmt.Sprint(f.upstreams) {
		t.Fatalf("deleted upstreams %v, want %v", d.Upstreams, f.upstreams)
	}
	select {
	case <-s.CollectWanted():
	case <-time.After(5 * time.Second):
		t.Fatal("the deletion did not wake the collector")
	}
	if s.CacheGeneration() == gen || s.ForgetEpoch(f.upstreams[0]) == epoch {
		t.Fatal("the deletion moved neither the cache generation nor the upstream's forget epoch")
	}
	if _, err := s.CacheEntry(f.upstreams[0], "/org/x/1.0/x-1.0.jar"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("an entry of a deleted upstream: %v", err)
	}
	if _, err := s.Registry(f.registry); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the registry of a deleted group: %v", err)
	}
	if _, err := s.DeployTokenByHash(hashToken(f.deployTokenPlain)); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a deploy token of a deleted group: %v", err)
	}
	var unref []string
	for _, c := range collectAll(t, s, 100) {
		unref = append(unref, c.Unreferenced...)
	}
	if refs(t, s, sha) != 0 || len(unref) != 2 {
		t.Fatalf("after collection: refs %d, unreferenced %v; want 0 and both blobs", refs(t, s, sha), unref)
	}
	// The paths are free again.
	ok(s.CreateGroup(NewGroup{Name: "acme", Path: "acme"}))(t)
}
