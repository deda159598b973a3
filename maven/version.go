package maven

import (
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Maven version order.
//
// CompareVersions reproduces org.apache.maven.artifact.versioning.ComparableVersion
// of Maven 3.9 (the maven-3.9.x line: MNG-5568, MNG-6572, MNG-6964 and MNG-7644 in,
// the Maven 4 rewrite with "combination items" and MNG-7714 out), because the order
// of a merged maven-metadata.xml and the latest/release it falls back to must be the
// ones a Maven client would compute itself. The algorithm, in short:
//
//   - The version is lower-cased and cut into items at '.', at '-' and at every
//     transition between a digit and a non-digit. A number is an integer item, the
//     rest are string items (qualifiers).
//   - '-' opens a sub-list: "1-2" is [1, [2]]. A transition opens one too: "1a" is
//     [1, [a]], and since MNG-7644 a qualifier introduced by '.' and followed by a
//     digit gets its own sub-list as if introduced by '-': "1.0.0.rc1" is
//     [1, [rc, [1]]], like "1.0.0-rc1". Each new list is nested in the previous one, so
//     a version is a chain of lists.
//   - A letter directly followed by a digit expands: a1 = alpha-1, b1 = beta-1,
//     m1 = milestone-1. Aliases: ga, final and release are "", cr is rc.
//   - Qualifiers rank alpha < beta < milestone < rc < snapshot < "" < sp < any other
//     qualifier; other qualifiers rank among themselves lexically.
//   - Normalisation drops "null" items (0, "", empty lists) from the end of each list,
//     looking past a non-empty sub-list: "1.0.0" is [1], "1.0-x" is [1, [x]].
//   - Comparison walks both lists; a missing item compares as null (so 1 == 1.0 and
//     1-rc < 1 < 1-sp); an integer beats a string or a list (1.1 > 1-1 > 1-sp).
//   - Integers are compared by value but, as in Maven, first by the size class Maven
//     stores them in (int: up to 9 digits, long: up to 18, BigInteger: more), decided
//     on the digits after leading '0's are stripped. That only matters for a zero
//     written with 10 or more '0's ahead of more items, which Maven, and so this
//     function, orders above small numbers ("0000000000.1" > "5.1").
//
// Maven's relation is antisymmetric, and two versions compare equal exactly when their
// normalised item lists are the same (versionKey). It is not transitive everywhere:
// MNG-6568 cycles such as 0-alpha > x > 0 > 0-alpha (a list whose leading items were
// normalised away, against a string) exist in Maven 3.9 and are reproduced here, since
// a client computes the same thing. Sorting with such a relation is still
// deterministic for the same input order; see version_test.go for what is checked.
//
// Exact for ASCII, which is what versions are in practice. Beyond ASCII, Java's
// Character.isDigit (any Unicode decimal digit in the Basic Multilingual Plane) and
// String.compareTo (UTF-16 code unit order) are reproduced; lower-casing uses Go's
// simple case mapping plus Java's one-to-two mapping of U+0130, and not Java's
// context-dependent final sigma.

// CompareVersions orders Maven versions exactly as Maven 3.9's
// org.apache.maven.artifact.versioning.ComparableVersion does: <0, 0, >0.
func CompareVersions(a, b string) int {
	if a == b {
		return 0
	}
	var vp versionParser
	ka := vp.appendKey(nil, a)
	return compareKeys(string(ka), string(vp.appendKey(nil, b)))
}

// IsSnapshot reports whether v is a snapshot version as Maven's
// ArtifactUtils.isSnapshot decides: it ends with "SNAPSHOT" (any case) or is a
// timestamped snapshot ("1.0-20240102.030405-7").
func IsSnapshot(v string) bool {
	const s = "SNAPSHOT"
	if len(v) >= len(s) && strings.EqualFold(v[len(v)-len(s):], s) {
		return true
	}
	return isTimestamped(v)
}

// isTimestamped matches Maven's VERSION_FILE_PATTERN "^(.*)-(\d{8}\.\d{6})-(\d+)$"
// (Java's \d: ASCII digits only, as Pattern does without UNICODE_CHARACTER_CLASS).
func isTimestamped(v string) bool {
	i := strings.LastIndexByte(v, '-')
	if i < 0 || i == len(v)-1 || !allASCIIDigits(v[i+1:]) {
		return false
	}
	rest := v[:i] // "(.*)-" + "\d{8}\.\d{6}"
	const tsLen = 8 + 1 + 6
	if len(rest) < tsLen+1 {
		return false
	}
	ts := rest[len(rest)-tsLen:]
	return rest[len(rest)-tsLen-1] == '-' && allASCIIDigits(ts[:8]) && ts[8] == '.' && allASCIIDigits(ts[9:])
}

func allASCIIDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return len(s) > 0
}

