package osv

import (
	"archive/zip"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"registryd/store"
)

// readFixtures decodes the records of the test databases under
// testdata/osv (see its README): real Go and GitHub records and
// hand-written ones, one case each.
func readFixtures(t *testing.T, dirs ...string) []*store.Advisory {
	t.Helper()
	var out []*store.Advisory
	for _, d := range dirs {
		var st Stats
		for a, err := range ReadDir(os.DirFS(filepath.Join("..", "testdata", "osv", d)), &st) {
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, a)
		}
	}
	return out
}

// matches lists the ids of the advisories affecting a version, as the
// store would find them: by ecosystem and normalised name.
func matches(advs []*store.Advisory, eco, name, version string) []string {
	var ids []string
	name = NormalizeName(eco, name)
	for _, a := range advs {
		if a.Withdrawn {
			continue
		}
		for _, p := range a.Packages {
			if p.Ecosystem == eco && p.Name == name && (Matcher{}).Affects(eco, version, p.Affected) {
				ids = append(ids, a.ID)
			}
		}
	}
	slices.Sort(ids)
	return ids
}

func TestMatchFixtures(t *testing.T) {
	advs := readFixtures(t, "fixture", "go", "ghsa")
	tests := []struct {
		eco, name, version string
		want               []string
	}{
		// Maven order, two ranges, a beta as introduced.
		{Maven, "org.apache.logging.log4j/log4j-core", "2.14.1", []string{"REGISTRYD-TEST-MAVEN-1"}},
		{Maven, "org.apache.logging.log4j:log4j-core", "2.12.1", []string{"REGISTRYD-TEST-MAVEN-1"}},
		{Maven, "org.apache.logging.log4j/log4j-core", "2.0-beta9", []string{"REGISTRYD-TEST-MAVEN-1"}},
		{Maven, "org.apache.logging.log4j/log4j-core", "2.0-alpha1", nil},
		{Maven, "org.apache.logging.log4j/log4j-core", "2.12.2", nil},
		{Maven, "org.apache.logging.log4j/log4j-core", "2.15.0", nil},
		// last_affected is inclusive.
		{Maven, "com.google.guava/guava", "29.0", []string{"REGISTRYD-TEST-MAVEN-2"}},
		{Maven, "com.google.guava/guava", "28.2-android", []string{"REGISTRYD-TEST-MAVEN-2"}},
		{Maven, "com.google.guava/guava", "30.0", nil},
		// npm semver with prereleases.
		{NPM, "@babel/traverse", "7.23.1", []string{"REGISTRYD-TEST-NPM-1"}},
		{NPM, "@babel/traverse", "7.23.2", nil},
		{NPM, "@babel/traverse", "8.0.0-alpha.3", []string{"REGISTRYD-TEST-NPM-1"}},
		{NPM, "@babel/traverse", "8.0.0-alpha.4", nil},
		{NPM, "@babel/traverse", "8.0.0", nil},
		// limit ends the range like fixed.
		{NPM, "debug", "3.2.7", []string{"REGISTRYD-TEST-LIMIT-1"}},
		{NPM, "debug", "4.0.0", nil},
		// PEP 440 with pre-releases; names normalised.
		{PyPI, "Django", "4.2.7", []string{"REGISTRYD-TEST-PYPI-1"}},
		{PyPI, "django", "5.0b1", []string{"REGISTRYD-TEST-PYPI-1"}},
		{PyPI, "Django", "5.0rc1", nil},
		{PyPI, "Django", "4.2.8", nil},
		{PyPI, "Django", "4.1", nil},
		// Enumerated versions; the GIT range is not evaluated.
		{PyPI, "PyYAML", "5.3", []string{"REGISTRYD-TEST-PYPI-2"}},
		{PyPI, "py_yaml", "5.3", nil},
		{PyPI, "pyyaml", "5.3.0", []string{"REGISTRYD-TEST-PYPI-2"}}, // equal in PEP 440
		{PyPI, "pyyaml", "5.3.1", nil},
		// RubyGems with a prerelease introduced.
		{RubyGems, "nokogiri", "1.13.3", []string{"REGISTRYD-TEST-GEM-1"}},
		{RubyGems, "nokogiri", "1.13.0.rc1", []string{"REGISTRYD-TEST-GEM-1"}},
		{RubyGems, "nokogiri", "1.13.0.beta1", nil},
		{RubyGems, "nokogiri", "1.13.4", nil},
		// Composer: "v" prefixes and stability suffixes in any case.
		{Packagist, "symfony/http-kernel", "v5.4.19", []string{"REGISTRYD-TEST-PACKAGIST-1"}},
		{Packagist, "Symfony/Http-Kernel", "6.0.0-beta2", []string{"REGISTRYD-TEST-PACKAGIST-1"}},
		{Packagist, "symfony/http-kernel", "6.0.19", []string{"REGISTRYD-TEST-PACKAGIST-1"}},
		{Packagist, "symfony/http-kernel", "5.4.20", nil},
		{Packagist, "symfony/http-kernel", "4.4.50", nil},
		// NuGet: names ignore case.
		{NuGet, "newtonsoft.json", "12.0.3", []string{"REGISTRYD-TEST-NUGET-1"}},
		{NuGet, "Newtonsoft.Json", "13.0.1", nil},
		// Go: module versions with v, pseudo-versions in events.
		{Go, "github.com/gin-gonic/gin", "v1.5.0", []string{"GO-2020-0001", "GO-2021-0052", "GO-2023-1737", "REGISTRYD-TEST-GO-1"}},
		{Go, "github.com/gin-gonic/gin", "v1.7.7", []string{"GO-2023-1737", "REGISTRYD-TEST-GO-1"}},
		{Go, "github.com/gin-gonic/gin", "v1.9.1", nil},
		{Go, "github.com/gin-gonic/gin", "v1.3.0", []string{"GO-2020-0001", "GO-2021-0052"}},
		{Go, "golang.org/x/text", "v0.3.5", []string{"GO-2021-0113", "GO-2022-1059"}},
		{Go, "golang.org/x/text", "v0.3.2", []string{"GO-2020-0015", "GO-2021-0113", "GO-2022-1059"}},
		{Go, "stdlib", "go1.16.0", []string{"GO-2021-0067"}},
		{Go, "stdlib", "go1.16.1", nil},
		// Withdrawn records match nothing.
		{Go, "k8s.io/kubernetes", "v1.20.0", nil},
		{NPM, "left-pad", "1.3.0", nil},
		// crates.io: SEMVER ranges.
		{CratesIO, "smallvec", "0.6.13", []string{"REGISTRYD-TEST-CRATES-1"}},
		{CratesIO, "smallvec", "1.6.0", []string{"REGISTRYD-TEST-CRATES-1"}},
		{CratesIO, "smallvec", "1.6.1", nil},
		// Real GitHub records.
		{NPM, "lodash", "4.17.20", []string{"GHSA-35jh-r3h4-6jhm"}},
		{NPM, "lodash-es", "4.17.15", []string{"GHSA-35jh-r3h4-6jhm"}},
		{NPM, "lodash", "4.17.21", nil},
		{NPM, "minimist", "1.2.5", []string{"GHSA-xvch-5gv4-984h"}},
		{NPM, "minimist", "0.2.3", []string{"GHSA-xvch-5gv4-984h"}},
		{NPM, "minimist", "0.2.4", nil},
		// Versions that are none of the ecosystem's match no range.
		{NPM, "lodash", "latest", nil},
	}
	for _, tt := range tests {
		if got := matches(advs, tt.eco, tt.name, tt.version); !slices.Equal(got, tt.want) {
			t.Errorf("%s %s@%s: %v, want %v", tt.eco, tt.name, tt.version, got, tt.want)
		}
	}
}

