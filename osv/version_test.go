package osv

import (
	"cmp"
	"testing"
)

// Each list is strictly increasing in its ecosystem's order; every pair
// is checked both ways. Equal spellings are checked separately.
func TestVersionOrders(t *testing.T) {
	tests := []struct {
		ecosystem string
		ascending []string
		equal     [][2]string
		invalid   []string
	}{
		{
			ecosystem: NPM,
			// semver.org item 11's example, then build metadata and leniency.
			ascending: []string{"0.0.0", "0.0.1", "0.1.0", "1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-alpha.beta",
				"1.0.0-beta", "1.0.0-beta.2", "1.0.0-beta.11", "1.0.0-rc.1", "1.0.0", "1.0.1", "1.9.0", "1.10.0",
				"1.11.0", "2.0.0-0", "2.0.0-1", "2.0.0-9", "2.0.0-10", "2.0.0-A", "2.0.0-a", "2.0.0", "4.17.20", "4.17.21"},
			equal:   [][2]string{{"1.0.0+build.1", "1.0.0"}, {"v1.2.3", "1.2.3"}, {"=1.2.3", "1.2.3"}, {"1.2", "1.2.0"}, {"1", "1.0.0"}},
			invalid: []string{"", "01.2.3", "1.02.3", "1.2.3-01", "1.2.3.4", "1.2.x", "a.b.c", "1.2.3-", "1.2.3+", "1.2.3-a..b"},
		},
		{
			ecosystem: Go,
			ascending: []string{"v0.0.0-20191010083416-a7dc8b61c822", "v0.0.1", "v0.1.0-pre", "v0.1.0", "v1.5.0",
				"v1.6.0", "go1.21rc1", "go1.21.0", "go1.21.3", "go1.22.0", "v2.0.0+incompatible", "v2.1.0"},
			equal: [][2]string{{"v2.0.0+incompatible", "2.0.0"}, {"go1.21", "1.21.0"}, {"go1.22rc2", "1.22.0-rc.2"},
				{"go1.20beta1", "1.20.0-beta.1"}, {"v1.6.0", "1.6.0"}},
			invalid: []string{"latest", "vX"},
		},
		{
			ecosystem: PyPI,
			// PEP 440's summary of permitted suffixes and relative ordering,
			// then epochs and locals.
			ascending: []string{"1.0.dev456", "1.0a1", "1.0a2.dev456", "1.0a12.dev456", "1.0a12", "1.0b1.dev456",
				"1.0b2", "1.0b2.post345.dev456", "1.0b2.post345", "1.0rc1.dev456", "1.0rc1", "1.0", "1.0+abc.5",
				"1.0+abc.7", "1.0+5", "1.0.post456.dev34", "1.0.post456", "1.0.15", "1.1.dev1", "2.31.0", "2.32.0",
				"10.0", "1!0.1"},
			equal: [][2]string{{"1.0", "1.0.0"}, {"1.0A1", "1.0a1"}, {"1.0alpha1", "1.0a1"}, {"1.0-beta.2", "1.0b2"},
				{"1.0c1", "1.0rc1"}, {"1.0pre1", "1.0rc1"}, {"1.0-1", "1.0.post1"}, {"1.0rev1", "1.0.post1"},
				{"1.0a", "1.0a0"}, {"1.0.dev", "1.0.dev0"}, {"v1.0", "1.0"}, {"0!1.0", "1.0"}, {"1.0+ABC", "1.0+abc"},
				{"1.0+abc-5", "1.0+abc.5"}, {"01.00", "1.0"}},
			invalid: []string{"", "1.0-", "french toast", "1.0+", "1..0", "dev"},
		},
		{
			ecosystem: RubyGems,
			// Gem::Version's own test suite's orders.
			ascending: []string{"0.9", "1.0.a", "1.0.a.2", "1.0.b1", "1.0.rc1", "1.0", "1.0.1", "1.0.2", "1.1", "1.2.b",
				"1.2", "5.2.4", "5.3", "7.1.2", "7.1.3.4", "9.8.7", "9.8.10", "10.0"},
			equal: [][2]string{{"1.0", "1"}, {"1.0.0", "1"}, {"1.0.a", "1.0.0.a"}, {"1.8.a.0", "1.8.a"}, {"1.2-3", "1.2.pre.3"},
				{"", "0"}, {" 1.0 ", "1.0"}, {"01.0", "1.0"}},
			invalid: []string{"junk", "1.0\n2.0", "1..2", "1.2 3.4", "-1"},
		},
		{
			ecosystem: Packagist,
			ascending: []string{"1.0.0-dev", "1.0.0-alpha", "1.0.0-alpha2", "1.0.0-beta1", "1.0.0-beta2", "1.0.0-RC1",
				"1.0.0", "1.0.0-p1", "1.0.1", "1.0.10", "1.2", "2.0.0.1", "5.4.21", "20100102"},
			equal: [][2]string{{"v1.0.0", "1.0.0"}, {"1.0", "1.0.0.0"}, {"1.0.0-b1", "1.0.0-beta1"}, {"1.0.0-rc1", "1.0.0-RC1"},
				{"1.0.0-pl1", "1.0.0-patch1"}, {"1.0.0-stable", "1.0.0"}, {"1.0.0+build", "1.0.0"}, {"1.0.0@beta", "1.0.0"},
				{"1.0.0.beta.1", "1.0.0-beta1"}},
			invalid: []string{"dev-main", "1.x-dev", "dev-feature/x", "foo"},
		},
		{
			ecosystem: NuGet,
			ascending: []string{"0.9.9", "1.0.0-alpha", "1.0.0-alpha.2", "1.0.0-alpha.10", "1.0.0-Beta", "1.0.0-rc.1",
				"1.0.0", "1.0.0.1", "1.0.1", "1.2", "12.0.3", "13.0.1"},
			equal: [][2]string{{"1.0", "1.0.0"}, {"1.0.0.0", "1.0.0"}, {"1.01", "1.1"}, {"1.0.0-BETA", "1.0.0-beta"},
				{"1.0.0+meta", "1.0.0"}, {"1", "1.0.0.0"}},
			invalid: []string{"", "1.0.0.0.0", "a.b", "1.0.0-", "1.0.0-a..b"},
		},
		{
			ecosystem: Maven,
			ascending: []string{"1.0-alpha-1", "1.0-beta", "1.0-rc1", "1.0-SNAPSHOT", "1.0", "1.0-sp1", "1.0.1", "1.1",
				"2.0.9", "2.15.0-rc1", "2.15.0", "2.17.1"},
			equal:   [][2]string{{"1.0", "1.0.0"}, {"1.0-ga", "1"}, {"1.0.RELEASE", "1.0"}},
			invalid: []string{"", "  "},
		},
		{
			ecosystem: CratesIO,
			ascending: []string{"0.1.0", "0.9.0-alpha.1", "0.9.0", "1.0.193"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.ecosystem, func(t *testing.T) {
			for i, a := range tt.ascending {
				for j, b := range tt.ascending {
					c, ok := CompareVersions(tt.ecosystem, a, b)
					want := cmp.Compare(i, j)
					if !ok || c != want {
						t.Errorf("compare(%q, %q) = %d, %v; want %d", a, b, c, ok, want)
					}
				}
			}
			for _, e := range tt.equal {
				if c, ok := CompareVersions(tt.ecosystem, e[0], e[1]); !ok || c != 0 {
					t.Errorf("compare(%q, %q) = %d, %v; want equal", e[0], e[1], c, ok)
				}
			}
			for _, s := range tt.invalid {
				if c, ok := CompareVersions(tt.ecosystem, s, "1.0.0"); ok {
					t.Errorf("compare(%q, 1.0.0) = %d, ok; want not a version", s, c)
				}
			}
		})
	}
}

func TestVersionOrderUnknownEcosystem(t *testing.T) {
	if _, ok := CompareVersions("Debian", "1.0", "2.0"); ok {
		t.Fatal("Debian versions were ordered; registryd has no dpkg order")
	}
}

func TestNormalizeComposer(t *testing.T) {
	for in, want := range map[string]string{
		"1.2": "1.2.0.0", "v1.2.3": "1.2.3.0", "1.0.0-beta2": "1.0.0.0-beta2", "2.1rc1": "2.1.0.0-RC1",
		"1.0-p1": "1.0.0.0-patch1", "1.0.0-alpha.3": "1.0.0.0-alpha3", "1.0.0-beta-dev": "1.0.0.0-beta-dev",
		"2010-01-02": "2010.01.02", "1.0.0-stable": "1.0.0.0",
	} {
		if got, ok := normalizeComposer(in); !ok || got != want {
			t.Errorf("normalize(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
}

func TestPHPVersionCompare(t *testing.T) {
	// PHP's own documentation and tests.
	tests := []struct {
		a, b string
		want int
	}{
		{"5.2", "5.2.0", -1}, {"1.0rc1", "1.0", -1}, {"1.0", "1.0.1", -1}, {"1.0pl1", "1.0", 1}, {"1.0-dev", "1.0a1", -1},
		{"1.0a1", "1.0b1", -1}, {"1.0b1", "1.0RC1", -1}, {"1.0RC1", "1.0", -1}, {"1.0", "1.0pl1", -1},
		{"1.0.0", "1.0.0", 0}, {"1.0-foo", "1.0-dev", -1}, {"1.10", "1.9", 1},
	}
	for _, tt := range tests {
		if got := phpVersionCompare(tt.a, tt.b); got != tt.want {
			t.Errorf("version_compare(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
	}
}
