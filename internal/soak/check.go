package soak

import (
	"bytes"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// kind is what a request of the load asks for.
type kind uint8

const (
	kHit         kind = iota // GET of a hot jar (a hit, or a refill after a purge or an eviction)
	kHead                    // HEAD of a hot jar
	kMiss                    // GET of a jar nobody asked for before
	kSidecar                 // GET of the .sha1 of the jar just missed (Maven's order)
	kMeta                    // GET of a merged maven-metadata.xml
	kMetaSidecar             // GET of its .sha1
	kDenied                  // GET of a jar every upstream's rules refuse: 403
)

// Latency classes, reported by window.
const (
	cHit = iota
	cSidecar
	cMeta
	cMiss
	cDenied
	cAdmin
	nClasses
)

var classNames = [nClasses]string{"hit", "sidecar_head", "metadata", "miss", "denied", "admin_write"}

func (k kind) class() int {
	switch k {
	case kHit:
		return cHit
	case kHead, kSidecar:
		return cSidecar
	case kMeta, kMetaSidecar:
		return cMeta
	case kMiss:
		return cMiss
	}
	return cDenied
}

// verdict is what the checker made of one answer.
type verdict uint8

const (
	vOK         verdict = iota
	vWrong              // an answer a client would take for the truth and that is not
	vIncomplete         // merged metadata missing an upstream's versions, flagged partial
	v5xx                // the server failed (counted apart from wrong answers)
	vRefused            // another 4xx (429 …): not an answer about the file
)

// checker knows the right answer to every request of the load.
type checker struct {
	mu sync.Mutex
	// metaSums holds, per metadata path, the SHA-1s of the documents
	// served for it: a .sha1 must name one of them (the documents are
	// deterministic, so normally one).
	metaSums map[string]map[string]bool
}

func newChecker() *checker { return &checker{metaSums: map[string]map[string]bool{}} }

func (c *checker) sawMeta(path, sum string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.metaSums[path]
	if s == nil {
		s = map[string]bool{}
		c.metaSums[path] = s
	}
	s[sum] = true
}

func (c *checker) knownMeta(path, sum string) (known, any bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.metaSums[path]
	return s[sum], len(s) > 0
}

// check judges one answer; the string says what was wrong.
func (c *checker) check(k kind, path string, status int, h http.Header, body []byte) (verdict, string) {
	want := http.StatusOK
	if k == kDenied {
		want = http.StatusForbidden
	}
	switch {
	case status >= 500:
		return v5xx, fmt.Sprintf("%d for %s", status, path)
	case status == want:
	case status == http.StatusForbidden || status == http.StatusNotFound || status == http.StatusOK ||
		status/100 == 3 || status/100 == 1:
		// A claim about the file (absent, refused, or served) that is
		// not the truth.
		return vWrong, fmt.Sprintf("%d for %s, want %d", status, path, want)
	default:
		return vRefused, fmt.Sprintf("%d for %s", status, path)
	}
	switch k {
	case kHit, kMiss:
		return c.checkJar(path, h, body, false)
	case kHead:
		return c.checkJar(path, h, body, true)
	case kSidecar:
		return c.checkJarSidecar(path, body)
	case kMeta:
		return c.checkMeta(path, h, body)
	case kMetaSidecar:
		return c.checkMetaSidecar(path, body)
	}
	return vOK, ""
}

func (c *checker) checkJar(path string, h http.Header, body []byte, head bool) (verdict, string) {
	up := expectedUpstream(path)
	want := content(up, path)
	s := sha1.Sum(want)
	sum := hex.EncodeToString(s[:])
	if head {
		if cl := h.Get("Content-Length"); cl != strconv.Itoa(len(want)) {
			return vWrong, fmt.Sprintf("HEAD %s: Content-Length %q, want %d", path, cl, len(want))
		}
	} else if !bytes.Equal(body, want) {
		return vWrong, fmt.Sprintf("%s: %d bytes not %s's (%d bytes)%s", path, len(body), up, len(want), whose(body))
	}
	// Every 200 of a file carries X-Checksum-Sha1 when its upstream
	// offered one (api.md, "Checksum headers of a download"); ours always do.
	if got := h.Get("X-Checksum-Sha1"); got != sum {
		return vWrong, fmt.Sprintf("%s: X-Checksum-Sha1 %q, want %s", path, got, sum)
	}
	return vOK, ""
}

// whose names the upstream and path a wrong jar body says it is.
func whose(body []byte) string {
	line, _, _ := bytes.Cut(body[:min(len(body), 300)], []byte("\n"))
	if rest, ok := bytes.CutPrefix(line, []byte("registryd soak ")); ok {
		return fmt.Sprintf(" (it is %s)", rest)
	}
	return ""
}

func (c *checker) checkJarSidecar(sidecar string, body []byte) (verdict, string) {
	path, _ := splitSidecar(sidecar)
	s := sha1.Sum(content(expectedUpstream(path), path))
	if got := strings.TrimSpace(string(body)); got != hex.EncodeToString(s[:]) {
		return vWrong, fmt.Sprintf("%s: %q is not the jar's SHA-1", sidecar, truncate(got))
	}
	return vOK, ""
}

func (c *checker) checkMeta(path string, h http.Header, body []byte) (verdict, string) {
	artifact, _ := metaArtifact(path)
	if g := element(body, "groupId"); g != metaGroupID {
		return vWrong, fmt.Sprintf("%s: groupId %q", path, truncate(g))
	}
	if a := element(body, "artifactId"); a != artifact {
		return vWrong, fmt.Sprintf("%s: artifactId %q, want %q", path, truncate(a), artifact)
	}
	s := sha1.Sum(body)
	sum := hex.EncodeToString(s[:])
	if got := h.Get("X-Checksum-Sha1"); got != sum {
		return vWrong, fmt.Sprintf("%s: X-Checksum-Sha1 %q is not the body's %s", path, got, sum)
	}
	got, want := versions(body), mergedVersions(artifact)
	if slices.Equal(got, want) {
		c.sawMeta(path, sum)
		return vOK, ""
	}
	if merge := h.Get("X-Registryd-Merge"); merge != "complete" && isSubsequence(got, want) && len(got) > 0 {
		// An upstream failed (partial), or registryd believed one had
		// no document (a single upstream's bytes): incomplete, not false.
		c.sawMeta(path, sum)
		return vIncomplete, fmt.Sprintf("%s: %d of %d versions (X-Registryd-Merge %q)", path, len(got), len(want), merge)
	}
	return vWrong, fmt.Sprintf("%s: versions %s, want %s", path, truncate(strings.Join(got, ",")), strings.Join(want, ","))
}

func (c *checker) checkMetaSidecar(sidecar string, body []byte) (verdict, string) {
	path, _ := splitSidecar(sidecar)
	got := strings.TrimSpace(string(body))
	known, any := c.knownMeta(path, got)
	switch {
	case known:
		return vOK, ""
	case !any:
		// No document of that path was seen yet: nothing to compare
		// with. Only possible if its warm-up failed, which is reported.
		return vOK, ""
	}
	return vWrong, fmt.Sprintf("%s: %q is the SHA-1 of no document served for it", sidecar, truncate(got))
}

// element is the text of the first <name> element of an XML document
// (enough for the flat metadata documents of the soak; a full parse would
// cost the load generator more than the daemon).
func element(doc []byte, name string) string {
	open, end := []byte("<"+name+">"), []byte("</"+name+">")
	i := bytes.Index(doc, open)
	if i < 0 {
		return ""
	}
	rest := doc[i+len(open):]
	j := bytes.Index(rest, end)
	if j < 0 {
		return ""
	}
	return strings.TrimSpace(string(rest[:j]))
}

func versions(doc []byte) []string {
	block := element(doc, "versions")
	var out []string
	for {
		i := strings.Index(block, "<version>")
		if i < 0 {
			return out
		}
		block = block[i+len("<version>"):]
		j := strings.Index(block, "</version>")
		if j < 0 {
			return append(out, "<unterminated>")
		}
		out = append(out, strings.TrimSpace(block[:j]))
		block = block[j+len("</version>"):]
	}
}

func isSubsequence(sub, of []string) bool {
	i := 0
	for _, v := range of {
		if i < len(sub) && sub[i] == v {
			i++
		}
	}
	return i == len(sub)
}

func truncate(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}
