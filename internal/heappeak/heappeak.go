// Package heappeak measures the memory a piece of work takes, for benchmarks
// that report it (maven.BenchmarkMergeLarge, proxy's
// BenchmarkConcurrentLargeMerges): the largest growth of the heap's objects
// while it runs, sampled, and the bytes it allocated. Standard library only.
package heappeak

import (
	"runtime"
	"runtime/metrics"
	"sync/atomic"
	"time"
)

// During runs f after a collection and returns the largest growth of the
// heap's objects seen meanwhile (sampled every 200µs, so a peak shorter than
// that may be missed) and the bytes allocated, by every goroutine, while it
// ran.
func During(f func()) (peak, alloc uint64) {
	runtime.GC()
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	base, allocBase := s[0].Value.Uint64(), s[1].Value.Uint64()
	var top atomic.Uint64
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		for {
			metrics.Read(s)
			if v := s[0].Value.Uint64(); v > top.Load() {
				top.Store(v)
			}
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Microsecond):
			}
		}
	}()
	f()
	close(stop)
	<-done
	metrics.Read(s)
	return top.Load() - min(base, top.Load()), s[1].Value.Uint64() - allocBase
}
