package store

import (
	"fmt"
	"slices"
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
		e, _ := countingBlobEnv(b, o)
		s := e.s
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
						_, err = s.PutCacheEntry(CacheEntry{UpstreamID: e.up, RelativePath: rel, SHA256: sha(content), Size: int64(len(content))})
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

// BenchmarkAdminWriteUnderFills measures how long a write of its own (an
// admin change: a group created) takes while groupCommitWriters goroutines
// commit entries without a pause, group commit off and on, in the same run;
// it reports the median and the 99th percentile of 200 such writes:
//
//	go test -run '^$' -bench BenchmarkAdminWriteUnderFills -benchtime 1x ./store/
func BenchmarkAdminWriteUnderFills(b *testing.B) {
	const writers, admins = 64, 200
	latencies := func(o Options, round int) (p50, p99 time.Duration) {
		e, _ := countingBlobEnv(b, o)
		s := e.s
		stop := keepWriting(b, writers, func(w, i int) error {
			rel := fmt.Sprintf("/g/%d/%d.pom", w, i)
			_, err := s.PutCacheEntry(CacheEntry{UpstreamID: e.up, RelativePath: rel, SHA256: sha(rel), Size: 1})
			return err
		})
		var took []time.Duration
		for i := range admins {
			start := time.Now()
			if _, err := s.CreateGroup(NewGroup{Name: fmt.Sprintf("g%d-%d", round, i), Path: fmt.Sprintf("g%d-%d", round, i)}); err != nil {
				b.Fatal(err)
			}
			took = append(took, time.Since(start))
			time.Sleep(5 * time.Millisecond)
		}
		stop()
		s.Close()
		slices.Sort(took)
		return took[len(took)/2], took[len(took)*99/100]
	}
	var alone50, alone99, batched50, batched99 time.Duration
	for i := 0; i < b.N; i++ {
		p50, p99 := latencies(Options{BatchMaxEntries: 1}, i)
		alone50, alone99 = alone50+p50, alone99+p99
		p50, p99 = latencies(Options{}, i)
		batched50, batched99 = batched50+p50, batched99+p99
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(b.N) / float64(time.Millisecond) }
	b.ReportMetric(ms(alone50), "alone_p50_ms")
	b.ReportMetric(ms(alone99), "alone_p99_ms")
	b.ReportMetric(ms(batched50), "batched_p50_ms")
	b.ReportMetric(ms(batched99), "batched_p99_ms")
}
