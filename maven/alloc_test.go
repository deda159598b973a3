//go:build !race

package maven

import "testing"

// The race detector's instrumentation allocates; these only hold without it.

func TestAllocs(t *testing.T) {
	f := func(name string, want float64, fn func()) {
		t.Helper()
		if got := testing.AllocsPerRun(100, fn); got != want {
			t.Errorf("%s: %v allocations per run, want %v", name, got, want)
		}
	}
	jar := "/org/apache/commons/commons-lang3/3.12.0/commons-lang3-3.12.0.jar"
	var p Path
	var err error
	f("Classify jar", 0, func() { p, err = Classify(jar) })
	sha1 := jar + ".sha1"
	f("Classify checksum", 0, func() { p, err = Classify(sha1) })
	f("Classify metadata", 0, func() { p, err = Classify("org/apache/commons/commons-lang3/maven-metadata.xml") })
	f("Classify rejected", 0, func() { p, err = Classify("org/../etc/passwd") })
	f("Classify rejected encoded", 0, func() { p, err = Classify("org/%2e%2e/etc/passwd") })
	f("Classify rejected char", 0, func() { p, err = Classify("org/a:b") })
	f("Classify encoded", 1, func() { p, err = Classify("org/a/1/a-1%2B1.jar") }) // the decoded copy
	f("Parse single-segment group", 0, func() { p, err = Parse("junit/junit/4.13.2/junit-4.13.2.jar") })
	f("Parse jar", 1, func() { p, err = Parse(jar) }) // the dotted GroupID
	f("ContentType", 0, func() { _ = ContentType(jar) })
	_, _ = p, err
}
