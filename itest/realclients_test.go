package itest

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRealClients builds a small project with real Maven and Gradle through
// registryd. The upstream is Debian's /usr/share/maven-repo, copied with
// checksums and metadata and served on loopback: for Maven by a Central-like
// server (X-Checksum-Sha1 / X-Checksum-Md5 on every file, which registryd
// verifies before caching), for Gradle by a plain static one (no checksum
// headers: registryd has nothing to check and streams the misses as they
// come). For each client:
//
//   - "static upstream": the client builds straight against the fixture. It
//     proves the fixture (and the project), so a failure of the next leg is
//     registryd's.
//   - "through registryd": the client builds through registryd's proxy URL
//     with a token, then builds again with an empty local cache: the second
//     build must be served entirely from registryd's cache, which the fake
//     upstream proves by seeing no request at all.
//
// Nothing leaves loopback: the clients get a dead proxy for every other host.
func TestRealClients(t *testing.T) {
	if testing.Short() {
		t.Skip("real-client builds take minutes; skipped with -short")
	}
	requireTools(t)
	fx := sharedMavenFixture(t)
	t.Logf("fixture: %d files from %s, versions %v", fx.Files, debianMavenRepo, fx.Versions)

	clients := []struct {
		name  string
		tool  string
		build func(t *testing.T, fx *mavenFixture, repo mavenRepoAccess) string
		// sends is what the client fetches of an artifact (Gradle asks for no checksums).
		sends []string
		// serve starts the upstream, the same kind for both legs. (Maven
		// 3.8 ignores the checksum headers and still fetches the .sha1.)
		serve func(t *testing.T, root string) *repoServer
	}{
		{"maven", "mvn", mavenBuild, []string{".pom", ".pom.sha1", ".jar", ".jar.sha1"}, serveCentralRepo},
		{"gradle", "gradle", gradleBuild, []string{".pom", ".jar"}, serveRepo},
	}
	for _, c := range clients {
		t.Run(c.name, func(t *testing.T) {
			requireTools(t, c.tool)
			fixtureOK := t.Run("static upstream", func(t *testing.T) {
				repo := c.serve(t, fx.Root)
				c.build(t, fx, mavenRepoAccess{URL: repo.URL})
				reqs := repo.Requests()
				assertFetched(t, fx, reqs, c.sends)
				t.Logf("%d requests to the static upstream; those not answered 200:\n%s", len(reqs), formatRequests(notOKRequests(reqs)))
			})
			if !fixtureOK {
				t.Fatal("the build against the static upstream failed, so the fixture or the project is broken; " +
					"a build through registryd would prove nothing")
			}
			t.Run("through registryd", func(t *testing.T) {
				testClientThroughRegistryd(t, fx, c.serve(t, fx.Root), c.build, c.sends)
			})
		})
	}
}

// testClientThroughRegistryd runs two builds through a fresh registryd whose
// one upstream is repo, serving the fixture.
func testClientThroughRegistryd(t *testing.T, fx *mavenFixture, repo *repoServer,
	build func(*testing.T, *mavenFixture, mavenRepoAccess) string, sends []string) {
	d := Start(t, nil)
	f := d.Fix(t)
	group := f.Group("builds", 0, "private")
	registry := f.Registry(group, "maven")
	upstream := f.Upstream(registry, repo.URL, nil)
	// The least a build machine needs: a guest with a download-only token.
	uid, token := f.User("builder", false, "read_virtual_registry")
	f.Member(group, uid, 10)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the upstream saw %d requests (last 60):\n%s", repo.Count(), lastLines(formatRequests(repo.Requests()), 60))
			t.Logf("registryd's log (last 60 lines):\n%s", lastLines(d.Logs(), 60))
		}
	})
	access := mavenRepoAccess{
		URL:      d.Proxy + "/api/v4/virtual_registries/packages/maven/" + itoa(registry),
		Username: "builder", Password: token,
	}
	// The build tools send it as Basic credentials.
	registerSecret("builder's Basic credentials", base64.StdEncoding.EncodeToString([]byte("builder:"+token)))

	// Cold: registryd fetches everything from the upstream.
	first := build(t, fx, access)
	fetched := repo.Requests()
	assertFetched(t, fx, fetched, onlyArtifacts(sends))
	for _, r := range fetched {
		if strings.HasSuffix(r.Path, ".sha1") || strings.HasSuffix(r.Path, ".md5") {
			t.Errorf("registryd asked the upstream for a checksum (%s); sidecars come from the stored digests", r)
		}
	}
	assertSameBytes(t, fx, first)
	assertCacheEntries(t, d, fx, upstream)
	// An honest upstream: whatever checksums it offered, every body matched.
	if n := refusals(t, d, upstream, "checksum_mismatch"); n != 0 {
		t.Errorf("registryd refused %v answers of an honest upstream as checksum mismatches", n)
	}
	t.Logf("first build: registryd made %d requests to the upstream (%d not answered 200)", len(fetched), len(notOKRequests(fetched)))

	// Warm: a new machine (empty local repository) builds again.
	second := build(t, fx, access)
	if extra := repo.Requests()[len(fetched):]; len(extra) > 0 {
		t.Fatalf("the second build reached the upstream %d times; it must be served from registryd's cache:\n%s",
			len(extra), formatRequests(extra))
	}
	assertSameBytes(t, fx, second)

	// A clean stop flushes the download counters: both builds counted.
	d.Restart()
	for _, lib := range realClientLibs {
		rel := libFile(fx, lib.key, ".jar")
		e := cacheEntry(t, d, upstream, rel)
		if n, _ := e["downloads_count"].(float64); n < 2 || e["downloaded_at"] == nil {
			t.Errorf("after two builds the entry of %s has downloads_count %v, downloaded_at %v; want at least 2 and a time",
				rel, e["downloads_count"], e["downloaded_at"])
		}
	}
}

