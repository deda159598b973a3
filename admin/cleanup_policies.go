package admin

import (
	"net/http"
	"slices"
	"strings"
	"time"

	"registryd/auth"
	"registryd/store"
)

// CleanupRunner starts a cleanup policy run at once, in the background
// (package cleanup's Scheduler).
type CleanupRunner interface {
	RunNow(group, authorID int64, authorName string) (store.CleanupPolicy, error)
}

// cleanupPolicyBase is GitLab's cleanup policy resource of a group.
const cleanupPolicyBase = "/api/v4/groups/{id}/-/virtual_registries/cleanup/policy"

func (s *Server) routesCleanupPolicies() {
	s.handle(http.MethodGet, cleanupPolicyBase, s.getCleanupPolicy)
	s.handle(http.MethodPost, cleanupPolicyBase, s.createCleanupPolicy)
	s.handle(http.MethodPatch, cleanupPolicyBase, s.updateCleanupPolicy)
	s.handle(http.MethodDelete, cleanupPolicyBase, s.deleteCleanupPolicy)
	// registryd's own: run now, and what a run would delete.
	s.handle(http.MethodPost, cleanupPolicyBase+"/run", s.runCleanupPolicy)
	s.handle(http.MethodGet, cleanupPolicyBase+"/dry_run", s.dryRunCleanupPolicy)
}

// cleanupPolicyView is GitLab's API::Entities::VirtualRegistries::Cleanup::Policy,
// in its field order.
type cleanupPolicyView struct {
	GroupID                    int64                           `json:"group_id"`
	NextRunAt                  jsonTime                        `json:"next_run_at"`
	LastRunAt                  *jsonTime                       `json:"last_run_at"`
	LastRunDeletedSize         int64                           `json:"last_run_deleted_size"`
	LastRunDeletedEntriesCount int64                           `json:"last_run_deleted_entries_count"`
	KeepNDaysAfterDownload     int                             `json:"keep_n_days_after_download"`
	Status                     string                          `json:"status"`
	Cadence                    int                             `json:"cadence"`
	Enabled                    bool                            `json:"enabled"`
	FailureMessage             *string                         `json:"failure_message"`
	LastRunDetailedMetrics     map[string]store.CleanupMetrics `json:"last_run_detailed_metrics"`
	NotifyOnSuccess            bool                            `json:"notify_on_success"`
	NotifyOnFailure            bool                            `json:"notify_on_failure"`
	CreatedAt                  jsonTime                        `json:"created_at"`
	UpdatedAt                  jsonTime                        `json:"updated_at"`
}

func cleanupPolicyJSON(c store.CleanupPolicy) cleanupPolicyView {
	metrics := c.LastRunDetailedMetrics
	if metrics == nil {
		metrics = map[string]store.CleanupMetrics{} // GitLab's column default: {}
	}
	return cleanupPolicyView{
		GroupID: c.GroupID, NextRunAt: jsonTime(c.NextRunAt), LastRunAt: optTime(c.LastRunAt),
		LastRunDeletedSize: c.LastRunDeletedSize, LastRunDeletedEntriesCount: c.LastRunDeletedEntriesCount,
		KeepNDaysAfterDownload: c.KeepNDaysAfterDownload, Status: c.Status, Cadence: c.Cadence, Enabled: c.Enabled,
		FailureMessage: optString(c.FailureMessage), LastRunDetailedMetrics: metrics,
		NotifyOnSuccess: c.NotifyOnSuccess, NotifyOnFailure: c.NotifyOnFailure,
		CreatedAt: jsonTime(c.CreatedAt), UpdatedAt: jsonTime(c.UpdatedAt),
	}
}

// cleanupGroup runs the checks of a cleanup policy endpoint in GitLab's
// order: the group (404), the feature gate (404) and authentication (401),
// the group's visibility (404), then GitLab's admin_virtual_registry
// permission: owners and admins only, and never on a subgroup (403; GitLab
// grants the permission on top-level groups only).
func (s *Server) cleanupGroup(r *http.Request) (store.Group, auth.Principal, error) {
	g, err := s.groupRef(r)
	if err != nil {
		return g, auth.Principal{}, err
	}
	p, err := s.vrAuth(r)
	if err != nil {
		return g, p, err
	}
	if !s.canSeeGroup(p, g) {
		return g, p, errGroupNotFound
	}
	if !g.TopLevel() || s.auth.GroupLevel(p, g.ID) < store.Owner {
		return g, p, errForbidden
	}
	return g, p, nil
}

// cleanupFields are the optional fields of a policy, in GitLab's
// declaration order (which its at-least-one-of message follows).
var cleanupFields = []string{"enabled", "keep_n_days_after_download", "cadence", "notify_on_success", "notify_on_failure"}

// cleanupPatch reads the policy fields as GitLab declares them: optional,
// allow_blank: false ("" or null is "<field> is empty"), booleans coerced
// ("<field> is invalid" when not one), integers within their values
// ("<field> does not have a valid value"). Problems are recorded in p.
func (p *params) cleanupPatch() store.CleanupPolicyPatch {
	return store.CleanupPolicyPatch{
		Enabled:                p.cleanupBool("enabled"),
		KeepNDaysAfterDownload: p.cleanupInt("keep_n_days_after_download", func(n int) bool { return n >= 1 && n <= store.MaxCleanupKeepDays }),
		Cadence:                p.cleanupInt("cadence", func(n int) bool { return slices.Contains(store.CleanupCadences, n) }),
		NotifyOnSuccess:        p.cleanupBool("notify_on_success"),
		NotifyOnFailure:        p.cleanupBool("notify_on_failure"),
	}
}

