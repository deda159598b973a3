package osv

import (
	"cmp"
	"regexp"
	"strings"
)

// Packagist (Composer) versions: Composer normalises a version
// (VersionParser::normalize: four numbers, a stability suffix) and orders
// normalised versions with PHP's version_compare.

const composerModifier = `[._-]?(?:(stable|beta|b|rc|alpha|a|patch|pl|p)((?:[.-]?\d+)*)?)?([.-]?dev)?`

var (
	composerClassicRE = regexp.MustCompile(`(?i)^v?(\d{1,5})(\.\d+)?(\.\d+)?(\.\d+)?` + composerModifier + `$`)
	composerDateRE    = regexp.MustCompile(`(?i)^v?(\d{4}(?:[.:-]?\d{2}){1,6}(?:[.:-]?\d{1,3}){0,2})` + composerModifier + `$`)
	composerFlagRE    = regexp.MustCompile(`(?i)@(?:stable|rc|beta|alpha|dev)$`)
	nonDigitRE        = regexp.MustCompile(`\D`)
)

// normalizeComposer is VersionParser::normalize for the versions that have
// an order: "v1.2" is 1.2.0.0, "1.0.0-beta2" is 1.0.0.0-beta2, "2.1rc1"
// is 2.1.0.0-RC1, "1.0-p1" is 1.0.0.0-patch1, date versions keep their
// numbers. Branches ("dev-main", "1.x-dev") have none: ok is false.
func normalizeComposer(s string) (string, bool) {
	s = strings.TrimSpace(s)
	s = composerFlagRE.ReplaceAllString(s, "")
	if i := strings.IndexByte(s, '+'); i > 0 {
		s = s[:i] // build metadata
	}
	var version string
	var mod []string
	if m := composerClassicRE.FindStringSubmatch(s); m != nil {
		version = m[1]
		for _, p := range m[2:5] {
			if p == "" {
				p = ".0"
			}
			version += p
		}
		mod = m[5:]
	} else if m := composerDateRE.FindStringSubmatch(s); m != nil {
		version = nonDigitRE.ReplaceAllString(m[1], ".")
		mod = m[2:]
	} else {
		return "", false
	}
	if stab := strings.ToLower(mod[0]); stab != "" {
		if stab == "stable" {
			return version, true
		}
		version += "-" + expandStability(stab) + strings.TrimLeft(mod[1], ".-")
	}
	if mod[2] != "" {
		version += "-dev"
	}
	return version, true
}

func expandStability(s string) string {
	switch s {
	case "a":
		return "alpha"
	case "b":
		return "beta"
	case "p", "pl":
		return "patch"
	case "rc":
		return "RC"
	}
	return s
}

// phpCanonical is php_canonicalize_version: "-", "_", "+" and other
// non-alphanumerics become ".", and a "." goes between a digit and a
// non-digit.
func phpCanonical(v string) []string {
	if v == "" {
		return nil
	}
	var b strings.Builder
	isDig := func(c byte) bool { return c >= '0' && c <= '9' }
	isAlnum := func(c byte) bool { return isDig(c) || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
	dot := func() {
		s := b.String()
		if len(s) == 0 || s[len(s)-1] != '.' {
			b.WriteByte('.')
		}
	}
	b.WriteByte(v[0])
	lp := v[0]
	for i := 1; i < len(v); i++ {
		c := v[i]
		switch {
		case c == '-' || c == '_' || c == '+':
			dot()
		case (lp != '.' && !isDig(lp) && isDig(c)) || (isDig(lp) && c != '.' && !isDig(c)):
			dot()
			b.WriteByte(c)
		case !isAlnum(c):
			dot()
		default:
			b.WriteByte(c)
		}
		lp = c
	}
	return strings.Split(b.String(), ".")
}

// phpSpecialForms are version_compare's special words, in order; "#" is
// a number. Another word ranks below all of them.
var phpSpecialForms = []struct {
	name string
	rank int
}{{"dev", 0}, {"alpha", 1}, {"a", 1}, {"beta", 2}, {"b", 2}, {"RC", 3}, {"rc", 3}, {"#", 4}, {"pl", 5}, {"p", 5}}

func phpSpecialRank(s string) int {
	for _, f := range phpSpecialForms {
		if strings.HasPrefix(s, f.name) {
			return f.rank
		}
	}
	return -1
}

// phpVersionCompare is PHP's version_compare(a, b).
func phpVersionCompare(a, b string) int {
	return phpComparePartsFrom(phpCanonical(a), phpCanonical(b))
}

func phpComparePartsFrom(p1, p2 []string) int {
	isNum := func(s string) bool { return s != "" && s[0] >= '0' && s[0] <= '9' }
	i := 0
	for ; i < len(p1) && i < len(p2); i++ {
		x, y := p1[i], p2[i]
		var c int
		switch {
		case isNum(x) && isNum(y):
			c = compareDecimal(leadingDigits(x), leadingDigits(y))
		case !isNum(x) && !isNum(y):
			c = cmp.Compare(phpSpecialRank(x), phpSpecialRank(y))
		case isNum(x):
			c = cmp.Compare(phpSpecialRank("#"), phpSpecialRank(y))
		default:
			c = cmp.Compare(phpSpecialRank(x), phpSpecialRank("#"))
		}
		if c != 0 {
			return c
		}
	}
	switch {
	case i < len(p1):
		if isNum(p1[i]) {
			return 1
		}
		return phpComparePartsFrom(p1[i:], []string{"#N#"})
	case i < len(p2):
		if isNum(p2[i]) {
			return -1
		}
		return phpComparePartsFrom([]string{"#N#"}, p2[i:])
	}
	return 0
}

func leadingDigits(s string) string {
	n := 0
	for n < len(s) && s[n] >= '0' && s[n] <= '9' {
		n++
	}
	return s[:n]
}
