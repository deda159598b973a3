package proxy

import (
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/valyala/fasthttp"

	"registryd/maven"
	"registryd/store"
)

// The fasthttp ownership contract (see the package comment): fasthttp
// reuses a RequestCtx, and the buffers of its request and response, for
// the next request on the connection and, through its pool, for other
// connections. A string the proxy keeps past a request (a map or LRU key,
// a flight key, a mark, an error kept in a cache, an audit event waiting
// in its queue, ...) that is a view of those buffers changes under the
// cache holding it: a Go map then holds a key whose bytes no longer match
// its hash, lookups find the wrong entry or none, and golang-lru's Remove
// panics on a list element it already unlinked (issue 20: merged metadata
// answered with another artifact's versions, and 500s).
//
// The tools here make that class testable without knowing where a view
// may be kept. scribbleRequest (and scribbleResponse) overwrite, once a
// request is answered, every buffer the handler could have taken views of
// with a byte no kept string contains legitimately; keptAliases then walks
// everything a Server keeps, by reflection, and names every string that
// shows that byte. A cache added later is walked as well, as long as it
// hangs off the Server through ordinary fields
// (TestKeptAliasesSeesEveryCache checks the walk reaches each one there is
// today).

// scribbleByte is written over the request's bytes once it is answered:
// DEL is in no valid Maven path, header value the proxy keeps, digest or
// error reason, so a kept string that shows it aliases a request.
const scribbleByte = 0x7f

// scribbleRequest overwrites the request's URI and every header value in
// place, as the next request on the connection would (with other bytes).
// The method is left alone: fasthttp reads it after the handler (HEAD).
func scribbleRequest(ctx *fasthttp.RequestCtx) {
	scribbleBytes(ctx.Request.Header.RequestURI())
	for k, v := range ctx.Request.Header.All() {
		if !fasthttpConstant(k) {
			scribbleBytes(v)
		}
	}
}

// scribbleResponse overwrites the response's header values, for a driver
// that has read the answer already. The body is not touched: a body set
// with SetBodyRaw is the proxy's own immutable memory (a small blob, a
// merged document), not fasthttp's.
func scribbleResponse(ctx *fasthttp.RequestCtx) {
	for k, v := range ctx.Response.Header.All() {
		if !fasthttpConstant(k) && string(k) != fasthttp.HeaderContentType {
			scribbleBytes(v)
		}
	}
}

// fasthttpConstant: the header's value, as All yields it, may be one of
// fasthttp's package-level constants ("close"; a response's default
// Content-Type, skipped by scribbleResponse), not a buffer of the request.
func fasthttpConstant(key []byte) bool { return string(key) == fasthttp.HeaderConnection }

// scribbled reports whether s shows scribbled bytes: as they are, or
// escaped (strconv.Quote, %q, JSON), for a string built from a view after
// its bytes were overwritten.
func scribbled(s string) bool {
	return strings.IndexByte(s, scribbleByte) >= 0 || strings.Contains(s, `\x7f`) || strings.Contains(s, `\u007f`)
}

func scribbleBytes(b []byte) {
	for i := range b {
		b[i] = scribbleByte
	}
}

// keptAliases walks s and returns where each string that shows
// scribbled bytes is kept (a field path such as
// "Server.engine.composed.lru.items{key}.rel"), and how many strings it looked
// at. Call it only while nothing runs on s (after waitFills).
//
// The walk follows pointers and interfaces only into the proxy's own types
// and those of the packages its caches are made of (maven, upstream,
// golang-lru, and errors and fmt for kept errors): *store.Store,
// *auth.Service, fasthttp, prometheus, slog and the like own their memory
// and are not ours to check here (auth hashes its credentials and keeps
// the decoded Basic user as a new string; the store copies what it
// writes). Byte slices are skipped: bodies and buffers are the proxy's own
// memory, and a hit may legitimately send a cached body by reference. It
// goes breadth first, so a kept value is named by its shortest path (an
// LRU entry by its map key, not by its place in the eviction list).
func keptAliases(s *Server) (found []string, looked int) {
	w := &keptWalker{seen: map[keptVisit]bool{}}
	w.queue = append(w.queue, keptItem{reflect.ValueOf(s), &keptPath{seg: "Server"}})
	for len(w.queue) > 0 {
		it := w.queue[0]
		w.queue = w.queue[1:]
		w.visit(it.v, it.path)
	}
	sort.Strings(w.found)
	return w.found, w.strings
}

