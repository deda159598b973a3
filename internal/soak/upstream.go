package soak

import (
	"crypto/md5"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
)

// The soak's two upstreams are fake Maven repositories whose every file is
// a pure function of (upstream, path): the checker recomputes what a right
// answer is instead of remembering what was served, so a run of millions of
// requests needs no table of expected bodies, and a body from the wrong
// upstream (a rule not applied) differs from the right one.
//
//   - central (position 1) has every jar under org/soak/ and the artifact
//     metadata of org/soak/meta/a<k>;
//   - vendor (position 2) has the jars of org/soak/vendor/ and
//     org/soak/internal/, and its own metadata of org/soak/meta/a<k> (other
//     versions, so that the merge has something to merge).
//
// Rules (set up by setup): central denies group org.soak.vendor* and
// org.soak.internal*, vendor allows org.soak.* and denies org.soak.internal*.
// So a vendor jar must come from vendor, an internal jar is refused (403),
// and everything else comes from central.
const (
	central = "central"
	vendor  = "vendor"

	libGroup      = "org/soak/lib"      // hot files, central
	missGroup     = "org/soak/miss"     // unique misses, central
	vendorGroup   = "org/soak/vendor"   // hot files and misses, vendor only (central denied by a rule)
	internalGroup = "org/soak/internal" // denied on both upstreams: 403
	metaGroup     = "org/soak/meta"     // merged maven-metadata.xml
	metaGroupID   = "org.soak.meta"
	smallMax      = 16 << 10 // registryd's small-body bound: read whole, answered at once, stored later
	largeMax      = 128 << 10
)

// fakeUpstream is one of the two repositories, an httptest server counting
// its requests.
type fakeUpstream struct {
	name     string
	srv      *httptest.Server
	URL      string // …/maven2
	requests atomic.Int64
	notFound atomic.Int64
}

func startUpstream(name string) *fakeUpstream {
	u := &fakeUpstream{name: name}
	u.srv = httptest.NewServer(http.HandlerFunc(u.serve))
	u.URL = u.srv.URL + "/maven2"
	return u
}

func (u *fakeUpstream) close() { u.srv.Close() }

func (u *fakeUpstream) serve(w http.ResponseWriter, r *http.Request) {
	u.requests.Add(1)
	path, ok := strings.CutPrefix(r.URL.Path, "/maven2/")
	if !ok || (r.Method != http.MethodGet && r.Method != http.MethodHead) {
		u.notFound.Add(1)
		http.NotFound(w, r)
		return
	}
	// registryd answers sidecars from its own digests and never asks for
	// them; serve them anyway, as a repository would.
	base, algo := splitSidecar(path)
	body, ctype, ok := u.file(base)
	if !ok {
		u.notFound.Add(1)
		http.NotFound(w, r)
		return
	}
	s1 := sha1.Sum(body)
	sum := hex.EncodeToString(s1[:])
	if algo != "" {
		body, ctype = []byte(digest(body, algo)), "text/plain"
	} else {
		m5 := md5.Sum(body)
		w.Header().Set("X-Checksum-Sha1", sum)
		w.Header().Set("X-Checksum-Md5", hex.EncodeToString(m5[:]))
		etag := `"` + sum + `"`
		w.Header().Set("ETag", etag)
		if r.Header.Get("If-None-Match") == etag {
			w.WriteHeader(http.StatusNotModified)
			return
		}
	}
	w.Header().Set("Content-Type", ctype)
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	if r.Method == http.MethodHead {
		return
	}
	_, _ = w.Write(body)
}

// file is what this upstream serves at path (no sidecar suffix).
func (u *fakeUpstream) file(path string) ([]byte, string, bool) {
	if strings.HasSuffix(path, "/maven-metadata.xml") {
		a, ok := metaArtifact(path)
		if !ok {
			return nil, "", false
		}
		return metadataDoc(u.name, a), "application/xml", true
	}
	if !strings.HasSuffix(path, ".jar") {
		return nil, "", false
	}
	if !hasAnyPrefix(path, u.groups()...) {
		return nil, "", false
	}
	return content(u.name, path), "application/java-archive", true
}

func (u *fakeUpstream) groups() []string {
	if u.name == central {
		return []string{libGroup + "/", missGroup + "/", vendorGroup + "/", internalGroup + "/"}
	}
	return []string{vendorGroup + "/", internalGroup + "/"}
}

// expectedUpstream is the upstream whose bytes a right answer for the jar
// at path carries, "" when the rules refuse it everywhere (403).
func expectedUpstream(path string) string {
	switch {
	case strings.HasPrefix(path, internalGroup+"/"):
		return ""
	case strings.HasPrefix(path, vendorGroup+"/"):
		return vendor
	}
	return central
}

