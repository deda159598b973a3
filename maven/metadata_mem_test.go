package maven

import (
	"bytes"
	"fmt"
	"runtime"
	"testing"

	"registryd/internal/heappeak"
)

// largeMetadata is an artifact-level document of about size bytes in Maven
// Central's layout, listing versions from the first'th on.
func largeMetadata(size, first int) []byte {
	var b bytes.Buffer
	b.WriteString("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<metadata>\n  <groupId>org.example</groupId>\n  <artifactId>lib</artifactId>\n  <versioning>\n    <latest>9.9.9</latest>\n    <release>9.9.9</release>\n    <versions>\n")
	for k := first; b.Len() < size-100; k++ {
		fmt.Fprintf(&b, "      <version>%d.%d.%d", k/10000, k/100%100, k%100)
		switch k % 7 {
		case 0:
			b.WriteString("-SNAPSHOT")
		case 3:
			fmt.Fprintf(&b, "-rc%d", k%4)
		}
		b.WriteString("</version>\n")
	}
	b.WriteString("    </versions>\n    <lastUpdated>20240101000000</lastUpdated>\n  </versioning>\n</metadata>\n")
	return b.Bytes()
}

func mergeLarge(tb testing.TB, raw [][]byte) []byte {
	docs := make([]*Metadata, len(raw))
	for i, r := range raw {
		d, err := ParseMetadataBytes(r, MetadataLimits{Bytes: 1 << 30})
		if err != nil {
			tb.Fatal(err)
		}
		docs[i] = d
	}
	return MergeMetadata(docs, nil).Marshal()
}

// BenchmarkMergeLarge: two documents of 14.5 MiB (about 460,000 versions each,
// overlapping by 260,000), parsed, merged and rendered, as a merge of the largest
// documents metadata.max_document_bytes lets through. peak/in is the largest heap
// growth seen while it runs (sampled), over the documents' size; B/op over SetBytes
// is the allocation per byte of documents.
func BenchmarkMergeLarge(b *testing.B) {
	raw := [][]byte{largeMetadata(14<<20+512<<10, 0), largeMetadata(14<<20+512<<10, 200000)}
	in := len(raw[0]) + len(raw[1])
	b.SetBytes(int64(in))
	b.ReportAllocs()
	var peak uint64
	for b.Loop() {
		p, _ := heappeak.During(func() { mergeLarge(b, raw) })
		peak = max(peak, p)
	}
	b.ReportMetric(float64(peak)/float64(in), "peak/in")
}

// TestMergeMemoryBounded: parsing two large documents, merging them and rendering
// the result allocates at most a few times the documents' size, and what it holds
// at the end (the parsed documents, the merge, the bytes) less than that. Before the
// compact parse and merge it was about 20 times (encoding/xml's tokens, a parsed
// version and map entries per version).
func TestMergeMemoryBounded(t *testing.T) {
	raw := [][]byte{largeMetadata(2<<20, 0), largeMetadata(2<<20, 30000)}
	in := uint64(len(raw[0]) + len(raw[1]))
	var docs []*Metadata
	var merged *Metadata
	var out []byte
	run := func() {
		docs = make([]*Metadata, len(raw))
		for i, r := range raw {
			d, err := ParseMetadataBytes(r, MetadataLimits{Bytes: 1 << 30})
			if err != nil {
				t.Fatal(err)
			}
			docs[i] = d
		}
		merged = MergeMetadata(docs, func(int, string) bool { return true })
		out = merged.Marshal()
	}
	run() // warm up: nothing lazily built counts
	docs, merged, out = nil, nil, nil
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	run()
	runtime.GC()
	runtime.ReadMemStats(&after)
	alloc := after.TotalAlloc - before.TotalAlloc
	held := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("documents %d bytes: allocated %.2f times, held %.2f times", in, float64(alloc)/float64(in), float64(held)/float64(in))
	if n := len(merged.Versioning.Versions); n < 80000 {
		t.Fatalf("the merge listed %d versions: the documents are not what the test means", n)
	}
	if alloc > 6*in {
		t.Errorf("a merge allocated %d bytes for %d bytes of documents (%.1f times), want at most 6", alloc, in, float64(alloc)/float64(in))
	}
	if held > 4*int64(in) {
		t.Errorf("a merge holds %d bytes for %d bytes of documents (%.1f times), want at most 4", held, in, float64(held)/float64(in))
	}
	runtime.KeepAlive(raw)
	runtime.KeepAlive(docs)
	runtime.KeepAlive(out)
}
