package admin

import (
	"crypto/subtle"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"registryd/store"
)

// signInPage shows the token form. Its CSRF token is a random value that
// is also in a short-lived cookie (double submit): a sign-in can only be
// posted by a page this listener served to this browser.
func (c *console) signInPage(w http.ResponseWriter, r *http.Request) error {
	if c.session(r) != nil {
		http.Redirect(w, r, consolePrefix+"groups", http.StatusSeeOther)
		return nil
	}
	c.showSignIn(w, r, http.StatusOK, "")
	return nil
}

func (c *console) showSignIn(w http.ResponseWriter, r *http.Request, status int, msg string) {
	nonce := randomHex(32)
	c.setCookie(w, r, consoleSignInCook, nonce, 600)
	c.render(w, status, "sign_in", nil, "Sign in", struct{ Nonce, Message string }{nonce, msg})
}

func (c *console) signIn(w http.ResponseWriter, r *http.Request) error {
	ck, err := r.Cookie(consoleSignInCook)
	if err != nil || ck.Value == "" || !sameOrigin(r) ||
		subtle.ConstantTimeCompare([]byte(r.PostFormValue("csrf")), []byte(ck.Value)) != 1 {
		c.renderError(w, r, nil, http.StatusForbidden, "The sign-in form's CSRF token is missing or wrong: open the sign-in page again.")
		return nil
	}
	token := strings.TrimSpace(r.PostFormValue("token"))
	if token == "" {
		c.showSignIn(w, r, http.StatusBadRequest, "Enter a personal access token.")
		return nil
	}
	a := c.call(r, token, http.MethodGet, "/api/v4/user", nil)
	switch a.status {
	case http.StatusOK:
	case http.StatusUnauthorized:
		c.showSignIn(w, r, http.StatusUnauthorized, "That token is not valid (unknown, revoked or expired; deploy tokens cannot sign in).")
		return nil
	default:
		c.showSignIn(w, r, a.status, "That token may not sign in: "+a.message())
		return nil
	}
	var u consoleUser
	if err := a.decode(&u); err != nil {
		return err
	}
	// A sign-in over a live session (another token) ends that session.
	if old := c.session(r); old != nil {
		c.endSession(old)
	}
	sess := c.newSession(token, u)
	c.setCookie(w, r, consoleSignInCook, "", -1)
	c.setCookie(w, r, consoleCookie, sess.id, int(c.ttl.Seconds()))
	http.Redirect(w, r, consolePrefix+"groups", http.StatusSeeOther)
	return nil
}

func (c *console) signOut(w http.ResponseWriter, r *http.Request, sess *consoleSession) error {
	c.endSession(sess)
	c.setCookie(w, r, consoleCookie, "", -1)
	http.Redirect(w, r, consolePrefix+"sign_in", http.StatusSeeOther)
	return nil
}

