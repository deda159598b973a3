package store

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"registryd/store/kv"
)

func TestCreateRegistry(t *testing.T) {
	s, c := openTest(t)
	g := topGroup(t, s, "acme")
	other := topGroup(t, s, "other")
	sub := ok(s.CreateGroup(NewGroup{Name: "sub", Path: "sub", ParentID: g.ID}))(t)

	r := ok(s.CreateRegistry(g.ID, "main", "all of it"))(t)
	if r.ID == 0 || r.GroupID != g.ID || r.Name != "main" || r.Description != "all of it" {
		t.Fatalf("registry = %+v", r)
	}
	if want := c.Now().UTC().Truncate(time.Millisecond); !r.CreatedAt.Equal(want) || !r.UpdatedAt.Equal(want) {
		t.Fatalf("timestamps %v/%v, want %v (milliseconds)", r.CreatedAt, r.UpdatedAt, want)
	}
	if got := ok(s.Registry(r.ID))(t); got != r {
		t.Fatalf("Registry(%d) = %+v, want %+v", r.ID, got, r)
	}

	tests := []struct {
		name         string
		group        int64
		regName      string
		desc         string
		field, msg   string
		notFound     bool
		sameNameElse bool
	}{
		{name: "taken name", group: g.ID, regName: "main", field: "name", msg: "has already been taken"},
		{name: "blank name", group: g.ID, regName: "  ", field: "name", msg: "can't be blank"},
		{name: "name too long", group: g.ID, regName: strings.Repeat("n", 256), field: "name", msg: "is too long (maximum is 255 characters)"},
		{name: "description too long", group: g.ID, regName: "x", desc: strings.Repeat("d", 1025), field: "description", msg: "is too long (maximum is 1024 characters)"},
		{name: "subgroup", group: sub.ID, regName: "x", field: "group", msg: "must be a top level Group"},
		{name: "subgroup and a bad name", group: sub.ID, regName: strings.Repeat("n", 256), field: "name", msg: "is too long (maximum is 255 characters)"},
		{name: "unknown group", group: 9999, regName: "x", notFound: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := snapshot(t, s)
			_, err := s.CreateRegistry(tc.group, tc.regName, tc.desc)
			switch {
			case tc.notFound:
				var nf *NotFoundError
				if !errors.As(err, &nf) || nf.Resource != "Group" {
					t.Fatalf("err = %v, want Group not found", err)
				}
			default:
				wantValidation(t, err, tc.field, tc.msg)
			}
			if snapshot(t, s) != before {
				t.Fatal("a refused create changed the database")
			}
		})
	}

	// Names are unique per group, not globally; limits are exactly 255/1024.
	ok(s.CreateRegistry(other.ID, "main", ""))(t)
	ok(s.CreateRegistry(g.ID, strings.Repeat("n", 255), strings.Repeat("d", 1024)))(t)
	// Limits count characters, not bytes.
	ok(s.CreateRegistry(g.ID, strings.Repeat("é", 255), strings.Repeat("ü", 1024)))(t)
	_, err := s.CreateRegistry(g.ID, strings.Repeat("é", 256), "")
	wantValidation(t, err, "name", "is too long (maximum is 255 characters)")
}

func TestRegistryLimitPerGroup(t *testing.T) {
	s, _ := openTest(t)
	g := topGroup(t, s, "acme")
	for i := range MaxRegistriesPerGroup {
		ok(s.CreateRegistry(g.ID, fmt.Sprintf("r%d", i), ""))(t)
	}
	before := snapshot(t, s)
	_, err := s.CreateRegistry(g.ID, "one-too-many", "")
	wantValidation(t, err, "group", "20 registries is the maximum allowed per group.")
	if snapshot(t, s) != before {
		t.Fatal("the refused 21st registry changed the database")
	}
	if n := len(ok(s.GroupRegistries(g.ID))(t)); n != MaxRegistriesPerGroup {
		t.Fatalf("%d registries, want %d", n, MaxRegistriesPerGroup)
	}
	// Another group has its own budget.
	ok(s.CreateRegistry(topGroup(t, s, "other").ID, "r0", ""))(t)
}

