package admin

import (
	"net/http"
	"runtime/debug"
	"strings"

	"registryd/auth"
)

// GET /version and GET /metadata: GitLab's Metadata entity (since 15.5
// /version is the same document). The values are registryd's own, not a
// GitLab version: a client must not take registryd for a GitLab release it
// is not.
func (s *Server) routesVersion() {
	s.handle(http.MethodGet, "/api/v4/version", s.getMetadata)
	s.handle(http.MethodGet, "/api/v4/metadata", s.getMetadata)
}

type metadataView struct {
	Version  string `json:"version"`
	Revision string `json:"revision"`
	KAS      struct {
		Enabled             bool    `json:"enabled"`
		ExternalURL         *string `json:"externalUrl"`
		ExternalK8sProxyURL *string `json:"externalK8sProxyUrl"`
		Version             *string `json:"version"`
	} `json:"kas"`
	Enterprise bool `json:"enterprise"`
}

// getMetadata: version is registryd's (`registryd version`); revision the
// commit it was built from (11 hex digits, as GitLab shows it; "unknown"
// when the build recorded none); kas is disabled, since registryd has no
// agent server; enterprise says whether the licence plan serves the
// Enterprise Edition endpoints registryd has (premium and ultimate). Any
// signed-in token with api, read_api or read_user may read it.
func (s *Server) getMetadata(w http.ResponseWriter, r *http.Request) error {
	if _, err := s.authenticateReadUser(r); err != nil {
		return err
	}
	v := metadataView{Version: s.version, Revision: s.revision,
		Enterprise: s.auth.Plan().AtLeast(auth.PlanPremium)}
	writeJSON(w, http.StatusOK, v)
	return nil
}

// revisionOf is the revision GET /version shows: given (the Makefile's,
// from git), else the commit the Go toolchain recorded in the binary, which
// it does not with -buildvcs=false or in a git worktree, abbreviated to 11
// hex digits; "unknown" when neither is a commit id.
func revisionOf(given string) string {
	if r, ok := abbreviatedCommit(given); ok {
		return r
	}
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, kv := range info.Settings {
			if kv.Key == "vcs.revision" {
				if r, ok := abbreviatedCommit(kv.Value); ok {
					return r
				}
			}
		}
	}
	return "unknown"
}

// abbreviatedCommit is the first 11 hex digits of a commit id of at least
// that many.
func abbreviatedCommit(id string) (string, bool) {
	if len(id) < 11 || strings.Trim(id, "0123456789abcdef") != "" {
		return "", false
	}
	return id[:11], true
}
