package store

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"registryd/store/kv"
)

// depProject is a project to hang dependency lists on.
func depProject(t testing.TB, s *Store, path string) Project {
	t.Helper()
	g, err := s.GroupByRef("deps")
	if err != nil {
		g = topGroup(t, s, "deps")
	}
	return ok(s.CreateProject(NewProject{Name: path, NamespaceID: g.ID}))(t)
}

func depNames(deps []Dependency) []string {
	out := make([]string, 0, len(deps))
	for _, d := range deps {
		out = append(out, d.Name+"@"+d.Version)
	}
	return out
}

func TestReplaceDependenciesPagesAndFilters(t *testing.T) {
	s, _ := openTest(t)
	pr := depProject(t, s, "app")
	other := depProject(t, s, "other")
	managers := []string{"npm", "go", "npm", "maven", "yarn", "go", "npm", ""}
	var deps []NewDependency
	for i, m := range managers {
		deps = append(deps, NewDependency{Name: fmt.Sprintf("d%d", i), Version: "1", PackageManager: m})
	}
	list := ok(s.ReplaceDependencies(pr.ID, deps, nil))(t)
	wantPM := map[string]int{"npm": 3, "go": 2, "maven": 1, "yarn": 1, "": 1}
	if list.Dependencies != 8 || fmt.Sprint(list.PackageManagers) != fmt.Sprint(wantPM) {
		t.Fatalf("list = %+v", list)
	}
	// Another project's list must not leak into this one's pages.
	ok(s.ReplaceDependencies(other.ID, []NewDependency{{Name: "x", Version: "9", PackageManager: "npm"}}, nil))(t)

	tests := []struct {
		name          string
		managers      []string
		offset, limit int
		want          []string
		total         int
	}{
		{"first page", nil, 0, 3, []string{"d0@1", "d1@1", "d2@1"}, 8},
		{"middle page", nil, 3, 3, []string{"d3@1", "d4@1", "d5@1"}, 8},
		{"last page", nil, 6, 3, []string{"d6@1", "d7@1"}, 8},
		{"past the end", nil, 9, 3, nil, 8},
		{"one manager", []string{"npm"}, 0, 10, []string{"d0@1", "d2@1", "d6@1"}, 3},
		{"two managers merge in list order", []string{"go", "npm"}, 0, 10, []string{"d0@1", "d1@1", "d2@1", "d5@1", "d6@1"}, 5},
		{"two managers, second page", []string{"npm", "go"}, 2, 2, []string{"d2@1", "d5@1"}, 5},
		{"repeated manager counts once", []string{"go", "go"}, 0, 10, []string{"d1@1", "d5@1"}, 2},
		{"manager with none", []string{"pip"}, 0, 10, nil, 0},
		{"prefix of another manager does not match", []string{"yar"}, 0, 10, nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, total, err := s.Dependencies(pr.ID, tt.managers, tt.offset, tt.limit)
			noErr(t, err)
			if !slices.Equal(depNames(got), tt.want) || total != tt.total {
				t.Fatalf("got %v (total %d), want %v (total %d)", depNames(got), total, tt.want, tt.total)
			}
		})
	}
	if got, total, _ := s.Dependencies(other.ID, nil, 0, 10); total != 1 || depNames(got)[0] != "x@9" {
		t.Fatalf("other project: %v, %d", depNames(got), total)
	}
	// A project without an SBOM has an empty list.
	fresh := depProject(t, s, "fresh")
	if got, total, err := s.Dependencies(fresh.ID, nil, 0, 10); err != nil || total != 0 || len(got) != 0 {
		t.Fatalf("fresh project: %v, %d, %v", got, total, err)
	}
}

