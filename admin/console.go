package admin

import (
	"bytes"
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The web console: server-side rendered HTML pages under /-/console/ on the
// admin listener. It holds no permission logic of its own: every page reads,
// and every form changes, through the REST API's own handlers, called in
// process with the signed-in user's token. So a page shows exactly what that
// token may see, and a refused page answers the API's status (401, 403, 404).
// See docs/operations.md, "The web console", for the security model.

//go:embed console/*.html console/*.css
var consoleFiles embed.FS

const (
	consolePrefix     = "/-/console/"
	consoleCookie     = "registryd_console"
	consoleSignInCook = "registryd_console_signin"
	// consoleMaxSessions bounds the sessions kept in memory: past it, the
	// one closest to its expiry is dropped.
	consoleMaxSessions = 10000
)

// consoleUser is the signed-in user as GET /user answers it.
type consoleUser struct {
	ID       int64  `json:"id"`
	Username string `json:"username"`
	Name     string `json:"name"`
	IsAdmin  bool   `json:"is_admin"`
}

// consoleSession is one signed-in browser. The cookie carries only its id;
// the token stays on the server.
type consoleSession struct {
	id      string
	token   string
	csrf    string
	user    consoleUser
	expires time.Time
	flash   string
	// flashFailed marks the flash as the report of a failure.
	flashFailed bool
}

type console struct {
	s     *Server
	ttl   time.Duration
	now   func() time.Time
	pages map[string]*template.Template
	css   []byte

	mu       sync.Mutex
	sessions map[string]*consoleSession
}

func newConsole(s *Server, ttl time.Duration) (*console, error) {
	c := &console{s: s, ttl: ttl, now: time.Now, pages: map[string]*template.Template{}, sessions: map[string]*consoleSession{}}
	names, err := fs.Glob(consoleFiles, "console/*.html")
	if err != nil {
		return nil, err
	}
	for _, name := range names {
		if name == "console/layout.html" {
			continue
		}
		t, err := template.New("layout.html").Funcs(consoleFuncs).ParseFS(consoleFiles, "console/layout.html", name)
		if err != nil {
			return nil, fmt.Errorf("console template %s: %w", name, err)
		}
		c.pages[strings.TrimSuffix(strings.TrimPrefix(name, "console/"), ".html")] = t
	}
	if c.css, err = consoleFiles.ReadFile("console/console.css"); err != nil {
		return nil, err
	}
	return c, nil
}

var consoleFuncs = template.FuncMap{
	// when shows an API timestamp as "2026-11-21 10:04:05 UTC"; "—" for none.
	"when": func(v *string) string {
		if v == nil || *v == "" {
			return "—"
		}
		t, err := time.Parse(time.RFC3339Nano, *v)
		if err != nil {
			return *v
		}
		return t.UTC().Format("2006-01-02 15:04:05 UTC")
	},
	"size": sizeOf,
	"add":  func(a, b int) int { return a + b },
	"deref": func(v *string) string {
		if v == nil {
			return ""
		}
		return *v
	},
}

// routesConsole registers the console's pages and forms.
func (s *Server) routesConsole() {
	c := s.console
	s.handle(http.MethodGet, "/-/console/{$}", func(w http.ResponseWriter, r *http.Request) error {
		http.Redirect(w, r, consolePrefix+"groups", http.StatusSeeOther)
		return nil
	})
	s.handle(http.MethodGet, "/-/console", func(w http.ResponseWriter, r *http.Request) error {
		http.Redirect(w, r, consolePrefix+"groups", http.StatusSeeOther)
		return nil
	})
	s.handle(http.MethodGet, "/-/console/static/console.css", func(w http.ResponseWriter, r *http.Request) error {
		w.Header().Set("Content-Type", "text/css; charset=utf-8")
		w.Header().Set("Cache-Control", "private, max-age=3600")
		_, err := w.Write(c.css)
		return err
	})
	s.handle(http.MethodGet, "/-/console/sign_in", c.signInPage)
	s.handle(http.MethodPost, "/-/console/sign_in", c.signIn)
	s.handle(http.MethodPost, "/-/console/sign_out", c.signedIn(c.signOut))
	s.handle(http.MethodGet, "/-/console/groups", c.signedIn(c.groupsPage))
	s.handle(http.MethodGet, "/-/console/groups/{id}", c.signedIn(c.groupPage))
	s.handle(http.MethodGet, "/-/console/groups/{id}/audit_events", c.signedIn(c.groupAuditPage))
	s.handle(http.MethodGet, "/-/console/registries/{id}", c.signedIn(c.registryPage))
	s.handle(http.MethodPost, "/-/console/registry_upstreams/{id}/position", c.signedIn(c.movePosition))
	s.handle(http.MethodGet, "/-/console/upstreams/{id}/cache_entries", c.signedIn(c.cacheEntriesPage))
	s.handle(http.MethodPost, "/-/console/upstreams/{id}/invalidate", c.signedIn(c.invalidateAll))
	s.handle(http.MethodPost, "/-/console/upstreams/{id}/test", c.signedIn(c.testConnection))
	s.handle(http.MethodGet, "/-/console/groups/{id}/cleanup_dry_run", c.signedIn(c.cleanupDryRunPage))
	s.handle(http.MethodPost, "/-/console/cache_entries/delete", c.signedIn(c.deleteEntry))
	s.handle(http.MethodPost, "/-/console/cache_entries/invalidate", c.signedIn(c.invalidateEntry))
	s.handle(http.MethodGet, "/-/console/audit_events", c.signedIn(c.auditPage))
	s.handle(http.MethodGet, "/-/console/projects", c.signedIn(c.projectsPage))
	s.handle(http.MethodGet, "/-/console/projects/{id}/dependencies", c.signedIn(c.dependenciesPage))
	s.handle(http.MethodGet, "/-/console/projects/{id}/events", c.signedIn(c.projectEventsPage))
	s.handle(http.MethodGet, consolePrefix, func(w http.ResponseWriter, r *http.Request) error {
		c.renderError(w, r, nil, http.StatusNotFound, "There is no such page.")
		return nil
	})
}

// securityHeaders are sent with every console answer: no script, no
// frame, nothing loaded from elsewhere.
func consoleHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Frame-Options", "DENY")
	// same-origin, not no-referrer: under no-referrer browsers send
	// "Origin: null" with the forms, which sameOrigin refuses.
	h.Set("Referrer-Policy", "same-origin")
}

