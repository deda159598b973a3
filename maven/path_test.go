package maven

import (
	"errors"
	"strings"
	"testing"
)

// validCases calls f with every accepted path of the tables below and what Parse
// returns for it. FuzzParse seeds its corpus from the same calls.
func validCases(f func(name, raw string, want Path)) {
	jar := "org/example/lib/1.2/lib-1.2.jar"
	f("artifact jar", jar, Path{
		Rel: jar, Kind: Artifact, File: "lib-1.2.jar",
		GroupID: "org.example", GroupPath: "org/example", ArtifactID: "lib", Version: "1.2",
	})
	f("leading slash", "/"+jar, Path{
		Rel: jar, Kind: Artifact, File: "lib-1.2.jar",
		GroupID: "org.example", GroupPath: "org/example", ArtifactID: "lib", Version: "1.2",
	})
	f("pom", "org/example/lib/1.2/lib-1.2.pom", Path{
		Rel: "org/example/lib/1.2/lib-1.2.pom", Kind: Artifact, File: "lib-1.2.pom",
		GroupID: "org.example", GroupPath: "org/example", ArtifactID: "lib", Version: "1.2",
	})
	f("snapshot timestamped", "com/acme/a/1.0-SNAPSHOT/a-1.0-20200101.120000-1.jar", Path{
		Rel: "com/acme/a/1.0-SNAPSHOT/a-1.0-20200101.120000-1.jar", Kind: Artifact,
		File:    "a-1.0-20200101.120000-1.jar",
		GroupID: "com.acme", GroupPath: "com/acme", ArtifactID: "a", Version: "1.0-SNAPSHOT",
	})
	f("snapshot plain", "com/acme/a/1.0-SNAPSHOT/a-1.0-SNAPSHOT.pom", Path{
		Rel: "com/acme/a/1.0-SNAPSHOT/a-1.0-SNAPSHOT.pom", Kind: Artifact, File: "a-1.0-SNAPSHOT.pom",
		GroupID: "com.acme", GroupPath: "com/acme", ArtifactID: "a", Version: "1.0-SNAPSHOT",
	})
	f("metadata group level", "org/apache/maven/plugins/maven-metadata.xml", Path{
		Rel: "org/apache/maven/plugins/maven-metadata.xml", Kind: MetadataKind, File: MetadataFile,
		GroupID: "org.apache.maven.plugins", GroupPath: "org/apache/maven/plugins",
	})
	f("metadata artifact level", "com/google/guava/guava/maven-metadata.xml", Path{
		Rel: "com/google/guava/guava/maven-metadata.xml", Kind: MetadataKind, File: MetadataFile,
		GroupID: "com.google.guava", GroupPath: "com/google/guava", ArtifactID: "guava",
	})
	f("metadata version level", "com/acme/a/1.0-SNAPSHOT/maven-metadata.xml", Path{
		Rel: "com/acme/a/1.0-SNAPSHOT/maven-metadata.xml", Kind: MetadataKind, File: MetadataFile,
		GroupID: "com.acme", GroupPath: "com/acme", ArtifactID: "a", Version: "1.0-SNAPSHOT",
	})
	for _, a := range Algos {
		f("checksum "+a.String(), jar+a.Ext(), Path{
			Rel: jar + a.Ext(), Kind: Checksum, Algo: a, Parent: jar, ParentKind: Artifact,
			File:    "lib-1.2.jar" + a.Ext(),
			GroupID: "org.example", GroupPath: "org/example", ArtifactID: "lib", Version: "1.2",
		})
		md := "com/google/guava/guava/maven-metadata.xml"
		f("metadata checksum "+a.String(), md+a.Ext(), Path{
			Rel: md + a.Ext(), Kind: Checksum, Algo: a, Parent: md, ParentKind: MetadataKind,
			File:    MetadataFile + a.Ext(),
			GroupID: "com.google.guava", GroupPath: "com/google/guava", ArtifactID: "guava",
		})
	}
	f("signature checksum", "g/a/1/a-1.jar.asc.sha1", Path{
		Rel: "g/a/1/a-1.jar.asc.sha1", Kind: Checksum, Algo: SHA1, Parent: "g/a/1/a-1.jar.asc",
		ParentKind: Artifact, File: "a-1.jar.asc.sha1",
		GroupID: "g", GroupPath: "g", ArtifactID: "a", Version: "1",
	})
	f("percent-encoded letters", "org/ex%61mple/lib/1.2%2B1/lib-1.2%2b1.jar", Path{
		Rel: "org/example/lib/1.2+1/lib-1.2+1.jar", Kind: Artifact, File: "lib-1.2+1.jar",
		GroupID: "org.example", GroupPath: "org/example", ArtifactID: "lib", Version: "1.2+1",
	})
	f("plus stays plus", "g/a/1.0+1/a-1.0+1.jar", Path{
		Rel: "g/a/1.0+1/a-1.0+1.jar", Kind: Artifact, File: "a-1.0+1.jar",
		GroupID: "g", GroupPath: "g", ArtifactID: "a", Version: "1.0+1",
	})
	f("debian version dir", "org/apache/commons/commons-lang3/debian/commons-lang3-debian.pom", Path{
		Rel:  "org/apache/commons/commons-lang3/debian/commons-lang3-debian.pom",
		Kind: Artifact, File: "commons-lang3-debian.pom",
		GroupID: "org.apache.commons", GroupPath: "org/apache/commons",
		ArtifactID: "commons-lang3", Version: "debian",
	})
	f("dot-prefixed names", ".meta/prefixes.txt", Path{
		Rel: ".meta/prefixes.txt", Kind: Artifact, File: "prefixes.txt",
	})
	f("three dots is a name", "g/.../x", Path{Rel: "g/.../x", Kind: Artifact, File: "x"})
	f("single segment", "robots.txt", Path{Rel: "robots.txt", Kind: Artifact, File: "robots.txt"})
	f("sub-delims", "g/a/1/a-1!$&'(),=@~_.jar", Path{
		Rel: "g/a/1/a-1!$&'(),=@~_.jar", Kind: Artifact, File: "a-1!$&'(),=@~_.jar",
	})
	long := strings.Repeat(strings.Repeat("x", 255)+"/", 3) + strings.Repeat("y", 254) + "/z" // 1024 bytes
	f("longest path", long, Path{Rel: long, Kind: Artifact, File: "z"})
	f("64 segments", strings.Repeat("a/", 63)+"b", Path{
		Rel: strings.Repeat("a/", 63) + "b", Kind: Artifact, File: "b",
	})
	f("255-byte segment", "g/"+strings.Repeat("x", 255), Path{
		Rel: "g/" + strings.Repeat("x", 255), Kind: Artifact, File: strings.Repeat("x", 255),
	})
	f("1024 bytes after decoding", strings.Repeat("%78", 255)+long[255:], Path{Rel: long, Kind: Artifact, File: "z"})
}

