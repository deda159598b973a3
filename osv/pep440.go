package osv

import (
	"cmp"
	"regexp"
	"strings"
)

// pep440 is a Python version as PEP 440 orders it (the "packaging"
// library's Version): epoch, release, pre-release, post-release,
// development release, local label.
type pep440 struct {
	epoch   string   // digits, "" for 0
	release []string // digit strings, trailing zeros removed
	// pre is the pre-release phase rank (a 0, b 1, rc 2) and number;
	// hasPre says there is one.
	hasPre         bool
	preRank        int
	preNum         string
	hasPost        bool
	postNum        string
	hasDev         bool
	devNum         string
	local          []string // lower-cased
	hasLocalLabels bool
}

// pep440RE is PEP 440's VERSION_PATTERN (appendix B), which accepts every
// spelling the specification normalises: any case, a leading "v", "-", "_"
// or "." between parts, alpha/beta/c/pre/preview, post/rev/r, implicit
// numbers and the implicit post-release "1.0-1".
var pep440RE = regexp.MustCompile(`^\s*v?` +
	`(?:(?P<epoch>[0-9]+)!)?` +
	`(?P<release>[0-9]+(?:\.[0-9]+)*)` +
	`(?P<pre>[-_\.]?(?P<pre_l>alpha|a|beta|b|preview|pre|c|rc)[-_\.]?(?P<pre_n>[0-9]+)?)?` +
	`(?P<post>(?:-(?P<post_n1>[0-9]+))|(?:[-_\.]?(?P<post_l>post|rev|r)[-_\.]?(?P<post_n2>[0-9]+)?))?` +
	`(?P<dev>[-_\.]?(?P<dev_l>dev)[-_\.]?(?P<dev_n>[0-9]+)?)?` +
	`(?:\+(?P<local>[a-z0-9]+(?:[-_\.][a-z0-9]+)*))?` +
	`\s*$`)

var pep440Groups = func() map[string]int {
	m := map[string]int{}
	for i, n := range pep440RE.SubexpNames() {
		if n != "" {
			m[n] = i
		}
	}
	return m
}()

func parsePEP440(s string) (pep440, bool) {
	m := pep440RE.FindStringSubmatch(strings.ToLower(s))
	if m == nil {
		return pep440{}, false
	}
	g := func(name string) string { return m[pep440Groups[name]] }
	v := pep440{epoch: strings.TrimLeft(g("epoch"), "0")}
	rel := strings.Split(g("release"), ".")
	for i := range rel {
		rel[i] = strings.TrimLeft(rel[i], "0")
	}
	for len(rel) > 0 && rel[len(rel)-1] == "" {
		rel = rel[:len(rel)-1]
	}
	v.release = rel
	if l := g("pre_l"); l != "" {
		v.hasPre, v.preNum = true, strings.TrimLeft(g("pre_n"), "0")
		switch l {
		case "a", "alpha":
			v.preRank = 0
		case "b", "beta":
			v.preRank = 1
		default: // c, rc, pre, preview
			v.preRank = 2
		}
	}
	if g("post") != "" {
		v.hasPost, v.postNum = true, strings.TrimLeft(g("post_n1")+g("post_n2"), "0")
	}
	if g("dev") != "" {
		v.hasDev, v.devNum = true, strings.TrimLeft(g("dev_n"), "0")
	}
	if l := g("local"); l != "" {
		v.local = strings.FieldsFunc(l, func(r rune) bool { return r == '-' || r == '_' || r == '.' })
		v.hasLocalLabels = true
	}
	return v, true
}

// comparePEP440 is packaging's _cmpkey order: epoch, release (trailing
// zeros ignored), then a development release without pre- or
// post-release sorts before every pre-release of its release ("1.0.dev0"
// < "1.0a0"), no pre-release sorts after all of them, no post-release
// before any, no development release after any, and no local label before
// any (local segments: numbers above words, numbers by value, words by
// text).
func comparePEP440(a, b pep440) int {
	if c := compareDecimal(a.epoch, b.epoch); c != 0 {
		return c
	}
	for i := 0; i < len(a.release) || i < len(b.release); i++ {
		x, y := "", ""
		if i < len(a.release) {
			x = a.release[i]
		}
		if i < len(b.release) {
			y = b.release[i]
		}
		if c := compareDecimal(x, y); c != 0 {
			return c
		}
	}
	if c := cmp.Compare(a.preKey(), b.preKey()); c != 0 {
		return c
	}
	if a.hasPre && b.hasPre {
		if c := compareDecimal(a.preNum, b.preNum); c != 0 {
			return c
		}
	}
	if c := cmpOptional(a.hasPost, b.hasPost, a.postNum, b.postNum, false); c != 0 {
		return c
	}
	if c := cmpOptional(a.hasDev, b.hasDev, a.devNum, b.devNum, true); c != 0 {
		return c
	}
	switch {
	case !a.hasLocalLabels && !b.hasLocalLabels:
		return 0
	case !a.hasLocalLabels:
		return -1
	case !b.hasLocalLabels:
		return 1
	}
	for i := 0; i < len(a.local) && i < len(b.local); i++ {
		if c := compareLocal(a.local[i], b.local[i]); c != 0 {
			return c
		}
	}
	return cmp.Compare(len(a.local), len(b.local))
}

// preKey is the pre-release's place: -1 for a bare development release
// (below all pre-releases), 0..2 for a, b, rc, 3 for none.
func (v pep440) preKey() int {
	switch {
	case !v.hasPre && !v.hasPost && v.hasDev:
		return -1
	case !v.hasPre:
		return 3
	}
	return v.preRank
}

// cmpOptional compares two optional numbers; absentHigh says where a
// missing one sorts.
func cmpOptional(hasA, hasB bool, a, b string, absentHigh bool) int {
	switch {
	case hasA && hasB:
		return compareDecimal(a, b)
	case !hasA && !hasB:
		return 0
	}
	missing := 1 // where a missing number sorts against a present one
	if !absentHigh {
		missing = -1
	}
	if !hasA {
		return missing
	}
	return -missing
}

// compareLocal orders local version segments: numbers by value and above
// words (unlike semver's prerelease identifiers), words by text.
func compareLocal(x, y string) int {
	xn, yn := allDigits(x), allDigits(y)
	switch {
	case xn && yn:
		return compareDecimal(x, y)
	case xn:
		return 1
	case yn:
		return -1
	}
	return strings.Compare(x, y)
}