func TestDecodeFixtures(t *testing.T) {
	byID := map[string]*store.Advisory{}
	for _, a := range readFixtures(t, "fixture", "go", "ghsa") {
		byID[a.ID] = a
	}
	tests := []struct {
		id, summary, severity string
		aliases               []string
		packages              []string
		withdrawn             bool
	}{
		{id: "GHSA-35jh-r3h4-6jhm", summary: "Command Injection in lodash", severity: "high", aliases: []string{"CVE-2021-23337"},
			packages: []string{"npm lodash", "npm lodash-es"}},
		{id: "GHSA-xvch-5gv4-984h", summary: "Prototype Pollution in minimist", severity: "critical",
			aliases: []string{"CVE-2021-44906"}, packages: []string{"npm minimist"}},
		{id: "GO-2020-0001", summary: "Arbitrary log line injection in github.com/gin-gonic/gin", severity: "unknown",
			aliases: []string{"CVE-2020-36567", "GHSA-6vm3-jj99-7229"}, packages: []string{"Go github.com/gin-gonic/gin"}},
		{id: "GO-2022-0617", summary: "WITHDRAWN: Potential proxy IP restriction bypass in Kubernetes in k8s.io/kubernetes",
			severity: "unknown", aliases: []string{"CVE-2020-8562", "GHSA-qh36-44jv-c8xj"}, packages: []string{"Go k8s.io/kubernetes"}, withdrawn: true},
		{id: "REGISTRYD-TEST-MAVEN-2", summary: "Test advisory for com.google.guava:guava", severity: "low",
			packages: []string{"Maven com.google.guava/guava"}},
		{id: "REGISTRYD-TEST-GEM-1", summary: "Test advisory for nokogiri", severity: "high", packages: []string{"RubyGems nokogiri"}},
		{id: "REGISTRYD-TEST-PYPI-1", summary: "Test advisory for Django", severity: "medium", aliases: []string{"CVE-TEST-0001"},
			packages: []string{"PyPI django"}},
		{id: "REGISTRYD-TEST-PYPI-2", summary: "REGISTRYD-TEST-PYPI-2", severity: "unknown", aliases: []string{"CVE-TEST-0001"},
			packages: []string{"PyPI pyyaml"}},
		// Debian is not kept: no packages, so an import skips (or removes) it.
		{id: "REGISTRYD-TEST-DEBIAN-1", summary: "Test advisory for openssl", severity: "unknown"},
	}
	for _, tt := range tests {
		a := byID[tt.id]
		if a == nil {
			t.Errorf("%s not read", tt.id)
			continue
		}
		var pkgs []string
		for _, p := range a.Packages {
			pkgs = append(pkgs, p.Ecosystem+" "+p.Name)
		}
		if a.Summary != tt.summary || a.Severity != tt.severity || !slices.Equal(a.Aliases, tt.aliases) ||
			!slices.Equal(pkgs, tt.packages) || a.Withdrawn != tt.withdrawn || len(a.Digest) != 32 {
			t.Errorf("%s = %+v %v", tt.id, *a, pkgs)
		}
	}
}

