package itest

import (
	"bytes"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// streamThreshold mirrors the proxy's memBodyMax: an upstream body of at
// most this many bytes (by its Content-Length) is read whole and checked
// before registryd answers, so a refusal sends the same request on to the
// next upstream; a larger one is streamed to the client while it is hashed,
// and a refusal at its end can only cut the client's transfer short.
const streamThreshold = 16 << 10

// smallJarCandidates are artifacts (group path / artifact) whose jars
// `mvn package` of the test project needs (plugin dependencies of
// maven-compiler-plugin and of Maven's plexus container) and which are small
// enough to be read whole by registryd. The first one present in the
// fixture with every jar of at most streamThreshold bytes is used.
var smallJarCandidates = []string{
	"org/codehaus/plexus/plexus-compiler-manager",
	"org/codehaus/plexus/plexus-component-annotations",
	"javax/inject/javax.inject",
	"org/apache/maven/plugin-tools/maven-plugin-annotations",
}

// TestRealMavenChecksumHeaders runs a real `mvn -B -C package` (strict
// checksums) through registryd whose first upstream is a Central-like
// mirror that lies about one jar the build needs: it sends damaged bytes
// under the X-Checksum-Sha1 / X-Checksum-Md5 headers of the real jar, as a
// corrupted mirror does. The second upstream is an honest Central-like
// server. registryd must refuse the lie (no cache entry under the liar,
// refusals_total{reason="checksum_mismatch"} counted), get the jar from the
// honest upstream, and the build must succeed with the real bytes.
//
// Why the two cases are what they are: Maven 3.8.7 (wagon-http, resolver
// 1.6) does NOT retry a download whose body ends short: the build fails at
// once with "Premature end of Content-Length delimited message body"
// (tried here by hand against a server that cut junit's jar once). It does
// not cache that transfer error in its local repository, so the next run of
// the build asks again.
//
//   - "small jar": the lie is about a jar of at most 16 KiB. registryd reads
//     such a body whole and checks it before answering, so the refused
//     answer never reaches Maven: the same request goes on to the honest
//     upstream and ONE build succeeds. This is the deterministic check of
//     the whole path with the real client.
//   - "large jar": the lie is about junit's jar (hundreds of KiB), which
//     registryd streams. Its checksum can only fail at the end, so the
//     first build's transfer is cut short and, Maven not retrying, that
//     build fails naming the jar. The retry a user or CI makes, a second
//     build on the same local repository a few seconds later, must reach the
//     honest upstream: for a minute registryd skips the liar for that file.
//     (Should registryd ever buffer such a body instead of streaming it, the
//     first build succeeds, which is also right; the test then says so.)
//
// Nothing leaves loopback: mvn gets a dead proxy for every other host.
func TestRealMavenChecksumHeaders(t *testing.T) {
	if testing.Short() {
		t.Skip("real-client builds take minutes; skipped with -short")
	}
	requireTools(t, "mvn")
	fx := sharedMavenFixture(t)

	t.Run("small jar", func(t *testing.T) {
		jars := smallJars(t, fx)
		w := newLyingMirrorWorld(t, fx)
		for _, rel := range jars {
			w.liar.Lie(rel, repoLie{Body: tamper(t, fx, rel)})
		}
		local := mavenBuild(t, fx, w.access)

		// Of the candidate artifact's versions, the build needed one.
		var rel string
		for _, r := range w.liar.Requests() {
			if r.Lied && r.Method == "GET" {
				rel = r.Path
			}
		}
		if rel == "" {
			t.Fatalf("the build asked the lying upstream for none of %v, so the test proved nothing; "+
				"choose another small jar the build needs (smallJarCandidates). It saw:\n%s",
				jars, formatRequests(w.liar.Requests()))
		}
		t.Logf("the lying upstream sent damaged bytes of %s under the real jar's checksum headers", rel)
		w.check(t, fx, local, rel)
		// The refusal happened inside the one request: the liar was asked once.
		if n := countGets(w.liar.Requests(), rel); n != 1 {
			t.Errorf("the lying upstream got %d GETs of %s, want 1", n, rel)
		}
		// Everything else came from the first upstream, as its position says.
		cacheEntry(t, w.d, w.liarID, libFile(fx, "CommonsLang3", ".jar"))
	})

	t.Run("large jar", func(t *testing.T) {
		rel := libFile(fx, "JUnit", ".jar")
		body := tamper(t, fx, rel)
		if len(body) <= streamThreshold {
			t.Fatalf("%s has %d bytes; this case needs a jar above %d bytes, which registryd streams", rel, len(body), streamThreshold)
		}
		w := newLyingMirrorWorld(t, fx)
		w.liar.Lie(rel, repoLie{Body: body})
		local := filepath.Join(t.TempDir(), "m2-repository")
		out, err := mavenRun(t, fx, w.access, local)
		if err == nil {
			t.Logf("the first build succeeded: registryd did not stream the refused body of %s", rel)
		} else {
			coords := "junit:junit:jar:" + fx.Versions["JUnit"]
			if !strings.Contains(out, coords) {
				t.Fatalf("the first build failed (%v), but not on %s, the jar cut short:\n%s", err, coords, lastLines(out, 80))
			}
			t.Logf("the first build failed on the cut transfer, as Maven 3.8 does not retry: %s", failureLine(out, coords))
			// The retry: the same local repository, at once.
			out, err = mavenRun(t, fx, w.access, local)
			if err != nil {
				t.Fatalf("the second build, which must reach the honest upstream, failed: %v\n%s", err, lastLines(out, 80))
			}
		}
		w.check(t, fx, local, rel)
		// The second build did not ask the liar again: it is skipped for
		// that file for a minute after the refusal.
		if n := countGets(w.liar.Requests(), rel); n != 1 {
			t.Errorf("the lying upstream got %d GETs of %s, want 1 (the refusal must keep the retry away from it)", n, rel)
		}
	})
}

// lyingMirrorWorld is a registryd whose registry has two Central-like
// upstreams of the fixture: liar first, honest second.
type lyingMirrorWorld struct {
	d                *Daemon
	liar, honest     *repoServer
	liarID, honestID int64
	access           mavenRepoAccess
}

func newLyingMirrorWorld(t *testing.T, fx *mavenFixture) *lyingMirrorWorld {
	t.Helper()
	w := &lyingMirrorWorld{liar: serveCentralRepo(t, fx.Root), honest: serveCentralRepo(t, fx.Root)}
	w.d = Start(t, nil)
	f := w.d.Fix(t)
	group := f.Group("builds", 0, "private")
	registry := f.Registry(group, "maven")
	w.liarID = f.Upstream(registry, w.liar.URL, map[string]any{"name": "corrupted mirror"})
	w.honestID = f.Upstream(registry, w.honest.URL, map[string]any{"name": "central"})
	uid, token := f.User("builder", false, "read_virtual_registry")
	f.Member(group, uid, 10)
	w.access = mavenRepoAccess{
		URL:      w.d.Proxy + "/api/v4/virtual_registries/packages/maven/" + itoa(registry),
		Username: "builder", Password: token,
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the lying upstream saw %d requests (last 40):\n%s", w.liar.Count(), lastLines(formatRequests(w.liar.Requests()), 40))
			t.Logf("the honest upstream saw %d requests (last 40):\n%s", w.honest.Count(), lastLines(formatRequests(w.honest.Requests()), 40))
			t.Logf("registryd's log (last 60 lines):\n%s", lastLines(w.d.Logs(), 60))
		}
	})
	return w
}

