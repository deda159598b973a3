package admin

import (
	"errors"
	"io"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"registryd/auth"
	"registryd/sbom"
	"registryd/store"
)

func (s *Server) routesDependencies() {
	ingests := make(chan struct{}, s.opts.MaxSBOMIngests)
	s.handle(http.MethodGet, "/api/v4/projects/{id}/dependencies", s.listDependencies)
	s.handle(http.MethodPut, "/api/v4/projects/{id}/dependencies", func(w http.ResponseWriter, r *http.Request) error {
		return s.putDependencies(w, r, ingests)
	})
}

// sbomRetryAfter is the Retry-After of an SBOM upload refused because
// admin.max_sbom_ingests others are being read: about what a large one takes.
const sbomRetryAfter = "5"

// dependencyManagers are the values of the package_manager filter: the
// spec's fourteen (with maven for pkgfmt) plus GitLab's newer poetry, apk,
// conda, pub and cargo.
var dependencyManagers = []string{"bundler", "composer", "conan", "go", "gradle", "maven", "npm", "nuget", "pip",
	"pipenv", "pnpm", "yarn", "sbt", "setuptools", "poetry", "apk", "conda", "pub", "cargo"}

// sbomContentTypes are the media types PUT accepts; no type at all is
// taken as JSON too, for curl -T. The body says which format it is.
var sbomContentTypes = []string{"application/vnd.cyclonedx+json", "application/spdx+json", "application/json", ""}

type dependencyView struct {
	Name               string              `json:"name"`
	Version            string              `json:"version"`
	PackageManager     *string             `json:"package_manager"`
	DependencyFilePath string              `json:"dependency_file_path"`
	Vulnerabilities    []vulnerabilityView `json:"vulnerabilities"`
	Licenses           []licenseView       `json:"licenses"`
}

type vulnerabilityView struct {
	Name     string `json:"name"`
	Severity string `json:"severity"`
	ID       int64  `json:"id"`
	URL      string `json:"url"`
}

type licenseView struct {
	SPDXIdentifier string  `json:"spdx_identifier,omitempty"`
	Name           string  `json:"name"`
	URL            *string `json:"url"`
}

// canReadRepository: guests and above of public and internal projects, and
// any signed-in user who can see them (their code is readable to all who can
// see them); reporters and above of private ones; admins.
func (s *Server) canReadRepository(p auth.Principal, pr store.Project) bool {
	if p.IsAdmin() {
		return true
	}
	if pr.Visibility == store.Private {
		return s.auth.ProjectLevel(p, pr.ID) >= store.Reporter
	}
	return s.auth.CanSeeProject(p, pr)
}

// depsAuth is the plan gate (404 before authentication) and authentication
// of the dependency list endpoints.
func (s *Server) depsAuth(r *http.Request) (auth.Principal, error) {
	return s.authenticateGated(r, s.auth.DependencyListEnabled())
}

// listDependencies checks in GitLab's order: the plan gate (404 before
// authentication), authentication (401), parameters (400), then the project:
// 404 for a caller who cannot see it, 403 for one who cannot read its code.
func (s *Server) listDependencies(w http.ResponseWriter, r *http.Request) error {
	p, in, err := authParams(r, s.depsAuth)
	if err != nil {
		return err
	}
	pg := in.page()
	managers := in.strings("package_manager")
	for _, m := range managers {
		if !slices.Contains(dependencyManagers, m) {
			in.fail("package_manager does not have a valid value")
			break
		}
	}
	if err := in.err(); err != nil {
		return err
	}
	pr, err := s.visibleProject(r, p)
	if err != nil {
		return err
	}
	if !s.canReadRepository(p, pr) {
		return errForbidden
	}
	// Vulnerabilities are for those who may read the security dashboard.
	showVulns := p.IsAdmin() || s.auth.ProjectLevel(p, pr.ID) >= store.Developer
	deps, total, err := s.st.Dependencies(pr.ID, managers, pg.Offset(), pg.PerPage)
	if err != nil {
		return err
	}
	s.writePage(w, r, pg, total, mapViews(deps, func(d store.Dependency) dependencyView {
		v := dependencyView{Name: d.Name, Version: d.Version, PackageManager: optString(d.PackageManager),
			DependencyFilePath: d.FilePath, Vulnerabilities: []vulnerabilityView{}, Licenses: []licenseView{}}
		if showVulns {
			for _, x := range d.Vulnerabilities {
				v.Vulnerabilities = append(v.Vulnerabilities, vulnerabilityView{Name: x.Name, Severity: x.Severity,
					ID: x.ID, URL: s.webURL(pr.FullPath + "/-/security/vulnerabilities/" + strconv.FormatInt(x.ID, 10))})
			}
		}
		for _, l := range d.Licenses {
			v.Licenses = append(v.Licenses, licenseView{SPDXIdentifier: l.SPDX, Name: l.Name, URL: optString(l.URL)})
		}
		return v
	}))
	return nil
}