func TestReplaceDependenciesReplacesWhole(t *testing.T) {
	s, c := openTest(t)
	pr := depProject(t, s, "app")
	ok(s.ReplaceDependencies(pr.ID, []NewDependency{
		{Name: "a", Version: "1", PackageManager: "npm"}, {Name: "b", Version: "1", PackageManager: "go"},
		{Name: "c", Version: "1", PackageManager: "go"},
	}, nil))(t)
	c.Advance(time.Minute)
	list := ok(s.ReplaceDependencies(pr.ID, []NewDependency{{Name: "z", Version: "2", PackageManager: "pip"}}, nil))(t)
	if list.Dependencies != 1 || list.PackageManagers["go"] != 0 || !list.UpdatedAt.Equal(c.Now().UTC().Truncate(time.Millisecond)) {
		t.Fatalf("list = %+v", list)
	}
	for _, m := range [][]string{nil, {"go"}, {"npm"}, {"pip"}} {
		got, total, err := s.Dependencies(pr.ID, m, 0, 10)
		noErr(t, err)
		want := []string{}
		if m == nil || m[0] == "pip" {
			want = []string{"z@2"}
		}
		if total != len(want) || !slices.Equal(depNames(got), want) {
			t.Fatalf("filter %v after replace: %v (%d)", m, depNames(got), total)
		}
	}
	// An empty SBOM empties the list.
	ok(s.ReplaceDependencies(pr.ID, nil, nil))(t)
	if _, total, _ := s.Dependencies(pr.ID, nil, 0, 10); total != 0 {
		t.Fatalf("after an empty upload total = %d", total)
	}
	if got := ok(s.dependencyListOf(pr.ID))(t); got.Dependencies != 0 || got.UpdatedAt.IsZero() {
		t.Fatalf("summary after empty upload: %+v", got)
	}
}

func TestReplaceDependenciesVulnerabilityIDsAreStable(t *testing.T) {
	s, _ := openTest(t)
	pr := depProject(t, s, "app")
	other := depProject(t, s, "other")
	first := ok(s.ReplaceDependencies(pr.ID,
		[]NewDependency{{Name: "lodash", Version: "4.17.20", Vulnerabilities: []string{"CVE-1", "CVE-2", "CVE-1"}}},
		[]NewVulnerability{{ExternalID: "CVE-1", Severity: "high", Description: "d1"}, {ExternalID: "CVE-2", Name: "ReDoS", Severity: "medium"}}))(t)
	if first.Vulnerabilities != 2 {
		t.Fatalf("first = %+v", first)
	}
	got, _, _ := s.Dependencies(pr.ID, nil, 0, 10)
	v1 := got[0].Vulnerabilities
	if len(v1) != 2 || v1[0].Name != "CVE-1" || v1[0].Severity != "high" || v1[1].Name != "ReDoS" || v1[0].ID == v1[1].ID {
		t.Fatalf("vulnerabilities = %+v", v1)
	}
	// The same CVE in another project is another vulnerability.
	ok(s.ReplaceDependencies(other.ID, []NewDependency{{Name: "x", Vulnerabilities: []string{"CVE-1"}}},
		[]NewVulnerability{{ExternalID: "CVE-1", Severity: "low"}}))(t)
	og, _, _ := s.Dependencies(other.ID, nil, 0, 10)
	if og[0].Vulnerabilities[0].ID == v1[0].ID {
		t.Fatal("two projects share a vulnerability id")
	}
	// A re-upload keeps CVE-1's id and takes its new severity; a new CVE
	// gets a new id; CVE-2, gone and back, keeps its id.
	ok(s.ReplaceDependencies(pr.ID, []NewDependency{{Name: "lodash", Version: "4.17.21", Vulnerabilities: []string{"CVE-3", "CVE-1"}}},
		[]NewVulnerability{{ExternalID: "CVE-1", Severity: "critical"}, {ExternalID: "CVE-3", Severity: "low"}}))(t)
	ok(s.ReplaceDependencies(pr.ID, []NewDependency{{Name: "lodash", Version: "4.17.21", Vulnerabilities: []string{"CVE-2"}}},
		[]NewVulnerability{{ExternalID: "CVE-2", Severity: "medium"}}))(t)
	got, _, _ = s.Dependencies(pr.ID, nil, 0, 10)
	if got[0].Vulnerabilities[0].ID != v1[1].ID {
		t.Fatalf("CVE-2 id %d, was %d", got[0].Vulnerabilities[0].ID, v1[1].ID)
	}
	rec := ok(s.vulnerability(v1[0].ID))(t)
	if rec.ExternalID != "CVE-1" || rec.Severity != "critical" || rec.ProjectID != pr.ID {
		t.Fatalf("CVE-1 record = %+v", rec)
	}
}