// check asserts what a build through the world must leave behind for rel,
// the jar the liar lied about: the real bytes in the client's local
// repository, no cache entry under the liar, one with the real digests
// under the honest upstream, and the refusal counted.
func (w *lyingMirrorWorld) check(t *testing.T, fx *mavenFixture, local, rel string) {
	t.Helper()
	want, err := os.ReadFile(filepath.Join(fx.Root, filepath.FromSlash(rel)))
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(local, filepath.FromSlash(rel)))
	if err != nil {
		t.Fatalf("the build's local repository lacks %s: %v", rel, err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s in the build's local repository (%d bytes) is not the real jar (%d bytes)", rel, len(got), len(want))
	}
	if !w.served(w.liar, rel, true) {
		t.Errorf("the lying upstream never served its lie for %s", rel)
	}
	if !w.served(w.honest, rel, false) {
		t.Errorf("the honest upstream never served %s", rel)
	}
	if es := cacheEntriesAt(t, w.d, w.liarID, rel); len(es) != 0 {
		t.Errorf("registryd cached the refused answer of the lying upstream for %s: %v", rel, es)
	}
	sha1, err := os.ReadFile(filepath.Join(fx.Root, filepath.FromSlash(rel)+".sha1"))
	if err != nil {
		t.Fatal(err)
	}
	if e := cacheEntry(t, w.d, w.honestID, rel); e["file_sha1"] != string(sha1) {
		t.Errorf("the honest upstream's cache entry of %s = %v; want file_sha1 %s", rel, e, sha1)
	}
	if n := refusals(t, w.d, w.liarID, "checksum_mismatch"); n < 1 {
		t.Errorf("refusals_total of the lying upstream for checksum_mismatch = %v, want >= 1", n)
	}
	if n := refusals(t, w.d, w.honestID, "checksum_mismatch"); n != 0 {
		t.Errorf("refusals_total of the honest upstream for checksum_mismatch = %v, want 0", n)
	}
}

