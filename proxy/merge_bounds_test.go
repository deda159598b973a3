package proxy

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The bounds of merged metadata (issue 20, item 3): what one merge may read,
// how many bytes of documents are merged at once, and which documents are
// merged at all. An api-token user can point an upstream at a server of
// their own, so each bound is what stands between that server and every
// tenant's memory.

// metaPaths are n artifact-level metadata paths, each with a document in
// both upstreams (a merge each).
func metaPaths(a, b *fakeUpstream, n int) []string {
	var paths []string
	for i := range n {
		p := fmt.Sprintf("org/example/m%d/maven-metadata.xml", i)
		a.set(p, fakeFile{body: metaXMLAt(p, "20240101000000", "1.0", "1.0", "1.0")})
		b.set(p, fakeFile{body: metaXMLAt(p, "20250101000000", "2.0", "2.0", "2.0")})
		paths = append(paths, p)
	}
	return paths
}

// messageOf is the "message" of a JSON error body.
func messageOf(t *testing.T, r resp) string {
	t.Helper()
	var m struct{ Message string }
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("body %q: %v", r.body, err)
	}
	return m.Message
}

// Merges past metadata.max_merging_bytes wait for room up to
// metadata.merge_wait, then get 503 with Retry-After (here at once: 0).
// An answer already merged and kept costs no room and is served. Once the
// room is back, the same requests are merged.
func TestMergesPastTheLimitRefused(t *testing.T) {
	e := newEnv(t, func(o *envOptions) { o.Metadata.MergeWait = -1 }) // refuse at once
	a, b := newFakeUpstream(t), newFakeUpstream(t)
	e.upstream(a.URL, nil, nil)
	e.upstream(b.URL, nil, nil)
	paths := metaPaths(a, b, 20)
	kept := "org/example/kept/maven-metadata.xml"
	a.set(kept, fakeFile{body: metaXMLAt(kept, "20240101000000", "1.0", "1.0", "1.0")})
	b.set(kept, fakeFile{body: metaXMLAt(kept, "20250101000000", "2.0", "2.0", "2.0")})
	e.get(kept).expect(t, 200)

	// Every byte of room taken: no merge fits.
	release, err := e.srv.merging.acquire(e.srv.merging.max)
	if err != nil {
		t.Fatal(err)
	}
	// Kept in memory: no merge, no room needed.
	if h := e.get(kept).expect(t, 200).header.Get("X-Registryd-Merge"); h != "complete" {
		t.Fatalf("the kept answer: X-Registryd-Merge %q", h)
	}
	var wg sync.WaitGroup
	answers := make([]resp, len(paths))
	for i, p := range paths {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i] = e.getNow(p)
		}()
	}
	wg.Wait()
	for i, r := range answers {
		r.expect(t, 503)
		if ra := r.header.Get("Retry-After"); ra != "1" {
			t.Fatalf("%s: Retry-After %q, want 1", paths[i], ra)
		}
		if msg := messageOf(t, r); !strings.Contains(msg, "too many maven-metadata.xml merges at once") {
			t.Fatalf("%s: message %q", paths[i], msg)
		}
	}
	if n := e.metric("registryd_metadata_merges_refused_total"); n != float64(len(paths)) {
		t.Fatalf("merges_refused_total = %v, want %d", n, len(paths))
	}
	if used := e.srv.merging.inUse(); used != e.srv.merging.max {
		t.Fatalf("%d bytes in use while the test holds them all (%d): a refused merge took or gave back room", used, e.srv.merging.max)
	}

	release()
	for _, p := range paths {
		if h := e.get(p).expect(t, 200).header.Get("X-Registryd-Merge"); h != "complete" {
			t.Fatalf("%s after the room came back: X-Registryd-Merge %q", p, h)
		}
	}
	if used := e.srv.merging.inUse(); used != 0 {
		t.Fatalf("%d bytes still in use after every merge ended", used)
	}
}

