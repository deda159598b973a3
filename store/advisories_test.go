package store

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"slices"
	"strings"
	"testing"

	"registryd/store/kv"
)

// versionsMatcher matches enumerated versions only ({"v":[...]}): the
// store's logic does not depend on version orders, which package osv
// tests (and itest end to end).
type versionsMatcher struct{}

func (versionsMatcher) PackageOf(manager, name string) (string, string) {
	switch manager {
	case "npm", "yarn":
		return "npm", name
	case "pip":
		return "PyPI", strings.ToLower(name)
	}
	return "", ""
}

func (versionsMatcher) Affects(_, version string, affected []byte) bool {
	var a struct {
		V []string `json:"v"`
	}
	return json.Unmarshal(affected, &a) == nil && slices.Contains(a.V, version)
}

func openAdvisoryTest(t *testing.T) *Store {
	t.Helper()
	s, err := openAt(t, t.TempDir(), Options{SecretKey: testKey, Now: newClock().Now, Matcher: versionsMatcher{}})
	if err != nil {
		t.Fatal(err)
	}
	closeChecked(t, s)
	return s
}

// adv is an advisory of one or more packages "eco/name@v1,v2".
func adv(id, summary, severity string, aliases []string, pkgs ...string) *Advisory {
	a := &Advisory{ID: id, Summary: summary, Severity: severity, Aliases: aliases}
	for _, p := range pkgs {
		eco, rest, _ := strings.Cut(p, "/")
		name, versions, _ := strings.Cut(rest, "@")
		raw, _ := json.Marshal(map[string][]string{"v": strings.Split(versions, ",")})
		a.Packages = append(a.Packages, AdvisoryPackage{Ecosystem: eco, Name: name, Affected: raw})
	}
	raw, _ := json.Marshal(a)
	a.Digest = fmt.Sprintf("%x", sha256.Sum256(raw))[:32]
	return a
}

func advisories(as ...*Advisory) iter.Seq2[*Advisory, error] {
	return func(yield func(*Advisory, error) bool) {
		for _, a := range as {
			if !yield(a, nil) {
				return
			}
		}
	}
}

func npmDep(name, version string, vulns ...string) NewDependency {
	return NewDependency{Name: name, Version: version, PackageManager: "npm", Vulnerabilities: vulns}
}

// vulnLines lists a project's entries with their vulnerabilities:
// "name@version: id name severity origin, ...".
func vulnLines(t *testing.T, s *Store, project int64) []string {
	t.Helper()
	deps, _, err := s.Dependencies(project, nil, 0, 1000)
	noErr(t, err)
	var out []string
	for _, d := range deps {
		var vs []string
		for _, v := range d.Vulnerabilities {
			rec := ok(s.vulnerability(v.ID))(t)
			vs = append(vs, fmt.Sprintf("%s %s %s %d", rec.ExternalID, v.Name, v.Severity, v.Origin))
		}
		out = append(out, d.Name+"@"+d.Version+": "+strings.Join(vs, ", "))
	}
	return out
}

func page(t *testing.T, s *Store, project int64, managers []string, offset, limit int) []Dependency {
	t.Helper()
	deps, _, err := s.Dependencies(project, managers, offset, limit)
	noErr(t, err)
	return deps
}