// pageData is what every page template gets.
type pageData struct {
	Title       string
	User        *consoleUser
	CSRF        string
	Flash       string
	FlashFailed bool
	// Status and Message are an error page's.
	Status  int
	Message string
	D       any
}

func (c *console) render(w http.ResponseWriter, status int, page string, sess *consoleSession, title string, d any) {
	consoleHeaders(w)
	pd := pageData{Title: title, D: d}
	if sess != nil {
		u := sess.user
		pd.User, pd.CSRF = &u, sess.csrf
		c.mu.Lock()
		pd.Flash, pd.FlashFailed, sess.flash, sess.flashFailed = sess.flash, sess.flashFailed, "", false
		c.mu.Unlock()
	}
	if e, ok := d.(consoleErr); ok {
		pd.Status, pd.Message = e.Status, e.Message
	}
	var buf bytes.Buffer
	if err := c.pages[page].ExecuteTemplate(&buf, "layout.html", pd); err != nil {
		panic(fmt.Errorf("console template %s: %w", page, err))
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

type consoleErr struct {
	Status  int
	Message string
}

func (c *console) renderError(w http.ResponseWriter, r *http.Request, sess *consoleSession, status int, msg string) {
	c.render(w, status, "error", sess, http.StatusText(status), consoleErr{Status: status, Message: msg})
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// secure reports whether the browser reached the console over TLS: the
// request came over TLS, or external.url is https (a TLS-terminating proxy
// in front of the admin listener, which then sees plain HTTP).
func (c *console) secure(r *http.Request) bool {
	return r.TLS != nil || strings.HasPrefix(strings.ToLower(c.s.opts.ExternalURL), "https://")
}

func (c *console) setCookie(w http.ResponseWriter, r *http.Request, name, value string, maxAge int) {
	http.SetCookie(w, &http.Cookie{Name: name, Value: value, Path: consolePrefix, MaxAge: maxAge,
		HttpOnly: true, Secure: c.secure(r), SameSite: http.SameSiteStrictMode})
}

// session returns the live session of the request's cookie, or nil.
func (c *console) session(r *http.Request) *consoleSession {
	ck, err := r.Cookie(consoleCookie)
	if err != nil || ck.Value == "" {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	sess := c.sessions[ck.Value]
	if sess == nil {
		return nil
	}
	if !c.now().Before(sess.expires) {
		delete(c.sessions, sess.id)
		return nil
	}
	return sess
}

func (c *console) newSession(token string, u consoleUser) *consoleSession {
	now := c.now()
	sess := &consoleSession{id: randomHex(32), token: token, csrf: randomHex(32), user: u, expires: now.Add(c.ttl)}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.sessions) >= consoleMaxSessions {
		var oldest *consoleSession
		for id, o := range c.sessions {
			if !now.Before(o.expires) {
				delete(c.sessions, id)
				continue
			}
			if oldest == nil || o.expires.Before(oldest.expires) {
				oldest = o
			}
		}
		if len(c.sessions) >= consoleMaxSessions && oldest != nil {
			delete(c.sessions, oldest.id)
		}
	}
	c.sessions[sess.id] = sess
	return sess
}

func (c *console) endSession(sess *consoleSession) {
	c.mu.Lock()
	delete(c.sessions, sess.id)
	c.mu.Unlock()
}

func (c *console) setFlash(sess *consoleSession, msg string) { c.flashWith(sess, msg, false) }

func (c *console) flashWith(sess *consoleSession, msg string, failed bool) {
	c.mu.Lock()
	sess.flash, sess.flashFailed = msg, failed
	c.mu.Unlock()
}

// sameOrigin refuses a POST whose Origin header names another host: a
// second guard beside the CSRF token and SameSite=Strict.
func sameOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	u, err := url.Parse(o)
	return err == nil && u.Host == r.Host
}

// signedIn requires a live session; a POST also needs the session's CSRF
// token in its form and no foreign Origin. Without a session a GET goes to
// the sign-in page and a POST is refused.
func (c *console) signedIn(h func(http.ResponseWriter, *http.Request, *consoleSession) error) handler {
	return func(w http.ResponseWriter, r *http.Request) error {
		sess := c.session(r)
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			if sess == nil {
				c.renderError(w, r, nil, http.StatusForbidden, "Your session has ended or is not valid: sign in again.")
				return nil
			}
			if !sameOrigin(r) || subtle.ConstantTimeCompare([]byte(r.PostFormValue("csrf")), []byte(sess.csrf)) != 1 {
				c.renderError(w, r, sess, http.StatusForbidden, "The form's CSRF token is missing or wrong: reload the page and try again.")
				return nil
			}
		} else if sess == nil {
			http.Redirect(w, r, consolePrefix+"sign_in", http.StatusSeeOther)
			return nil
		}
		return h(w, r, sess)
	}
}

// apiAnswer is the REST API's answer to an in-process call.
type apiAnswer struct {
	status int
	header http.Header
	body   bytes.Buffer
}

func (a *apiAnswer) Header() http.Header { return a.header }
func (a *apiAnswer) WriteHeader(code int) {
	if a.status == 0 {
		a.status = code
	}
}
func (a *apiAnswer) Write(b []byte) (int, error) {
	if a.status == 0 {
		a.status = http.StatusOK
	}
	return a.body.Write(b)
}

// message is the API's error text: GitLab's "message" or "error".
func (a *apiAnswer) message() string {
	var v struct {
		Message any    `json:"message"`
		Error   string `json:"error"`
		Desc    string `json:"error_description"`
	}
	if json.Unmarshal(a.body.Bytes(), &v) != nil {
		return http.StatusText(a.status)
	}
	switch m := v.Message.(type) {
	case string:
		return m
	case map[string]any:
		var parts []string
		for k, msgs := range m {
			parts = append(parts, fmt.Sprintf("%s %v", k, msgs))
		}
		return strings.Join(parts, "; ")
	}
	if v.Desc != "" {
		return v.Error + ": " + v.Desc
	}
	if v.Error != "" {
		return v.Error
	}
	return http.StatusText(a.status)
}

func (a *apiAnswer) decode(v any) error { return json.Unmarshal(a.body.Bytes(), v) }

// call runs one REST API request in process, as the session's user: the
// API's own authentication, scopes, permissions and feature gates decide.
func (c *console) call(r *http.Request, token, method, path string, form url.Values) *apiAnswer {
	var body *strings.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	} else {
		body = strings.NewReader("")
	}
	req, err := http.NewRequestWithContext(r.Context(), method, path, body)
	if err != nil {
		return &apiAnswer{status: http.StatusBadRequest, header: http.Header{}}
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	req.Header.Set("Private-Token", token)
	req.RemoteAddr, req.Host = r.RemoteAddr, r.Host
	a := &apiAnswer{header: http.Header{}}
	c.s.mux.ServeHTTP(a, req)
	if a.status == 0 {
		a.status = http.StatusOK
	}
	return a
}

// errNotOK ends a page whose API call did not answer 2xx: the page answers
// the API's status with its message. A 401 (the token was revoked or
// expired) ends the session too.
type errNotOK struct{ a *apiAnswer }

func (e errNotOK) Error() string { return fmt.Sprintf("api answered %d", e.a.status) }

// get is call for a GET that must answer 200 and decodes it into v.
func (c *console) get(r *http.Request, sess *consoleSession, path string, v any) (*apiAnswer, error) {
	a := c.call(r, sess.token, http.MethodGet, path, nil)
	if a.status != http.StatusOK {
		return a, errNotOK{a}
	}
	if v != nil {
		if err := a.decode(v); err != nil {
			return a, fmt.Errorf("console: decoding %s: %w", path, err)
		}
	}
	return a, nil
}

// fail answers a page whose API call failed, or returns err to the
// admin error mapping when it is no API answer (a 500 with a request id).
func (c *console) fail(w http.ResponseWriter, r *http.Request, sess *consoleSession, err error) error {
	var e errNotOK
	if !errors.As(err, &e) {
		return err
	}
	if e.a.status == http.StatusUnauthorized {
		c.endSession(sess)
		c.setCookie(w, r, consoleCookie, "", -1)
		c.renderError(w, r, nil, http.StatusUnauthorized, "Your token is no longer valid: sign in again.")
		return nil
	}
	c.renderError(w, r, sess, e.a.status, e.a.message())
	return nil
}

// pager is a page's position in a paginated API list.
type pager struct {
	Page, TotalPages, Total int
	Prev, Next              string // links, "" at the ends
}

func pagerOf(a *apiAnswer, base string, q url.Values) pager {
	atoi := func(k string) int { n, _ := strconv.Atoi(a.header.Get(k)); return n }
	p := pager{Page: atoi("X-Page"), TotalPages: atoi("X-Total-Pages"), Total: atoi("X-Total")}
	link := func(page string) string {
		if page == "" {
			return ""
		}
		v := url.Values{}
		for k, vs := range q {
			v[k] = vs
		}
		v.Set("page", page)
		return base + "?" + v.Encode()
	}
	p.Prev, p.Next = link(a.header.Get("X-Prev-Page")), link(a.header.Get("X-Next-Page"))
	return p
}

// pageParam is the request's page number, "1" when absent or not one.
func pageParam(r *http.Request) string {
	if n, err := strconv.Atoi(r.URL.Query().Get("page")); err == nil && n > 0 {
		return strconv.Itoa(n)
	}
	return "1"
}

// idParam is the path's id, escaped to stay one path segment of the API's
// path (which validates it as the API does).
func idParam(r *http.Request) string { return url.PathEscape(r.PathValue("id")) }
