package itest

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// TestEvictionUnderLoad runs the daemon with a 3 MiB disk budget while a
// load runs: a client keeps downloading five hot files (cache hits) while
// another fills thirty new ones, 6 MiB in all. Eviction keeps the blobs
// within the budget (each run brings them to 90% of it; the fills after
// the last run may add up to the budget again without starting another,
// which a loaded machine, where fills are slower than the one-second
// checks, makes likely), never fails a hit, never evicts the hot files
// (they are the most recently downloaded), and of the others keeps the
// most recently filled.
func TestEvictionUnderLoad(t *testing.T) {
	const size = 200 << 10
	d := Start(t, map[string]string{"REGISTRYD_CACHE_MAX_BYTES": "3MiB", "REGISTRYD_CACHE_MIN_FREE_FRACTION": "0"})
	f := d.Fix(t)
	reg := f.Registry(f.Group("acme", 0, "private"), "main")
	up := newPxUpstream(t)
	var hot, cold []string
	bodies := map[string][]byte{}
	for i := range 5 {
		hot = append(hot, fmt.Sprintf("org/hot/h%d/1.0/h%d-1.0.jar", i, i))
	}
	for i := range 30 {
		cold = append(cold, fmt.Sprintf("org/cold/c%02d/1.0/c%02d-1.0.jar", i, i))
	}
	for _, p := range append(append([]string{}, hot...), cold...) {
		bodies[p] = pxBody(p, size)
		up.set(p, pxFile{body: bodies[p]})
	}
	upID := f.Upstream(reg, up.URL, nil)
	get := func(p string) error {
		r := doRequestQuiet(d.pxURL(reg, p), rootToken)
		if r.err != nil {
			return r.err
		}
		if r.status != 200 || !bytes.Equal(r.body, bodies[p]) {
			return fmt.Errorf("%s: status %d, %d bytes", p, r.status, len(r.body))
		}
		return nil
	}
	for _, p := range hot {
		if err := get(p); err != nil {
			t.Fatal(err)
		}
	}

	stop := make(chan struct{})
	rounds := make(chan struct{}, 1) // a round of hits on every hot file ended
	var hits atomic.Int64
	var hitErr atomic.Value
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := get(hot[i%len(hot)]); err != nil {
				hitErr.Store(err)
				close(rounds)
				return
			}
			hits.Add(1)
			if i%len(hot) == len(hot)-1 {
				select {
				case rounds <- struct{}{}:
				default:
				}
			}
		}
	}()
	for _, p := range cold {
		if err := get(p); err != nil {
			t.Fatal(err)
		}
		// The sidecar answers once the entry is stored (it waits for the
		// fill): the next file's use is then later than this one's, which
		// the fsyncs of two fills in a row do not otherwise promise.
		if r := doRequestQuiet(d.pxURL(reg, p+".sha1"), rootToken); r.err != nil || r.status != 200 {
			t.Fatalf("%s.sha1: %d %v", p, r.status, r.err)
		}
		// The hot files stay hot: a whole round of hits on them ends
		// after each fill (a busy machine could otherwise starve the
		// hitter while fills go on, and least recently used would
		// rightly be a hot file).
		select {
		case <-rounds:
		default:
		}
		if _, ok := <-rounds; !ok {
			break
		}
	}
	// The load goes on until eviction has brought the blobs within the
	// budget and the collector has unlinked what it evicted.
	m := waitMetrics(t, d, "blobs within the budget after evictions", func(m []byte) bool {
		return metricValue(t, m, "registryd_cache_blob_bytes") <= 3<<20 &&
			metricValue(t, m, "registryd_cache_evictions_total") > 0 &&
			metricValue(t, m, "registryd_cache_pending_entries") == 0
	})
	close(stop)
	wg.Wait()
	if err := hitErr.Load(); err != nil {
		t.Fatalf("a hit failed during eviction: %v", err)
	}
	if hits.Load() == 0 {
		t.Fatal("no hit ran during the load")
	}
	for _, p := range hot {
		if n := up.calls(p); n != 1 {
			t.Fatalf("%s fetched %d times: a hot file was evicted", p, n)
		}
	}
	var list []map[string]any
	d.Do("GET", fmt.Sprintf("/virtual_registries/packages/maven/upstreams/%d/cache_entries?per_page=100", upID),
		rootToken, nil).Expect(t, 200).JSON(t, &list)
	var keptCold []string
	keptHot := 0
	for _, e := range list {
		p := strings.TrimPrefix(e["relative_path"].(string), "/")
		if strings.HasPrefix(p, "org/hot/") {
			keptHot++
		} else {
			keptCold = append(keptCold, p)
		}
	}
	sort.Strings(keptCold)
	if keptHot != len(hot) || len(keptCold) == 0 || len(keptCold) == len(cold) {
		t.Fatalf("kept %d hot and %d cold files", keptHot, len(keptCold))
	}
	// The cold files kept are the last ones filled: least recent went first.
	if want := cold[len(cold)-len(keptCold):]; strings.Join(keptCold, ",") != strings.Join(want, ",") {
		t.Fatalf("kept %v\nwant the most recent %v", keptCold, want)
	}
	t.Logf("%d hits during the load; %v entries evicted; %d cold files kept", hits.Load(),
		metricValue(t, m, "registryd_cache_evictions_total"), len(keptCold))
}

type quietResp struct {
	status int
	body   []byte
	err    error
}

// doRequestQuiet GETs url with a token, for goroutines that must not fail
// the test themselves.
func doRequestQuiet(url, token string) quietResp {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return quietResp{err: err}
	}
	req.Header.Set("PRIVATE-TOKEN", token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return quietResp{err: err}
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	return quietResp{status: res.StatusCode, body: body, err: err}
}
