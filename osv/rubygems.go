package osv

import (
	"regexp"
	"strings"
)

// gemVersion is a RubyGems version (Gem::Version): its canonical
// segments, numbers as digit strings and words as they are.
type gemVersion []string

// gemVersionRE is Gem::Version's ANCHORED_VERSION_PATTERN.
var gemVersionRE = regexp.MustCompile(`^\s*([0-9]+(?:\.[0-9a-zA-Z]+)*(?:-[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?)?\s*$`)

var gemSegmentRE = regexp.MustCompile(`[0-9]+|[a-zA-Z]+`)

// parseGem reads a version as Gem::Version.new does ("-" means ".pre.",
// an empty version is "0") and keeps its canonical segments: the numeric
// segments before the first word and the segments from that word on, each
// part without its trailing zeros ("1.0.a.0" is [1, a]).
func parseGem(s string) (gemVersion, bool) {
	if !gemVersionRE.MatchString(s) {
		return nil, false
	}
	s = strings.ReplaceAll(strings.TrimSpace(s), "-", ".pre.")
	if s == "" {
		s = "0"
	}
	segs := gemSegmentRE.FindAllString(s, -1)
	for i, seg := range segs {
		if allDigits(seg) {
			segs[i] = trimZeros(seg)
		}
	}
	firstWord := len(segs)
	for i, seg := range segs {
		if !allDigits(seg) {
			firstWord = i
			break
		}
	}
	nums, words := dropTrailingZeros(segs[:firstWord]), dropTrailingZeros(segs[firstWord:])
	return gemVersion(append(slicesClip(nums), words...)), true
}

func trimZeros(d string) string {
	if t := strings.TrimLeft(d, "0"); t != "" {
		return t
	}
	return "0"
}

func dropTrailingZeros(segs []string) []string {
	for len(segs) > 0 && segs[len(segs)-1] == "0" {
		segs = segs[:len(segs)-1]
	}
	return segs
}

func slicesClip(s []string) []string { return s[:len(s):len(s)] }

// compareGem is Gem::Version#<=>: segment by segment, a missing one as 0;
// a word sorts below a number ("1.0.a" < "1.0"); numbers by value, words
// by their bytes.
func compareGem(a, b gemVersion) int {
	for i := 0; i < len(a) || i < len(b); i++ {
		x, y := "0", "0"
		if i < len(a) {
			x = a[i]
		}
		if i < len(b) {
			y = b[i]
		}
		if x == y {
			continue
		}
		xn, yn := allDigits(x), allDigits(y)
		switch {
		case !xn && yn:
			return -1
		case xn && !yn:
			return 1
		case xn && yn:
			return compareDecimal(x, y)
		}
		return strings.Compare(x, y)
	}
	return 0
}
