//go:build !race

package maven

import "testing"

// The race detector's instrumentation allocates; this only holds without it.

// TestRuleCheckAllocs: evaluating an upstream's rules on the download path
// allocates nothing, whatever the verdict.
func TestRuleCheckAllocs(t *testing.T) {
	rs, err := CompileRules(benchRules())
	if err != nil {
		t.Fatal(err)
	}
	var v Verdict
	for _, c := range []Coordinates{
		{GroupID: "org.apache.commons", ArtifactID: "commons-lang3", Version: "3.12.0"}, // allowed
		{GroupID: "com.internal.app", ArtifactID: "x", Version: "1"},                    // a deny rule
		{GroupID: "net.example", ArtifactID: "x", Version: "1"},                         // no allow rule
		{GroupID: "ORG.APACHE.X", ArtifactID: "Y", Version: "1.0-snapshot"},             // case folding
	} {
		if got := testing.AllocsPerRun(100, func() { v = rs.Check(c) }); got != 0 {
			t.Errorf("Check(%+v): %v allocations per run, want 0", c, got)
		}
		if got := testing.AllocsPerRun(100, func() { _ = rs.AllowsVersion(c, "2.0") }); got != 0 {
			t.Errorf("AllowsVersion(%+v): %v allocations per run, want 0", c, got)
		}
	}
	_ = v
	p, err := Classify("org/apache/commons/commons-lang3/3.12.0/commons-lang3-3.12.0.jar")
	if err != nil {
		t.Fatal(err)
	}
	if got := testing.AllocsPerRun(100, func() { _ = RuleCoordinates(p) }); got != 1 {
		t.Errorf("RuleCoordinates of a Classify path: %v allocations, want 1 (the dotted group)", got)
	}
	if p, err = Parse(p.Rel); err != nil {
		t.Fatal(err)
	}
	if got := testing.AllocsPerRun(100, func() { _ = RuleCoordinates(p) }); got != 0 {
		t.Errorf("RuleCoordinates of a Parse path: %v allocations, want 0", got)
	}
}
