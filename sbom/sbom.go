// Package sbom reads CycloneDX and SPDX JSON SBOMs into dependency list
// entries.
package sbom

import (
	"encoding/json"
	"io"

	"registryd/store"
)

// Error is a body registryd cannot read as an SBOM: not JSON, not
// CycloneDX, a version it does not know, cut short. Reason says what is
// wrong in words for the uploader; Err is the reader's own failure, if that
// was the cause.
type Error struct {
	Reason string
	Err    error
}

func (e *Error) Error() string { return e.Reason }

// Unwrap gives the reader's failure.
func (e *Error) Unwrap() error { return e.Err }

func formatError(reason string) error { return &Error{Reason: reason} }

// Options are per-upload defaults.
type Options struct {
	// FilePath is the dependency file for components nothing else locates.
	FilePath string
}

// Result is a parsed upload, ready for store.ReplaceDependencies.
type Result struct {
	// SpecVersion is the CycloneDX specVersion ("1.7") or the SPDX
	// spdxVersion ("SPDX-2.3").
	SpecVersion     string
	Dependencies    []store.NewDependency
	Vulnerabilities []store.NewVulnerability
	// Skipped counts components that are not dependencies (files, operating
	// systems, ...) and duplicates of an earlier entry.
	Skipped int
}

// Read reads a CycloneDX or SPDX 2 JSON SBOM. A body that is not JSON, not
// one of them or of an unsupported version is an *Error naming the problem; a
// component without a name is a *store.ValidationError naming its JSON
// path; a failure of r itself (a body over the listener's limit) is an
// *Error that unwraps to it.
func Read(r io.Reader, opts Options) (*Result, error) {
	sr := &sbomReader{dec: json.NewDecoder(r), problems: &store.ValidationError{},
		vulnIndex: map[string]int32{}, strs: map[string]string{}, lics: map[string][]store.License{}}
	if err := sr.read(); err != nil {
		return nil, err
	}
	if err := sr.problems.Err(); err != nil {
		return nil, err
	}
	return sr.result(opts)
}
