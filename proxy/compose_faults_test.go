package proxy

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"
)

// metaOfSize is an artifact-level maven-metadata.xml that names version
// mark and enough filler versions to be about size bytes.
func metaOfSize(lastUpdated, mark string, size int) []byte {
	versions := []string{mark}
	for i := 0; len(versions)*32 < size; i++ {
		versions = append(versions, "0.0."+strconv.Itoa(i))
	}
	return metaXML(lastUpdated, mark, mark, versions...)
}

// jarOnly are fault classes that are faults for a binary file only: a
// text/plain or empty answer is a fine answer for an XML file (the empty
// one then fails the merge's parser, as TestPartialMerge covers).
var jarOnly = map[string]bool{"text/plain for a jar": true, "empty 200 for a jar": true}

// Every upstream fault class (DESIGN.md "Tests") on the upstream documents
// of a merged maven-metadata.xml. On a miss the faulty upstream's document
// is missing from a partial merge of the others, and nothing of it is
// cached or remembered as a 404; on a revalidation its stored copy goes on
// being merged, unchanged, and the merge is complete. Bodies small enough
// to be read whole before the answer and large ones read behind the fill.
func TestMergedMetadataFaults(t *testing.T) {
	for _, size := range []int{2 << 10, 200 << 10} {
		large := size > memBodyMax
		for _, c := range badAnswers(large) {
			if jarOnly[c.name] {
				continue
			}
			t.Run("miss/"+strconv.Itoa(size)+"/"+c.name, func(t *testing.T) {
				e := envFor(t, c)
				bad, good := newFakeUpstream(t), newFakeUpstream(t)
				badURL := bad.URL
				if c.down {
					badURL = downURL(t)
				} else {
					bad.set(libMeta, c.file(metaOfSize("20250101000000", "9.9", size)))
				}
				good.set(libMeta, fakeFile{body: metaOfSize("20240101000000", "1.0", size)})
				badID := e.upstream(badURL, nil, nil)
				goodID := e.upstream(good.URL, nil, nil)

				r := e.get(libMeta).expect(t, 200)
				versions := parsed(t, r.body).Versioning.Versions
				if !slices.Contains(versions, "1.0") || slices.Contains(versions, "9.9") {
					t.Fatalf("merged versions hold 1.0: %v, 9.9: %v", slices.Contains(versions, "1.0"), slices.Contains(versions, "9.9"))
				}
				if h := r.header.Get("X-Registryd-Merge"); h != fmt.Sprintf("partial; missing=%d", badID) {
					t.Fatalf("X-Registryd-Merge %q", h)
				}
				e.waitFills()
				if _, ok := e.entry(badID, "/"+libMeta); ok {
					t.Fatal("the faulty answer was cached")
				}
				if _, ok := e.entry(goodID, "/"+libMeta); !ok {
					t.Fatal("the good upstream's document was not cached")
				}
				if e.rememberedAbsent(badID, libMeta) {
					t.Fatal("a faulty answer was remembered as a 404")
				}
				e.noBrokenState()
			})
			t.Run("revalidation/"+strconv.Itoa(size)+"/"+c.name, func(t *testing.T) {
				e := envFor(t, c)
				bad, good := newFakeUpstream(t), newFakeUpstream(t)
				stored := metaOfSize("20230101000000", "0.5", size)
				bad.set(libMeta, fakeFile{body: stored, etag: `"v1"`})
				good.set(libMeta, fakeFile{body: metaOfSize("20240101000000", "1.0", size), etag: `"g1"`})
				badID := e.upstream(bad.URL, nil, hours(1))
				e.upstream(good.URL, nil, hours(1))
				e.get(libMeta).expect(t, 200)
				e.waitFills()

				e.clock.Advance(2 * time.Hour)
				if c.down {
					bad.srv.Close()
				} else {
					bad.set(libMeta, c.file(metaOfSize("20250101000000", "9.9", size)))
				}
				r := e.get(libMeta).expect(t, 200)
				versions := parsed(t, r.body).Versioning.Versions
				if !slices.Contains(versions, "0.5") || !slices.Contains(versions, "1.0") || slices.Contains(versions, "9.9") {
					t.Fatalf("merged versions: want the stored 0.5 and 1.0 without 9.9, got %d versions", len(versions))
				}
				if h := r.header.Get("X-Registryd-Merge"); h != "complete" {
					t.Fatalf("X-Registryd-Merge %q: a stale copy is a complete merge", h)
				}
				e.waitFills()
				after, ok := e.entry(badID, "/"+libMeta)
				sum := sha256.Sum256(stored)
				if !ok || after.SHA256 != hex.EncodeToString(sum[:]) {
					t.Fatalf("the stored copy was replaced or removed: %v", ok)
				}
				if e.rememberedAbsent(badID, libMeta) {
					t.Fatal("a faulty answer was remembered as a 404")
				}
				e.noBrokenState()
			})
		}
	}
}
