// Package maven is registryd's knowledge of Maven repository paths: it validates the
// path of a download or upload, classifies it (artifact, maven-metadata.xml, checksum
// sidecar) and extracts coordinates where the path has them. It does no I/O.
//
// Parse and Classify are on the path of every download. For a valid path that needs no
// percent-decoding, every string in the result is a substring of the input: Classify
// then allocates nothing, and Parse allocates only the dotted GroupID when the group
// has more than one segment. A percent-encoded path costs one more allocation (the
// decoded copy).
//
// Aliasing: when raw needs no decoding, Rel, Parent and the coordinates share raw's
// memory. If raw was built over a reused buffer without copying (for example fasthttp
// request bytes through an unsafe conversion), clone the fields you keep beyond the
// request.
package maven

import (
	"errors"
	"strings"
)

// Limits that Parse enforces, measured on the decoded path without its leading slash.
const (
	MaxLen        = 1024 // bytes in the whole relative path
	MaxSegmentLen = 255  // bytes in one path segment
	MaxSegments   = 64   // segments in the path
)

// MetadataFile is the base name of Maven repository metadata.
const MetadataFile = "maven-metadata.xml"

// Kind says what a repository path names.
type Kind uint8

const (
	Artifact     Kind = iota + 1 // any file that is neither metadata nor a checksum sidecar
	MetadataKind                 // maven-metadata.xml (named so that the type Metadata can be the parsed document)
	Checksum                     // a digest sidecar (.sha1, .md5, .sha256, .sha512) of an Artifact or Metadata
)

func (k Kind) String() string {
	switch k {
	case Artifact:
		return "artifact"
	case MetadataKind:
		return "metadata"
	case Checksum:
		return "checksum"
	}
	return "invalid"
}

// Algo is the digest algorithm of a checksum sidecar.
type Algo uint8

const (
	SHA1 Algo = iota + 1
	MD5
	SHA256
	SHA512
)

// Algos lists every algorithm, in the order Maven clients prefer them for sidecars.
var Algos = [...]Algo{SHA1, MD5, SHA256, SHA512}

// Ext is the file-name extension of a's sidecar, with its dot (".sha1"); "" if a is
// not a known algorithm.
func (a Algo) Ext() string {
	switch a {
	case SHA1:
		return ".sha1"
	case MD5:
		return ".md5"
	case SHA256:
		return ".sha256"
	case SHA512:
		return ".sha512"
	}
	return ""
}

func (a Algo) String() string {
	if e := a.Ext(); e != "" {
		return e[1:]
	}
	return "invalid"
}

// checksumAlgo returns the algorithm whose sidecar extension ends name, and that
// extension; (0, "") if there is none. Case-sensitive, as Maven writes them.
func checksumAlgo(name string) (Algo, string) {
	for _, a := range [...]Algo{SHA1, MD5, SHA256, SHA512} { // not Algos: callers could change it
		if e := a.Ext(); strings.HasSuffix(name, e) {
			return a, e
		}
	}
	return 0, ""
}

// Path is a valid, classified Maven repository path.
type Path struct {
	// Rel is the decoded relative path without a leading slash, for example
	// "org/example/lib/1.2/lib-1.2.jar". It is the cache-entry path. It contains only
	// bytes that are legal unescaped in a URL path (see Parse), so it can be appended
	// to an upstream's base URL as is.
	Rel  string
	Kind Kind
	// Algo is the checksum algorithm; zero unless Kind is Checksum.
	Algo Algo
	// Parent is, for a Checksum, the Rel of the file whose digest it is (Rel without
	// Algo.Ext()); ParentKind is that file's kind, Artifact or Metadata, which decides
	// freshness. Both are zero for other kinds.
	Parent     string
	ParentKind Kind

	// Coordinates, best effort: empty where the path does not show them (group-level
	// metadata, files that do not follow the g/a/v/a-v layout, ...). For a Checksum they
	// are the coordinates of its parent.
	GroupID    string // dotted: "org.example". Classify leaves it empty; see GroupPath.
	ArtifactID string
	Version    string // the directory version: "1.0-SNAPSHOT", also for timestamped snapshot files
	// File is the last segment of Rel, always set: "lib-1.2.jar", "lib-1.2.jar.sha1",
	// "maven-metadata.xml". Useful for Content-Disposition.
	File string
	// GroupPath is the group's directory inside Rel ("org/example"), set exactly when
	// GroupID is (by Parse) and, unlike GroupID, never allocated.
	GroupPath string
}

// EntryRel is the path of the cache entry that answers p: Parent for a Checksum
// (sidecars are served from their parent's stored digests), otherwise Rel.
func (p Path) EntryRel() string {
	if p.Kind == Checksum {
		return p.Parent
	}
	return p.Rel
}

