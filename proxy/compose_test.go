package proxy

import (
	"crypto/md5"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"strings"
	"testing"
	"time"

	"registryd/maven"
	"registryd/store"
)

// metaXML is libMeta as Maven writes it.
func metaXML(lastUpdated, latest, release string, versions ...string) []byte {
	return metaXMLAt(libMeta, lastUpdated, latest, release, versions...)
}

// metaXMLAt is the artifact-level maven-metadata.xml at path.
func metaXMLAt(path, lastUpdated, latest, release string, versions ...string) []byte {
	dir := strings.TrimSuffix(path, "/maven-metadata.xml")
	i := strings.LastIndexByte(dir, '/')
	var b strings.Builder
	fmt.Fprintf(&b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<metadata>\n  <groupId>%s</groupId>\n  <artifactId>%s</artifactId>\n  <versioning>\n",
		strings.ReplaceAll(dir[:i], "/", "."), dir[i+1:])
	if latest != "" {
		fmt.Fprintf(&b, "    <latest>%s</latest>\n", latest)
	}
	if release != "" {
		fmt.Fprintf(&b, "    <release>%s</release>\n", release)
	}
	b.WriteString("    <versions>\n")
	for _, v := range versions {
		fmt.Fprintf(&b, "      <version>%s</version>\n", v)
	}
	fmt.Fprintf(&b, "    </versions>\n    <lastUpdated>%s</lastUpdated>\n  </versioning>\n</metadata>\n", lastUpdated)
	return []byte(b.String())
}

const libMeta = "org/example/lib/maven-metadata.xml"

// parsed reads a merged answer back.
func parsed(t *testing.T, body []byte) *maven.Metadata {
	t.Helper()
	m, err := maven.ParseMetadata(strings.NewReader(string(body)), 1<<20)
	if err != nil {
		t.Fatalf("answer does not parse: %v\n%s", err, body)
	}
	return m
}

func hexOf(h hash.Hash, b []byte) string {
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil))
}

// A registry answers artifact-level metadata as the merge of its
// upstreams': the union of versions in Maven's order, latest and release
// from the newest document, checksums of exactly the merged bytes, an ETag
// that revalidates, and no upstream request while the inputs stand.
func TestMergedMetadata(t *testing.T) {
	e := newEnv(t)
	a, b := newFakeUpstream(t), newFakeUpstream(t)
	a.set(libMeta, fakeFile{body: metaXML("20240101000000", "1.0", "1.0", "1.0", "1.0-beta")})
	b.set(libMeta, fakeFile{body: metaXML("20250101000000", "2.0", "2.0", "1.0", "1.10", "2.0")})
	e.upstream(a.URL, nil, nil)
	e.upstream(b.URL, nil, nil)

	r := e.get(libMeta).expect(t, 200)
	m := parsed(t, r.body)
	if got := strings.Join(m.Versioning.Versions, ","); got != "1.0-beta,1.0,1.10,2.0" {
		t.Fatalf("versions %s", got)
	}
	if m.Versioning.Latest != "2.0" || m.Versioning.Release != "2.0" || m.Versioning.LastUpdated != "20250101000000" {
		t.Fatalf("versioning %+v", m.Versioning)
	}
	if h := r.header.Get("X-Registryd-Merge"); h != "complete" {
		t.Fatalf("X-Registryd-Merge %q", h)
	}
	etag := r.header.Get("ETag")
	if !strings.HasPrefix(etag, `"m`) {
		t.Fatalf("ETag %q", etag)
	}
	if r.header.Get("X-Checksum-Sha1") != hexOf(sha1.New(), r.body) {
		t.Fatal("X-Checksum-Sha1 does not match the body")
	}
	for ext, h := range map[string]hash.Hash{".sha1": sha1.New(), ".md5": md5.New(), ".sha256": sha256.New(), ".sha512": sha512.New()} {
		e.get(libMeta+ext).expect(t, 200).expectBody(t, hexOf(h, r.body))
	}
	calls := a.total() + b.total()
	// Again, and after another file changed the cache: the same bytes, no request.
	a.set("org/example/other/1/other-1.pom", fakeFile{body: []byte("<project/>")})
	e.get("org/example/other/1/other-1.pom").expect(t, 200)
	calls++
	again := e.get(libMeta).expect(t, 200).expectBody(t, string(r.body))
	if again.header.Get("ETag") != etag {
		t.Fatal("the ETag changed for the same inputs")
	}
	if n := a.total() + b.total(); n != calls {
		t.Fatalf("%d upstream requests, want %d", n, calls)
	}
	e.get(libMeta, "If-None-Match", etag).expect(t, 304)
	h := e.head(libMeta).expect(t, 200)
	if h.header.Get("Content-Length") != fmt.Sprint(len(r.body)) {
		t.Fatalf("HEAD Content-Length %q", h.header.Get("Content-Length"))
	}
	if got := e.metric("registryd_metadata_merges_total", "outcome", "complete"); got < 3 {
		t.Fatalf("merges_total{complete} = %v", got)
	}
	// A new version on upstream A, once its metadata is stale: merged in.
	a.set(libMeta, fakeFile{body: metaXML("20260101000000", "3.0", "3.0", "1.0", "3.0")})
	e.clock.Advance(25 * time.Hour)
	m = parsed(t, e.get(libMeta).expect(t, 200).body)
	if got := strings.Join(m.Versioning.Versions, ","); got != "1.0,1.10,2.0,3.0" || m.Versioning.Latest != "3.0" {
		t.Fatalf("after the change: versions %s latest %s", got, m.Versioning.Latest)
	}
	e.noBrokenState()
}

