package sbom

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/iotest"

	"registryd/osv"
	"registryd/sbom/sbomtest"
	"registryd/store"
)

// sbomFixture opens a committed SBOM made by a real scanner (see
// testdata/sbom/README.md).
func sbomFixture(t testing.TB, name string) *os.File {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "testdata", "sbom", name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// depLine is a dependency in one comparable line.
func depLine(d store.NewDependency) string {
	return fmt.Sprintf("%s@%s %s %s", d.Name, d.Version, d.PackageManager, d.FilePath)
}

func TestParseSBOMFixtures(t *testing.T) {
	spdx := func(id string) store.License {
		return store.License{SPDX: id, Name: id, URL: "https://spdx.org/licenses/" + id + ".html"}
	}
	goDeps := []string{
		"github.com/beorn7/perks@v1.0.1", "github.com/cespare/xxhash/v2@v2.3.0", "github.com/hashicorp/golang-lru/v2@v2.0.7",
		"github.com/klauspost/compress@v1.20.1", "github.com/molecule-man/go-brrr@v1.0.1",
		"github.com/munnerz/goautoneg@v0.0.0-20191010083416-a7dc8b61c822", "github.com/prometheus/client_golang@v1.25.0",
		"github.com/prometheus/client_model@v0.6.3", "github.com/prometheus/common@v0.72.0",
		"github.com/prometheus/procfs@v0.22.0", "github.com/valyala/bytebufferpool@v1.0.0",
		"github.com/valyala/fasthttp@v1.74.0", "go.etcd.io/bbolt@v1.5.0", "golang.org/x/sys@v0.48.0",
		"google.golang.org/protobuf@v1.36.12", "gopkg.in/yaml.v3@v3.0.1",
	}
	with := func(list []string, suffix string) []string {
		out := make([]string, len(list))
		for i, s := range list {
			out[i] = s + suffix
		}
		return out
	}
	npmApp := []string{
		"@babel/parser@7.24.0 npm package-lock.json",
		"debug@4.3.4 npm package-lock.json",
		"ms@2.1.2 npm package-lock.json", // nested under debug
		"ms@2.1.3 npm package-lock.json",
	}
	tests := []struct {
		file     string
		spec     string
		deps     []string
		licenses map[string][]store.License // by dependency line
		vulns    map[string][]string        // dependency name -> "id severity"
	}{
		{
			file: "cyclonedx-npm-1.6.json", spec: "1.6", deps: npmApp,
			licenses: map[string][]store.License{"debug@4.3.4 npm package-lock.json": {spdx("MIT")}},
		},
		{
			file: "cyclonedx-npm-1.4.json", spec: "1.4", deps: npmApp,
			licenses: map[string][]store.License{"@babel/parser@7.24.0 npm package-lock.json": {spdx("MIT")}},
		},
		{file: "cdxgen-go-1.5.json", spec: "1.5", deps: with(goDeps, " go go.mod")},
		{
			file: "cdxgen-monorepo-1.6.json", spec: "1.6",
			deps: append([]string{
				"is-number@7.0.0 yarn frontend/yarn.lock", "left-pad@1.3.0 yarn frontend/yarn.lock",
				"to-regex-range@5.0.1 yarn frontend/yarn.lock",
				"requests@2.31.0 pip backend/requirements.txt", "urllib3@2.0.7 pip backend/requirements.txt",
				"idna@3.6 pip backend/requirements.txt", "certifi@2023.11.17 pip backend/requirements.txt",
				"charset-normalizer@3.3.2 pip backend/requirements.txt",
			}, with(goDeps, " go tools/go.mod")...),
		},
		{
			file: "cyclonedx-npm-vulnerable-1.5.json", spec: "1.5",
			deps: []string{"lodash@4.17.20 npm package-lock.json", "minimist@1.2.5 npm package-lock.json",
				"ms@2.1.3 npm package-lock.json"},
			vulns: map[string][]string{
				"lodash":   {"CVE-2021-23337 high", "CVE-2020-28500 medium"},
				"minimist": {"CVE-2021-44906 critical"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			res, err := Read(sbomFixture(t, tt.file), Options{})
			if err != nil {
				t.Fatalf("Read: %v", err)
			}
			if res.SpecVersion != tt.spec {
				t.Errorf("spec version %q, want %q", res.SpecVersion, tt.spec)
			}
			var got []string
			for _, d := range res.Dependencies {
				got = append(got, depLine(d))
				if want, ok := tt.licenses[depLine(d)]; ok && !slices.Equal(d.Licenses, want) {
					t.Errorf("%s licenses = %+v, want %+v", depLine(d), d.Licenses, want)
				}
				sev := map[string]string{}
				for _, v := range res.Vulnerabilities {
					sev[v.ExternalID] = v.Severity
				}
				var vs []string
				for _, id := range d.Vulnerabilities {
					vs = append(vs, id+" "+sev[id])
				}
				if want := tt.vulns[d.Name]; !slices.Equal(vs, want) {
					t.Errorf("%s vulnerabilities = %v, want %v", d.Name, vs, want)
				}
			}
			if !slices.Equal(got, tt.deps) {
				t.Errorf("dependencies:\n got %q\nwant %q", got, tt.deps)
			}
			if res.Skipped != 0 {
				t.Errorf("skipped %d components, want 0", res.Skipped)
			}
		})
	}
}

// sbom wraps components and vulnerabilities in a minimal CycloneDX 1.6 document.
func sbom(extra string) string {
	return `{"bomFormat":"CycloneDX","specVersion":"1.6","version":1` + extra + `}`
}

func TestParseSBOMRejects(t *testing.T) {
	tests := []struct {
		name string
		body string
		// want is the 400 message, or "field: message" of a validation error.
		want string
	}{
		{"not JSON", `bomFormat: CycloneDX`, "the body is not valid JSON (at byte 1: invalid character 'b' looking for beginning of value)"},
		{"empty", ``, "the body ends before the SBOM does"},
		{"array", `[{"bomFormat":"CycloneDX"}]`, "the body is not a JSON SBOM: it is not a JSON object; send " + acceptedFormats},
		{"neither format", `{"name":"x","packages_":[]}`, "the body is not an SBOM registryd reads: it has neither bomFormat (CycloneDX) nor spdxVersion (SPDX); send " + acceptedFormats},
		{"SPDX 2.1", `{"spdxVersion":"SPDX-2.1","packages":[]}`, `SPDX version "SPDX-2.1" is not supported; use SPDX-2.2, SPDX-2.3 (JSON), or CycloneDX 1.4, 1.5, 1.6, 1.7`},
		{"SPDX 3 JSON-LD", `{"@context":"https://spdx.org/rdf/3.0.1/spdx-context.jsonld","@graph":[]}`, "SPDX 3 (JSON-LD) is not supported; send " + acceptedFormats},
		{"SPDX without version", `{"SPDXID":"SPDXRef-DOCUMENT","packages":[{"name":"a"}]}`, "the SPDX document has no spdxVersion"},
		{"both formats", `{"bomFormat":"CycloneDX","specVersion":"1.6","spdxVersion":"SPDX-2.3"}`, "the body has both bomFormat (CycloneDX) and spdxVersion (SPDX); send one SBOM"},
		{"SPDX package without name", `{"spdxVersion":"SPDX-2.3","packages":[{"SPDXID":"SPDXRef-a","name":"a"},{"SPDXID":"SPDXRef-b"}]}`, "packages[1].name: is missing"},
		{"SPDX package of the wrong type", `{"spdxVersion":"SPDX-2.3","packages":[{"name":"a","versionInfo":1}]}`, "packages[0].versionInfo: must be a JSON string, not number"},
		{"other format", `{"bomFormat":"SPDX","specVersion":"1.6"}`, `the body is not a CycloneDX JSON SBOM: bomFormat is "SPDX", not "CycloneDX"; send ` + acceptedFormats},
		{"no version", `{"bomFormat":"CycloneDX","components":[]}`, "the SBOM has no specVersion"},
		{"1.3", `{"bomFormat":"CycloneDX","specVersion":"1.3"}`, `CycloneDX specVersion "1.3" is not supported; use 1.4, 1.5, 1.6, 1.7`},
		{"1.8", `{"specVersion":"1.8","bomFormat":"CycloneDX"}`, `CycloneDX specVersion "1.8" is not supported; use 1.4, 1.5, 1.6, 1.7`},
		{"version is a number", `{"bomFormat":"CycloneDX","specVersion":1.5}`, "specVersion: must be a JSON string, not number"},
		{"truncated", `{"bomFormat":"CycloneDX","specVersion":"1.6","components":[{"name":"a"`, "the body ends before the SBOM does"},
		{"trailing data", sbom(``) + `{}`, "the body has data after the SBOM"},
		{"components not an array", sbom(`,"components":{"name":"a"}`), "components must be an array"},
		{"component without name", sbom(`,"components":[{"type":"library","name":"a"},{"type":"library","version":"1"}]`), "components[1].name: is missing"},
		{"nested component without name", sbom(`,"components":[{"name":"a","components":[{"name":"b"},{"name":""}]}]`), "components[0].components[1].name: is missing"},
		{"name of the wrong type", sbom(`,"components":[{"name":42}]`), "components[0].name: must be a JSON string, not number"},
		{"licenses of the wrong type", sbom(`,"components":[{"name":"a","licenses":"MIT"}]`), "components[0].licenses: must be a JSON array, not string"},
		{"vulnerability without id", sbom(`,"vulnerabilities":[{"ratings":[]}]`), "vulnerabilities[0].id: is missing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Read(strings.NewReader(tt.body), Options{})
			var ve *store.ValidationError
			if errors.As(err, &ve) {
				var got []string
				for f, msgs := range ve.Fields {
					for _, m := range msgs {
						got = append(got, f+": "+m)
					}
				}
				if !slices.Contains(got, tt.want) {
					t.Fatalf("validation %v, want %q", got, tt.want)
				}
				return
			}
			var se *Error
			if !errors.As(err, &se) {
				t.Fatalf("err = %v (%T), want an *Error", err, err)
			}
			if se.Reason != tt.want {
				t.Fatalf("reason %q, want %q", se.Reason, tt.want)
			}
		})
	}
}

// A failure of the body's reader (the listener's limit, for one) stays
// reachable, so that the listener can tell a 413 from a bad SBOM.
func TestParseSBOMReaderFails(t *testing.T) {
	errLimit := errors.New("over the limit")
	body := sbom(`,"components":[` + strings.Repeat(`{"name":"a","version":"1"},`, 1000) + `{"name":"b"}]`)
	_, err := Read(io.MultiReader(strings.NewReader(body[:1024]), iotest.ErrReader(errLimit)), Options{})
	var se *Error
	if !errors.Is(err, errLimit) || !errors.As(err, &se) || se.Reason != "the body could not be read" {
		t.Fatalf("err = %v, want the reader's error inside an *Error", err)
	}
}

func TestParseSBOMMapping(t *testing.T) {
	tests := []struct {
		name, body string
		opts       Options
		want       []string // depLine of each dependency
		skipped    int
	}{
		{
			name: "component property wins over metadata and purl",
			body: sbom(`,"metadata":{"properties":[{"name":"gitlab:meta:schema_version","value":"1"},
				{"name":"gitlab:dependency_scanning:package_manager:name","value":"yarn"},
				{"name":"gitlab:dependency_scanning:input_file:path","value":"web/yarn.lock"}]},
				"components":[
				{"name":"a","version":"1","purl":"pkg:npm/a@1"},
				{"name":"b","version":"2","purl":"pkg:npm/b@2","properties":[
					{"name":"gitlab:dependency_scanning:package_manager:name","value":"pnpm"},
					{"name":"gitlab:dependency_scanning:input_file:path","value":"app/pnpm-lock.yaml"}]}]`),
			want: []string{"a@1 yarn web/yarn.lock", "b@2 pnpm app/pnpm-lock.yaml"},
		},
		{
			name: "purl type refined by the file name",
			body: sbom(`,"components":[
				{"group":"org.slf4j","name":"slf4j-api","version":"2.0.9","purl":"pkg:maven/org.slf4j/slf4j-api@2.0.9",
				 "properties":[{"name":"syft:location:0:path","value":"/build.gradle"}]},
				{"group":"org.slf4j","name":"slf4j-api","version":"2.0.9","purl":"pkg:maven/org.slf4j/slf4j-api@2.0.9",
				 "properties":[{"name":"syft:location:0:path","value":"/svc/pom.xml"}]},
				{"name":"cats-core_2.13","version":"2.10.0","purl":"pkg:maven/org.typelevel/cats-core_2.13@2.10.0",
				 "evidence":{"occurrences":[{"location":"build.sbt"}]}},
				{"name":"left-pad","version":"1.3.0","purl":"pkg:npm/left-pad@1.3.0","properties":[{"name":"SrcFile","value":"/src/app/yarn.lock"}]},
				{"name":"requests","version":"2.31.0","purl":"pkg:pypi/requests@2.31.0","properties":[{"name":"SrcFile","value":"/src/app/Pipfile.lock"}]},
				{"name":"rich","version":"13.7.0","purl":"pkg:pypi/rich@13.7.0","properties":[{"name":"SrcFile","value":"/src/app/poetry.lock"}]},
				{"name":"wheel","version":"0.42.0","purl":"pkg:pypi/wheel@0.42.0","properties":[{"name":"SrcFile","value":"/src/app/setup.py"}]},
				{"name":"rails","version":"7.1.2","purl":"pkg:gem/rails@7.1.2"},
				{"name":"serde","version":"1.0.193","purl":"pkg:cargo/serde@1.0.193"},
				{"name":"musl","version":"1.2.4","purl":"pkg:apk/alpine/musl@1.2.4"},
				{"name":"libc6","version":"2.36","purl":"pkg:deb/debian/libc6@2.36"},
				{"name":"lodash","version":"4.17.21","properties":[{"name":"SrcFile","value":"/src/app/package-lock.json"}]}]`),
			want: []string{
				"org.slf4j/slf4j-api@2.0.9 gradle build.gradle",
				"org.slf4j/slf4j-api@2.0.9 maven svc/pom.xml",
				"cats-core_2.13@2.10.0 sbt build.sbt",
				"left-pad@1.3.0 yarn yarn.lock",
				"requests@2.31.0 pipenv Pipfile.lock",
				"rich@13.7.0 poetry poetry.lock",
				"wheel@0.42.0 setuptools setup.py",
				"rails@7.1.2 bundler ",
				"serde@1.0.193 cargo ",
				"musl@1.2.4 apk ",
				"libc6@2.36  ",
				"lodash@4.17.21 npm package-lock.json",
			},
		},
		{
			name: "the upload's file path fills in, below the gitlab properties",
			body: sbom(`,"components":[{"name":"x","version":"1","purl":"pkg:golang/x@1"},
				{"name":"y","version":"1","purl":"pkg:golang/y@1","properties":[{"name":"gitlab:dependency_scanning:input_file:path","value":"sub/go.mod"}]}]`),
			opts: Options{FilePath: "/go.mod"},
			want: []string{"x@1 go go.mod", "y@1 go sub/go.mod"},
		},
		{
			name: "files, operating systems and duplicates are skipped",
			body: sbom(`,"components":[{"type":"file","name":"/etc/passwd"},{"type":"operating-system","name":"debian","version":"12"},
				{"type":"library","name":"a","version":"1","purl":"pkg:npm/a@1"},{"type":"library","name":"a","version":"1","purl":"pkg:npm/a@1"},
				{"type":"framework","name":"b","version":"1","purl":"pkg:npm/b@1"}]`),
			want:    []string{"a@1 npm ", "b@1 npm "},
			skipped: 3,
		},
		{name: "no components", body: sbom(``)},
		{name: "null components", body: sbom(`,"components":null`)},
		{
			name: "unknown keys are skipped, whatever their shape",
			body: `{"$schema":"http://cyclonedx.org/schema/bom-1.5.schema.json","bomFormat":"CycloneDX","specVersion":"1.5",
				"dependencies":[{"ref":"a","dependsOn":["b",{"deep":[1,2,{"x":null}]}]}],"annotations":"x",
				"components":[{"name":"a","version":"1","purl":"pkg:npm/a@1","hashes":[{"alg":"SHA-256","content":"00"}],"unknown":{"k":[1]}}]}`,
			want: []string{"a@1 npm "},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := Read(strings.NewReader(tt.body), tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, d := range res.Dependencies {
				got = append(got, depLine(d))
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("got  %q\nwant %q", got, tt.want)
			}
			if res.Skipped != tt.skipped {
				t.Errorf("skipped %d, want %d", res.Skipped, tt.skipped)
			}
		})
	}
}

func TestParseSBOMLicenses(t *testing.T) {
	body := sbom(`,"components":[{"name":"a","version":"1","licenses":[
		{"license":{"id":"Apache-2.0"}},
		{"license":{"id":"MIT","name":"MIT License","url":"https://opensource.org/license/mit"}},
		{"license":{"name":"Custom licence","url":"https://example.com/licence"}},
		{"license":{"id":"Apache-2.0"}},
		{"expression":"(GPL-2.0-only WITH Classpath-exception-2.0 OR BSD-3-Clause) AND LicenseRef-scancode-public-domain"}]}]`)
	res, err := Read(strings.NewReader(body), Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := []store.License{
		{SPDX: "Apache-2.0", Name: "Apache-2.0", URL: "https://spdx.org/licenses/Apache-2.0.html"},
		{SPDX: "MIT", Name: "MIT License", URL: "https://opensource.org/license/mit"},
		{Name: "Custom licence", URL: "https://example.com/licence"},
		{SPDX: "GPL-2.0-only", Name: "GPL-2.0-only", URL: "https://spdx.org/licenses/GPL-2.0-only.html"},
		{SPDX: "BSD-3-Clause", Name: "BSD-3-Clause", URL: "https://spdx.org/licenses/BSD-3-Clause.html"},
		{Name: "LicenseRef-scancode-public-domain"},
	}
	if got := res.Dependencies[0].Licenses; !slices.Equal(got, want) {
		t.Fatalf("licenses\n got %+v\nwant %+v", got, want)
	}
}

func TestParseSBOMVulnerabilities(t *testing.T) {
	body := sbom(`,"serialNumber":"urn:uuid:3e671687-395b-41f5-a30f-a58921a69b79",
		"components":[{"bom-ref":"pkg:npm/a@1","name":"a","version":"1"},{"bom-ref":"b ref","name":"b","version":"2"}],
		"vulnerabilities":[
		{"id":"CVE-1","ratings":[{"severity":"low"},{"severity":"high"},{"severity":"medium"}],"description":"first","affects":[{"ref":"pkg:npm/a@1"}]},
		{"id":"CVE-2","affects":[{"ref":"urn:cdx:3e671687-395b-41f5-a30f-a58921a69b79/1#b%20ref"}]},
		{"id":"CVE-3","ratings":[{"severity":"none"}],"affects":[{"ref":"pkg:npm/a@1"},{"ref":"b ref"}]},
		{"id":"CVE-4","ratings":[{"severity":"critical"}],"affects":[{"ref":"not-listed"}]},
		{"bom-ref":"only-ref","ratings":[{"severity":"SEVERE"}],"affects":[{"ref":"b ref"}]},
		{"id":"CVE-1","ratings":[{"severity":"critical"}],"affects":[{"ref":"b ref"}]}]`)
	res, err := Read(strings.NewReader(body), Options{})
	if err != nil {
		t.Fatal(err)
	}
	var vulns []string
	for _, v := range res.Vulnerabilities {
		vulns = append(vulns, v.ExternalID+" "+v.Severity+" "+v.Description)
	}
	// CVE-4 affects nothing listed and is dropped; the second CVE-1 raises
	// the first one's severity; an unknown severity is unknown.
	wantVulns := []string{"CVE-1 critical first", "CVE-2 unknown ", "CVE-3 info ", "only-ref unknown "}
	if !slices.Equal(vulns, wantVulns) {
		t.Errorf("vulnerabilities %q, want %q", vulns, wantVulns)
	}
	if got, want := res.Dependencies[0].Vulnerabilities, []string{"CVE-1", "CVE-3"}; !slices.Equal(got, want) {
		t.Errorf("a: %q, want %q", got, want)
	}
	if got, want := res.Dependencies[1].Vulnerabilities, []string{"CVE-2", "CVE-3", "only-ref", "CVE-1"}; !slices.Equal(got, want) {
		t.Errorf("b: %q, want %q", got, want)
	}
}

// Twins are the same project scanned twice: the new format must give
// exactly the entries of the one registryd read before.
func TestParseSBOMTwins(t *testing.T) {
	for _, tt := range []struct{ file, twin string }{
		{"cdxgen-npm-1.7.json", "cdxgen-npm-1.6.json"},
		{"cdxgen-goapp-1.7.json", "cdxgen-goapp-1.6.json"},
		{"syft-npm-1.7.json", "syft-npm-1.6.json"},
		{"syft-npm.spdx.json", "syft-npm-1.6.json"},
		{"syft-goapp.spdx.json", "syft-goapp-1.6.json"},
	} {
		t.Run(tt.file, func(t *testing.T) {
			got, err := Read(sbomFixture(t, tt.file), Options{})
			if err != nil {
				t.Fatal(err)
			}
			want, err := Read(sbomFixture(t, tt.twin), Options{})
			if err != nil {
				t.Fatal(err)
			}
			if len(got.Dependencies) == 0 || fmt.Sprintf("%+v", got.Dependencies) != fmt.Sprintf("%+v", want.Dependencies) ||
				got.Skipped != want.Skipped {
				t.Fatalf("%s:\n%+v\n%s:\n%+v", tt.file, got.Dependencies, tt.twin, want.Dependencies)
			}
		})
	}
}

// Every entry says which package advisories know it by: from its purl,
// else from its package manager.
func TestParseSBOMAdvisoryPackages(t *testing.T) {
	body := sbom(`,"components":[
		{"group":"org.apache.logging.log4j","name":"log4j-core","version":"2.14.1","purl":"pkg:maven/org.apache.logging.log4j/log4j-core@2.14.1"},
		{"name":"cats-core_2.13","version":"2.10.0","purl":"pkg:maven/org.typelevel/cats-core_2.13@2.10.0"},
		{"group":"@babel","name":"parser","version":"7.24.0","purl":"pkg:npm/%40babel/parser@7.24.0"},
		{"name":"PyYAML","version":"5.3","purl":"pkg:pypi/pyyaml@5.3"},
		{"name":"Django","version":"4.2","properties":[{"name":"SrcFile","value":"/src/requirements.txt"}]},
		{"name":"github.com/gin-gonic/gin","version":"v1.5.0","purl":"pkg:golang/github.com/gin-gonic/gin@v1.5.0"},
		{"name":"Newtonsoft.Json","version":"12.0.1","purl":"pkg:nuget/Newtonsoft.Json@12.0.1"},
		{"name":"rails","version":"7.1.2","purl":"pkg:gem/rails@7.1.2"},
		{"name":"symfony/http-kernel","version":"v5.4.0","purl":"pkg:composer/symfony/http-kernel@v5.4.0"},
		{"name":"libc6","version":"2.36","purl":"pkg:deb/debian/libc6@2.36"},
		{"name":"lodash","version":"4.17.20","properties":[{"name":"gitlab:dependency_scanning:package_manager:name","value":"yarn"}]}]`)
	res, err := Read(strings.NewReader(body), Options{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range res.Dependencies {
		// As the store resolves it.
		eco, pkg, ok := strings.Cut(d.Package, "\x00")
		if !ok {
			eco, pkg = osv.PackageOfManager(d.PackageManager, d.Name)
		}
		got = append(got, d.Name+" -> "+eco+" "+pkg)
	}
	want := []string{
		"org.apache.logging.log4j/log4j-core -> Maven org.apache.logging.log4j/log4j-core",
		"cats-core_2.13 -> Maven org.typelevel/cats-core_2.13",
		"@babel/parser -> npm @babel/parser",
		"PyYAML -> PyPI pyyaml",
		"Django -> PyPI django",
		"github.com/gin-gonic/gin -> Go github.com/gin-gonic/gin",
		"Newtonsoft.Json -> NuGet newtonsoft.json",
		"rails -> RubyGems rails",
		"symfony/http-kernel -> Packagist symfony/http-kernel",
		"libc6 ->  ",
		"lodash -> npm lodash",
	}
	// Only cats-core (no group in the SBOM) needs its own package: the
	// others follow from their package manager and name.
	for _, d := range res.Dependencies {
		if (d.Package != "") != (d.Name == "cats-core_2.13") {
			t.Errorf("%s: Package %q", d.Name, d.Package)
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("got\n%q\nwant\n%q", got, want)
	}
}

// The benchmarks' SPDX document reads as syft's would: every package an
// entry, located by its evident-by file, the root directory left out.
func TestParseLargeSPDX(t *testing.T) {
	var buf strings.Builder
	n, err := sbomtest.WriteLargeSPDX(&buf, 256<<10)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Read(strings.NewReader(buf.String()), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Dependencies) != n || res.Skipped != 1 || res.SpecVersion != "SPDX-2.3" {
		t.Fatalf("%d entries of %d packages, %d skipped, spec %q", len(res.Dependencies), n, res.Skipped, res.SpecVersion)
	}
	d := res.Dependencies[0]
	if d.Name != "org.example.g0/component-0" || d.PackageManager != "maven" || d.FilePath != "builds/acme/monorepo/services/api/pom.xml" ||
		d.Package != "" || len(d.Licenses) != 1 || d.Licenses[0].SPDX != "Apache-2.0" {
		t.Fatalf("first entry %+v", d)
	}
}

// syft's SPDX 2.3 of the npm app: entries, files (from evident-by) and
// licenses (licenseDeclared, since licenseConcluded is NOASSERTION); the
// scanned directory is left out, as the project.
func TestParseSPDXFixture(t *testing.T) {
	res, err := Read(sbomFixture(t, "syft-npm.spdx.json"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range res.Dependencies {
		got = append(got, depLine(d))
		mit := store.License{SPDX: "MIT", Name: "MIT", URL: "https://spdx.org/licenses/MIT.html"}
		if !slices.Equal(d.Licenses, []store.License{mit}) {
			t.Errorf("%s licenses %+v", depLine(d), d.Licenses)
		}
	}
	want := []string{"@babel/parser@7.24.0 npm package-lock.json", "debug@4.3.4 npm package-lock.json",
		"ms@2.1.2 npm package-lock.json", "ms@2.1.3 npm package-lock.json", "registryd-sbom-fixture@1.0.0 npm package-lock.json"}
	if !slices.Equal(got, want) || res.SpecVersion != "SPDX-2.3" || res.Skipped != 1 {
		t.Fatalf("entries %q (spec %s, skipped %d)", got, res.SpecVersion, res.Skipped)
	}
	// The upload's dependency_file_path comes first, as for CycloneDX.
	res, err = Read(sbomFixture(t, "syft-npm.spdx.json"), Options{FilePath: "web/package-lock.json"})
	if err != nil || res.Dependencies[0].FilePath != "web/package-lock.json" {
		t.Fatalf("with a file path: %+v, %v", res.Dependencies[0], err)
	}
}

// SPDX relationships may come before the packages they name; a package a
// file CONTAINS (Trivy's lockfile packages) gets that file; sourceInfo is
// the last resort.
func TestParseSPDXRelationships(t *testing.T) {
	body := `{"relationships":[
		{"spdxElementId":"SPDXRef-DOCUMENT","relatedSpdxElement":"SPDXRef-root","relationshipType":"DESCRIBES"},
		{"spdxElementId":"SPDXRef-app","relatedSpdxElement":"SPDXRef-a","relationshipType":"CONTAINS"}],
		"spdxVersion":"SPDX-2.2",
		"packages":[
		{"SPDXID":"SPDXRef-root","name":"acme/app","versionInfo":"main"},
		{"SPDXID":"SPDXRef-app","name":"frontend/yarn.lock"},
		{"SPDXID":"SPDXRef-a","name":"left-pad","versionInfo":"1.3.0","licenseConcluded":"MIT OR Apache-2.0",
		 "externalRefs":[{"referenceCategory":"PACKAGE_MANAGER","referenceType":"purl","referenceLocator":"pkg:npm/left-pad@1.3.0"}]},
		{"SPDXID":"SPDXRef-b","name":"slf4j-api","versionInfo":"2.0.9","sourceInfo":"acquired package info from the following paths: /svc/pom.xml, /pom.xml",
		 "externalRefs":[{"referenceCategory":"PACKAGE-MANAGER","referenceType":"purl","referenceLocator":"pkg:maven/org.slf4j/slf4j-api@2.0.9"}]},
		{"SPDXID":"SPDXRef-c","name":"debian","versionInfo":"12","primaryPackagePurpose":"OPERATING-SYSTEM"}]}`
	res, err := Read(strings.NewReader(body), Options{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range res.Dependencies {
		got = append(got, depLine(d))
	}
	want := []string{"left-pad@1.3.0 yarn frontend/yarn.lock", "org.slf4j/slf4j-api@2.0.9 maven svc/pom.xml"}
	if !slices.Equal(got, want) || res.Skipped != 2 || res.SpecVersion != "SPDX-2.2" {
		t.Fatalf("entries %q, skipped %d", got, res.Skipped)
	}
	if l := res.Dependencies[0].Licenses; len(l) != 2 || l[0].SPDX != "MIT" || l[1].SPDX != "Apache-2.0" {
		t.Fatalf("licenses %+v", l)
	}
}
