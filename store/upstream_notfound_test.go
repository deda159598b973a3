package store

import (
	"fmt"
	"testing"
)

func minutesPtr(n int) *int { return &n }

// minutes renders an optional override for messages: "nil" or the number.
func showMinutes(p *int) string {
	if p == nil {
		return "nil"
	}
	return fmt.Sprint(*p)
}

func TestUpstreamNotFoundCacheMinutes(t *testing.T) {
	s, _ := openTest(t)
	g := topGroup(t, s, "acme")
	r := ok(s.CreateRegistry(g.ID, "main", ""))(t)
	fields := []string{"not_found_cache_minutes", "metadata_not_found_cache_minutes"}

	t.Run("create", func(t *testing.T) {
		tests := []struct {
			val *int
			msg string // the validation message, "" when valid
		}{
			{nil, ""}, {minutesPtr(0), ""}, {minutesPtr(1), ""}, {minutesPtr(60), ""}, {minutesPtr(maxNotFoundCacheMinutes), ""},
			{minutesPtr(-1), "must be greater than or equal to 0"},
			{minutesPtr(maxNotFoundCacheMinutes + 1), "must be less than or equal to 10080"},
		}
		for i, tc := range tests {
			for f, field := range fields {
				t.Run(fmt.Sprint(field, "=", showMinutes(tc.val)), func(t *testing.T) {
					before := snapshot(t, s)
					n := NewUpstream{URL: fmt.Sprintf("https://c%d-%d.example/m", i, f), Name: "c"}
					if f == 0 {
						n.NotFoundCacheMinutes = tc.val
					} else {
						n.MetadataNotFoundCacheMinutes = tc.val
					}
					u, err := s.CreateUpstream(r.ID, n)
					if tc.msg != "" {
						wantValidation(t, err, field, tc.msg)
						if snapshot(t, s) != before {
							t.Fatal("a refused create changed the database")
						}
						return
					}
					noErr(t, err)
					stored := ok(s.Upstream(u.ID))(t)
					got, other := stored.NotFoundCacheMinutes, stored.MetadataNotFoundCacheMinutes
					if f == 1 {
						got, other = other, got
					}
					if showMinutes(got) != showMinutes(tc.val) || other != nil {
						t.Fatalf("stored %s / %s, want %s / nil", showMinutes(got), showMinutes(other), showMinutes(tc.val))
					}
					if tc.val != nil && got == tc.val {
						t.Fatal("the stored upstream shares the caller's int")
					}
				})
			}
		}
	})

	t.Run("both wrong at once are both reported", func(t *testing.T) {
		_, err := s.CreateUpstream(r.ID, NewUpstream{URL: "https://both.example/m", Name: "b",
			NotFoundCacheMinutes: minutesPtr(-5), MetadataNotFoundCacheMinutes: minutesPtr(20000)})
		wantValidation(t, err, "not_found_cache_minutes", "must be greater than or equal to 0")
		wantValidation(t, err, "metadata_not_found_cache_minutes", "must be less than or equal to 10080")
	})

	t.Run("update sets, keeps, clears and refuses", func(t *testing.T) {
		u := ok(s.CreateUpstream(r.ID, NewUpstream{URL: "https://u.example/m", Name: "u"}))(t)
		set := func(n int) **int { p := minutesPtr(n); return &p }
		clear := func() **int { var p *int; return &p }
		str := func(s string) *string { return &s }
		steps := []struct {
			name       string
			patch      UpstreamPatch
			art, meta  string // stored afterwards
			bad, field string
		}{
			{"set artifacts alone", UpstreamPatch{NotFoundCacheMinutes: set(30)}, "30", "nil", "", ""},
			{"set metadata alone", UpstreamPatch{MetadataNotFoundCacheMinutes: set(2)}, "30", "2", "", ""},
			{"another field keeps them", UpstreamPatch{Name: str("renamed")}, "30", "2", "", ""},
			{"a new url keeps them", UpstreamPatch{URL: str("https://moved.example/m")}, "30", "2", "", ""},
			{"zero", UpstreamPatch{NotFoundCacheMinutes: set(0)}, "0", "2", "", ""},
			{"the maximum", UpstreamPatch{MetadataNotFoundCacheMinutes: set(10080)}, "0", "10080", "", ""},
			{"negative", UpstreamPatch{NotFoundCacheMinutes: set(-1)}, "0", "10080",
				"must be greater than or equal to 0", "not_found_cache_minutes"},
			{"too long", UpstreamPatch{MetadataNotFoundCacheMinutes: set(10081)}, "0", "10080",
				"must be less than or equal to 10080", "metadata_not_found_cache_minutes"},
			{"clear artifacts", UpstreamPatch{NotFoundCacheMinutes: clear()}, "nil", "10080", "", ""},
			{"clear metadata", UpstreamPatch{MetadataNotFoundCacheMinutes: clear()}, "nil", "nil", "", ""},
			{"clear what is clear", UpstreamPatch{NotFoundCacheMinutes: clear()}, "nil", "nil", "", ""},
		}
		for _, st := range steps {
			before := snapshot(t, s)
			got, err := s.UpdateUpstream(u.ID, st.patch)
			if st.bad != "" {
				wantValidation(t, err, st.field, st.bad)
				if snapshot(t, s) != before {
					t.Fatalf("%s: a refused update changed the database", st.name)
				}
			} else if err != nil {
				t.Fatalf("%s: %v", st.name, err)
			} else if showMinutes(got.NotFoundCacheMinutes) != st.art || showMinutes(got.MetadataNotFoundCacheMinutes) != st.meta {
				t.Fatalf("%s: returned %s / %s", st.name, showMinutes(got.NotFoundCacheMinutes), showMinutes(got.MetadataNotFoundCacheMinutes))
			}
			stored := ok(s.Upstream(u.ID))(t)
			if showMinutes(stored.NotFoundCacheMinutes) != st.art || showMinutes(stored.MetadataNotFoundCacheMinutes) != st.meta {
				t.Fatalf("%s: stored %s / %s, want %s / %s", st.name,
					showMinutes(stored.NotFoundCacheMinutes), showMinutes(stored.MetadataNotFoundCacheMinutes), st.art, st.meta)
			}
		}
	})

	t.Run("an update voids the negative cache", func(t *testing.T) {
		u := ok(s.CreateUpstream(r.ID, NewUpstream{URL: "https://e.example/m", Name: "e"}))(t)
		before := s.ForgetEpoch(u.ID)
		p := minutesPtr(5)
		ok(s.UpdateUpstream(u.ID, UpstreamPatch{NotFoundCacheMinutes: &p}))(t)
		if s.ForgetEpoch(u.ID) == before {
			t.Fatal("changing the override kept what the old TTL remembered")
		}
	})

	t.Run("listed and persisted across a reopen", func(t *testing.T) {
		dir := t.TempDir()
		s, err := openAt(t, dir, Options{SecretKey: testKey})
		noErr(t, err)
		g := topGroup(t, s, "acme")
		r := ok(s.CreateRegistry(g.ID, "main", ""))(t)
		u := ok(s.CreateUpstream(r.ID, NewUpstream{URL: "https://p.example/m", Name: "p",
			NotFoundCacheMinutes: minutesPtr(0), MetadataNotFoundCacheMinutes: minutesPtr(15)}))(t)
		plain := ok(s.CreateUpstream(r.ID, NewUpstream{URL: "https://q.example/m", Name: "q"}))(t)
		noErr(t, s.Close())
		s, err = openAt(t, dir, Options{SecretKey: testKey})
		noErr(t, err)
		defer s.Close()
		check := func(where string, got Upstream, art, meta string) {
			t.Helper()
			if showMinutes(got.NotFoundCacheMinutes) != art || showMinutes(got.MetadataNotFoundCacheMinutes) != meta {
				t.Fatalf("%s: %s / %s, want %s / %s", where, showMinutes(got.NotFoundCacheMinutes),
					showMinutes(got.MetadataNotFoundCacheMinutes), art, meta)
			}
		}
		check("get", ok(s.Upstream(u.ID))(t), "0", "15")
		check("get plain", ok(s.Upstream(plain.ID))(t), "nil", "nil")
		list := ok(s.RegistryUpstreams(r.ID))(t)
		groupList, _, err := s.GroupUpstreams(g.ID, "", 0, 10)
		noErr(t, err)
		if len(list) != 2 || len(groupList) != 2 {
			t.Fatalf("lists: %d / %d", len(list), len(groupList))
		}
		check("registry list", list[0].Upstream, "0", "15")
		check("registry list plain", list[1].Upstream, "nil", "nil")
		check("group list", groupList[0], "0", "15")
		check("group list plain", groupList[1], "nil", "nil")
	})
}
