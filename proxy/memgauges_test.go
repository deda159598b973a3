package proxy

import (
	"fmt"
	"testing"
)

// TestMemoryCacheBounds: Options.Memory bounds the engine's caches in
// memory, and registryd_cache_memory_entries and _capacity show their fill
// (and _held_bytes, _budget_bytes the byte-bounded ones).
func TestMemoryCacheBounds(t *testing.T) {
	const bound = 3
	e := newEnv(t, func(o *envOptions) {
		o.Memory = MemoryOptions{Paths: bound, Registries: bound, Entries: bound, Verdicts: bound,
			Composed: bound, SmallBlobs: bound}
	})
	a, b := newFakeUpstream(t), newFakeUpstream(t)
	e.upstream(a.URL, nil, nil)
	e.upstream(b.URL, nil, nil)
	entries := func(cache string) float64 { return e.metric("registryd_cache_memory_entries", "cache", cache) }
	caches := []string{"paths", "registries", "entries", "verdicts", "composed", "small_blobs"}
	for _, c := range caches {
		if got := e.metric("registryd_cache_memory_capacity", "cache", c); got != bound {
			t.Fatalf("capacity of %s = %v, want %d", c, got, bound)
		}
		if got := entries(c); got != 0 {
			t.Fatalf("%s holds %v before any request", c, got)
		}
	}
	for i := range 2 * bound {
		jar := fmt.Sprintf("org/example/lib/%d/lib-%d.jar", i, i)
		a.set(jar, fakeFile{body: []byte("jar " + jar)})
		e.get(jar).expect(t, 200)
		e.get(jar).expect(t, 200) // a hit: read through the memory cache
		e.get(fmt.Sprintf("org/example/absent/%d/absent-%d.jar", i, i)).expect(t, 404)
		meta := fmt.Sprintf("org/example/m%d/maven-metadata.xml", i)
		a.set(meta, fakeFile{body: metaXMLAt(meta, "20240101000000", "1.0", "1.0", "1.0")})
		b.set(meta, fakeFile{body: metaXMLAt(meta, "20250101000000", "2.0", "2.0", "2.0")})
		e.get(meta).expect(t, 200)
		if i == 0 {
			for _, c := range []string{"paths", "registries", "entries", "composed", "small_blobs"} {
				if got := entries(c); got < 1 {
					t.Fatalf("%s holds %v after the first requests", c, got)
				}
			}
		}
	}
	for _, c := range caches {
		if got := entries(c); got > bound {
			t.Fatalf("%s holds %v, over its bound %d", c, got, bound)
		}
	}
	for _, c := range []string{"paths", "entries", "composed", "small_blobs"} {
		if got := entries(c); got != bound {
			t.Fatalf("%s holds %v after %d distinct files, want its bound %d", c, got, 2*bound, bound)
		}
	}
	if held, budget := e.metric("registryd_cache_memory_held_bytes", "cache", "small_blobs"),
		e.metric("registryd_cache_memory_budget_bytes", "cache", "small_blobs"); held <= 0 || held > budget {
		t.Fatalf("small_blobs hold %v bytes of a budget of %v", held, budget)
	}
	if held := e.metric("registryd_cache_memory_held_bytes", "cache", "composed"); held <= 0 {
		t.Fatalf("composed hold %v bytes", held)
	}
	e.noBrokenState()
}
