package maven

import "testing"

func TestRefusedType(t *testing.T) {
	cases := []struct {
		rel, ctype string
		refused    bool
	}{
		{"g/a/1/a-1.jar", "", false},
		{"g/a/1/a-1.jar", "application/java-archive", false},
		{"g/a/1/a-1.jar", "application/octet-stream", false},
		{"g/a/1/a-1.jar", "application/zip", false},
		{"g/a/1/a-1.jar", "text/html; charset=utf-8", true},
		{"g/a/1/a-1.jar", "TEXT/HTML", true},
		{"g/a/1/a-1.jar", "text/plain", true},
		{"g/a/1/a-1.jar", "application/json", true},
		{"g/a/1/a-1.jar", "application/problem+json", true},
		{"g/a/1/a-1.jar", "application/xml", true},
		{"g/a/1/a-1.JAR", "text/plain", true},
		{"g/a/1/a-1.war", "text/html", true},
		{"g/a/1/a-1.tar.gz", "text/plain", true},
		{"g/a/1/a-1.jar", "not a media type;;", false},
		{"g/a/1/a-1.pom", "text/xml", false},
		{"g/a/1/a-1.pom", "application/xml", false},
		{"g/a/1/a-1.pom", "text/plain", false},
		{"g/a/1/a-1.pom", "text/html", true},
		{"g/a/1/a-1.pom", "application/xhtml+xml", true},
		{"g/a/maven-metadata.xml", "text/html;charset=UTF-8", true},
		{"g/a/1/a-1.module", "application/json", false},
		{"g/a/1/a-1.module", "text/html", true},
		{"g/a/1/a-1.jar.asc", "text/plain", false},
		{"g/a/1/a-1-javadoc.html", "text/html", false},
		{"g/a/1/a-1.unknownext", "text/plain", false},
		{"g/a/1/a-1.unknownext", "text/html", true},
	}
	for _, c := range cases {
		got := RefusedType(c.rel, c.ctype)
		if (got != "") != c.refused {
			t.Errorf("RefusedType(%q, %q) = %q, refused want %v", c.rel, c.ctype, got, c.refused)
		}
	}
}

func TestLooksLikeHTML(t *testing.T) {
	cases := []struct {
		rel    string
		prefix string
		want   bool
	}{
		{"a.jar", "<!DOCTYPE html><html>", true},
		{"a.jar", "\xef\xbb\xbf\n  <html lang=en>", true},
		{"a.pom", "<HTML>", true},
		{"a.pom", "<html", true},
		{"a.pom", "<?xml version=\"1.0\"?><project>", false},
		{"a.pom", "<htmlfoo>", false},
		{"a.jar", "PK\x03\x04", false},
		{"a.jar", "#!/bin/bash\nexec java -jar", false},
		{"a.jar", "", false},
		{"a.html", "<!doctype html>", false},
	}
	for _, c := range cases {
		if got := LooksLikeHTML(c.rel, []byte(c.prefix)); got != c.want {
			t.Errorf("LooksLikeHTML(%q, %q) = %v, want %v", c.rel, c.prefix, got, c.want)
		}
	}
}

func FuzzLooksLikeHTML(f *testing.F) {
	f.Add("a.jar", []byte("<!doctype html>"), "text/html")
	f.Fuzz(func(t *testing.T, rel string, prefix []byte, ctype string) {
		if rel == "" {
			return
		}
		LooksLikeHTML(rel, prefix)
		r := RefusedType(rel, ctype)
		for i := 0; i < len(r); i++ {
			if r[i] < 0x20 || r[i] > 0x7e {
				t.Fatalf("reason %q carries a byte a client should not see", r)
			}
		}
	})
}
