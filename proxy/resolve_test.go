package proxy

import (
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"registryd/internal/boltstore"
	"registryd/internal/testclock"
	"registryd/maven"
	"registryd/store"
	"registryd/store/blob"
	"registryd/upstream"
)

// The engine's resolution, driven without any HTTP server: the engine
// alone (newEngine: no listener, no auth), over a real store on a temp dir
// and two fake upstreams (httptest), asked as the listener asks it
// (resolveDownload), its answer read as data.

// engineEnv is a resolution engine with a registry of two upstreams, A
// and B, in that order; every file is fresh for an hour.
type engineEnv struct {
	t     *testing.T
	s     *engine
	hooks *Hooks // the engine's test hooks
	st    *store.Store
	clock *testclock.Clock
	reg   int64
	ups   [2]*fakeUpstream
	ids   [2]int64
}

func newEngineEnv(t *testing.T) *engineEnv {
	t.Helper()
	dir := t.TempDir()
	clock := testclock.New(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC))
	st, err := boltstore.Open(dir, store.Options{SecretKey: testSecretKey, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	g, err := st.CreateGroup(store.NewGroup{Name: "acme", Path: "acme", Visibility: store.Private})
	if err != nil {
		t.Fatal(err)
	}
	r, err := st.CreateRegistry(g.ID, "main", "")
	if err != nil {
		t.Fatal(err)
	}
	blobs, err := blob.Open(dir, blob.Options{})
	if err != nil {
		t.Fatal(err)
	}
	hooks := &Hooks{}
	s, err := newEngine(engineDeps{
		Options: engineOptions{Hooks: hooks}.withDefaults(),
		Store:   st, Blobs: blobs,
		Upstream: upstream.New(upstream.Options{AllowLocalNetwork: true, MaxRedirects: 3,
			ConnectTimeout: 5 * time.Second, HeaderTimeout: 5 * time.Second}),
		Logger: slog.New(slog.DiscardHandler), Registerer: prometheus.NewRegistry(), Now: clock.Now,
	})
	if err != nil {
		t.Fatal(err)
	}
	e := &engineEnv{t: t, s: s, hooks: hooks, st: st, clock: clock, reg: r.ID}
	for i := range e.ups {
		e.ups[i] = newFakeUpstream(t)
		u, err := st.CreateUpstream(r.ID, store.NewUpstream{URL: e.ups[i].URL, Name: "up" + strconv.Itoa(i),
			CacheValidityHours: hours(1), MetadataCacheValidityHours: hours(1)})
		if err != nil {
			t.Fatal(err)
		}
		e.ids[i] = u.ID
	}
	t.Cleanup(func() {
		s.stopFills()
		if err := s.StopCounting(); err != nil {
			t.Errorf("StopCounting: %v", err)
		}
		s.StopCollector()
		st.Close()
	})
	return e
}

// resolve asks the engine for path as the listener does for an anonymous
// caller who may read the registry.
func (e *engineEnv) resolve(path string) (*request, answer, error) {
	e.t.Helper()
	gen := e.st.CacheGeneration()
	reg, err := e.s.registry(e.reg, gen)
	if err != nil {
		e.t.Fatal(err)
	}
	p, err := maven.Classify(path)
	if err != nil {
		e.t.Fatal(err)
	}
	x := &request{reg: reg, path: p}
	a, err := e.s.resolveDownload(x, gen)
	return x, a, err
}

// read is the file an answer serves; a flight is read to its end behind
// its fill, and given back. It waits for the fills to end.
func (e *engineEnv) read(a answer) []byte {
	e.t.Helper()
	defer e.s.fills.Wait()
	switch {
	case a.doc != nil:
		return a.doc.body
	case a.flight != nil:
		r := &flightReader{f: a.flight, bytes: unaccounted}
		b, err := io.ReadAll(r)
		r.Close()
		if err != nil {
			e.t.Fatalf("reading the flight: %v", err)
		}
		return b
	case a.entry != nil:
		b, err := os.ReadFile(a.entry.blob)
		if err != nil {
			e.t.Fatal(err)
		}
		return b
	}
	e.t.Fatalf("answer %+v serves nothing", a)
	return nil
}

// fetch resolves path and reads its answer, failing on an error.
func (e *engineEnv) fetch(path string) []byte {
	e.t.Helper()
	_, a, err := e.resolve(path)
	if err != nil {
		e.t.Fatalf("resolving %s: %v", path, err)
	}
	return e.read(a)
}

func (e *engineEnv) calls(path string) [2]int {
	return [2]int{e.ups[0].calls(path), e.ups[1].calls(path)}
}

// answerKind names what an answer holds, for the table.
func answerKind(a answer, err error) string {
	switch {
	case err != nil:
		return "error"
	case a.doc != nil:
		return "doc"
	case a.flight != nil:
		return "flight"
	case a.entry != nil:
		return "entry"
	case a.uncached != nil:
		return "uncached"
	}
	return "none"
}

func TestEngineResolve(t *testing.T) {
	jar := jarBytes(jarPath, 32<<10)
	onA := func(e *engineEnv) { e.ups[0].set(jarPath, fakeFile{body: jar, etag: `"v1"`}) }
	cases := []struct {
		name string
		// setup prepares the upstreams and the cache before the request.
		setup func(e *engineEnv)
		path  string
		kind  string // answerKind of the answer
		res   result // what the exchange records
		up    int    // the upstream (0 A, 1 B) whose file answers; -1 none
		calls [2]int // the GETs of path each upstream received, in all
		// check looks further at the answer, read.
		check func(t *testing.T, e *engineEnv, x *request, a answer, err error)
	}{{
		name: "miss", setup: onA, path: jarPath, kind: "flight", res: resMiss, up: 0, calls: [2]int{1, 0},
		check: func(t *testing.T, e *engineEnv, x *request, a answer, err error) {
			if got := e.read(a); string(got) != string(jar) {
				t.Fatalf("the flight streams %d bytes, want the file's %d", len(got), len(jar))
			}
			if ce, err := e.st.CacheEntry(e.ids[0], "/"+jarPath); err != nil || ce.Size != int64(len(jar)) {
				t.Fatalf("after the fill the entry is %+v, %v", ce, err)
			}
		},
	}, {
		name: "hit", path: jarPath, kind: "entry", res: resHit, up: 0, calls: [2]int{1, 0},
		setup: func(e *engineEnv) { onA(e); e.fetch(jarPath) },
		check: func(t *testing.T, e *engineEnv, x *request, a answer, err error) {
			if got := e.read(a); string(got) != string(jar) {
				t.Fatal("the stored entry is not the file")
			}
		},
	}, {
		name: "revalidate", path: jarPath, kind: "entry", res: resRevalidated, up: 0, calls: [2]int{2, 0},
		setup: func(e *engineEnv) { onA(e); e.fetch(jarPath); e.clock.Advance(2 * time.Hour) },
		check: func(t *testing.T, e *engineEnv, x *request, a answer, err error) {
			if inm := e.ups[0].lastIfNoneMatch(jarPath); inm != `"v1"` {
				t.Fatalf("revalidated with If-None-Match %q", inm)
			}
			ce, err := e.st.CacheEntry(e.ids[0], "/"+jarPath)
			if err != nil || ce.CheckedAt.Before(e.clock.Now().Add(-time.Minute)) {
				t.Fatalf("the check was not recorded: %+v, %v", ce, err)
			}
		},
	}, {
		name: "negative", path: jarPath, kind: "error", res: resNegative, up: -1, calls: [2]int{1, 1},
		setup: func(e *engineEnv) {
			// Asked once: both upstreams say 404, which is remembered.
			if _, _, err := e.resolve(jarPath); !isMissAbsent(err) {
				e.t.Fatalf("first ask: %v, want every upstream absent", err)
			}
		},
		check: func(t *testing.T, e *engineEnv, x *request, a answer, err error) {
			if !isMissAbsent(err) {
				t.Fatalf("%v, want every upstream remembered absent", err)
			}
		},
	}, {
		name: "refused by rules", path: jarPath, kind: "flight", res: resMiss, up: 1, calls: [2]int{0, 1},
		setup: func(e *engineEnv) {
			onA(e)
			e.ups[1].set(jarPath, fakeFile{body: jar})
			e.rule(0, "deny", "group_id", "wildcard", "org.example*")
		},
		check: func(t *testing.T, e *engineEnv, x *request, a answer, err error) {
			if len(x.denied) != 1 || x.denied[0].upstream != e.ids[0] || !isDenied(x.denied[0].err) {
				t.Fatalf("denied %+v, want upstream A refused by its rule", x.denied)
			}
			e.read(a)
		},
	}, {
		name: "refused everywhere", path: jarPath, kind: "error", res: resNone, up: -1, calls: [2]int{0, 0},
		setup: func(e *engineEnv) {
			onA(e)
			e.rule(0, "deny", "group_id", "wildcard", "org.example*")
			e.rule(1, "allow", "group_id", "wildcard", "com.*")
		},
		check: func(t *testing.T, e *engineEnv, x *request, a answer, err error) {
			var me *missError
			if !errors.As(err, &me) || !me.denied() || len(me.failures) != 2 {
				t.Fatalf("%v, want both upstreams refused", err)
			}
		},
	}, {
		name: "composed", path: libMeta, kind: "doc", res: resMiss, up: -1, calls: [2]int{1, 1},
		setup: func(e *engineEnv) {
			e.ups[0].set(libMeta, fakeFile{body: metaXML("20240101000000", "1.0", "1.0", "1.0")})
			e.ups[1].set(libMeta, fakeFile{body: metaXML("20250101000000", "2.0", "2.0", "2.0")})
		},
		check: func(t *testing.T, e *engineEnv, x *request, a answer, err error) {
			m := parsed(t, e.read(a))
			if got := strings.Join(m.Versioning.Versions, ","); got != "1.0,2.0" || m.Versioning.Latest != "2.0" {
				t.Fatalf("merged versions %s, latest %s", got, m.Versioning.Latest)
			}
			if a.doc.merge != mergeComplete || len(a.doc.contributors) != 2 {
				t.Fatalf("merge %q of %d documents, want complete of 2", a.doc.merge, len(a.doc.contributors))
			}
		},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEngineEnv(t)
			e.t = t
			if c.setup != nil {
				c.setup(e)
			}
			x, a, err := e.resolve(c.path)
			if got := answerKind(a, err); got != c.kind {
				t.Fatalf("answer %s (%v), want %s", got, err, c.kind)
			}
			if x.res != c.res {
				t.Errorf("result %v, want %v", x.res, c.res)
			}
			if c.up >= 0 && x.up != e.ids[c.up] {
				t.Errorf("answered from upstream %d, want %d", x.up, e.ids[c.up])
			}
			c.check(t, e, x, a, err)
			e.s.fills.Wait()
			if got := e.calls(c.path); got != c.calls {
				t.Errorf("upstream GETs %v, want %v", got, c.calls)
			}
		})
	}
}