// keptSkip are Server fields the walk leaves out, each with why.
var keptSkip = map[string]string{
	// connLimiter's maps are keyed by netip.Addr values and change under
	// the accept loop, which runs while the test walks.
	"conns": "keyed by address values; changed by the accept loop",
}

type keptWalker struct {
	seen    map[keptVisit]bool
	queue   []keptItem
	found   []string
	strings int
}

type keptItem struct {
	v    reflect.Value
	path *keptPath
}

type keptVisit struct {
	p uintptr
	t reflect.Type
}

// keptPath is where a value was reached, built only when one is reported.
type keptPath struct {
	parent *keptPath
	seg    string
}

func (p *keptPath) String() string {
	var segs []string
	for ; p != nil; p = p.parent {
		segs = append(segs, p.seg)
	}
	var b strings.Builder
	for i := len(segs) - 1; i >= 0; i-- {
		b.WriteString(segs[i])
	}
	return b.String()
}

func (w *keptWalker) next(v reflect.Value, parent *keptPath, seg string) {
	w.queue = append(w.queue, keptItem{v, &keptPath{parent, seg}})
}

// followed reports whether the walk goes through a pointer to, or an
// interface holding, a value of type t.
func followed(t reflect.Type) bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	pkg := t.PkgPath()
	switch pkg {
	case "", "registryd/proxy", "registryd/maven", "registryd/upstream", "errors", "fmt":
		return true
	}
	return strings.HasPrefix(pkg, "github.com/hashicorp/golang-lru/v2")
}

func (w *keptWalker) visit(v reflect.Value, path *keptPath) {
	switch v.Kind() {
	case reflect.String:
		w.strings++
		if s := v.String(); scribbled(s) {
			w.found = append(w.found, path.String()+" = "+showScribbled(s))
		}
	case reflect.Pointer:
		if v.IsNil() || !followed(v.Type().Elem()) {
			return
		}
		k := keptVisit{v.Pointer(), v.Type()}
		if w.seen[k] {
			return
		}
		w.seen[k] = true
		w.visit(v.Elem(), path)
	case reflect.Interface:
		if v.IsNil() || !followed(v.Elem().Type()) {
			return
		}
		w.visit(v.Elem(), path)
	case reflect.Struct:
		t := v.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			if t == serverType {
				if _, skip := keptSkip[f.Name]; skip {
					continue
				}
			}
			w.next(v.Field(i), path, "."+f.Name)
		}
	case reflect.Slice, reflect.Array:
		if !holdsStrings(v.Type().Elem()) {
			return
		}
		for i := range v.Len() {
			w.next(v.Index(i), path, "["+strconv.Itoa(i)+"]")
		}
	case reflect.Map:
		for it := v.MapRange(); it.Next(); {
			w.next(it.Key(), path, "{key}")
			w.next(it.Value(), path, "{"+keyLabel(it.Key())+"}")
		}
	case reflect.Chan:
		w.visitQueue(v, path)
	}
}

// visitQueue looks at what waits in a buffered channel (the audit queue):
// it takes every value out and puts it back, in order. Only while nothing
// else uses the channel.
func (w *keptWalker) visitQueue(v reflect.Value, path *keptPath) {
	if v.IsNil() || !v.CanAddr() || !holdsStrings(v.Type().Elem()) {
		return
	}
	// An unexported field's channel cannot be received from through
	// reflect; the same memory seen as an exported value can.
	ch := reflect.NewAt(v.Type(), unsafe.Pointer(v.UnsafeAddr())).Elem()
	var held []reflect.Value
	for {
		x, ok := ch.TryRecv()
		if !ok {
			break
		}
		held = append(held, x)
	}
	for i, x := range held {
		ch.TrySend(x)
		w.next(x, path, "<-"+strconv.Itoa(i))
	}
}