// invalidCases calls f with every rejected path and the reason Parse gives.
func invalidCases(f func(name, raw, reason string)) {
	f("empty", "", "Path not present")
	f("only slash", "/", "Path not present")
	f("two leading slashes", "//g/a", "path contains an empty segment")
	f("double slash", "g//a", "path contains an empty segment")
	f("trailing slash", "g/a/", "path contains an empty segment")
	f("dotdot", "g/../a", "path contains '..'")
	f("leading dotdot", "../etc/passwd", "path contains '..'")
	f("trailing dotdot", "g/a/..", "path contains '..'")
	f("dot", "g/./a", "path contains a '.' segment")
	f("encoded dotdot lower", "g/%2e%2e/a", "path contains '..'")
	f("encoded dotdot upper", "g/%2E%2E/a", "path contains '..'")
	f("encoded dotdot mixed", "g/%2E./a", "path contains '..'")
	f("encoded dotdot mixed 2", "g/.%2e/a", "path contains '..'")
	f("encoded dot", "g/%2e/a", "path contains a '.' segment")
	f("encoded dotdot leading", "%2e%2e/etc/passwd", "path contains '..'")
	f("encoded slash lower", "g/a%2fb", "path contains an encoded slash (%2F)")
	f("encoded slash upper", "g/..%2Fb", "path contains an encoded slash (%2F)")
	f("double encoded dotdot", "g/%252e%252e/a", "path contains an encoded '%' (double encoding)")
	f("bad escape", "g/%zz", "path contains an invalid percent-escape")
	f("truncated escape", "g/a%4", "path contains an invalid percent-escape")
	f("lone percent", "g/a%", "path contains an invalid percent-escape")
	f("backslash", `g\..\a`, "path contains a backslash")
	f("encoded backslash", "g/a%5c..%5Cb", "path contains a backslash")
	f("nul", "g/a\x00.jar", "path contains NUL")
	f("encoded nul", "g/a%00.jar", "path contains NUL")
	f("newline", "g/a\n.jar", "path contains a control character")
	f("encoded CR", "g/a%0d.jar", "path contains a control character")
	f("tab", "g/a\t.jar", "path contains a control character")
	f("DEL", "g/a\x7f.jar", "path contains a control character")
	f("space", "g/a b.jar", "path contains whitespace")
	f("encoded space", "g/a%20b.jar", "path contains whitespace")
	f("non-ASCII", "g/é/a.jar", "path contains a non-ASCII byte")
	f("encoded non-ASCII", "g/%C3%A9/a.jar", "path contains a non-ASCII byte")
	for _, c := range `?#*"<>|:;[]{}^` + "`" {
		f("char "+string(c), "g/a"+string(c)+"b/x.jar", "path contains a disallowed character '"+string(c)+"'")
	}
	f("unresolved property", "g/a/${version}/a-${version}.pom", "path contains a disallowed character '{'")
	f("overlong", strings.Repeat("a/", 512)+"b", "path is longer than 1024 bytes")
	f("overlong after decoding", strings.Repeat("%61", 1025), "path is longer than 1024 bytes")
	f("overlong with leading slash", "/"+strings.Repeat("a", 1025), "path is longer than 1024 bytes")
	f("overlong segment", "g/"+strings.Repeat("x", 256), "path segment is longer than 255 bytes")
	f("65 segments", strings.Repeat("a/", 64)+"b", "path has more than 64 segments")
	f("checksum of checksum", "g/a/1/a-1.jar.sha1.md5", "checksum of a checksum file")
	f("checksum of checksum sha256", "g/a/1/a-1.jar.sha256.sha512", "checksum of a checksum file")
	f("checksum without name", "g/a/1/.sha1", "checksum file has no parent file name")
	f("checksum of dot", "g/..sha1", "path contains a '.' segment")
	f("checksum of dotdot", "g/...md5", "path contains '..'")
}

