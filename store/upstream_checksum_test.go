package store

import (
	"errors"
	"testing"
)

func TestUpstreamChecksumPolicy(t *testing.T) {
	str := func(s string) *string { return &s }
	s, _ := openTest(t)
	g := topGroup(t, s, "acme")
	r := ok(s.CreateRegistry(g.ID, "main", ""))(t)

	t.Run("create", func(t *testing.T) {
		tests := []struct {
			policy string
			ok     bool
		}{
			{"", true}, {ChecksumVerify, true}, {ChecksumRequire, true}, {ChecksumOff, true},
			{"strict", false}, {"Verify", false}, {" off", false},
		}
		for i, tc := range tests {
			t.Run(tc.policy, func(t *testing.T) {
				before := snapshot(t, s)
				url := "https://c" + string(rune('a'+i)) + ".example/m"
				u, err := s.CreateUpstream(r.ID, NewUpstream{URL: url, Name: "c", ChecksumPolicy: tc.policy})
				if !tc.ok {
					wantValidation(t, err, "checksum_policy", "is invalid")
					if snapshot(t, s) != before {
						t.Fatal("a refused create changed the database")
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				if u.ChecksumPolicy != tc.policy {
					t.Fatalf("created with %q", u.ChecksumPolicy)
				}
				if got := ok(s.Upstream(u.ID))(t).ChecksumPolicy; got != tc.policy {
					t.Fatalf("stored %q, want %q", got, tc.policy)
				}
			})
		}
	})

	t.Run("update sets, keeps, clears and refuses", func(t *testing.T) {
		u := ok(s.CreateUpstream(r.ID, NewUpstream{URL: "https://u.example/m", Name: "u"}))(t)
		steps := []struct {
			name  string
			patch UpstreamPatch
			want  string
			bad   bool
		}{
			{"set require", UpstreamPatch{ChecksumPolicy: str(ChecksumRequire)}, ChecksumRequire, false},
			{"another field keeps it", UpstreamPatch{Name: str("renamed")}, ChecksumRequire, false},
			{"a new url keeps it", UpstreamPatch{URL: str("https://moved.example/m")}, ChecksumRequire, false},
			{"set off", UpstreamPatch{ChecksumPolicy: str(ChecksumOff)}, ChecksumOff, false},
			{"invalid", UpstreamPatch{ChecksumPolicy: str("none")}, ChecksumOff, true},
			{"empty clears", UpstreamPatch{ChecksumPolicy: str("")}, "", false},
		}
		for _, st := range steps {
			before := snapshot(t, s)
			got, err := s.UpdateUpstream(u.ID, st.patch)
			if st.bad {
				wantValidation(t, err, "checksum_policy", "is invalid")
				if snapshot(t, s) != before {
					t.Fatalf("%s: a refused update changed the database", st.name)
				}
			} else if err != nil {
				t.Fatalf("%s: %v", st.name, err)
			} else if got.ChecksumPolicy != st.want {
				t.Fatalf("%s: returned %q, want %q", st.name, got.ChecksumPolicy, st.want)
			}
			if stored := ok(s.Upstream(u.ID))(t).ChecksumPolicy; stored != st.want {
				t.Fatalf("%s: stored %q, want %q", st.name, stored, st.want)
			}
		}
	})

	t.Run("listed and persisted across a reopen", func(t *testing.T) {
		dir := t.TempDir()
		s, err := openAt(t, dir, Options{SecretKey: testKey})
		if err != nil {
			t.Fatal(err)
		}
		g := topGroup(t, s, "acme")
		r := ok(s.CreateRegistry(g.ID, "main", ""))(t)
		u := ok(s.CreateUpstream(r.ID, NewUpstream{URL: "https://p.example/m", Name: "p", ChecksumPolicy: ChecksumRequire}))(t)
		noErr(t, s.Close())
		s, err = openAt(t, dir, Options{SecretKey: testKey})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if got := ok(s.Upstream(u.ID))(t).ChecksumPolicy; got != ChecksumRequire {
			t.Fatalf("after reopen: %q", got)
		}
		list := ok(s.RegistryUpstreams(r.ID))(t)
		groupList, _, err := s.GroupUpstreams(g.ID, "", 0, 10)
		noErr(t, err)
		if len(list) != 1 || list[0].ChecksumPolicy != ChecksumRequire || len(groupList) != 1 || groupList[0].ChecksumPolicy != ChecksumRequire {
			t.Fatalf("lists: %+v / %+v", list, groupList)
		}
	})

	t.Run("unknown upstream", func(t *testing.T) {
		if _, err := s.UpdateUpstream(999, UpstreamPatch{ChecksumPolicy: str(ChecksumOff)}); !errors.Is(err, ErrNotFound) {
			t.Fatalf("err = %v", err)
		}
	})
}

func TestValidChecksumPolicy(t *testing.T) {
	for p, want := range map[string]bool{"": true, "verify": true, "require": true, "off": true,
		"VERIFY": false, "on": false, "none": false, "verify ": false} {
		if got := validChecksumPolicy(p); got != want {
			t.Errorf("validChecksumPolicy(%q) = %v", p, got)
		}
	}
}
