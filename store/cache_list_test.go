package store

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// cacheFixture is a store with one upstream and entries created one second
// apart, oldest first.
func cacheFixture(t *testing.T, paths ...string) (*Store, int64) {
	t.Helper()
	s, c := openTest(t)
	g := topGroup(t, s, "acme")
	r := ok(s.CreateRegistry(g.ID, "main", ""))(t)
	u := up(t, s, r.ID, "https://repo.example.com/maven2")
	for _, p := range paths {
		ok(s.PutCacheEntry(CacheEntry{UpstreamID: u.ID, RelativePath: p, Size: 1, SHA256: "aa"}))(t)
		c.Advance(time.Second)
	}
	return s, u.ID
}

func relPaths(es []CacheEntry) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.RelativePath
	}
	return out
}

func TestListCacheEntries(t *testing.T) {
	s, up := cacheFixture(t,
		"/org/a/lib/1.0/lib-1.0.pom", "/org/a/lib/1.0/lib-1.0.jar", "/org/b/Tool/2.0/Tool-2.0.jar", "/com/x/lib/3/lib-3.jar")
	cases := []struct {
		name          string
		search        string
		offset, limit int
		want          []string
		total         int
	}{
		{"all newest first", "", 0, 10, []string{"/com/x/lib/3/lib-3.jar", "/org/b/Tool/2.0/Tool-2.0.jar", "/org/a/lib/1.0/lib-1.0.jar", "/org/a/lib/1.0/lib-1.0.pom"}, 4},
		{"second page", "", 2, 2, []string{"/org/a/lib/1.0/lib-1.0.jar", "/org/a/lib/1.0/lib-1.0.pom"}, 4},
		{"past the end", "", 8, 2, nil, 4},
		{"substring, case-insensitive", "TOOL", 0, 10, []string{"/org/b/Tool/2.0/Tool-2.0.jar"}, 1},
		{"substring in the middle", "lib-", 0, 1, []string{"/com/x/lib/3/lib-3.jar"}, 3},
		{"blank search lists all", "   ", 0, 10, []string{"/com/x/lib/3/lib-3.jar", "/org/b/Tool/2.0/Tool-2.0.jar", "/org/a/lib/1.0/lib-1.0.jar", "/org/a/lib/1.0/lib-1.0.pom"}, 4},
		{"prefix", "/org/a/", 0, 10, []string{"/org/a/lib/1.0/lib-1.0.jar", "/org/a/lib/1.0/lib-1.0.pom"}, 2},
		{"prefix is not a substring", "/lib", 0, 10, nil, 0},
		{"no match", "nothing", 0, 10, nil, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, total, err := s.ListCacheEntries(up, tc.search, tc.offset, tc.limit)
			noErr(t, err)
			if !slices.Equal(relPaths(got), tc.want) || total != tc.total {
				t.Fatalf("got %v (total %d), want %v (total %d)", relPaths(got), total, tc.want, tc.total)
			}
		})
	}
}

// A replaced entry keeps its place; a deleted one leaves the time index.
func TestListCacheEntriesAfterReplaceAndDelete(t *testing.T) {
	s, up := cacheFixture(t, "/a/1/a-1.jar", "/b/1/b-1.jar")
	ok(s.PutCacheEntry(CacheEntry{UpstreamID: up, RelativePath: "/a/1/a-1.jar", Size: 2, SHA256: "bb"}))(t)
	got, total := ok2(s.ListCacheEntries(up, "", 0, 10))(t)
	if want := []string{"/b/1/b-1.jar", "/a/1/a-1.jar"}; !slices.Equal(relPaths(got), want) || total != 2 || got[1].Size != 2 {
		t.Fatalf("after replace: %v total %d", relPaths(got), total)
	}
	noErr(t, s.DeleteCacheEntry(up, "/a/1/a-1.jar"))
	got, total = ok2(s.ListCacheEntries(up, "a-1", 0, 10))(t)
	if len(got) != 0 || total != 0 {
		t.Fatalf("deleted entry still listed: %v", relPaths(got))
	}
	ok(s.PurgeUpstreamCache(up))(t)
	got, total = ok2(s.ListCacheEntries(up, "", 0, 10))(t)
	if len(got) != 0 || total != 0 {
		t.Fatalf("purged entries still listed: %v", relPaths(got))
	}
}

// ok2 is ok for functions with two results.
func ok2[A, B any](a A, b B, err error) func(testing.TB) (A, B) {
	return func(t testing.TB) (A, B) {
		t.Helper()
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		return a, b
	}
}

// BenchmarkListCacheEntries1M measures the first page of a substring and of
// a prefix search over one upstream with a million entries.
func BenchmarkListCacheEntries1M(b *testing.B) {
	s, err := openAt(b, b.TempDir(), Options{SecretKey: testKey})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	g := ok(s.CreateGroup(NewGroup{Name: "g", Path: "g"}))(b)
	r := ok(s.CreateRegistry(g.ID, "r", ""))(b)
	u := ok(s.CreateUpstream(r.ID, NewUpstream{URL: "https://x.example.com", Name: "x"}))(b)
	const n, batch = 1_000_000, 50_000
	entries := make([]CacheEntry, 0, batch)
	for i := 0; i < n; i++ {
		entries = append(entries, CacheEntry{UpstreamID: u.ID, Size: 1024, SHA256: "aa",
			RelativePath: fmt.Sprintf("/org/bench/lib%d/1.0/lib%d-1.0.jar", i, i)})
		if len(entries) == batch {
			noErr(b, s.PutCacheEntries(entries))
			entries = entries[:0]
		}
	}
	for _, q := range []struct{ name, search string }{
		{"substring", "lib4242"}, {"prefix", "/org/bench/lib4242/"}, {"all", ""},
	} {
		b.Run(q.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if _, _, err := s.ListCacheEntries(u.ID, q.search, 0, 20); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func TestContainsFold(t *testing.T) {
	cases := []struct {
		s, needle string
		want      bool
	}{
		{"/org/Bench/Lib42.jar", "lib42", true},
		{"/org/bench/lib4", "lib42", false},
		{"", "a", false},
		{"abc", "", true},
		{"xxLIBlib", "lib", true},
		{"/A/b", "/a/b", true},
		{"/1.0/", "1.0", true},
	}
	for _, tc := range cases {
		if got := containsFold([]byte(tc.s), []byte(tc.needle)); got != tc.want {
			t.Errorf("containsFold(%q, %q) = %v, want %v", tc.s, tc.needle, got, tc.want)
		}
	}
}