// Item kinds and integer size classes (Maven's IntItem, LongItem, BigIntegerItem).
const (
	itemInt uint8 = iota
	itemString
)

const (
	classInt uint8 = iota
	classLong
	classBig
)

// Qualifier ranks: Maven's QUALIFIERS list index; rankOther for unknown qualifiers.
const (
	rankRelease = 5 // index of "" in alpha, beta, milestone, rc, snapshot, "", sp
	rankOther   = 7
)

var qualifierRank = map[string]uint8{
	"alpha": 0, "beta": 1, "milestone": 2, "rc": 3, "snapshot": 4, "": rankRelease, "sp": 6,
}

// scalar is an integer or string item.
type scalar struct {
	kind  uint8
	class uint8  // integers: size class
	rank  uint8  // strings: qualifier rank
	text  string // integers: ASCII digits of the value without leading zeros ("" is 0); strings: the aliased qualifier
}

func (s scalar) isNull() bool { return s.text == "" } // 0, or the "" qualifier

// version is a parsed, normalised version: a chain of lists. levels[0] is the top
// list; levels[k+1] is the sub-list that is the last item of levels[k], present
// exactly when k+1 < len(levels). Every level but the first is non-empty.
type version struct {
	levels [][]scalar
}

// compareScalars is Item.compareTo between two non-list items.
func compareScalars(a, b scalar) int {
	switch {
	case a.kind == itemInt && b.kind == itemInt:
		if a.class != b.class {
			return cmpInt(int(a.class), int(b.class))
		}
		if len(a.text) != len(b.text) {
			return cmpInt(len(a.text), len(b.text))
		}
		return strings.Compare(a.text, b.text)
	case a.kind == itemInt: // 1.1 > 1-sp
		return 1
	case b.kind == itemInt:
		return -1
	}
	if a.rank != b.rank {
		return cmpInt(int(a.rank), int(b.rank))
	}
	if a.rank != rankOther {
		return 0
	}
	return compareUTF16(a.text, b.text)
}

// compareScalarNull is Item.compareTo(null) for a non-list item.
func compareScalarNull(a scalar) int {
	if a.kind == itemInt {
		if a.text == "" {
			return 0
		}
		return 1
	}
	return cmpInt(int(a.rank), rankRelease) // 1-rc < 1, 1-sp > 1
}

// compareKeys is ListItem.compareTo(ListItem) for the top lists of two versions
// given by their keys (versionKey): it walks both encodings item by item, so that a
// merge keeps one compact key per version rather than its parsed lists. A sub-list
// is always the last item of its list, so comparing two sub-lists is a tail call:
// the loop moves both sides one level down instead of recursing.
func compareKeys(a, b string) int {
	ca, cb := keyCursor{k: a}, keyCursor{k: b}
	for {
		// The items of this level, side by side; past its last item a list
		// has its sub-list (if any) at the next position, then nulls.
		for {
			sa, okA := ca.next()
			sb, okB := cb.next()
			var r int
			switch {
			case okA && okB:
				r = compareScalars(sa, sb)
			case okA: // b's item is its sub-list, or null
				if cb.sub() {
					return scalarVsList(sa)
				}
				r = compareScalarNull(sa)
			case okB: // a's item is its sub-list, or null
				if ca.sub() {
					return -scalarVsList(sb)
				}
				r = -compareScalarNull(sb)
			}
			if r != 0 {
				return r
			}
			if !okA && !okB {
				break
			}
		}
		// Both lists are past their scalars. A sub-list met a scalar above
		// unless both lists were the same length: the sub-lists come next.
		subA, subB := ca.sub(), cb.sub()
		switch {
		case subA && subB:
			ca.down()
			cb.down()
			continue
		case subA:
			ca.down()
			return ca.compareNull()
		case subB:
			cb.down()
			return -cb.compareNull()
		}
		return 0
	}
}