// EntryKind is the kind of the cache entry that answers p (Artifact or Metadata); it
// decides which cache validity applies.
func (p Path) EntryKind() Kind {
	if p.Kind == Checksum {
		return p.ParentKind
	}
	return p.Kind
}

// IsMetadata reports whether rel names repository metadata: its last segment is
// exactly "maven-metadata.xml". A checksum of metadata is not metadata (it is a
// Checksum whose ParentKind is Metadata). GitLab's freshness rule is a bare suffix
// match; the two differ only for file names like "x-maven-metadata.xml", which no
// Maven client requests.
func IsMetadata(rel string) bool {
	return rel == MetadataFile || strings.HasSuffix(rel, "/"+MetadataFile)
}

// Parse validates and classifies raw, the part of a download or upload URL after
// /api/v4/virtual_registries/packages/maven/<id>/, exactly as received: one leading
// slash is accepted, percent-encoding is decoded once.
//
// Parse rejects, with an error wrapping ErrInvalid:
//   - an empty path ("Path not present", GitLab's words);
//   - invalid percent-escapes, and an encoded slash (%2F: one segment or two is
//     ambiguous between servers);
//   - after decoding: a path longer than MaxLen, a segment longer than MaxSegmentLen,
//     more than MaxSegments segments, an empty segment (a//b, a trailing slash), a "."
//     or ".." segment (also when written %2e%2e);
//   - after decoding, any byte outside the allowed set below.
//
// Allowed bytes are an allow-list, not a deny-list: ASCII letters and digits and
// - . _ ~ ! $ & ' ( ) + , = @ . That covers what real Maven coordinates and repository
// files use (Maven Central's rules are stricter still), and it is RFC 3986's pchar set
// minus
//   - ':' and '*' (and '"' '<' '>' '|' '?' which pchar lacks anyway): hostile to Windows
//     file systems and clients;
//   - ';': Servlet containers (Jetty, Tomcat: Nexus, Artifactory) strip ";params" from
//     segments, so "a;x/b" and "a/b" could alias upstream and poison the cache;
//   - '%' after decoding (that is, %25): double encoding; Rel must parse to itself.
//
// So also rejected: whitespace, controls and DEL, NUL, backslash (raw or %5C), '#',
// '[' ']' '{' '}' '^' '`' (a path carrying an unresolved "${version}" gets 400, not
// 404), and every non-ASCII byte (no Unicode normalisation or look-alike questions).
// The upshot is that Rel is safe to use unescaped in an upstream URL.
//
// Classification, on the last segment: "maven-metadata.xml" is Metadata; a name ending
// in .sha1, .md5, .sha256 or .sha512 is a Checksum of the same path without that
// extension; anything else is an Artifact (including .asc signatures, Gradle .module
// files and Maven 3.9's .meta/prefixes.txt). A checksum of a checksum
// ("x.jar.sha1.md5") is rejected: no client asks for one and the proxy answers
// sidecars from its parent's stored digests, which a sidecar does not have. So is a
// checksum with no parent name (".sha1").
//
// Coordinates (best effort, never a reason to reject):
//   - artifact g1/g2/a/v/f, when f starts with "a-v" followed by '.', '-' or its end,
//     or for v = "X-SNAPSHOT" with "a-X-yyyyMMdd.HHmmss-N" (a timestamped snapshot):
//     GroupID "g1.g2", ArtifactID "a", Version "v";
//   - g1/g2/a/maven-metadata.xml (artifact level): GroupID "g1.g2", ArtifactID "a";
//   - g1/g2/a/v/maven-metadata.xml where v ends with "SNAPSHOT" (ASCII case-insensitive,
//     Maven's ArtifactUtils.isSnapshot): version level, also Version;
//   - group-level metadata cannot be told from artifact-level metadata by its path. It
//     is recognised for one-directory paths ("g/maven-metadata.xml") and for Maven's
//     default plugin groups (org/apache/maven/plugins, org/codehaus/mojo): GroupID only.
//     Other plugin groups read as artifact-level (group "org.example", artifact "plugins").
func Parse(raw string) (Path, error) {
	p, err := Classify(raw)
	if err != nil {
		return Path{}, err
	}
	// ReplaceAll returns its argument, without a copy, when there is no '/'.
	p.GroupID = strings.ReplaceAll(p.GroupPath, "/", ".")
	return p, nil
}