func TestParseValid(t *testing.T) {
	validCases(func(name, raw string, want Path) {
		t.Run(name, func(t *testing.T) {
			got, err := Parse(raw)
			if err != nil {
				t.Fatalf("Parse(%q): %v", raw, err)
			}
			if got != want {
				t.Fatalf("Parse(%q)\n got %+v\nwant %+v", raw, got, want)
			}
			c, err := Classify(raw)
			want.GroupID = ""
			if err != nil || c != want {
				t.Fatalf("Classify(%q) = %+v, %v\nwant %+v", raw, c, err, want)
			}
		})
	})
}

func TestParseInvalid(t *testing.T) {
	invalidCases(func(name, raw, reason string) {
		t.Run(name, func(t *testing.T) {
			p, err := Parse(raw)
			if err == nil {
				t.Fatalf("Parse(%q) = %+v, want error %q", raw, p, reason)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Parse(%q) error %v does not wrap ErrInvalid", raw, err)
			}
			var pe *Error
			if !errors.As(err, &pe) || pe.Reason() != reason {
				t.Fatalf("Parse(%q) error %q, want reason %q", raw, err, reason)
			}
			if p != (Path{}) {
				t.Fatalf("Parse(%q) returned %+v with its error", raw, p)
			}
			if _, cerr := Classify(raw); cerr != err {
				t.Fatalf("Classify(%q) error %v, Parse error %v", raw, cerr, err)
			}
		})
	})
}

func TestErrorText(t *testing.T) {
	_, err := Parse("a/../b")
	if got, want := err.Error(), "invalid maven path: path contains '..'"; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
}

