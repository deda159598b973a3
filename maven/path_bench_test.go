package maven

import "testing"

var benchPaths = []struct{ name, raw string }{
	{"jar", "/org/apache/commons/commons-lang3/3.12.0/commons-lang3-3.12.0.jar"},
	{"pom.sha1", "/com/google/guava/guava/31.1-jre/guava-31.1-jre.pom.sha1"},
	{"snapshot", "/com/acme/app/1.0-SNAPSHOT/app-1.0-20200101.120000-1.jar"},
	{"metadata", "/org/apache/maven/plugins/maven-metadata.xml"},
	{"encoded", "/org/apache/commons/commons-lang3/3.12.0/commons-lang3-3.12.0%2Bx.jar"},
	{"rejected", "/org/apache/../../etc/passwd"},
}

var sinkPath Path

func BenchmarkParse(b *testing.B) {
	for _, bp := range benchPaths {
		b.Run(bp.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(bp.raw)))
			for b.Loop() {
				sinkPath, _ = Parse(bp.raw)
			}
		})
	}
}

func BenchmarkClassify(b *testing.B) {
	for _, bp := range benchPaths {
		b.Run(bp.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(bp.raw)))
			for b.Loop() {
				sinkPath, _ = Classify(bp.raw)
			}
		})
	}
}

var sinkString string

func BenchmarkContentType(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		sinkString = ContentType("org/apache/commons/commons-lang3/3.12.0/commons-lang3-3.12.0.jar")
	}
}
