package admin

import (
	"net/http"
	"runtime/debug"

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
	v := metadataView{Version: s.version, Revision: buildRevision(),
		Enterprise: s.auth.Plan().AtLeast(auth.PlanPremium)}
	writeJSON(w, http.StatusOK, v)
	return nil
}

// buildRevision is the abbreviated commit the binary was built from.
func buildRevision() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	for _, kv := range info.Settings {
		if kv.Key == "vcs.revision" && len(kv.Value) >= 11 {
			return kv.Value[:11]
		}
	}
	return "unknown"
}
