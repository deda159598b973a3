package proxy

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"registryd/maven"
	"registryd/store"
)

// A repeated download runs no regex: the first check of an upstream's
// rules on a file's coordinates is evaluated, the next ones come from the
// cache, for allowed and refused files alike, until the rules change.
func TestRuleVerdictsCached(t *testing.T) {
	e := newEnv(t)
	a, b := newFakeUpstream(t), newFakeUpstream(t)
	const jar = "com/example/app/1.0/app-1.0.jar"
	const internal = "com/internal/app/1.0/app-1.0.jar"
	for _, p := range []string{jar, internal} {
		a.set(p, fakeFile{body: jarBytes(p, 512)})
		b.set(p, fakeFile{body: jarBytes(p, 512)})
	}
	aid := e.upstream(a.URL, nil, nil)
	e.upstream(b.URL, nil, nil)
	addRule(t, e, aid, "deny", "group_id", "regex", `^com\.internal`)
	addRule(t, e, aid, "allow", "version", "regex", `^\d`)
	checks := func() (cached, evaluated float64) {
		return e.metric("registryd_upstream_rule_checks_total", "source", "cache"),
			e.metric("registryd_upstream_rule_checks_total", "source", "evaluated")
	}

	for range 5 {
		e.get(jar).expect(t, 200)
		e.get(internal).expect(t, 200) // from b: a refuses it
	}
	if c, ev := checks(); ev != 2 || c != 8 {
		t.Fatalf("after 5 downloads of 2 files: %v evaluated, %v from the cache; want 2 and 8", ev, c)
	}
	if b.calls(jar) != 0 || b.calls(internal) != 1 {
		t.Fatalf("b asked %d/%d times", b.calls(jar), b.calls(internal))
	}
	// An edit is a new generation: evaluated again, once.
	rules, err := e.st.UpstreamRules(aid)
	if err != nil {
		t.Fatal(err)
	}
	other := `^com\.other`
	if _, err := e.st.UpdateUpstreamRule(rules[0].ID, store.UpstreamRulePatch{Pattern: &other}); err != nil {
		t.Fatal(err)
	}
	e.get(internal).expect(t, 200)
	e.get(internal).expect(t, 200)
	if c, ev := checks(); ev != 3 || c != 9 {
		t.Fatalf("after an edit: %v evaluated, %v from the cache; want 3 and 9", ev, c)
	}
}

// What the verdict cache keeps is its own: coordinates that alias a
// request buffer, reused for another request afterwards, change neither
// the cached keys nor the verdicts handed out.
func TestVerdictCacheOwnsItsStrings(t *testing.T) {
	rs, err := newRuleSets(nil, 16384)
	if err != nil {
		t.Fatal(err)
	}
	set, err := maven.CompileRules([]maven.Rule{{ID: 1, Type: maven.RuleDeny, Target: maven.TargetGroupID,
		PatternType: maven.PatternRegex, Pattern: `^com\.internal`}})
	if err != nil {
		t.Fatal(err)
	}
	rules := &upstreamRules{set: set, verdicts: rs}
	// The request buffer: Classify's path and the coordinates alias it.
	buf := []byte("com/internal/app/1.0/app-1.0.jar|com.internal")
	p, err := maven.Classify(b2s(buf[:32]))
	if err != nil {
		t.Fatal(err)
	}
	c := maven.Coordinates{GroupID: b2s(buf[33:]), ArtifactID: p.ArtifactID, Version: p.Version}
	v := verdict(rules, p, c)
	if v.Allowed || v.Value != "com.internal" {
		t.Fatalf("verdict %+v", v)
	}
	copy(buf, strings.Repeat("x", len(buf))) // the buffer serves another request
	if v.Value != "com.internal" {
		t.Fatalf("the verdict's value changed with the request buffer: %q", v.Value)
	}
	keys := rs.verdicts.Keys()
	if len(keys) != 1 {
		t.Fatalf("%d keys", len(keys))
	}
	if k := keys[0]; k.groupID != "com.internal" || k.artifactID != "app" || k.version != "1.0" {
		t.Fatalf("the cached key changed with the request buffer: %+v", k)
	}
	cached, _ := rs.verdicts.Peek(keys[0])
	if cached.Value != "com.internal" {
		t.Fatalf("the cached verdict changed with the request buffer: %+v", cached)
	}
}