// The API's shapes, as far as the pages show them.
type (
	cGroup struct {
		ID          int64  `json:"id"`
		Name        string `json:"name"`
		FullPath    string `json:"full_path"`
		Description string `json:"description"`
		Visibility  string `json:"visibility"`
		ParentID    *int64 `json:"parent_id"`
	}
	cRegistry struct {
		ID            int64  `json:"id"`
		Name          string `json:"name"`
		Description   string `json:"description"`
		GroupID       int64  `json:"group_id"`
		MergeMetadata bool   `json:"merge_metadata"`
	}
	cUpstream struct {
		ID                 int64   `json:"id"`
		Name               string  `json:"name"`
		Description        string  `json:"description"`
		GroupID            int64   `json:"group_id"`
		URL                string  `json:"url"`
		CacheValidityHours int     `json:"cache_validity_hours"`
		Status             string  `json:"status"`
		StatusSince        *string `json:"status_since"`
		LastError          *string `json:"last_error"`
		LastErrorAt        *string `json:"last_error_at"`
		RetryAt            *string `json:"retry_at"`
		FailingPaths       int     `json:"failing_paths"`
		RegistryUpstream   struct {
			ID       int64 `json:"id"`
			Position int   `json:"position"`
		} `json:"registry_upstream"`
		RegistryUpstreams []struct {
			ID         int64 `json:"id"`
			RegistryID int64 `json:"registry_id"`
			Position   int   `json:"position"`
		} `json:"registry_upstreams"`
	}
	cEntry struct {
		ID             string  `json:"id"`
		UpstreamID     int64   `json:"upstream_id"`
		RelativePath   string  `json:"relative_path"`
		Size           int64   `json:"size"`
		ContentType    string  `json:"content_type"`
		DownloadsCount int64   `json:"downloads_count"`
		DownloadedAt   *string `json:"downloaded_at"`
		CreatedAt      *string `json:"created_at"`
		CheckedAt      *string `json:"upstream_checked_at"`
		Invalidated    bool    `json:"invalidated"`
	}
	cRule struct {
		ID               int64  `json:"id"`
		RuleType         string `json:"rule_type"`
		TargetCoordinate string `json:"target_coordinate"`
		PatternType      string `json:"pattern_type"`
		Pattern          string `json:"pattern"`
	}
	cAudit struct {
		ID         int64   `json:"id"`
		AuthorID   int64   `json:"author_id"`
		EntityID   int64   `json:"entity_id"`
		EntityType string  `json:"entity_type"`
		EventName  string  `json:"event_name"`
		CreatedAt  *string `json:"created_at"`
		Details    struct {
			CustomMessage string `json:"custom_message"`
			AuthorName    string `json:"author_name"`
			TargetType    string `json:"target_type"`
			TargetDetails string `json:"target_details"`
			IPAddress     string `json:"ip_address"`
			EntityPath    string `json:"entity_path"`
		} `json:"details"`
	}
	cProject struct {
		ID                int64  `json:"id"`
		Name              string `json:"name"`
		PathWithNamespace string `json:"path_with_namespace"`
		Visibility        string `json:"visibility"`
		Description       string `json:"description"`
	}
	cDependency struct {
		Name            string `json:"name"`
		Version         string `json:"version"`
		PackageManager  string `json:"package_manager"`
		File            string `json:"dependency_file_path"`
		Vulnerabilities []struct {
			Name     string `json:"name"`
			Severity string `json:"severity"`
			URL      string `json:"url"`
		} `json:"vulnerabilities"`
		Licenses []struct {
			SPDX string `json:"spdx_identifier"`
			Name string `json:"name"`
		} `json:"licenses"`
	}
)

const vrAPI = "/api/v4/virtual_registries/packages/maven"

func (c *console) groupsPage(w http.ResponseWriter, r *http.Request, sess *consoleSession) error {
	var groups []cGroup
	a, err := c.get(r, sess, "/api/v4/groups?per_page=50&page="+pageParam(r), &groups)
	if err != nil {
		return c.fail(w, r, sess, err)
	}
	c.render(w, http.StatusOK, "groups", sess, "Groups", struct {
		Groups []cGroup
		Pager  pager
	}{groups, pagerOf(a, consolePrefix+"groups", nil)})
	return nil
}

func (c *console) groupPage(w http.ResponseWriter, r *http.Request, sess *consoleSession) error {
	var g cGroup
	if _, err := c.get(r, sess, "/api/v4/groups/"+idParam(r), &g); err != nil {
		return c.fail(w, r, sess, err)
	}
	d := struct {
		Group      cGroup
		Registries []cRegistry
		// RegistriesNote says why there is no list: a subgroup, or the
		// API's refusal (virtual registries off under the licence plan).
		RegistriesNote string
		Cleanup        groupPolicy
	}{Group: g}
	if g.ParentID != nil {
		d.RegistriesNote = "Virtual registries belong to top-level groups."
	} else {
		a := c.call(r, sess.token, http.MethodGet, "/api/v4/groups/"+strconv.FormatInt(g.ID, 10)+"/-/virtual_registries/packages/maven/registries", nil)
		switch {
		case a.status == http.StatusOK:
			if err := a.decode(&d.Registries); err != nil {
				return err
			}
		case a.status == http.StatusUnauthorized:
			return c.fail(w, r, sess, errNotOK{a})
		default:
			d.RegistriesNote = "Virtual registries: " + a.message()
		}
	}
	if g.ParentID == nil {
		var a *apiAnswer
		if d.Cleanup, a = c.cleanupPolicy(r, sess, g.ID); a != nil {
			return c.fail(w, r, sess, errNotOK{a})
		}
	}
	c.render(w, http.StatusOK, "group", sess, "Group "+g.FullPath, d)
	return nil
}

