package soak

import (
	"bytes"
	"crypto/sha1"
	"encoding/hex"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

func sha1hex(b []byte) string {
	s := sha1.Sum(b)
	return hex.EncodeToString(s[:])
}

func jarHeader(body []byte) http.Header {
	return http.Header{"X-Checksum-Sha1": {sha1hex(body)}, "Content-Length": {strconv.Itoa(len(body))}}
}

// The checker is the instrument: each kind of wrong answer the issue
// describes (another artifact's metadata, a rule not applied, a checksum
// of other bytes, an absent file that exists) must be judged wrong, and
// the right answers right.
func TestCheckerJudgesAnswers(t *testing.T) {
	c := newChecker()
	lib, ven, den := hotPath(1), hotPath(9), deniedPath(3)
	miss := missPath("t", 5)
	libBody, venBody, missBody := content(central, lib), content(vendor, ven), content(central, miss)
	meta := metaPath(7)
	metaBody := mergeDoc(t, "a7", mergedVersions("a7"))
	metaHdr := http.Header{"X-Checksum-Sha1": {sha1hex(metaBody)}, "X-Registryd-Merge": {"complete"}}
	otherMeta := mergeDoc(t, "a8", mergedVersions("a7"))

	cases := []struct {
		name   string
		k      kind
		path   string
		status int
		h      http.Header
		body   []byte
		want   verdict
	}{
		{"hit", kHit, lib, 200, jarHeader(libBody), libBody, vOK},
		{"vendor hit", kHit, ven, 200, jarHeader(venBody), venBody, vOK},
		{"miss", kMiss, miss, 200, jarHeader(missBody), missBody, vOK},
		{"head", kHead, lib, 200, jarHeader(libBody), nil, vOK},
		{"sidecar", kSidecar, miss + ".sha1", 200, nil, []byte(sha1hex(missBody)), vOK},
		{"denied", kDenied, den, 403, nil, []byte(`{"message":"403 Forbidden"}`), vOK},
		{"metadata", kMeta, meta, 200, metaHdr, metaBody, vOK},

		{"central's bytes for a vendor file (deny rule not applied)", kHit, ven, 200,
			jarHeader(content(central, ven)), content(central, ven), vWrong},
		{"another file's bytes", kHit, lib, 200, jarHeader(content(central, hotPath(2))), content(central, hotPath(2)), vWrong},
		{"short body", kMiss, miss, 200, jarHeader(missBody), missBody[:len(missBody)-1], vWrong},
		{"checksum header of other bytes", kHit, lib, 200, jarHeader(venBody), libBody, vWrong},
		{"checksum header missing", kHit, lib, 200, http.Header{}, libBody, vWrong},
		{"head with another length", kHead, lib, 200, jarHeader(venBody), nil, vWrong},
		{"sidecar of other bytes", kSidecar, miss + ".sha1", 200, nil, []byte(sha1hex(libBody)), vWrong},
		{"404 for a file the upstream has", kHit, lib, 404, nil, nil, vWrong},
		{"403 for an allowed file", kMiss, miss, 403, nil, nil, vWrong},
		{"a refused file served", kDenied, den, 200, jarHeader(content(vendor, den)), content(vendor, den), vWrong},
		{"metadata of another artifact", kMeta, meta, 200,
			http.Header{"X-Checksum-Sha1": {sha1hex(otherMeta)}, "X-Registryd-Merge": {"complete"}}, otherMeta, vWrong},
		{"complete metadata missing versions", kMeta, meta, 200, metaHdrFor(t, "a7", upstreamVersions(central, "a7"), "complete"),
			mergeDoc(t, "a7", upstreamVersions(central, "a7")), vWrong},
		{"metadata checksum header of other bytes", kMeta, meta, 200,
			http.Header{"X-Checksum-Sha1": {sha1hex(otherMeta)}, "X-Registryd-Merge": {"complete"}}, metaBody, vWrong},

		{"partial metadata", kMeta, meta, 200, metaHdrFor(t, "a7", upstreamVersions(vendor, "a7"), "partial; missing=1"),
			mergeDoc(t, "a7", upstreamVersions(vendor, "a7")), vIncomplete},
		{"500", kHit, lib, 500, nil, nil, v5xx},
		{"502", kMeta, meta, 502, nil, nil, v5xx},
		{"429", kHit, lib, 429, nil, nil, vRefused},
	}
	for _, tc := range cases {
		if got, why := c.check(tc.k, tc.path, tc.status, tc.h, tc.body); got != tc.want {
			t.Errorf("%s: verdict %d (%s), want %d", tc.name, got, why, tc.want)
		}
	}
	// The metadata's .sha1 must name a document served for that path:
	// the complete one seen above, or the partial one.
	for _, tc := range []struct {
		body string
		want verdict
	}{
		{sha1hex(metaBody), vOK},
		{sha1hex(mergeDoc(t, "a7", upstreamVersions(vendor, "a7"))), vOK},
		{sha1hex(otherMeta), vWrong},
	} {
		if got, why := c.check(kMetaSidecar, meta+".sha1", 200, nil, []byte(tc.body)); got != tc.want {
			t.Errorf("metadata sidecar %s: verdict %d (%s), want %d", tc.body, got, why, tc.want)
		}
	}
}

// mergeDoc is a merged document as registryd renders one (the checker
// reads only groupId, artifactId and versions).
func mergeDoc(t *testing.T, artifact string, vs []string) []byte {
	t.Helper()
	var b bytes.Buffer
	b.WriteString("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<metadata>\n  <groupId>org.soak.meta</groupId>\n  <artifactId>")
	b.WriteString(artifact + "</artifactId>\n  <versioning>\n    <versions>\n")
	for _, v := range vs {
		b.WriteString("      <version>" + v + "</version>\n")
	}
	b.WriteString("    </versions>\n  </versioning>\n</metadata>\n")
	return b.Bytes()
}

func metaHdrFor(t *testing.T, artifact string, vs []string, merge string) http.Header {
	return http.Header{"X-Checksum-Sha1": {sha1hex(mergeDoc(t, artifact, vs))}, "X-Registryd-Merge": {merge}}
}

// The fake upstreams serve what the checker expects, and central also has
// the vendor and internal files (with its own bytes), so that only the
// rules keep them from being served.
func TestFakeUpstreams(t *testing.T) {
	c, v := startUpstream(central), startUpstream(vendor)
	defer c.close()
	defer v.close()
	get := func(u *fakeUpstream, path string) (int, []byte, http.Header) {
		t.Helper()
		res, err := http.Get(u.URL + "/" + path)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		body, err := io.ReadAll(res.Body)
		if err != nil {
			t.Fatal(err)
		}
		return res.StatusCode, body, res.Header
	}
	chk := newChecker()
	for _, tc := range []struct {
		u      *fakeUpstream
		path   string
		status int
	}{
		{c, hotPath(1), 200}, {c, hotPath(9), 200}, {c, missPath("t", 3), 200}, {c, missPath("t", 9), 200},
		{c, deniedPath(1), 200}, {c, metaPath(4), 200},
		{v, hotPath(9), 200}, {v, missPath("t", 9), 200}, {v, deniedPath(1), 200}, {v, metaPath(4), 200},
		{v, hotPath(1), 404}, {v, missPath("t", 3), 404}, {c, "org/soak/lib/h1/1.0/h1-1.0.pom", 404},
	} {
		status, body, h := get(tc.u, tc.path)
		if status != tc.status {
			t.Errorf("%s %s: %d, want %d", tc.u.name, tc.path, status, tc.status)
			continue
		}
		if status != 200 || strings.HasSuffix(tc.path, ".xml") {
			continue
		}
		if sum := h.Get("X-Checksum-Sha1"); sum != sha1hex(body) {
			t.Errorf("%s %s: X-Checksum-Sha1 %s is not the body's", tc.u.name, tc.path, sum)
		}
		got, _ := chk.check(kHit, tc.path, 200, h, body)
		if want := map[bool]verdict{true: vOK, false: vWrong}[expectedUpstream(tc.path) == tc.u.name]; got != want {
			t.Errorf("%s served by %s: verdict %d, want %d", tc.path, tc.u.name, got, want)
		}
	}
	// Each upstream's metadata names its artifact and its own versions;
	// a merge of both is what the checker wants.
	_, cm, _ := get(c, metaPath(4))
	_, vm, _ := get(v, metaPath(4))
	if element(cm, "artifactId") != "a4" || element(vm, "artifactId") != "a4" {
		t.Fatalf("metadata of a4 names %q and %q", element(cm, "artifactId"), element(vm, "artifactId"))
	}
	if got := append(versions(cm), versions(vm)...); strings.Join(got, ",") != strings.Join(mergedVersions("a4"), ",") {
		t.Errorf("versions %v + %v, merged %v", versions(cm), versions(vm), mergedVersions("a4"))
	}
	if fileSize(hotPath(3), true) > smallMax {
		t.Errorf("a hot file is larger than %d bytes", smallMax)
	}
	if n := len(content(central, missPath("t", 5))); n != fileSize(missPath("t", 5), false) {
		t.Errorf("a miss of %d bytes, its size says %d", n, fileSize(missPath("t", 5), false))
	}
}

func TestHistQuantile(t *testing.T) {
	var h hist
	for i := 1; i <= 1000; i++ {
		h.add(time.Duration(i) * time.Millisecond)
	}
	for _, tc := range []struct{ q, want float64 }{{0.5, 0.5}, {0.99, 0.99}, {1, 1}} {
		if got := h.quantile(tc.q); got < tc.want || got > tc.want*histGrowth*histGrowth {
			t.Errorf("q%.2f = %.4fs, want %.3fs (+4 %%)", tc.q, got, tc.want)
		}
	}
	var empty hist
	if empty.quantile(0.99) != 0 {
		t.Error("an empty histogram has a quantile")
	}
	var sum hist
	sum.merge(&h)
	sum.add(10 * time.Minute)
	if sum.n.Load() != 1001 || sum.quantile(1) < 600 {
		t.Errorf("merged: n %d, max %.0fs", sum.n.Load(), sum.quantile(1))
	}
}

// A sample is over the budget when its blobs exceed the budget plus what
// the upstreams sent in the two seconds before plus the largest file.
func TestOverBudget(t *testing.T) {
	s := []sample{
		{OK: true, Budget: 100 << 20, BlobBytes: 90 << 20, Fetched: 0},
		{OK: true, Budget: 100 << 20, BlobBytes: 105 << 20, Fetched: 10 << 20}, // 5 MiB over, 10 MiB arrived
		{OK: false},
		{OK: true, Budget: 100 << 20, BlobBytes: 130 << 20, Fetched: 20 << 20}, // 30 over, 10 arrived
		{OK: true, Budget: 0, BlobBytes: 1 << 30},                              // no budget
	}
	got := overBudget(s)
	want := []bool{false, false, false, true, false}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("sample %d: over %v, want %v", i, got[i], want[i])
		}
	}
}

func TestCacheFill(t *testing.T) {
	m := map[string]float64{
		`registryd_cache_memory_entries{cache="paths"}`:            50,
		`registryd_cache_memory_capacity{cache="paths"}`:           200,
		`registryd_cache_memory_entries{cache="small_blobs"}`:      10,
		`registryd_cache_memory_capacity{cache="small_blobs"}`:     1000,
		`registryd_cache_memory_held_bytes{cache="small_blobs"}`:   30,
		`registryd_cache_memory_budget_bytes{cache="small_blobs"}`: 40,
		`registryd_cache_entries`:                                  7,
	}
	got := cacheFill(m)
	if len(got) != 2 || got["paths"] != 0.25 || got["small_blobs"] != 0.75 {
		t.Fatalf("cacheFill = %v", got)
	}
}
