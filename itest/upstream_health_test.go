package itest

import (
	"bytes"
	"fmt"
	"net/http"
	"testing"
)

// The attack of issue 20, item 5, against the real daemon: a client
// retries one file that its upstream answers 502 for (a Nexus group with
// one broken remote; Maven tries three times). The file's breaker opens
// on its second failure, the third try is answered without asking, the
// upstream stays healthy and serves the 90 misses of other files that
// follow (89 of them got 502 before).
func TestFailingFileKeepsUpstreamHealthy(t *testing.T) {
	d := Start(t, nil)
	f := d.Fix(t)
	reg := f.Registry(f.Group("acme", 0, "private"), "main")
	up := newPxUpstream(t)
	bad := "org/example/broken/1.0/broken-1.0.jar"
	up.set(bad, pxFile{status: http.StatusBadGateway})
	others := make([]string, 90)
	for i := range others {
		others[i] = fmt.Sprintf("org/example/lib%d/1.0/lib%d-1.0.jar", i, i)
		up.set(others[i], pxFile{body: pxBody(others[i], 1024)})
	}
	upID := f.Upstream(reg, up.URL, nil)

	for range 3 {
		d.pxGet(t, reg, bad, "PRIVATE-TOKEN", rootToken).Expect(t, 502)
	}
	for _, p := range others {
		r := d.pxGet(t, reg, p, "PRIVATE-TOKEN", rootToken).Expect(t, 200)
		if !bytes.Equal(r.Body, pxBody(p, 1024)) {
			t.Fatalf("%s: %d bytes", p, len(r.Body))
		}
	}
	if n := up.calls(bad); n != 2 {
		t.Fatalf("the failing file was asked %d times, want 2", n)
	}
	var shown struct {
		Status       string `json:"status"`
		LastError    string `json:"last_error"`
		FailingPaths int    `json:"failing_paths"`
	}
	d.Do("GET", vr("/upstreams/%d", upID), rootToken, nil).Expect(t, 200).JSON(t, &shown)
	if shown.Status != "healthy" || shown.FailingPaths != 1 || shown.LastError != "answered 502 Bad Gateway" {
		t.Fatalf("upstream health %+v", shown)
	}
	metrics := d.Do("GET", "/metrics", "", nil).Expect(t, 200)
	if n := metricValue(t, metrics.Body, `registryd_upstream_failing_paths{upstream="`+itoa(upID)+`"}`); n != 1 {
		t.Fatalf("registryd_upstream_failing_paths %v, want 1", n)
	}
}