func (c *console) registryPage(w http.ResponseWriter, r *http.Request, sess *consoleSession) error {
	var reg cRegistry
	if _, err := c.get(r, sess, vrAPI+"/registries/"+idParam(r), &reg); err != nil {
		return c.fail(w, r, sess, err)
	}
	var ups []cUpstream
	if _, err := c.get(r, sess, vrAPI+"/registries/"+strconv.FormatInt(reg.ID, 10)+"/upstreams", &ups); err != nil {
		return c.fail(w, r, sess, err)
	}
	var g cGroup
	if _, err := c.get(r, sess, "/api/v4/groups/"+strconv.FormatInt(reg.GroupID, 10), &g); err != nil {
		return c.fail(w, r, sess, err)
	}
	of := []store.TrafficOf{{Kind: store.TrafficRegistry, ID: reg.ID}}
	for _, u := range ups {
		of = append(of, store.TrafficOf{Kind: store.TrafficUpstream, ID: u.ID})
	}
	tr, from, steps, err := c.traffic(r, of...)
	if err != nil {
		return err
	}
	id := strconv.FormatInt(reg.ID, 10)
	upLines := make(map[int64]trafficSummary, len(ups))
	for i, u := range ups {
		upLines[u.ID] = upstreamLine(tr, steps[i+1])
	}
	c.render(w, http.StatusOK, "registry", sess, "Registry "+reg.Name, struct {
		Group     cGroup
		Registry  cRegistry
		Upstreams []cUpstream
		Last      int
		Traffic   consoleTraffic
		UpTraffic map[int64]trafficSummary
	}{g, reg, ups, len(ups), trafficBlock("reg"+id, consolePrefix+"registries/"+id, "registry "+reg.Name, false, tr, from, steps[0]), upLines})
	return nil
}

// movePosition moves an upstream within its registry (PATCH
// registry_upstreams/:id) and returns to the registry's page.
func (c *console) movePosition(w http.ResponseWriter, r *http.Request, sess *consoleSession) error {
	regID, err := strconv.ParseInt(r.PostFormValue("registry_id"), 10, 64)
	if err != nil || regID <= 0 {
		c.renderError(w, r, sess, http.StatusBadRequest, "registry_id is invalid")
		return nil
	}
	pos := strings.TrimSpace(r.PostFormValue("position"))
	a := c.call(r, sess.token, http.MethodPatch, vrAPI+"/registry_upstreams/"+idParam(r), url.Values{"position": {pos}})
	if a.status != http.StatusOK {
		return c.fail(w, r, sess, errNotOK{a})
	}
	c.setFlash(sess, "Moved the upstream to position "+pos+".")
	http.Redirect(w, r, consolePrefix+"registries/"+strconv.FormatInt(regID, 10), http.StatusSeeOther)
	return nil
}

func (c *console) cacheEntriesPage(w http.ResponseWriter, r *http.Request, sess *consoleSession) error {
	var up cUpstream
	if _, err := c.get(r, sess, vrAPI+"/upstreams/"+idParam(r), &up); err != nil {
		return c.fail(w, r, sess, err)
	}
	search := r.URL.Query().Get("search")
	q := url.Values{"per_page": {"50"}, "page": {pageParam(r)}}
	if search != "" {
		q.Set("search", search)
	}
	var entries []cEntry
	id := strconv.FormatInt(up.ID, 10)
	a, err := c.get(r, sess, vrAPI+"/upstreams/"+id+"/cache_entries?"+q.Encode(), &entries)
	if err != nil {
		return c.fail(w, r, sess, err)
	}
	back := url.Values{}
	if search != "" {
		back.Set("search", search)
	}
	var g cGroup
	if _, err := c.get(r, sess, "/api/v4/groups/"+strconv.FormatInt(up.GroupID, 10), &g); err != nil {
		return c.fail(w, r, sess, err)
	}
	var rules []cRule
	if _, err := c.get(r, sess, vrAPI+"/upstreams/"+id+"/rules", &rules); err != nil {
		return c.fail(w, r, sess, err)
	}
	tr, from, steps, err := c.traffic(r, store.TrafficOf{Kind: store.TrafficUpstream, ID: up.ID})
	if err != nil {
		return err
	}
	c.render(w, http.StatusOK, "cache_entries", sess, "Cache of "+up.Name, struct {
		Group    cGroup
		Upstream cUpstream
		Rules    []cRule
		Entries  []cEntry
		Search   string
		Pager    pager
		Traffic  consoleTraffic
	}{g, up, rules, entries, search, pagerOf(a, consolePrefix+"upstreams/"+id+"/cache_entries", back),
		trafficBlock("up"+id, consolePrefix+"upstreams/"+id+"/cache_entries", "upstream "+up.Name, true, tr, from, steps[0])})
	return nil
}