// keyCursor reads a versionKey item by item.
type keyCursor struct {
	k string
	p int
}

// next returns the next item of the current level; false at the level's end.
func (c *keyCursor) next() (scalar, bool) {
	k, p := c.k, c.p
	if p >= len(k) || k[p] == '[' {
		return scalar{}, false
	}
	s := scalar{kind: itemString}
	if k[p] == 'i' {
		s.kind, s.class = itemInt, k[p+1]-'0'
	} else {
		s.rank = k[p+1] - '0'
	}
	p += 2
	n := 0
	for shift := 0; ; shift += 7 {
		b := k[p]
		p++
		n |= int(b&0x7f) << shift
		if b < 0x80 {
			break
		}
	}
	s.text = k[p : p+n]
	c.p = p + n
	return s, true
}

// sub reports whether a sub-list follows the current level's last item.
func (c *keyCursor) sub() bool { return c.p < len(c.k) && c.k[c.p] == '[' }

// down enters the sub-list.
func (c *keyCursor) down() { c.p++ }

// compareNull is ListItem.compareTo(null) for the list the cursor is in (its
// sub-lists included): the first item that does not compare equal to null
// decides (MNG-6964).
func (c *keyCursor) compareNull() int {
	for {
		s, ok := c.next()
		if !ok {
			if !c.sub() {
				return 0
			}
			c.down()
			continue
		}
		if r := compareScalarNull(s); r != 0 {
			return r
		}
	}
}

// scalarVsList is Item.compareTo(ListItem) for a non-list item: an integer beats a
// list (1.1 > 1-1), a list beats a string (1-1 > 1-sp).
func scalarVsList(a scalar) int {
	if a.kind == itemInt {
		return 1
	}
	return -1
}

func cmpInt(a, b int) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// compareUTF16 orders strings as Java's String.compareTo does: by UTF-16 code unit.
// That differs from byte (code point) order only between a supplementary character
// and one in U+E000..U+FFFF.
func compareUTF16(a, b string) int {
	for a != "" && b != "" {
		ra, na := utf8.DecodeRuneInString(a)
		rb, nb := utf8.DecodeRuneInString(b)
		if ra != rb {
			return cmpInt(utf16Unit(ra, rb), utf16Unit(rb, ra))
		}
		a, b = a[na:], b[nb:]
	}
	return cmpInt(len(a), len(b))
}

// utf16Unit is the code unit Java compares when r meets a different rune other:
// the high surrogate of a supplementary r, unless other is supplementary too (then
// the code points order the same way as their surrogate pairs).
func utf16Unit(r, other rune) int {
	if r >= 0x10000 && other < 0x10000 {
		return 0xD800 + int((r-0x10000)>>10)
	}
	return int(r)
}

// parseVersion is ComparableVersion.parseVersion followed by normalisation.
func parseVersion(v string) version {
	var vp versionParser
	return vp.parse(v)
}

// versionParser parses versions into two arrays it reuses from one version to the
// next: a merge of many versions parses each to its key without allocating (but
// for lower-casing one that has upper-case letters).
type versionParser struct {
	buf    []scalar
	levels [][]scalar
}

