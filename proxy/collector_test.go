package proxy

import (
	"os"
	"testing"
	"time"
)

// TestCollectorWakesOnPurge: a purge is collected at once, not at the next
// cache.collect_interval (an hour here), batch after batch until done.
func TestCollectorWakesOnPurge(t *testing.T) {
	e := newEnv(t, func(o *envOptions) { o.Cache.CollectInterval = time.Hour })
	up := newFakeUpstream(t)
	paths := []string{jarPath, "org/example/lib/1.0/lib-1.0.pom"}
	for _, p := range paths {
		up.set(p, fakeFile{body: []byte("bytes of " + p)})
	}
	uid := e.upstream(up.URL, nil, nil)
	for _, p := range paths {
		e.get(p).expect(t, 200)
	}
	e.waitFills()
	ce, _ := e.entry(uid, "/"+jarPath)
	e.srv.Start()
	if _, err := e.st.PurgeRegistryCache(e.registry); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for e.metric("registryd_collector_entries_total") < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the purge was not collected: %v entries", e.metric("registryd_collector_entries_total"))
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := os.Stat(e.blobs.Path(ce.SHA256)); !os.IsNotExist(err) {
		t.Fatalf("the purged entry's blob is still there: %v", err)
	}
	if st := e.st.CacheStats(); st.Entries != 0 || st.Pending != 0 || st.Blobs != 0 {
		t.Fatalf("after collection: %+v", st)
	}
	e.lint()
}