// refuseUpload answers an upload refused before its body was read so that
// a client streaming the body can read the answer. Closing a connection
// with unread bytes makes the kernel send a reset, which destroys an
// answer the client has not read yet: clients that write their whole body
// before reading (most HTTP libraries) saw a reset instead of the 429.
//
//   - A client that sent Expect: 100-continue has not sent its body and
//     waits for a go-ahead: the refusal is answered at once, without
//     reading (net/http then closes the connection; nothing is left to
//     reset it).
//   - Otherwise the answer is written and flushed first (full duplex), so
//     that a client reading while it sends (curl, Go) sees it and may stop,
//     and then, when drain is set, the body is read to its end and
//     discarded, up to admin.max_sbom_bytes (the listener's MaxBytesReader)
//     within admin.read_timeout: a client that sends the whole body first
//     then reads the answer, and the connection stays usable. Draining
//     costs bandwidth, not memory (no slot is taken, nothing is kept).
//     A body over the limit (drain unset for an announced one) is cut
//     there; net/http closes the connection after a pause for the client
//     to read the answer.
func refuseUpload(w http.ResponseWriter, r *http.Request, refusal *httpError, drain bool) error {
	if strings.EqualFold(r.Header.Get("Expect"), "100-continue") {
		return refusal
	}
	rc := http.NewResponseController(w)
	if err := rc.EnableFullDuplex(); err != nil {
		return refusal // not HTTP/1 (a test recorder): nothing to reset
	}
	writeJSON(w, refusal.status, refusal.body)
	_ = rc.Flush()
	if drain {
		_, _ = io.Copy(io.Discard, r.Body)
	}
	return nil
}

// dependencyUploadView is the answer to an SBOM upload.
type dependencyUploadView struct {
	Dependencies      int            `json:"dependencies"`
	Vulnerabilities   int            `json:"vulnerabilities"`
	Licenses          int            `json:"licenses"`
	PackageManagers   map[string]int `json:"package_managers"`
	SkippedComponents int            `json:"skipped_components"`
	SpecVersion       string         `json:"spec_version"`
	UpdatedAt         jsonTime       `json:"updated_at"`
}

// putDependencies replaces a project's dependency list with the one a
// CycloneDX or SPDX JSON SBOM describes. Maintainers and admins only. At most
// cap(ingests) uploads are read and stored at once: one more is answered 429
// with Retry-After before its body is read, so memory stays bounded
// (docs/performance.md, "SBOM upload memory").
func (s *Server) putDependencies(w http.ResponseWriter, r *http.Request, ingests chan struct{}) error {
	p, err := s.depsAuth(r)
	if err != nil {
		return err
	}
	pr, err := s.visibleProject(r, p)
	if err != nil {
		return err
	}
	if s.auth.ProjectLevel(p, pr.ID) < store.Maintainer {
		return errForbidden
	}
	raw := r.Header.Get("Content-Type")
	ct, _, err := mime.ParseMediaType(raw)
	if (err != nil && raw != "") || !slices.Contains(sbomContentTypes, ct) {
		return message(http.StatusUnsupportedMediaType,
			"415 Unsupported Media Type - send the SBOM as application/vnd.cyclonedx+json, application/spdx+json or application/json")
	}
	limit := s.opts.MaxSBOMBytes
	tooLarge := message(http.StatusRequestEntityTooLarge,
		"413 Request Entity Too Large - the SBOM is larger than "+sizeText(limit)+" (admin.max_sbom_bytes)")
	if r.ContentLength > limit {
		return refuseUpload(w, r, tooLarge, false)
	}
	select {
	case ingests <- struct{}{}:
		defer func() { <-ingests }()
	default:
		w.Header().Set("Retry-After", sbomRetryAfter)
		return refuseUpload(w, r, message(http.StatusTooManyRequests, "429 Too Many Requests - "+
			strconv.Itoa(cap(ingests))+" SBOM uploads are being processed; retry after "+sbomRetryAfter+" seconds"), true)
	}
	sb, err := sbom.Read(r.Body, sbom.Options{FilePath: r.URL.Query().Get("dependency_file_path")})
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		// The listener's MaxBytesReader stopped the stream at the limit.
		return tooLarge
	}
	if err != nil {
		return err
	}
	list, err := s.st.ReplaceDependencies(pr.ID, sb.Dependencies, sb.Vulnerabilities)
	if err != nil {
		return err
	}
	s.log.Info("dependency list replaced", "req_id", requestID(r), "project", pr.ID,
		"dependencies", list.Dependencies, "vulnerabilities", list.Vulnerabilities)
	writeJSON(w, http.StatusOK, dependencyUploadView{Dependencies: list.Dependencies,
		Vulnerabilities: list.Vulnerabilities, Licenses: list.Licenses, PackageManagers: list.PackageManagers,
		SkippedComponents: sb.Skipped, SpecVersion: sb.SpecVersion, UpdatedAt: jsonTime(list.UpdatedAt)})
	return nil
}