func TestUpdateRegistry(t *testing.T) {
	s, c := openTest(t)
	g := topGroup(t, s, "acme")
	a := ok(s.CreateRegistry(g.ID, "a", "first"))(t)
	ok(s.CreateRegistry(g.ID, "b", ""))(t)
	c.Advance(1500 * time.Millisecond)

	name, desc := "a2", "second"
	got := ok(s.UpdateRegistry(a.ID, RegistryPatch{Name: &name, Description: &desc}))(t)
	if got.Name != "a2" || got.Description != "second" || !got.CreatedAt.Equal(a.CreatedAt) || !got.UpdatedAt.After(a.UpdatedAt) {
		t.Fatalf("updated = %+v (was %+v)", got, a)
	}
	// Keeping its own name is not a collision.
	ok(s.UpdateRegistry(a.ID, RegistryPatch{Name: &name}))(t)

	taken, long := "b", strings.Repeat("d", 1025)
	for _, tc := range []struct {
		name       string
		patch      RegistryPatch
		field, msg string
	}{
		{"taken name", RegistryPatch{Name: &taken}, "name", "has already been taken"},
		{"description too long", RegistryPatch{Description: &long}, "description", "is too long (maximum is 1024 characters)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := snapshot(t, s)
			_, err := s.UpdateRegistry(a.ID, tc.patch)
			wantValidation(t, err, tc.field, tc.msg)
			if snapshot(t, s) != before {
				t.Fatal("a refused update changed the database")
			}
		})
	}
	if _, err := s.UpdateRegistry(999, RegistryPatch{Name: &name}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown registry: err = %v", err)
	}
}

func TestDeleteRegistryIfUnmodifiedSince(t *testing.T) {
	s, c := openTest(t)
	g := topGroup(t, s, "acme")
	r := ok(s.CreateRegistry(g.ID, "main", ""))(t)
	up(t, s, r.ID, "https://a.example/maven")
	c.Advance(time.Hour)
	name := "renamed"
	r = ok(s.UpdateRegistry(r.ID, RegistryPatch{Name: &name}))(t)

	before := snapshot(t, s)
	earlier := r.UpdatedAt.Add(-time.Minute)
	if err := s.DeleteRegistry(r.ID, &earlier); !errors.Is(err, ErrPreconditionFailed) {
		t.Fatalf("If-Unmodified-Since before updated_at: err = %v, want ErrPreconditionFailed", err)
	}
	if snapshot(t, s) != before {
		t.Fatal("a refused delete changed the database")
	}
	// An HTTP date has whole seconds: the same second as updated_at is not "modified since".
	same := r.UpdatedAt.Truncate(time.Second)
	if err := s.DeleteRegistry(r.ID, &same); err != nil {
		t.Fatalf("If-Unmodified-Since in the same second: %v", err)
	}
	if _, err := s.Registry(r.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("registry still there: %v", err)
	}
	if err := s.DeleteRegistry(r.ID, nil); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second delete: err = %v, want not found", err)
	}
}

func TestPositionsAppendAtMaxPlusOne(t *testing.T) {
	s, _ := openTest(t)
	g := topGroup(t, s, "acme")
	r := ok(s.CreateRegistry(g.ID, "main", ""))(t)
	other := ok(s.CreateRegistry(g.ID, "other", ""))(t)

	a := up(t, s, r.ID, "https://a.example/m")
	b := up(t, s, r.ID, "https://b.example/m")
	if a.Assoc.Position != 1 || b.Assoc.Position != 2 {
		t.Fatalf("positions %d, %d; want 1, 2", a.Assoc.Position, b.Assoc.Position)
	}
	x := up(t, s, other.ID, "https://x.example/m")
	assoc := ok(s.Associate(r.ID, x.ID))(t)
	if assoc.Position != 3 || assoc.RegistryID != r.ID || assoc.UpstreamID != x.ID {
		t.Fatalf("association = %+v, want position 3", assoc)
	}
	// Appending after a delete uses the compacted maximum, not a stale counter.
	noErr(t, s.DeleteAssociation(a.Assoc.ID))
	c := up(t, s, r.ID, "https://c.example/m")
	if c.Assoc.Position != 3 {
		t.Fatalf("position after delete + create = %d, want 3", c.Assoc.Position)
	}
	wantOrder(t, s, r.ID, b.ID, x.ID, c.ID)
}