// Classify is Parse without the dotted GroupID (GroupPath is set): the same checks and
// the same result otherwise, and no allocation for a valid path that needs no
// decoding. It is meant for the download hot path, which needs Rel, Kind and Parent but
// not coordinates.
func Classify(raw string) (Path, error) {
	s := raw
	if len(s) > 0 && s[0] == '/' {
		s = s[1:]
	}
	if strings.IndexByte(s, '%') < 0 {
		if err := validate(s); err != nil {
			return Path{}, err
		}
		return classify(s)
	}
	var buf [MaxLen]byte
	n, err := unescape(&buf, s)
	if err != nil {
		return Path{}, err
	}
	if err := validate(buf[:n]); err != nil {
		return Path{}, err
	}
	return classify(string(buf[:n]))
}

// unescape decodes the percent-escapes of s into buf, once.
func unescape(buf *[MaxLen]byte, s string) (int, error) {
	n := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '%' {
			if i+2 >= len(s) {
				return 0, errBadEscape
			}
			hi, ok1 := unhex(s[i+1])
			lo, ok2 := unhex(s[i+2])
			if !ok1 || !ok2 {
				return 0, errBadEscape
			}
			c = hi<<4 | lo
			if c == '/' {
				return 0, errEncodedSlash
			}
			i += 2
		}
		if n == len(buf) {
			return 0, errTooLong
		}
		buf[n] = c
		n++
	}
	return n, nil
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// validate checks the decoded relative path s (a string, or the decode buffer so that
// a rejected encoded path costs no allocation).
func validate[S ~string | ~[]byte](s S) error {
	n := len(s)
	if n == 0 {
		return errEmpty
	}
	if n > MaxLen {
		return errTooLong
	}
	segs, start := 1, 0
	for i := 0; i < n; i++ {
		if allowed[s[i]] { // one test per byte on the common path
			continue
		}
		if c := s[i]; c != '/' {
			return charErrors[c]
		}
		if err := checkSegment(s, start, i); err != nil {
			return err
		}
		if segs++; segs > MaxSegments {
			return errTooManySegments
		}
		start = i + 1
	}
	return checkSegment(s, start, n)
}

// checkSegment checks the segment s[start:end].
func checkSegment[S ~string | ~[]byte](s S, start, end int) error {
	switch l := end - start; {
	case l == 0:
		return errEmptySegment
	case l > MaxSegmentLen:
		return errSegmentTooLong
	case s[start] == '.' && l == 1:
		return errDot
	case s[start] == '.' && l == 2 && s[start+1] == '.':
		return errDotDot
	}
	return nil
}

// classify fills a Path for rel, which validate accepted.
func classify(rel string) (Path, error) {
	dir, base, _ := cutLast(rel)
	p := Path{Rel: rel, Kind: Artifact, File: base}
	name, kind := base, Artifact
	if a, ext := checksumAlgo(base); a != 0 {
		name = base[:len(base)-len(ext)]
		switch name {
		case "":
			return Path{}, errChecksumNoParent
		case ".":
			return Path{}, errDot
		case "..":
			return Path{}, errDotDot
		}
		if a2, _ := checksumAlgo(name); a2 != 0 {
			return Path{}, errChecksumOfChecksum
		}
		if name == MetadataFile {
			kind = MetadataKind
		}
		p.Kind, p.Algo, p.Parent, p.ParentKind = Checksum, a, rel[:len(rel)-len(ext)], kind
	} else if base == MetadataFile {
		p.Kind, kind = MetadataKind, MetadataKind
	}
	if kind == MetadataKind {
		metadataCoordinates(&p, dir)
	} else {
		artifactCoordinates(&p, dir, name)
	}
	return p, nil
}

// cutLast splits s at its last slash; ok is false, and dir empty, if it has none.
func cutLast(s string) (dir, last string, ok bool) {
	i := strings.LastIndexByte(s, '/')
	if i < 0 {
		return "", s, false
	}
	return s[:i], s[i+1:], true
}

// defaultPluginGroups are the groups Maven reads group-level metadata of without any
// <pluginGroups> setting (plugin prefix resolution).
func isDefaultPluginGroup(dir string) bool {
	return dir == "org/apache/maven/plugins" || dir == "org/codehaus/mojo"
}

// metadataCoordinates fills p from dir, the directory of a maven-metadata.xml.
func metadataCoordinates(p *Path, dir string) {
	if dir == "" {
		return
	}
	rest, last, ok := cutLast(dir)
	if !ok || isDefaultPluginGroup(dir) { // group level
		p.GroupPath = dir
		return
	}
	if isSnapshotVersion(last) {
		if g, a, ok := cutLast(rest); ok { // version level
			p.GroupPath, p.ArtifactID, p.Version = g, a, last
			return
		}
	}
	p.GroupPath, p.ArtifactID = rest, last // artifact level
}

// isSnapshotVersion is Maven's ArtifactUtils.isSnapshot for a base version: it ends
// with "SNAPSHOT", in any case.
func isSnapshotVersion(v string) bool {
	const s = "SNAPSHOT"
	return len(v) >= len(s) && strings.EqualFold(v[len(v)-len(s):], s)
}

