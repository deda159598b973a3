package osv

import (
	"cmp"
	"strconv"
	"strings"
)

// semver is a Semantic Versioning 2.0.0 version: the order of npm, Go
// modules, crates.io and Pub, and of every OSV range of type SEMVER.
type semver struct {
	major, minor, patch uint64
	pre                 []string // dot-separated prerelease identifiers; nil for a release
}

// parseSemver reads MAJOR.MINOR.PATCH[-PRERELEASE][+BUILD]. It is lenient
// where the tools are: a leading "v" or "=" (npm, Go) and surrounding space
// are dropped, and a missing minor or patch is 0 ("1.2" is 1.2.0, as the
// "0" of an OSV introduced event needs). Build metadata (Go's +incompatible)
// does not take part in the order. Numbers must not have leading zeros
// (SemVer 2.0.0 item 2), nor prerelease numbers (item 9).
func parseSemver(s string) (semver, bool) {
	s = strings.TrimSpace(s)
	s = strings.TrimLeft(s, "=")
	if len(s) > 0 && (s[0] == 'v' || s[0] == 'V') {
		s = s[1:]
	}
	if i := strings.IndexByte(s, '+'); i >= 0 {
		if !validIdents(s[i+1:], false) {
			return semver{}, false
		}
		s = s[:i]
	}
	var v semver
	core := s
	if i := strings.IndexByte(s, '-'); i >= 0 {
		core = s[:i]
		pre := s[i+1:]
		if !validIdents(pre, true) {
			return semver{}, false
		}
		v.pre = strings.Split(pre, ".")
	}
	parts := strings.Split(core, ".")
	if len(parts) > 3 {
		return semver{}, false
	}
	nums := [3]uint64{}
	for i, p := range parts {
		n, ok := semverNumber(p)
		if !ok {
			return semver{}, false
		}
		nums[i] = n
	}
	v.major, v.minor, v.patch = nums[0], nums[1], nums[2]
	return v, true
}

func semverNumber(p string) (uint64, bool) {
	if p == "" || (len(p) > 1 && p[0] == '0') || !allDigits(p) {
		return 0, false
	}
	n, err := strconv.ParseUint(p, 10, 64)
	return n, err == nil
}

// validIdents checks dot-separated identifiers of [0-9A-Za-z-], none
// empty; numeric prerelease identifiers must not have leading zeros.
func validIdents(s string, pre bool) bool {
	if s == "" {
		return false
	}
	for _, id := range strings.Split(s, ".") {
		if id == "" {
			return false
		}
		for i := 0; i < len(id); i++ {
			c := id[i]
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '-') {
				return false
			}
		}
		if pre && len(id) > 1 && id[0] == '0' && allDigits(id) {
			return false
		}
	}
	return true
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// compareSemver orders by major, minor, patch; a prerelease is below its
// release; prerelease identifiers compare numerically when both are
// numbers, else by ASCII, a number below a word, and a shorter list below
// a longer one it begins.
func compareSemver(a, b semver) int {
	if c := cmp.Compare(a.major, b.major); c != 0 {
		return c
	}
	if c := cmp.Compare(a.minor, b.minor); c != 0 {
		return c
	}
	if c := cmp.Compare(a.patch, b.patch); c != 0 {
		return c
	}
	switch {
	case a.pre == nil && b.pre == nil:
		return 0
	case a.pre == nil:
		return 1
	case b.pre == nil:
		return -1
	}
	return comparePrerelease(a.pre, b.pre, strings.Compare)
}

// comparePrerelease compares two non-empty prerelease identifier lists:
// identifier by identifier, then the shorter first (SemVer 2.0.0 item 11;
// NuGet's labels, with another word order).
func comparePrerelease(a, b []string, words func(x, y string) int) int {
	for i := 0; i < len(a) && i < len(b); i++ {
		if c := compareIdent(a[i], b[i], words); c != 0 {
			return c
		}
	}
	return cmp.Compare(len(a), len(b))
}

// compareIdent compares two prerelease identifiers: numbers by value and
// below words; words with cmp.
func compareIdent(x, y string, cmp func(a, b string) int) int {
	xn, yn := allDigits(x), allDigits(y)
	switch {
	case xn && yn:
		return compareDecimal(x, y)
	case xn:
		return -1
	case yn:
		return 1
	}
	return cmp(x, y)
}

// compareDecimal compares two strings of ASCII digits by value, whatever
// their length (leading zeros allowed).
func compareDecimal(x, y string) int {
	x, y = strings.TrimLeft(x, "0"), strings.TrimLeft(y, "0")
	if c := cmp.Compare(uint64(len(x)), uint64(len(y))); c != 0 {
		return c
	}
	return strings.Compare(x, y)
}

// goVersion makes a Go version comparable as semver: module versions are
// semver with "v"; the standard library and toolchain ("stdlib",
// "toolchain" in the Go vulnerability database) are named as the go
// command does, "go1.21", "go1.21.3", "go1.22rc1", which the database writes
// 1.21.0, 1.21.3 and 1.22.0-rc.1.
func goVersion(s string) string {
	rest, ok := strings.CutPrefix(s, "go")
	if !ok {
		return s
	}
	for _, pre := range []string{"rc", "beta", "alpha"} {
		if i := strings.Index(rest, pre); i > 0 {
			return padRelease(rest[:i]) + "-" + pre + "." + rest[i+len(pre):]
		}
	}
	return padRelease(rest)
}

// padRelease writes 1.21 as 1.21.0.
func padRelease(s string) string {
	if strings.Count(s, ".") == 1 {
		return s + ".0"
	}
	return s
}