// A merge that finds no room waits for it (metadata.merge_wait) and is
// merged as soon as another merge ends.
func TestMergeWaitsForRoom(t *testing.T) {
	e := newEnv(t, func(o *envOptions) { o.Metadata.MergeWait = time.Hour })
	a, b := newFakeUpstream(t), newFakeUpstream(t)
	e.upstream(a.URL, nil, nil)
	e.upstream(b.URL, nil, nil)
	p := metaPaths(a, b, 1)[0]
	waiting := make(chan struct{}, 1)
	e.hooks.OnMergeWait = func() { waiting <- struct{}{} }
	release, err := e.srv.merging.acquire(e.srv.merging.max)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan resp)
	go func() { done <- e.getNow(p) }()
	select {
	case <-waiting:
	case r := <-done:
		t.Fatalf("answered %d without waiting for room", r.status)
	}
	release()
	(<-done).expect(t, 200)
	if n := e.metric("registryd_metadata_merge_waits_total"); n != 1 {
		t.Fatalf("merge_waits_total = %v, want 1", n)
	}
}

// Many merges at once never hold more documents than
// metadata.max_merging_bytes: here the room fits one merge, 16 ask at
// once, each waits its turn, and all are answered.
func TestConcurrentMergesBounded(t *testing.T) {
	const docBytes = 20 << 10
	e := newEnv(t, func(o *envOptions) {
		o.Metadata.MaxDocumentBytes = 64 << 10
		o.Metadata.MaxMergingBytes = 64 << 10 // one merge of two documents of docBytes
		o.Metadata.MergeWait = time.Hour
	})
	a, b := newFakeUpstream(t), newFakeUpstream(t)
	e.upstream(a.URL, nil, nil)
	e.upstream(b.URL, nil, nil)
	var paths []string
	for i := range 16 {
		p := fmt.Sprintf("org/example/big%d/maven-metadata.xml", i)
		a.set(p, fakeFile{body: metaOfSizeAt(p, "20240101000000", "1.0", docBytes)})
		b.set(p, fakeFile{body: metaOfSizeAt(p, "20250101000000", "2.0", docBytes)})
		paths = append(paths, p)
	}
	var mu sync.Mutex
	var peak int64
	merges := 0
	e.hooks.OnMergeAcquire = func(used int64) {
		mu.Lock()
		peak, merges = max(peak, used), merges+1
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for _, p := range paths {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r := e.getNow(p); r.status != 200 {
				t.Errorf("%s: %d %s", p, r.status, r.body)
			}
		}()
	}
	wg.Wait()
	if merges != len(paths) {
		t.Fatalf("%d merges for %d paths", merges, len(paths))
	}
	if peak > 2*docBytes+4<<10 {
		t.Fatalf("%d bytes of documents merged at once, room for one merge of two %d-byte documents", peak, docBytes)
	}
}

// metaOfSizeAt is metaOfSize at path.
func metaOfSizeAt(path, lastUpdated, mark string, size int) []byte {
	versions := []string{mark}
	for i := 0; len(versions)*32 < size; i++ {
		versions = append(versions, "0.0."+strconv.Itoa(i))
	}
	return metaXMLAt(path, lastUpdated, mark, mark, versions...)
}

