package maven

// Allow/deny rules of an upstream, after GitLab 18.9's
// VirtualRegistries::Packages::Maven::Upstream::Rule and its FiltrationService:
// an admin keeps coordinates off an upstream (dependency confusion: an
// internal group name must never be fetched from a public repository).
//
// Evaluation, per upstream:
//   - a deny rule that matches any coordinate the path shows refuses;
//   - for each target coordinate that has allow rules, at least one must
//     match, else refused;
//   - no rules allows everything; deny beats allow;
//   - a coordinate the path does not show is not evaluated (the version
//     rules of an artifact-level maven-metadata.xml are ignored).
//
// Matching is case-insensitive for both pattern types, as GitLab's ILIKE and
// ~* are. A wildcard pattern matches the whole value, '*' standing for any
// run of characters (every other character is literal); a regex is an
// unanchored RE2 search ("example" matches "com.example").
//
// What regexes cost is bounded. Go's RE2 runs in time proportional to the
// program's size times the input's length: an upstream's regex rules
// together compile to at most MaxRegexProgram instructions (refused when
// written, see ValidateRule and RegexBudget), and a regex reads at most
// MaxRegexInput bytes (a longer value is refused without evaluating it).
// So one Check costs at most MaxRegexProgram × MaxRegexInput steps of
// RE2's machine, about 4 ms, whatever the owner of the upstream wrote.
// Stored rules over the budget (written before it existed) are not
// evaluated: each refuses every value of its coordinate (see CompileRules).

