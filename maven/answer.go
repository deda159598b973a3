package maven

import (
	"bytes"
	"mime"
	"strings"
)

// What an upstream answer may be. A repository that cannot serve a file
// sometimes answers 200 anyway: a captive portal or a login page, the "not
// found" page of a misconfigured web server, a JSON error of a repository
// manager. Stored, such a body would be served as the file, with checksums
// that match it. RefusedType and LooksLikeHTML recognise those answers by
// what the file is by nature (its extension):
//
//	binary files (.jar .war .ear .aar .zip .gz .tgz .tar .so .class ...):
//	    refuse text/*, HTML, JSON and XML media types
//	HTML files (.html .htm .xhtml):
//	    take anything
//	every other file (.pom .xml .module .json .asc .txt, unknown extensions):
//	    refuse text/html and application/xhtml+xml only (text/xml for a POM
//	    is what Maven Central sends; text/plain is common for .asc and .txt)
//
// A missing or malformed Content-Type is not refused: the body's first bytes
// are looked at instead (LooksLikeHTML), for every file that is not HTML.
// Archives are deliberately not required to start with their magic number:
// "fully executable" jars start with a shell script.

// nature is what a file is, judged by its extension.
type nature uint8

const (
	natureOther nature = iota
	natureBinary
	natureHTML
)

// binaryExts are extensions of files that are never text.
var binaryExts = map[string]bool{
	".jar": true, ".war": true, ".ear": true, ".aar": true, ".rar": true, ".sar": true, ".par": true,
	".nar": true, ".hpi": true, ".jpi": true, ".kar": true, ".apk": true, ".klib": true, ".swc": true,
	".zip": true, ".gz": true, ".tgz": true, ".tar": true, ".bz2": true, ".xz": true, ".zst": true, ".7z": true,
	".so": true, ".dll": true, ".dylib": true, ".jnilib": true, ".exe": true, ".class": true, ".dex": true,
	".bin": true, ".gpg": true, ".sig": true,
}

func natureOf(rel string) nature {
	base := rel[strings.LastIndexByte(rel, '/')+1:]
	i := strings.LastIndexByte(base, '.')
	if i < 0 {
		return natureOther
	}
	ext := strings.ToLower(base[i:])
	switch {
	case binaryExts[ext]:
		return natureBinary
	case ext == ".html" || ext == ".htm" || ext == ".xhtml":
		return natureHTML
	}
	return natureOther
}

// Binary reports whether rel is a file that is never text, and never empty
// (the smallest zip, an empty archive, has 22 bytes).
func Binary(rel string) bool { return natureOf(rel) == natureBinary }

// RefusedType returns why an upstream answer of Content-Type ctype cannot be
// the file rel, or "" when it can. The reason names the parsed media type
// (lower-case tokens only, never the raw header), so it is safe to show a
// client.
func RefusedType(rel, ctype string) string {
	if ctype == "" {
		return ""
	}
	mt, _, err := mime.ParseMediaType(ctype)
	if err != nil {
		return ""
	}
	switch nat := natureOf(rel); {
	case nat == natureHTML:
		return ""
	case mt == "text/html" || mt == "application/xhtml+xml":
		return "answered " + mt + " (a web page) for a file that is not HTML"
	case nat == natureBinary && textual(mt):
		return "answered " + mt + " for a binary file"
	}
	return ""
}

// textual reports whether mt is a text, JSON or XML media type.
func textual(mt string) bool {
	return strings.HasPrefix(mt, "text/") ||
		mt == "application/json" || strings.HasSuffix(mt, "+json") ||
		mt == "application/xml" || strings.HasSuffix(mt, "+xml") ||
		mt == "application/javascript"
}

// SniffLen is how many first bytes of a body LooksLikeHTML wants.
const SniffLen = 512

// LooksLikeHTML reports whether prefix, the first bytes of an upstream's
// body for rel, is an HTML page although rel is not an HTML file: after an
// optional UTF-8 byte order mark and white space, "<!doctype html" or
// "<html", in any case.
func LooksLikeHTML(rel string, prefix []byte) bool {
	if natureOf(rel) == natureHTML {
		return false
	}
	b := bytes.TrimPrefix(prefix, []byte("\xef\xbb\xbf"))
	b = bytes.TrimLeft(b, " \t\r\n\f")
	for _, tag := range [...]string{"<!doctype html", "<html"} {
		if len(b) >= len(tag) && bytes.EqualFold(b[:len(tag)], []byte(tag)) {
			// "<html" must end there: "<htmlfoo" is not a page.
			if len(b) == len(tag) || !isNameByte(b[len(tag)]) {
				return true
			}
		}
	}
	return false
}

func isNameByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == ':'
}