func TestSeverityFromCVSS(t *testing.T) {
	tests := []struct {
		vector string
		score  float64
		word   string
	}{
		{"CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H", 9.8, "critical"},
		{"CVSS:3.1/AV:N/AC:L/PR:H/UI:N/S:U/C:H/I:H/A:H", 7.2, "high"},
		{"CVSS:3.1/AV:N/AC:H/PR:N/UI:N/S:U/C:H/I:N/A:N", 5.9, "medium"},
		{"CVSS:3.1/AV:N/AC:L/PR:N/UI:R/S:C/C:L/I:L/A:N", 6.1, "medium"},
		{"CVSS:3.0/AV:N/AC:L/PR:N/UI:N/S:C/C:H/I:H/A:H", 10.0, "critical"},
		{"CVSS:3.1/AV:L/AC:L/PR:L/UI:N/S:U/C:L/I:N/A:N", 3.3, "low"},
		{"CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:N/I:N/A:N", 0, "info"},
	}
	for _, tt := range tests {
		score, ok := cvss3Score(tt.vector)
		if !ok || score != tt.score || rateCVSS3(score) != tt.word {
			t.Errorf("%s: %v %v (%s), want %v %s", tt.vector, score, ok, rateCVSS3(score), tt.score, tt.word)
		}
	}
	for _, bad := range []string{"CVSS:3.1/AV:N", "CVSS:3.1/AV:X/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H", "CVSS:4.0/AV:N/AC:L/AT:N/PR:N/UI:N/VC:H/VI:H/VA:H/SC:N/SI:N/SA:N",
		"CVSS:3.1/AV:N/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H"} {
		if _, ok := cvss3Score(bad); ok {
			t.Errorf("%s scored", bad)
		}
	}
	v2 := []struct {
		vector string
		score  float64
	}{{"AV:N/AC:L/Au:N/C:P/I:P/A:P", 7.5}, {"AV:N/AC:M/Au:N/C:N/I:P/A:N", 4.3}, {"AV:L/AC:H/Au:M/C:N/I:N/A:N", 0}}
	for _, tt := range v2 {
		if score, ok := cvss2Score(tt.vector); !ok || score != tt.score {
			t.Errorf("%s: %v %v, want %v", tt.vector, score, ok, tt.score)
		}
	}
	if got := severityOf("MODERATE", []recordSeverity{{Type: "CVSS_V3", Score: "CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H"}}); got != "medium" {
		t.Errorf("the database's word comes first: %s", got)
	}
	if got := severityOf("", []recordSeverity{{Type: "CVSS_V4", Score: "CVSS:4.0/AV:N"}}); got != "unknown" {
		t.Errorf("a v4 vector alone: %s", got)
	}
}

