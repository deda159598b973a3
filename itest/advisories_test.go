package itest

import (
	"archive/zip"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	gitlab "gitlab.com/gitlab-org/api/client-go"
)

// osvArchive zips the records of testdata/osv/<dir> under data/osv/, as
// the vulndb module's zip holds them.
func osvArchive(t *testing.T, dir string) []byte {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join("..", "testdata", "osv", dir))
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, e := range entries {
		raw, err := os.ReadFile(filepath.Join("..", "testdata", "osv", dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		w, _ := zw.Create("data/osv/" + e.Name())
		w.Write(raw)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestAdvisoriesGitLabClient: a GitLab API client reads vulnerabilities on a
// project whose SBOM (a real cdxgen CycloneDX 1.7 scan) carried none, once an
// admin imports the Go vulnerability database; a configured source (GitHub
// records) is imported at start and folds with the vulnerabilities an SBOM
// names by CVE.
func TestAdvisoriesGitLabClient(t *testing.T) {
	ghsa, err := filepath.Abs(filepath.Join("..", "testdata", "osv", "ghsa"))
	if err != nil {
		t.Fatal(err)
	}
	d := Start(t, map[string]string{"REGISTRYD_ADVISORIES_SOURCES": ghsa})
	f := d.Fix(t)
	g := f.Group("acme", 0, "private")
	devID, devTok := f.User("dev", false)
	repID, repTok := f.User("rep", false)
	app := createProject(t, d, rootToken, g, "app", "private")
	npm := createProject(t, d, rootToken, g, "npm", "private")
	for _, p := range []int64{app, npm} {
		addProjectMember(t, d, p, devID, 30)
		addProjectMember(t, d, p, repID, 20)
	}
	putSBOM(t, d, rootToken, app, sbomFile(t, "cdxgen-goapp-1.7.json")).Expect(t, 200)

	dev := gitlabClient(t, d, devTok)
	vulnsOf := func(c *gitlab.Client, project int64) map[string][]string {
		t.Helper()
		deps, _, err := c.Dependencies.ListProjectDependencies(project, &gitlab.ListProjectDependenciesOptions{
			ListOptions: gitlab.ListOptions{PerPage: 100}})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string][]string{}
		for _, dep := range deps {
			for _, v := range dep.Vulnerabilities {
				if v.ID == 0 || !strings.Contains(v.URL, "/-/security/vulnerabilities/") {
					t.Fatalf("vulnerability %+v", v)
				}
				out[dep.Name] = append(out[dep.Name], v.Name+" ("+v.Severity+")")
			}
		}
		return out
	}
	if got := vulnsOf(dev, app); len(got) != 0 {
		t.Fatalf("before the import: %v", got)
	}

	r := d.Do("POST", "/admin/advisories?source=go-vulndb&full=true", rootToken, osvArchive(t, "go"),
		"Content-Type", "application/zip").Expect(t, 200)
	if m := r.Map(t); m["added"] != 7.0 || m["projects"] != 1.0 {
		t.Fatalf("import %s", r.Body)
	}
	got := vulnsOf(dev, app)
	want := map[string][]string{
		"github.com/gin-gonic/gin": {
			"Arbitrary log line injection in github.com/gin-gonic/gin (unknown)",
			"Inconsistent interpretation of HTTP Requests in github.com/gin-gonic/gin (unknown)",
			"Improper handling of filenames in Content-Disposition HTTP header in github.com/gin-gonic/gin (unknown)",
		},
		"golang.org/x/text": {
			"Out-of-bounds read in golang.org/x/text/language (unknown)",
			"Denial of service via crafted Accept-Language header in golang.org/x/text/language (unknown)",
		},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("developer sees\n%v\nwant\n%v", got, want)
	}
	if got := vulnsOf(gitlabClient(t, d, repTok), app); len(got) != 0 {
		t.Fatalf("a reporter sees %v", got)
	}

	// The configured source was imported at start (in the background).
	deadline := time.Now().Add(time.Minute)
	for {
		st := d.Do("GET", "/admin/advisories", rootToken, nil).Expect(t, 200)
		if strings.Contains(string(st.Body), `"source":"`+ghsa+`"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the configured source was not imported: %s\n%s", st.Body, d.Logs())
		}
		time.Sleep(50 * time.Millisecond)
	}
	// An SBOM that names CVE-2021-23337 on lodash lists it once, as the
	// GitHub advisory that has it as an alias.
	putSBOM(t, d, rootToken, npm, sbomFile(t, "cyclonedx-npm-vulnerable-1.5.json")).Expect(t, 200)
	got = vulnsOf(dev, npm)
	if lodash := got["lodash"]; !slices.Contains(lodash, "Command Injection in lodash (high)") ||
		slices.Contains(lodash, "CVE-2021-23337 (high)") || len(lodash) != 2 {
		t.Fatalf("lodash: %v", got)
	}
	if fmt.Sprint(got["minimist"]) != "[Prototype Pollution in minimist (critical)]" {
		t.Fatalf("minimist: %v", got["minimist"])
	}
}