// served reports whether s answered a GET of rel with 200 and, as lied says,
// its lie or the truth.
func (w *lyingMirrorWorld) served(s *repoServer, rel string, lied bool) bool {
	for _, r := range s.Requests() {
		if r.Method == "GET" && r.Path == rel && r.Status == 200 && r.Lied == lied {
			return true
		}
	}
	return false
}

// smallJars are the jars of the first of smallJarCandidates that the
// fixture has, every version of it, each at most streamThreshold bytes.
func smallJars(t *testing.T, fx *mavenFixture) []string {
	t.Helper()
	for _, c := range smallJarCandidates {
		matches, _ := filepath.Glob(filepath.Join(fx.Root, filepath.FromSlash(c), "*", "*.jar"))
		var jars []string
		for _, m := range matches {
			fi, err := os.Stat(m)
			if err != nil || fi.Size() > streamThreshold {
				jars = nil
				break
			}
			rel, _ := filepath.Rel(fx.Root, m)
			jars = append(jars, "/"+filepath.ToSlash(rel))
		}
		if len(jars) > 0 {
			return jars
		}
	}
	t.Fatalf("the fixture has no jar of %v of at most %d bytes; choose another small jar the build needs", smallJarCandidates, streamThreshold)
	return nil
}

// tamper is the fixture's file rel with one byte in its middle changed: the
// same length (so the same size class for registryd), other digests.
func tamper(t *testing.T, fx *mavenFixture, rel string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(fx.Root, filepath.FromSlash(rel)))
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0xff
	return b
}

func countGets(reqs []repoRequest, rel string) int {
	n := 0
	for _, r := range reqs {
		if r.Method == "GET" && r.Path == rel {
			n++
		}
	}
	return n
}

// cacheEntriesAt lists the upstream's cache entries whose relative path is
// exactly rel, through the admin API.
func cacheEntriesAt(t *testing.T, d *Daemon, upstream int64, rel string) []map[string]any {
	t.Helper()
	var entries, exact []map[string]any
	d.Do("GET", fmt.Sprintf("/virtual_registries/packages/maven/upstreams/%d/cache_entries?search=%s", upstream,
		url.QueryEscape(rel)), rootToken, nil).Expect(t, 200).JSON(t, &entries)
	for _, e := range entries {
		if e["relative_path"] == rel {
			exact = append(exact, e)
		}
	}
	return exact
}

// failureLine is the first line of mvn's output that names coords, for the
// log.
func failureLine(out, coords string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, coords) && strings.Contains(l, "ERROR") {
			return strings.TrimSpace(l)
		}
	}
	return "(no ERROR line names " + coords + ")"
}
