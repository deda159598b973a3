package itest

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	gitlab "gitlab.com/gitlab-org/api/client-go"
)

// TestDependencySBOMFixtures uploads each SBOM made by a real scanner to the
// real daemon and reads the list back.
func TestDependencySBOMFixtures(t *testing.T) {
	d := Start(t, nil)
	f := d.Fix(t)
	g := f.Group("acme", 0, "private")
	tests := []struct {
		file       string
		answer     string
		first      string // name version package_manager file of the first entry
		total      string
		pmTotal    string // entries of the go package manager
		vulnerable bool
	}{
		{"cyclonedx-npm-1.6.json", `{"dependencies":4,"vulnerabilities":0,"licenses":1,"package_managers":{"npm":4},"skipped_components":0,"spec_version":"1.6"`,
			"@babel/parser 7.24.0 npm package-lock.json", "4", "0", false},
		{"cyclonedx-npm-1.4.json", `{"dependencies":4,"vulnerabilities":0,"licenses":1,"package_managers":{"npm":4},"skipped_components":0,"spec_version":"1.4"`,
			"@babel/parser 7.24.0 npm package-lock.json", "4", "0", false},
		{"cdxgen-go-1.5.json", `{"dependencies":16,"vulnerabilities":0,"licenses":0,"package_managers":{"go":16},"skipped_components":0,"spec_version":"1.5"`,
			"github.com/beorn7/perks v1.0.1 go go.mod", "16", "16", false},
		{"cdxgen-monorepo-1.6.json", `{"dependencies":24,"vulnerabilities":0,"licenses":0,"package_managers":{"go":16,"pip":5,"yarn":3},"skipped_components":0,"spec_version":"1.6"`,
			"is-number 7.0.0 yarn frontend/yarn.lock", "24", "16", false},
		{"cyclonedx-npm-vulnerable-1.5.json", `{"dependencies":3,"vulnerabilities":3,"licenses":1,"package_managers":{"npm":3},"skipped_components":0,"spec_version":"1.5"`,
			"lodash 4.17.20 npm package-lock.json", "3", "0", true},
	}
	for i, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			p := createProject(t, d, rootToken, g, fmt.Sprintf("p%d", i), "private")
			r := putSBOM(t, d, rootToken, p, sbomFile(t, tt.file)).Expect(t, 200)
			if !strings.HasPrefix(string(r.Body), tt.answer) {
				t.Fatalf("answer %s\nwant %s...", r.Body, tt.answer)
			}
			var list []struct {
				Name, Version      string
				PackageManager     string `json:"package_manager"`
				DependencyFilePath string `json:"dependency_file_path"`
				Vulnerabilities    []map[string]any
			}
			r = d.Do("GET", fmt.Sprintf("/projects/%d/dependencies", p), rootToken, nil).Expect(t, 200)
			r.JSON(t, &list)
			first := list[0]
			if got := strings.Join([]string{first.Name, first.Version, first.PackageManager, first.DependencyFilePath}, " "); got != tt.first {
				t.Fatalf("first entry %q, want %q", got, tt.first)
			}
			if (len(first.Vulnerabilities) > 0) != tt.vulnerable {
				t.Fatalf("vulnerabilities %v", first.Vulnerabilities)
			}
			if r.Header.Get("X-Total") != tt.total {
				t.Fatalf("X-Total %s, want %s", r.Header.Get("X-Total"), tt.total)
			}
			r = d.Do("GET", fmt.Sprintf("/projects/%d/dependencies?package_manager=go", p), rootToken, nil).Expect(t, 200)
			if r.Header.Get("X-Total") != tt.pmTotal {
				t.Fatalf("go entries %s, want %s", r.Header.Get("X-Total"), tt.pmTotal)
			}
		})
	}
}