// entryForm runs a change of one cache entry and returns to the upstream's
// cache page, keeping its search.
func (c *console) entryForm(w http.ResponseWriter, r *http.Request, sess *consoleSession, method, suffix, done string, want int) error {
	upID, err := strconv.ParseInt(r.PostFormValue("upstream_id"), 10, 64)
	if err != nil || upID <= 0 {
		c.renderError(w, r, sess, http.StatusBadRequest, "upstream_id is invalid")
		return nil
	}
	a := c.call(r, sess.token, method, vrAPI+"/cache_entries/"+url.PathEscape(r.PostFormValue("id"))+suffix, nil)
	if a.status != want {
		return c.fail(w, r, sess, errNotOK{a})
	}
	c.setFlash(sess, done+" "+r.PostFormValue("path")+".")
	c.backToEntries(w, r, upID)
	return nil
}

func (c *console) backToEntries(w http.ResponseWriter, r *http.Request, upID int64) {
	target := consolePrefix + "upstreams/" + strconv.FormatInt(upID, 10) + "/cache_entries"
	if s := r.PostFormValue("search"); s != "" {
		target += "?" + url.Values{"search": {s}}.Encode()
	}
	http.Redirect(w, r, target, http.StatusSeeOther)
}

func (c *console) deleteEntry(w http.ResponseWriter, r *http.Request, sess *consoleSession) error {
	return c.entryForm(w, r, sess, http.MethodDelete, "", "Deleted", http.StatusNoContent)
}

func (c *console) invalidateEntry(w http.ResponseWriter, r *http.Request, sess *consoleSession) error {
	return c.entryForm(w, r, sess, http.MethodPost, "/invalidate", "Marked stale:", http.StatusOK)
}

func (c *console) invalidateAll(w http.ResponseWriter, r *http.Request, sess *consoleSession) error {
	upID, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || upID <= 0 {
		c.renderError(w, r, sess, http.StatusBadRequest, "id is invalid")
		return nil
	}
	a := c.call(r, sess.token, http.MethodPost, vrAPI+"/upstreams/"+strconv.FormatInt(upID, 10)+"/cache/invalidate", nil)
	if a.status != http.StatusOK {
		return c.fail(w, r, sess, errNotOK{a})
	}
	var n struct {
		Count int `json:"invalidated_entries_count"`
	}
	if err := a.decode(&n); err != nil {
		return err
	}
	c.setFlash(sess, "Marked "+strconv.Itoa(n.Count)+" entries stale: their next download revalidates them.")
	c.backToEntries(w, r, upID)
	return nil
}

func (c *console) auditPage(w http.ResponseWriter, r *http.Request, sess *consoleSession) error {
	var events []cAudit
	a, err := c.get(r, sess, "/api/v4/audit_events?per_page=50&page="+pageParam(r), &events)
	if err != nil {
		return c.fail(w, r, sess, err)
	}
	c.render(w, http.StatusOK, "audit_events", sess, "Audit events", struct {
		Group  *cGroup
		Events []cAudit
		Pager  pager
	}{nil, events, pagerOf(a, consolePrefix+"audit_events", nil)})
	return nil
}

func (c *console) groupAuditPage(w http.ResponseWriter, r *http.Request, sess *consoleSession) error {
	var g cGroup
	if _, err := c.get(r, sess, "/api/v4/groups/"+idParam(r), &g); err != nil {
		return c.fail(w, r, sess, err)
	}
	var events []cAudit
	id := strconv.FormatInt(g.ID, 10)
	a, err := c.get(r, sess, "/api/v4/groups/"+id+"/audit_events?per_page=50&page="+pageParam(r), &events)
	if err != nil {
		return c.fail(w, r, sess, err)
	}
	c.render(w, http.StatusOK, "audit_events", sess, "Audit events of "+g.FullPath, struct {
		Group  *cGroup
		Events []cAudit
		Pager  pager
	}{&g, events, pagerOf(a, consolePrefix+"groups/"+id+"/audit_events", nil)})
	return nil
}

