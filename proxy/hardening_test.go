package proxy

import (
	"net/http"
	"strconv"
	"testing"
)

// gitlabCSP is the Content-Security-Policy GitLab sends with every file of
// a virtual registry (EXTRA_RESPONSE_HEADERS in
// ee/lib/api/concerns/virtual_registries/packages/endpoint.rb).
const gitlabCSP = "sandbox; default-src 'none'; require-trusted-types-for 'script'"

// Every answer that carries a file or a digest carries GitLab's hardening
// headers: a miss streamed from the upstream, a HEAD that waited for its
// fill, a hit (GET, HEAD, Range, 304), a checksum sidecar and merged
// metadata. A browser that opens a cached HTML file from the registry's
// origin then runs nothing of it.
func TestDownloadHardeningHeaders(t *testing.T) {
	e := newEnv(t)
	up := newFakeUpstream(t)
	big := jarBytes(jarPath, 64<<10) // streamed, not answered from memory
	up.set(jarPath, fakeFile{body: big, etag: `"v1"`})
	const page = "org/example/lib/1.0/lib-1.0.html"
	up.set(page, fakeFile{body: []byte("<script>alert(1)</script>"), ctype: "text/html"})
	up.set(libMeta, fakeFile{body: metaXML("20260101000000", "1.0", "1.0", "1.0"), ctype: "application/xml"})
	e.upstream(up.URL, nil, nil)
	reg := "/" + strconv.FormatInt(e.registry, 10) + "/"

	check := func(name string, r resp, status int) {
		t.Helper()
		r.expect(t, status)
		if got := r.header.Get("Content-Security-Policy"); got != gitlabCSP {
			t.Errorf("%s: Content-Security-Policy %q, want %q", name, got, gitlabCSP)
		}
		if got := r.header.Get("X-Content-Type-Options"); got != "nosniff" {
			t.Errorf("%s: X-Content-Type-Options %q", name, got)
		}
	}
	check("GET of a miss, streamed", e.get(jarPath), 200)
	check("GET of a small miss, from memory", e.get(page), 200)
	const pom = "org/example/lib/1.0/lib-1.0.pom"
	up.set(pom, fakeFile{body: big, ctype: "application/xml"})
	check("HEAD of a miss", e.head(pom), 200)
	check("GET of a hit", e.get(jarPath), 200)
	check("HEAD of a hit", e.head(jarPath), 200)
	check("Range of a hit", e.get(jarPath, "Range", "bytes=0-9"), 206)
	etag := e.get(jarPath).header.Get("Etag")
	check("304 of a hit", e.do(http.MethodGet, reg+jarPath, nil, "Private-Token", rootToken, "If-None-Match", etag), 304)
	check("checksum sidecar", e.get(jarPath+".sha1"), 200)
	check("merged metadata", e.get(libMeta), 200)
	check("merged metadata's checksum", e.get(libMeta+".sha1"), 200)
	if d := e.get(page).header.Get("Content-Disposition"); d != `attachment; filename="lib-1.0.html"` {
		t.Errorf("Content-Disposition %q", d)
	}
}