// When one upstream has the document, its own bytes are the answer; when
// none has it, 404; when every upstream fails, the 502 of any miss.
func TestMergedMetadataOneOrNone(t *testing.T) {
	e := newEnv(t)
	a, b := newFakeUpstream(t), newFakeUpstream(t)
	own := metaXML("20240101000000", "1.0", "1.0", "1.0")
	b.set(libMeta, fakeFile{body: own})
	e.upstream(a.URL, nil, nil)
	e.upstream(b.URL, nil, nil)
	r := e.get(libMeta).expect(t, 200).expectBody(t, string(own))
	if r.header.Get("X-Registryd-Merge") != "" {
		t.Fatalf("a single document is marked %q", r.header.Get("X-Registryd-Merge"))
	}
	e.get(libMeta+".sha1").expect(t, 200).expectBody(t, hexOf(sha1.New(), own))

	e.get("org/example/none/maven-metadata.xml").expect(t, 404)
	a.set("org/example/down/maven-metadata.xml", fakeFile{status: 500})
	b.set("org/example/down/maven-metadata.xml", fakeFile{status: 500})
	e.get("org/example/down/maven-metadata.xml").expect(t, 502)
}

// An upstream that fails leaves a partial merge: 200, said so, and asked
// again once metadata.partial_ttl has passed. A malformed document (a web
// page, a billion-laughs bomb) is that upstream's failure, never a 500.
func TestPartialMerge(t *testing.T) {
	e := newEnv(t, func(o *envOptions) { o.Metadata.PartialTTL = time.Minute })
	a, b := newFakeUpstream(t), newFakeUpstream(t)
	a.set(libMeta, fakeFile{body: metaXML("20240101000000", "1.0", "1.0", "1.0")})
	b.set(libMeta, fakeFile{status: 503})
	e.upstream(a.URL, nil, nil)
	bid := e.upstream(b.URL, nil, nil)

	r := e.get(libMeta).expect(t, 200)
	if h := r.header.Get("X-Registryd-Merge"); h != fmt.Sprintf("partial; missing=%d", bid) {
		t.Fatalf("X-Registryd-Merge %q", h)
	}
	if got := strings.Join(parsed(t, r.body).Versioning.Versions, ","); got != "1.0" {
		t.Fatalf("versions %s", got)
	}
	b.set(libMeta, fakeFile{body: metaXML("20250101000000", "2.0", "2.0", "2.0")})
	before := b.calls(libMeta)
	e.get(libMeta).expect(t, 200)
	if b.calls(libMeta) != before {
		t.Fatal("a partial merge was not reused within metadata.partial_ttl")
	}
	e.clock.Advance(2 * time.Minute)
	r = e.get(libMeta).expect(t, 200)
	if h := r.header.Get("X-Registryd-Merge"); h != "complete" {
		t.Fatalf("after partial_ttl: X-Registryd-Merge %q", h)
	}

	bomb := `<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;&lol;">]><metadata><versioning><versions><version>&lol2;</version></versions></versioning></metadata>`
	for name, body := range map[string]string{
		"html":   "<!DOCTYPE html><html><body>login</body></html>",
		"bomb":   bomb,
		"broken": "<metadata><versioning><versions><version>1",
	} {
		path := "org/example/" + name + "/maven-metadata.xml"
		a.set(path, fakeFile{body: metaXMLAt(path, "20240101000000", "1.0", "1.0", "1.0")})
		b.set(path, fakeFile{body: []byte(body), ctype: "application/xml"})
		r := e.get(path).expect(t, 200)
		if !strings.HasPrefix(r.header.Get("X-Registryd-Merge"), "partial") {
			t.Fatalf("%s: X-Registryd-Merge %q", name, r.header.Get("X-Registryd-Merge"))
		}
	}
}