func TestMoveAssociation(t *testing.T) {
	tests := []struct {
		name string
		move int // index (0-based) of the upstream to move
		to   int
		want []int // resulting order, as indexes into the created upstreams
		pos  int   // the position the moved association reports
	}{
		{"last to first", 3, 1, []int{3, 0, 1, 2}, 1},
		{"first to last", 0, 4, []int{1, 2, 3, 0}, 4},
		{"middle down", 1, 3, []int{0, 2, 1, 3}, 3},
		{"middle up", 2, 1, []int{2, 0, 1, 3}, 1},
		{"same position does nothing", 2, 3, []int{0, 1, 2, 3}, 3},
		{"capped at the current maximum", 0, 20, []int{1, 2, 3, 0}, 4},
		{"below 1 goes first", 3, 0, []int{3, 0, 1, 2}, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := openTest(t)
			g := topGroup(t, s, "acme")
			r := ok(s.CreateRegistry(g.ID, "main", ""))(t)
			var ups []PositionedUpstream
			for i := range 4 {
				ups = append(ups, up(t, s, r.ID, fmt.Sprintf("https://u%d.example/m", i)))
			}
			// A second registry sharing one upstream must not be disturbed.
			r2 := ok(s.CreateRegistry(g.ID, "second", ""))(t)
			z := up(t, s, r2.ID, "https://z.example/m")
			ok(s.Associate(r2.ID, ups[tc.move].ID))(t)

			moved := ok(s.MoveAssociation(ups[tc.move].Assoc.ID, tc.to))(t)
			if moved.Position != tc.pos || moved.ID != ups[tc.move].Assoc.ID || moved.UpstreamID != ups[tc.move].ID {
				t.Fatalf("moved = %+v, want position %d", moved, tc.pos)
			}
			var want []int64
			for _, i := range tc.want {
				want = append(want, ups[i].ID)
			}
			wantOrder(t, s, r.ID, want...)
			wantOrder(t, s, r2.ID, z.ID, ups[tc.move].ID)
			if a := ok(s.Association(moved.ID))(t); a != moved {
				t.Fatalf("stored association %+v, returned %+v", a, moved)
			}
		})
	}
	t.Run("unknown association", func(t *testing.T) {
		s, _ := openTest(t)
		if _, err := s.MoveAssociation(42, 1); !errors.Is(err, ErrNotFound) {
			t.Fatalf("err = %v, want not found", err)
		}
	})
}

func TestDeleteAssociation(t *testing.T) {
	s, _ := openTest(t)
	g := topGroup(t, s, "acme")
	r := ok(s.CreateRegistry(g.ID, "main", ""))(t)
	r2 := ok(s.CreateRegistry(g.ID, "second", ""))(t)
	a := up(t, s, r.ID, "https://a.example/m")
	b := up(t, s, r.ID, "https://b.example/m")
	c := up(t, s, r.ID, "https://c.example/m")
	shared := ok(s.Associate(r2.ID, b.ID))(t)

	// Removing the middle one compacts; b is still in r2, so it survives.
	noErr(t, s.DeleteAssociation(b.Assoc.ID))
	wantOrder(t, s, r.ID, a.ID, c.ID)
	if _, err := s.Upstream(b.ID); err != nil {
		t.Fatalf("shared upstream deleted with one of its associations: %v", err)
	}
	wantOrder(t, s, r2.ID, b.ID)

	// Removing an upstream's last association deletes the upstream itself.
	noErr(t, s.DeleteAssociation(shared.ID))
	if _, err := s.Upstream(b.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("orphaned upstream: err = %v, want not found", err)
	}
	if ups, total := allGroupUpstreams(t, s, g.ID); total != 2 || ups[0].ID != a.ID || ups[1].ID != c.ID {
		t.Fatalf("group upstreams = %v (total %d), want a and c", ups, total)
	}
	noErr(t, s.DeleteAssociation(a.Assoc.ID))
	wantOrder(t, s, r.ID, c.ID)
	if err := s.DeleteAssociation(a.Assoc.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second delete: err = %v", err)
	}
}