// blank reports whether a parameter is present but blank (null, or a
// string of spaces), recording "<name> is empty" when it is.
func (p *params) blank(name string) bool {
	v, ok := p.values[name]
	if !ok {
		return false
	}
	if s, isString := v.(string); v == nil || (isString && strings.TrimSpace(s) == "") {
		p.fail(name + " is empty")
		return true
	}
	return false
}

func (p *params) cleanupBool(name string) *bool {
	if p.blank(name) {
		return nil
	}
	return p.boolean(name)
}

func (p *params) cleanupInt(name string, valid func(int) bool) *int {
	if p.blank(name) {
		return nil
	}
	n := p.integer(name)
	if n != nil && !valid(*n) {
		p.fail(name + " does not have a valid value")
		return nil
	}
	return n
}

func (s *Server) getCleanupPolicy(w http.ResponseWriter, r *http.Request) error {
	g, _, err := s.cleanupGroup(r)
	if err != nil {
		return err
	}
	c, err := s.st.CleanupPolicy(g.ID)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, cleanupPolicyJSON(c))
	return nil
}

func (s *Server) createCleanupPolicy(w http.ResponseWriter, r *http.Request) error {
	g, _, err := s.cleanupGroup(r)
	if err != nil {
		return err
	}
	in, err := readParams(r)
	if err != nil {
		return err
	}
	patch := in.cleanupPatch()
	if err := in.err(); err != nil {
		return err
	}
	c, err := s.st.CreateCleanupPolicy(g.ID, patch)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, cleanupPolicyJSON(c))
	return nil
}

func (s *Server) updateCleanupPolicy(w http.ResponseWriter, r *http.Request) error {
	g, _, err := s.cleanupGroup(r)
	if err != nil {
		return err
	}
	in, err := readParams(r)
	if err != nil {
		return err
	}
	patch := in.cleanupPatch()
	given := false
	for _, f := range cleanupFields {
		_, ok := in.values[f]
		given = given || ok
	}
	if !given {
		in.fail(strings.Join(cleanupFields, ", ") + " are missing, at least one parameter must be provided")
	}
	if err := in.err(); err != nil {
		return err
	}
	c, err := s.st.UpdateCleanupPolicy(g.ID, patch)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, cleanupPolicyJSON(c))
	return nil
}

func (s *Server) deleteCleanupPolicy(w http.ResponseWriter, r *http.Request) error {
	g, _, err := s.cleanupGroup(r)
	if err != nil {
		return err
	}
	var since *time.Time
	if h := r.Header.Get("If-Unmodified-Since"); h != "" {
		t, err := http.ParseTime(h)
		if err != nil {
			return badRequest("If-Unmodified-Since is not an HTTP date")
		}
		since = &t
	}
	if err := s.st.DeleteCleanupPolicy(g.ID, since); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// errCleanupUnavailable answers a run now when no scheduler runs runs (an
// admin handler built without one).
var errCleanupUnavailable = message(http.StatusServiceUnavailable, "503 Service Unavailable - cleanup policy runs are not available")

// runCleanupPolicy starts a run at once (registryd's own): 202 with the
// policy, "running"; 409 when it is running already; 429 with Retry-After
// when the last run started less than cleanup.run_now_interval ago.
func (s *Server) runCleanupPolicy(w http.ResponseWriter, r *http.Request) error {
	g, p, err := s.cleanupGroup(r)
	if err != nil {
		return err
	}
	if s.cleanup == nil {
		return errCleanupUnavailable
	}
	c, err := s.cleanup.RunNow(g.ID, p.UserID(), p.User.Name)
	if err != nil { // store.ErrCleanupRunning: 409; *store.CleanupTooSoonError: 429
		return err
	}
	writeJSON(w, http.StatusAccepted, cleanupPolicyJSON(c))
	return nil
}

// cleanupPreviewView is the answer of a dry run.
type cleanupPreviewView struct {
	DeletedEntriesCount int              `json:"deleted_entries_count"`
	DeletedSize         int64            `json:"deleted_size"`
	DownloadedBefore    jsonTime         `json:"downloaded_before"`
	Entries             []cacheEntryView `json:"entries"`
}

// dryRunCleanupPolicy answers what a run of the policy would delete now
// (registryd's own): the count, the bytes and one page of the entries.
// keep_n_days_after_download previews another setting, and then needs no
// policy.
func (s *Server) dryRunCleanupPolicy(w http.ResponseWriter, r *http.Request) error {
	g, _, err := s.cleanupGroup(r)
	if err != nil {
		return err
	}
	in, err := readParams(r)
	if err != nil {
		return err
	}
	pg := in.page()
	keep := in.cleanupInt("keep_n_days_after_download", func(n int) bool { return n >= 1 && n <= store.MaxCleanupKeepDays })
	if err := in.err(); err != nil {
		return err
	}
	if keep == nil {
		c, err := s.st.CleanupPolicy(g.ID)
		if err != nil {
			return err
		}
		keep = &c.KeepNDaysAfterDownload
	}
	prev, err := s.st.CleanupCandidates(g.ID, *keep, pg.Offset(), pg.PerPage)
	if err != nil {
		return err
	}
	s.setPageHeaders(w, r, pg, prev.Count)
	writeJSON(w, http.StatusOK, cleanupPreviewView{DeletedEntriesCount: prev.Count, DeletedSize: prev.Bytes,
		DownloadedBefore: jsonTime(prev.Cutoff), Entries: mapViews(prev.Page, cacheEntryJSON)})
	return nil
}