// Version-level SNAPSHOT metadata names files on the upstream that wrote
// it: the first upstream that has it answers, unmerged.
func TestSnapshotMetadataNotMerged(t *testing.T) {
	e := newEnv(t)
	a, b := newFakeUpstream(t), newFakeUpstream(t)
	const p = "org/example/lib/1.0-SNAPSHOT/maven-metadata.xml"
	first := []byte("<metadata><version>1.0-SNAPSHOT</version><versioning><snapshot><timestamp>20240101.000000</timestamp><buildNumber>1</buildNumber></snapshot></versioning></metadata>")
	a.set(p, fakeFile{body: first})
	b.set(p, fakeFile{body: []byte("<metadata><version>1.0-SNAPSHOT</version></metadata>")})
	e.upstream(a.URL, nil, nil)
	e.upstream(b.URL, nil, nil)
	r := e.get(p).expect(t, 200).expectBody(t, string(first))
	if r.header.Get("X-Registryd-Merge") != "" || b.calls(p) != 0 {
		t.Fatal("version-level metadata was merged")
	}
}

// The registry's merge_metadata switch turns merging off: the first
// upstream's document, as GitLab answers.
func TestMergeSwitchOff(t *testing.T) {
	e := newEnv(t)
	a, b := newFakeUpstream(t), newFakeUpstream(t)
	own := metaXML("20240101000000", "1.0", "1.0", "1.0")
	a.set(libMeta, fakeFile{body: own})
	b.set(libMeta, fakeFile{body: metaXML("20250101000000", "2.0", "2.0", "2.0")})
	e.upstream(a.URL, nil, nil)
	e.upstream(b.URL, nil, nil)
	off := false
	if _, err := e.st.UpdateRegistry(e.registry, store.RegistryPatch{MergeMetadata: &off}); err != nil {
		t.Fatal(err)
	}
	e.get(libMeta).expect(t, 200).expectBody(t, string(own))
	if b.calls(libMeta) != 0 {
		t.Fatal("the second upstream was asked")
	}
}

