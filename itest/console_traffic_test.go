package itest

import (
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"
)

// consoleGet signs in to the console of d with token over plain HTTP and
// returns the body of path.
func consoleGet(t *testing.T, d *Daemon, token, path string) string {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar}
	read := func(res *http.Response, err error) string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d\n%s", res.Request.URL, res.StatusCode, b)
		}
		return string(b)
	}
	form := read(c.Get(d.Admin + "/-/console/sign_in"))
	m := regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`).FindStringSubmatch(form)
	if m == nil {
		t.Fatalf("no CSRF token in the sign-in form:\n%s", form)
	}
	read(c.PostForm(d.Admin+"/-/console/sign_in", url.Values{"token": {token}, "csrf": {m[1]}}))
	return read(c.Get(d.Admin + path))
}

// TestConsoleTrafficSurvivesRestart: with an interval longer than the
// test, only the stop records the traffic; after the restart, the console
// shows it from the index.
func TestConsoleTrafficSurvivesRestart(t *testing.T) {
	d := Start(t, map[string]string{"REGISTRYD_ADMIN_TRAFFIC_HISTORY_INTERVAL": "1h"})
	f := d.Fix(t)
	reg := f.Registry(f.Group("acme", 0, "private"), "main")
	up := newPxUpstream(t)
	jars := []string{"org/example/a/1.0/a-1.0.jar", "org/example/b/1.0/b-1.0.jar"}
	for _, p := range jars {
		up.set(p, pxFile{body: pxBody(p, 4096)})
	}
	upID := f.Upstream(reg, up.URL, map[string]any{"name": "central"})
	for range 2 {
		for _, p := range jars {
			d.pxGet(t, reg, p, "PRIVATE-TOKEN", rootToken).Expect(t, 200)
		}
	}
	page := consoleGet(t, d, rootToken, "/-/console/registries/"+itoa(reg)+"?range=1h")
	if !strings.Contains(page, "Last hour: 0 requests") {
		t.Fatalf("traffic recorded before the first interval ended:\n%s", page)
	}

	d.Restart()
	page = consoleGet(t, d, rootToken, "/-/console/registries/"+itoa(reg)+"?range=1h")
	for _, want := range []string{
		"Last hour: 4 requests, hit ratio 50.0%, 16.0 KiB served, 8.0 KiB of it from the cache (upstream traffic saved).",
		"Last hour (all its registries): 4 requests, hit ratio 50.0%, 2 sent to the upstream, 0 failed.",
	} {
		if !strings.Contains(page, want) {
			t.Fatalf("after the restart, the registry page lacks %q:\n%s", want, page)
		}
	}
	page = consoleGet(t, d, rootToken, "/-/console/upstreams/"+itoa(upID)+"/cache_entries?range=30d")
	if !strings.Contains(page, "Last 30 days, through all registries of the upstream: 4 requests, hit ratio 50.0%, 16.0 KiB served, "+
		"8.0 KiB of it from the cache (upstream traffic saved), 2 sent to the upstream, 0 failed.") {
		t.Fatalf("after the restart, the upstream's 30 days lack the traffic:\n%s", page)
	}
	noServerErrors(t, d)
}

// TestClusterConsoleTraffic: each node records its own traffic, and the
// console of either node adds them up.
func TestClusterConsoleTraffic(t *testing.T) {
	c := startCluster(t, 2, map[string]string{"REGISTRYD_ADMIN_TRAFFIC_HISTORY_INTERVAL": "1s"})
	a, b := c.nodes[0], c.nodes[1]
	f := a.Fix(t)
	reg := f.Registry(f.Group("acme", 0, "private"), "main")
	up := newPxUpstream(t)
	up.set(pxJar, pxFile{body: pxBody("lib", 8<<10)})
	f.Upstream(reg, up.URL, nil)
	// A fills the file (a miss), B serves it twice from the shared cache.
	a.pxGet(t, reg, pxJar, "PRIVATE-TOKEN", rootToken).Expect(t, 200)
	for range 2 {
		b.pxGet(t, reg, pxJar, "PRIVATE-TOKEN", rootToken).Expect(t, 200)
	}
	want := "Last hour: 3 requests, hit ratio 66.7%, 24.0 KiB served, 16.0 KiB of it from the cache"
	for _, node := range []*Daemon{a, b} {
		var page string
		eventually(t, 30*time.Second, "the console adds up both nodes' traffic", func() bool {
			page = consoleGet(t, node, rootToken, "/-/console/registries/"+itoa(reg)+"?range=1h")
			return strings.Contains(page, want)
		})
	}
	for _, n := range c.nodes {
		noServerErrors(t, n)
	}
}