func (c *console) projectsPage(w http.ResponseWriter, r *http.Request, sess *consoleSession) error {
	var projects []cProject
	a, err := c.get(r, sess, "/api/v4/projects?per_page=50&page="+pageParam(r), &projects)
	if err != nil {
		return c.fail(w, r, sess, err)
	}
	c.render(w, http.StatusOK, "projects", sess, "Projects", struct {
		Projects []cProject
		Pager    pager
	}{projects, pagerOf(a, consolePrefix+"projects", nil)})
	return nil
}

// consolePackageManagers are the dependency list's filter choices (the
// API's allowed values).
var consolePackageManagers = []string{"apk", "bundler", "cargo", "composer", "conan", "conda", "go", "gradle", "maven",
	"npm", "nuget", "pip", "pipenv", "pnpm", "poetry", "pub", "sbt", "setuptools", "yarn"}

func (c *console) dependenciesPage(w http.ResponseWriter, r *http.Request, sess *consoleSession) error {
	var p cProject
	if _, err := c.get(r, sess, "/api/v4/projects/"+idParam(r), &p); err != nil {
		return c.fail(w, r, sess, err)
	}
	pm := r.URL.Query().Get("package_manager")
	q := url.Values{"per_page": {"50"}, "page": {pageParam(r)}}
	back := url.Values{}
	if pm != "" {
		q.Set("package_manager", pm)
		back.Set("package_manager", pm)
	}
	var deps []cDependency
	id := strconv.FormatInt(p.ID, 10)
	a, err := c.get(r, sess, "/api/v4/projects/"+id+"/dependencies?"+q.Encode(), &deps)
	if err != nil {
		return c.fail(w, r, sess, err)
	}
	vulnerable := 0
	for _, d := range deps {
		if len(d.Vulnerabilities) > 0 {
			vulnerable++
		}
	}
	c.render(w, http.StatusOK, "dependencies", sess, "Dependencies of "+p.PathWithNamespace, struct {
		Project         cProject
		Dependencies    []cDependency
		PackageManager  string
		PackageManagers []string
		Vulnerable      int
		Pager           pager
	}{p, deps, pm, consolePackageManagers, vulnerable, pagerOf(a, consolePrefix+"projects/"+id+"/dependencies", back)})
	return nil
}

// testConnection runs the upstream's connection test (the API's GET
// …/upstreams/:id/test: a HEAD with its stored credentials) and returns to
// the registry's page with the result.
func (c *console) testConnection(w http.ResponseWriter, r *http.Request, sess *consoleSession) error {
	regID, err := strconv.ParseInt(r.PostFormValue("registry_id"), 10, 64)
	if err != nil || regID <= 0 {
		c.renderError(w, r, sess, http.StatusBadRequest, "registry_id is invalid")
		return nil
	}
	var up cUpstream
	if _, err := c.get(r, sess, vrAPI+"/upstreams/"+idParam(r), &up); err != nil {
		return c.fail(w, r, sess, err)
	}
	var res struct {
		Success bool   `json:"success"`
		Result  string `json:"result"`
	}
	if _, err := c.get(r, sess, vrAPI+"/upstreams/"+strconv.FormatInt(up.ID, 10)+"/test", &res); err != nil {
		return c.fail(w, r, sess, err)
	}
	if res.Success {
		c.setFlash(sess, "The connection test of "+up.Name+" succeeded.")
	} else {
		c.flashWith(sess, "The connection test of "+up.Name+" failed: "+res.Result, true)
	}
	http.Redirect(w, r, consolePrefix+"registries/"+strconv.FormatInt(regID, 10), http.StatusSeeOther)
	return nil
}

// cPolicy is a group's cleanup policy as the API shows it.
type cPolicy struct {
	Enabled          bool    `json:"enabled"`
	KeepDays         int     `json:"keep_n_days_after_download"`
	Cadence          int     `json:"cadence"`
	Status           string  `json:"status"`
	NextRunAt        *string `json:"next_run_at"`
	LastRunAt        *string `json:"last_run_at"`
	LastDeletedCount int64   `json:"last_run_deleted_entries_count"`
	LastDeletedSize  int64   `json:"last_run_deleted_size"`
	FailureMessage   *string `json:"failure_message"`
}

// groupPolicy is the cleanup policy part of the group page.
type groupPolicy struct {
	Policy *cPolicy
	// Note says why there is no policy to show.
	Note string
	// CanPreview: the token may run a dry run (it read the policy, or was
	// told there is none; the API allows both to owners and admins only).
	CanPreview bool
}

