package itest

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestMergedMetadataUnderAdminChanges reproduces issue 20's wrong merged
// metadata: keep-alive clients ask for the merged maven-metadata.xml of
// random artifacts (m0..m99, on two upstreams) while an admin edits one
// upstream's description every 0.1 s. Each edit moves the cache
// generation, so every merged answer is built again and kept under its
// path; when that key was a view of the request's buffer, the connection's
// next request rewrote it under the cache: answers named another artifact
// (asked m59, got <artifactId>m86</artifactId>) or failed with a 500
// (golang-lru panicking on an entry whose key had changed). Every answer
// must be a 200 that names the artifact asked for, and the daemon must log
// no 500.
//
// metadata.memory_bytes is small (room for about 20 merged answers of the
// 100), so kept answers are evicted as well as replaced, as on a busy
// server: the eviction of a changed key is what made golang-lru panic, and
// without it the run would need minutes to show the fault at all.
//
// The length of the run is the admin's: 20 edits, one per tick. Nothing
// is timed: the clients go on until the edits are done, each at least a
// fixed number of requests.
func TestMergedMetadataUnderAdminChanges(t *testing.T) {
	const (
		artifacts = 100
		clients   = 8
		edits     = 20
		minAsks   = 50 // per client, however slow the machine
	)
	meta := func(i int) string { return fmt.Sprintf("/maven2/org/example/m%d/maven-metadata.xml", i) }
	docs, other := map[string][]byte{}, map[string][]byte{}
	for i := range artifacts {
		docs[meta(i)], other[meta(i)] = churnMeta(i, "1."), churnMeta(i, "2.")
	}
	a, b := metadataUpstream(t, docs), metadataUpstream(t, other)

	d := Start(t, map[string]string{"REGISTRYD_METADATA_MEMORY_BYTES": "16KiB"})
	f := d.Fix(t)
	group := f.Group("churn", 0, "private")
	registry := f.Registry(group, "maven")
	edited := f.Upstream(registry, a.URL+"/maven2", nil)
	f.Upstream(registry, b.URL+"/maven2", nil)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("registryd's log (last 40 lines):\n%s", lastLines(d.Logs(), 40))
		}
	})

	var (
		done     = make(chan struct{})
		answers  atomic.Int64
		mu       sync.Mutex
		problems []string
		// failed: not a 200; another: a 200 naming another artifact.
		failed, another int
	)
	problem := func(count *int, format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		*count++
		if len(problems) < 10 {
			problems = append(problems, fmt.Sprintf(format, args...))
		}
	}
	var wg sync.WaitGroup
	// Also when an edit fails the test: the clients stop before the daemon.
	stopClients := sync.OnceFunc(func() {
		close(done)
		wg.Wait()
	})
	defer stopClients()
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// One kept-alive connection per client: the daemon reuses its
			// request buffers for every request on it.
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1, MaxConnsPerHost: 1}}
			defer client.CloseIdleConnections()
			rng := rand.New(rand.NewPCG(uint64(c), 20))
			for n := 0; ; n++ {
				if n >= minAsks {
					select {
					case <-done:
						return
					default:
					}
				}
				i := rng.IntN(artifacts)
				status, body, err := churnGet(client, d.pxURL(registry, fmt.Sprintf("org/example/m%d/maven-metadata.xml", i)))
				answers.Add(1)
				want := fmt.Sprintf("<artifactId>m%d</artifactId>", i)
				switch {
				case err != nil:
					problem(&failed, "m%d: %v", i, err)
				case status != 200:
					problem(&failed, "m%d: status %d: %.200s", i, status, body)
				case !bytes.Contains(body, []byte(want)):
					problem(&another, "asked m%d, got %.120s", i, churnArtifact(body))
				}
			}
		}()
	}

	// The admin: one description edit per tick, each checked.
	tick := time.NewTicker(100 * time.Millisecond)
	for n := range edits {
		<-tick.C
		d.Do("PATCH", fmt.Sprintf("%s/upstreams/%d", vrBase, edited), rootToken,
			map[string]any{"description": fmt.Sprintf("edit %d", n)}).Expect(t, 200)
	}
	tick.Stop()
	stopClients()

	if failed+another > 0 {
		t.Errorf("of %d answers under admin changes, %d named another artifact and %d failed, e.g.:\n  %s",
			answers.Load(), another, failed, strings.Join(problems, "\n  "))
	}
	for _, line := range strings.Split(d.Logs(), "\n") {
		if strings.Contains(line, `"msg":"proxy request failed"`) {
			t.Errorf("the proxy answered a 500: %s", line)
			break
		}
	}
}

// churnMeta is artifact m<i>'s maven-metadata.xml with one version,
// prefix+i.
func churnMeta(i int, prefix string) []byte {
	return fmt.Appendf(nil, `<?xml version="1.0" encoding="UTF-8"?>
<metadata>
  <groupId>org.example</groupId>
  <artifactId>m%[1]d</artifactId>
  <versioning>
    <latest>%[2]s%[1]d</latest>
    <release>%[2]s%[1]d</release>
    <versions>
      <version>%[2]s%[1]d</version>
    </versions>
    <lastUpdated>20250101000000</lastUpdated>
  </versioning>
</metadata>
`, i, prefix)
}

// metadataUpstream serves docs (by request path) as XML, 404 otherwise.
func metadataUpstream(t *testing.T, docs map[string][]byte) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		doc, ok := docs[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/xml")
		w.Write(doc)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// churnGet is one GET as root; errors are returned, not fatal, for the
// clients' goroutines.
func churnGet(c *http.Client, url string) (int, []byte, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Private-Token", rootToken)
	res, err := c.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	return res.StatusCode, body, err
}

// churnArtifact is the artifactId element of a metadata document, for the
// failure message.
func churnArtifact(body []byte) []byte {
	if i := bytes.Index(body, []byte("<artifactId>")); i >= 0 {
		if j := bytes.Index(body[i:], []byte("</artifactId>")); j >= 0 {
			return body[i : i+j+len("</artifactId>")]
		}
	}
	return body
}