// zipOf builds an archive of name -> content.
func zipOf(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range files {
			if !yield(k) {
				return
			}
		}
	}) {
		w, err := zw.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(files[name]))
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestReadZip(t *testing.T) {
	gin, err := os.ReadFile(filepath.Join("..", "testdata", "osv", "go", "GO-2020-0001.json"))
	if err != nil {
		t.Fatal(err)
	}
	archive := zipOf(t, map[string]string{
		"golang.org/x/vulndb@v0/data/osv/GO-2020-0001.json":  string(gin),
		"golang.org/x/vulndb@v0/data/cve/v5/CVE-2020-1.json": `{"dataType":"CVE_RECORD","cveMetadata":{"cveId":"CVE-2020-1"}}`,
		"golang.org/x/vulndb@v0/data/osv/broken.json":        `{"id":"GO-X","modified":`,
		"golang.org/x/vulndb@v0/README.md":                   "not a record",
		"npm.nedb": `{"id":"A-1","modified":"2026-01-01T00:00:00Z","affected":[{"package":{"ecosystem":"npm","name":"a"},"versions":["1"]}]}
{"id":"A-2","modified":"2026-01-01T00:00:00Z","affected":[{"package":{"ecosystem":"npm","name":"b"},"versions":["1"]}]}
`,
	})
	var st Stats
	var ids []string
	for a, err := range ReadZip(bytes.NewReader(archive), int64(len(archive)), &st) {
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, a.ID)
	}
	if !slices.Equal(ids, []string{"GO-2020-0001", "A-1", "A-2"}) || st.Files != 4 || st.NotOSV != 1 || st.Invalid != 1 {
		t.Fatalf("ids %v, stats %+v", ids, st)
	}
	for _, err := range ReadZip(bytes.NewReader([]byte("PK not a zip")), 12, &st) {
		if err == nil || !strings.Contains(err.Error(), "not a zip") {
			t.Fatalf("a broken archive: %v", err)
		}
	}
}

func TestReadStream(t *testing.T) {
	rec := `{"id":"A-1","modified":"2026-01-01T00:00:00Z","affected":[{"package":{"ecosystem":"npm","name":"a"},"versions":["1"]}]}`
	for name, body := range map[string]string{
		"one record": rec, "array": "[" + rec + "," + strings.Replace(rec, "A-1", "A-2", 1) + "]",
		"ndjson": rec + "\n" + strings.Replace(rec, "A-1", "A-2", 1) + "\n",
	} {
		var st Stats
		n := 0
		for _, err := range ReadStream(strings.NewReader(body), &st) {
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			n++
		}
		if want := map[bool]int{true: 1, false: 2}[name == "one record"]; n != want {
			t.Errorf("%s: %d records, want %d", name, n, want)
		}
	}
	var st Stats
	var got error
	for _, err := range ReadStream(strings.NewReader(rec+"\n"+rec[:40]), &st) {
		got = err
	}
	if got == nil || !strings.Contains(got.Error(), "not JSON") {
		t.Fatalf("a stream cut short: %v", got)
	}
	if _, err := Decode([]byte(`{"id":"` + strings.Repeat("x", 300) + `","modified":"2026-01-01T00:00:00Z"}`)); err == nil || errors.Is(err, ErrNotOSV) {
		t.Fatalf("a too long id: %v", err)
	}
}