// showScribbled quotes s with its scribbled bytes shown as '#'.
func showScribbled(s string) string {
	if len(s) > 64 {
		s = s[:64] + "..."
	}
	return strconv.Quote(strings.Map(func(r rune) rune {
		if r == scribbleByte {
			return '#'
		}
		return r
	}, s))
}

func keyLabel(k reflect.Value) string {
	switch k.Kind() {
	case reflect.String:
		return strconv.Quote(k.String())
	case reflect.Int, reflect.Int64:
		return strconv.FormatInt(k.Int(), 10)
	}
	return "."
}

var serverType = reflect.TypeOf(Server{})

// holdsStrings reports whether a value of type t can reach a string the
// walk would look at.
func holdsStrings(t reflect.Type) bool {
	return holdsStringsSeen(t, map[reflect.Type]bool{})
}

func holdsStringsSeen(t reflect.Type, seen map[reflect.Type]bool) bool {
	if seen[t] {
		return false
	}
	seen[t] = true
	switch t.Kind() {
	case reflect.String, reflect.Interface:
		return true
	case reflect.Pointer:
		return followed(t.Elem()) && holdsStringsSeen(t.Elem(), seen)
	case reflect.Slice, reflect.Array, reflect.Chan:
		return holdsStringsSeen(t.Elem(), seen)
	case reflect.Map:
		return holdsStringsSeen(t.Key(), seen) || holdsStringsSeen(t.Elem(), seen)
	case reflect.Struct:
		for i := range t.NumField() {
			if holdsStringsSeen(t.Field(i).Type, seen) {
				return true
			}
		}
	}
	return false
}

// expectOwned fails the test with every kept string that aliases a
// scribbled request, after step.
func expectOwned(t testing.TB, s *Server, step string) {
	t.Helper()
	found, _ := keptAliases(s)
	if n := len(found); n > 0 {
		if n > 10 {
			found = append(found[:10], "...")
		}
		t.Fatalf("after %s, %d kept strings alias a request's bytes:\n  %s", step, n, strings.Join(found, "\n  "))
	}
}

// driver answers requests on one RequestCtx, reused from request to
// request as fasthttp reuses it, and scribbles over its buffers once each
// answer is read.
type driver struct {
	e     *env
	token string // the caller's; root's when empty
	ctx   fasthttp.RequestCtx
}

// get answers GET path (below the registry); hdr are more request headers,
// as name/value pairs.
func (d *driver) get(path string, hdr ...string) (int, []byte) {
	return d.do(fasthttp.MethodGet, path, nil, hdr...)
}

// do answers a request for path (below the registry) and returns the
// status and body, read whole (a streamed body to its end).
func (d *driver) do(method, path string, body []byte, hdr ...string) (int, []byte) {
	ctx := &d.ctx
	ctx.Request.Reset()
	ctx.Response.Reset()
	ctx.Request.Header.SetMethod(method)
	ctx.Request.SetRequestURI("/api/v4/virtual_registries/packages/maven/" + strconv.FormatInt(d.e.registry, 10) + "/" + path)
	token := d.token
	if token == "" {
		token = rootToken
	}
	ctx.Request.Header.Set("Private-Token", token)
	ctx.Request.Header.Set("User-Agent", "Apache-Maven/3.9.9")
	for i := 0; i+1 < len(hdr); i += 2 {
		ctx.Request.Header.Set(hdr[i], hdr[i+1])
	}
	if body != nil {
		ctx.Request.SetBody(body)
	}
	d.e.srv.handle(ctx)
	answer := append([]byte(nil), ctx.Response.Body()...)
	status := ctx.Response.StatusCode()
	scribbleRequest(ctx)
	scribbleResponse(ctx)
	d.e.waitFills()
	return status, answer
}

// artifactMeta is the artifact-level maven-metadata.xml of
// org.example:<artifact>.
func artifactMeta(artifact string, versions ...string) []byte {
	var b strings.Builder
	b.WriteString("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<metadata>\n  <groupId>org.example</groupId>\n  <artifactId>")
	b.WriteString(artifact)
	b.WriteString("</artifactId>\n  <versioning>\n    <versions>\n")
	for _, v := range versions {
		b.WriteString("      <version>" + v + "</version>\n")
	}
	b.WriteString("    </versions>\n    <lastUpdated>20250101000000</lastUpdated>\n  </versioning>\n</metadata>\n")
	return []byte(b.String())
}