// .meta/prefixes.txt is the union of every upstream's prefix file, and 404
// unless every upstream gives one.
func TestPrefixesUnion(t *testing.T) {
	e := newEnv(t)
	a, b := newFakeUpstream(t), newFakeUpstream(t)
	const p = ".meta/prefixes.txt"
	a.set(p, fakeFile{body: []byte("## repository-prefixes/2.0\n/org/apache\n/com/example\n"), ctype: "text/plain"})
	b.set(p, fakeFile{body: []byte("## repository-prefixes/2.0\n# a comment\n/io/netty\n/org/apache\n"), ctype: "text/plain"})
	e.upstream(a.URL, nil, nil)
	bid := e.upstream(b.URL, nil, nil)
	r := e.get(p).expect(t, 200)
	got, err := maven.ParsePrefixes(strings.NewReader(string(r.body)), 1<<20)
	if err != nil {
		t.Fatalf("the union does not parse: %v\n%s", err, r.body)
	}
	if strings.Join(got, " ") != "/com/example /io/netty /org/apache" {
		t.Fatalf("union %q", got)
	}
	e.get(p+".sha1").expect(t, 200).expectBody(t, hexOf(sha1.New(), r.body))

	// One upstream without a prefix file: 404, never the other's file.
	b.del(p)
	if _, err := e.st.InvalidateUpstreamCache(bid); err != nil {
		t.Fatal(err)
	}
	r = e.get(p).expect(t, 404)
	if !strings.Contains(string(r.body), fmt.Sprintf("upstream %d has none", bid)) {
		t.Fatalf("404 body %s", r.body)
	}
	// One failing: 404 too.
	b.set(p, fakeFile{status: 500})
	e.clock.Advance(2 * time.Hour)
	e.get(p).expect(t, 404)
}