// parse is parseVersion; the version it returns is valid until the next parse.
func (vp *versionParser) parse(v string) version {
	s := javaLower(v)
	// Every item goes into one backing array, in order, and each level is a window of
	// it (only the deepest level ever grows, at the array's end). Were countItems'
	// bound wrong, append would move buf, and the finished levels would still be
	// right where they are.
	nItems, nLevels := countItems(s)
	buf := slices.Grow(vp.buf[:0], nItems)
	p := version{levels: append(slices.Grow(vp.levels[:0], nLevels), nil)}
	defer func() { vp.buf, vp.levels = buf[:0], p.levels[:0] }()
	cur, curStart := 0, 0
	add := func(it scalar) {
		buf = append(buf, it)
		p.levels[cur] = buf[curStart:len(buf):len(buf)]
	}
	sub := func() {
		p.levels = append(p.levels, nil)
		cur, curStart = cur+1, len(buf)
	}

	isDigit := false
	start := 0
	for i, r := range s {
		switch {
		case r == '.':
			if i == start {
				add(scalar{kind: itemInt}) // IntItem.ZERO
			} else {
				add(parseItem(isDigit, s[start:i]))
			}
			start = i + 1
		case r == '-':
			if i == start {
				add(scalar{kind: itemInt})
			} else {
				add(parseItem(isDigit, s[start:i]))
			}
			start = i + 1
			sub()
		case isJavaDigit(r):
			if !isDigit && i > start {
				// MNG-7644: a qualifier followed by a digit is a sub-list of its own,
				// whether '-' or '.' introduced it (1.0.0.X1 < 1.0.0-X2).
				if len(p.levels[cur]) > 0 {
					sub()
				}
				add(stringItem(s[start:i], true))
				start = i
				sub()
			}
			isDigit = true
		default:
			if isDigit && i > start {
				add(parseItem(true, s[start:i]))
				start = i
				sub()
			}
			isDigit = false
		}
	}
	if len(s) > start {
		if !isDigit && len(p.levels[cur]) > 0 {
			sub() // MNG-7644 again: treat .X as -X
		}
		add(parseItem(isDigit, s[start:]))
	}

	// ListItem.normalize, innermost list first: drop an empty sub-list, then the null
	// items that end the list (0, ""), stopping at the first item that is not null.
	for k := len(p.levels) - 1; k >= 0; k-- {
		// The sub-list, already normalised, is empty when it has no items and no
		// sub-list of its own.
		if k+1 < len(p.levels) && len(p.levels[k+1]) == 0 && k+2 >= len(p.levels) {
			p.levels = p.levels[:k+1]
		}
		l := p.levels[k]
		for len(l) > 0 && l[len(l)-1].isNull() {
			l = l[:len(l)-1]
		}
		p.levels[k] = l
	}
	return p
}

// countItems bounds the items and levels parseVersion makes of s: an item per '.'
// or '-' and per digit/non-digit transition, plus one; a level per '-', two per
// transition, plus two.
func countItems(s string) (items, levels int) {
	seps, dashes, trans := 0, 0, 0
	wasDigit := false
	for i, r := range s {
		switch {
		case r == '.':
			seps++
		case r == '-':
			seps++
			dashes++
		default:
			d := isJavaDigit(r)
			if i > 0 && d != wasDigit {
				trans++
			}
			wasDigit = d
		}
	}
	return seps + trans + 1, dashes + 2*trans + 2
}

// parseItem makes an integer item of digits, a string item of anything else.
func parseItem(isDigit bool, buf string) scalar {
	if !isDigit {
		return stringItem(buf, false)
	}
	// Maven strips leading '0's (ASCII only) unless that leaves nothing, and picks the
	// item class by the length of what is left, in UTF-16 code units.
	stripped := strings.TrimLeft(buf, "0")
	if stripped == "" {
		stripped = buf
	}
	class := classBig
	switch n := utf8.RuneCountInString(stripped); {
	case n <= 9:
		class = classInt
	case n <= 18:
		class = classLong
	}
	return scalar{kind: itemInt, class: class, text: digitValue(stripped)}
}