// artifactCoordinates fills p when dir/name reads g.../a/v/a-v...
func artifactCoordinates(p *Path, dir, name string) {
	rest, v, ok := cutLast(dir)
	if !ok {
		return
	}
	g, a, ok := cutLast(rest)
	if !ok || !fileMatches(name, a, v) {
		return
	}
	p.GroupPath, p.ArtifactID, p.Version = g, a, v
}

// fileMatches reports whether the file name belongs to artifact a at version v:
// "a-v" or, for a SNAPSHOT version, "a-<v without SNAPSHOT><timestamp>", followed by
// a classifier ("-..."), an extension ("...") or nothing.
func fileMatches(name, a, v string) bool {
	if len(name) <= len(a) || name[:len(a)] != a || name[len(a)] != '-' {
		return false
	}
	rest := name[len(a)+1:]
	if strings.HasPrefix(rest, v) && boundary(rest[len(v):]) {
		return true
	}
	if base, ok := strings.CutSuffix(v, "SNAPSHOT"); ok && strings.HasPrefix(rest, base) {
		return snapshotTimestamp(rest[len(base):])
	}
	return false
}

func boundary(s string) bool {
	return s == "" || s[0] == '.' || s[0] == '-'
}

// snapshotTimestamp reports whether s starts with a unique snapshot version suffix,
// yyyyMMdd.HHmmss-N, followed by a boundary.
func snapshotTimestamp(s string) bool {
	const fixed = len("20060102.150405-")
	if len(s) <= fixed || s[8] != '.' || s[15] != '-' {
		return false
	}
	for i := 0; i < fixed-1; i++ {
		if i != 8 && !isDigit(s[i]) {
			return false
		}
	}
	i := fixed
	for i < len(s) && isDigit(s[i]) {
		i++
	}
	return i > fixed && boundary(s[i:])
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// allowed is the set of bytes a decoded path may contain besides '/'; see Parse.
var allowed = func() (t [256]bool) {
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
	}
	for c := 'A'; c <= 'Z'; c++ {
		t[c] = true
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for _, c := range "-._~!$&'()+,=@" {
		t[c] = true
	}
	return t
}()

// ErrInvalid is wrapped by every error Parse returns. Match it with errors.Is; the
// reason is in the *Error (errors.As).
var ErrInvalid = errors.New("invalid maven path")

// Error is a rejected path, with a short human reason ("path contains a '..'
// segment") fit for a 400 answer. It never quotes the path itself.
type Error struct{ reason string }

func (e *Error) Error() string { return "invalid maven path: " + e.reason }

// Reason is the short human reason, e.g. "Path not present".
func (e *Error) Reason() string { return e.reason }

// Unwrap makes errors.Is(err, ErrInvalid) true.
func (e *Error) Unwrap() error { return ErrInvalid }

// The errors are values made once, so that a rejection allocates nothing either.
var (
	errEmpty              = &Error{"Path not present"}
	errBadEscape          = &Error{"path contains an invalid percent-escape"}
	errEncodedSlash       = &Error{"path contains an encoded slash (%2F)"}
	errTooLong            = &Error{"path is longer than 1024 bytes"}
	errSegmentTooLong     = &Error{"path segment is longer than 255 bytes"}
	errTooManySegments    = &Error{"path has more than 64 segments"}
	errEmptySegment       = &Error{"path contains an empty segment"}
	errDot                = &Error{"path contains a '.' segment"}
	errDotDot             = &Error{"path contains '..'"}
	errChecksumNoParent   = &Error{"checksum file has no parent file name"}
	errChecksumOfChecksum = &Error{"checksum of a checksum file"}
)

// charErrors holds, for every byte not allowed, the error that names it.
var charErrors = func() (t [256]*Error) {
	var (
		nul     = &Error{"path contains NUL"}
		control = &Error{"path contains a control character"}
		space   = &Error{"path contains whitespace"}
		bslash  = &Error{"path contains a backslash"}
		percent = &Error{"path contains an encoded '%' (double encoding)"}
		nonASCI = &Error{"path contains a non-ASCII byte"}
	)
	for c := range t {
		switch {
		case allowed[c] || c == '/':
		case c == 0:
			t[c] = nul
		case c < 0x20 || c == 0x7f:
			t[c] = control
		case c == ' ':
			t[c] = space
		case c == '\\':
			t[c] = bslash
		case c == '%':
			t[c] = percent
		case c >= 0x80:
			t[c] = nonASCI
		default:
			t[c] = &Error{"path contains a disallowed character '" + string(rune(c)) + "'"}
		}
	}
	return t
}()
