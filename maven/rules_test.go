package maven

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"
)

// The validation tables are GitLab's (its Upstream::Rule model spec and the
// spec of Gitlab::Regex::VirtualRegistries::Packages::Upstreams::Rules).

func TestValidateRuleWildcardFormats(t *testing.T) {
	tests := []struct {
		target  string
		valid   []string
		invalid []string
	}{
		{TargetGroupID,
			[]string{"com.example", "org.apache.maven", "*", "com.example.*", "*com.example", "*com.example*",
				"*.example.com", "*.example.*", "org.apache.commons", "COM.Example", "com_example-x"},
			[]string{"com/example", "org:apache", "test[0-9]", "com example", "**com.example", "com.example.**",
				"", "*com/example", "/com.example*", "*com.example/", "*com/example*", "com.*.example", "**",
				"com.exämple", "a+b"}},
		{TargetArtifactID,
			[]string{"my-app", "my.app", "my_app", "*", "*-app", "my-app.*", "*my-app*",
				"artifact-*", "*-artifact", "*-artifact-*", "MyApp"},
			[]string{"my/app", "my:app", "my app", "my[app]", "**-app", "my-app.**",
				"", "artifact-**", "*my/app", "my/app*", "*my/app*", "my*app"}},
		{TargetVersion,
			[]string{"1.0.0", "1.0.0-SNAPSHOT", "*-SNAPSHOT", "*-beta", "*-beta*", "1.0.*", "*", "2.0.0-alpha+001",
				"1.*.*", "*-SNAPSHOT-*", "2.1.0-beta", "1.0", "1.0*"},
			[]string{"1/0/0", "1:0:0", "1 0 0", "1[0]0", "1..0", "1.0.**", "**-beta",
				"", "**-SNAPSHOT", "*1..0", "*1/0/0", "*1:0:0", "1.*-beta", "1.**", "1.*..*", "**"}},
	}
	for _, tt := range tests {
		for _, p := range tt.valid {
			if errs := ValidateRule(Rule{Type: RuleAllow, Target: tt.target, PatternType: PatternWildcard, Pattern: p}); errs != nil {
				t.Errorf("%s %q: %v, want valid", tt.target, p, errs)
			}
		}
		for _, p := range tt.invalid {
			errs := ValidateRule(Rule{Type: RuleDeny, Target: tt.target, PatternType: PatternWildcard, Pattern: p})
			msgs := errs["pattern"]
			if len(errs) != 1 || len(msgs) == 0 || msgs[len(msgs)-1] != wildcardMessages[tt.target] {
				t.Errorf("%s %q: %v, want the format message", tt.target, p, errs)
			}
		}
	}
}