// digitValue is the value of a run of decimal digits as ASCII digits without leading
// zeros ("" for zero). Java parses any Unicode decimal digit.
func digitValue(s string) string {
	ascii := true
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			ascii = false
			break
		}
	}
	if !ascii {
		b := make([]byte, 0, len(s))
		for _, r := range s {
			b = append(b, byte('0'+unicodeDigitValue(r)))
		}
		s = string(b)
	}
	return strings.TrimLeft(s, "0")
}

// unicodeDigitValue is the value of a decimal digit (category Nd). Unicode encodes
// every decimal digit set as ten consecutive code points 0..9, and consecutive sets
// are whole, so the value is the count of digits just before r, modulo 10.
func unicodeDigitValue(r rune) int {
	if r >= '0' && r <= '9' {
		return int(r - '0')
	}
	n := 0
	for p := r - 1; unicode.IsDigit(p); p-- {
		n++
	}
	return n % 10
}

// stringItem is StringItem's constructor: a, b and m directly followed by a digit
// stand for alpha, beta and milestone; then the aliases apply.
func stringItem(v string, followedByDigit bool) scalar {
	if followedByDigit && len(v) == 1 {
		switch v {
		case "a":
			v = "alpha"
		case "b":
			v = "beta"
		case "m":
			v = "milestone"
		}
	}
	switch v {
	case "ga", "final", "release":
		v = ""
	case "cr":
		v = "rc"
	}
	rank, ok := qualifierRank[v]
	if !ok {
		rank = rankOther
	}
	return scalar{kind: itemString, rank: rank, text: v}
}

// isJavaDigit is Java's Character.isDigit on a char: a decimal digit of the Basic
// Multilingual Plane (a supplementary character is two chars in Java, neither a digit).
func isJavaDigit(r rune) bool {
	if r < utf8.RuneSelf {
		return r >= '0' && r <= '9'
	}
	return r <= 0xFFFF && unicode.IsDigit(r)
}

// javaLower is String.toLowerCase(Locale.ENGLISH), with the differences the package
// comment names. Invalid UTF-8 becomes U+FFFD, one per bad byte, so that equal
// results mean equal rune sequences.
func javaLower(s string) string {
	ascii := true
	upper := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= utf8.RuneSelf {
			ascii = false
			break
		}
		if 'A' <= c && c <= 'Z' {
			upper = true
		}
	}
	if ascii {
		if !upper {
			return s
		}
		return strings.ToLower(s)
	}
	var b strings.Builder
	b.Grow(len(s) + 2)
	for _, r := range s {
		if r == '\u0130' { // LATIN CAPITAL LETTER I WITH DOT ABOVE: "i" + COMBINING DOT ABOVE
			b.WriteString("i\u0307")
			continue
		}
		b.WriteRune(unicode.ToLower(r))
	}
	return b.String()
}

// versionKey is a string equal for two versions exactly when CompareVersions says they
// are equal: the normalised item lists, encoded without ambiguity, which compareKeys
// orders as Maven does. Each level after the first starts with '['; an integer item
// is 'i', its size class, its length and its digits; a string item 's', its rank,
// its length and its text (the rank is a function of the text: it is there so that
// comparing keys needs no lookup).
func versionKey(p *version) string { return string(appendVersionKey(nil, p)) }

// appendKey appends the key of version v to dst.
func (vp *versionParser) appendKey(dst []byte, v string) []byte {
	p := vp.parse(v)
	return appendVersionKey(dst, &p)
}

func appendVersionKey(b []byte, p *version) []byte {
	for k, l := range p.levels {
		if k > 0 {
			b = append(b, '[')
		}
		for _, s := range l {
			if s.kind == itemInt {
				b = append(b, 'i', '0'+s.class)
			} else {
				b = append(b, 's', '0'+s.rank)
			}
			b = appendLen(b, len(s.text))
			b = append(b, s.text...)
		}
	}
	return b
}

func appendLen(b []byte, n int) []byte {
	for n >= 0x80 {
		b = append(b, byte(n)|0x80)
		n >>= 7
	}
	return append(b, byte(n))
}