// TestCoordinates is the golden table of coordinates: path -> group:artifact:version.
func TestCoordinates(t *testing.T) {
	f := func(rel, want string) {
		t.Helper()
		p, err := Parse(rel)
		if err != nil {
			t.Fatalf("Parse(%q): %v", rel, err)
		}
		if got := p.GroupID + ":" + p.ArtifactID + ":" + p.Version; got != want {
			t.Errorf("%s: got %q, want %q", rel, got, want)
		}
		if p.GroupID != strings.ReplaceAll(p.GroupPath, "/", ".") {
			t.Errorf("%s: GroupID %q does not match GroupPath %q", rel, p.GroupID, p.GroupPath)
		}
	}
	// Release artifacts, classifiers, extensions.
	f("junit/junit/4.13.2/junit-4.13.2.jar", "junit:junit:4.13.2")
	f("org/apache/commons/commons-lang3/3.12.0/commons-lang3-3.12.0.pom", "org.apache.commons:commons-lang3:3.12.0")
	f("com/google/guava/guava/31.1-jre/guava-31.1-jre.jar", "com.google.guava:guava:31.1-jre")
	f("com/google/guava/guava/31.1-jre/guava-31.1-jre-sources.jar", "com.google.guava:guava:31.1-jre")
	f("com/google/guava/guava/31.1-jre/guava-31.1-jre.module", "com.google.guava:guava:31.1-jre")
	f("com/google/guava/guava/31.1-jre/guava-31.1-jre.jar.asc", "com.google.guava:guava:31.1-jre")
	f("org/slf4j/slf4j-api/2.0.9/slf4j-api-2.0.9.jar.sha1", "org.slf4j:slf4j-api:2.0.9")
	f("org/jetbrains/kotlin/kotlin-stdlib/1.9.0/kotlin-stdlib-1.9.0-all.jar", "org.jetbrains.kotlin:kotlin-stdlib:1.9.0")
	f("g/a/1.0/a-1.0", "g:a:1.0")
	// Debian's repository: version directories "debian" and "N.x".
	f("org/apache/maven/maven-core/debian/maven-core-debian.jar", "org.apache.maven:maven-core:debian")
	f("junit/junit/4.x/junit-4.x.pom", "junit:junit:4.x")
	// Snapshots.
	f("com/acme/a/1.0-SNAPSHOT/a-1.0-SNAPSHOT.jar", "com.acme:a:1.0-SNAPSHOT")
	f("com/acme/a/1.0-SNAPSHOT/a-1.0-20200101.120000-1.jar", "com.acme:a:1.0-SNAPSHOT")
	f("com/acme/a/1.0-SNAPSHOT/a-1.0-20200101.120000-12-tests.jar", "com.acme:a:1.0-SNAPSHOT")
	f("com/acme/a/1.0-SNAPSHOT/a-1.0-20200101.120000-3.pom.md5", "com.acme:a:1.0-SNAPSHOT")
	f("com/acme/a/SNAPSHOT/a-20200101.120000-3.pom", "com.acme:a:SNAPSHOT")
	// Metadata: group, artifact and version level.
	f("org/apache/maven/plugins/maven-metadata.xml", "org.apache.maven.plugins::")
	f("org/codehaus/mojo/maven-metadata.xml", "org.codehaus.mojo::")
	f("acme/maven-metadata.xml", "acme::")
	f("maven-metadata.xml", "::")
	f("org/apache/maven/plugins/maven-compiler-plugin/maven-metadata.xml", "org.apache.maven.plugins:maven-compiler-plugin:")
	f("junit/junit/maven-metadata.xml.sha1", "junit:junit:")
	f("com/acme/a/1.0-SNAPSHOT/maven-metadata.xml", "com.acme:a:1.0-SNAPSHOT")
	f("com/acme/a/1.0.snapshot/maven-metadata.xml", "com.acme:a:1.0.snapshot")
	f("com/acme/a/1.0-SNAPSHOT/maven-metadata.xml.sha256", "com.acme:a:1.0-SNAPSHOT")
	f("a/1.0-SNAPSHOT/maven-metadata.xml", "a:1.0-SNAPSHOT:") // no room for a group: artifact level
	// Paths without coordinates: still valid.
	f("g/a/1.2/other-1.2.jar", "::")                       // file of another artifact
	f("g/a/1.2/a-1.3.jar", "::")                           // another version
	f("g/a/1.2/a-1.2x.jar", "::")                          // version is only a prefix
	f("g/a/1.0-SNAPSHOT/a-1.0-2020.jar", "::")             // not a timestamp
	f("g/a/1.0-SNAPSHOT/a-1.0-20200101.120000-.jar", "::") // no build number
	f("g/a/1.0-SNAPSHOT/a-1.0-20200101x120000-1.jar", "::")
	f("a/1.2/a-1.2.jar", "::") // no group
	f(".meta/prefixes.txt", "::")
	f("archetype-catalog.xml", "::")
}