func allGroupUpstreams(t testing.TB, s *Store, group int64) ([]Upstream, int) {
	t.Helper()
	ups, total, err := s.GroupUpstreams(group, "", 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	return ups, total
}

func TestDeleteUpstreamCompactsEveryRegistry(t *testing.T) {
	s, _ := openTest(t)
	g := topGroup(t, s, "acme")
	r1 := ok(s.CreateRegistry(g.ID, "one", ""))(t)
	r2 := ok(s.CreateRegistry(g.ID, "two", ""))(t)
	a := up(t, s, r1.ID, "https://a.example/m")
	x := up(t, s, r1.ID, "https://x.example/m")
	b := up(t, s, r1.ID, "https://b.example/m")
	c := up(t, s, r2.ID, "https://c.example/m")
	ok(s.Associate(r2.ID, x.ID))(t)
	d := up(t, s, r2.ID, "https://d.example/m")
	wantOrder(t, s, r2.ID, c.ID, x.ID, d.ID)

	noErr(t, s.DeleteUpstream(x.ID))
	wantOrder(t, s, r1.ID, a.ID, b.ID)
	wantOrder(t, s, r2.ID, c.ID, d.ID)
	if _, err := s.UpstreamAssociations(x.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("associations of a deleted upstream: %v", err)
	}
	if err := s.DeleteUpstream(x.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second delete: err = %v", err)
	}
}

func TestDeleteRegistryKeepsSharedUpstreams(t *testing.T) {
	s, _ := openTest(t)
	g := topGroup(t, s, "acme")
	r := ok(s.CreateRegistry(g.ID, "doomed", ""))(t)
	keep := ok(s.CreateRegistry(g.ID, "keep", ""))(t)
	own1 := up(t, s, r.ID, "https://own1.example/m")
	shared := up(t, s, r.ID, "https://shared.example/m")
	own2 := up(t, s, r.ID, "https://own2.example/m")
	k := up(t, s, keep.ID, "https://k.example/m")
	ok(s.Associate(keep.ID, shared.ID))(t)
	for _, u := range []int64{own1.ID, shared.ID, own2.ID} {
		ok(s.PutCacheEntry(CacheEntry{UpstreamID: u, RelativePath: "/a/b/1/b-1.jar", SHA256: fmt.Sprintf("%064d", u), Size: 10}))(t)
	}

	excl := ok(s.exclusiveUpstreams(r.ID))(t)
	if fmt.Sprint(excl) != fmt.Sprint([]int64{own1.ID, own2.ID}) {
		t.Fatalf("exclusiveUpstreams = %v, want %v", excl, []int64{own1.ID, own2.ID})
	}

	noErr(t, s.DeleteRegistry(r.ID, nil))
	for _, u := range []int64{own1.ID, own2.ID} {
		if _, err := s.Upstream(u); !errors.Is(err, ErrNotFound) {
			t.Fatalf("exclusive upstream %d survived: %v", u, err)
		}
		if _, err := s.CacheEntry(u, "/a/b/1/b-1.jar"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("cache entry of exclusive upstream %d still live: %v", u, err)
		}
	}
	if _, err := s.CacheEntry(shared.ID, "/a/b/1/b-1.jar"); err != nil {
		t.Fatalf("cache entry of the shared upstream lost: %v", err)
	}
	wantOrder(t, s, keep.ID, k.ID, shared.ID)
	if st := s.CacheStats(); st.Entries != 1 || st.Pending != 2 {
		t.Fatalf("cache stats %+v, want 1 live and 2 pending destruction", st)
	}
	if _, err := s.Registry(r.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("registry survived: %v", err)
	}
	if regs := ok(s.GroupRegistries(g.ID))(t); len(regs) != 1 || regs[0].ID != keep.ID {
		t.Fatalf("group registries = %+v", regs)
	}
}

func TestPurgeRegistryCacheExclusiveOnly(t *testing.T) {
	s, _ := openTest(t)
	g := topGroup(t, s, "acme")
	r := ok(s.CreateRegistry(g.ID, "main", ""))(t)
	r2 := ok(s.CreateRegistry(g.ID, "other", ""))(t)
	own := up(t, s, r.ID, "https://own.example/m")
	shared := up(t, s, r.ID, "https://shared.example/m")
	ok(s.Associate(r2.ID, shared.ID))(t)
	for _, u := range []int64{own.ID, shared.ID} {
		for _, p := range []string{"/x/1/x-1.pom", "/x/1/x-1.jar"} {
			ok(s.PutCacheEntry(CacheEntry{UpstreamID: u, RelativePath: p, SHA256: "ab"}))(t)
		}
	}
	if n := ok(s.PurgeRegistryCache(r.ID))(t); n != 2 {
		t.Fatalf("purged %d entries, want the 2 of the exclusive upstream", n)
	}
	if left, total := allCacheEntries(t, s, own.ID); total != 0 || len(left) != 0 {
		t.Fatalf("exclusive upstream still lists %d entries", total)
	}
	if _, total := allCacheEntries(t, s, shared.ID); total != 2 {
		t.Fatalf("shared upstream lists %d entries, want 2", total)
	}
	if n := ok(s.PurgeUpstreamCache(shared.ID))(t); n != 2 {
		t.Fatalf("upstream purge: %d, want 2", n)
	}
}

func allCacheEntries(t testing.TB, s *Store, upstream int64) ([]CacheEntry, int) {
	t.Helper()
	e, total, err := s.ListCacheEntries(upstream, "", 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	return e, total
}

func TestUpstreamLimitPerRegistry(t *testing.T) {
	s, _ := openTest(t)
	g := topGroup(t, s, "acme")
	r := ok(s.CreateRegistry(g.ID, "main", ""))(t)
	r2 := ok(s.CreateRegistry(g.ID, "other", ""))(t)
	for i := range MaxUpstreamsPerRegistry {
		up(t, s, r.ID, fmt.Sprintf("https://u%d.example/m", i))
	}
	spare := up(t, s, r2.ID, "https://spare.example/m")

	before := snapshot(t, s)
	_, err := s.CreateUpstream(r.ID, NewUpstream{URL: "https://late.example/m", Name: "late"})
	wantValidation(t, err, "registry_upstreams.position", "must be less than or equal to 20")
	_, err = s.Associate(r.ID, spare.ID)
	wantValidation(t, err, "registry_upstreams.position", "must be less than or equal to 20")
	if snapshot(t, s) != before {
		t.Fatal("a refused 21st upstream changed the database")
	}
	if n := len(upstreamOrder(t, s, r.ID)); n != MaxUpstreamsPerRegistry {
		t.Fatalf("%d upstreams, want %d", n, MaxUpstreamsPerRegistry)
	}
}

func TestAssociate(t *testing.T) {
	s, _ := openTest(t)
	g := topGroup(t, s, "acme")
	og := topGroup(t, s, "other")
	r := ok(s.CreateRegistry(g.ID, "main", ""))(t)
	r2 := ok(s.CreateRegistry(g.ID, "two", ""))(t)
	foreignReg := ok(s.CreateRegistry(og.ID, "main", ""))(t)
	a := up(t, s, r.ID, "https://a.example/m")
	foreign := up(t, s, foreignReg.ID, "https://f.example/m")

	tests := []struct {
		name     string
		reg, up  int64
		check    func(t *testing.T, err error)
		resource string
	}{
		{"already linked", r.ID, a.ID, func(t *testing.T, err error) {
			wantValidation(t, err, "upstream_id", "has already been taken")
		}, ""},
		{"upstream of another group", r2.ID, foreign.ID, nil, "Upstream"},
		{"unknown upstream", r2.ID, 999, nil, "Upstream"},
		{"unknown registry", 999, a.ID, nil, "Registry"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := snapshot(t, s)
			_, err := s.Associate(tc.reg, tc.up)
			if tc.check != nil {
				tc.check(t, err)
			} else {
				var nf *NotFoundError
				if !errors.As(err, &nf) || nf.Resource != tc.resource {
					t.Fatalf("err = %v, want %s not found", err, tc.resource)
				}
			}
			if snapshot(t, s) != before {
				t.Fatal("a refused association changed the database")
			}
		})
	}
	assocs := ok(s.UpstreamAssociations(a.ID))(t)
	if len(assocs) != 1 || assocs[0].RegistryID != r.ID {
		t.Fatalf("associations of a = %+v", assocs)
	}
}

func TestCreateUpstreamValidation(t *testing.T) {
	s, _ := openTest(t)
	g := topGroup(t, s, "acme")
	r := ok(s.CreateRegistry(g.ID, "main", ""))(t)
	neg, zero, big := -1, 0, 1000
	tests := []struct {
		name       string
		n          NewUpstream
		field, msg string
	}{
		{"blank url", NewUpstream{Name: "x"}, "url", "can't be blank"},
		{"url too long", NewUpstream{URL: "https://e.example/" + strings.Repeat("p", 240), Name: "x"}, "url", "is too long (maximum is 255 characters)"},
		{"blank name", NewUpstream{URL: "https://e.example/m"}, "name", "can't be blank"},
		{"name too long", NewUpstream{URL: "https://e.example/m", Name: strings.Repeat("n", 256)}, "name", "is too long (maximum is 255 characters)"},
		{"description too long", NewUpstream{URL: "https://e.example/m", Name: "x", Description: strings.Repeat("d", 1025)}, "description", "is too long (maximum is 1024 characters)"},
		{"negative cache validity", NewUpstream{URL: "https://e.example/m", Name: "x", CacheValidityHours: &neg}, "cache_validity_hours", "must be greater than or equal to 0"},
		{"zero metadata validity", NewUpstream{URL: "https://e.example/m", Name: "x", MetadataCacheValidityHours: &zero}, "metadata_cache_validity_hours", "must be greater than 0"},
		{"username alone", NewUpstream{URL: "https://e.example/m", Name: "x", Username: "u"}, "password", "can't be blank"},
		{"password alone", NewUpstream{URL: "https://e.example/m", Name: "x", Password: "p"}, "username", "can't be blank"},
		{"username too long", NewUpstream{URL: "https://e.example/m", Name: "x", Username: strings.Repeat("u", 511), Password: "p"}, "username", "is too long (maximum is 510 characters)"},
		{"password too long", NewUpstream{URL: "https://e.example/m", Name: "x", Username: "u", Password: strings.Repeat("p", 511)}, "password", "is too long (maximum is 510 characters)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := snapshot(t, s)
			_, err := s.CreateUpstream(r.ID, tc.n)
			wantValidation(t, err, tc.field, tc.msg)
			if snapshot(t, s) != before {
				t.Fatal("a refused create changed the database")
			}
		})
	}

	t.Run("defaults", func(t *testing.T) {
		u := ok(s.CreateUpstream(r.ID, NewUpstream{URL: "https://d.example/m", Name: "d"}))(t)
		if u.CacheValidityHours != 24 || u.MetadataCacheValidityHours != 24 || u.GroupID != g.ID {
			t.Fatalf("defaults: %+v", u.Upstream)
		}
	})
	t.Run("explicit values", func(t *testing.T) {
		u := ok(s.CreateUpstream(r.ID, NewUpstream{URL: "https://v.example/m", Name: "v", CacheValidityHours: &zero, MetadataCacheValidityHours: &big}))(t)
		if u.CacheValidityHours != 0 || u.MetadataCacheValidityHours != 1000 {
			t.Fatalf("values: %+v", u.Upstream)
		}
	})
	t.Run("maven central never re-checks", func(t *testing.T) {
		u := ok(s.CreateUpstream(r.ID, NewUpstream{URL: "https://repo1.maven.org/maven2", Name: "central", CacheValidityHours: &big}))(t)
		if u.CacheValidityHours != 0 || u.MetadataCacheValidityHours != 24 {
			t.Fatalf("central: %+v", u.Upstream)
		}
	})
	t.Run("unknown registry", func(t *testing.T) {
		if _, err := s.CreateUpstream(999, NewUpstream{URL: "https://n.example/m", Name: "n"}); !errors.Is(err, ErrNotFound) {
			t.Fatalf("err = %v", err)
		}
	})
}

