package maven

import (
	"bufio"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The ordering lists and cases of Maven 3.9's ComparableVersionTest, ported.

var versionsQualifier = []string{
	"1-alpha2snapshot", "1-alpha2", "1-alpha-123", "1-beta-2", "1-beta123", "1-m2", "1-m11", "1-rc", "1-cr2",
	"1-rc123", "1-SNAPSHOT", "1", "1-sp", "1-sp2", "1-sp123", "1-abc", "1-def", "1-pom-1", "1-1-snapshot",
	"1-1", "1-2", "1-123",
}

var versionsNumber = []string{
	"2.0", "2.0.a", "2-1", "2.0.2", "2.0.123", "2.1.0", "2.1-a", "2.1b", "2.1-c", "2.1-1", "2.1.0.1",
	"2.2", "2.123", "11.a2", "11.a11", "11.b2", "11.b11", "11.m2", "11.m11", "11", "11.a", "11b", "11c", "11m",
}

func sign(n int) int {
	switch {
	case n < 0:
		return -1
	case n > 0:
		return 1
	}
	return 0
}

func checkOrder(t *testing.T, lo, hi string) {
	t.Helper()
	if c := CompareVersions(lo, hi); c >= 0 {
		t.Errorf("CompareVersions(%q, %q) = %d, want < 0", lo, hi, c)
	}
	if c := CompareVersions(hi, lo); c <= 0 {
		t.Errorf("CompareVersions(%q, %q) = %d, want > 0", hi, lo, c)
	}
}

func checkEqual(t *testing.T, a, b string) {
	t.Helper()
	if c := CompareVersions(a, b); c != 0 {
		t.Errorf("CompareVersions(%q, %q) = %d, want 0", a, b, c)
	}
	if c := CompareVersions(b, a); c != 0 {
		t.Errorf("CompareVersions(%q, %q) = %d, want 0", b, a, c)
	}
	pa, pb := parseVersion(a), parseVersion(b)
	if versionKey(&pa) != versionKey(&pb) {
		t.Errorf("versionKey(%q) != versionKey(%q) although they compare equal", a, b)
	}
}

func checkOrderList(t *testing.T, list []string) {
	t.Helper()
	for i := range list {
		for j := i + 1; j < len(list); j++ {
			checkOrder(t, list[i], list[j])
		}
	}
}

func TestVersionsQualifier(t *testing.T) { checkOrderList(t, versionsQualifier) }

func TestVersionsNumber(t *testing.T) { checkOrderList(t, versionsNumber) }

func TestVersionsEqual(t *testing.T) {
	for _, p := range [][2]string{
		{"1", "1"}, {"1", "1.0"}, {"1", "1.0.0"}, {"1.0", "1.0.0"}, {"1", "1-0"}, {"1", "1.0-0"}, {"1.0", "1.0-0"},
		// no separator between number and character
		{"1a", "1-a"}, {"1a", "1.0-a"}, {"1a", "1.0.0-a"}, {"1.0a", "1-a"}, {"1.0.0a", "1-a"},
		{"1x", "1-x"}, {"1x", "1.0-x"}, {"1x", "1.0.0-x"}, {"1.0x", "1-x"}, {"1.0.0x", "1-x"},
		// aliases
		{"1ga", "1"}, {"1release", "1"}, {"1final", "1"}, {"1cr", "1rc"},
		// special "aliases" a, b and m for alpha, beta and milestone
		{"1a1", "1-alpha-1"}, {"1b2", "1-beta-2"}, {"1m3", "1-milestone-3"},
		// case insensitive
		{"1X", "1x"}, {"1A", "1a"}, {"1B", "1b"}, {"1M", "1m"}, {"1Ga", "1"}, {"1GA", "1"},
		{"1RELEASE", "1"}, {"1release", "1"}, {"1RELeaSE", "1"}, {"1Final", "1"}, {"1FinaL", "1"}, {"1FINAL", "1"},
		{"1Cr", "1Rc"}, {"1cR", "1rC"}, {"1m3", "1Milestone3"}, {"1m3", "1MileStone3"}, {"1m3", "1MILESTONE3"},
		// locale independent
		{"1-abcdefghijklmnopqrstuvwxyz", "1-ABCDEFGHIJKLMNOPQRSTUVWXYZ"},
	} {
		checkEqual(t, p[0], p[1])
	}
}

func TestVersionComparing(t *testing.T) {
	for _, p := range [][2]string{
		{"1", "2"}, {"1.5", "2"}, {"1", "2.5"}, {"1.0", "1.1"}, {"1.1", "1.2"}, {"1.0.0", "1.1"}, {"1.0.1", "1.1"},
		{"1.1", "1.2.0"},
		{"1.0-alpha-1", "1.0"}, {"1.0-alpha-1", "1.0-alpha-2"}, {"1.0-alpha-1", "1.0-beta-1"},
		{"1.0-beta-1", "1.0-SNAPSHOT"}, {"1.0-SNAPSHOT", "1.0"}, {"1.0-alpha-1-SNAPSHOT", "1.0-alpha-1"},
		{"1.0", "1.0-1"}, {"1.0-1", "1.0-2"}, {"1.0.0", "1.0-1"},
		{"2.0-1", "2.0.1"}, {"2.0.1-klm", "2.0.1-lmn"}, {"2.0.1", "2.0.1-xyz"},
		{"2.0.1", "2.0.1-123"}, {"2.0.1-xyz", "2.0.1-123"},
	} {
		checkOrder(t, p[0], p[1])
	}
}

// MNG-5568: 6.1.0rc3 < 6.1.0 < 6.1H.5-beta, and transitively so.
func TestMNG5568(t *testing.T) {
	a, b, c := "6.1.0", "6.1.0rc3", "6.1H.5-beta"
	checkOrder(t, b, a)
	checkOrder(t, b, c)
	checkOrder(t, a, c)
}

// MNG-6572: numbers of any length, including beyond 64 bits.
func TestMNG6572(t *testing.T) {
	a := "20190126.230843"                // resembles a SNAPSHOT
	b := "1234567890.12345"               // 10 digit number
	c := "123456789012345.1H.5-beta"      // 15 digit number
	d := "12345678901234567890.1H.5-beta" // 20 digit number
	for _, p := range [][2]string{{a, b}, {b, c}, {a, c}, {c, d}, {b, d}, {a, d}} {
		checkOrder(t, p[0], p[1])
	}
}

// Leading zeroes do not matter, whatever the length of the string (related to MNG-6572).
func TestVersionEqualWithLeadingZeroes(t *testing.T) {
	for _, digit := range []string{"1", "0"} {
		var arr []string
		for n := 18; n >= 0; n-- {
			arr = append(arr, strings.Repeat("0", n)+digit)
		}
		for i := range arr {
			for j := i; j < len(arr); j++ {
				checkEqual(t, arr[i], arr[j])
			}
		}
	}
}

// MNG-6964: qualifiers that start with "-0." are below the release.
func TestMNG6964(t *testing.T) {
	a, b, c := "1-0.alpha", "1-0.beta", "1"
	checkOrder(t, a, c)
	checkOrder(t, b, c)
	checkOrder(t, a, b)
}

// MNG-7644: 1.0.0.X1 < 1.0.0-X2 and 2-X == 2.0.X == 2.0.0.X for any qualifier X.
func TestMNG7644(t *testing.T) {
	for _, x := range []string{"abc", "alpha", "a", "beta", "b", "def", "milestone", "m", "RC"} {
		checkOrder(t, "1.0.0."+x+"1", "1.0.0-"+x+"2")
		checkEqual(t, "2-"+x, "2.0."+x)
		checkEqual(t, "2-"+x, "2.0.0."+x)
		checkEqual(t, "2.0."+x, "2.0.0."+x)
	}
}

// Maven 3.9's quirks, reproduced on purpose: a client computes the same.
func TestVersionMavenQuirks(t *testing.T) {
	// MNG-6568, unfixed in Maven 3: a cycle.
	checkOrder(t, "x", "0-alpha")
	checkOrder(t, "0", "x")
	checkOrder(t, "0-alpha", "0")
	checkOrder(t, "1-x", "1-0-alpha")
	checkOrder(t, "1", "1-x")
	checkOrder(t, "1-0-alpha", "1")
	// A zero of 10+ digits is a LongItem, and any LongItem is above any IntItem.
	checkOrder(t, "5.1", "0000000000.1")
	checkEqual(t, "0000000000", "0")
	// Null items before a sub-list are dropped: 1-ga-1 is [1, [[1]]], below 1-1.
	checkOrder(t, "1-ga-1", "1-1")
	// a, b, m expand only when a digit follows: a lone "a" is an unknown qualifier.
	checkOrder(t, "1", "1-a")
	checkOrder(t, "1-a1", "1")
	// Separators alone.
	checkEqual(t, "", "0")
	checkEqual(t, "...", "")
	checkEqual(t, "-", "")
	// Cycles among shapes outside saneVersion's grammar.
	checkOrder(t, "1.0.alpha.1", "1")
	checkOrder(t, "1", "1-1")
	checkOrder(t, "1-1", "1.0.alpha.1")
	checkOrder(t, "1.Final", "1.Final..3")
	checkOrder(t, "1.Final..3", "1.Final-Beta")
	checkOrder(t, "1.Final-Beta", "1.Final")
	checkOrder(t, "0.0def", "0-0-SNAPSHOT")
	checkOrder(t, "0-0-SNAPSHOT", "0")
	checkOrder(t, "0", "0.0def")
}

// Beyond ASCII: Java's Character.isDigit, Integer.parseInt and String.compareTo.
func TestVersionUnicode(t *testing.T) {
	checkEqual(t, "1.\u0663", "1.3")                    // ARABIC-INDIC DIGIT THREE is a digit worth 3
	checkEqual(t, "\u0661\u0660", "10")                 // ١٠
	checkEqual(t, "1-\u00c9T\u00c9", "1-\u00e9t\u00e9") // case-insensitive beyond ASCII
	checkEqual(t, "1-\u0130", "1-i\u0307")              // Java maps U+0130 to two chars
	// UTF-16 order: U+FF5E (one code unit) is above U+1F600 (surrogates D83D DE00).
	checkOrder(t, "1-\U0001F600", "1-\uff5e")
	// A supplementary digit is two chars for Java, neither a digit: a qualifier.
	checkOrder(t, "1.\U0001D7CF", "1.1")
	// Invalid UTF-8 does not panic and compares as U+FFFD per byte.
	checkEqual(t, "1-\xff", "1-\ufffd")
}

func TestIsSnapshot(t *testing.T) {
	for v, want := range map[string]bool{
		"1.0-SNAPSHOT": true, "1.0-snapshot": true, "SNAPSHOT": true, "1.0.SNAPSHOT": true,
		"1.0-20240102.030405-7": true, "-20240102.030405-1": true,
		"1.0": false, "": false, "1.0-20240102.030405-": false, "1.0-2024010.030405-1": false,
		"1.0-20240102-030405-1": false, "1.0-SNAPSHOTS": false, "20240102.030405-1": false,
	} {
		if got := IsSnapshot(v); got != want {
			t.Errorf("IsSnapshot(%q) = %v, want %v", v, got, want)
		}
	}
}

// TestVersionOracle replays pairs ordered by the real ComparableVersion (Maven 3.8.7
// from Debian, whose class is the 3.9 one: MNG-7644 was backported to 3.8.x) and
// recorded by testdata/versions/gen.sh: generated versions and mutations of them.
func TestVersionOracle(t *testing.T) {
	f, err := os.Open("testdata/versions/oracle.tsv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		parts := strings.Split(sc.Text(), "\t")
		if len(parts) != 3 {
			t.Fatalf("bad line %q", sc.Text())
		}
		want, err := strconv.Atoi(parts[2])
		if err != nil {
			t.Fatal(err)
		}
		a, b := parts[0], parts[1]
		if got := sign(CompareVersions(a, b)); got != want {
			t.Errorf("CompareVersions(%q, %q) = %d, Maven says %d", a, b, got, want)
		}
		n++
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if n < 1000 {
		t.Fatalf("only %d oracle pairs", n)
	}
}

// TestWriteVersionPairs writes the pairs gen.sh hands to the Java oracle; it runs only
// when REGISTRYD_VERSION_PAIRS names the output file.
func TestWriteVersionPairs(t *testing.T) {
	out := os.Getenv("REGISTRYD_VERSION_PAIRS")
	if out == "" {
		t.Skip("REGISTRYD_VERSION_PAIRS not set")
	}
	r := rand.New(rand.NewPCG(1, 2))
	var b strings.Builder
	for i := 0; i < 2000; i++ {
		a := genVersion(r)
		c := a
		switch i % 4 {
		case 0, 1:
			c = mutateVersion(r, a)
		case 2:
			c = genVersion(r)
		case 3:
			c = mutateVersion(r, mutateVersion(r, a))
		}
		b.WriteString(a + "\t" + c + "\n") // the generator makes no tab nor newline
	}
	if err := os.WriteFile(out, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

var (
	genNumbers = []string{
		"0", "1", "2", "3", "9", "10", "11", "123", "01", "007", "00", "2024", "20240102", "030405",
		"999999999", "1000000000", "0000000000", "123456789012345678", "1234567890123456789",
		"99999999999999999999999",
	}
	genQualifiers = []string{
		"alpha", "a", "beta", "b", "milestone", "m", "rc", "cr", "RC", "CR", "snapshot", "SNAPSHOT",
		"ga", "GA", "final", "Final", "release", "RELEASE", "sp", "SP", "x", "abc", "def", "pom", "jre",
		"redhat", "Beta", "M", "A", "",
	}
	genSeps = []string{".", ".", ".", "-", "-", "", "_", "..", "--", ".-", "-."}
)

// genVersion builds a version from Maven's usual pieces, sometimes odd.
func genVersion(r *rand.Rand) string {
	var b strings.Builder
	n := 1 + r.IntN(5)
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteString(genSeps[r.IntN(len(genSeps))])
		}
		if r.IntN(3) == 0 && i > 0 {
			b.WriteString(genQualifiers[r.IntN(len(genQualifiers))])
		} else {
			b.WriteString(genNumbers[r.IntN(len(genNumbers))])
		}
	}
	if r.IntN(8) == 0 {
		b.WriteString(genSeps[r.IntN(len(genSeps))])
	}
	return b.String()
}

// mutateVersion changes one thing in v: a piece, a separator, a case, an append.
func mutateVersion(r *rand.Rand, v string) string {
	switch r.IntN(6) {
	case 0:
		return v + genSeps[r.IntN(len(genSeps))] + genNumbers[r.IntN(len(genNumbers))]
	case 1:
		return v + genSeps[r.IntN(len(genSeps))] + genQualifiers[r.IntN(len(genQualifiers))]
	case 2:
		return strings.ToUpper(v)
	case 3:
		if v == "" {
			return "0"
		}
		i := r.IntN(len(v))
		return v[:i] + v[i+1:]
	case 4:
		return strings.Replace(v, ".", "-", 1)
	default:
		return strings.Replace(v, "-", ".", 1)
	}
}

// FuzzCompareVersions: never panics, antisymmetric, equal exactly when the keys are,
// the same as the reference comparison of the parsed lists (version_ref_test.go),
// and a sort of the three is consistent with pairwise comparisons when Maven's
// relation is transitive on them (it is not always: see TestVersionMavenQuirks).
func FuzzCompareVersions(f *testing.F) {
	for i := 0; i+2 < len(versionsQualifier); i++ {
		f.Add(versionsQualifier[i], versionsQualifier[i+1], versionsQualifier[i+2])
	}
	for i := 0; i+2 < len(versionsNumber); i++ {
		f.Add(versionsNumber[i], versionsNumber[i+1], versionsNumber[i+2])
	}
	f.Add("0-alpha", "x", "0")
	f.Add("1.\u0663", "1-\U0001F600", "\xff")
	f.Add("", "-", "0000000000.1")
	f.Fuzz(func(t *testing.T, a, b, c string) {
		vs := []string{a, b, c}
		for _, x := range vs {
			for _, y := range vs {
				xy, yx := sign(CompareVersions(x, y)), sign(CompareVersions(y, x))
				if xy != -yx {
					t.Fatalf("not antisymmetric: cmp(%q, %q) = %d, cmp(%q, %q) = %d", x, y, xy, y, x, yx)
				}
				px, py := parseVersion(x), parseVersion(y)
				if (xy == 0) != (versionKey(&px) == versionKey(&py)) {
					t.Fatalf("cmp(%q, %q) = %d but keys equal = %v", x, y, xy, versionKey(&px) == versionKey(&py))
				}
				if ref := sign(refCompareParsed(&px, &py)); xy != ref {
					t.Fatalf("cmp(%q, %q) = %d, the reference says %d", x, y, xy, ref)
				}
			}
		}
	})
}

// FuzzVersionTransitive: on versions of the shape real ones have, seeded by the
// fuzzer, a <= b and b <= c imply a <= c, and equality is transitive.
//
// Maven 3.9's relation is not transitive on every string (TestVersionMavenQuirks),
// and CompareVersions reproduces it, so the property is checked on saneVersion's
// grammar: numbers without leading zeros separated by dots, then at most one
// qualifier, at the end. A qualifier in the middle followed by '.' ("1.0.alpha.1"),
// a null qualifier before more items ("1.Final..3"), a zero of 10+ digits, or a
// version starting with a letter, or a list of zeros only before a sub-list
// ("0-0-SNAPSHOT") are where Maven's item-type rules (int > list >
// string) disagree with its null rules, and cycles appear, for example
// 1.0.alpha.1 < 1 < 1-1 < 1.0.alpha.1.
func FuzzVersionTransitive(f *testing.F) {
	for i := uint64(0); i < 16; i++ {
		f.Add(i, i*7+1)
	}
	f.Fuzz(func(t *testing.T, s1, s2 uint64) {
		r := rand.New(rand.NewPCG(s1, s2))
		checkTransitive(t, []string{saneVersion(r), saneVersion(r), saneVersion(r)})
	})
}

// saneVersion: num ("." num){0,4} [sep qualifier [digits] | "-" build] ["-SNAPSHOT"]; numbers are small most of the time, to make ties likely.
func saneVersion(r *rand.Rand) string {
	num := func() string {
		switch r.IntN(10) {
		case 0:
			return strconv.FormatUint(r.Uint64()>>r.IntN(64), 10)
		case 1, 2, 3:
			return "0"
		}
		return strconv.Itoa(1 + r.IntN(3))
	}
	var b strings.Builder
	b.WriteString(num())
	for n := r.IntN(5); n > 0; n-- {
		b.WriteString("." + num())
	}
	switch r.IntN(4) {
	case 0:
		b.WriteString([]string{"-", ".", ""}[r.IntN(3)])
		b.WriteString(genQualifiers[r.IntN(len(genQualifiers)-1)]) // not the empty one
		if r.IntN(2) == 0 {
			b.WriteString(num())
		}
	case 1:
		b.WriteString("-" + strconv.Itoa(1+r.IntN(3))) // a build number; "-0-" nests zero-only lists
	}
	if r.IntN(5) == 0 {
		b.WriteString("-SNAPSHOT")
	}
	return b.String()
}

func checkTransitive(t *testing.T, vs []string) {
	t.Helper()
	for _, a := range vs {
		for _, b := range vs {
			for _, c := range vs {
				ab, bc, ac := sign(CompareVersions(a, b)), sign(CompareVersions(b, c)), sign(CompareVersions(a, c))
				if ab <= 0 && bc <= 0 && ac > 0 || ab == 0 && bc == 0 && ac != 0 {
					t.Fatalf("not transitive: cmp(%q,%q)=%d cmp(%q,%q)=%d cmp(%q,%q)=%d", a, b, ab, b, c, bc, a, c, ac)
				}
			}
		}
	}
}

// TestVersionKeysAgree: compareKeys orders every pair of the generated versions
// and of Maven's own test lists as the reference comparison of parsed lists does,
// with one parser reused throughout (as a merge does).
func TestVersionKeysAgree(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	vs := slices.Concat(versionsQualifier, versionsNumber, []string{"", "-", "0-alpha", "x", "0", "1.\u0663", "\xff", "0000000000.1"})
	for i := 0; i < 400; i++ {
		vs = append(vs, genVersion(r), saneVersion(r))
	}
	var vp versionParser
	keys := make([]string, len(vs))
	for i, v := range vs {
		keys[i] = string(vp.appendKey(nil, v))
	}
	for i, a := range vs {
		pa := parseVersion(a)
		for j, b := range vs {
			pb := parseVersion(b)
			if got, want := sign(compareKeys(keys[i], keys[j])), sign(refCompareParsed(&pa, &pb)); got != want {
				t.Fatalf("compareKeys(%q, %q) = %d, the reference says %d", a, b, got, want)
			}
		}
	}
}

func TestVersionSortDeterministic(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var vs []string
	for i := 0; i < 300; i++ {
		vs = append(vs, genVersion(r))
	}
	a := slices.Clone(vs)
	b := slices.Clone(vs)
	slices.SortStableFunc(a, CompareVersions)
	slices.SortStableFunc(b, CompareVersions)
	if !slices.Equal(a, b) {
		t.Fatal("sorting the same input twice gave different orders")
	}
}