func notOKRequests(reqs []repoRequest) []repoRequest {
	var out []repoRequest
	for _, r := range reqs {
		if r.Status != 200 {
			out = append(out, r)
		}
	}
	return out
}

// onlyArtifacts drops the checksum files from sends: registryd answers
// those from its stored digests, so the upstream never sees them.
func onlyArtifacts(sends []string) []string {
	var out []string
	for _, s := range sends {
		if !strings.HasSuffix(s, ".sha1") && !strings.HasSuffix(s, ".md5") {
			out = append(out, s)
		}
	}
	return out
}

// libFile is the repository path of a library's file with the given suffix
// (".pom", ".jar.sha1", ...).
func libFile(fx *mavenFixture, key, suffix string) string {
	for _, lib := range realClientLibs {
		if lib.key == key {
			v := fx.Versions[key]
			return "/" + lib.group + "/" + lib.artifact + "/" + v + "/" + lib.artifact + "-" + v + suffix
		}
	}
	panic("unknown library " + key)
}

// assertFetched checks that the upstream answered 200 to a GET of each of
// the realClientLibs' files with the given suffixes: the build really resolved
// the project's dependencies from it.
func assertFetched(t *testing.T, fx *mavenFixture, reqs []repoRequest, suffixes []string) {
	t.Helper()
	got := map[string]bool{}
	for _, r := range reqs {
		if r.Method == "GET" && r.Status == 200 {
			got[r.Path] = true
		}
	}
	for _, lib := range realClientLibs {
		for _, s := range suffixes {
			p := libFile(fx, lib.key, s)
			if !got[p] {
				t.Errorf("the upstream served no GET %s; it saw:\n%s", p, formatRequests(reqs))
			}
		}
	}
}

// assertSameBytes finds each library jar in a client's cache and compares
// it with the fixture: what registryd served is what the upstream has.
func assertSameBytes(t *testing.T, fx *mavenFixture, clientCache string) {
	t.Helper()
	for _, lib := range realClientLibs {
		rel := libFile(fx, lib.key, ".jar")
		want, err := os.ReadFile(filepath.Join(fx.Root, filepath.FromSlash(rel)))
		if err != nil {
			t.Fatal(err)
		}
		name := filepath.Base(rel)
		var found []string
		_ = filepath.WalkDir(clientCache, func(p string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() && d.Name() == name {
				found = append(found, p)
			}
			return nil
		})
		if len(found) == 0 {
			t.Errorf("%s is not in the client's cache %s", name, clientCache)
		}
		for _, p := range found {
			got, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s in the client's cache (%d bytes) differs from the upstream's (%d bytes)", p, len(got), len(want))
			}
		}
	}
}

// cacheEntry is the one cache entry of the upstream for rel, through the
// admin API.
func cacheEntry(t *testing.T, d *Daemon, upstream int64, rel string) map[string]any {
	t.Helper()
	var entries []map[string]any
	d.Do("GET", fmt.Sprintf("/virtual_registries/packages/maven/upstreams/%d/cache_entries?search=%s", upstream,
		url.QueryEscape(rel)), rootToken, nil).Expect(t, 200).JSON(t, &entries)
	if len(entries) != 1 || entries[0]["relative_path"] != rel {
		t.Fatalf("cache entries for %s: %v", rel, entries)
	}
	return entries[0]
}

// assertCacheEntries checks through the admin API that registryd cached the
// libraries with the upstream's digests.
func assertCacheEntries(t *testing.T, d *Daemon, fx *mavenFixture, upstream int64) {
	t.Helper()
	for _, lib := range realClientLibs {
		rel := libFile(fx, lib.key, ".jar")
		e := cacheEntry(t, d, upstream, rel)
		sha1, err := os.ReadFile(filepath.Join(fx.Root, filepath.FromSlash(rel)+".sha1"))
		if err != nil {
			t.Fatal(err)
		}
		if e["file_sha1"] != string(sha1) {
			t.Errorf("cache entry of %s = %v; want file_sha1 %s", rel, e, sha1)
		}
	}
}