func TestValidateRuleMessages(t *testing.T) {
	const group = "should be a valid Maven group ID with optional wildcard characters."
	long := strings.Repeat("a", 256)
	tests := []struct {
		name string
		rule Rule
		want map[string][]string
	}{
		{"valid", Rule{Type: "allow", Target: "group_id", PatternType: "wildcard", Pattern: "com.example"}, nil},
		{"255 characters", Rule{Type: "allow", Target: "group_id", PatternType: "wildcard",
			Pattern: strings.Repeat("a", 255)}, nil},
		{"255 non-ASCII characters is not too long", Rule{Type: "allow", Target: "group_id", PatternType: "regex",
			Pattern: strings.Repeat("é", 255)}, nil},
		{"blank wildcard, as Rails: presence and format", Rule{Type: "allow", Target: "group_id",
			PatternType: "wildcard", Pattern: ""}, map[string][]string{"pattern": {"can't be blank", group}}},
		{"blank regex", Rule{Type: "allow", Target: "group_id", PatternType: "regex", Pattern: "  "},
			map[string][]string{"pattern": {"can't be blank"}}},
		{"too long", Rule{Type: "allow", Target: "group_id", PatternType: "wildcard", Pattern: long},
			map[string][]string{"pattern": {"is too long (maximum is 255 characters)"}}},
		{"unknown enums", Rule{Type: "block", Target: "classifier", PatternType: "glob", Pattern: "x"},
			map[string][]string{"rule_type": {"is not included in the list"},
				"target_coordinate": {"is not included in the list"}, "pattern_type": {"is not included in the list"}}},
		{"blank enums", Rule{Pattern: "x"},
			map[string][]string{"rule_type": {"can't be blank"}, "target_coordinate": {"can't be blank"},
				"pattern_type": {"can't be blank"}}},
		{"enums are case-sensitive", Rule{Type: "Allow", Target: "group_id", PatternType: "wildcard", Pattern: "x"},
			map[string][]string{"rule_type": {"is not included in the list"}}},
		{"unknown target: no format check", Rule{Type: "allow", Target: "x", PatternType: "wildcard", Pattern: "a/b"},
			map[string][]string{"target_coordinate": {"is not included in the list"}}},
		{"regex on any target", Rule{Type: "deny", Target: "version", PatternType: "regex", Pattern: `a/b:c d[0-9]`}, nil},
	}
	for _, tt := range tests {
		if got := ValidateRule(tt.rule); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestValidateRuleRegex(t *testing.T) {
	valid := []string{`com\.example\..*`, `^org\.apache\..*$`, `.*-SNAPSHOT$`, `^[0-9]+\.[0-9]+\.[0-9]+$`,
		`([a-zA-Z]+[-._]?)+ `, `example`, `(?i)x`}
	invalid := []string{`com[example`, `org.apache.*$)`, `[invalid`, `(unclosed`, `*invalid`, `a{2000}`, `(?<x`, `\8`}
	for _, p := range valid {
		for _, target := range targetNames {
			if errs := ValidateRule(Rule{Type: RuleAllow, Target: target, PatternType: PatternRegex, Pattern: p}); errs != nil {
				t.Errorf("%q on %s: %v, want valid", p, target, errs)
			}
		}
	}
	for _, p := range invalid {
		errs := ValidateRule(Rule{Type: RuleAllow, Target: TargetGroupID, PatternType: PatternRegex, Pattern: p})
		if len(errs) != 1 || len(errs["pattern"]) != 1 || !strings.HasPrefix(errs["pattern"][0], "not valid RE2 syntax: ") {
			t.Errorf("%q: %v, want one RE2 message", p, errs)
		}
		if _, err := CompileRules([]Rule{{ID: 1, Type: RuleAllow, Target: TargetGroupID, PatternType: PatternRegex, Pattern: p}}); !errors.Is(err, ErrBadRule) {
			t.Errorf("CompileRules(%q) = %v, want ErrBadRule", p, err)
		}
	}
	got := ValidateRule(Rule{Type: RuleAllow, Target: TargetGroupID, PatternType: PatternRegex, Pattern: "com[example"})
	if want := "not valid RE2 syntax: missing closing ]: `[example`"; got["pattern"][0] != want {
		t.Errorf("message %q, want %q", got["pattern"][0], want)
	}
}

// A regex whose program alone is over MaxRegexProgram is refused when
// written, with a message in the shape of the others; the bound counts the
// program as it runs (case-insensitive), and what is typical fits.
func TestValidateRuleProgramBound(t *testing.T) {
	names := "^(?:com|org|net)\\.(?:acme|example|initech|globex|umbrella|hooli|piedpiper|vandelay|wonka|stark|" +
		"wayne|tyrell|cyberdyne|soylent|aperture|blackmesa|oscorp|lexcorp|massive|dynamic|gringotts|monsters|" +
		"nakatomi|duff|krusty|virtucon|weyland)(?:\\..*)?$"
	for _, tt := range []struct {
		pattern string
		size    int // RegexProgramSize; 0: not checked
		ok      bool
	}{
		{`(?:.*){1000}`, 2002, false},
		{strings.Repeat(`(?:.*){1000}`, 21), 42002, false},
		{`[a-z]{1,1000}`, 2001, false},
		{`a{599}`, 601, false},
		{`a{598}`, MaxRegexProgram, true},
		{`[a-z0-9_-]{1,64}`, 129, true},
		{`^com\.example\..*`, 17, true},
		{names, 0, true},
		{strings.Repeat("a", MaxRulePattern), MaxRulePattern + 2, true},
	} {
		size := RegexProgramSize(tt.pattern)
		if tt.size != 0 && size != tt.size {
			t.Errorf("RegexProgramSize(%.40q) = %d, want %d", tt.pattern, size, tt.size)
		}
		errs := ValidateRule(Rule{Type: RuleDeny, Target: TargetGroupID, PatternType: PatternRegex, Pattern: tt.pattern})
		if tt.ok {
			if errs != nil {
				t.Errorf("%.40q (%d instructions): %v, want valid", tt.pattern, size, errs)
			}
			continue
		}
		want := map[string][]string{"pattern": {fmt.Sprintf(
			"is too complex (compiles to %d RE2 instructions; an upstream's regex rules may compile to 600 together)", size)}}
		if !reflect.DeepEqual(errs, want) {
			t.Errorf("%.40q: %v, want %v", tt.pattern, errs, want)
		}
	}
	if n := utf8.RuneCountInString(names); n > MaxRulePattern {
		t.Fatalf("the names pattern is %d characters", n)
	}
	if RegexProgramSize("(") != 0 {
		t.Error("a broken pattern has a size")
	}
}

// RegexBudget: a rule fits beside the upstream's other regex rules while
// their programs add up to MaxRegexProgram; its own stored version and
// wildcards do not count.
func TestRegexBudget(t *testing.T) {
	re := func(id int64, pattern string) Rule {
		return Rule{ID: id, Type: RuleAllow, Target: TargetVersion, PatternType: PatternRegex, Pattern: pattern}
	}
	others := []Rule{re(1, `a{298}`), {ID: 2, Type: RuleDeny, Target: TargetGroupID, PatternType: PatternWildcard, Pattern: "x*"}}
	if errs := RegexBudget(re(0, `a{298}`), others); errs != nil { // 300 + 300
		t.Errorf("a rule that fits: %v", errs)
	}
	want := map[string][]string{"pattern": {"is too complex (compiles to 301 RE2 instructions and the upstream's " +
		"other regex rules to 300; they may compile to 600 together)"}}
	if errs := RegexBudget(re(0, `a{299}`), others); !reflect.DeepEqual(errs, want) {
		t.Errorf("a rule over the budget: %v, want %v", errs, want)
	}
	// An update of rule 1 replaces it.
	if errs := RegexBudget(re(1, `a{598}`), others); errs != nil {
		t.Errorf("an update: %v", errs)
	}
	// Refused on their own, or no regex: ValidateRule's business.
	if RegexBudget(re(0, `(?:.*){1000}`), others) != nil || RegexBudget(re(0, `(`), others) != nil ||
		RegexBudget(Rule{PatternType: PatternWildcard, Pattern: "*"}, others) != nil {
		t.Error("RegexBudget judged what is not its own")
	}
}

// Stored regexes that do not fit in the budget together (written before it
// existed) are not evaluated, in id order: each refuses every value of its
// coordinate, naming itself, and leaves files that do not show the
// coordinate alone; the set's other rules still apply.
func TestCompileRulesUnevaluated(t *testing.T) {
	big := Rule{ID: 4, Type: RuleAllow, Target: TargetVersion, PatternType: PatternRegex, Pattern: `(?:.*){1000}`}
	late := Rule{ID: 6, Type: RuleDeny, Target: TargetArtifactID, PatternType: PatternRegex, Pattern: `a{298}`}
	rs, err := CompileRules([]Rule{
		{ID: 3, Type: RuleDeny, Target: TargetGroupID, PatternType: PatternWildcard, Pattern: "com.internal*"},
		big,
		{ID: 5, Type: RuleDeny, Target: TargetArtifactID, PatternType: PatternRegex, Pattern: `a{398}`}, // 400
		late, // 300 more: over 600
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, sizes := rs.Unevaluated(); !reflect.DeepEqual(got, []Rule{big, late}) || !reflect.DeepEqual(sizes, []int{2002, 300}) {
		t.Fatalf("Unevaluated() = %v %v", got, sizes)
	}
	if rs.Len() != 4 {
		t.Errorf("Len() = %d, want 4", rs.Len())
	}
	v := rs.Check(Coordinates{GroupID: "org.example", Version: "1.0"})
	if v.Allowed || !v.Unevaluated || v.Rule == nil || v.Rule.ID != 4 || v.Target != TargetVersion || v.Value != "1.0" {
		t.Fatalf("verdict %+v", v)
	}
	want := `rule 4 (version regex "(?:.*){1000}") is not evaluated: its 2002 RE2 instructions do not fit in ` +
		`the 600 of an upstream's regex rules; edit or delete it`
	if v.Reason() != want {
		t.Errorf("Reason() = %s\nwant       %s", v.Reason(), want)
	}
	if v := rs.Check(Coordinates{GroupID: "org.example", ArtifactID: "lib"}); v.Allowed || v.Rule.ID != 6 {
		t.Errorf("artifact: %+v, want rule 6 unevaluated", v)
	}
	if rs.AllowsVersion(Coordinates{GroupID: "org.example"}, "1.0") {
		t.Error("AllowsVersion evaluated around an unevaluated version rule")
	}
	// Metadata without a version or artifact: those rules do not apply.
	if v := rs.Check(Coordinates{GroupID: "org.example"}); !v.Allowed {
		t.Errorf("no version shown: %+v", v)
	}
	// The other rules still refuse.
	if v := rs.Check(Coordinates{GroupID: "com.internal.x"}); v.Allowed || v.Rule == nil || v.Rule.ID != 3 {
		t.Errorf("deny rule: %+v", v)
	}
}

// A regex reads at most MaxRegexInput bytes: a longer value is refused
// without evaluating it (an allow-everything regex does not let it
// through), naming a regex rule of its coordinate; wildcards read any
// length.
func TestRegexInputBound(t *testing.T) {
	rs := compile(t, rr(TargetVersion, PatternRegex, RuleAllow, `.*`), rr(TargetGroupID, PatternWildcard, RuleAllow, "*"))
	c := Coordinates{GroupID: strings.Repeat("g", MaxLen), ArtifactID: "a"}
	if !rs.AllowsVersion(c, strings.Repeat("1", MaxRegexInput)) {
		t.Error("a version of MaxRegexInput bytes refused")
	}
	if rs.AllowsVersion(c, strings.Repeat("1", MaxRegexInput+1)) {
		t.Error("a version longer than MaxRegexInput allowed")
	}
	v := rs.Check(Coordinates{GroupID: "g", Version: strings.Repeat("1", MaxRegexInput+1)})
	if v.Allowed || !v.Unevaluated || v.Rule == nil || v.Rule.ID != 1 || v.Size != 0 {
		t.Fatalf("verdict %+v", v)
	}
	if want := `rule 1 (version regex ".*") is not evaluated on a version longer than 255 bytes`; v.Reason() != want {
		t.Errorf("Reason() = %s, want %s", v.Reason(), want)
	}
}

// rr builds a rule; ids count from 1 in the order of a test's rules.
func rr(target, ptype, rtype, pattern string) Rule {
	return Rule{Type: rtype, Target: target, PatternType: ptype, Pattern: pattern}
}

func compile(t *testing.T, rules ...Rule) *RuleSet {
	t.Helper()
	for i := range rules {
		if rules[i].ID == 0 {
			rules[i].ID = int64(i + 1)
		}
		if errs := ValidateRule(rules[i]); errs != nil {
			t.Fatalf("rule %+v: %v", rules[i], errs)
		}
	}
	rs, err := CompileRules(rules)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

// pathAllowed evaluates rules against a path as the proxy does.
func pathAllowed(t *testing.T, path string, rules ...Rule) bool {
	t.Helper()
	p, err := Parse(path)
	if err != nil {
		t.Fatal(err)
	}
	return compile(t, rules...).Check(RuleCoordinates(p)).Allowed
}

const jarPath = "com/example/my-app/1.0.0/my-app-1.0.0.jar"

// The evaluation tables are GitLab's FiltrationService spec.

func TestRulesNone(t *testing.T) {
	if !pathAllowed(t, jarPath) {
		t.Fatal("no rules refused")
	}
	var rs *RuleSet
	if v := rs.Check(Coordinates{GroupID: "a"}); !v.Allowed || v.Reason() != "" {
		t.Fatalf("nil RuleSet: %+v", v)
	}
	if !rs.AllowsVersion(Coordinates{GroupID: "a", ArtifactID: "b"}, "1") || rs.Len() != 0 {
		t.Fatal("nil RuleSet refused a version")
	}
}

func TestRulesSingle(t *testing.T) {
	tests := []struct {
		rtype, pattern string
		want           bool
	}{
		{RuleAllow, "com.example", true},
		{RuleAllow, "org.other", false},
		{RuleDeny, "com.example", false},
		{RuleDeny, "org.other", true},
	}
	for _, tt := range tests {
		if got := pathAllowed(t, jarPath, rr(TargetGroupID, PatternWildcard, tt.rtype, tt.pattern)); got != tt.want {
			t.Errorf("%s %q: allowed %v, want %v", tt.rtype, tt.pattern, got, tt.want)
		}
	}
}

func TestRulesMultiple(t *testing.T) {
	g := func(rtype, pattern string) Rule { return rr(TargetGroupID, PatternWildcard, rtype, pattern) }
	tests := []struct {
		name  string
		rules []Rule
		want  bool
	}{
		{"multiple allow rules, all match", []Rule{g("allow", "com.*"), g("allow", "com.example")}, true},
		{"multiple allow rules, one matches", []Rule{g("allow", "org.other"), g("allow", "com.example")}, true},
		{"multiple allow rules, none match", []Rule{g("allow", "org.other"), g("allow", "net.foo")}, false},
		{"multiple deny rules, all match", []Rule{g("deny", "com.*"), g("deny", "com.example")}, false},
		{"multiple deny rules, one matches", []Rule{g("deny", "org.other"), g("deny", "com.example")}, false},
		{"multiple deny rules, none match", []Rule{g("deny", "org.other"), g("deny", "net.foo")}, true},
		{"deny takes precedence over allow", []Rule{g("allow", "com.example"), g("deny", "com.example")}, false},
	}
	for _, tt := range tests {
		if got := pathAllowed(t, jarPath, tt.rules...); got != tt.want {
			t.Errorf("%s: allowed %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestRulesAcrossCoordinates(t *testing.T) {
	tests := []struct {
		name           string
		group, artifct Rule
		want           bool
	}{
		{"all coordinates match", rr("group_id", "wildcard", "allow", "com.example"), rr("artifact_id", "wildcard", "allow", "my-app"), true},
		{"one coordinate fails", rr("group_id", "wildcard", "allow", "com.example"), rr("artifact_id", "wildcard", "allow", "other-app"), false},
		{"deny on any coordinate", rr("group_id", "wildcard", "allow", "com.example"), rr("artifact_id", "wildcard", "deny", "my-app"), false},
	}
	for _, tt := range tests {
		if got := pathAllowed(t, jarPath, tt.group, tt.artifct); got != tt.want {
			t.Errorf("%s: allowed %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestRulesPatternMatching(t *testing.T) {
	tests := []struct {
		name, target, ptype, pattern string
		matches                      bool
	}{
		{"exact match", "group_id", "wildcard", "com.example", true},
		{"leading wildcard", "group_id", "wildcard", "*.example", true},
		{"trailing wildcard", "group_id", "wildcard", "com.*", true},
		{"multiple wildcard", "version", "wildcard", "1.*.*", true},
		{"case insensitive", "group_id", "wildcard", "COM.EXAMPLE", true},
		{"non-matching group", "group_id", "wildcard", "org.apache", false},
		{"non-matching artifact", "artifact_id", "wildcard", "other-app", false},
		{"non-matching version", "version", "wildcard", "2.*", false},
		{"wildcard is a whole match", "group_id", "wildcard", "example", false},
		{"star matches nothing too", "artifact_id", "wildcard", "my-app*", true},
		{"both ends", "artifact_id", "wildcard", "*-app*", true},
		{"dot is literal", "group_id", "wildcard", "com_example", false},

		{"regex exact match", "group_id", "regex", `^com\.example$`, true},
		{"regex partial match", "group_id", "regex", "example", true},
		{"regex character class", "version", "regex", `^[0-9]+\.[0-9]+\.[0-9]+$`, true},
		{"regex alternation", "group_id", "regex", `^(com|org)\.example$`, true},
		{"regex case insensitive", "group_id", "regex", `^COM\.EXAMPLE$`, true},
		{"regex non-matching", "group_id", "regex", `^org\.apache`, false},
		{"regex top-level alternation, case-insensitive in both", "artifact_id", "regex", `^NOPE$|^MY-APP$`, true},
	}
	for _, tt := range tests {
		// As an allow rule the upstream is kept exactly when it matches; as
		// a deny rule exactly when it does not.
		if got := pathAllowed(t, jarPath, rr(tt.target, tt.ptype, RuleAllow, tt.pattern)); got != tt.matches {
			t.Errorf("%s (allow): allowed %v, want %v", tt.name, got, tt.matches)
		}
		if got := pathAllowed(t, jarPath, rr(tt.target, tt.ptype, RuleDeny, tt.pattern)); got != !tt.matches {
			t.Errorf("%s (deny): allowed %v, want %v", tt.name, got, !tt.matches)
		}
	}
}

func TestRulesMultipleUpstreams(t *testing.T) {
	w, re := PatternWildcard, PatternRegex
	tests := []struct {
		name  string
		rules map[int][]Rule
		want  []int
	}{
		{"no rules on any upstream", nil, []int{1, 2, 3}},
		{"all upstreams denied", map[int][]Rule{1: {rr("group_id", w, "deny", "*")}, 2: {rr("group_id", w, "deny", "*")},
			3: {rr("group_id", w, "deny", "*")}}, nil},
		{"all upstreams allowed", map[int][]Rule{1: {rr("group_id", w, "allow", "com.*")}, 2: {rr("group_id", w, "allow", "com.*")},
			3: {rr("group_id", w, "allow", "com.*")}}, []int{1, 2, 3}},
		{"one denied, others no rules", map[int][]Rule{1: {rr("group_id", w, "deny", "com.example")}}, []int{2, 3}},
		{"one allowed, others no rules", map[int][]Rule{1: {rr("group_id", w, "allow", "com.example")}}, []int{1, 2, 3}},
		{"one non-matching allow, others none", map[int][]Rule{1: {rr("group_id", w, "allow", "org.other")}}, []int{2, 3}},
		{"mixed: allow, deny, no rules", map[int][]Rule{1: {rr("group_id", w, "allow", "com.*")},
			2: {rr("group_id", w, "deny", "com.example")}}, []int{1, 3}},
		{"mixed pattern types across upstreams", map[int][]Rule{1: {rr("group_id", w, "allow", "com.*")},
			2: {rr("group_id", re, "allow", `^com\.example$`)}, 3: {rr("group_id", re, "deny", "example")}}, []int{1, 2}},
		{"multiple rules per upstream", map[int][]Rule{
			1: {rr("group_id", w, "allow", "com.*"), rr("artifact_id", w, "allow", "my-app")},
			2: {rr("group_id", w, "allow", "com.*"), rr("artifact_id", w, "deny", "my-app")}}, []int{1, 3}},
		{"deny overrides allow same upstream", map[int][]Rule{
			1: {rr("group_id", w, "allow", "com.*"), rr("group_id", w, "deny", "com.example")}}, []int{2, 3}},
	}
	p, err := Parse(jarPath)
	if err != nil {
		t.Fatal(err)
	}
	c := RuleCoordinates(p)
	for _, tt := range tests {
		var got []int
		for up := 1; up <= 3; up++ {
			if compile(t, tt.rules[up]...).Check(c).Allowed {
				got = append(got, up)
			}
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: allowed upstreams %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestRulesDifferentPaths(t *testing.T) {
	const snap = "com/example/my-app/1.0.0-SNAPSHOT/my-app-1.0.0-SNAPSHOT.jar"
	const md = "com/example/my-app/maven-metadata.xml"
	tests := []struct {
		name, path string
		rule       Rule
		want       bool
	}{
		{"snapshot artifact, matching version", snap, rr("version", "wildcard", "allow", "*-SNAPSHOT"), true},
		{"snapshot artifact, deny snapshot version", snap, rr("version", "wildcard", "deny", "*-SNAPSHOT"), false},
		{"snapshot artifact, matching regex version", snap, rr("version", "regex", "deny", "-SNAPSHOT$"), false},
		{"snapshot artifact, matching group", snap, rr("group_id", "wildcard", "allow", "com.example"), true},
		{"timestamped snapshot, deny snapshot version", "com/example/my-app/1.0.0-SNAPSHOT/my-app-1.0.0-20200101.120000-1.jar",
			rr("version", "wildcard", "deny", "*-SNAPSHOT"), false},

		{"artifact metadata, matching group", md, rr("group_id", "wildcard", "allow", "com.example"), true},
		{"artifact metadata, deny group", md, rr("group_id", "wildcard", "deny", "com.example"), false},
		{"artifact metadata, matching artifact", md, rr("artifact_id", "wildcard", "allow", "my-app"), true},
		{"artifact metadata, version rule ignored", md, rr("version", "wildcard", "deny", "*"), true},
		{"artifact metadata, version allow ignored", md, rr("version", "wildcard", "allow", "9.*"), true},
		{"metadata checksum, deny group", md + ".sha1", rr("group_id", "wildcard", "deny", "com.*"), false},
		{"version metadata, deny snapshot", "com/example/my-app/1.0-SNAPSHOT/maven-metadata.xml",
			rr("version", "wildcard", "deny", "*-SNAPSHOT"), false},
		{"group metadata, artifact rule ignored", "org/apache/maven/plugins/maven-metadata.xml",
			rr("artifact_id", "wildcard", "deny", "*"), true},
		{"group metadata, group deny", "org/apache/maven/plugins/maven-metadata.xml",
			rr("group_id", "wildcard", "deny", "org.apache.*"), false},

		{"checksum of a jar, deny artifact", jarPath + ".sha256", rr("artifact_id", "wildcard", "deny", "my-*"), false},
		{"renamed file still has the directory's coordinates", "com/internal/app/1.0/renamed.jar",
			rr("group_id", "wildcard", "deny", "com.internal*"), false},
		{"renamed file's checksum too", "com/internal/app/1.0/renamed.jar.sha1",
			rr("group_id", "wildcard", "deny", "com.internal*"), false},
		{"renamed file, allow list on version", "com/internal/app/1.0/renamed.jar",
			rr("version", "wildcard", "allow", "2.*"), false},
		{"prefixes.txt shows no coordinate", ".meta/prefixes.txt", rr("group_id", "wildcard", "deny", "*"), true},
		{"prefixes.txt and an allow list", ".meta/prefixes.txt", rr("group_id", "wildcard", "allow", "com.example"), true},
		{"root file", "archetype-catalog.xml", rr("group_id", "wildcard", "deny", "*"), true},
		{"two directories show no coordinates", "com/example/x.jar", rr("group_id", "wildcard", "deny", "*"), true},
	}
	for _, tt := range tests {
		if got := pathAllowed(t, tt.path, tt.rule); got != tt.want {
			t.Errorf("%s: allowed %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestRuleCoordinates(t *testing.T) {
	tests := []struct {
		path string
		want Coordinates
	}{
		{jarPath, Coordinates{"com.example", "my-app", "1.0.0"}},
		{"/" + jarPath + ".md5", Coordinates{"com.example", "my-app", "1.0.0"}},
		{"junit/junit/4.13.2/junit-4.13.2.jar", Coordinates{"junit", "junit", "4.13.2"}},
		{"com/example/my-app/maven-metadata.xml", Coordinates{"com.example", "my-app", ""}},
		{"com/example/my-app/maven-metadata.xml.sha1", Coordinates{"com.example", "my-app", ""}},
		{"com/example/my-app/1.0-SNAPSHOT/maven-metadata.xml", Coordinates{"com.example", "my-app", "1.0-SNAPSHOT"}},
		{"org/codehaus/mojo/maven-metadata.xml", Coordinates{"org.codehaus.mojo", "", ""}},
		{"g/maven-metadata.xml", Coordinates{"g", "", ""}},
		{"maven-metadata.xml", Coordinates{}},
		{"maven-metadata.xml.sha1", Coordinates{}},
		{"a/b/c/d/other-name.jar", Coordinates{"a.b", "c", "d"}},
		{"a/b/c/d/other-name.jar.sha512", Coordinates{"a.b", "c", "d"}},
		{"b/c/d/x.jar", Coordinates{"b", "c", "d"}},
		{"c/d/x.jar", Coordinates{}},
		{".meta/prefixes.txt", Coordinates{}},
		{"x.jar", Coordinates{}},
	}
	for _, tt := range tests {
		for _, parse := range []func(string) (Path, error){Parse, Classify} {
			p, err := parse(tt.path)
			if err != nil {
				t.Fatal(err)
			}
			if got := RuleCoordinates(p); got != tt.want {
				t.Errorf("RuleCoordinates(%q) = %+v, want %+v", tt.path, got, tt.want)
			}
		}
	}
}

func TestVerdictReason(t *testing.T) {
	rs := compile(t,
		Rule{ID: 7, Type: RuleDeny, Target: TargetGroupID, PatternType: PatternWildcard, Pattern: "com.internal.*"},
		Rule{ID: 9, Type: RuleAllow, Target: TargetArtifactID, PatternType: PatternRegex, Pattern: `^my-`},
	)
	v := rs.Check(Coordinates{GroupID: "com.internal.app", ArtifactID: "x", Version: "1"})
	if v.Allowed || v.Rule == nil || v.Rule.ID != 7 || v.Target != "group_id" || v.Value != "com.internal.app" {
		t.Fatalf("verdict %+v", v)
	}
	if got, want := v.Reason(), `deny rule 7 (group_id wildcard "com.internal.*") matches group_id "com.internal.app"`; got != want {
		t.Errorf("Reason() = %s, want %s", got, want)
	}
	v = rs.Check(Coordinates{GroupID: "com.example", ArtifactID: "other-app", Version: "1"})
	if v.Allowed || v.Rule != nil || v.Target != "artifact_id" || v.Value != "other-app" {
		t.Fatalf("verdict %+v", v)
	}
	if got, want := v.Reason(), `no allow rule on artifact_id matches "other-app"`; got != want {
		t.Errorf("Reason() = %s, want %s", got, want)
	}
	if v := rs.Check(Coordinates{GroupID: "com.example", ArtifactID: "MY-app"}); !v.Allowed || v.Reason() != "" {
		t.Errorf("allowed verdict %+v, reason %q", v, v.Reason())
	}
	// A value with control characters stays on one line.
	v = compile(t, rr(TargetVersion, PatternWildcard, RuleDeny, "*")).Check(Coordinates{Version: "1\n2"})
	if strings.ContainsAny(v.Reason(), "\n\r") {
		t.Errorf("Reason() spans lines: %q", v.Reason())
	}
	// The first matching deny rule in id order names the refusal.
	v = compile(t, rr(TargetVersion, PatternWildcard, RuleDeny, "2.*"), rr(TargetGroupID, PatternWildcard, RuleDeny, "*"),
		rr(TargetArtifactID, PatternWildcard, RuleDeny, "*")).Check(Coordinates{"g", "a", "1"})
	if v.Rule == nil || v.Rule.ID != 2 {
		t.Errorf("verdict %+v, want rule 2", v)
	}
}

func TestAllowsVersion(t *testing.T) {
	rs := compile(t,
		rr(TargetVersion, PatternWildcard, RuleDeny, "*-SNAPSHOT"),
		rr(TargetVersion, PatternRegex, RuleAllow, `^1\.`),
		rr(TargetArtifactID, PatternWildcard, RuleAllow, "lib"),
	)
	c := Coordinates{GroupID: "org.example", ArtifactID: "lib"}
	for v, want := range map[string]bool{"1.0": true, "1.2.3": true, "1.0-SNAPSHOT": false, "2.0": false} {
		if got := rs.AllowsVersion(c, v); got != want {
			t.Errorf("AllowsVersion(%q) = %v, want %v", v, got, want)
		}
	}
	if rs.AllowsVersion(Coordinates{GroupID: "org.example", ArtifactID: "other"}, "1.0") {
		t.Error("a refused artifact allowed a version")
	}
	if c.Version != "" {
		t.Error("AllowsVersion changed its argument")
	}
	if rs.Len() != 3 {
		t.Errorf("Len() = %d", rs.Len())
	}
}

func TestCompileRulesRefuses(t *testing.T) {
	for _, r := range []Rule{
		{ID: 1, Type: "maybe", Target: TargetGroupID, PatternType: PatternWildcard, Pattern: "x"},
		{ID: 1, Type: RuleAllow, Target: "classifier", PatternType: PatternWildcard, Pattern: "x"},
		{ID: 1, Type: RuleAllow, Target: TargetGroupID, PatternType: "glob", Pattern: "x"},
		{ID: 1, Type: RuleAllow, Target: TargetGroupID, PatternType: PatternRegex, Pattern: "("},
		// "(?i)" + pattern must not turn a broken pattern into a valid one.
		{ID: 1, Type: RuleAllow, Target: TargetGroupID, PatternType: PatternRegex, Pattern: "a)|(?:b"},
	} {
		if rs, err := CompileRules([]Rule{r}); !errors.Is(err, ErrBadRule) || rs != nil {
			t.Errorf("CompileRules(%+v) = %v, %v; want ErrBadRule", r, rs, err)
		}
	}
	if rs, err := CompileRules(nil); rs != nil || err != nil {
		t.Errorf("CompileRules(nil) = %v, %v", rs, err)
	}
}

func TestGlobMatchFold(t *testing.T) {
	tests := []struct {
		pattern, s string
		want       bool
	}{
		{"", "", true},
		{"", "a", false},
		{"*", "", true},
		{"*", "anything", true},
		{"**", "x", true},
		{"a*", "a", true},
		{"a*b", "ab", true},
		{"a*b", "axxb", true},
		{"a*b", "axxbc", false},
		{"ab*ba", "aba", false},
		{"ab*ba", "abba", true},
		{"*a*a*", "aa", true},
		{"*a*a*", "a", false},
		{"*.example.*", "com.example.app", true},
		{"*.example.*", "com.example", false},
		{"1.*.*", "1.0.0", true},
		{"1.*.*", "1.0", false},
		{"com.example", "COM.Example", true},
		{"x*y*z", "xyz", true},
		{"x*y*z", "xzy", false},
	}
	for _, tt := range tests {
		if got := globMatchFold(tt.pattern, tt.s); got != tt.want {
			t.Errorf("globMatchFold(%q, %q) = %v, want %v", tt.pattern, tt.s, got, tt.want)
		}
	}
}

// globReference is the wildcard semantics by regexp, over ASCII-lowered text.
func globReference(pattern, s string) bool {
	pieces := strings.Split(lowerASCII(pattern), "*")
	for i, p := range pieces {
		pieces[i] = regexp.QuoteMeta(p)
	}
	return regexp.MustCompile(`(?s)^` + strings.Join(pieces, ".*") + `$`).MatchString(lowerASCII(s))
}

func FuzzRules(f *testing.F) {
	for _, s := range [][4]string{
		{"group_id", "wildcard", "com.*", "com.example"},
		{"artifact_id", "wildcard", "*-app*", "My-App"},
		{"version", "wildcard", "1.*.*", "1.0.0"},
		{"version", "regex", "-SNAPSHOT$", "1.0-snapshot"},
		{"group_id", "regex", `^(com|org)\.example$`, "org.example"},
		{"group_id", "regex", "[", "x"},
		{"version", "wildcard", "**", ""},
		{"x", "y", "", "\xff"},
	} {
		f.Add(s[0], s[1], s[2], s[3], true)
	}
	f.Fuzz(func(t *testing.T, target, ptype, pattern, value string, deny bool) {
		rtype := RuleAllow
		if deny {
			rtype = RuleDeny
		}
		r := Rule{ID: 1, Type: rtype, Target: target, PatternType: ptype, Pattern: pattern}
		errs := ValidateRule(r)
		rs, err := CompileRules([]Rule{r})
		if errs == nil && err != nil {
			t.Fatalf("valid rule %+v does not compile: %v", r, err)
		}
		if err != nil {
			if !errors.Is(err, ErrBadRule) || rs != nil {
				t.Fatalf("CompileRules(%+v) = %v, %v", r, rs, err)
			}
			return
		}
		// What validation accepts is within the program bound and
		// evaluated; what it refuses as too complex is not evaluated.
		size := RegexProgramSize(pattern)
		unevaluated, _ := rs.Unevaluated()
		if errs == nil && ptype == PatternRegex && (size > MaxRegexProgram || len(unevaluated) != 0) {
			t.Fatalf("accepted %q compiles to %d instructions; unevaluated %v", pattern, size, unevaluated)
		}
		if ptype == PatternRegex && size > MaxRegexProgram && len(unevaluated) != 1 {
			t.Fatalf("%q of %d instructions is evaluated", pattern, size)
		}
		for _, c := range []Coordinates{{value, value, value}, {GroupID: value}, {}} {
			v := rs.Check(c)
			reason := v.Reason()
			if v.Allowed != (reason == "") || strings.ContainsAny(reason, "\n\r") {
				t.Fatalf("verdict %+v, reason %q", v, reason)
			}
			if c == (Coordinates{}) && !v.Allowed {
				t.Fatalf("no coordinates refused: %+v", v)
			}
			if rs.AllowsVersion(c, value) != rs.Check(Coordinates{c.GroupID, c.ArtifactID, value}).Allowed {
				t.Fatal("AllowsVersion differs from Check")
			}
			if tr, ok := parseTarget(target); ok && ptype == PatternRegex && len(value) > MaxRegexInput && c.value(tr) != "" && v.Allowed {
				t.Fatalf("a regex allowed a value of %d bytes", len(value))
			}
		}
		if ptype == PatternWildcard && utf8.ValidString(pattern) && utf8.ValidString(value) {
			if got, want := globMatchFold(lowerASCII(pattern), value), globReference(pattern, value); got != want {
				t.Fatalf("globMatchFold(%q, %q) = %v, reference %v", pattern, value, got, want)
			}
		}
	})
}

// benchRules are 20 rules, the most an upstream may have, none of which
// matches the benchmark's coordinates until the last allow of each target.
func benchRules() []Rule {
	var rules []Rule
	add := func(target, ptype, rtype, pattern string) {
		rules = append(rules, Rule{ID: int64(len(rules) + 1), Type: rtype, Target: target, PatternType: ptype, Pattern: pattern})
	}
	for _, g := range []string{"com.internal.*", "*.corp", "net.private*", "*secret*", "io.inhouse.*"} {
		add(TargetGroupID, PatternWildcard, RuleDeny, g)
	}
	for _, g := range []string{`^com\.acme\.`, `\.internal$`, `^(corp|intra)\.`} {
		add(TargetGroupID, PatternRegex, RuleDeny, g)
	}
	for _, a := range []string{"*-internal", "private-*", "*-secret*"} {
		add(TargetArtifactID, PatternWildcard, RuleDeny, a)
	}
	add(TargetVersion, PatternWildcard, RuleDeny, "*-SNAPSHOT")
	add(TargetVersion, PatternRegex, RuleDeny, `(?:alpha|beta|rc)\d*$`)
	for _, g := range []string{"org.springframework*", "com.google.*", "io.netty", "org.apache.*"} {
		add(TargetGroupID, PatternWildcard, RuleAllow, g)
	}
	add(TargetArtifactID, PatternRegex, RuleAllow, `^[a-z0-9-]+$`)
	add(TargetVersion, PatternWildcard, RuleAllow, "*.*")
	add(TargetVersion, PatternRegex, RuleAllow, `^\d`)
	return rules
}

var sinkVerdict Verdict

func BenchmarkRuleCheck(b *testing.B) {
	rules := benchRules()
	if len(rules) != 20 {
		b.Fatalf("%d rules", len(rules))
	}
	rs, err := CompileRules(rules)
	if err != nil {
		b.Fatal(err)
	}
	c := Coordinates{GroupID: "org.apache.commons", ArtifactID: "commons-lang3", Version: "3.12.0"}
	if !rs.Check(c).Allowed {
		b.Fatalf("refused: %s", rs.Check(c).Reason())
	}
	b.ReportAllocs()
	for b.Loop() {
		sinkVerdict = rs.Check(c)
	}
}

// BenchmarkRuleWorstAccepted is what the regex budget leaves an upstream
// owner: its regex rules at MaxRegexProgram together, built to keep every
// thread of RE2's machine alive, on values as long as MaxRegexInput;
// against twenty typical rules (benchRules) in the same run (ratio), and
// against the pattern of the issue, which the bound refuses, compiled
// anyway and run on a path's longest group.
func BenchmarkRuleWorstAccepted(b *testing.B) {
	const worst = `(?:.*){148}x` // 299 instructions: no value matches, every start is tried
	if n := RegexProgramSize(worst); 2*n > MaxRegexProgram {
		b.Fatalf("%d instructions", n)
	}
	var rules []Rule
	for i, t := range []string{TargetGroupID, TargetArtifactID} {
		rules = append(rules, Rule{ID: int64(i + 1), Type: RuleDeny, Target: t, PatternType: PatternRegex, Pattern: worst})
	}
	worstSet, err := CompileRules(rules)
	if err != nil {
		b.Fatal(err)
	}
	if u, _ := worstSet.Unevaluated(); len(u) != 0 {
		b.Fatalf("unevaluated %v", u)
	}
	typical, err := CompileRules(benchRules())
	if err != nil {
		b.Fatal(err)
	}
	long := strings.Repeat("a.", MaxRegexInput/2)
	worstCoord := Coordinates{GroupID: long, ArtifactID: long, Version: "1"}
	usual := Coordinates{GroupID: "org.apache.commons", ArtifactID: "commons-lang3", Version: "3.12.0"}
	refused := regexp.MustCompile(`(?i)` + strings.Repeat(`(?:.*){1000}`, 21) + "x")
	group := strings.Repeat("a.", MaxLen/2-8)
	var base float64
	for _, bc := range []struct {
		name string
		run  func()
	}{
		{"typical", func() { sinkVerdict = typical.Check(usual) }},
		{"worst-accepted", func() { sinkVerdict = worstSet.Check(worstCoord) }},
		{"issue-pattern", func() { _ = refused.MatchString(group) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				bc.run()
			}
			per := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			if bc.name == "typical" {
				base = per
			} else if base > 0 {
				b.ReportMetric(per/base, "x-typical")
			}
		})
	}
}