// A herd of two: concurrent resolutions of one missing file make one
// upstream request; the second joins the first's flight, and both stream
// the whole file behind its fill.
func TestEngineResolveJoin(t *testing.T) {
	e := newEngineEnv(t)
	jar := jarBytes(jarPath, 32<<10)
	joined := make(chan struct{})
	var once sync.Once
	e.hooks.OnJoin = func() { once.Do(func() { close(joined) }) }
	e.ups[0].set(jarPath, fakeFile{custom: func(w http.ResponseWriter, r *http.Request) {
		select { // answer once the second resolution joined
		case <-joined:
		case <-r.Context().Done():
			return
		}
		w.Header().Set("Content-Type", "application/java-archive")
		w.Header().Set("Content-Length", strconv.Itoa(len(jar)))
		w.Write(jar)
	}})
	type got struct {
		res  result
		body []byte
		err  error
	}
	results := make(chan got, 2)
	for range 2 {
		go func() {
			x, a, err := e.resolve(jarPath)
			if err != nil || a.flight == nil {
				results <- got{err: errors.Join(err, errors.New(answerKind(a, err)))}
				return
			}
			r := &flightReader{f: a.flight, bytes: unaccounted}
			b, err := io.ReadAll(r)
			r.Close()
			results <- got{res: x.res, body: b, err: err}
		}()
	}
	var res []result
	for range 2 {
		g := <-results
		if g.err != nil {
			t.Fatal(g.err)
		}
		if string(g.body) != string(jar) {
			t.Fatalf("streamed %d bytes, want %d", len(g.body), len(jar))
		}
		res = append(res, g.res)
	}
	e.s.fills.Wait()
	if !slices.Contains(res, resMiss) || !slices.Contains(res, resJoin) {
		t.Fatalf("results %v, want a miss and a join", res)
	}
	if n := e.ups[0].calls(jarPath); n != 1 {
		t.Fatalf("upstream GETs %d, want 1", n)
	}
}