func TestDuplicateUpstreamRefused(t *testing.T) {
	s, _ := openTest(t)
	g := topGroup(t, s, "acme")
	other := topGroup(t, s, "other")
	r := ok(s.CreateRegistry(g.ID, "main", ""))(t)
	r2 := ok(s.CreateRegistry(g.ID, "second", ""))(t)
	ro := ok(s.CreateRegistry(other.ID, "main", ""))(t)
	const url = "https://repo.example/maven"
	ok(s.CreateUpstream(r.ID, NewUpstream{URL: url, Name: "anon"}))(t)
	ok(s.CreateUpstream(r.ID, NewUpstream{URL: url, Name: "bot", Username: "bot", Password: "s3cret"}))(t)

	tests := []struct {
		name      string
		reg       int64
		n         NewUpstream
		duplicate bool
	}{
		{"same url anonymous, same registry", r.ID, NewUpstream{URL: url, Name: "again"}, true},
		{"same url anonymous, other registry of the group", r2.ID, NewUpstream{URL: url, Name: "again"}, true},
		{"same url and credentials", r2.ID, NewUpstream{URL: url, Name: "again", Username: "bot", Password: "s3cret"}, true},
		{"same user, other password", r2.ID, NewUpstream{URL: url, Name: "p2", Username: "bot", Password: "other"}, false},
		{"other user, same password", r2.ID, NewUpstream{URL: url, Name: "u2", Username: "bot2", Password: "s3cret"}, false},
		{"same url in another group", ro.ID, NewUpstream{URL: url, Name: "elsewhere"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := snapshot(t, s)
			_, err := s.CreateUpstream(tc.reg, tc.n)
			if tc.duplicate {
				wantValidation(t, err, "group", "already has a remote upstream with the same url and credentials")
				if snapshot(t, s) != before {
					t.Fatal("a refused duplicate changed the database")
				}
				return
			}
			if err != nil {
				t.Fatalf("not a duplicate, but: %v", err)
			}
		})
	}
}