func hasAnyPrefix(s string, prefixes ...string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// fileSize is the length of the jar at path: hot files are small (served
// whole, stored after the answer: the path whose store backlog the issue
// is about); a fifth of the misses are larger, streamed fills.
func fileSize(path string, small bool) int {
	h := hash64(path)
	if !small && h%5 == 0 {
		return smallMax + int((h>>8)%(largeMax-smallMax))
	}
	return 1<<10 + int((h>>8)%(smallMax-1<<10))
}

// Paths of the jars: hot files h<i> (central) and v<i> (vendor), unique
// misses m<n> (central) and x<n> (vendor), refused files d<i>.
func hotPath(i int) string {
	if i%10 == 9 {
		return fmt.Sprintf("%s/v%d/1.0/v%d-1.0.jar", vendorGroup, i, i)
	}
	return fmt.Sprintf("%s/h%d/1.0/h%d-1.0.jar", libGroup, i, i)
}

func missPath(tag string, n int64) string {
	if n%10 == 9 {
		return fmt.Sprintf("%s/x%s%d/1.0/x%s%d-1.0.jar", vendorGroup, tag, n, tag, n)
	}
	return fmt.Sprintf("%s/m%s%d/1.0/m%s%d-1.0.jar", missGroup, tag, n, tag, n)
}

func deniedPath(i int) string { return fmt.Sprintf("%s/d%d/1.0/d%d-1.0.jar", internalGroup, i, i) }

func isMissPath(path string) bool {
	return strings.HasPrefix(path, missGroup+"/") || strings.HasPrefix(path, vendorGroup+"/x")
}

// content is the jar at path as upstream serves it: a line naming both,
// then bytes of an xorshift stream seeded by them.
func content(upstream, path string) []byte {
	size := fileSize(path, !isMissPath(path))
	b := make([]byte, size)
	n := copy(b, "registryd soak "+upstream+" "+path+"\n")
	x := hash64(upstream + "\x00" + path)
	if x == 0 {
		x = 1
	}
	for i := n; i < size; i += 8 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], x)
		copy(b[i:], w[:])
	}
	return b
}

func hash64(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}

// Metadata: artifact a<k> of org.soak.meta has versions 1.0.0 … on central
// and 2.0.0 … on vendor; vendor's document is the newer (lastUpdated), so
// the merge's latest and release are vendor's whatever the positions.
func metaPath(k int) string { return fmt.Sprintf("%s/a%d/maven-metadata.xml", metaGroup, k) }

func metaArtifact(path string) (string, bool) {
	rest, ok := strings.CutPrefix(path, metaGroup+"/")
	if !ok {
		return "", false
	}
	a, ok := strings.CutSuffix(rest, "/maven-metadata.xml")
	if !ok || strings.Contains(a, "/") || !strings.HasPrefix(a, "a") {
		return "", false
	}
	if _, err := strconv.Atoi(a[1:]); err != nil {
		return "", false
	}
	return a, true
}

func upstreamVersions(upstream, artifact string) []string {
	k, _ := strconv.Atoi(artifact[1:])
	n, major := 3+k%17, 1
	if upstream == vendor {
		n, major = 2+k%11, 2
	}
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%d.0.%d", major, i)
	}
	return out
}

// mergedVersions is the version list of a complete merge: central's then
// vendor's, which is Maven's order too.
func mergedVersions(artifact string) []string {
	return append(upstreamVersions(central, artifact), upstreamVersions(vendor, artifact)...)
}

func metadataDoc(upstream, artifact string) []byte {
	vs := upstreamVersions(upstream, artifact)
	updated := "20260101000000"
	if upstream == vendor {
		updated = "20260102000000"
	}
	var b strings.Builder
	b.WriteString("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<metadata>\n")
	fmt.Fprintf(&b, "  <groupId>%s</groupId>\n  <artifactId>%s</artifactId>\n  <versioning>\n", metaGroupID, artifact)
	fmt.Fprintf(&b, "    <latest>%s</latest>\n    <release>%s</release>\n    <versions>\n", vs[len(vs)-1], vs[len(vs)-1])
	for _, v := range vs {
		fmt.Fprintf(&b, "      <version>%s</version>\n", v)
	}
	fmt.Fprintf(&b, "    </versions>\n    <lastUpdated>%s</lastUpdated>\n  </versioning>\n</metadata>\n", updated)
	return []byte(b.String())
}

// splitSidecar splits "x.jar.sha1" into "x.jar" and "sha1".
func splitSidecar(path string) (string, string) {
	for _, algo := range []string{"sha1", "md5", "sha256", "sha512"} {
		if base, ok := strings.CutSuffix(path, "."+algo); ok {
			return base, algo
		}
	}
	return path, ""
}

func digest(body []byte, algo string) string {
	switch algo {
	case "md5":
		s := md5.Sum(body)
		return hex.EncodeToString(s[:])
	case "sha1":
		s := sha1.Sum(body)
		return hex.EncodeToString(s[:])
	case "sha256":
		s := sha256.Sum256(body)
		return hex.EncodeToString(s[:])
	case "sha512":
		s := sha512.Sum512(body)
		return hex.EncodeToString(s[:])
	}
	panic("soak: digest " + algo)
}