// An upstream's document over metadata.max_versions is that upstream's
// failure; a merge of documents within it whose union is over it is
// answered 502, and that refusal is kept like an answer (asking again does
// not merge again); documents together larger than
// metadata.max_merging_bytes are refused at once.
func TestMergeCaps(t *testing.T) {
	e := newEnv(t, func(o *envOptions) {
		o.Metadata.MaxVersions = 10
		o.Metadata.MaxDocumentBytes = 8 << 10
		o.Metadata.MaxMergingBytes = 12 << 10
		o.Metadata.MergeWait = -1 // refuse at once
	})
	a, b := newFakeUpstream(t), newFakeUpstream(t)
	e.upstream(a.URL, nil, nil)
	bid := e.upstream(b.URL, nil, nil)
	versions := func(prefix string, n int) []string {
		var vs []string
		for i := range n {
			vs = append(vs, prefix+strconv.Itoa(i))
		}
		return vs
	}

	// One document over the cap: that upstream's failure.
	a.set(libMeta, fakeFile{body: metaXML("20240101000000", "1.0", "1.0", "1.0")})
	b.set(libMeta, fakeFile{body: metaXML("20250101000000", "2.0", "2.0", versions("2.", 11)...)})
	r := e.get(libMeta).expect(t, 200)
	if h := r.header.Get("X-Registryd-Merge"); h != fmt.Sprintf("partial; missing=%d", bid) {
		t.Fatalf("X-Registryd-Merge %q", h)
	}
	if got := parsed(t, r.body).Versioning.Versions; !slices.Equal(got, []string{"1.0"}) {
		t.Fatalf("versions %v", got)
	}
	const alone = "org/example/alone/maven-metadata.xml"
	b.set(alone, fakeFile{body: metaXMLAt(alone, "20250101000000", "2.0", "2.0", versions("2.", 11)...)})
	if msg := messageOf(t, e.get(alone).expect(t, 502)); !strings.Contains(msg, "document too large: more than 10 versions") {
		t.Fatalf("only the document over the cap: %q", msg)
	}

	// Each document within the cap, their union over it.
	const union = "org/example/union/maven-metadata.xml"
	a.set(union, fakeFile{body: metaXMLAt(union, "20240101000000", "1.0", "1.0", versions("1.", 6)...)})
	b.set(union, fakeFile{body: metaXMLAt(union, "20250101000000", "2.0", "2.0", versions("2.", 6)...)})
	if msg := messageOf(t, e.get(union).expect(t, 502)); msg != "502 Bad Gateway - the merged maven-metadata.xml would be too large: more than 10 versions" {
		t.Fatalf("a union over the cap: %q", msg)
	}
	release, err := e.srv.merging.acquire(e.srv.merging.max)
	if err != nil {
		t.Fatal(err)
	}
	e.get(union).expect(t, 502) // not 503: kept, not merged again
	release()

	// Documents that together outweigh all the room for merges.
	const heavy = "org/example/heavy/maven-metadata.xml"
	a.set(heavy, fakeFile{body: metaOfSizeAt(heavy, "20240101000000", "1.0", 7<<10)})
	b.set(heavy, fakeFile{body: metaOfSizeAt(heavy, "20250101000000", "2.0", 7<<10)})
	if msg := messageOf(t, e.get(heavy).expect(t, 502)); !strings.Contains(msg, "too large to merge (metadata.max_merging_bytes)") {
		t.Fatalf("documents over max_merging_bytes: %q", msg)
	}
}

