// Package osv reads OSV advisories (https://ossf.github.io/osv-schema/)
// into store.Advisory records and decides which versions they affect,
// with each ecosystem's own version order. It does no I/O of its own:
// callers hand it a zip archive, a directory or a stream.
package osv

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"registryd/store"
)

// record is the part of an OSV record registryd reads; the rest (details,
// references, credits, ...) is skipped by the decoder.
type record struct {
	ID        string           `json:"id"`
	Modified  string           `json:"modified"`
	Withdrawn string           `json:"withdrawn"`
	Aliases   []string         `json:"aliases"`
	Summary   string           `json:"summary"`
	Severity  []recordSeverity `json:"severity"`
	Affected  []struct {
		Package struct {
			Ecosystem string `json:"ecosystem"`
			Name      string `json:"name"`
		} `json:"package"`
		Ranges []struct {
			Type   string              `json:"type"`
			Events []map[string]string `json:"events"`
		} `json:"ranges"`
		Versions []string `json:"versions"`
	} `json:"affected"`
	DatabaseSpecific struct {
		Severity json.RawMessage `json:"severity"`
	} `json:"database_specific"`
}

type recordSeverity struct {
	Type  string `json:"type"`
	Score string `json:"score"`
}

// ErrNotOSV is a JSON document that is not an OSV record (no id, or no
// modified time): a stray file of an archive, skipped and counted.
var ErrNotOSV = errors.New("not an OSV record")

// Decode reads one OSV record. A record of ecosystems registryd does not
// keep has no Packages (an import removes what it had of it); a withdrawn
// record has Withdrawn set. A JSON value that is not a record is
// ErrNotOSV; a record with an impossible value (an id or alias too long)
// is another error naming it.
func Decode(raw []byte) (*store.Advisory, error) {
	var r record
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotOSV, err)
	}
	if r.ID == "" || r.Modified == "" {
		return nil, ErrNotOSV
	}
	if len(r.ID) > store.MaxAdvisoryID || !utf8.ValidString(r.ID) {
		return nil, fmt.Errorf("advisory id %.40q... is longer than %d bytes", r.ID, store.MaxAdvisoryID)
	}
	sum := sha256.Sum256(raw)
	a := &store.Advisory{ID: r.ID, Digest: hex.EncodeToString(sum[:16]), Withdrawn: r.Withdrawn != ""}
	if t, err := time.Parse(time.RFC3339Nano, r.Modified); err == nil {
		a.Modified = t.UTC()
	}
	a.Summary = strings.TrimSpace(firstLine(r.Summary))
	if a.Summary == "" {
		a.Summary = r.ID
	}
	a.Summary = truncate(a.Summary, store.MaxVulnerabilityName)
	var dbWord string
	_ = json.Unmarshal(r.DatabaseSpecific.Severity, &dbWord) // a word, or something else we ignore
	a.Severity = severityOf(dbWord, r.Severity)
	for _, al := range r.Aliases {
		if al != "" && al != r.ID && len(al) <= store.MaxAdvisoryID && !slices.Contains(a.Aliases, al) &&
			len(a.Aliases) < store.MaxAdvisoryAliases {
			a.Aliases = append(a.Aliases, al)
		}
	}

	// Every affected[] entry of a package adds its ranges and versions to
	// the package's one description.
	byPkg := map[[2]string]*affected{}
	var order [][2]string
	for _, af := range r.Affected {
		eco := ecosystemOf(af.Package.Ecosystem)
		if eco == "" || af.Package.Name == "" {
			continue
		}
		key := [2]string{eco, NormalizeName(eco, af.Package.Name)}
		if len(key[0])+1+len(key[1]) > store.MaxPackageKey {
			continue
		}
		d := byPkg[key]
		if d == nil {
			if len(order) == store.MaxAdvisoryPackages {
				continue
			}
			d = &affected{}
			byPkg[key] = d
			order = append(order, key)
		}
		for _, v := range af.Versions {
			if v != "" && !slices.Contains(d.Versions, v) {
				d.Versions = append(d.Versions, v)
			}
		}
		for _, rg := range af.Ranges {
			ar := affectedRange{Type: rg.Type}
			for _, ev := range rg.Events {
				var e event
				for k, v := range ev {
					switch k {
					case "introduced":
						e.Introduced = v
					case "fixed":
						e.Fixed = v
					case "last_affected":
						e.LastAffected = v
					case "limit":
						e.Limit = v
					}
				}
				if e.version() != "" {
					ar.Events = append(ar.Events, e)
				}
			}
			if len(ar.Events) > 0 {
				d.Ranges = append(d.Ranges, ar)
			}
		}
	}
	for _, key := range order {
		d := byPkg[key]
		if len(d.Ranges) == 0 && len(d.Versions) == 0 {
			continue
		}
		enc, err := json.Marshal(d)
		if err != nil {
			return nil, err
		}
		if len(enc) > store.MaxAffectedBytes {
			return nil, fmt.Errorf("advisory %s: the affected versions of %s are larger than %d bytes", r.ID, key[1], store.MaxAffectedBytes)
		}
		a.Packages = append(a.Packages, store.AdvisoryPackage{Ecosystem: key[0], Name: key[1], Affected: enc})
	}
	return a, nil
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// truncate cuts s to at most n runes.
func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n])
}