import (
	"errors"
	"fmt"
	"regexp"
	"regexp/syntax"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The values of a rule's fields, as GitLab spells its enums.
const (
	RuleAllow, RuleDeny                            = "allow", "deny"
	TargetGroupID, TargetArtifactID, TargetVersion = "group_id", "artifact_id", "version"
	PatternWildcard, PatternRegex                  = "wildcard", "regex"
	// MaxRulePattern is the longest pattern, in characters.
	MaxRulePattern = 255
	// MaxRegexProgram is how many RE2 instructions the regex rules of one
	// upstream may compile to together (regexp/syntax, case-insensitive,
	// as they are evaluated; RegexProgramSize). Matching costs up to the
	// program's size times the value's length, and counted repetition
	// multiplies a program: (?:.*){1000} is 12 characters and 2,002
	// instructions, repeated to 255 characters 42,002 (~1 s per value).
	// A character, class, anchor or alternative is about one instruction
	// (common prefixes of alternatives are shared), so rules that spell out
	// names fit: ^com\.example\..* is 17, [a-z0-9_-]{1,64} 129, a
	// 255-character literal 257. It is a model validation like
	// MaxRulePattern, not a setting: the nodes of a cluster must agree on
	// which stored rules are valid.
	MaxRegexProgram = 600
	// MaxRegexInput is the longest value a regex rule reads, in bytes: a
	// path segment's limit (a version or an artifact id cannot be longer;
	// a group id longer than this is no real one). A longer value is
	// refused by an upstream with regex rules on its coordinate, without
	// evaluating them.
	MaxRegexInput = MaxSegmentLen
)

// Rule is one allow/deny rule of an upstream, as stored.
type Rule struct {
	ID                                 int64
	Type, Target, PatternType, Pattern string
}

// GitLab's model validation messages.
const (
	msgBlank   = "can't be blank"
	msgNotList = "is not included in the list"
	msgTooLong = "is too long (maximum is 255 characters)"
	msgRE2     = "not valid RE2 syntax: "
	// msgComplex takes the program's size and MaxRegexProgram.
	msgComplex = "is too complex (compiles to %d RE2 instructions; an upstream's regex rules may compile to %d together)"
	// msgBudget takes the program's size, the other rules' and MaxRegexProgram.
	msgBudget = "is too complex (compiles to %d RE2 instructions and the upstream's other regex rules to %d; " +
		"they may compile to %d together)"
)

// wildcardMessages are GitLab's messages for a wildcard pattern that does not
// fit its target.
var wildcardMessages = map[string]string{
	TargetGroupID:    "should be a valid Maven group ID with optional wildcard characters.",
	TargetArtifactID: "should be a valid Maven artifact ID with optional wildcard characters.",
	TargetVersion:    "should be a valid Maven version with optional wildcard characters.",
}

// The wildcard formats: GitLab's maven_app_group/name_wildcard_pattern_regex,
// \A(?:\*|\*?[\w\-\.]+\*?)\z, and maven_version_wildcard_pattern_regex,
// \A(?:\*|\*?(?!.*\.\.)[\w+.-]+(?:\.\*(?!\*))*\*?)\z. RE2 has no lookahead:
// wildcardVersionOK adds its two checks (no "..", no "**"). \w is ASCII in
// Ruby as in Go.
var (
	wildcardNameRE    = regexp.MustCompile(`^(?:\*|\*?[\w.-]+\*?)$`)
	wildcardVersionRE = regexp.MustCompile(`^(?:\*|\*?[\w+.-]+(?:\.\*)*\*?)$`)
)

func wildcardOK(target, pattern string) bool {
	switch target {
	case TargetGroupID, TargetArtifactID:
		return wildcardNameRE.MatchString(pattern)
	case TargetVersion:
		// Ruby's (?!.*\.\.) sits after an optional leading '*', so it forbids
		// ".." anywhere; (?!\*) after each ".*" forbids ".**", the only way
		// the expression could otherwise produce "**".
		return wildcardVersionRE.MatchString(pattern) &&
			!strings.Contains(pattern, "..") && !strings.Contains(pattern, "**")
	}
	return false
}

// ValidateRule reports what is wrong with a rule's fields as field ->
// GitLab-style messages (nil when valid): unknown enum values, blank/too long
// pattern, wildcard format per target, bad RE2. Messages come in the order
// Rails would add them: a blank wildcard pattern gets "can't be blank" and the
// format message, as in GitLab.
func ValidateRule(r Rule) map[string][]string {
	var errs map[string][]string
	add := func(field, msg string) {
		if errs == nil {
			errs = map[string][]string{}
		}
		errs[field] = append(errs[field], msg)
	}
	enum := func(field, v string, allowed ...string) bool {
		if v == "" {
			add(field, msgBlank)
			return false
		}
		for _, a := range allowed {
			if v == a {
				return true
			}
		}
		add(field, msgNotList)
		return false
	}
	enum("rule_type", r.Type, RuleAllow, RuleDeny)
	targetOK := enum("target_coordinate", r.Target, TargetGroupID, TargetArtifactID, TargetVersion)
	typeOK := enum("pattern_type", r.PatternType, PatternWildcard, PatternRegex)
	if strings.TrimSpace(r.Pattern) == "" {
		add("pattern", msgBlank)
	}
	if utf8.RuneCountInString(r.Pattern) > MaxRulePattern {
		add("pattern", msgTooLong)
	}
	switch {
	case !typeOK:
	case r.PatternType == PatternRegex:
		if _, err := regexp.Compile(r.Pattern); err != nil {
			add("pattern", msgRE2+re2Reason(err))
		} else if n := RegexProgramSize(r.Pattern); n > MaxRegexProgram {
			add("pattern", fmt.Sprintf(msgComplex, n, MaxRegexProgram))
		}
	case targetOK && !wildcardOK(r.Target, r.Pattern):
		add("pattern", wildcardMessages[r.Target])
	}
	return errs
}

// RegexBudget reports, GitLab-style, whether regex rule r fits beside the
// upstream's other rules (others; r's stored version, same ID, is skipped):
// nil when it does, or is no regex, or is refused on its own by
// ValidateRule. It is the part of the validation that needs the other
// rules; CompileRules enforces the same budget on what is stored.
func RegexBudget(r Rule, others []Rule) map[string][]string {
	if r.PatternType != PatternRegex {
		return nil
	}
	n := RegexProgramSize(r.Pattern)
	if n == 0 || n > MaxRegexProgram {
		return nil
	}
	used := 0
	for _, o := range others {
		if o.PatternType == PatternRegex && (o.ID != r.ID || r.ID == 0) {
			used += RegexProgramSize(o.Pattern)
		}
	}
	if n+used <= MaxRegexProgram {
		return nil
	}
	return map[string][]string{"pattern": {fmt.Sprintf(msgBudget, n, used, MaxRegexProgram)}}
}

// RegexProgramSize is the number of instructions a regex pattern compiles
// to as a rule evaluates it ("(?i)" + pattern), the measure MaxRegexProgram
// bounds; 0 for a pattern that does not compile. It parses and compiles as
// regexp.Compile does (Perl flags, simplified), so it counts the program
// that runs.
func RegexProgramSize(pattern string) int {
	re, err := syntax.Parse("(?i)"+pattern, syntax.Perl)
	if err != nil {
		return 0
	}
	prog, err := syntax.Compile(re.Simplify())
	if err != nil {
		return 0
	}
	return len(prog.Inst)
}

// re2Reason is the parse error without Go's "error parsing regexp: " prefix.
func re2Reason(err error) string {
	return strings.TrimPrefix(err.Error(), "error parsing regexp: ")
}

// Coordinates are what a path shows; "" = not shown (rules on that coordinate
// are not evaluated).
type Coordinates struct{ GroupID, ArtifactID, Version string }

// value is the coordinate a target names.
func (c *Coordinates) value(t target) string {
	switch t {
	case tGroup:
		return c.GroupID
	case tArtifact:
		return c.ArtifactID
	}
	return c.Version
}

// RuleCoordinates extracts the coordinates rules look at from a classified
// path (Parse or Classify):
//   - metadata (and its checksums): group level → GroupID; artifact level →
//     GroupID and ArtifactID; version level (a SNAPSHOT directory) → all three;
//   - an artifact (and its checksums): the coordinates Parse found, or, when
//     the file name does not follow a-v..., the directory layout g.../a/v
//     anyway if the path has at least three directories, so that a renamed
//     file cannot slip past a rule (GitLab reads only the directories too);
//   - nothing for paths with fewer directories (.meta/prefixes.txt, a file
//     at the root).
//
// It allocates only the dotted GroupID of a group of several segments when
// Classify (not Parse) made p.
func RuleCoordinates(p Path) Coordinates {
	if p.GroupPath != "" {
		g := p.GroupID
		if g == "" {
			g = strings.ReplaceAll(p.GroupPath, "/", ".")
		}
		return Coordinates{GroupID: g, ArtifactID: p.ArtifactID, Version: p.Version}
	}
	if p.EntryKind() != Artifact {
		return Coordinates{} // metadata at the root
	}
	dir, _, ok := cutLast(p.EntryRel())
	if !ok {
		return Coordinates{}
	}
	rest, v, ok := cutLast(dir)
	if !ok {
		return Coordinates{}
	}
	g, a, ok := cutLast(rest)
	if !ok {
		return Coordinates{}
	}
	return Coordinates{GroupID: strings.ReplaceAll(g, "/", "."), ArtifactID: a, Version: v}
}

// target indexes the three coordinates.
type target uint8

const (
	tGroup target = iota
	tArtifact
	tVersion
	nTargets
)

var targetNames = [nTargets]string{TargetGroupID, TargetArtifactID, TargetVersion}

func parseTarget(s string) (target, bool) {
	for i, n := range targetNames {
		if s == n {
			return target(i), true
		}
	}
	return 0, false
}

// compiledRule is a rule ready to match.
type compiledRule struct {
	rule   Rule
	target target
	// glob is a wildcard pattern in ASCII lower case; re a regex, compiled
	// case-insensitive. Exactly one is used.
	glob string
	re   *regexp.Regexp
	// size is a regex's program size (RegexProgramSize), kept for the
	// reason of a rule over the budget, which is not compiled.
	size int
}

func (c *compiledRule) matches(v string) bool {
	if c.re != nil {
		return c.re.MatchString(v)
	}
	return globMatchFold(c.glob, v)
}

// RuleSet is an upstream's compiled rules; the zero/nil *RuleSet allows
// everything. It is immutable and safe for concurrent use.
type RuleSet struct {
	deny  []compiledRule           // in the order given (id order)
	allow [nTargets][]compiledRule // per target, in the order given
	// unevaluated are regex rules over the budget, stored before it
	// existed: each refuses every value of its coordinate.
	unevaluated []compiledRule
	// regexOn is, per target, a regex rule evaluated on it (nil for
	// none): it names the refusal of a value over MaxRegexInput.
	regexOn [nTargets]*Rule
}

// ErrBadRule is wrapped by the errors of CompileRules.
var ErrBadRule = errors.New("invalid upstream rule")

// CompileRules compiles an upstream's rules. It refuses, with an error
// wrapping ErrBadRule, what it cannot evaluate: an unknown rule type, target
// or pattern type, or a regex that is not RE2. It does not re-check the
// wildcard formats of ValidateRule: a stored wildcard is evaluated as written.
// No rules gives a nil *RuleSet, which allows everything.
//
// Regexes are taken in the order given (id order) while their programs fit
// in MaxRegexProgram together. One that does not fit (stored before the
// budget existed, or beside rules written concurrently) is neither
// compiled nor evaluated: the set refuses every file whose path shows that
// rule's coordinate, naming the rule (Verdict.Unevaluated), until it is
// edited or deleted. Dropping it would let through what a deny rule keeps
// off the upstream (the point of rules: dependency confusion); evaluating
// it would keep the cost the budget is there to prevent; refusing the
// whole set would break every file of the upstream, not only those the
// rule is about. Unevaluated lists them.
func CompileRules(rules []Rule) (*RuleSet, error) {
	if len(rules) == 0 {
		return nil, nil
	}
	rs := &RuleSet{}
	budget := MaxRegexProgram
	for _, r := range rules {
		t, ok := parseTarget(r.Target)
		if !ok {
			return nil, fmt.Errorf("%w %d: unknown target_coordinate %q", ErrBadRule, r.ID, r.Target)
		}
		c := compiledRule{rule: r, target: t}
		switch r.PatternType {
		case PatternWildcard:
			c.glob = lowerASCII(r.Pattern)
		case PatternRegex:
			// Validate the pattern as written first: the prefix must not
			// make a broken pattern acceptable or change its meaning.
			if _, err := regexp.Compile(r.Pattern); err != nil {
				return nil, fmt.Errorf("%w %d: %s%s", ErrBadRule, r.ID, msgRE2, re2Reason(err))
			}
			if c.size = RegexProgramSize(r.Pattern); c.size > budget {
				break
			}
			re, err := regexp.Compile("(?i)" + r.Pattern)
			if err != nil {
				return nil, fmt.Errorf("%w %d: %s%s", ErrBadRule, r.ID, msgRE2, re2Reason(err))
			}
			c.re, budget = re, budget-c.size
		default:
			return nil, fmt.Errorf("%w %d: unknown pattern_type %q", ErrBadRule, r.ID, r.PatternType)
		}
		switch {
		case r.Type != RuleDeny && r.Type != RuleAllow:
			return nil, fmt.Errorf("%w %d: unknown rule_type %q", ErrBadRule, r.ID, r.Type)
		case r.PatternType == PatternRegex && c.re == nil:
			rs.unevaluated = append(rs.unevaluated, c)
		case r.Type == RuleDeny:
			rs.deny = append(rs.deny, c)
		default:
			rs.allow[t] = append(rs.allow[t], c)
		}
	}
	note := func(list []compiledRule) {
		for i := range list {
			if c := &list[i]; c.re != nil && rs.regexOn[c.target] == nil {
				rs.regexOn[c.target] = &c.rule
			}
		}
	}
	note(rs.deny)
	for _, list := range rs.allow {
		note(list)
	}
	return rs, nil
}

// Unevaluated lists the rules of the set that are not evaluated because
// their regexes do not fit in MaxRegexProgram (see CompileRules), each
// with its program size.
func (rs *RuleSet) Unevaluated() (rules []Rule, sizes []int) {
	if rs == nil {
		return nil, nil
	}
	for _, c := range rs.unevaluated {
		rules, sizes = append(rules, c.rule), append(sizes, c.size)
	}
	return rules, sizes
}

// Len is the number of rules in the set.
func (rs *RuleSet) Len() int {
	if rs == nil {
		return 0
	}
	n := len(rs.deny) + len(rs.unevaluated)
	for _, a := range rs.allow {
		n += len(a)
	}
	return n
}

// Verdict of one check. Allowed, or refused by Rule (a deny rule that
// matched, or with Unevaluated a regex rule that was not evaluated) or by
// an allow list: Target set and Rule nil when the target's allow rules
// exist and none matched. Target and Value name the coordinate that
// decided a refusal; Value is c's, which the caller owns. Rule points into
// the RuleSet: do not modify it.
type Verdict struct {
	Allowed bool
	Rule    *Rule
	Target  string
	Value   string
	// Unevaluated: Rule is a regex that was not evaluated and refuses,
	// either because it does not fit in MaxRegexProgram (Size is its
	// program size; see CompileRules) or because Value is longer than
	// MaxRegexInput (Size is 0).
	Unevaluated bool
	Size        int
}

// Check evaluates the rules against c. It allocates nothing.
func (rs *RuleSet) Check(c Coordinates) Verdict {
	if rs == nil {
		return Verdict{Allowed: true}
	}
	for i := range rs.unevaluated {
		u := &rs.unevaluated[i]
		if v := c.value(u.target); v != "" {
			return Verdict{Rule: &u.rule, Target: targetNames[u.target], Value: v, Unevaluated: true, Size: u.size}
		}
	}
	for t, r := range rs.regexOn {
		if v := c.value(target(t)); r != nil && len(v) > MaxRegexInput {
			return Verdict{Rule: r, Target: targetNames[t], Value: v, Unevaluated: true}
		}
	}
	for i := range rs.deny {
		d := &rs.deny[i]
		if v := c.value(d.target); v != "" && d.matches(v) {
			return Verdict{Rule: &d.rule, Target: targetNames[d.target], Value: v}
		}
	}
	for t := range nTargets {
		list := rs.allow[t]
		v := c.value(t)
		if len(list) == 0 || v == "" {
			continue
		}
		ok := false
		for i := range list {
			if list[i].matches(v) {
				ok = true
				break
			}
		}
		if !ok {
			return Verdict{Target: targetNames[t], Value: v}
		}
	}
	return Verdict{Allowed: true}
}

// Reason is a one-line, client-safe explanation of a refusal, "" when
// allowed:
//
//	deny rule 7 (group_id wildcard "com.internal.*") matches group_id "com.internal.app"
//	no allow rule on artifact_id matches "other-app"
//	rule 9 (group_id regex "(?:.*){1000}") is not evaluated: its 2002 RE2 instructions do not fit in the 600 of an upstream's regex rules; edit or delete it
//	rule 9 (group_id regex "^com\\.") is not evaluated on a group_id longer than 255 bytes
//
// Quoting escapes control characters, so a value cannot break the line.
func (v Verdict) Reason() string {
	if v.Allowed {
		return ""
	}
	if v.Rule == nil {
		return "no allow rule on " + v.Target + " matches " + strconv.Quote(v.Value)
	}
	rule := "rule " + strconv.FormatInt(v.Rule.ID, 10) + " (" + v.Rule.Target + " " + v.Rule.PatternType +
		" " + strconv.Quote(v.Rule.Pattern) + ")"
	switch {
	case v.Unevaluated && v.Size > 0:
		return rule + " is not evaluated: its " + strconv.Itoa(v.Size) + " RE2 instructions do not fit in the " +
			strconv.Itoa(MaxRegexProgram) + " of an upstream's regex rules; edit or delete it"
	case v.Unevaluated:
		return rule + " is not evaluated on a " + v.Target + " longer than " + strconv.Itoa(MaxRegexInput) + " bytes"
	}
	return "deny " + rule + " matches " + v.Target + " " + strconv.Quote(v.Value)
}

// AllowsVersion reports whether version v of the artifact with coordinates c
// (GroupID, ArtifactID set) may be served: Check with Version = v. It drops
// versions from merged metadata.
func (rs *RuleSet) AllowsVersion(c Coordinates, v string) bool {
	if rs == nil {
		return true
	}
	c.Version = v
	return rs.Check(c).Allowed
}

// --- case-insensitive wildcard matching without allocation ---

// lowerASCII lower-cases the ASCII letters of s (values from paths are ASCII;
// folding only ASCII keeps byte offsets stable).
func lowerASCII(s string) string {
	for i := 0; i < len(s); i++ {
		if 'A' <= s[i] && s[i] <= 'Z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if 'A' <= b[j] && b[j] <= 'Z' {
					b[j] += 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return s
}

func lowerByte(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// hasPrefixFold reports whether s starts with p (p in lower case), ignoring
// ASCII case.
func hasPrefixFold(s, p string) bool {
	if len(s) < len(p) {
		return false
	}
	for i := 0; i < len(p); i++ {
		if lowerByte(s[i]) != p[i] {
			return false
		}
	}
	return true
}

// indexFold is the first index of p (lower case) in s ignoring ASCII case, or -1.
func indexFold(s, p string) int {
	for i := 0; i+len(p) <= len(s); i++ {
		if hasPrefixFold(s[i:], p) {
			return i
		}
	}
	return -1
}

// globMatchFold reports whether the whole of s matches the wildcard pattern
// (in lower case), '*' standing for any run of characters. The pattern is cut
// at its stars: the first piece must start s, the last end it, and the
// pieces between are found leftmost in order, which is enough for a glob with
// only '*' (leftmost placement never prevents a later piece from matching).
func globMatchFold(pattern, s string) bool {
	star := strings.IndexByte(pattern, '*')
	if star < 0 {
		return len(s) == len(pattern) && hasPrefixFold(s, pattern)
	}
	if !hasPrefixFold(s, pattern[:star]) {
		return false
	}
	s = s[star:]
	pattern = pattern[star+1:]
	last := strings.LastIndexByte(pattern, '*')
	suffix := pattern[last+1:] // the whole rest when there is no further star
	if len(s) < len(suffix) || !hasPrefixFold(s[len(s)-len(suffix):], suffix) {
		return false
	}
	s = s[:len(s)-len(suffix)]
	if last < 0 {
		return true
	}
	middle := pattern[:last]
	for middle != "" {
		var piece string
		if i := strings.IndexByte(middle, '*'); i >= 0 {
			piece, middle = middle[:i], middle[i+1:]
		} else {
			piece, middle = middle, ""
		}
		if piece == "" {
			continue
		}
		i := indexFold(s, piece)
		if i < 0 {
			return false
		}
		s = s[i+len(piece):]
	}
	return true
}