// TestDependenciesGitLabClient reads dependency lists with the official
// GitLab Go client: package manager filter, pages, vulnerabilities by role.
func TestDependenciesGitLabClient(t *testing.T) {
	d := Start(t, nil)
	f := d.Fix(t)
	g := f.Group("acme", 0, "private")
	devID, devTok := f.User("dev", false)
	repID, repTok := f.User("rep", false)
	maintID, maintTok := f.User("maint", false)
	_, outsiderTok := f.User("outsider", false)
	mono := createProject(t, d, rootToken, g, "mono", "private")
	vuln := createProject(t, d, rootToken, g, "vuln", "private")
	for _, p := range []int64{mono, vuln} {
		addProjectMember(t, d, p, devID, 30)
		addProjectMember(t, d, p, repID, 20)
		addProjectMember(t, d, p, maintID, 40)
	}
	putSBOM(t, d, devTok, mono, sbomFile(t, "cdxgen-monorepo-1.6.json")).Expect(t, 403)
	putSBOM(t, d, maintTok, mono, sbomFile(t, "cdxgen-monorepo-1.6.json")).Expect(t, 200)
	putSBOM(t, d, maintTok, vuln, sbomFile(t, "cyclonedx-npm-vulnerable-1.5.json")).Expect(t, 200)

	dev := gitlabClient(t, d, devTok)
	yarn, pip := gitlab.Yarn, gitlab.Pip
	opt := &gitlab.ListProjectDependenciesOptions{
		ListOptions:    gitlab.ListOptions{PerPage: 3},
		PackageManager: []*gitlab.DependencyPackageManagerValue{&yarn, &pip},
	}
	var got []string
	pages := 0
	for {
		deps, resp, err := dev.Dependencies.ListProjectDependencies("acme/mono", opt)
		if err != nil {
			t.Fatalf("page %d: %v", opt.Page, err)
		}
		pages++
		if resp.TotalItems != 8 || resp.TotalPages != 3 || resp.ItemsPerPage != 3 {
			t.Fatalf("page %d: total %d, pages %d, per page %d", opt.Page, resp.TotalItems, resp.TotalPages, resp.ItemsPerPage)
		}
		for _, dep := range deps {
			got = append(got, fmt.Sprintf("%s %s %s %s", dep.Name, dep.Version, dep.PackageManager, dep.DependencyFilePath))
			if dep.Vulnerabilities == nil || len(dep.Vulnerabilities) != 0 || dep.Licenses == nil {
				t.Fatalf("%s: vulnerabilities %v, licenses %v", dep.Name, dep.Vulnerabilities, dep.Licenses)
			}
		}
		if resp.NextPage == 0 {
			break
		}
		opt.Page = resp.NextPage
	}
	want := []string{
		"is-number 7.0.0 yarn frontend/yarn.lock", "left-pad 1.3.0 yarn frontend/yarn.lock",
		"to-regex-range 5.0.1 yarn frontend/yarn.lock", "requests 2.31.0 pip backend/requirements.txt",
		"urllib3 2.0.7 pip backend/requirements.txt", "idna 3.6 pip backend/requirements.txt",
		"certifi 2023.11.17 pip backend/requirements.txt", "charset-normalizer 3.3.2 pip backend/requirements.txt",
	}
	if pages != 3 || !slices.Equal(got, want) {
		t.Fatalf("%d pages:\n got %q\nwant %q", pages, got, want)
	}

	// Vulnerabilities: filled for a developer, empty for a reporter.
	vulnsOf := func(c *gitlab.Client) map[string][]string {
		deps, _, err := c.Dependencies.ListProjectDependencies(vuln, nil)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string][]string{}
		for _, dep := range deps {
			for _, v := range dep.Vulnerabilities {
				if v.ID == 0 || !strings.HasSuffix(v.URL, fmt.Sprintf("/acme/vuln/-/security/vulnerabilities/%d", v.ID)) {
					t.Fatalf("vulnerability %+v", v)
				}
				out[dep.Name] = append(out[dep.Name], v.Name+" "+v.Severity)
			}
			if len(dep.Licenses) != 1 || dep.Licenses[0].Name != "MIT" || dep.Licenses[0].URL != "https://spdx.org/licenses/MIT.html" {
				t.Fatalf("%s licenses %+v", dep.Name, dep.Licenses)
			}
		}
		return out
	}
	devVulns := vulnsOf(dev)
	if fmt.Sprint(devVulns) != "map[lodash:[CVE-2021-23337 high CVE-2020-28500 medium] minimist:[CVE-2021-44906 critical]]" {
		t.Fatalf("developer sees %v", devVulns)
	}
	if repVulns := vulnsOf(gitlabClient(t, d, repTok)); len(repVulns) != 0 {
		t.Fatalf("reporter sees %v", repVulns)
	}

	// Refusals come back as client errors with GitLab's statuses.
	bad := gitlab.DependencyPackageManagerValue("gomod")
	_, _, err := dev.Dependencies.ListProjectDependencies(mono, &gitlab.ListProjectDependenciesOptions{
		PackageManager: []*gitlab.DependencyPackageManagerValue{&bad}})
	if statusOf(err) != http.StatusBadRequest || !strings.Contains(err.Error(), "package_manager does not have a valid value") {
		t.Fatalf("unknown package manager: %v", err)
	}
	if _, _, err := gitlabClient(t, d, outsiderTok).Dependencies.ListProjectDependencies(mono, nil); statusOf(err) != http.StatusNotFound {
		t.Fatalf("outsider: %v", err)
	}
	if _, _, err := gitlabClient(t, d, "").Dependencies.ListProjectDependencies(mono, nil); statusOf(err) != http.StatusUnauthorized {
		t.Fatalf("anonymous: %v", err)
	}

	// The list survives a restart, and a failed upload leaves it whole.
	putSBOM(t, d, maintTok, mono, []byte(`{"bomFormat":"CycloneDX","specVersion":"1.6","components":[{"name":"ok"},{"version":"1"}]}`)).Expect(t, 400)
	d.Restart()
	deps, resp, err := gitlabClient(t, d, devTok).Dependencies.ListProjectDependencies(mono, nil)
	if err != nil || resp.TotalItems != 24 || len(deps) != 20 {
		t.Fatalf("after restart: %d of %d, %v", len(deps), resp.TotalItems, err)
	}
}

// TestDependenciesPlanGate: below the ultimate plan the endpoints do not exist.
func TestDependenciesPlanGate(t *testing.T) {
	d := Start(t, map[string]string{"REGISTRYD_LICENSE_PLAN": "premium"})
	g := d.Fix(t).Group("acme", 0, "public")
	p := createProject(t, d, rootToken, g, "app", "public")
	for _, token := range []string{"", rootToken} {
		d.Do("GET", fmt.Sprintf("/projects/%d/dependencies", p), token, nil).Expect(t, 404)
		putSBOM(t, d, token, p, sbomFile(t, "cyclonedx-npm-1.6.json")).Expect(t, 404)
	}
}
