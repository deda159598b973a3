package sbom

import (
	"net/url"
	"slices"
	"strings"

	"registryd/store"
)

// Severities from CycloneDX ratings: the most severe rating wins; "none"
// is GitLab's info; no rating is unknown.
func severity(v cdxVulnerability) string {
	best := "unknown"
	for _, r := range v.Ratings {
		s := strings.ToLower(r.Severity)
		if s == "none" {
			s = "info"
		}
		if !slices.Contains(store.Severities, s) {
			s = "unknown"
		}
		if moreSevere(s, best) {
			best = s
		}
	}
	return best
}

// moreSevere orders critical > high > medium > low > info > unknown.
func moreSevere(a, b string) bool {
	return slices.Index(store.Severities, a) < slices.Index(store.Severities, b)
}

// bomLinkRef is the bom-ref a reference names: itself, or the fragment of a
// BOM-Link (urn:cdx:serial/version#bom-ref).
func bomLinkRef(ref string) string {
	if !strings.HasPrefix(ref, "urn:cdx:") {
		return ref
	}
	_, frag, ok := strings.Cut(ref, "#")
	if !ok {
		return ref
	}
	if u, err := url.PathUnescape(frag); err == nil {
		return u
	}
	return frag
}
