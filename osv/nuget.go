package osv

import (
	"strings"
)

// nugetVersion is a NuGet version (NuGetVersion): up to four numbers, an
// optional prerelease of dot-separated labels; metadata after "+" is not
// part of the order.
type nugetVersion struct {
	nums [4]string // digit strings without leading zeros
	pre  []string
}

// parseNuGet reads "1", "1.2", "1.2.3", "1.2.3.4", each with an optional
// "-label.label" and "+metadata", as NuGet does: leading zeros are allowed
// ("1.01" is 1.1) and a missing number is 0.
func parseNuGet(s string) (nugetVersion, bool) {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '+'); i >= 0 {
		if !validIdents(s[i+1:], false) {
			return nugetVersion{}, false
		}
		s = s[:i]
	}
	var v nugetVersion
	if i := strings.IndexByte(s, '-'); i >= 0 {
		if !validIdents(s[i+1:], false) {
			return nugetVersion{}, false
		}
		v.pre = strings.Split(s[i+1:], ".")
		s = s[:i]
	}
	parts := strings.Split(s, ".")
	if len(parts) > 4 {
		return nugetVersion{}, false
	}
	for i := range v.nums {
		v.nums[i] = "0"
	}
	for i, p := range parts {
		if !allDigits(p) {
			return nugetVersion{}, false
		}
		v.nums[i] = trimZeros(p)
	}
	return v, true
}

// compareNuGet is NuGet's VersionComparer.Default: numbers by value, a
// prerelease below its release, labels numerically when both are numbers,
// a number below a word, words case-insensitively, fewer labels first.
func compareNuGet(a, b nugetVersion) int {
	for i := range a.nums {
		if c := compareDecimal(a.nums[i], b.nums[i]); c != 0 {
			return c
		}
	}
	switch {
	case a.pre == nil && b.pre == nil:
		return 0
	case a.pre == nil:
		return 1
	case b.pre == nil:
		return -1
	}
	return comparePrerelease(a.pre, b.pre, func(x, y string) int {
		return strings.Compare(strings.ToLower(x), strings.ToLower(y))
	})
}
