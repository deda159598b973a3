package itest

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// chromiumPath finds a Chromium to drive: $REGISTRYD_TEST_CHROMIUM, then
// Debian's chromium, then the other usual names. Without one the browser
// test is skipped, except in CI (CI=true), where .ci/run installs Debian's
// chromium and a skip would hide the missing browser.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{os.Getenv("REGISTRYD_TEST_CHROMIUM"), "chromium", "chromium-browser", "google-chrome"} {
		if name == "" {
			continue
		}
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "no Chromium found (chromium, chromium-browser, google-chrome or $REGISTRYD_TEST_CHROMIUM); on Debian: apt-get install chromium"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg + " (.ci/run installs it: CI must not skip this test)")
	}
	t.Skip(msg)
	return ""
}

// consoleArtifacts is where the browser test writes its screenshots:
// $REGISTRYD_TEST_ARTIFACTS, else itest/out/console (ignored by git).
func consoleArtifacts(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("REGISTRYD_TEST_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join("out", "console")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// tab is one headless Chromium tab on the console of a daemon.
type tab struct {
	t    *testing.T
	ctx  context.Context
	base string
	out  string
}

func newTab(t *testing.T, exe, base, out string) *tab {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe),
		// The test runs as root in CI, where Chromium's sandbox will not start.
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.WindowSize(1280, 900),
		chromedp.Flag("disable-dev-shm-usage", true),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	ctx, cancelTime := context.WithTimeout(ctx, 3*time.Minute)
	t.Cleanup(func() { cancelTime(); cancelTab(); cancelAlloc() })
	return &tab{t: t, ctx: ctx, base: base, out: out}
}

// open navigates to path and returns the status of the page it ends on.
func (b *tab) open(path string) int {
	b.t.Helper()
	res, err := chromedp.RunResponse(b.ctx, chromedp.Navigate(b.base+path))
	if err != nil {
		b.t.Fatalf("open %s: %v", path, err)
	}
	return int(res.Status)
}

// submit clicks the button sel (a form's submit) and returns the status of
// the page the browser ends on, after the console's redirect.
func (b *tab) submit(sel string) int {
	b.t.Helper()
	res, err := chromedp.RunResponse(b.ctx, chromedp.Click(chromedp.CSS(sel), chromedp.NodeVisible))
	if err != nil {
		b.t.Fatalf("click %s: %v", sel, err)
	}
	return int(res.Status)
}

func (b *tab) do(actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, actions...); err != nil {
		b.t.Fatal(err)
	}
}

// text is the visible text of the page's main element.
func (b *tab) text() string {
	b.t.Helper()
	s, err := chromedp.Run(b.ctx, chromedp.Text(chromedp.CSS("main")))
	if err != nil {
		b.t.Fatal(err)
	}
	return s
}

func (b *tab) location() string {
	b.t.Helper()
	s, err := chromedp.Run(b.ctx, chromedp.Location())
	if err != nil {
		b.t.Fatal(err)
	}
	return strings.TrimPrefix(s, b.base)
}

func (b *tab) wantText(what string, contains ...string) string {
	b.t.Helper()
	txt := b.text()
	for _, c := range contains {
		if !strings.Contains(txt, c) {
			b.t.Fatalf("%s: the page (%s) lacks %q:\n%s", what, b.location(), c, txt)
		}
	}
	return txt
}

// shot writes a full-page PNG of what the tab shows to the artifacts dir.
func (b *tab) shot(name string) {
	b.t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatal(err)
	}
	if len(png) < 8 || string(png[1:4]) != "PNG" {
		b.t.Fatalf("screenshot %s is no PNG", name)
	}
	p := filepath.Join(b.out, name+".png")
	if err := os.WriteFile(p, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot %s", p)
}