// TestKeptStateOwnsRequestBytes drives every kind of answer that leaves
// something behind (a fill and its flight, entry views, download counts,
// the small-blob cache, absence and refusal marks, merged metadata and
// prefix files, rule denials and their audit events, the digests of a file
// streamed uncached) on one reused RequestCtx, scribbles over the request
// and the response after each, and checks that nothing kept shows it.
func TestKeptStateOwnsRequestBytes(t *testing.T) {
	e := newEnv(t)
	a, b := newFakeUpstream(t), newFakeUpstream(t)
	const (
		pom     = "org/example/lib/1.0/lib-1.0.pom"
		absent  = "org/example/lib/9.9/lib-9.9.jar"
		webPage = "org/example/web/1.0/web-1.0.jar"
		denied  = "org/example/denied/maven-metadata.xml"
		deniedJ = "org/example/denied/1.0/denied-1.0.jar"
		prefix  = ".meta/prefixes.txt"
		later   = "org/example/later/1.0/later-1.0.pom"
		half    = "org/example/half/maven-metadata.xml" // upstream B fails: a partial merge
		bad     = "org/example/bad/maven-metadata.xml"  // upstream A's does not parse
		stale   = "org/example/stale/1.0/stale-1.0.pom" // revalidated once stale
	)
	a.set(jarPath, fakeFile{body: jarBytes(jarPath, 64<<10)})
	a.set(pom, fakeFile{body: []byte("<project/>")})
	a.set(webPage, fakeFile{body: []byte("<!DOCTYPE html><html><body>login</body></html>"), ctype: "text/html"})
	a.set(libMeta, fakeFile{body: artifactMeta("lib", "1.0")})
	b.set(libMeta, fakeFile{body: artifactMeta("lib", "2.0")})
	a.set(denied, fakeFile{body: artifactMeta("denied", "1.0")})
	b.set(denied, fakeFile{body: artifactMeta("denied", "2.0")})
	b.set(deniedJ, fakeFile{body: jarBytes(deniedJ, 1024)})
	for _, u := range []*fakeUpstream{a, b} {
		u.set(prefix, fakeFile{body: []byte("## repository-prefixes/2.0\n/org/example\n"), ctype: "text/plain"})
	}
	b.set(later, fakeFile{body: []byte("<project/>")})
	a.set(half, fakeFile{body: artifactMeta("half", "1.0")})
	b.set(half, fakeFile{status: 503})
	a.set(bad, fakeFile{body: []byte("<metadata><versioning>")})
	b.set(bad, fakeFile{body: artifactMeta("bad", "2.0")})
	a.set(stale, fakeFile{body: []byte("<project><version>1</version></project>"), etag: `"v1"`})
	aid := e.upstream(a.URL, nil, nil)
	bid := e.upstream(b.URL, nil, nil)
	addRule(t, e, aid, "deny", "artifact_id", "wildcard", "denied*")

	memberID, member := e.user("member", store.ScopeReadVirtualRegistry)
	if _, err := e.st.AddGroupMember(e.group.ID, memberID, store.Guest, nil); err != nil {
		t.Fatal(err)
	}
	root, other := &driver{e: e}, &driver{e: e, token: member}
	problemJSON := []string{"Accept", "application/problem+json"}
	steps := []struct {
		d      *driver
		path   string
		status int
		hdr    []string
	}{
		{root, jarPath, 200, nil},                            // a miss: flight, entry view, download count
		{root, jarPath, 200, nil},                            // a hit
		{root, jarPath, 206, []string{"Range", "bytes=0-9"}}, // a range of it
		{root, jarPath + ".sha1", 200, nil},                  // a sidecar from the entry's digests
		{root, pom, 200, nil},                                // a small file: the in-memory blob cache
		{root, pom, 200, nil},
		{root, absent, 404, nil},         // absence marks on both upstreams
		{root, absent, 404, problemJSON}, // answered from the marks, as a problem document
		{root, webPage, 502, nil},        // a refused answer: a refusal mark
		{root, webPage, 502, problemJSON},
		{root, libMeta, 200, nil}, // merged metadata: a composed view
		{root, libMeta, 200, nil}, // kept: the same view under a new generation
		{root, libMeta + ".sha1", 200, nil},
		{root, prefix, 200, nil}, // a composed prefix file
		{root, half, 200, nil},   // a partial merge: upstream B's failure kept with it
		{root, half, 200, nil},
		{root, bad, 200, nil}, // a document that does not parse: remembered as bad
		{root, bad, 200, nil},
		{root, denied, 200, nil}, // merged without upstream A: a kept denial, an audit event
		{root, denied, 200, nil},
		// Another caller, answered from the kept view: its audit event is
		// built from the kept denial, whose reason must still name the
		// artifact.
		{other, denied, 200, nil},
		{root, deniedJ, 200, nil}, // a file A's rules refuse: screened, audited
		{root, deniedJ + ".md5", 200, nil},
		{root, stale, 200, nil},
	}
	for _, s := range steps {
		if status, body := s.d.get(s.path, s.hdr...); status != s.status {
			t.Fatalf("GET %s %q: %d, want %d: %s", s.path, s.hdr, status, s.status, body)
		}
		expectOwned(t, e.srv, "GET "+s.path)
	}
	// Stale: a revalidation (a flight with the stored ETag), then a HEAD.
	e.clock.Advance(25 * time.Hour)
	for _, m := range []string{fasthttp.MethodGet, fasthttp.MethodHead} {
		if status, body := root.do(m, stale, nil); status != 200 {
			t.Fatalf("%s %s once stale: %d: %s", m, stale, status, body)
		}
		expectOwned(t, e.srv, m+" "+stale+" (stale)")
	}
	if a.lastIfNoneMatch(stale) != `"v1"` {
		t.Fatal("the stale file was not revalidated: the test did not cover it")
	}
	// A gateway upload.
	upload, ctype := multipartBody(t, []byte("uploaded jar bytes"), "path", jarPath)
	status, body := root.do(fasthttp.MethodPost, "org/example/up/1.0/up-1.0.jar/upload", upload.Bytes(),
		"Content-Type", ctype, "Upstream-GID", "gid://registryd/Upstream/"+strconv.FormatInt(aid, 10),
		"Svc-Gateway-Api-Request", gatewayToken(e.secret, "HS256", map[string]any{"iat": e.clock.Now().Unix()}))
	if status != 200 {
		t.Fatalf("upload: %d: %s", status, body)
	}
	expectOwned(t, e.srv, "an upload")
	if e.metric("registryd_metadata_merges_total", "outcome", "partial") == 0 || e.srv.composed.bad.Len() == 0 {
		t.Fatal("no partial merge, or no bad document remembered: the test did not cover them")
	}
	if n := len(e.srv.audit.ch); n != 3 {
		t.Fatalf("%d audit events queued, want 3 (two callers of the merged view, one of the jar)", n)
	}
	// A full volume: a small file is streamed uncached and its digests
	// kept for its sidecar.
	e.fakeVolume(100 << 20)
	for _, p := range []string{later, later + ".sha1"} {
		if status, body := root.get(p); status != 200 {
			t.Fatalf("GET %s on a full volume: %d: %s", p, status, body)
		}
		expectOwned(t, e.srv, "GET "+p+" (uncached)")
	}
	if _, ok := e.srv.uncached.recall(bid, later, e.clock.Now()); !ok {
		t.Fatal("the uncached file's digests were not kept: the test did not cover them")
	}
}