func addRule(t *testing.T, e *env, up int64, typ, target, ptype, pattern string) store.UpstreamRule {
	t.Helper()
	r, err := e.st.CreateUpstreamRule(store.UpstreamRule{UpstreamID: up, RuleType: typ, TargetCoordinate: target,
		PatternType: ptype, Pattern: pattern})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// Rules take an upstream out of a file's resolution, cached copies
// included: the next upstream serves it; none left is 403 naming the rule
// (problem document for Maven 4), counted and audited. Versions an
// upstream may not serve leave its merged metadata.
func TestRules(t *testing.T) {
	e := newEnv(t)
	e.srv.audit.start()
	a, b := newFakeUpstream(t), newFakeUpstream(t)
	const jar = "com/internal/app/1.0/app-1.0.jar"
	a.set(jar, fakeFile{body: jarBytes("public "+jar, 4096)})
	b.set(jar, fakeFile{body: jarBytes("internal "+jar, 4096)})
	aid := e.upstream(a.URL, nil, nil)
	bid := e.upstream(b.URL, nil, nil)
	// Cached from A before the rule exists.
	e.get(jar).expect(t, 200).expectBody(t, string(jarBytes("public "+jar, 4096)))

	deny := addRule(t, e, aid, "deny", "group_id", "wildcard", "com.internal*")
	e.get(jar).expect(t, 200).expectBody(t, string(jarBytes("internal "+jar, 4096)))
	e.get(jar+".sha1").expect(t, 200)
	if got := e.metric("registryd_upstream_rule_denials_total", "upstream", fmt.Sprint(aid)); got != 2 {
		t.Fatalf("denials %v, want 2", got)
	}

	// Both refuse: 403 with GitLab's message, and a problem document that
	// names the rules.
	addRule(t, e, bid, "allow", "group_id", "wildcard", "org.*")
	r := e.get(jar).expect(t, 403)
	r.expectMessage(t, "message", "403 Forbidden - All upstreams are filtered out because of existing allow/deny rules")
	r = e.get(jar, "Accept", "application/problem+json").expect(t, 403)
	var doc problemDoc
	if err := json.Unmarshal(r.body, &doc); err != nil || len(doc.Upstreams) != 2 {
		t.Fatalf("problem %s", r.body)
	}
	if doc.Upstreams[0].Result != "denied" || doc.Upstreams[0].Rule != deny.ID ||
		!strings.Contains(doc.Upstreams[0].Reason, `"com.internal*"`) {
		t.Fatalf("upstream A in the problem: %+v", doc.Upstreams[0])
	}
	if doc.Upstreams[1].Result != "denied" || !strings.Contains(doc.Upstreams[1].Reason, "no allow rule on group_id") {
		t.Fatalf("upstream B in the problem: %+v", doc.Upstreams[1])
	}

	// Audit events: one per (upstream, file, caller) per window.
	e.srv.audit.stopDrain()
	evs, total, err := e.st.AuditEventsPage(store.AuditQuery{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if total != 2 {
		t.Fatalf("%d audit events, want 2 (A once, B once): %+v", total, evs)
	}
	for _, ev := range evs {
		if ev.EventName != store.AuditUpstreamArtifactDenied || ev.EntityID != e.group.ID || ev.EntityPath != "acme" ||
			ev.TargetType != store.AuditTargetMavenUpstream || !strings.HasSuffix(ev.TargetDetails, "/"+jar) || ev.AuthorClass != store.AuditAuthorClassUser || !strings.Contains(ev.Message, "com.internal") {
			t.Fatalf("audit event %+v", ev)
		}
	}
	e.srv.audit.start()

	// Version rules leave the upstream's merged metadata.
	const meta = "com/internal/app/maven-metadata.xml"
	a.set(meta, fakeFile{body: metaXMLAt(meta, "20250101000000", "2.0-SNAPSHOT", "1.0", "1.0", "2.0-SNAPSHOT")})
	b.set(meta, fakeFile{body: metaXMLAt(meta, "20240101000000", "0.9", "0.9", "0.9")})
	if err := e.st.DeleteUpstreamRule(deny.ID); err != nil {
		t.Fatal(err)
	}
	rules, _ := e.st.UpstreamRules(bid)
	for _, r := range rules {
		if err := e.st.DeleteUpstreamRule(r.ID); err != nil {
			t.Fatal(err)
		}
	}
	addRule(t, e, aid, "deny", "version", "wildcard", "*-SNAPSHOT")
	m := parsed(t, e.get(meta).expect(t, 200).body)
	if got := strings.Join(m.Versioning.Versions, ","); got != "0.9,1.0" || m.Versioning.Latest == "2.0-SNAPSHOT" {
		t.Fatalf("versions %s latest %s", got, m.Versioning.Latest)
	}
	e.get("com/internal/app/2.0-SNAPSHOT/app-2.0-SNAPSHOT.jar").expect(t, 404)
	e.lint()
}

// The same inputs give the same bytes, whatever the order requests came in.
func TestMergeDeterministic(t *testing.T) {
	var bodies []string
	for range 2 {
		e := newEnv(t)
		a, b := newFakeUpstream(t), newFakeUpstream(t)
		a.set(libMeta, fakeFile{body: metaXML("20240101000000", "1.0", "1.0", "1.0", "1.1")})
		b.set(libMeta, fakeFile{body: metaXML("20250101000000", "2.0", "2.0", "2.0", "1.1")})
		e.upstream(a.URL, nil, nil)
		e.upstream(b.URL, nil, nil)
		r := e.get(libMeta).expect(t, 200)
		bodies = append(bodies, string(r.body)+"|"+r.header.Get("ETag"))
	}
	if bodies[0] != bodies[1] {
		t.Fatalf("two merges of the same inputs differ:\n%s\n%s", bodies[0], bodies[1])
	}
}

// Regressions found in review: refusals of a composed document are counted
// when no answer can be built; the outcome follows what each upstream gave
// (a failure that turns into a 404 is no longer "partial"); a malformed
// document is asked for again once metadata.partial_ttl has passed; a rule
// edited within the same millisecond applies at once; HEAD and 304 are not
// downloads; group-level metadata meets group rules.
func TestComposeReview(t *testing.T) {
	e := newEnv(t, func(o *envOptions) { o.Metadata.PartialTTL = time.Minute })
	a, b := newFakeUpstream(t), newFakeUpstream(t)
	aid := e.upstream(a.URL, nil, nil)
	bid := e.upstream(b.URL, nil, nil)

	// Every upstream refuses group-level metadata of com.acme: 403, counted.
	const groupMeta = "com/acme/maven-metadata.xml"
	a.set(groupMeta, fakeFile{body: []byte("<metadata><plugins><plugin><prefix>x</prefix><artifactId>x-maven-plugin</artifactId></plugin></plugins></metadata>")})
	ra := addRule(t, e, aid, "deny", "group_id", "wildcard", "com.acme*")
	rb := addRule(t, e, bid, "deny", "group_id", "wildcard", "com.acme")
	e.get(groupMeta).expect(t, 403)
	if got := e.metric("registryd_upstream_rule_denials_total"); got != 2 {
		t.Fatalf("denials %v, want 2", got)
	}
	if a.calls(groupMeta) != 0 {
		t.Fatal("a refused upstream was asked")
	}
	// Edited in the same millisecond (the test clock stands still): applies.
	other := "org.other"
	if _, err := e.st.UpdateUpstreamRule(ra.ID, store.UpstreamRulePatch{Pattern: &other}); err != nil {
		t.Fatal(err)
	}
	if err := e.st.DeleteUpstreamRule(rb.ID); err != nil {
		t.Fatal(err)
	}
	e.get(groupMeta).expect(t, 200)

	// Partial, then the failing upstream answers 404: complete.
	a.set(libMeta, fakeFile{body: metaXML("20240101000000", "1.0", "1.0", "1.0")})
	b.set(libMeta, fakeFile{status: 503})
	e.get(libMeta).expect(t, 200)
	b.del(libMeta)
	e.clock.Advance(2 * time.Minute)
	if h := e.get(libMeta).expect(t, 200).header.Get("X-Registryd-Merge"); h != "" {
		t.Fatalf("after the failing upstream answered 404: X-Registryd-Merge %q, want a single document", h)
	}

	// A malformed document: asked again once partial_ttl has passed, and
	// merged once repaired.
	const bad = "org/example/bad/maven-metadata.xml"
	a.set(bad, fakeFile{body: metaXMLAt(bad, "20240101000000", "1.0", "1.0", "1.0")})
	b.set(bad, fakeFile{body: []byte("<metadata><versioning>"), ctype: "application/xml"})
	e.get(bad).expect(t, 200)
	b.set(bad, fakeFile{body: metaXMLAt(bad, "20250101000000", "2.0", "2.0", "2.0")})
	e.get(bad).expect(t, 200)
	if n := b.calls(bad); n != 1 {
		t.Fatalf("the malformed upstream was asked %d times within partial_ttl, want 1", n)
	}
	e.clock.Advance(2 * time.Minute)
	r := e.get(bad).expect(t, 200)
	if h := r.header.Get("X-Registryd-Merge"); h != "complete" {
		t.Fatalf("after partial_ttl: X-Registryd-Merge %q", h)
	}

	// HEAD and 304 are not downloads.
	if err := e.srv.FlushDownloads(); err != nil {
		t.Fatal(err)
	}
	before, _ := e.entry(aid, "/"+bad)
	e.head(bad).expect(t, 200)
	e.get(bad, "If-None-Match", r.header.Get("ETag")).expect(t, 304)
	if err := e.srv.FlushDownloads(); err != nil {
		t.Fatal(err)
	}
	if after, _ := e.entry(aid, "/"+bad); after.DownloadsCount != before.DownloadsCount {
		t.Fatalf("HEAD and 304 counted: %d -> %d downloads", before.DownloadsCount, after.DownloadsCount)
	}
}