func TestUpdateUpstream(t *testing.T) {
	str := func(s string) *string { return &s }
	num := func(n int) *int { return &n }
	tests := []struct {
		name      string
		patch     UpstreamPatch
		wantURL   string
		wantUser  string
		wantPass  string
		wantCache int
		field     string // a validation failure on this field, when set
		msg       string
	}{
		{name: "name only keeps credentials", patch: UpstreamPatch{Name: str("renamed")},
			wantURL: "https://a.example/m", wantUser: "bot", wantPass: "pw", wantCache: 24},
		{name: "new url without credentials clears them", patch: UpstreamPatch{URL: str("https://moved.example/m")},
			wantURL: "https://moved.example/m", wantUser: "", wantPass: "", wantCache: 24},
		{name: "same url is not a change", patch: UpstreamPatch{URL: str("https://a.example/m")},
			wantURL: "https://a.example/m", wantUser: "bot", wantPass: "pw", wantCache: 24},
		{name: "new url with new credentials", patch: UpstreamPatch{URL: str("https://moved.example/m"), Username: str("u2"), Password: str("p2")},
			wantURL: "https://moved.example/m", wantUser: "u2", wantPass: "p2", wantCache: 24},
		{name: "new credentials only", patch: UpstreamPatch{Username: str("u2"), Password: str("p2")},
			wantURL: "https://a.example/m", wantUser: "u2", wantPass: "p2", wantCache: 24},
		{name: "clearing both credentials", patch: UpstreamPatch{Username: str(""), Password: str("")},
			wantURL: "https://a.example/m", wantCache: 24},
		{name: "cache validity zero", patch: UpstreamPatch{CacheValidityHours: num(0)},
			wantURL: "https://a.example/m", wantUser: "bot", wantPass: "pw", wantCache: 0},
		{name: "duplicate of the anonymous sibling", patch: UpstreamPatch{Username: str(""), Password: str("")},
			field: "group", msg: "already has a remote upstream with the same url and credentials"},
		{name: "moving onto the sibling's url anonymously", patch: UpstreamPatch{URL: str("https://b.example/m")},
			field: "group", msg: "already has a remote upstream with the same url and credentials"},
		{name: "username alone", patch: UpstreamPatch{Username: str("")},
			field: "username", msg: "can't be blank"},
		{name: "metadata validity zero", patch: UpstreamPatch{MetadataCacheValidityHours: num(0)},
			field: "metadata_cache_validity_hours", msg: "must be greater than 0"},
		{name: "blank name", patch: UpstreamPatch{Name: str(" ")}, field: "name", msg: "can't be blank"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, c := openTest(t)
			g := topGroup(t, s, "acme")
			r := ok(s.CreateRegistry(g.ID, "main", ""))(t)
			u := ok(s.CreateUpstream(r.ID, NewUpstream{URL: "https://a.example/m", Name: "a", Username: "bot", Password: "pw"}))(t)
			ok(s.CreateUpstream(r.ID, NewUpstream{URL: "https://b.example/m", Name: "b"}))(t)
			if tc.field == "group" && tc.patch.URL == nil {
				// Make the anonymous twin of u exist for the credential case.
				ok(s.CreateUpstream(r.ID, NewUpstream{URL: "https://a.example/m", Name: "twin"}))(t)
			}
			c.Advance(time.Second)
			before := snapshot(t, s)
			got, err := s.UpdateUpstream(u.ID, tc.patch)
			if tc.field != "" {
				wantValidation(t, err, tc.field, tc.msg)
				if snapshot(t, s) != before {
					t.Fatal("a refused update changed the database")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			stored := ok(s.Upstream(u.ID))(t)
			for _, v := range []Upstream{got, stored} {
				if v.URL != tc.wantURL || v.Username != tc.wantUser || v.Password != tc.wantPass || v.CacheValidityHours != tc.wantCache {
					t.Fatalf("upstream = url %q user %q pass %q cache %d; want %q %q %q %d",
						v.URL, v.Username, v.Password, v.CacheValidityHours, tc.wantURL, tc.wantUser, tc.wantPass, tc.wantCache)
				}
			}
			if !stored.UpdatedAt.After(u.UpdatedAt) || !stored.CreatedAt.Equal(u.CreatedAt) {
				t.Fatalf("timestamps: created %v updated %v (was %v)", stored.CreatedAt, stored.UpdatedAt, u.UpdatedAt)
			}
		})
	}
	t.Run("unknown upstream", func(t *testing.T) {
		s, _ := openTest(t)
		name := "x"
		if _, err := s.UpdateUpstream(9, UpstreamPatch{Name: &name}); !errors.Is(err, ErrNotFound) {
			t.Fatalf("err = %v", err)
		}
	})
}

func TestGroupUpstreamsFilterAndPages(t *testing.T) {
	s, _ := openTest(t)
	g := topGroup(t, s, "acme")
	r := ok(s.CreateRegistry(g.ID, "main", ""))(t)
	names := []string{"Central", "central-mirror", "internal", "CENTRAL snapshots", "other"}
	for i, n := range names {
		ok(s.CreateUpstream(r.ID, NewUpstream{URL: fmt.Sprintf("https://u%d.example/m", i), Name: n}))(t)
	}
	tests := []struct {
		filter        string
		offset, limit int
		want          []string
		total         int
	}{
		{"", 0, 100, names, 5},
		{"cent", 0, 100, []string{"Central", "central-mirror", "CENTRAL snapshots"}, 3},
		{"cent", 1, 1, []string{"central-mirror"}, 3},
		{"cent", 3, 10, nil, 3},
		{"nothing", 0, 10, nil, 0},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%q@%d+%d", tc.filter, tc.offset, tc.limit), func(t *testing.T) {
			got, total, err := s.GroupUpstreams(g.ID, tc.filter, tc.offset, tc.limit)
			if err != nil {
				t.Fatal(err)
			}
			var gotNames []string
			for _, u := range got {
				gotNames = append(gotNames, u.Name)
				if u.Password != "" {
					t.Fatal("group list carries a password")
				}
			}
			if fmt.Sprint(gotNames) != fmt.Sprint(tc.want) || total != tc.total {
				t.Fatalf("got %v total %d, want %v total %d", gotNames, total, tc.want, tc.total)
			}
		})
	}
	if _, _, err := s.GroupUpstreams(999, "", 0, 10); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown group: %v", err)
	}
}

