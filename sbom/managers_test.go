package sbom

import (
	"slices"
	"strings"
	"testing"

	"github.com/package-url/packageurl-go"
)

func TestPurlType(t *testing.T) {
	tests := []struct{ name, purl, want string }{
		{"plain", "pkg:npm/left-pad@1.3.0", "npm"},
		{"namespace", "pkg:maven/org.slf4j/slf4j-api@2.0.9", "maven"},
		{"qualifiers", "pkg:maven/org.slf4j/slf4j-api@2.0.9?type=jar&classifier=sources", "maven"},
		{"qualifier with an encoded URL", "pkg:pypi/requests@2.31.0?vcs_url=git%2Bhttps://github.com/psf/requests%402.31.0", "pypi"},
		{"subpath", "pkg:golang/github.com/acme/tools@v1.2.0#cmd/lint", "golang"},
		{"qualifiers and subpath", "pkg:golang/github.com/acme/tools@v1.2.0?type=module#cmd/lint", "golang"},
		{"percent-encoded npm scope", "pkg:npm/%40babel/parser@7.24.0", "npm"},
		{"percent-encoded version", "pkg:gem/rails@7.1.2%2Bfix", "gem"},
		{"type in capitals", "pkg:NPM/left-pad@1.3.0", "npm"},
		{"slashes after the scheme", "pkg://cargo/serde@1.0.193", "cargo"},
		{"no version", "pkg:nuget/Newtonsoft.Json", "nuget"},
		{"a type registryd does not map", "pkg:deb/debian/libc6@2.36?arch=amd64&distro=bookworm", "deb"},
		// Not package URLs: no type, so the file name decides.
		{"empty", "", ""},
		{"no scheme", "npm/left-pad@1.3.0", ""},
		{"scheme only", "pkg:", ""},
		{"no name", "pkg:maven/", ""},
		{"bad percent-encoding", "pkg:npm/left%zzpad@1.3.0", ""},
		{"bad qualifier key", "pkg:maven/g/a@1?1type=jar", ""},
		{"repeated qualifier", "pkg:maven/g/a@1?type=jar&type=pom", ""},
		{"a type's own rule", "pkg:swift/swift-nio@2.0.0", ""}, // swift purls need a namespace
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := purlType(tt.purl); got != tt.want {
				t.Fatalf("purlType(%q) = %q, want %q", tt.purl, got, tt.want)
			}
		})
	}
}

// Purls built with packageurl-go, as the benchmark's SBOM writer builds
// them, read back with their type whatever their parts hold.
func TestPurlTypeOfBuiltPurls(t *testing.T) {
	for _, p := range []*packageurl.PackageURL{
		packageurl.NewPackageURL(packageurl.TypeNPM, "@acme corp", "ui kit", "1.0.0-rc.1+build.5", nil, ""),
		packageurl.NewPackageURL(packageurl.TypeMaven, "org.acme", "app", "1.0",
			packageurl.Qualifiers{{Key: "classifier", Value: "linux x86/64"}, {Key: "type", Value: "jar"}}, "lib/#extra"),
		packageurl.NewPackageURL(packageurl.TypeGolang, "example.com/a%b", "c?d", "v0.0.0-2026", nil, "sub path/x"),
	} {
		s := p.ToString()
		if got := purlType(s); got != p.Type {
			t.Errorf("purlType(%q) = %q, want %q", s, got, p.Type)
		}
	}
}

// The purl's type reaches the package manager whatever else the purl holds;
// a purl that is not one leaves it to the file name.
func TestReadPurls(t *testing.T) {
	body := sbom(`,"components":[
		{"group":"org.acme","name":"app","version":"1.0","purl":"pkg:maven/org.acme/app@1.0?type=pom&classifier=sources#sub/dir",
		 "properties":[{"name":"syft:location:0:path","value":"/build.gradle.kts"}]},
		{"group":"@babel","name":"parser","version":"7.24.0","purl":"pkg:npm/%40babel/parser@7.24.0",
		 "properties":[{"name":"SrcFile","value":"/src/web/yarn.lock"}]},
		{"name":"tools","version":"v1.2.0","purl":"pkg:golang/github.com/acme/tools@v1.2.0?type=module#cmd/lint"},
		{"name":"broken","version":"1","purl":"pkg:maven/",
		 "evidence":{"occurrences":[{"location":"svc/pom.xml"}]}},
		{"name":"unreadable","version":"1","purl":"pkg:npm/x%zz@1"}]`)
	res, err := Read(strings.NewReader(body), Options{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range res.Dependencies {
		got = append(got, depLine(d))
	}
	want := []string{
		"org.acme/app@1.0 gradle build.gradle.kts",
		"@babel/parser@7.24.0 yarn yarn.lock",
		"tools@v1.2.0 go ",
		"broken@1 maven svc/pom.xml",
		"unreadable@1  ",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
}
