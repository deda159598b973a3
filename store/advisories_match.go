package store

import (
	"bytes"
	"encoding/json"
	"slices"
	"sort"
	"sync/atomic"
	"time"

	"registryd/store/kv"
)

// pkgAdvisory is what bktAdvisoryPkgs keeps of an advisory for one of its
// packages: everything matching and the dependency list need, so that
// matching a package is one range read.
type pkgAdvisory struct {
	ID       string          `json:"id"`
	Summary  string          `json:"s,omitempty"`
	Severity string          `json:"v"`
	Aliases  []string        `json:"a,omitempty"`
	Affected json.RawMessage `json:"f"`
}

// advisoryFilter is the set of packages that have advisories (their
// hashes, sorted), as of an advisory generation: an upload looks up only
// the packages it may find, so that a list of 100,000 entries costs a
// few reads of the advisory index rather than one per entry (a round trip
// each on PostgreSQL). Every node rebuilds it when the generation in the
// index moves, so a cluster needs no messages for it.
type advisoryFilter struct {
	gen    uint64
	hashes []uint64
}

func (f *advisoryFilter) has(h uint64) bool {
	_, ok := slices.BinarySearch(f.hashes, h)
	return ok
}

// advisoryGen is the generation of the advisory database: it moves with
// every committed import batch that changed an advisory.
func advisoryGen(tx kv.Tx) uint64 {
	v := tx.Bucket(bktMeta).Get(metaAdvisoryGen)
	if v == nil {
		return 0
	}
	return uint64(btoi(v))
}

// filterIn returns the package filter for tx's snapshot, rebuilding it
// when the generation moved. The filter it builds is consistent with the
// generation it read, so keeping it is right even if tx is run again.
func (s *Store) filterIn(tx kv.Tx, cache *atomic.Pointer[advisoryFilter]) *advisoryFilter {
	gen := advisoryGen(tx)
	if f := cache.Load(); f != nil && f.gen == gen {
		return f
	}
	f := &advisoryFilter{gen: gen}
	var last []byte
	c := tx.Bucket(bktAdvisoryPkgs).Cursor()
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		pk := advisoryPkgOf(k)
		if !bytes.Equal(pk, last) {
			last = append(last[:0], pk...)
			f.hashes = append(f.hashes, pkgHash(pk))
		}
	}
	slices.Sort(f.hashes)
	f.hashes = slices.Compact(f.hashes)
	cache.Store(f)
	return f
}

// advisoryPkgKey is package key + 0 + advisory id.
func advisoryPkgKey(pk []byte, id string) []byte {
	k := make([]byte, 0, len(pk)+1+len(id))
	return append(append(append(k, pk...), 0), id...)
}

// advisoryPkgOf is the package key of a bktAdvisoryPkgs key: up to the
// second 0 (ecosystem and name hold none).
func advisoryPkgOf(k []byte) []byte {
	first := bytes.IndexByte(k, 0)
	second := bytes.IndexByte(k[first+1:], 0)
	return k[:first+1+second]
}

// advisoriesOf reads the advisories of package pk.
func advisoriesOf(tx kv.Tx, pk []byte) []pkgAdvisory {
	var out []pkgAdvisory
	prefix := append(bytes.Clone(pk), 0)
	c := tx.Bucket(bktAdvisoryPkgs).Cursor()
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		var a pkgAdvisory
		if err := json.Unmarshal(v, &a); err != nil {
			panic("store: corrupt advisory record " + string(k) + ": " + err.Error())
		}
		out = append(out, a)
	}
	return out
}

// advisoryGroup is the advisories matching one entry that name each other:
// one vulnerability of the entry.
type advisoryGroup struct {
	rep      string   // the smallest id: the vulnerability's external id
	keys     []string // every id and alias of the group
	summary  string
	severity string
}

// groupAdvisories folds the advisories matching an entry into groups: two
// advisories are one vulnerability when one's id is the other's alias or
// they share an alias (GitHub's and PyPI's records of one CVE).
func groupAdvisories(matched []*pkgAdvisory) []advisoryGroup {
	n := len(matched)
	parent := make([]int, n)
	for i := range parent {
		parent[i] = i
	}
	var find func(int) int
	find = func(i int) int {
		for parent[i] != i {
			parent[i] = parent[parent[i]]
			i = parent[i]
		}
		return i
	}
	owner := map[string]int{}
	for i, a := range matched {
		for _, k := range append([]string{a.ID}, a.Aliases...) {
			if j, ok := owner[k]; ok {
				parent[find(i)] = find(j)
			} else {
				owner[k] = i
			}
		}
	}
	byRoot := map[int]*advisoryGroup{}
	var roots []int
	for i, a := range matched {
		r := find(i)
		g := byRoot[r]
		if g == nil {
			g = &advisoryGroup{rep: a.ID, severity: "unknown"}
			byRoot[r] = g
			roots = append(roots, r)
		}
		if a.ID < g.rep {
			g.rep = a.ID
		}
		for _, k := range append([]string{a.ID}, a.Aliases...) {
			if !slices.Contains(g.keys, k) {
				g.keys = append(g.keys, k)
			}
		}
		if moreSevere(a.Severity, g.severity) {
			g.severity = a.Severity
		}
	}
	out := make([]advisoryGroup, 0, len(roots))
	for _, r := range roots {
		g := byRoot[r]
		// The representative's summary, else any member's.
		for _, a := range matched {
			if find(slices.Index(matched, a)) != r {
				continue
			}
			if a.ID == g.rep && a.Summary != "" {
				g.summary = a.Summary
				break
			}
			if g.summary == "" && a.Summary != "" && a.Summary != a.ID {
				g.summary = a.Summary
			}
		}
		if g.summary == "" {
			g.summary = g.rep
		}
		slices.Sort(g.keys)
		out = append(out, *g)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].rep < out[j].rep })
	return out
}