// A maven-metadata.xml that names other coordinates than its path is that
// upstream's failure, never merged: an upstream cannot slip another
// artifact's versions (or plugins) into this one's answer.
func TestMisplacedMetadataNotMerged(t *testing.T) {
	e := newEnv(t)
	a, b := newFakeUpstream(t), newFakeUpstream(t)
	e.upstream(a.URL, nil, nil)
	bid := e.upstream(b.URL, nil, nil)

	a.set(libMeta, fakeFile{body: metaXML("20240101000000", "1.0", "1.0", "1.0")})
	b.set(libMeta, fakeFile{body: metaXMLAt("org/example/other/maven-metadata.xml", "20250101000000", "6.6.6", "6.6.6", "6.6.6")})
	r := e.get(libMeta).expect(t, 200)
	if h := r.header.Get("X-Registryd-Merge"); h != fmt.Sprintf("partial; missing=%d", bid) {
		t.Fatalf("X-Registryd-Merge %q", h)
	}
	m := parsed(t, r.body)
	if got := m.Versioning.Versions; !slices.Equal(got, []string{"1.0"}) || m.ArtifactID != "lib" {
		t.Fatalf("merged %s:%s %v", m.GroupID, m.ArtifactID, got)
	}

	// Alone, it is no answer: 502 with the reason.
	const p = "org/example/solo/maven-metadata.xml"
	b.set(p, fakeFile{body: metaXMLAt("com/elsewhere/solo/maven-metadata.xml", "20250101000000", "1.0", "1.0", "1.0")})
	if msg := messageOf(t, e.get(p).expect(t, 502)); !strings.Contains(msg, "upstream "+strconv.FormatInt(bid, 10)+": document for other coordinates: groupId differs from the path") {
		t.Fatalf("a misplaced document alone: %q", msg)
	}

	// Group level: another group's plugins.
	const g = "com/acme/maven-metadata.xml"
	a.set(g, fakeFile{body: []byte("<metadata><groupId>com.acme</groupId><plugins><plugin><prefix>x</prefix><artifactId>x-maven-plugin</artifactId></plugin></plugins></metadata>")})
	b.set(g, fakeFile{body: []byte("<metadata><groupId>com.evil</groupId><plugins><plugin><prefix>y</prefix><artifactId>y-maven-plugin</artifactId></plugin></plugins></metadata>")})
	r = e.get(g).expect(t, 200)
	if h := r.header.Get("X-Registryd-Merge"); h != fmt.Sprintf("partial; missing=%d", bid) {
		t.Fatalf("group level: X-Registryd-Merge %q", h)
	}
	if pl := parsed(t, r.body).Plugins; len(pl) != 1 || pl[0].Prefix != "x" {
		t.Fatalf("group level: plugins %+v", pl)
	}
}

// countingBody answers a maven-metadata.xml of declared bytes (with a
// Content-Length, or chunked), and counts what it managed to send.
func countingBody(declared int, chunked bool, sent *atomic.Int64) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/xml")
		if !chunked {
			w.Header().Set("Content-Length", strconv.Itoa(declared))
		}
		w.WriteHeader(200)
		chunk := []byte("<metadata><versioning><versions>" + strings.Repeat("<version>1</version>", 1600))
		for n := 0; n < declared; {
			m, err := w.Write(chunk[:min(len(chunk), declared-n)])
			sent.Add(int64(m))
			n += m
			if err != nil {
				return
			}
			if f, ok := w.(http.Flusher); ok && chunked {
				f.Flush()
			}
		}
	}
}

// A document over metadata.max_document_bytes is not downloaded past the
// limit nor stored: with a Content-Length over it, its body is not read at
// all; without one, the fill stops once the body passes it. The merge goes
// on without it, and the refusal is remembered a while.
func TestOversizedDocumentNotDownloaded(t *testing.T) {
	const limit = 64 << 10
	const huge = 100 << 20
	for _, chunked := range []bool{false, true} {
		t.Run(fmt.Sprintf("chunked=%v", chunked), func(t *testing.T) {
			e := newEnv(t, func(o *envOptions) { o.Metadata.MaxDocumentBytes = limit })
			a, b := newFakeUpstream(t), newFakeUpstream(t)
			e.upstream(a.URL, nil, nil)
			bid := e.upstream(b.URL, nil, nil)
			good := metaXML("20240101000000", "1.0", "1.0", "1.0")
			a.set(libMeta, fakeFile{body: good})
			var sent atomic.Int64
			b.set(libMeta, fakeFile{custom: countingBody(huge, chunked, &sent)})

			r := e.get(libMeta).expect(t, 200)
			if h := r.header.Get("X-Registryd-Merge"); h != fmt.Sprintf("partial; missing=%d", bid) {
				t.Fatalf("X-Registryd-Merge %q", h)
			}
			e.waitFills()
			if _, ok := e.entry(bid, "/"+libMeta); ok {
				t.Fatal("the oversized document was stored")
			}
			fetched := e.metric("registryd_upstream_fetched_bytes_total") - float64(len(good))
			switch {
			case !chunked && fetched != 0:
				t.Fatalf("%v bytes of a body whose Content-Length is over the limit were read", fetched)
			case chunked && fetched > limit+copyBufSize:
				t.Fatalf("%v bytes of a chunked body read, limit %d", fetched, limit)
			}
			t.Logf("read %v bytes, the upstream sent %d", fetched, sent.Load())
			// What the upstream managed to send is what the proxy read
			// plus what the sockets' buffers took: far from the whole.
			if s := sent.Load(); s >= huge/4 {
				t.Fatalf("the upstream sent %d of %d bytes", s, huge)
			}
			if m, ok := e.srv.marks.recall(e.st, bid, libMeta, e.clock.Now()); !ok || m.refused == nil {
				t.Fatal("the refusal is not remembered: the next merge would download it again")
			}
		})
	}
}

