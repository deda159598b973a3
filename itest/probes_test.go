package itest

import (
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestProxyProbes: the download listener answers /-/readiness and
// /-/liveness as the admin listener does, without credentials: ready 200,
// and from SIGTERM on, through shutdown.drain_delay, readiness 503 while
// liveness and downloads are still answered, so a load balancer that can
// reach only this port takes registryd out of rotation before the port
// closes. Probes are counted under their own routes and write no access
// log line.
func TestProxyProbes(t *testing.T) {
	d := Start(t, map[string]string{"REGISTRYD_SHUTDOWN_DRAIN_DELAY": "1h"})
	wantResp(t, doRequest(t, "GET", d.Proxy+"/-/readiness", nil), 200, `{"status":"ok"}`)
	wantResp(t, doRequest(t, "GET", d.Proxy+"/-/liveness", nil), 200, `{"status":"ok"}`)
	if r := doRequest(t, "HEAD", d.Proxy+"/-/readiness", nil); r.Status != 200 || len(r.Body) != 0 {
		t.Errorf("HEAD /-/readiness: %d %q", r.Status, r.Body)
	}
	m := d.Do("GET", "/metrics", "", nil).Expect(t, 200).Body
	for route, want := range map[string]float64{"readiness": 2, "liveness": 1} {
		if v, _ := metricSample(t, m, "registryd_proxy_requests_total", map[string]string{"route": route, "code": "200"}); v != want {
			t.Errorf("registryd_proxy_requests_total{route=%s,code=200} = %v, want %v", route, v, want)
		}
	}
	if v, ok := metricSample(t, m, "registryd_proxy_requests_total", map[string]string{"route": "other", "code": "404"}); ok {
		t.Errorf("probes counted as other requests: %v", v)
	}

	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitNotReady(t, d.Proxy+"/-/readiness")
	wantResp(t, doRequest(t, "GET", d.Proxy+"/-/readiness", nil), 503, `{"status":"failed","message":"shutting down"}`)
	wantResp(t, d.Do("GET", "/-/readiness", "", nil), 503, `{"status":"failed","message":"shutting down"}`)
	wantResp(t, doRequest(t, "GET", d.Proxy+"/-/liveness", nil), 200, `{"status":"ok"}`)
	if r := doRequest(t, "GET", d.Proxy+"/api/v4/virtual_registries/packages/maven/1/org/x/x/1/x-1.pom", nil); r.Status >= 500 {
		t.Fatalf("a download answered %d during the drain delay", r.Status)
	}

	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-d.exited:
	case <-time.After(30 * time.Second):
		t.Fatal("registryd did not stop within 30s of the second signal")
	}
	if d.exitErr != nil {
		t.Fatalf("exit: %v\n%s", d.exitErr, d.Logs())
	}
	d.cmd = nil
	// The access log (flushed at the stop) has the download, not the probes.
	var access []string
	for _, l := range strings.Split(d.Logs(), "\n") {
		if strings.Contains(l, `"msg":"access"`) {
			access = append(access, l)
		}
	}
	if len(access) != 1 || !strings.Contains(access[0], "/org/x/x/1/x-1.pom") {
		t.Errorf("access log lines: want the download's alone, got:\n%s", strings.Join(access, "\n"))
	}
}