func wantLines(t *testing.T, got, want []string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Fatalf("got\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// An import matches the lists already stored, and a second import of the
// same source adds, changes, withdraws and (full) drops advisories, the
// lists following each time, without a new upload.
func TestAdvisoryImportUpdatesLists(t *testing.T) {
	s := openAdvisoryTest(t)
	app, web, other := depProject(t, s, "app"), depProject(t, s, "web"), depProject(t, s, "other")
	ok(s.ReplaceDependencies(app.ID, []NewDependency{npmDep("lodash", "4.17.20"), npmDep("minimist", "1.2.5"), npmDep("ms", "2.1.3")}, nil))(t)
	ok(s.ReplaceDependencies(web.ID, []NewDependency{npmDep("lodash", "4.17.21"), npmDep("minimist", "1.2.5")}, nil))(t)
	ok(s.ReplaceDependencies(other.ID, []NewDependency{{Name: "left-pad", Version: "1.3.0", PackageManager: "yarn"}}, nil))(t)

	first := ok(s.ImportAdvisories(AdvisoryImport{Source: "db", Full: true}, advisories(
		adv("GHSA-35jh-r3h4-6jhm", "Command Injection in lodash", "high", []string{"CVE-2021-23337"}, "npm/lodash@4.17.19,4.17.20"),
		adv("GHSA-29mw-wpgm-hmr9", "ReDoS in lodash", "medium", []string{"CVE-2020-28500"}, "npm/lodash@4.17.20"),
		adv("GHSA-xvch-5gv4-984h", "Prototype Pollution in minimist", "critical", nil, "npm/minimist@1.2.5"),
		adv("PYSEC-1", "", "unknown", nil, "PyPI/requests@2.30.0"),
	)))(t)
	if first.Added != 4 || first.Projects != 2 || first.Dependencies != 3 || !first.Complete {
		t.Fatalf("first import: %+v", first)
	}
	wantLines(t, vulnLines(t, s, app.ID), []string{
		"lodash@4.17.20: GHSA-29mw-wpgm-hmr9 ReDoS in lodash medium 2, GHSA-35jh-r3h4-6jhm Command Injection in lodash high 2",
		"minimist@1.2.5: GHSA-xvch-5gv4-984h Prototype Pollution in minimist critical 2",
		"ms@2.1.3: ",
	})
	wantLines(t, vulnLines(t, s, web.ID), []string{"lodash@4.17.21: ", "minimist@1.2.5: GHSA-xvch-5gv4-984h Prototype Pollution in minimist critical 2"})
	appList := ok(s.dependencyListOf(app.ID))(t)
	if appList.Vulnerabilities != 3 {
		t.Fatalf("app counts %d vulnerabilities, want 3", appList.Vulnerabilities)
	}
	idBefore := page(t, s, app.ID, nil, 1, 1)[0].Vulnerabilities[0].ID

	// Again, unchanged: nothing is written.
	again := ok(s.ImportAdvisories(AdvisoryImport{Source: "db", Full: true}, advisories(
		adv("GHSA-35jh-r3h4-6jhm", "Command Injection in lodash", "high", []string{"CVE-2021-23337"}, "npm/lodash@4.17.19,4.17.20"),
		adv("GHSA-29mw-wpgm-hmr9", "ReDoS in lodash", "medium", []string{"CVE-2020-28500"}, "npm/lodash@4.17.20"),
		adv("GHSA-xvch-5gv4-984h", "Prototype Pollution in minimist", "critical", nil, "npm/minimist@1.2.5"),
		adv("PYSEC-1", "", "unknown", nil, "PyPI/requests@2.30.0"),
	)))(t)
	if again.Unchanged != 4 || again.Added+again.Changed+again.Removed+again.Projects != 0 {
		t.Fatalf("same import again: %+v", again)
	}

	// The second copy: ReDoS withdrawn, minimist's severity changed, a new
	// advisory for left-pad, PYSEC-1 gone from the copy.
	withdrawn := adv("GHSA-29mw-wpgm-hmr9", "ReDoS in lodash", "medium", nil, "npm/lodash@4.17.20")
	withdrawn.Withdrawn, withdrawn.Digest = true, "w"
	second := ok(s.ImportAdvisories(AdvisoryImport{Source: "db", Full: true}, advisories(
		adv("GHSA-35jh-r3h4-6jhm", "Command Injection in lodash", "high", []string{"CVE-2021-23337"}, "npm/lodash@4.17.19,4.17.20"),
		withdrawn,
		adv("GHSA-xvch-5gv4-984h", "Prototype Pollution in minimist", "high", nil, "npm/minimist@1.2.5"),
		adv("GHSA-left-pad", "left-pad deletes things", "low", nil, "npm/left-pad@1.3.0"),
	)))(t)
	if second.Added != 1 || second.Changed != 1 || second.Removed != 2 || second.Unchanged != 1 || second.Projects != 3 {
		t.Fatalf("second import: %+v", second)
	}
	wantLines(t, vulnLines(t, s, app.ID), []string{
		"lodash@4.17.20: GHSA-35jh-r3h4-6jhm Command Injection in lodash high 2",
		"minimist@1.2.5: GHSA-xvch-5gv4-984h Prototype Pollution in minimist high 2",
		"ms@2.1.3: ",
	})
	wantLines(t, vulnLines(t, s, other.ID), []string{"left-pad@1.3.0: GHSA-left-pad left-pad deletes things low 2"})
	if got := page(t, s, app.ID, nil, 1, 1)[0].Vulnerabilities[0].ID; got != idBefore {
		t.Fatalf("minimist's vulnerability id moved from %d to %d", idBefore, got)
	}
	if n := ok(s.dependencyListOf(app.ID))(t).Vulnerabilities; n != 2 {
		t.Fatalf("app counts %d vulnerabilities after the second import, want 2", n)
	}
	st := ok(s.AdvisoryStatus())(t)
	if st.Advisories != 3 || len(st.Imports) != 1 || st.Imports[0].Removed != 2 {
		t.Fatalf("status %+v", st)
	}
	if _, err := s.advisoryByID("PYSEC-1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("PYSEC-1 after the full import without it: %v", err)
	}
}

// A partial import adds and replaces but leaves what it does not bring; a
// read that fails stops the import without the sweep.
func TestAdvisoryImportPartialAndInterrupted(t *testing.T) {
	s := openAdvisoryTest(t)
	app := depProject(t, s, "app")
	ok(s.ReplaceDependencies(app.ID, []NewDependency{npmDep("a", "1"), npmDep("b", "1")}, nil))(t)
	ok(s.ImportAdvisories(AdvisoryImport{Source: "db", Full: true}, advisories(adv("A-1", "a", "low", nil, "npm/a@1"))))(t)
	ok(s.ImportAdvisories(AdvisoryImport{Source: "db"}, advisories(adv("B-1", "b", "low", nil, "npm/b@1"))))(t)
	wantLines(t, vulnLines(t, s, app.ID), []string{"a@1: A-1 a low 2", "b@1: B-1 b low 2"})

	broken := errors.New("the archive is cut short")
	res, err := s.ImportAdvisories(AdvisoryImport{Source: "db", Full: true, BatchSize: 1},
		func(yield func(*Advisory, error) bool) {
			if yield(adv("C-1", "c", "low", nil, "npm/a@1"), nil) {
				yield(nil, broken)
			}
		})
	if !errors.Is(err, broken) || res.Complete || res.Added != 1 {
		t.Fatalf("interrupted import: %+v, %v", res, err)
	}
	// A-1 and B-1 are still there (no sweep), C-1 was committed.
	wantLines(t, vulnLines(t, s, app.ID), []string{"a@1: A-1 a low 2, C-1 c low 2", "b@1: B-1 b low 2"})
}

// Advisories that name each other are one vulnerability of an entry, and
// one the SBOM already names (by an alias) keeps the SBOM's id.
func TestAdvisoryAliasesFold(t *testing.T) {
	s := openAdvisoryTest(t)
	app := depProject(t, s, "app")
	ok(s.ReplaceDependencies(app.ID, []NewDependency{
		npmDep("lodash", "4.17.20", "CVE-2021-23337"),
		{Name: "Requests", Version: "2.30.0", PackageManager: "pip"},
	}, []NewVulnerability{{ExternalID: "CVE-2021-23337", Name: "CVE-2021-23337", Severity: "critical"}}))(t)
	sbomID := page(t, s, app.ID, nil, 0, 1)[0].Vulnerabilities[0].ID
	ok(s.ImportAdvisories(AdvisoryImport{Source: "db"}, advisories(
		adv("GHSA-35jh-r3h4-6jhm", "Command Injection in lodash", "high", []string{"CVE-2021-23337"}, "npm/lodash@4.17.20"),
		adv("PYSEC-2023-74", "", "unknown", []string{"CVE-2023-32681", "GHSA-j8r2-6x86-q33q"}, "PyPI/requests@2.30.0"),
		adv("GHSA-j8r2-6x86-q33q", "Unintended leak of Proxy-Authorization header in requests", "medium",
			[]string{"CVE-2023-32681", "PYSEC-2023-74"}, "PyPI/requests@2.30.0"),
	)))(t)
	wantLines(t, vulnLines(t, s, app.ID), []string{
		"lodash@4.17.20: GHSA-35jh-r3h4-6jhm Command Injection in lodash high 3",
		"Requests@2.30.0: GHSA-j8r2-6x86-q33q Unintended leak of Proxy-Authorization header in requests medium 2",
	})
	if got := page(t, s, app.ID, nil, 0, 1)[0].Vulnerabilities[0].ID; got != sbomID {
		t.Fatalf("the SBOM's vulnerability %d became %d", sbomID, got)
	}
	// The next upload without the SBOM's vulnerability still lists the
	// advisory, with the same id; withdrawing it leaves the SBOM's.
	ok(s.ReplaceDependencies(app.ID, []NewDependency{npmDep("lodash", "4.17.20")}, nil))(t)
	wantLines(t, vulnLines(t, s, app.ID), []string{"lodash@4.17.20: GHSA-35jh-r3h4-6jhm Command Injection in lodash high 2"})
	if got := page(t, s, app.ID, nil, 0, 1)[0].Vulnerabilities[0].ID; got != sbomID {
		t.Fatalf("id %d after the upload, want %d", got, sbomID)
	}
}

// pkgIndexKeys counts a project's keys in the package index, by kind.
func pkgIndexKeys(t *testing.T, s *Store, project int64) (exact, buckets int) {
	t.Helper()
	noErr(t, s.db.View(func(tx kv.Tx) error {
		return tx.Bucket(bktDepsByPkg).ForEach(func(k, _ []byte) error {
			if btoi(k[len(k)-8:]) != project {
				return nil
			}
			switch k[0] {
			case pkgExactTag:
				exact++
			case pkgBucketTag:
				buckets++
			}
			return nil
		})
	}))
	return exact, buckets
}

// A list of more distinct packages than maxExactPackages is indexed by
// bucket, with at most that many keys, and an import still finds exactly
// its entries; a later upload removes the keys the new list does not
// have.
func TestAdvisoryImportFindsLargeLists(t *testing.T) {
	s := openAdvisoryTest(t)
	big, small := depProject(t, s, "big"), depProject(t, s, "small")
	var deps []NewDependency
	for i := range 3000 {
		deps = append(deps, npmDep(fmt.Sprintf("pkg-%d", i), "1.0.0"))
	}
	ok(s.ReplaceDependencies(big.ID, deps, nil))(t)
	ok(s.ReplaceDependencies(small.ID, deps[:10], nil))(t)
	if exact, buckets := pkgIndexKeys(t, s, big.ID); exact != 0 || buckets == 0 || buckets > maxExactPackages {
		t.Fatalf("big list: %d exact and %d bucket keys", exact, buckets)
	}
	if exact, buckets := pkgIndexKeys(t, s, small.ID); exact != 10 || buckets != 0 {
		t.Fatalf("small list: %d exact and %d bucket keys", exact, buckets)
	}
	res := ok(s.ImportAdvisories(AdvisoryImport{Source: "db"}, advisories(
		adv("X-1", "x", "high", nil, "npm/pkg-2999@1.0.0"),
		adv("X-2", "y", "low", nil, "npm/pkg-5@1.0.0", "npm/pkg-6@2.0.0"),
	)))(t)
	if res.Projects != 2 || res.Dependencies != 3 {
		t.Fatalf("import: %+v", res)
	}
	got := page(t, s, big.ID, nil, 2999, 1)
	if len(got[0].Vulnerabilities) != 1 || got[0].Vulnerabilities[0].Name != "x" {
		t.Fatalf("pkg-2999: %+v", got[0])
	}
	wantLines(t, vulnLines(t, s, small.ID)[5:7], []string{"pkg-5@1.0.0: X-2 y low 2", "pkg-6@1.0.0: "})

	// The big project shrinks to 3 packages: back to exact keys, none left over.
	ok(s.ReplaceDependencies(big.ID, deps[:3], nil))(t)
	if exact, buckets := pkgIndexKeys(t, s, big.ID); exact != 3 || buckets != 0 {
		t.Fatalf("after shrinking: %d exact and %d bucket keys", exact, buckets)
	}
	ok(s.ReplaceDependencies(small.ID, deps[20:22], nil))(t)
	if exact, _ := pkgIndexKeys(t, s, small.ID); exact != 2 {
		t.Fatalf("small after a new list: %d exact keys, want 2", exact)
	}
}

// An upload is matched against the advisories already imported, through
// the package filter, which follows later imports.
func TestUploadMatchesAdvisories(t *testing.T) {
	s := openAdvisoryTest(t)
	app := depProject(t, s, "app")
	ok(s.ImportAdvisories(AdvisoryImport{Source: "db"}, advisories(adv("A-1", "a", "high", nil, "npm/a@1"))))(t)
	ok(s.ReplaceDependencies(app.ID, []NewDependency{npmDep("a", "1"), npmDep("a", "2"), npmDep("b", "1")}, nil))(t)
	wantLines(t, vulnLines(t, s, app.ID), []string{"a@1: A-1 a high 2", "a@2: ", "b@1: "})
	ok(s.ImportAdvisories(AdvisoryImport{Source: "db"}, advisories(adv("B-1", "b", "low", nil, "npm/b@1"))))(t)
	ok(s.ReplaceDependencies(app.ID, []NewDependency{npmDep("b", "1")}, nil))(t)
	wantLines(t, vulnLines(t, s, app.ID), []string{"b@1: B-1 b low 2"})
	if l := ok(s.dependencyListOf(app.ID))(t); l.Vulnerabilities != 1 {
		t.Fatalf("list %+v", l)
	}
}

func TestAdvisoryImportRefusals(t *testing.T) {
	s := openAdvisoryTest(t)
	var ve *ValidationError
	if _, err := s.ImportAdvisories(AdvisoryImport{}, advisories()); !errors.As(err, &ve) {
		t.Fatalf("no source: %v", err)
	}
	bad := adv("X", "x", "high", nil, "npm/a@1")
	bad.Packages[0].Name = "a\x00b"
	long := adv(strings.Repeat("x", MaxAdvisoryID+1), "x", "high", nil, "npm/a@1")
	res := ok(s.ImportAdvisories(AdvisoryImport{Source: "db"}, advisories(bad, long, adv("OK", "ok", "severe", nil, "npm/a@1"))))(t)
	if res.Invalid != 2 || res.Added != 1 {
		t.Fatalf("import %+v", res)
	}
	if a := ok(s.advisoryByID("OK"))(t); a.Severity != "unknown" {
		t.Fatalf("an unknown severity word is stored as %q", a.Severity)
	}
}

// An upload whose SBOM names a vulnerability by an alias of an advisory
// already imported lists it once, with the advisory's summary and severity.
func TestUploadFoldsSBOMVulnerabilityIntoAdvisory(t *testing.T) {
	s := openAdvisoryTest(t)
	app := depProject(t, s, "app")
	ok(s.ImportAdvisories(AdvisoryImport{Source: "db"}, advisories(
		adv("GHSA-35jh-r3h4-6jhm", "Command Injection in lodash", "high", []string{"CVE-2021-23337"}, "npm/lodash@4.17.20"))))(t)
	ok(s.ReplaceDependencies(app.ID, []NewDependency{npmDep("lodash", "4.17.20", "CVE-2021-23337", "CVE-2020-28500")},
		[]NewVulnerability{{ExternalID: "CVE-2021-23337", Name: "CVE-2021-23337", Severity: "critical"},
			{ExternalID: "CVE-2020-28500", Name: "CVE-2020-28500", Severity: "medium"}}))(t)
	wantLines(t, vulnLines(t, s, app.ID), []string{
		"lodash@4.17.20: GHSA-35jh-r3h4-6jhm Command Injection in lodash high 3, CVE-2020-28500 CVE-2020-28500 medium 1"})
}