// The documents of a merge are read from their stored blobs, under the
// room for merges, not copied out of their fills by each request: except
// when the disk is full and a document is not stored, when it is read from
// its fill, as the one way to have it. Both merge alike.
func TestMergeOfUncachedDocuments(t *testing.T) {
	for _, full := range []bool{false, true} {
		t.Run(fmt.Sprintf("disk full=%v", full), func(t *testing.T) {
			e := newEnv(t)
			if full {
				e.fakeVolume(100 << 20) // below the 1% reserve: nothing is stored
			}
			a, b := newFakeUpstream(t), newFakeUpstream(t)
			aid := e.upstream(a.URL, nil, nil)
			e.upstream(b.URL, nil, nil)
			const size = 3 * memBodyMax // streamed behind the fill
			a.set(libMeta, fakeFile{body: metaOfSize("20240101000000", "1.0", size)})
			b.set(libMeta, fakeFile{body: metaOfSize("20250101000000", "2.0", size)})
			r := e.get(libMeta).expect(t, 200)
			if h := r.header.Get("X-Registryd-Merge"); h != "complete" {
				t.Fatalf("X-Registryd-Merge %q", h)
			}
			if v := parsed(t, r.body).Versioning.Versions; !slices.Contains(v, "1.0") || !slices.Contains(v, "2.0") {
				t.Fatalf("merged %d versions without both marks", len(v))
			}
			e.waitFills()
			if _, ok := e.entry(aid, "/"+libMeta); ok == full {
				t.Fatalf("stored: %v, disk full: %v", ok, full)
			}
		})
	}
}

// Requests for the same answer out of the same documents at once wait for
// one merge and share it (a herd after a release changed a document): one
// merge, every answer 200, even with room for a single merge and none to
// wait for.
func TestConcurrentSameMergeOnce(t *testing.T) {
	const herd = 16
	e := newEnv(t, func(o *envOptions) { o.Metadata.MergeWait = -1 }) // refuse at once
	a, b := newFakeUpstream(t), newFakeUpstream(t)
	e.upstream(a.URL, nil, nil)
	e.upstream(b.URL, nil, nil)
	p := metaPaths(a, b, 1)[0]
	following := make(chan struct{}, herd)
	e.hooks.OnComposeFollow = func() { following <- struct{}{} }
	proceed := make(chan struct{})
	acquired := make(chan struct{}, herd)
	e.hooks.OnMergeAcquire = func(int64) {
		acquired <- struct{}{}
		<-proceed
	}
	var wg sync.WaitGroup
	answers := make([]resp, herd)
	for i := range herd {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i] = e.getNow(p)
		}()
	}
	// One merge starts and holds; the others all wait for it.
	for followers, merges := 0, 0; followers < herd-1 || merges < 1; {
		select {
		case <-following:
			followers++
		case <-acquired:
			if merges++; merges > 1 {
				close(proceed)
				wg.Wait()
				t.Fatalf("a second merge of the same documents started (%d followers so far)", followers)
			}
		}
	}
	close(proceed)
	wg.Wait()
	for _, r := range answers {
		if h := r.expect(t, 200).header.Get("X-Registryd-Merge"); h != "complete" {
			t.Fatalf("X-Registryd-Merge %q", h)
		}
	}
	if n := len(acquired); n != 0 {
		t.Fatalf("%d more merges after the one all waited for", n)
	}
}