// A regex rule stored before the budget existed (no API accepts it now) is
// not evaluated: its upstream refuses the files that show the rule's
// coordinate, naming the rule, the next upstream serves them, and the
// gauge counts it. Nothing else of the upstream is affected.
func TestRuleOverBudgetStored(t *testing.T) {
	e := newEnv(t)
	a, b := newFakeUpstream(t), newFakeUpstream(t)
	const jar = "com/example/app/1.0/app-1.0.jar"
	const meta = "archetype-catalog.xml" // shows no coordinate
	a.set(jar, fakeFile{body: jarBytes("a "+jar, 512)})
	b.set(jar, fakeFile{body: jarBytes("b "+jar, 512)})
	a.set(meta, fakeFile{body: []byte("<archetype-catalog/>"), ctype: "application/xml"})
	aid := e.upstream(a.URL, nil, nil)
	e.upstream(b.URL, nil, nil)
	big := addRule(t, e, aid, "deny", "version", "regex", strings.Repeat(`(?:.*){1000}`, 21))

	e.get(jar).expect(t, 200).expectBody(t, string(jarBytes("b "+jar, 512)))
	if a.calls(jar) != 0 {
		t.Fatal("the upstream of the unevaluated rule was asked")
	}
	if got := e.metric("registryd_upstream_rules_unevaluated"); got != 1 {
		t.Fatalf("registryd_upstream_rules_unevaluated %v, want 1", got)
	}
	e.get(meta).expect(t, 200)
	if a.calls(meta) != 1 {
		t.Fatalf("a file without a version was not asked of the upstream (%d calls)", a.calls(meta))
	}

	// Alone, it answers 403 naming the rule.
	rb, err := e.st.RegistryUpstreams(e.registry)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range rb {
		if u.ID != aid {
			if err := e.st.DeleteUpstream(u.ID); err != nil {
				t.Fatal(err)
			}
		}
	}
	r := e.get("com/example/app/2.0/app-2.0.jar", "Accept", "application/problem+json").expect(t, 403)
	var doc problemDoc
	if err := json.Unmarshal(r.body, &doc); err != nil || len(doc.Upstreams) != 1 {
		t.Fatalf("problem %s", r.body)
	}
	want := fmt.Sprintf("rule %d (version regex %q) is not evaluated: its 42002 RE2 instructions do not fit in the 600 "+
		"of an upstream's regex rules; edit or delete it", big.ID, big.Pattern)
	if u := doc.Upstreams[0]; u.Rule != big.ID || !strings.Contains(u.Reason, want) {
		t.Fatalf("problem upstream %+v\nwant reason %s", u, want)
	}
}

// BenchmarkVerdict: a check of an upstream's rules from the cache, against
// the same check evaluated (20 rules, as maven's BenchmarkRuleCheck, and
// two regexes at the budget on values at the input bound).
func BenchmarkVerdict(b *testing.B) {
	worst := strings.Repeat("a.", maven.MaxRegexInput/2)
	for _, bc := range []struct {
		name  string
		rules []maven.Rule
		c     maven.Coordinates
	}{
		{"typical", []maven.Rule{
			{ID: 1, Type: maven.RuleDeny, Target: maven.TargetGroupID, PatternType: maven.PatternRegex, Pattern: `^com\.internal\.`},
			{ID: 2, Type: maven.RuleDeny, Target: maven.TargetVersion, PatternType: maven.PatternRegex, Pattern: `(?:alpha|beta|rc)\d*$`},
			{ID: 3, Type: maven.RuleAllow, Target: maven.TargetArtifactID, PatternType: maven.PatternRegex, Pattern: `^[a-z0-9-]+$`},
		}, maven.Coordinates{GroupID: "org.apache.commons", ArtifactID: "commons-lang3", Version: "3.12.0"}},
		{"worst", []maven.Rule{
			{ID: 1, Type: maven.RuleDeny, Target: maven.TargetGroupID, PatternType: maven.PatternRegex, Pattern: `(?:.*){148}x`},
			{ID: 2, Type: maven.RuleDeny, Target: maven.TargetArtifactID, PatternType: maven.PatternRegex, Pattern: `(?:.*){148}x`},
		}, maven.Coordinates{GroupID: worst, ArtifactID: worst, Version: "1"}},
	} {
		set, err := maven.CompileRules(bc.rules)
		if err != nil {
			b.Fatal(err)
		}
		p, _ := maven.Classify("g/a/1/a-1.jar")
		b.Run(bc.name+"/evaluated", func(b *testing.B) {
			for b.Loop() {
				_ = evaluate(set, false, bc.c)
			}
		})
		b.Run(bc.name+"/cached", func(b *testing.B) {
			rs, err := newRuleSets(nil, 16384)
			if err != nil {
				b.Fatal(err)
			}
			rules := &upstreamRules{set: set, verdicts: rs}
			_ = verdict(rules, p, bc.c)
			b.ReportAllocs()
			for b.Loop() {
				_ = verdict(rules, p, bc.c)
			}
		})
	}
}