func TestIsMetadata(t *testing.T) {
	f := func(rel string, want bool) {
		t.Helper()
		if got := IsMetadata(rel); got != want {
			t.Errorf("IsMetadata(%q) = %v, want %v", rel, got, want)
		}
		if p, err := Parse(rel); err == nil && (p.Kind == MetadataKind) != want {
			t.Errorf("Parse(%q).Kind = %v, IsMetadata %v", rel, p.Kind, want)
		}
	}
	f("maven-metadata.xml", true)
	f("g/a/maven-metadata.xml", true)
	f("g/a/1.0-SNAPSHOT/maven-metadata.xml", true)
	f("g/a/maven-metadata.xml.sha1", false)
	f("g/a/x-maven-metadata.xml", false)
	f("g/a/maven-metadata-central.xml", false)
	f("g/a/1/a-1.jar", false)
	f("", false)
}

func TestEntry(t *testing.T) {
	f := func(raw, rel string, kind Kind) {
		t.Helper()
		p, err := Parse(raw)
		if err != nil {
			t.Fatalf("Parse(%q): %v", raw, err)
		}
		if p.EntryRel() != rel || p.EntryKind() != kind {
			t.Errorf("%q: entry %q %v, want %q %v", raw, p.EntryRel(), p.EntryKind(), rel, kind)
		}
	}
	f("g/a/1/a-1.jar", "g/a/1/a-1.jar", Artifact)
	f("g/a/1/a-1.jar.md5", "g/a/1/a-1.jar", Artifact)
	f("g/a/maven-metadata.xml", "g/a/maven-metadata.xml", MetadataKind)
	f("g/a/maven-metadata.xml.sha512", "g/a/maven-metadata.xml", MetadataKind)
}

func TestAlgoAndKind(t *testing.T) {
	f := func(a Algo, ext, name string) {
		t.Helper()
		if a.Ext() != ext || a.String() != name {
			t.Errorf("Algo(%d): Ext %q String %q, want %q %q", a, a.Ext(), a.String(), ext, name)
		}
	}
	f(SHA1, ".sha1", "sha1")
	f(MD5, ".md5", "md5")
	f(SHA256, ".sha256", "sha256")
	f(SHA512, ".sha512", "sha512")
	f(0, "", "invalid")
	for k, want := range map[Kind]string{Artifact: "artifact", MetadataKind: "metadata", Checksum: "checksum", 0: "invalid"} {
		if k.String() != want {
			t.Errorf("Kind(%d).String() = %q, want %q", k, k.String(), want)
		}
	}
}

func TestContentType(t *testing.T) {
	f := func(rel, want string) {
		t.Helper()
		if got := ContentType(rel); got != want {
			t.Errorf("ContentType(%q) = %q, want %q", rel, got, want)
		}
	}
	f("g/a/1/a-1.pom", "application/xml")
	f("g/a/maven-metadata.xml", "application/xml")
	f("g/a/1/a-1.jar", "application/java-archive")
	f("g/a/1/a-1.war", "application/java-archive")
	f("g/a/1/a-1.ear", "application/java-archive")
	f("g/a/1/a-1.aar", "application/java-archive")
	f("g/a/1/a-1.module", "application/json")
	f("g/a/1/a-1.json", "application/json")
	f("g/a/1/a-1.jar.sha1", "text/plain")
	f("g/a/1/a-1.jar.md5", "text/plain")
	f("g/a/1/a-1.jar.sha256", "text/plain")
	f("g/a/1/a-1.jar.sha512", "text/plain")
	f("g/a/maven-metadata.xml.sha1", "text/plain")
	f("g/a/1/a-1.jar.asc", "text/plain")
	f(".meta/prefixes.txt", "text/plain")
	f("g/a/1/a-1.zip", "application/zip")
	f("g/a/1/a-1.tar.gz", "application/gzip")
	f("g/a/1/a-1.tgz", "application/gzip")
	f("g/a/1/a-1.so", "application/octet-stream")
	f("g/a.b/1/noext", "application/octet-stream") // a dot in a directory is no extension
	f("g/a/1/a-1.JAR", "application/octet-stream")
	f("", "application/octet-stream")
}
