package maven

import "strings"

// Content types that ContentType returns.
const (
	TypeXML         = "application/xml"
	TypeJavaArchive = "application/java-archive"
	TypeJSON        = "application/json"
	TypeText        = "text/plain"
	TypeZip         = "application/zip"
	TypeGzip        = "application/gzip"
	TypeOctetStream = "application/octet-stream"
)

// ContentType is the media type for rel, from the extension of its last segment, for
// when the upstream sent none:
//
//	.pom .xml (maven-metadata.xml)    application/xml
//	.jar .war .ear .aar               application/java-archive
//	.module (Gradle module metadata)  application/json
//	.json                             application/json
//	.sha1 .md5 .sha256 .sha512 .asc   text/plain
//	.txt                              text/plain
//	.zip                              application/zip
//	.gz .tgz                          application/gzip
//	anything else                     application/octet-stream
//
// XML is application/xml rather than text/xml (RFC 7303 §9.2: text/xml is an alias, and
// its charset default is the trap that made application/xml the recommended name).
// Maven Central happens to send text/xml; clients do not look at it. Matching is
// case-sensitive, like Maven paths.
func ContentType(rel string) string {
	base := rel[strings.LastIndexByte(rel, '/')+1:]
	i := strings.LastIndexByte(base, '.')
	if i < 0 {
		return TypeOctetStream
	}
	switch base[i:] {
	case ".pom", ".xml":
		return TypeXML
	case ".jar", ".war", ".ear", ".aar":
		return TypeJavaArchive
	case ".module", ".json":
		return TypeJSON
	case ".sha1", ".md5", ".sha256", ".sha512", ".asc", ".txt":
		return TypeText
	case ".zip":
		return TypeZip
	case ".gz", ".tgz":
		return TypeGzip
	}
	return TypeOctetStream
}