func TestRegistryMergeMetadata(t *testing.T) {
	s, _ := openTest(t)
	g := topGroup(t, s, "acme")
	r := ok(s.CreateRegistry(g.ID, "main", ""))(t)
	if !r.MergeMetadata() || !ok(s.Registry(r.ID))(t).MergeMetadata() {
		t.Fatal("a new registry does not merge metadata")
	}
	off, on := false, true
	r2 := ok(s.CreateRegistryFrom(g.ID, NewRegistry{Name: "first-answer", MergeMetadata: &off}))(t)
	if r2.MergeMetadata() || ok(s.Registry(r2.ID))(t).MergeMetadata() {
		t.Fatal("merge_metadata false was not kept")
	}
	if r3 := ok(s.CreateRegistryFrom(g.ID, NewRegistry{Name: "explicit", MergeMetadata: &on}))(t); !r3.MergeMetadata() {
		t.Fatal("merge_metadata true was not kept")
	}
	if _, err := s.CreateRegistryFrom(g.ID, NewRegistry{Name: "main"}); err == nil {
		t.Fatal("CreateRegistryFrom skipped the name check")
	}

	// Switching changes the cache generation (the proxy reloads the
	// registry); renaming does not.
	gen := s.CacheGeneration()
	name := "renamed"
	if got := ok(s.UpdateRegistry(r.ID, RegistryPatch{Name: &name}))(t); !got.MergeMetadata() || s.CacheGeneration() != gen {
		t.Fatalf("rename: %+v, generation moved %v", got, s.CacheGeneration() != gen)
	}
	if got := ok(s.UpdateRegistry(r.ID, RegistryPatch{MergeMetadata: &off}))(t); got.MergeMetadata() || got.Name != name {
		t.Fatalf("switch off: %+v", got)
	}
	if s.CacheGeneration() == gen {
		t.Fatal("switching the merge off did not change the cache generation")
	}
	if ok(s.Registry(r.ID))(t).MergeMetadata() {
		t.Fatal("switch off not stored")
	}
	if !ok(s.UpdateRegistry(r.ID, RegistryPatch{MergeMetadata: &on}))(t).MergeMetadata() {
		t.Fatal("switch on")
	}

	// A record written before the switch existed reads as merging.
	noErr(t, s.db.Update(func(tx kv.Tx) error {
		return tx.Bucket(bktRegistries).Put(itob(r2.ID), []byte(fmt.Sprintf(
			`{"id":%d,"group_id":%d,"name":"old","description":"","created_at":"2026-01-01T00:00:00Z","updated_at":"2026-01-01T00:00:00Z"}`,
			r2.ID, g.ID)))
	}))
	if old := ok(s.Registry(r2.ID))(t); !old.MergeMetadata() || old.Name != "old" {
		t.Fatalf("old record: %+v", old)
	}
	// And a merging registry is stored without the field.
	if rawContains(t, s, []byte("metadata_merge_off")) {
		t.Fatal("a merging registry stored metadata_merge_off")
	}
}
