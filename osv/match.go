package osv

import (
	"encoding/json"
	"slices"
	"strings"
)

// affected is what an advisory says of one package, kept in the index
// (store.AdvisoryPackage.Affected) as this JSON: the OSV ranges and
// enumerated versions of every affected[] entry of the record that names
// the package.
type affected struct {
	Ranges   []affectedRange `json:"r,omitempty"`
	Versions []string        `json:"v,omitempty"`
}

type affectedRange struct {
	Type   string  `json:"t"`
	Events []event `json:"e"`
}

// event is one OSV range event: exactly one field is set.
type event struct {
	Introduced   string `json:"i,omitempty"`
	Fixed        string `json:"f,omitempty"`
	LastAffected string `json:"l,omitempty"`
	Limit        string `json:"m,omitempty"`
}

func (e event) version() string {
	return e.Introduced + e.Fixed + e.LastAffected + e.Limit
}

// Matcher decides whether a version falls in an advisory's affected
// versions; it is the store's AdvisoryMatcher.
type Matcher struct{}

// Affects reports whether version of a package of ecosystem is affected
// by aff (an AdvisoryPackage.Affected this package wrote):
//
//   - it is one of the enumerated versions (the same string, or equal in
//     the ecosystem's order);
//   - or it falls in one of the ranges, evaluated as the OSV schema says:
//     the events sorted by version, walked in order, "introduced" at or
//     below the version makes it affected, "fixed" or "limit" at or below
//     it, or "last_affected" below it, makes it not. SEMVER ranges use
//     semantic versioning in every ecosystem; ECOSYSTEM ranges use the
//     ecosystem's order. A range whose events are not all versions of
//     that order, a GIT range, and an ECOSYSTEM range of an ecosystem
//     without an order registryd knows are not evaluated: only the
//     enumerated versions count for them.
func (Matcher) Affects(ecosystem, version string, aff []byte) bool {
	var a affected
	if json.Unmarshal(aff, &a) != nil {
		return false
	}
	return a.affects(ecosystem, version)
}

func (a *affected) affects(ecosystem, version string) bool {
	version = strings.TrimSpace(version)
	if version == "" {
		return false
	}
	eco := ecosystemOrders[ecosystem]
	var parsedEco any
	ecoOK := false
	if eco != nil {
		parsedEco, ecoOK = eco.parse(version)
	}
	for _, v := range a.Versions {
		if v == version {
			return true
		}
		if ecoOK {
			if pv, ok := eco.parse(v); ok && eco.cmp(parsedEco, pv) == 0 {
				return true
			}
		}
	}
	for _, r := range a.Ranges {
		var o *order
		switch r.Type {
		case "SEMVER":
			o = semverOrder
			if ecosystem == Go {
				o = goOrder
			}
		case "ECOSYSTEM":
			o = eco
		}
		if o == nil {
			continue
		}
		v, ok := o.parse(version)
		if ok && inRange(o, v, r.Events) {
			return true
		}
	}
	return false
}

// inRange evaluates one range for the parsed version v.
func inRange(o *order, v any, events []event) bool {
	type parsed struct {
		e    event
		key  any
		zero bool // introduced "0": below every version
	}
	evs := make([]parsed, 0, len(events))
	for _, e := range events {
		if e.Introduced == "0" {
			evs = append(evs, parsed{e: e, zero: true})
			continue
		}
		k, ok := o.parse(e.version())
		if !ok {
			return false
		}
		evs = append(evs, parsed{e: e, key: k})
	}
	slices.SortStableFunc(evs, func(x, y parsed) int {
		switch {
		case x.zero && y.zero:
			return 0
		case x.zero:
			return -1
		case y.zero:
			return 1
		}
		return o.cmp(x.key, y.key)
	})
	affected := false
	for _, p := range evs {
		switch {
		case p.e.Introduced != "":
			if p.zero || o.cmp(v, p.key) >= 0 {
				affected = true
			}
		case p.e.Fixed != "", p.e.Limit != "":
			if o.cmp(v, p.key) >= 0 {
				affected = false
			}
		case p.e.LastAffected != "":
			if o.cmp(v, p.key) > 0 {
				affected = false
			}
		}
	}
	return affected
}
