package proxy

import (
	"fmt"
	"testing"
)

// TestPendingStoresMergeLargeDocument: past cache.max_pending_stores a fill
// is served uncached with its whole body to its clients
// (pendingstores.go). A merge of maven-metadata.xml reads a document larger
// than memBodyMax from the fill's stored entry (flightDoc): with the store
// turned away there is none, and the upstream's document must not drop out
// of the merged answer (its versions would be missing from a 200).
func TestPendingStoresMergeLargeDocument(t *testing.T) {
	e, db, taken := pendingEnv(t)
	a, b := newFakeUpstream(t), newFakeUpstream(t)
	e.upstream(a.URL, nil, nil)
	e.upstream(b.URL, nil, nil)
	var many []string
	for i := range 1000 {
		many = append(many, fmt.Sprintf("1.0.%d", i))
	}
	a.set(libMeta, fakeFile{body: metaXML("20240101000000", "1.0.999", "1.0.999", many...)})
	b.set(libMeta, fakeFile{body: metaXML("20250101000000", "2.0", "2.0", "2.0")})
	if n := len(metaXML("20240101000000", "1.0.999", "1.0.999", many...)); n <= memBodyMax {
		t.Fatalf("document of %d bytes is not over memBodyMax", n)
	}

	db.hold()
	for i := range 4 {
		p := fmt.Sprintf("org/ex/b%d/1.0/b%d-1.0.pom", i, i)
		a.set(p, fakeFile{body: []byte(p)})
		e.getNow(p).expect(t, 200)
		if !<-taken {
			t.Fatalf("fill %d found no store slot", i)
		}
	}
	r := e.getNow(libMeta)
	t.Logf("status %d, X-Registryd-Merge %q", r.status, r.header.Get("X-Registryd-Merge"))
	r.expect(t, 200)
	m := parsed(t, r.body)
	if got := len(m.Versioning.Versions); got != 1001 {
		t.Fatalf("merged answer has %d versions, want 1001 (X-Registryd-Merge %q)", got, r.header.Get("X-Registryd-Merge"))
	}
	if h := r.header.Get("X-Registryd-Merge"); h != "complete" {
		t.Fatalf("X-Registryd-Merge %q", h)
	}
}

// TestPendingStoresSingleUpstreamMetadata: the same with one upstream: the
// document is the whole answer, and must be served, not a 5xx.
func TestPendingStoresSingleUpstreamMetadata(t *testing.T) {
	e, db, taken := pendingEnv(t)
	a := newFakeUpstream(t)
	e.upstream(a.URL, nil, nil)
	var many []string
	for i := range 1000 {
		many = append(many, fmt.Sprintf("1.0.%d", i))
	}
	doc := metaXML("20240101000000", "1.0.999", "1.0.999", many...)
	a.set(libMeta, fakeFile{body: doc})
	db.hold()
	for i := range 4 {
		p := fmt.Sprintf("org/ex/b%d/1.0/b%d-1.0.pom", i, i)
		a.set(p, fakeFile{body: []byte(p)})
		e.getNow(p).expect(t, 200)
		<-taken
	}
	r := e.getNow(libMeta)
	t.Logf("status %d body %.200s", r.status, r.body)
	r.expect(t, 200).expectBody(t, string(doc))
}
