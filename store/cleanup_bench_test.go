package store

import (
	"fmt"
	"testing"
	"time"
)

// cleanupBenchStore is a store with n entries of one upstream of group
// acme, with realistic records (digests, content type), all created 40 days
// before its clock; the even ones downloaded 10 days before it, so a
// 30-day policy deletes half of them.
func cleanupBenchStore(b *testing.B, n int) (*Store, Group) {
	b.Helper()
	c := newClock()
	s, err := openAt(b, b.TempDir(), Options{SecretKey: testKey, Now: c.Now})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	g := topGroup(b, s, "acme")
	r := ok(s.CreateRegistry(g.ID, "main", ""))(b)
	u := up(b, s, r.ID, "https://a.example/m").ID
	for start := 0; start < n; start += 20000 {
		var es []CacheEntry
		var dl []DownloadCount
		for i := start; i < min(n, start+20000); i++ {
			rel := fmt.Sprintf("/org/example/lib%d/1.0/lib%d-1.0.jar", i, i)
			es = append(es, CacheEntry{UpstreamID: u, RelativePath: rel, Size: 100, MD5: fmt.Sprintf("%032x", i),
				SHA1: fmt.Sprintf("%040x", i), SHA256: fmt.Sprintf("%064x", i), SHA512: fmt.Sprintf("%0128x", i),
				ContentType: "application/java-archive", CheckedAt: c.Now()})
			if i%2 == 0 {
				dl = append(dl, DownloadCount{UpstreamID: u, Rel: rel, Count: 1, Last: c.Now().Add(30 * day)})
			}
		}
		noErr(b, s.PutCacheEntries(es))
		noErr(b, s.AddDownloads(dl))
	}
	c.Advance(40 * day)
	return s, g
}

// BenchmarkCleanupDryRun: one dry run (CleanupCandidates) over 100k entries.
func BenchmarkCleanupDryRun(b *testing.B) {
	s, g := cleanupBenchStore(b, 100000)
	b.ResetTimer()
	for range b.N {
		p := ok(s.CleanupCandidates(g.ID, 30, 0, 20))(b)
		if p.Count != 50000 {
			b.Fatalf("%d candidates", p.Count)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/100000, "ns/entry")
}

// BenchmarkCleanupRun: one run over 100k entries deleting half of them, in
// batches of 500 (the default); reports the slowest batch, which is how
// long a fill may wait for the run.
func BenchmarkCleanupRun(b *testing.B) {
	var worst time.Duration
	batches := 0
	for range b.N {
		b.StopTimer()
		s, g := cleanupBenchStore(b, 100000)
		ok(s.CreateCleanupPolicy(g.ID, CleanupPolicyPatch{}))(b)
		ok(s.StartCleanupRun(g.ID, CleanupStart{}))(b)
		b.StartTimer()
		for {
			start := time.Now()
			bt := ok(s.CleanupRunBatch(g.ID, 500))(b)
			worst = max(worst, time.Since(start))
			batches++
			if bt.Done {
				break
			}
		}
	}
	b.ReportMetric(float64(worst.Microseconds())/1000, "max-batch-ms")
	b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(batches), "ms/batch")
}
