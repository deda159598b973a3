package store

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// BenchmarkGroupCommit publishes small files from many goroutines at once,
// as fills of a burst of misses do, with group commit off (each entry its
// own transaction, as before it) and on, in the same run, and reports both
// rates and their ratio:
//
//	go test -run '^$' -bench BenchmarkGroupCommit -benchtime 3x ./store/
//	REGISTRYD_TEST_STORE=postgres go test -run '^$' -bench BenchmarkGroupCommit -benchtime 3x ./store/
//
// Each iteration publishes groupCommitFiles files with groupCommitWriters
// goroutines. publish is the whole of a fill's store (temp file written,
// fsynced, renamed into place, directory fsynced, entry committed); index
// is the entry's commit alone (PutCacheEntry).
func BenchmarkGroupCommit(b *testing.B) {
	const (
		groupCommitFiles   = 2000
		groupCommitWriters = 64
	)
	rate := func(o Options, round int, indexOnly bool) float64 {
		s, _ := openCounting(b, o)
		blobs, err := OpenBlobs(b.TempDir())
		noErr(b, err)
		g := topGroup(b, s, "acme")
		r := ok(s.CreateRegistry(g.ID, "main", ""))(b)
		u := up(b, s, r.ID, "https://repo.example.com/maven2")
		e := blobEnv{s: s, b: blobs, up: u.ID}
		next := make(chan int)
		var wg sync.WaitGroup
		start := time.Now()
		for range groupCommitWriters {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range next {
					rel, content := fmt.Sprintf("/g/a/%d/a-%d.pom", i, i), fmt.Sprintf("<project>%d %d</project>", round, i)
					var err error
					if indexOnly {
						_, err = s.PutCacheEntry(CacheEntry{UpstreamID: u.ID, RelativePath: rel, SHA256: sha(content), Size: int64(len(content))})
					} else {
						_, err = e.tryPublish(rel, content)
					}
					if err != nil {
						b.Error(err)
					}
				}
			}()
		}
		for i := range groupCommitFiles {
			next <- i
		}
		close(next)
		wg.Wait()
		took := time.Since(start)
		s.Close()
		return groupCommitFiles / took.Seconds()
	}
	for _, mode := range []struct {
		name      string
		indexOnly bool
	}{{"publish", false}, {"index", true}} {
		b.Run(mode.name, func(b *testing.B) {
			var alone, batched float64
			for i := 0; i < b.N; i++ {
				alone += rate(Options{BatchMaxEntries: 1}, i, mode.indexOnly)
				batched += rate(Options{}, i, mode.indexOnly)
			}
			b.ReportMetric(alone/float64(b.N), "alone_entries/s")
			b.ReportMetric(batched/float64(b.N), "batched_entries/s")
			b.ReportMetric(batched/alone, "speedup")
		})
	}
}