// cleanupPolicy reads the group's policy for the group page; a non-nil
// answer is a 401 that ends the page.
func (c *console) cleanupPolicy(r *http.Request, sess *consoleSession, groupID int64) (groupPolicy, *apiAnswer) {
	a := c.call(r, sess.token, http.MethodGet, "/api/v4/groups/"+strconv.FormatInt(groupID, 10)+"/-/virtual_registries/cleanup/policy", nil)
	switch a.status {
	case http.StatusOK:
		var p cPolicy
		if err := a.decode(&p); err != nil {
			return groupPolicy{Note: "Cleanup policy: unreadable answer."}, nil
		}
		return groupPolicy{Policy: &p, CanPreview: true}, nil
	case http.StatusNotFound:
		if a.message() == "404 Not found" {
			return groupPolicy{Note: "This group has no cleanup policy: cached files stay until deleted.", CanPreview: true}, nil
		}
	case http.StatusUnauthorized:
		return groupPolicy{}, a
	case http.StatusForbidden:
		return groupPolicy{Note: "Only the group's owners and admins see its cleanup policy."}, nil
	}
	return groupPolicy{Note: "Cleanup policy: " + a.message()}, nil
}

// cleanupDryRunPage shows what a cleanup run would delete now, with the
// policy's days or those of the form.
func (c *console) cleanupDryRunPage(w http.ResponseWriter, r *http.Request, sess *consoleSession) error {
	var g cGroup
	if _, err := c.get(r, sess, "/api/v4/groups/"+idParam(r), &g); err != nil {
		return c.fail(w, r, sess, err)
	}
	days := strings.TrimSpace(r.URL.Query().Get("keep_n_days_after_download"))
	q := url.Values{"per_page": {"50"}, "page": {pageParam(r)}}
	back := url.Values{}
	if days != "" {
		q.Set("keep_n_days_after_download", days)
		back.Set("keep_n_days_after_download", days)
	}
	var res struct {
		Count   int64    `json:"deleted_entries_count"`
		Size    int64    `json:"deleted_size"`
		Before  *string  `json:"downloaded_before"`
		Entries []cEntry `json:"entries"`
	}
	id := strconv.FormatInt(g.ID, 10)
	a, err := c.get(r, sess, "/api/v4/groups/"+id+"/-/virtual_registries/cleanup/policy/dry_run?"+q.Encode(), &res)
	if err != nil {
		return c.fail(w, r, sess, err)
	}
	c.render(w, http.StatusOK, "cleanup_dry_run", sess, "Cleanup preview of "+g.FullPath, struct {
		Group   cGroup
		Days    string
		Count   int64
		Size    int64
		Before  *string
		Entries []cEntry
		Pager   pager
	}{g, days, res.Count, res.Size, res.Before, res.Entries, pagerOf(a, consolePrefix+"groups/"+id+"/cleanup_dry_run", back)})
	return nil
}

// cEvent is an activity event as GET /projects/:id/events shows it.
type cEvent struct {
	ID             int64   `json:"id"`
	ActionName     string  `json:"action_name"`
	TargetType     *string `json:"target_type"`
	TargetTitle    *string `json:"target_title"`
	AuthorUsername string  `json:"author_username"`
	CreatedAt      *string `json:"created_at"`
	PushData       *struct {
		Ref         *string `json:"ref"`
		CommitCount int     `json:"commit_count"`
		CommitTitle *string `json:"commit_title"`
	} `json:"push_data"`
	Note *struct {
		Body string `json:"body"`
	} `json:"note"`
}

func (c *console) projectEventsPage(w http.ResponseWriter, r *http.Request, sess *consoleSession) error {
	var p cProject
	if _, err := c.get(r, sess, "/api/v4/projects/"+idParam(r), &p); err != nil {
		return c.fail(w, r, sess, err)
	}
	var events []cEvent
	id := strconv.FormatInt(p.ID, 10)
	a, err := c.get(r, sess, "/api/v4/projects/"+id+"/events?per_page=50&page="+pageParam(r), &events)
	if err != nil {
		return c.fail(w, r, sess, err)
	}
	c.render(w, http.StatusOK, "project_events", sess, "Activity of "+p.PathWithNamespace, struct {
		Project cProject
		Events  []cEvent
		Pager   pager
	}{p, events, pagerOf(a, consolePrefix+"projects/"+id+"/events", nil)})
	return nil
}
