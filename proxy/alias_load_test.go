package proxy

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/valyala/fasthttp"

	"registryd/store"
)

// TestBufferReuseUnderLoad drives the handler the way fasthttp does under
// load: keep-alive clients on a few connections, so each RequestCtx and its
// buffers serve request after request, and after each answer the request's
// bytes are scribbled over (as the next request would overwrite them, only
// sooner and always: the env's listener does it). The clients ask, in random order, for the merged
// metadata of many artifacts, its checksums, jars and files no upstream
// has, while an upstream is edited every few requests (each edit a new
// cache generation: every merged answer is built again and kept anew, and
// the absence marks are void). Every answer must be the right one (a
// document names its own artifact) and none a 5xx; afterwards nothing kept
// may alias a request, and every cache's keys must match their values.
func TestBufferReuseUnderLoad(t *testing.T) {
	const (
		artifacts = 40
		workers   = 6
		perWorker = 150
		editEvery = 8 // requests between upstream edits
	)
	e := newEnv(t)
	a, b := newFakeUpstream(t), newFakeUpstream(t)
	meta := func(i int) string { return fmt.Sprintf("org/example/m%d/maven-metadata.xml", i) }
	jar := func(i int) string { return fmt.Sprintf("org/example/m%d/1.%d/m%d-1.%d.jar", i, i, i, i) }
	for i := range artifacts {
		a.set(meta(i), fakeFile{body: artifactMeta("m"+strconv.Itoa(i), "1."+strconv.Itoa(i))})
		b.set(meta(i), fakeFile{body: artifactMeta("m"+strconv.Itoa(i), "2."+strconv.Itoa(i))})
		a.set(jar(i), fakeFile{body: jarBytes(jar(i), 256+i)})
	}
	aid := e.upstream(a.URL, nil, nil)
	e.upstream(b.URL, nil, nil)

	// The env's listener scribbles over each request once answered
	// (helpers_test.go); the client keeps its connections alive.
	host, _, _ := strings.Cut(strings.TrimPrefix(e.base, "http://"), "/")
	client := &fasthttp.HostClient{Addr: host, MaxConns: workers}
	defer client.CloseIdleConnections()
	base := e.base + "/" + strconv.FormatInt(e.registry, 10) + "/"

	var (
		sent  atomic.Int64
		mu    sync.Mutex
		fails []string
		wg    sync.WaitGroup
	)
	fail := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if len(fails) < 20 {
			fails = append(fails, fmt.Sprintf(format, args...))
		}
	}
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 20))
			req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
			defer fasthttp.ReleaseRequest(req)
			defer fasthttp.ReleaseResponse(resp)
			for range perWorker {
				if n := sent.Add(1); n%editEvery == 0 {
					desc := "edited " + strconv.FormatInt(n, 10)
					if _, err := e.st.UpdateUpstream(aid, store.UpstreamPatch{Description: &desc}); err != nil {
						fail("editing the upstream: %v", err)
						return
					}
				}
				i := rng.IntN(artifacts)
				var path string
				switch k := rng.IntN(10); {
				case k < 6:
					path = meta(i)
				case k < 7:
					path = meta(i) + ".sha1"
				case k < 9:
					path = jar(i)
				default:
					path = fmt.Sprintf("org/example/m%d/9.%d/m%d-9.%d.jar", i, i, i, i)
				}
				req.Reset()
				req.SetRequestURI(base + path)
				req.Header.Set("Private-Token", rootToken)
				if err := client.Do(req, resp); err != nil {
					fail("GET %s: %v", path, err)
					continue
				}
				status, body := resp.StatusCode(), resp.Body()
				switch want := "<artifactId>m" + strconv.Itoa(i) + "</artifactId>"; {
				case status >= 500:
					fail("GET %s: %d %s", path, status, body)
				case strings.HasSuffix(path, ".xml") && (status != 200 || !bytes.Contains(body, []byte(want))):
					fail("GET %s: %d, the document does not name m%d: %.200s", path, status, i, body)
				case strings.HasSuffix(path, ".sha1") && (status != 200 || len(body) != 40):
					fail("GET %s: %d %q", path, status, body)
				case strings.Contains(path, "/1.") && (status != 200 || !bytes.Equal(body, jarBytes(path, 256+i))):
					fail("GET %s: %d, %d bytes, not the file", path, status, len(body))
				case strings.Contains(path, "/9.") && status != 404:
					fail("GET %s: %d, want 404", path, status)
				}
			}
		}()
	}
	wg.Wait()
	e.waitFills()
	if len(fails) > 0 {
		t.Fatalf("%d requests, wrong answers:\n  %s", sent.Load(), strings.Join(fails, "\n  "))
	}
	expectOwned(t, e.srv, "the load")
	if bad := keptInconsistent(e.srv); len(bad) > 0 {
		t.Fatalf("cache keys that do not match their values:\n  %s", strings.Join(bad, "\n  "))
	}
	if e.srv.composed.lru.Len() == 0 || e.srv.marks.len() == 0 {
		t.Fatal("no merged answer or absence mark was kept: the test checked nothing")
	}
}

// keptInconsistent checks the caches whose values say what they are for
// against their keys: a key whose bytes changed after it was stored no
// longer matches its value, or no longer finds it.
func keptInconsistent(s *Server) []string {
	var bad []string
	c := s.composed
	for _, k := range c.lru.Keys() {
		v, ok := c.lru.Peek(k)
		switch {
		case !ok:
			bad = append(bad, fmt.Sprintf("composed %q: listed, but a lookup does not find it", k.rel))
		case strings.HasSuffix(k.rel, "/maven-metadata.xml"):
			dir := strings.TrimSuffix(k.rel, "/maven-metadata.xml")
			want := "<artifactId>" + dir[strings.LastIndexByte(dir, '/')+1:] + "</artifactId>"
			if !bytes.Contains(v.body, []byte(want)) {
				bad = append(bad, fmt.Sprintf("composed %q: the document is another's: %.120s", k.rel, v.body))
			}
		}
	}
	for _, k := range s.entries.Keys() {
		v, ok := s.entries.Peek(k)
		switch {
		case !ok:
			bad = append(bad, fmt.Sprintf("entry view %q: listed, but a lookup does not find it", k.rel))
		case v.key != k.rel || (v.found && v.e.RelativePath != "/"+k.rel):
			bad = append(bad, fmt.Sprintf("entry view %q: holds %q (entry %q)", k.rel, v.key, v.e.RelativePath))
		}
	}
	s.flightsMu.Lock()
	for k, f := range s.flights {
		if f.relSlash != "/"+k.rel {
			bad = append(bad, fmt.Sprintf("flight %q: fetches %q", k.rel, f.relSlash))
		}
	}
	s.flightsMu.Unlock()
	for _, k := range s.uncached.lru.Keys() {
		if v, ok := s.uncached.lru.Peek(k); !ok || v.e.RelativePath != "/"+k.rel {
			bad = append(bad, fmt.Sprintf("uncached digests %q: %q", k.rel, v.e.RelativePath))
		}
	}
	return bad
}