func (b *tab) signIn(token string) {
	b.t.Helper()
	if st := b.open("/-/console/"); st != http.StatusOK || b.location() != "/-/console/sign_in" {
		b.t.Fatalf("signed out, /-/console/ ended on %s (%d)", b.location(), st)
	}
	b.do(chromedp.SendKeys(chromedp.CSS("#token"), token))
	if st := b.submit(`form[action="/-/console/sign_in"] button`); st != http.StatusOK {
		b.t.Fatalf("sign in: %d: %s", st, b.text())
	}
	if b.location() != "/-/console/groups" {
		b.t.Fatalf("after sign-in: %s", b.location())
	}
}

// TestConsoleBrowser drives the web console in headless Chromium as a
// person would: sign in with a token, walk the pages, see an unhealthy
// upstream turn healthy, move an upstream, search and delete a cache entry,
// read a dependency list, sign out; then, as a user who is no admin, be
// refused the audit log. Each change is checked through the API, and the
// main pages are written as PNG screenshots (consoleArtifacts).
func TestConsoleBrowser(t *testing.T) {
	exe := chromiumPath(t)
	// The traffic history is recorded every second, so the charts show
	// the downloads below without waiting a minute.
	d := Start(t, map[string]string{"REGISTRYD_UPSTREAMS_BACKOFF": "1s", "REGISTRYD_UPSTREAMS_MAX_BACKOFF": "2s",
		"REGISTRYD_ADMIN_TRAFFIC_HISTORY_INTERVAL": "1s"})
	f := d.Fix(t)
	group := f.Group("acme", 0, "private")
	reg := f.Registry(group, "main")
	central := newPxUpstream(t)
	jars := []string{"org/example/lib-a/1.0/lib-a-1.0.jar", "org/example/lib-b/2.0/lib-b-2.0.jar", "org/other/tool/3.1/tool-3.1.jar"}
	for _, p := range jars {
		central.set(p, pxFile{body: pxBody(p, 2048)})
	}
	centralID := f.Upstream(reg, central.URL, map[string]any{"name": "central"})
	mirror := newPxUpstream(t)
	f.Upstream(reg, mirror.URL, map[string]any{"name": "mirror"})
	// flaky's server is down at first: nothing listens on its port.
	flakyAddr := closedPort(t)
	flakyID := f.Upstream(reg, "http://"+flakyAddr+"/maven2", map[string]any{"name": "flaky"})
	for _, p := range jars {
		d.pxGet(t, reg, p, "PRIVATE-TOKEN", rootToken).Expect(t, 200)
	}
	// A file only flaky could have: the refused connection makes it unhealthy.
	only := "org/flaky/only/1.0/only-1.0.jar"
	if r := d.pxGet(t, reg, only, "PRIVATE-TOKEN", rootToken); r.Status == 200 {
		t.Fatalf("%s answered 200 with flaky down", only)
	}
	var health struct {
		Status string `json:"status"`
	}
	d.Do("GET", vr("/upstreams/%d", flakyID), rootToken, nil).Expect(t, 200).JSON(t, &health)
	if health.Status != "unhealthy" {
		t.Fatalf("flaky is %q after a refused connection", health.Status)
	}
	project := createProject(t, d, rootToken, group, "app", "private")
	sbom, err := os.ReadFile(filepath.Join("..", "testdata", "sbom", "cyclonedx-npm-vulnerable-1.5.json"))
	if err != nil {
		t.Fatal(err)
	}
	d.Do("PUT", fmt.Sprintf("/projects/%d/dependencies", project), rootToken, sbom,
		"Content-Type", "application/vnd.cyclonedx+json").Expect(t, 200)
	devID, devToken := f.User("dev", false)
	f.Member(group, devID, 30)
	// central refuses org.blocked: one download of it is an audit event.
	d.Do("POST", vr("/upstreams/%d/rules", centralID), rootToken,
		map[string]any{"rule_type": "deny", "target_coordinate": "group_id", "pattern": "org.blocked*"}).Expect(t, 201)
	d.pxGet(t, reg, "org/blocked/x/1.0/x-1.0.jar", "PRIVATE-TOKEN", devToken)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		var events []map[string]any
		d.Do("GET", "/audit_events", rootToken, nil).Expect(t, 200).JSON(t, &events)
		if len(events) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the refused download left no audit event")
		}
	}

	b := newTab(t, exe, d.Admin, consoleArtifacts(t))
	b.open("/-/console/sign_in")
	b.shot("sign-in")
	b.signIn(rootToken)
	b.wantText("groups", "acme")
	// Keyboard: the first Tab reaches the skip link, the next ones the menu.
	for _, want := range []string{"Skip to content", "Groups", "Projects", "Audit events"} {
		b.do(chromedp.KeyEvent("\t"))
		if focused, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.activeElement.textContent`)); err != nil || focused != want {
			t.Fatalf("Tab focuses %q (%v), want %q", focused, err, want)
		}
	}
	b.shot("groups")

	// groups -> group -> registry, by following the links.
	b.submit(`a[href="/-/console/groups/` + itoa(group) + `"]`)
	b.wantText("group", "Virtual registries", "main", "Cleanup policy", "This group has no cleanup policy")
	b.submit(`form[action="/-/console/groups/` + itoa(group) + `/cleanup_dry_run"] button`)
	b.wantText("cleanup preview", "would delete", "Nothing was deleted")
	b.submit(`a[href="/-/console/groups/` + itoa(group) + `"]`)
	b.submit(`a[href="/-/console/registries/` + itoa(reg) + `"]`)
	txt := b.wantText("registry", "1. central", "2. mirror", "3. flaky", "✖ unhealthy", "Connection refused", "Retry at")
	if strings.Index(txt, "central") > strings.Index(txt, "mirror") {
		t.Fatalf("upstreams out of order:\n%s", txt)
	}
	// Its connection test fails, and says why.
	if st := b.submit(`button[aria-label="Test the connection to flaky"]`); st != http.StatusOK {
		t.Fatalf("test connection: %d", st)
	}
	b.wantText("test connection", "Failed: The connection test of flaky failed", "✖ unhealthy")
	b.shot("registry-unhealthy")

	// flaky comes back: once its retry time passed, the next miss is its
	// trial and it turns healthy; the page shows it.
	ln, err := net.Listen("tcp", flakyAddr)
	if err != nil {
		t.Fatalf("listening on flaky's port again: %v", err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/maven2/"+only {
			w.Header().Set("Content-Type", "application/java-archive")
			w.Write(pxBody(only, 512))
			return
		}
		http.NotFound(w, r)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	deadline := time.Now().Add(30 * time.Second)
	for {
		if d.pxGet(t, reg, only, "PRIVATE-TOKEN", rootToken).Status == 200 {
			break
		}
		if time.Now().After(deadline) {
			r := d.pxGet(t, reg, only, "PRIVATE-TOKEN", rootToken)
			t.Fatalf("flaky never served its file again: %d %s; %s", r.Status, r.Body, d.Do("GET", vr("/upstreams/%d", flakyID), rootToken, nil).Body)
		}
		time.Sleep(300 * time.Millisecond)
	}
	b.open("/-/console/registries/" + itoa(reg))
	b.wantText("registry after recovery", "3. flaky")
	if txt := b.text(); strings.Contains(txt, "✖ unhealthy") {
		t.Fatalf("flaky still unhealthy on the page:\n%s", txt)
	}

	// The traffic charts: once a sample recorded the downloads above, the
	// registry page counts them, draws them, and has their numbers in a
	// table a keyboard opens.
	// The jars again: hits now, served from the cache.
	for _, p := range jars {
		d.pxGet(t, reg, p, "PRIVATE-TOKEN", rootToken).Expect(t, 200)
	}
	requests := regexp.MustCompile(`Last 24 hours: ([0-9]+) requests?, hit ratio ([0-9.]+)%, [^,]+ served, ([0-9.]+ [KM]iB) of it from the cache`)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(300 * time.Millisecond) {
		b.open("/-/console/registries/" + itoa(reg))
		if m := requests.FindStringSubmatch(b.text()); m != nil && m[1] != "0" && m[2] != "0.0" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the registry page shows no requests:\n%s", b.text())
		}
	}
	if n, err := chromedp.Run(b.ctx, chromedp.Evaluate[int](`document.querySelectorAll('section.traffic svg.chart[role=img] polyline').length`)); err != nil || n < 3 {
		t.Fatalf("%d lines drawn in the traffic charts (%v)", n, err)
	}
	if open, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](`document.querySelector('section.traffic details').open`)); err != nil || open {
		t.Fatalf("the numbers' table is open before it is asked for (%v)", err)
	}
	b.do(chromedp.Focus(chromedp.CSS(`section.traffic summary`)), chromedp.KeyEvent("\r"))
	txt = b.wantText("traffic numbers", "The numbers of the charts", "Bytes served", "Upstream traffic saved", "UTC")
	if open, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](`document.querySelector('section.traffic details').open`)); err != nil || !open {
		t.Fatalf("Enter on the summary did not open the numbers' table (%v)", err)
	}
	b.shot("registry-traffic")
	// Each upstream: its line on the registry page and its charts on its own page.
	b.wantText("upstream traffic", "Last 24 hours (all its registries):")
	b.open("/-/console/upstreams/" + itoa(centralID) + "/cache_entries?range=1h")
	b.wantText("central's traffic", "Traffic of upstream central", "Last hour, through all registries of the upstream:", "Requests sent to the upstream")
	if n, err := chromedp.Run(b.ctx, chromedp.Evaluate[int](`document.querySelectorAll('section.traffic svg.chart').length`)); err != nil || n != 4 {
		t.Fatalf("%d charts on central's page (%v)", n, err)
	}
	b.open("/-/console/registries/" + itoa(reg))

	// Move mirror to the top with its button; the API shows the new order.
	if st := b.submit(`button[aria-label="Move mirror up"]`); st != http.StatusOK {
		t.Fatalf("move: %d", st)
	}
	b.wantText("after the move", "Moved the upstream to position 1", "1. mirror", "2. central")
	var order []struct {
		Name string `json:"name"`
	}
	d.Do("GET", vr("/registries/%d/upstreams", reg), rootToken, nil).Expect(t, 200).JSON(t, &order)
	if len(order) != 3 || order[0].Name != "mirror" || order[1].Name != "central" || order[2].Name != "flaky" {
		t.Fatalf("API order after the move: %+v", order)
	}
	b.shot("registry")

	// central's cache: search, then delete one entry.
	var entries []struct {
		Path string `json:"relative_path"`
	}
	b.submit(`a[href="/-/console/upstreams/` + itoa(centralID) + `/cache_entries"]`)
	b.wantText("cache", "lib-a-1.0.jar", "lib-b-2.0.jar", "tool-3.1.jar", "deny", "org.blocked*")
	b.shot("cache-entries")
	b.do(chromedp.SendKeys(chromedp.CSS("#search"), "lib-"))
	b.submit(`form.search button`)
	txt = b.wantText("search", "lib-a-1.0.jar", "lib-b-2.0.jar")
	if strings.Contains(txt, "tool-3.1.jar") {
		t.Fatalf("the search shows what it should not:\n%s", txt)
	}
	// The same form without its CSRF token is refused and deletes nothing.
	b.do(chromedp.Evaluate[chromedp.Void](`document.querySelectorAll('input[name=csrf]').forEach(e => e.value = '')`))
	if st := b.submit(`button[aria-label="Delete /org/example/lib-a/1.0/lib-a-1.0.jar"]`); st != http.StatusForbidden {
		t.Fatalf("delete without the CSRF token: %d, want 403", st)
	}
	b.wantText("CSRF-less delete", "CSRF token is missing or wrong")
	d.Do("GET", vr("/upstreams/%d/cache_entries", centralID), rootToken, nil).Expect(t, 200).JSON(t, &entries)
	if len(entries) != 3 {
		t.Fatalf("API entries after a CSRF-less delete: %+v", entries)
	}
	b.open("/-/console/upstreams/" + itoa(centralID) + "/cache_entries?search=lib-")
	if st := b.submit(`button[aria-label="Delete /org/example/lib-a/1.0/lib-a-1.0.jar"]`); st != http.StatusOK {
		t.Fatalf("delete: %d", st)
	}
	txt = b.wantText("after the delete", "Deleted /org/example/lib-a/1.0/lib-a-1.0.jar", "lib-b-2.0.jar")
	if strings.Contains(txt, "lib-a-1.0.jar\t") || strings.Count(txt, "lib-a-1.0.jar") != 1 {
		t.Fatalf("the deleted entry is still listed:\n%s", txt)
	}
	entries = nil
	d.Do("GET", vr("/upstreams/%d/cache_entries", centralID), rootToken, nil).Expect(t, 200).JSON(t, &entries)
	if len(entries) != 2 {
		t.Fatalf("API entries after the delete: %+v", entries)
	}
	for _, e := range entries {
		if e.Path == "/org/example/lib-a/1.0/lib-a-1.0.jar" {
			t.Fatalf("the deleted entry is in the API list: %+v", entries)
		}
	}

	// Dependencies with their vulnerabilities, and the audit log.
	b.open("/-/console/projects")
	b.submit(`a[href="/-/console/projects/` + itoa(project) + `/dependencies"]`)
	b.wantText("dependencies", "Dependencies of app", "CVE-")
	b.shot("dependencies")
	b.submit(`a[href="/-/console/projects/` + itoa(project) + `/events"]`)
	b.wantText("activity", "Activity of app", "@root", "created")
	if st := b.open("/-/console/groups/" + itoa(group) + "/audit_events"); st != http.StatusOK {
		t.Fatalf("group audit events as root: %d", st)
	}
	if st := b.open("/-/console/audit_events"); st != http.StatusOK {
		t.Fatalf("audit events as root: %d", st)
	}
	b.wantText("audit", "Audit events", "virtual_registries_packages_maven_upstream_artifact_denied", "dev", "org.blocked")
	b.shot("audit-events")

	// A phone's width: nothing wider than the screen but the tables, which scroll.
	b.do(chromedp.EmulateViewport(390, 844))
	b.open("/-/console/registries/" + itoa(reg))
	if fits, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](`document.documentElement.scrollWidth <= window.innerWidth`)); err != nil || !fits {
		t.Fatalf("the registry page is wider than a phone (%v)", err)
	}
	b.shot("registry-phone")
	b.do(chromedp.EmulateViewport(1280, 900))

	// Sign out: the console asks for a token again.
	b.submit(`form.signout button`)
	if b.location() != "/-/console/sign_in" {
		t.Fatalf("after sign-out: %s", b.location())
	}
	if b.open("/-/console/groups"); b.location() != "/-/console/sign_in" {
		t.Fatalf("signed out, groups ended on %s", b.location())
	}
	// A session cookie the server never issued is no session.
	b.do(chromedp.Evaluate[chromedp.Void](`document.cookie = "registryd_console=` + strings.Repeat("ab", 32) + `; path=/-/console/"`))
	if set, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](`document.cookie.includes("registryd_console=abab")`)); err != nil || !set {
		t.Fatalf("the forged cookie was not set (%v)", err)
	}
	if b.open("/-/console/groups"); b.location() != "/-/console/sign_in" {
		t.Fatalf("with a forged cookie, groups ended on %s", b.location())
	}

	// A developer, no admin: sees the registry, is refused the audit log
	// with the API's 403.
	b.signIn(devToken)
	if st := b.open("/-/console/registries/" + itoa(reg)); st != http.StatusOK {
		t.Fatalf("registry as developer: %d", st)
	}
	if st := b.open("/-/console/audit_events"); st != http.StatusForbidden {
		t.Fatalf("audit events as a developer: %d, want 403", st)
	}
	b.wantText("refused", "403 Forbidden")
	b.shot("refused")
	noServerErrors(t, d)
}
