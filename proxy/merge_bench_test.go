package proxy

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"registryd/internal/heappeak"
)

// largeMetaAt is an artifact-level document of about size bytes at path, in
// Maven Central's layout, listing versions from the first'th on.
func largeMetaAt(path string, size, first int) []byte {
	var b bytes.Buffer
	head := string(metaXMLAt(path, "20240101000000", "9.9.9", "9.9.9"))
	cut := len(head) - len("    </versions>\n    <lastUpdated>20240101000000</lastUpdated>\n  </versioning>\n</metadata>\n")
	b.WriteString(head[:cut])
	for k := first; b.Len() < size-100; k++ {
		fmt.Fprintf(&b, "      <version>%d.%d.%d</version>\n", k/10000, k/100%100, k%100)
	}
	b.WriteString(head[cut:])
	return b.Bytes()
}

// BenchmarkConcurrentLargeMerges: requests at once for merged answers of
// two upstream documents of 14.5 MiB each (the largest the default
// metadata.max_document_bytes lets through), on the same path (a herd) or
// on distinct paths (distinct merges), with the limits raised to let them
// through (their union, 21 MiB and 660,000 versions, is over the default
// limits, which refuse it unmerged); each op is a new daemon, the
// documents fetched, merged and answered. peak-MB is the largest growth of
// the heap's objects seen while the requests run (sampled); alloc-MB what
// they allocated in all.
func BenchmarkConcurrentLargeMerges(b *testing.B) {
	const docSize = 14<<20 + 512<<10
	for _, c := range []struct {
		n        int
		distinct bool
	}{{4, false}, {4, true}, {20, false}} {
		b.Run(fmt.Sprintf("requests=%d/distinct=%v", c.n, c.distinct), func(b *testing.B) {
			var peak, alloc uint64
			statuses := map[int]int{}
			for b.Loop() {
				b.StopTimer()
				e := newEnv(b, func(o *envOptions) {
					// Let these documents and their merge through (the
					// defaults refuse them for their versions): the cost
					// measured is the merge's.
					o.Metadata.MaxVersions = 1 << 20
					o.Metadata.MaxDocumentBytes = 32 << 20
					// Every merge waits its turn (none refused): the
					// figures compare with a daemon that merged them all.
					o.Metadata.MergeWait = time.Minute
				})
				up1, up2 := newFakeUpstream(b), newFakeUpstream(b)
				e.upstream(up1.URL, nil, nil)
				e.upstream(up2.URL, nil, nil)
				paths := make([]string, c.n)
				for i := range paths {
					paths[i] = libMeta
					if c.distinct {
						paths[i] = "org/example/lib" + strconv.Itoa(i) + "/maven-metadata.xml"
					}
					up1.set(paths[i], fakeFile{body: largeMetaAt(paths[i], docSize, 0)})
					up2.set(paths[i], fakeFile{body: largeMetaAt(paths[i], docSize, 200000)})
				}
				b.StartTimer()
				var mu sync.Mutex
				p, a := heappeak.During(func() {
					var wg sync.WaitGroup
					for _, path := range paths {
						wg.Add(1)
						go func() {
							defer wg.Done()
							status := e.getDiscard(b, path)
							mu.Lock()
							statuses[status]++
							mu.Unlock()
						}()
					}
					wg.Wait()
				})
				peak, alloc = max(peak, p), max(alloc, a)
			}
			b.ReportMetric(float64(peak)/(1<<20), "peak-MB")
			b.ReportMetric(float64(alloc)/(1<<20), "alloc-MB")
			b.Logf("answers by status: %v", statuses)
		})
	}
}

// getDiscard downloads path as root and drops the body as it comes: the
// client, in this process, holds none of it.
func (e *env) getDiscard(tb testing.TB, path string) int {
	req, err := http.NewRequest(http.MethodGet, e.base+"/"+strconv.FormatInt(e.registry, 10)+"/"+path, nil)
	if err != nil {
		tb.Fatal(err)
	}
	req.Header.Set("Private-Token", rootToken)
	res, err := e.client.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer res.Body.Close()
	io.Copy(io.Discard, res.Body)
	return res.StatusCode
}