// moreSevere orders critical > high > medium > low > info > unknown.
func moreSevere(a, b string) bool {
	ia, ib := slices.Index(Severities, a), slices.Index(Severities, b)
	if ia < 0 {
		return false
	}
	return ib < 0 || ia < ib
}

// vulnResolver gives the vulnerabilities of one project their stable ids,
// within one transaction.
type vulnResolver struct {
	project int64
	now     time.Time
	vb      kv.Bucket
	byKey   kv.Bucket
	// written are the records written in this transaction, by id.
	written map[int64]DependencyVulnerability
}

func newVulnResolver(tx kv.Tx, project int64, now time.Time) *vulnResolver {
	return &vulnResolver{project: project, now: now, vb: tx.Bucket(bktVulns), byKey: tx.Bucket(bktVulnsByKey),
		written: map[int64]DependencyVulnerability{}}
}

// resolve returns the project's vulnerability known by any of keys (the
// smallest id when several are), creating it when none is, and makes
// every key name it. rec's external id, name, severity and description
// are written to the record; keep says the first record written for an id
// in this transaction stands (advisories: the same group may be resolved
// for many entries). An SBOM's vulnerability is written without keep, so
// that an advisory of the same upload that names it gives it its summary
// and severity.
func (r *vulnResolver) resolve(keys []string, rec Vulnerability, keep bool) (DependencyVulnerability, error) {
	id := int64(0)
	var unmapped []string
	for _, k := range keys {
		if v := r.byKey.Get(vulnKey(r.project, k)); v != nil {
			if x := btoi(v); id == 0 || x < id {
				id = x
			}
		} else {
			unmapped = append(unmapped, k)
		}
	}
	if id == 0 {
		var err error
		if id, err = nextID(r.vb); err != nil {
			return DependencyVulnerability{}, err
		}
	}
	for _, k := range unmapped {
		if err := r.byKey.Put(vulnKey(r.project, k), itob(id)); err != nil {
			return DependencyVulnerability{}, err
		}
	}
	if dv, ok := r.written[id]; ok {
		return dv, nil
	}
	rec.ID, rec.ProjectID, rec.UpdatedAt = id, r.project, r.now
	if rec.Name == "" {
		rec.Name = rec.ExternalID
	}
	// An unchanged record is not written again: an upload of a list that
	// thousands of advisories match costs reads, and UpdatedAt says when
	// the vulnerability last changed.
	var old Vulnerability
	if !getJSON(r.vb, itob(id), &old) || old.ExternalID != rec.ExternalID || old.Name != rec.Name ||
		old.Severity != rec.Severity || old.Description != rec.Description {
		if err := putJSON(r.vb, itob(id), rec); err != nil {
			return DependencyVulnerability{}, err
		}
	}
	dv := DependencyVulnerability{ID: id, Name: rec.Name, Severity: rec.Severity}
	if keep {
		r.written[id] = dv
	}
	return dv, nil
}

// matchEntry sets the advisory vulnerabilities of d: those of the SBOM are
// kept (an advisory that is one of them, by id or alias, marks it as
// matched too and gives it its summary and severity), the others are the
// groups of advs that affect d's version.
func matchEntry(m AdvisoryMatcher, r *vulnResolver, d *Dependency, advs []pkgAdvisory) error {
	var matched []*pkgAdvisory
	if m != nil {
		for i := range advs {
			if m.Affects(d.Ecosystem, d.Version, advs[i].Affected) {
				matched = append(matched, &advs[i])
			}
		}
	}
	var out []DependencyVulnerability
	for _, v := range d.Vulnerabilities {
		if v.Origin&originSBOM != 0 {
			v.Origin = originSBOM
			out = append(out, v)
		}
	}
	for _, g := range groupAdvisories(matched) {
		dv, err := r.resolve(g.keys, Vulnerability{ExternalID: g.rep, Name: g.summary, Severity: g.severity}, true)
		if err != nil {
			return err
		}
		if i := slices.IndexFunc(out, func(x DependencyVulnerability) bool { return x.ID == dv.ID }); i >= 0 {
			out[i].Origin |= originAdvisory
			out[i].Name, out[i].Severity = dv.Name, dv.Severity
			continue
		}
		dv.Origin = originAdvisory
		out = append(out, dv)
	}
	d.Vulnerabilities = out
	return nil
}

// advisoryCache holds the advisories of the packages one transaction
// matched, so that a package used by many entries is read once.
type advisoryCache struct {
	tx     kv.Tx
	filter *advisoryFilter // nil: look every package up
	byPkg  map[string][]pkgAdvisory
}

func (c *advisoryCache) of(eco, name string) []pkgAdvisory {
	if !matchable(eco, name) || (c.filter != nil && !c.filter.has(pkgHashOf(eco, name))) {
		return nil
	}
	pk := pkgKey(eco, name)
	if advs, ok := c.byPkg[string(pk)]; ok {
		return advs
	}
	if c.byPkg == nil {
		c.byPkg = map[string][]pkgAdvisory{}
	}
	advs := advisoriesOf(c.tx, pk)
	c.byPkg[string(pk)] = advs
	return advs
}

// sameVulns reports whether two entries list the same vulnerabilities.
func sameVulns(a, b []DependencyVulnerability) bool {
	return slices.Equal(a, b)
}
