package admin

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"registryd/store"
	"registryd/upstream"
)

// browser is a cookie-keeping client of a console under test that does not
// follow redirects, so each answer can be checked.
type browser struct {
	t    *testing.T
	base string
	c    *http.Client
	csrf string // the last page's CSRF token
}

func newBrowser(t *testing.T, h http.Handler) *browser {
	t.Helper()
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	jar, _ := cookiejar.New(nil)
	return &browser{t: t, base: ts.URL, c: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}}
}

var csrfField = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

// do sends one request and returns status, Location and body; it keeps the
// page's CSRF token.
func (b *browser) do(req *http.Request) (int, string, string) {
	b.t.Helper()
	res, err := b.c.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	if m := csrfField.FindSubmatch(body); m != nil {
		b.csrf = string(m[1])
	}
	return res.StatusCode, res.Header.Get("Location"), string(body)
}

func (b *browser) get(path string) (int, string, string) {
	b.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, b.base+path, nil)
	return b.do(req)
}

// post sends a form; csrf is added unless the form has its own key.
func (b *browser) post(path string, form url.Values) (int, string, string) {
	b.t.Helper()
	if _, ok := form["csrf"]; !ok {
		form.Set("csrf", b.csrf)
	}
	req, _ := http.NewRequest(http.MethodPost, b.base+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return b.do(req)
}

func (b *browser) signIn(token string) {
	b.t.Helper()
	if st, _, body := b.get("/-/console/sign_in"); st != http.StatusOK {
		b.t.Fatalf("sign-in page: %d %s", st, body)
	}
	st, loc, body := b.post("/-/console/sign_in", url.Values{"token": {token}})
	if st != http.StatusSeeOther || loc != "/-/console/groups" {
		b.t.Fatalf("sign in: %d %q %s", st, loc, body)
	}
	if st, _, body := b.get("/-/console/groups"); st != http.StatusOK {
		b.t.Fatalf("groups after sign-in: %d %s", st, body)
	}
}

// signInOnly posts the sign-in form with token and wants status.
func (b *browser) signInOnly(token string, status int) {
	b.t.Helper()
	b.get("/-/console/sign_in")
	if st, _, body := b.post("/-/console/sign_in", url.Values{"token": {token}}); st != status {
		b.t.Fatalf("sign in: %d, want %d: %s", st, status, body)
	}
}

func wantPage(t *testing.T, what string, st int, body string, status int, contains ...string) {
	t.Helper()
	if st != status {
		t.Fatalf("%s: status %d, want %d: %s", what, st, status, body)
	}
	for _, c := range contains {
		if !strings.Contains(body, c) {
			t.Fatalf("%s: page lacks %q:\n%s", what, c, body)
		}
	}
}

func TestConsoleSignInAndOut(t *testing.T) {
	e := newCacheEntryEnv(t, nil)
	b := newBrowser(t, e.srv)

	// Signed out, a page leads to the sign-in form.
	st, loc, _ := b.get("/-/console/groups")
	if st != http.StatusSeeOther || loc != "/-/console/sign_in" {
		t.Fatalf("signed out: %d %q", st, loc)
	}
	st, _, body := b.get("/-/console/sign_in")
	wantPage(t, "sign-in page", st, body, http.StatusOK, `type="password"`, `name="csrf"`)

	// A sign-in without the form's CSRF token is refused, as is a bad token.
	st, _, body = b.post("/-/console/sign_in", url.Values{"token": {ceRootToken}, "csrf": {"0123"}})
	wantPage(t, "sign-in with a wrong csrf", st, body, http.StatusForbidden, "CSRF")
	b.get("/-/console/sign_in")
	st, _, body = b.post("/-/console/sign_in", url.Values{"token": {"rdpat-nobody"}})
	wantPage(t, "bad token", st, body, http.StatusUnauthorized, "not valid")
	// A deploy token is no personal access token.
	st, _, body = b.post("/-/console/sign_in", url.Values{"token": {e.tokens["deploy"]}})
	wantPage(t, "deploy token", st, body, http.StatusUnauthorized, "not valid")

	b.get("/-/console/sign_in")
	req, _ := http.NewRequest(http.MethodPost, b.base+"/-/console/sign_in",
		strings.NewReader(url.Values{"token": {e.tokens["maintainer"]}, "csrf": {b.csrf}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	res, err := b.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign in: %d", res.StatusCode)
	}
	var sc *http.Cookie
	for _, c := range res.Cookies() {
		if c.Name == consoleCookie && c.Value != "" {
			sc = c
		}
	}
	if sc == nil {
		t.Fatalf("no session cookie in %v", res.Header["Set-Cookie"])
	}
	if !sc.HttpOnly || sc.Secure || sc.SameSite != http.SameSiteStrictMode || sc.Path != "/-/console/" ||
		sc.MaxAge != int((8*time.Hour).Seconds()) || strings.Contains(sc.Value, e.tokens["maintainer"]) {
		t.Fatalf("session cookie %+v", sc)
	}

	st, _, body = b.get("/-/console/groups")
	wantPage(t, "groups", st, body, http.StatusOK, "@maintainer", `href="/-/console/groups/1"`, "acme")
	if strings.Contains(body, "Audit events</a>") {
		t.Fatal("a non-admin sees the instance audit link")
	}

	st, loc, _ = b.post("/-/console/sign_out", url.Values{})
	if st != http.StatusSeeOther || loc != "/-/console/sign_in" {
		t.Fatalf("sign out: %d %q", st, loc)
	}
	// The old cookie, replayed, is no session any more.
	b.c.Jar.SetCookies(mustURL(b.base+"/-/console/"), []*http.Cookie{{Name: consoleCookie, Value: sc.Value, Path: "/-/console/"}})
	if st, loc, _ = b.get("/-/console/groups"); st != http.StatusSeeOther || loc != "/-/console/sign_in" {
		t.Fatalf("after sign-out: %d %q", st, loc)
	}
}

func mustURL(s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		panic(err)
	}
	return u
}

func TestConsoleSecureCookieUnderTLS(t *testing.T) {
	e := newCacheEntryEnv(t, nil)
	ts := httptest.NewTLSServer(e.srv)
	defer ts.Close()
	c := ts.Client()
	res, err := c.Get(ts.URL + "/-/console/sign_in")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	for _, ck := range res.Cookies() {
		if ck.Name == consoleSignInCook && (!ck.Secure || !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode) {
			t.Fatalf("sign-in cookie under TLS: %+v", ck)
		}
	}
	if len(res.Cookies()) == 0 {
		t.Fatal("no sign-in cookie")
	}
	if csp := res.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") {
		t.Fatalf("CSP %q", csp)
	}
}

// Behind a TLS-terminating proxy (external.url https) the listener sees
// plain HTTP, and the cookies are Secure all the same.
func TestConsoleSecureCookieBehindTLSProxy(t *testing.T) {
	e := newCacheEntryEnv(t, func(o *serverOptions) { o.admin.ExternalURL = "https://registry.example" })
	res := serve(e.srv, httptest.NewRequest(http.MethodGet, "/-/console/sign_in", nil))
	res.want(t, http.StatusOK)
	if c := res.header.Get("Set-Cookie"); !strings.Contains(c, "; Secure") || !strings.Contains(c, "HttpOnly") {
		t.Fatalf("sign-in cookie behind a TLS proxy: %q", c)
	}
}

// Signing in again, with another token, ends the first session.
func TestConsoleSignInAgain(t *testing.T) {
	e := newCacheEntryEnv(t, nil)
	b := newBrowser(t, e.srv)
	b.signIn(e.tokens["guest"])
	u := mustURL(b.base + "/-/console/")
	first := b.c.Jar.Cookies(u)
	if len(first) != 1 || first[0].Name != consoleCookie {
		t.Fatalf("cookies after sign-in: %v", first)
	}
	b.get("/-/console/sign_in") // signed in: back to the groups
	b.c.Jar.SetCookies(u, []*http.Cookie{{Name: consoleSignInCook, Value: "n0nce", Path: "/-/console/"}})
	st, _, body := b.post("/-/console/sign_in", url.Values{"token": {e.tokens["owner"]}, "csrf": {"n0nce"}})
	if st != http.StatusSeeOther {
		t.Fatalf("second sign-in: %d %s", st, body)
	}
	if _, _, body = b.get("/-/console/groups"); !strings.Contains(body, "@owner") {
		t.Fatalf("after the second sign-in: %s", body)
	}
	old := newBrowser(t, e.srv)
	old.base = b.base
	old.c.Jar.SetCookies(u, first)
	if st, loc, _ := old.get("/-/console/groups"); st != http.StatusSeeOther || loc != "/-/console/sign_in" {
		t.Fatalf("the first session still works: %d %q", st, loc)
	}
}

func TestConsoleSessionExpiry(t *testing.T) {
	e := newCacheEntryEnv(t, func(o *serverOptions) { o.admin.ConsoleSessionTTL = time.Hour })
	e.srv.console.now = e.clock.Now
	b := newBrowser(t, e.srv)
	b.signIn(e.tokens["owner"])
	e.clock.Advance(59 * time.Minute)
	if st, _, body := b.get("/-/console/groups"); st != http.StatusOK {
		t.Fatalf("within the hour: %d %s", st, body)
	}
	e.clock.Advance(time.Minute)
	if st, loc, _ := b.get("/-/console/groups"); st != http.StatusSeeOther || loc != "/-/console/sign_in" {
		t.Fatalf("after the hour: %d %q", st, loc)
	}
	st, _, body := b.post("/-/console/upstreams/1/invalidate", url.Values{})
	wantPage(t, "a form after expiry", st, body, http.StatusForbidden, "sign in again")
}

func TestConsoleRevokedTokenEndsSession(t *testing.T) {
	e := newCacheEntryEnv(t, nil)
	b := newBrowser(t, e.srv)
	b.signIn(e.tokens["owner"])
	req := httptest.NewRequest(http.MethodDelete, "/api/v4/personal_access_tokens/self", nil)
	req.Header.Set("Private-Token", e.tokens["owner"])
	serve(e.srv, req).want(t, http.StatusNoContent)
	st, _, body := b.get("/-/console/groups")
	wantPage(t, "revoked token", st, body, http.StatusUnauthorized, "sign in again")
	if st, loc, _ := b.get("/-/console/groups"); st != http.StatusSeeOther || loc != "/-/console/sign_in" {
		t.Fatalf("after revocation: %d %q", st, loc)
	}
}

func TestConsoleForgedCookie(t *testing.T) {
	e := newCacheEntryEnv(t, nil)
	entry := e.put(e.upstream.ID, "/org/example/lib/1.0/lib-1.0.jar")
	b := newBrowser(t, e.srv)
	b.c.Jar.SetCookies(mustURL(b.base+"/-/console/"), []*http.Cookie{{Name: consoleCookie, Value: strings.Repeat("ab", 32), Path: "/-/console/"}})
	if st, loc, _ := b.get("/-/console/groups"); st != http.StatusSeeOther || loc != "/-/console/sign_in" {
		t.Fatalf("forged cookie, GET: %d %q", st, loc)
	}
	st, _, body := b.post("/-/console/cache_entries/delete", url.Values{"csrf": {strings.Repeat("cd", 32)},
		"id": {entryID(e.upstream.ID, entry.RelativePath)}, "upstream_id": {"1"}})
	wantPage(t, "forged cookie, POST", st, body, http.StatusForbidden)
	e.do(http.MethodGet, fmt.Sprintf("/api/v4/virtual_registries/packages/maven/upstreams/%d/cache_entries", e.upstream.ID), "root").
		want(t, http.StatusOK)
	if n := len(e.do(http.MethodGet, fmt.Sprintf("/api/v4/virtual_registries/packages/maven/upstreams/%d/cache_entries", e.upstream.ID), "root").list(t)); n != 1 {
		t.Fatalf("%d entries after a forged delete, want 1", n)
	}
}

func entryID(upstreamID int64, rel string) string {
	return encodeCacheEntryID(upstreamID, rel)
}

func TestConsoleCSRF(t *testing.T) {
	e := newCacheEntryEnv(t, nil)
	entry := e.put(e.upstream.ID, "/org/example/lib/1.0/lib-1.0.jar")
	id := entryID(e.upstream.ID, entry.RelativePath)
	b := newBrowser(t, e.srv)
	b.signIn(e.tokens["maintainer"])
	for name, form := range map[string]url.Values{
		"no csrf":    {"csrf": {""}, "id": {id}, "upstream_id": {"1"}},
		"wrong csrf": {"csrf": {strings.Repeat("0", 64)}, "id": {id}, "upstream_id": {"1"}},
	} {
		st, _, body := b.post("/-/console/cache_entries/delete", form)
		wantPage(t, name, st, body, http.StatusForbidden, "CSRF")
	}
	// The right token from another origin is refused too.
	form := url.Values{"csrf": {b.csrf}, "id": {id}, "upstream_id": {"1"}}
	req, _ := http.NewRequest(http.MethodPost, b.base+"/-/console/cache_entries/delete", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "https://evil.example")
	if st, _, body := b.do(req); st != http.StatusForbidden {
		t.Fatalf("foreign origin: %d %s", st, body)
	}
	// A mutation by GET does not exist.
	if st, _, _ := b.get("/-/console/cache_entries/delete?id=" + url.QueryEscape(id) + "&upstream_id=1"); st != http.StatusMethodNotAllowed {
		t.Fatalf("GET of a form's action: %d", st)
	}
	if n := len(e.do(http.MethodGet, fmt.Sprintf("/api/v4/virtual_registries/packages/maven/upstreams/%d/cache_entries", e.upstream.ID), "root").list(t)); n != 1 {
		t.Fatalf("%d entries after refused deletes, want 1", n)
	}
}

func TestConsolePermissions(t *testing.T) {
	e := newCacheEntryEnv(t, nil)
	entry := e.put(e.upstream.ID, "/org/example/lib/1.0/lib-1.0.jar")
	id := entryID(e.upstream.ID, entry.RelativePath)
	regPage := fmt.Sprintf("/-/console/registries/%d", e.registry.ID)
	cachePage := fmt.Sprintf("/-/console/upstreams/%d/cache_entries", e.upstream.ID)

	// Someone outside the private group: its pages are 404, as in the API.
	out := newBrowser(t, e.srv)
	out.signIn(e.tokens["outsider"])
	for _, p := range []string{fmt.Sprintf("/-/console/groups/%d", e.group.ID), regPage, cachePage} {
		st, _, body := out.get(p)
		wantPage(t, "outsider "+p, st, body, http.StatusNotFound)
		if strings.Contains(body, "lib-1.0.jar") || strings.Contains(body, "repo.example") {
			t.Fatalf("outsider sees %s: %s", p, body)
		}
	}
	if _, _, body := out.get("/-/console/groups"); strings.Contains(body, "acme") {
		t.Fatal("outsider's group list shows the private group")
	}
	// The instance audit log is for admins: 403, as GET /audit_events.
	st, _, body := out.get("/-/console/audit_events")
	wantPage(t, "audit as non-admin", st, body, http.StatusForbidden, "403 Forbidden")

	// A guest reads the cache but may not delete: 403, entry kept.
	guest := newBrowser(t, e.srv)
	guest.signIn(e.tokens["guest"])
	st, _, body = guest.get(cachePage)
	wantPage(t, "guest cache page", st, body, http.StatusOK, "lib-1.0.jar")
	st, _, body = guest.post("/-/console/cache_entries/delete", url.Values{"id": {id}, "upstream_id": {"1"}})
	wantPage(t, "guest delete", st, body, http.StatusForbidden, "403 Forbidden")
	// A maintainer whose token only reads: the API's insufficient_scope.
	ro := newBrowser(t, e.srv)
	ro.signIn(e.tokens["maintainer_read_api"])
	ro.get(cachePage)
	st, _, body = ro.post("/-/console/cache_entries/delete", url.Values{"id": {id}, "upstream_id": {"1"}})
	wantPage(t, "read_api delete", st, body, http.StatusForbidden, "insufficient_scope")
	if n := len(e.do(http.MethodGet, fmt.Sprintf("/api/v4/virtual_registries/packages/maven/upstreams/%d/cache_entries", e.upstream.ID), "root").list(t)); n != 1 {
		t.Fatalf("%d entries after refused deletes, want 1", n)
	}

	// read_user signs in (GET /user allows it) and is refused every page, as by the API;
	// read_virtual_registry does not sign in.
	_, ru := newUserWithToken(t, e.st, "ru", "ru", store.ScopeReadUser)
	rub := newBrowser(t, e.srv)
	rub.signInOnly(ru, http.StatusSeeOther)
	st, _, body = rub.get("/-/console/groups")
	wantPage(t, "read_user groups", st, body, http.StatusForbidden, "insufficient_scope")
	_, rvr := newUserWithToken(t, e.st, "rvr", "rvr", store.ScopeReadVirtualRegistry)
	newBrowser(t, e.srv).signInOnly(rvr, http.StatusForbidden)

	// The admin sees the audit log, with the refusals above in it.
	admin := newBrowser(t, e.srv)
	admin.signIn(ceRootToken)
	st, _, body = admin.get("/-/console/audit_events")
	wantPage(t, "audit as admin", st, body, http.StatusOK, "Audit events")
	st, _, body = admin.get("/-/console/no/such/page")
	wantPage(t, "unknown page", st, body, http.StatusNotFound)
}

func TestConsoleCacheEntriesAndReorder(t *testing.T) {
	e := newCacheEntryEnv(t, nil)
	pu, err := e.st.CreateUpstream(e.registry.ID, store.NewUpstream{URL: "https://mirror.example/maven2", Name: "mirror"})
	if err != nil {
		t.Fatal(err)
	}
	a := e.put(e.upstream.ID, "/org/example/lib/1.0/lib-1.0.jar")
	e.put(e.upstream.ID, "/org/other/tool/2.0/tool-2.0.pom")
	b := newBrowser(t, e.srv)
	b.signIn(e.tokens["maintainer"])

	st, _, body := b.get(fmt.Sprintf("/-/console/registries/%d", e.registry.ID))
	wantPage(t, "registry", st, body, http.StatusOK, "1.</span> repo", "2.</span> mirror", "✔ healthy", "Move mirror up")
	if strings.Index(body, "repo</h3>") > strings.Index(body, "mirror</h3>") {
		t.Fatal("upstreams not in position order")
	}

	cachePage := fmt.Sprintf("/-/console/upstreams/%d/cache_entries", e.upstream.ID)
	st, _, body = b.get(cachePage)
	wantPage(t, "upstream without rules", st, body, http.StatusOK, "No rule: every file is asked of this upstream.")
	e.send(http.MethodPost, fmt.Sprintf("/api/v4/virtual_registries/packages/maven/upstreams/%d/rules", e.upstream.ID), "maintainer",
		`{"rule_type":"deny","target_coordinate":"group_id","pattern":"com.acme.*"}`).want(t, http.StatusCreated)
	st, _, body = b.get(cachePage)
	wantPage(t, "upstream with a rule", st, body, http.StatusOK, "<strong>deny</strong>", "group_id", "<code>com.acme.*</code>")
	st, _, body = b.get(cachePage + "?search=tool")
	wantPage(t, "search", st, body, http.StatusOK, "tool-2.0.pom")
	if strings.Contains(body, "lib-1.0.jar") {
		t.Fatal("search shows an entry that does not match")
	}
	b.get(cachePage)
	st, loc, _ := b.post("/-/console/cache_entries/invalidate", url.Values{"id": {entryID(e.upstream.ID, a.RelativePath)},
		"path": {a.RelativePath}, "upstream_id": {"1"}})
	if st != http.StatusSeeOther || loc != cachePage {
		t.Fatalf("invalidate: %d %q", st, loc)
	}
	st, _, body = b.get(cachePage)
	wantPage(t, "after invalidate", st, body, http.StatusOK, "Marked stale: /org/example/lib/1.0/lib-1.0.jar", "stale (invalidated)")

	st, loc, _ = b.post("/-/console/cache_entries/delete", url.Values{"id": {entryID(e.upstream.ID, a.RelativePath)},
		"path": {a.RelativePath}, "upstream_id": {"1"}, "search": {"lib"}})
	if st != http.StatusSeeOther || loc != cachePage+"?search=lib" {
		t.Fatalf("delete: %d %q", st, loc)
	}
	st, _, body = b.get(cachePage + "?search=lib")
	wantPage(t, "after delete", st, body, http.StatusOK, "Deleted /org/example/lib/1.0/lib-1.0.jar", "No entry matches")
	list := e.do(http.MethodGet, fmt.Sprintf("/api/v4/virtual_registries/packages/maven/upstreams/%d/cache_entries", e.upstream.ID), "root").list(t)
	if len(list) != 1 || list[0]["relative_path"] != "/org/other/tool/2.0/tool-2.0.pom" {
		t.Fatalf("API list after the delete: %v", list)
	}

	st, _, _ = b.post(fmt.Sprintf("/-/console/upstreams/%d/invalidate", e.upstream.ID), url.Values{})
	if st != http.StatusSeeOther {
		t.Fatalf("invalidate all: %d", st)
	}
	if _, _, body = b.get(cachePage); !strings.Contains(body, "Marked 1 entries stale") {
		t.Fatalf("invalidate all flash missing: %s", body)
	}

	// Move the mirror to the top; the API shows the new order.
	b.get(fmt.Sprintf("/-/console/registries/%d", e.registry.ID))
	st, loc, _ = b.post(fmt.Sprintf("/-/console/registry_upstreams/%d/position", pu.Assoc.ID),
		url.Values{"position": {"1"}, "registry_id": {fmt.Sprint(e.registry.ID)}})
	if st != http.StatusSeeOther || loc != fmt.Sprintf("/-/console/registries/%d", e.registry.ID) {
		t.Fatalf("move: %d %q", st, loc)
	}
	ups := e.do(http.MethodGet, fmt.Sprintf("/api/v4/virtual_registries/packages/maven/registries/%d/upstreams", e.registry.ID), "root").list(t)
	if len(ups) != 2 || ups[0]["name"] != "mirror" || ups[1]["name"] != "repo" {
		t.Fatalf("API order after the move: %v", ups)
	}
	// An invalid position is the API's 400.
	st, _, body = b.post(fmt.Sprintf("/-/console/registry_upstreams/%d/position", pu.Assoc.ID),
		url.Values{"position": {"0"}, "registry_id": {fmt.Sprint(e.registry.ID)}})
	wantPage(t, "bad position", st, body, http.StatusBadRequest, "position does not have a valid value")
}

func TestConsoleDependencies(t *testing.T) {
	e := newActEnv(t, nil)
	e.uploadAll("cyclonedx-npm-vulnerable-1.5.json")
	page := fmt.Sprintf("/-/console/projects/%d/dependencies", e.projects[store.Private].ID)

	b := newBrowser(t, e.srv)
	b.signIn(e.tokens["developer"])
	st, _, body := b.get("/-/console/projects")
	wantPage(t, "projects", st, body, http.StatusOK, "private app", page)
	st, _, body = b.get(page)
	wantPage(t, "dependencies", st, body, http.StatusOK, "Dependencies of private app", "CVE-", "npm")
	st, _, body = b.get(page + "?package_manager=maven")
	wantPage(t, "filtered", st, body, http.StatusOK, "No maven dependency.")
	st, _, body = b.get(page + "?package_manager=nonsense")
	wantPage(t, "bad filter", st, body, http.StatusBadRequest, "package_manager does not have a valid value")

	// The project's activity: its creation, and the members who joined.
	st, _, body = b.get(fmt.Sprintf("/-/console/projects/%d/events", e.projects[store.Private].ID))
	wantPage(t, "activity", st, body, http.StatusOK, "Activity of private app", "@root", "created", "joined")

	// A reporter sees the list but not its vulnerabilities, as in the API.
	r := newBrowser(t, e.srv)
	r.signIn(e.tokens["reporter"])
	st, _, body = r.get(page)
	wantPage(t, "reporter", st, body, http.StatusOK, "none known")
	if strings.Contains(body, "CVE-") {
		t.Fatal("a reporter sees vulnerabilities")
	}
	// An outsider gets the API's 404 for a private project.
	o := newBrowser(t, e.srv)
	o.signIn(e.tokens["outsider"])
	st, _, body = o.get(page)
	wantPage(t, "outsider", st, body, http.StatusNotFound, "404 Project Not Found")
	st, _, body = o.get(fmt.Sprintf("/-/console/projects/%d/events", e.projects[store.Private].ID))
	wantPage(t, "outsider activity", st, body, http.StatusNotFound, "404 Project Not Found")
}

// failChecker fails every connection test.
type failChecker struct{ okChecker }

func (failChecker) Test(context.Context, upstream.Endpoint, string) upstream.TestResult {
	return upstream.TestResult{Success: false, Result: "Error: Connection refused"}
}

func TestConsoleTestConnection(t *testing.T) {
	e := newUpstreamEnv(t)
	b := newBrowser(t, e.srv)
	b.signIn(e.tokens["guest"]) // the test needs read only, as in the API
	regPage := fmt.Sprintf("/-/console/registries/%d", e.registry.ID)
	b.get(regPage)
	form := url.Values{"registry_id": {fmt.Sprint(e.registry.ID)}}
	st, loc, _ := b.post(fmt.Sprintf("/-/console/upstreams/%d/test", e.upstream.ID), form)
	if st != http.StatusSeeOther || loc != regPage {
		t.Fatalf("test: %d %q", st, loc)
	}
	st, _, body := b.get(regPage)
	wantPage(t, "after a good test", st, body, http.StatusOK, "The connection test of repo succeeded.")
	e.srv.up = failChecker{}
	b.post(fmt.Sprintf("/-/console/upstreams/%d/test", e.upstream.ID), url.Values{"registry_id": {fmt.Sprint(e.registry.ID)}})
	st, _, body = b.get(regPage)
	wantPage(t, "after a failed test", st, body, http.StatusOK, `class="flash failed"`,
		"The connection test of repo failed: Error: Connection refused")
	// Without the session's CSRF token nothing is tested.
	st, _, _ = b.post(fmt.Sprintf("/-/console/upstreams/%d/test", e.upstream.ID), url.Values{"csrf": {""}, "registry_id": {"1"}})
	if st != http.StatusForbidden {
		t.Fatalf("test without csrf: %d", st)
	}
}

func TestConsoleCleanupPreview(t *testing.T) {
	e := newCacheEntryEnv(t, nil)
	old := e.put(e.upstream.ID, "/org/example/old/1.0/old-1.0.jar")
	e.clock.Advance(40 * 24 * time.Hour)
	e.put(e.upstream.ID, "/org/example/new/1.0/new-1.0.jar")
	groupPage := fmt.Sprintf("/-/console/groups/%d", e.group.ID)

	owner := newBrowser(t, e.srv)
	owner.signIn(e.tokens["owner"])
	st, _, body := owner.get(groupPage)
	wantPage(t, "group without policy", st, body, http.StatusOK, "This group has no cleanup policy", "Preview a cleanup")
	st, _, body = owner.get(groupPage + "/cleanup_dry_run?keep_n_days_after_download=30")
	wantPage(t, "dry run", st, body, http.StatusOK, "would delete", "1 files", old.RelativePath, "Nothing was deleted")
	if strings.Contains(body, "new-1.0.jar") {
		t.Fatal("the dry run lists a file downloaded lately")
	}
	req := httptest.NewRequest(http.MethodPost, fmt.Sprintf("/api/v4/groups/%d/-/virtual_registries/cleanup/policy", e.group.ID),
		strings.NewReader(`{"enabled":true,"keep_n_days_after_download":20,"cadence":7}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Private-Token", e.tokens["owner"])
	serve(e.srv, req).want(t, http.StatusCreated)
	st, _, body = owner.get(groupPage)
	wantPage(t, "group with policy", st, body, http.StatusOK, "20 days after their last download", "every 7 days", `value="20"`)

	// A maintainer is refused the policy by the API: no policy, no preview.
	m := newBrowser(t, e.srv)
	m.signIn(e.tokens["maintainer"])
	st, _, body = m.get(groupPage)
	wantPage(t, "group as maintainer", st, body, http.StatusOK, "Only the group&#39;s owners and admins")
	if strings.Contains(body, "Preview a cleanup") || strings.Contains(body, "20 days") {
		t.Fatalf("a maintainer sees the policy: %s", body)
	}
	st, _, body = m.get(groupPage + "/cleanup_dry_run")
	wantPage(t, "dry run as maintainer", st, body, http.StatusForbidden)
}