func TestReplaceDependenciesRefusals(t *testing.T) {
	s, _ := openTest(t)
	pr := depProject(t, s, "app")
	ok(s.ReplaceDependencies(pr.ID, []NewDependency{{Name: "kept", Version: "1", PackageManager: "npm"}}, nil))(t)
	tests := []struct {
		name       string
		project    int64
		deps       []NewDependency
		vulns      []NewVulnerability
		field, msg string
	}{
		{name: "no name", deps: []NewDependency{{Name: "a"}, {Version: "1"}}, field: "dependencies[1].name", msg: "is missing"},
		{name: "long name", deps: []NewDependency{{Name: strings.Repeat("n", MaxDependencyName+1)}},
			field: "dependencies[0].name", msg: "is too long (maximum is 1024 characters)"},
		{name: "NUL in package manager", deps: []NewDependency{{Name: "a", PackageManager: "n\x00pm"}},
			field: "dependencies[0].package_manager", msg: "is invalid"},
		{name: "license without name", deps: []NewDependency{{Name: "a", Licenses: []License{{URL: "https://x"}}}},
			field: "dependencies[0].licenses[0].name", msg: "is missing"},
		{name: "unknown vulnerability", deps: []NewDependency{{Name: "a", Vulnerabilities: []string{"CVE-9"}}},
			field: "dependencies[0].vulnerabilities", msg: `names "CVE-9", which is not among the vulnerabilities`},
		{name: "bad severity", deps: []NewDependency{{Name: "a"}}, vulns: []NewVulnerability{{ExternalID: "CVE-1", Severity: "severe"}},
			field: "vulnerabilities[0].severity", msg: "does not have a valid value"},
		{name: "vulnerability twice", vulns: []NewVulnerability{{ExternalID: "CVE-1", Severity: "low"}, {ExternalID: "CVE-1", Severity: "low"}},
			field: "vulnerabilities[1].id", msg: "is listed twice"},
		{name: "unknown project", project: 999, deps: []NewDependency{{Name: "a"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := snapshot(t, s)
			project := pr.ID
			if tt.project != 0 {
				project = tt.project
			}
			_, err := s.ReplaceDependencies(project, tt.deps, tt.vulns)
			if tt.field == "" {
				if !errors.Is(err, ErrNotFound) {
					t.Fatalf("err = %v, want not found", err)
				}
			} else {
				wantValidation(t, err, tt.field, tt.msg)
			}
			if snapshot(t, s) != before {
				t.Fatal("a refused upload changed the database")
			}
		})
	}
	if got, _, _ := s.Dependencies(pr.ID, nil, 0, 10); !slices.Equal(depNames(got), []string{"kept@1"}) {
		t.Fatalf("list after refusals: %v", depNames(got))
	}
}

// depKeys counts the keys of a project in the dependency buckets.
func depKeys(t *testing.T, s *Store, project int64) (deps, byPM int) {
	t.Helper()
	noErr(t, s.db.View(func(tx kv.Tx) error {
		for _, n := range []struct {
			b kv.Bucket
			c *int
		}{{tx.Bucket(bktDependencies), &deps}, {tx.Bucket(bktDepsByPM), &byPM}} {
			c := n.b.Cursor()
			for k, _ := c.Seek(itob(project)); k != nil && bytes.HasPrefix(k, itob(project)); k, _ = c.Next() {
				*n.c++
			}
		}
		return nil
	}))
	return deps, byPM
}

// TestReplaceDependenciesManyChunks checks pages and filters of lists that
// span many chunks and index runs against a plain model, across uploads
// that grow, shrink and change package managers.
func TestReplaceDependenciesManyChunks(t *testing.T) {
	s, _ := openTest(t)
	pr := depProject(t, s, "app")
	other := depProject(t, s, "other")
	ok(s.ReplaceDependencies(other.ID, []NewDependency{{Name: "x", Version: "9", PackageManager: "npm"}}, nil))(t)
	vulns := []NewVulnerability{{ExternalID: "CVE-1", Severity: "high"}, {ExternalID: "CVE-2", Name: "ReDoS", Severity: "low"}}
	upload := func(n int, managers []string) []Dependency {
		var deps []NewDependency
		var want []Dependency
		for i := range n {
			nd := NewDependency{Name: fmt.Sprintf("d%d", i), Version: fmt.Sprint(i % 7), PackageManager: managers[i%len(managers)%3*(i%5)%len(managers)],
				FilePath: "/src/" + managers[i%len(managers)] + ".lock"}
			if i%3 == 0 {
				nd.Licenses = []License{{SPDX: "MIT", Name: "MIT", URL: "https://opensource.org/licenses/MIT"}, {Name: fmt.Sprint("L", i%4)}}
			}
			if i%11 == 0 {
				nd.Vulnerabilities = []string{"CVE-2", "CVE-1", "CVE-2"}
			}
			deps = append(deps, nd)
		}
		ok(s.ReplaceDependencies(pr.ID, deps, vulns))(t)
		for _, nd := range deps {
			d := Dependency{Name: nd.Name, Version: nd.Version, PackageManager: nd.PackageManager, FilePath: nd.FilePath, Licenses: nd.Licenses}
			if len(nd.Vulnerabilities) > 0 {
				d.Vulnerabilities = []DependencyVulnerability{{Name: "ReDoS", Severity: "low"}, {Name: "CVE-1", Severity: "high"}}
			}
			want = append(want, d)
		}
		return want
	}
	check := func(t *testing.T, want []Dependency, filters [][]string) {
		t.Helper()
		for _, f := range filters {
			var match []Dependency
			for _, d := range want {
				if len(f) == 0 || slices.Contains(f, d.PackageManager) {
					match = append(match, d)
				}
			}
			for _, pg := range [][2]int{{0, 100}, {63, 3}, {1020, 100}, {len(match) - 5, 100}, {len(match), 10}, {2000, 1}} {
				if pg[0] < 0 {
					continue
				}
				got, total, err := s.Dependencies(pr.ID, f, pg[0], pg[1])
				noErr(t, err)
				exp := match[min(pg[0], len(match)):min(pg[0]+pg[1], len(match))]
				for i := range got {
					for j := range got[i].Vulnerabilities {
						got[i].Vulnerabilities[j].ID, got[i].Vulnerabilities[j].Origin = 0, 0
					}
				}
				if total != len(match) || fmt.Sprint(got) != fmt.Sprint(exp) {
					t.Fatalf("filter %v page %v: total %d (want %d)\ngot  %v\nwant %v", f, pg, total, len(match), got, exp)
				}
			}
		}
	}
	filters := [][]string{nil, {"npm"}, {"go", "npm"}, {""}, {"maven", "pip"}}
	for _, step := range []struct {
		n        int
		managers []string
	}{
		{3000, []string{"npm", "go", "maven", ""}},
		{3000, []string{"npm", "go", "maven", ""}},
		{5000, []string{"npm", "go"}},
		{130, []string{"pip", "npm"}},
		{64, []string{"go"}},
		{0, []string{"go"}},
		{2100, []string{"maven", "npm", "go"}},
	} {
		t.Run(fmt.Sprint(step.n, step.managers), func(t *testing.T) {
			want := upload(step.n, step.managers)
			check(t, want, filters)
			// Nothing of an earlier, longer list is left behind.
			deps, byPM := depKeys(t, s, pr.ID)
			runs := 0
			for _, n := range ok(s.dependencyListOf(pr.ID))(t).PackageManagers {
				runs += (n + posPerIndexChunk - 1) / posPerIndexChunk
			}
			if deps != (step.n+depsPerChunk-1)/depsPerChunk || byPM != runs {
				t.Fatalf("%d keys in dependencies, %d in the index; want %d and %d", deps, byPM, (step.n+depsPerChunk-1)/depsPerChunk, runs)
			}
		})
	}
	if got, total, _ := s.Dependencies(other.ID, nil, 0, 10); total != 1 || depNames(got)[0] != "x@9" {
		t.Fatalf("other project: %v, %d", depNames(got), total)
	}
}

// TestDependenciesReadsJSONLayout: a list written by schema version 1 (one
// JSON record and one index key per entry, no layout in the summary) reads
// as before, and the next upload replaces it whole.
func TestDependenciesReadsJSONLayout(t *testing.T) {
	s, _ := openTest(t)
	pr := depProject(t, s, "app")
	other := depProject(t, s, "other")
	ok(s.ReplaceDependencies(other.ID, []NewDependency{{Name: "x", Version: "9", PackageManager: "npm"}}, nil))(t)
	old := []Dependency{
		{Name: "a", Version: "1", PackageManager: "npm", FilePath: "package-lock.json",
			Licenses: []License{{SPDX: "MIT", Name: "MIT"}}, Vulnerabilities: []DependencyVulnerability{{ID: 7, Name: "CVE-1", Severity: "high"}}},
		{Name: "b", Version: "2", PackageManager: "go"},
		{Name: "c", Version: "3", PackageManager: "npm"},
	}
	noErr(t, s.db.Update(func(tx kv.Tx) error {
		for i, d := range old {
			raw := fmt.Sprintf(`{"name":%q,"version":%q,"package_manager":%q`, d.Name, d.Version, d.PackageManager)
			if i == 0 {
				raw += `,"dependency_file_path":"package-lock.json","licenses":[{"spdx_identifier":"MIT","name":"MIT"}],"vulnerabilities":[{"id":7,"name":"CVE-1","severity":"high"}]`
			}
			if err := tx.Bucket(bktDependencies).Put(pair(pr.ID, int64(i+1)), []byte(raw+"}")); err != nil {
				return err
			}
			if err := tx.Bucket(bktDepsByPM).Put(depPMKey(pr.ID, d.PackageManager, int64(i+1)), emptyValue); err != nil {
				return err
			}
		}
		return tx.Bucket(bktDepLists).Put(itob(pr.ID), []byte(fmt.Sprintf(
			`{"project_id":%d,"dependencies":3,"vulnerabilities":1,"licenses":1,"package_managers":{"go":1,"npm":2},"updated_at":"2026-11-21T10:04:05.123Z"}`, pr.ID)))
	}))
	got, total := ok2(s.Dependencies(pr.ID, nil, 0, 10))(t)
	if total != 3 || fmt.Sprint(got) != fmt.Sprint(old) {
		t.Fatalf("old list: %v (%d)", got, total)
	}
	got, total = ok2(s.Dependencies(pr.ID, []string{"npm"}, 1, 10))(t)
	if total != 2 || depNames(got)[0] != "c@3" || len(got) != 1 {
		t.Fatalf("old list, npm from 1: %v (%d)", depNames(got), total)
	}
	if l := ok(s.dependencyListOf(pr.ID))(t); l.Dependencies != 3 || l.PackageManagers["npm"] != 2 {
		t.Fatalf("old summary: %+v", l)
	}
	// The next upload (shorter than the old list) replaces it.
	ok(s.ReplaceDependencies(pr.ID, []NewDependency{{Name: "z", Version: "1", PackageManager: "pip"}}, nil))(t)
	for _, f := range [][]string{nil, {"pip"}, {"npm"}, {"go"}} {
		got, total := ok2(s.Dependencies(pr.ID, f, 0, 10))(t)
		if want := f == nil || f[0] == "pip"; total != 1 && want || len(got) == 1 != want || want && depNames(got)[0] != "z@1" {
			t.Fatalf("after upload, filter %v: %v (%d)", f, depNames(got), total)
		}
	}
	if deps, byPM := depKeys(t, s, pr.ID); deps != 1 || byPM != 1 {
		t.Fatalf("after upload: %d keys in dependencies, %d in the index", deps, byPM)
	}
	if got, total, _ := s.Dependencies(other.ID, []string{"npm"}, 0, 10); total != 1 || depNames(got)[0] != "x@9" {
		t.Fatalf("other project: %v, %d", depNames(got), total)
	}
}