// rule adds a rule to upstream i (0 A, 1 B).
func (e *engineEnv) rule(i int, typ, target, ptype, pattern string) {
	e.t.Helper()
	if _, err := e.st.CreateUpstreamRule(store.UpstreamRule{UpstreamID: e.ids[i], RuleType: typ,
		TargetCoordinate: target, PatternType: ptype, Pattern: pattern}); err != nil {
		e.t.Fatal(err)
	}
}

// isMissAbsent: no upstream has the file, by their answers or remembered.
func isMissAbsent(err error) bool {
	var me *missError
	return errors.As(err, &me) && me.absent() && !me.denied()
}

// A registry view rebuilt for a new generation shares the views of the
// upstreams whose settings did not change, so cached entry views of many
// generations point at one copy; a changed upstream gets a view of its own.
func TestRegistryViewKeepsUnchangedUpstreamViews(t *testing.T) {
	e := newEngineEnv(t)
	first, err := e.s.registry(e.reg, 1)
	if err != nil {
		t.Fatal(err)
	}
	second, err := e.s.registry(e.reg, 2)
	if err != nil {
		t.Fatal(err)
	}
	if second == first || second.ups[0] != first.ups[0] || second.ups[1] != first.ups[1] {
		t.Fatalf("unchanged upstreams got new views: %p %p / %p %p", first.ups[0], first.ups[1], second.ups[0], second.ups[1])
	}
	if _, err := e.st.UpdateUpstream(e.ids[1], store.UpstreamPatch{CacheValidityHours: hours(5)}); err != nil {
		t.Fatal(err)
	}
	third, err := e.s.registry(e.reg, 3)
	if err != nil {
		t.Fatal(err)
	}
	if third.ups[0] != first.ups[0] || third.ups[1] == first.ups[1] || third.ups[1].validity != 5*time.Hour {
		t.Fatalf("after a change of upstream 1: %+v", third.ups[1])
	}
}
