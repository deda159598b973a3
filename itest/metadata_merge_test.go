package itest

import (
	"archive/zip"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMavenVersionRangeAcrossUpstreams: a real mvn build resolves the
// version range [1.0,2.0) of org.example:ranged through a registry of three
// upstreams: Debian's Maven repository (the plugins), one that has ranged
// 1.0 and one that has ranged 1.5. Only the merged maven-metadata.xml shows
// Maven 1.5, on the third upstream: the build must pick it. With the
// registry's merge_metadata off (GitLab's first answer) the same build
// picks 1.0, which shows the test tells the two apart.
func TestMavenVersionRangeAcrossUpstreams(t *testing.T) {
	if testing.Short() {
		t.Skip("real-client builds take minutes; skipped with -short")
	}
	requireTools(t, "mvn")
	fx := sharedMavenFixture(t)
	plugins := serveCentralRepo(t, fx.Root)
	older := serveRepo(t, rangedRepo(t, "20240101000000", "1.0"))
	newer := serveRepo(t, rangedRepo(t, "20230101000000", "1.5"))

	d := Start(t, nil)
	f := d.Fix(t)
	group := f.Group("ranges", 0, "private")
	registry := f.Registry(group, "maven")
	f.Upstream(registry, plugins.URL, nil)
	f.Upstream(registry, older.URL, nil)
	f.Upstream(registry, newer.URL, nil)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("registryd's log (last 60 lines):\n%s", lastLines(d.Logs(), 60))
		}
	})
	access := mavenRepoAccess{URL: d.Proxy + "/api/v4/virtual_registries/packages/maven/" + itoa(registry),
		Username: "root", Password: rootToken}

	if got := rangedBuild(t, access); got != "1.5" {
		t.Fatalf("the build resolved ranged %s; the merged metadata offers 1.5 (only on the third upstream)", got)
	}
	if n := newer.Count(); n == 0 {
		t.Fatal("the third upstream was never asked")
	}

	d.Do("PATCH", "/virtual_registries/packages/maven/registries/"+itoa(registry), rootToken,
		map[string]any{"name": "maven", "merge_metadata": false}).Expect(t, 200)
	if got := rangedBuild(t, access); got != "1.0" {
		t.Fatalf("with merge_metadata off the build resolved ranged %s; the first upstream's metadata offers only 1.0", got)
	}
}

// rangedRepo writes a Maven repository holding org.example:ranged at one
// version (a POM, a jar, and the artifact's maven-metadata.xml).
func rangedRepo(t *testing.T, lastUpdated, version string) string {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, "org", "example", "ranged")
	if err := os.MkdirAll(filepath.Join(dir, version), 0o755); err != nil {
		t.Fatal(err)
	}
	pom := fmt.Sprintf(`<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>org.example</groupId>
  <artifactId>ranged</artifactId>
  <version>%s</version>
</project>
`, version)
	meta := fmt.Sprintf(`<?xml version="1.0" encoding="UTF-8"?>
<metadata>
  <groupId>org.example</groupId>
  <artifactId>ranged</artifactId>
  <versioning>
    <latest>%[1]s</latest>
    <release>%[1]s</release>
    <versions>
      <version>%[1]s</version>
    </versions>
    <lastUpdated>%[2]s</lastUpdated>
  </versioning>
</metadata>
`, version, lastUpdated)
	var jar bytes.Buffer
	zw := zip.NewWriter(&jar)
	w, _ := zw.Create("META-INF/MANIFEST.MF")
	w.Write([]byte("Manifest-Version: 1.0\r\n\r\n"))
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string][]byte{
		filepath.Join(version, "ranged-"+version+".pom"): []byte(pom),
		filepath.Join(version, "ranged-"+version+".jar"): jar.Bytes(),
		"maven-metadata.xml":                             []byte(meta),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), body, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// rangedBuild compiles a project that depends on org.example:ranged:[1.0,2.0)
// with a fresh local repository and returns the version Maven resolved.
func rangedBuild(t *testing.T, repo mavenRepoAccess) string {
	t.Helper()
	project := t.TempDir()
	pom := `<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>org.example</groupId>
  <artifactId>range-user</artifactId>
  <version>1.0</version>
  <properties>
    <maven.compiler.source>17</maven.compiler.source>
    <maven.compiler.target>17</maven.compiler.target>
    <project.build.sourceEncoding>UTF-8</project.build.sourceEncoding>
  </properties>
  <dependencies>
    <dependency>
      <groupId>org.example</groupId>
      <artifactId>ranged</artifactId>
      <version>[1.0,2.0)</version>
    </dependency>
  </dependencies>
</project>
`
	if err := os.WriteFile(filepath.Join(project, "pom.xml"), []byte(pom), 0o644); err != nil {
		t.Fatal(err)
	}
	local := filepath.Join(t.TempDir(), "m2-repository")
	out, err := runMaven(t, project, repo, local, "compile")
	if err != nil || !strings.Contains(out, "BUILD SUCCESS") {
		t.Fatalf("mvn compile: %v\n%s", err, lastLines(out, 80))
	}
	var got []string
	for _, v := range []string{"1.0", "1.5"} {
		if _, err := os.Stat(filepath.Join(local, "org", "example", "ranged", v, "ranged-"+v+".jar")); err == nil {
			got = append(got, v)
		}
	}
	if len(got) != 1 {
		t.Fatalf("the local repository holds ranged jars %v, want exactly one", got)
	}
	return got[0]
}