// TestKeptAliasesSeesEveryCache plants a scribbled string in each place the
// proxy keeps request-derived values today, straight into its storage (not
// through the methods that copy), and checks that keptAliases names every
// one: the walk must not go blind to a cache (behind a field type it does
// not follow, say) while TestKeptStateOwnsRequestBytes goes on passing.
func TestKeptAliasesSeesEveryCache(t *testing.T) {
	e := newEnv(t)
	s := e.srv
	if s.small == nil {
		t.Fatal("the env has no small-blob cache: the test cannot plant one")
	}
	if found, looked := keptAliases(s); len(found) != 0 || looked == 0 {
		t.Fatalf("a fresh server: %d strings looked at, found %q", looked, found)
	}
	plant := func(where string) string { return where + string(rune(scribbleByte)) }
	now := e.clock.Now()
	up := &upstreamView{id: 7, label: "7"}
	verdict := maven.Verdict{Target: maven.TargetArtifactID, Value: plant("verdict")}

	s.composed.lru.Add(entryKey{1, plant("composed-key")}, &composedView{
		failures: []upstreamFailure{{upstream: 7, err: &deniedError{verdict}}},
		denied:   []denial{{up: up, verdict: maven.Verdict{Value: plant("composed-denial")}}},
	})
	s.composed.bad.Add(plant("bad-doc"), badDoc{err: &refusedError{reason: plant("bad-doc-reason")}, until: now})
	s.marks.c.Add(flightKey{7, plant("mark-key")}, pathMark{until: now, refused: &refusedError{reason: plant("mark-refusal")}})
	s.entries.Add(entryKey{1, plant("entry-key")}, &entryView{key: plant("entry-view")})
	s.regs.Add(99, &registryView{id: 99, ups: []*upstreamView{{id: 8, rulesKey: plant("registry-view")}}})
	s.uncached.lru.Add(uncachedKey{7, plant("uncached-key")}, uncachedSum{e: store.CacheEntry{RelativePath: plant("uncached-entry")}})
	s.downloads.add(7, plant("download-key"), now)
	s.audit.seen.Add(denialKey{up: 7, rel: plant("audit-seen")}, now)
	// A denial's event, queued the way a request queues it: its message
	// quotes the planted value.
	x := &request{reg: &registryView{id: 99, group: e.group.ID},
		path: maven.Path{Rel: "org/example/audit-queued/1.0/x.jar", Kind: maven.Artifact}}
	s.audit.denied(x, up, maven.Verdict{Target: maven.TargetArtifactID, Value: plant("audit-queued")})
	s.small.lru.Add(plant("small-blob"), []byte("x"))
	s.urls.note(s.health, 7, plant("upstream-url"))
	f := &flight{key: flightKey{7, plant("flight-key")}, relSlash: plant("flight-path"), up: up,
		err: fmt.Errorf("wrapped: %w", errors.New(plant("flight-error")))}
	s.flightsMu.Lock()
	s.flights[f.key] = f
	s.flightsMu.Unlock()

	found, _ := keptAliases(s)
	all := strings.Join(found, "\n")
	for _, where := range []string{
		"composed-key", "verdict", "composed-denial", "bad-doc", "bad-doc-reason", "mark-key", "mark-refusal",
		"entry-key", "entry-view", "registry-view", "uncached-key", "uncached-entry", "download-key",
		"audit-seen", "small-blob", "upstream-url", "flight-key", "flight-path", "flight-error",
	} {
		if !strings.Contains(all, showScribbled(plant(where))) {
			t.Errorf("the walk did not find the string planted in %s; it found:\n%s", where, all)
		}
	}
	if !strings.Contains(all, "Server.engine.audit.ch<-0.") {
		t.Errorf("the walk did not find the queued audit event; it found:\n%s", all)
	}
	if len(s.audit.ch) != 1 {
		t.Fatalf("the walk took the audit queue's event and did not put it back (%d queued)", len(s.audit.ch))
	}
	// Take every plant out again: the env checks at its end that nothing
	// kept aliases a request, and its shutdown would act on the flight,
	// the queued event and the download count.
	<-s.audit.ch
	s.flightsMu.Lock()
	delete(s.flights, f.key)
	s.flightsMu.Unlock()
	s.downloads.take()
	s.composed.lru.Purge()
	s.composed.bad.Purge()
	s.marks.c.Purge()
	s.entries.Purge()
	s.regs.Remove(99)
	s.uncached.lru.Purge()
	s.audit.seen.Purge()
	s.small.lru.Purge()
	s.urls.note(s.health, 7, "")
}
