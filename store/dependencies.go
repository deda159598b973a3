package store

import (
	"encoding/binary"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"registryd/store/kv"
)

// Dependency is one entry of a project's dependency list, in the order the
// SBOM listed it.
type Dependency struct {
	Name           string `json:"name"`
	Version        string `json:"version"`
	PackageManager string `json:"package_manager,omitempty"`
	FilePath       string `json:"dependency_file_path,omitempty"`
	// Ecosystem and Package are the package advisories are matched on
	// (NewDependency); Package "" means Name (packageName).
	Ecosystem       string                    `json:"-"`
	Package         string                    `json:"-"`
	Licenses        []License                 `json:"licenses,omitempty"`
	Vulnerabilities []DependencyVulnerability `json:"vulnerabilities,omitempty"`
}

// License is a license of a dependency. SPDX is the SPDX identifier when
// the SBOM gave one.
type License struct {
	SPDX string `json:"spdx_identifier,omitempty"`
	Name string `json:"name"`
	URL  string `json:"url,omitempty"`
}

// DependencyVulnerability is what a dependency entry keeps of a
// vulnerability that affects it.
type DependencyVulnerability struct {
	ID       int64  `json:"id"`
	Name     string `json:"name"`
	Severity string `json:"severity"`
	// Origin says whether the SBOM named it, an advisory matched it, or
	// both (originSBOM | originAdvisory).
	Origin uint8 `json:"-"`
}

// Vulnerability is a vulnerability known in a project. Its ID stays the same
// across uploads for as long as the SBOMs name it by the same ExternalID.
type Vulnerability struct {
	ID          int64     `json:"id"`
	ProjectID   int64     `json:"project_id"`
	ExternalID  string    `json:"external_id"` // the SBOM's id: CVE-2021-23337, GHSA-..., ...
	Name        string    `json:"name"`
	Severity    string    `json:"severity"`
	Description string    `json:"description,omitempty"`
	UpdatedAt   time.Time `json:"updated_at"`
}

// Severities a vulnerability may have, most severe first.
var Severities = []string{"critical", "high", "medium", "low", "info", "unknown"}

// NewDependency is one dependency of an upload. Vulnerabilities name
// NewVulnerability.ExternalID values of the same upload.
type NewDependency struct {
	Name, Version, PackageManager, FilePath string
	// Package is the package as advisories name it, PackageRef(ecosystem,
	// name) of an AdvisoryPackage, when the matcher would not derive it
	// from PackageManager and Name (AdvisoryMatcher.PackageOf): "" (the
	// usual case, which costs an upload no memory) means derive it,
	// PackageRef("", "") means none.
	Package         string
	Licenses        []License
	Vulnerabilities []string
}

// PackageRef is NewDependency.Package for a package of an ecosystem.
func PackageRef(ecosystem, name string) string { return ecosystem + "\x00" + name }

// packageOfNew is the advisory package of an upload's entry.
func (s *Store) packageOfNew(nd *NewDependency) (eco, name string) {
	if nd.Package != "" {
		eco, name, _ = strings.Cut(nd.Package, "\x00")
		return eco, name
	}
	if s.matcher == nil {
		return "", ""
	}
	return s.matcher.PackageOf(nd.PackageManager, nd.Name)
}

// NewVulnerability is one vulnerability of an upload.
type NewVulnerability struct {
	ExternalID, Name, Severity, Description string
}

// DependencyList summarises a project's current list.
type DependencyList struct {
	ProjectID       int64          `json:"project_id"`
	Dependencies    int            `json:"dependencies"`
	Vulnerabilities int            `json:"vulnerabilities"`
	Licenses        int            `json:"licenses"`
	PackageManagers map[string]int `json:"package_managers"`
	UpdatedAt       time.Time      `json:"updated_at"`
}

// Limits of a dependency list entry.
const (
	MaxDependencyName    = 1024
	MaxDependencyVersion = 255
	MaxPackageManager    = 64
	MaxDependencyPath    = 1024
	MaxLicenseName       = 1024
	MaxURL               = 2048
	MaxVulnerabilityID   = 255
	MaxVulnerabilityName = 1024
	MaxVulnerabilityDesc = 64 << 10
)

func tooLong(v *ValidationError, field, s string, max int) {
	if utf8.RuneCountInString(s) > max {
		v.Add(field, "is too long (maximum is "+strconv.Itoa(max)+" characters)")
	}
}

func validateUpload(deps []NewDependency, vulns []NewVulnerability) error {
	v := &ValidationError{}
	known := make(map[string]bool, len(vulns))
	for i, x := range vulns {
		if len(v.Fields) >= MaxImportProblems {
			return v
		}
		at := "vulnerabilities[" + strconv.Itoa(i) + "]."
		switch {
		case x.ExternalID == "":
			v.Add(at+"id", "is missing")
		case known[x.ExternalID]:
			v.Add(at+"id", "is listed twice")
		}
		known[x.ExternalID] = true
		tooLong(v, at+"id", x.ExternalID, MaxVulnerabilityID)
		tooLong(v, at+"name", x.Name, MaxVulnerabilityName)
		if len(x.Description) > MaxVulnerabilityDesc {
			v.Add(at+"description", "is too long (maximum is "+strconv.Itoa(MaxVulnerabilityDesc)+" bytes)")
		}
		if !slices.Contains(Severities, x.Severity) {
			v.Add(at+"severity", "does not have a valid value")
		}
	}
	for i, d := range deps {
		if len(v.Fields) >= MaxImportProblems {
			return v
		}
		at := "dependencies[" + strconv.Itoa(i) + "]."
		if d.Name == "" {
			v.Add(at+"name", "is missing")
		}
		tooLong(v, at+"name", d.Name, MaxDependencyName)
		tooLong(v, at+"version", d.Version, MaxDependencyVersion)
		tooLong(v, at+"package_manager", d.PackageManager, MaxPackageManager)
		if strings.IndexByte(d.PackageManager, 0) >= 0 {
			v.Add(at+"package_manager", "is invalid")
		}
		tooLong(v, at+"dependency_file_path", d.FilePath, MaxDependencyPath)
		for j, l := range d.Licenses {
			lat := at + "licenses[" + strconv.Itoa(j) + "]."
			if l.Name == "" {
				v.Add(lat+"name", "is missing")
			}
			tooLong(v, lat+"name", l.Name, MaxLicenseName)
			tooLong(v, lat+"url", l.URL, MaxURL)
		}
		for _, ref := range d.Vulnerabilities {
			if !known[ref] {
				v.Add(at+"vulnerabilities", "names "+strconv.Quote(ref)+", which is not among the vulnerabilities")
			}
		}
	}
	return v.Err()
}

// ReplaceDependencies makes deps the project's dependency list, in one
// transaction: the old list is gone and the new one complete, or nothing
// changed. Vulnerabilities keep their ids across uploads (by ExternalID).
// Each entry with an advisory package is matched against the advisory
// database (advisories_match.go): the advisories that affect its version
// are vulnerabilities of the entry too, folded with those the SBOM names
// when ids or aliases say they are one.
//
// The new list overwrites the old one's keys in place and deletes only what
// lies past its end, so bbolt holds one version of each key; entries are
// binary chunks (see depLayoutPackages), whose bytes come from a few slabs.
func (s *Store) ReplaceDependencies(project int64, deps []NewDependency, vulns []NewVulnerability) (DependencyList, error) {
	if err := validateUpload(deps, vulns); err != nil {
		return DependencyList{}, err
	}
	now := s.clock()
	list := DependencyList{ProjectID: project, PackageManagers: map[string]int{}, UpdatedAt: now}
	err := s.update(false, false, func(tx kv.Tx) error {
		list.PackageManagers = map[string]int{} // counted below; kv may run the function again
		if tx.Bucket(bktProjects).Get(itob(project)) == nil {
			return notFound("Project")
		}
		depsB, byPM, lists, byPkg := tx.Bucket(bktDependencies), tx.Bucket(bktDepsByPM), tx.Bucket(bktDepLists), tx.Bucket(bktDepsByPkg)
		var old storedDepList
		if getJSON(lists, itob(project), &old); old.Layout != depLayoutChunks && old.Layout != depLayoutPackages {
			// Keys of the JSON layout mean something else in the chunked one.
			if err := deletePrefix(depsB, itob(project)); err != nil {
				return err
			}
			if err := deletePrefix(byPM, itob(project)); err != nil {
				return err
			}
		}
		oldPkgKeys := oldPackageKeys(byPkg, project)

		vr := newVulnResolver(tx, project, now)
		stored := make(map[string]DependencyVulnerability, len(vulns))
		for _, nv := range vulns {
			dv, err := vr.resolve([]string{nv.ExternalID}, Vulnerability{ExternalID: nv.ExternalID, Name: nv.Name,
				Severity: nv.Severity, Description: nv.Description}, false)
			if err != nil {
				return err
			}
			dv.Origin = originSBOM
			stored[nv.ExternalID] = dv
		}
		var cache *advisoryCache
		if s.matcher != nil {
			cache = &advisoryCache{tx: tx, filter: s.filterIn(tx, &s.advFilter)}
		}

		// Positions run 1..n, so a page of the unfiltered list is one seek.
		// (Both buckets are appendMostly: chunks and runs are written in
		// position order.)
		var mem arena
		enc := newDepEncoder()
		chunks := int64(0)
		flush := func() error {
			if enc.n == 0 {
				return nil
			}
			err := depsB.Put(pair(project, chunks), mem.copy(enc.buf))
			chunks++
			enc.reset()
			return err
		}
		runs := map[string]*pmRun{}
		licenses, refs := map[[2]string]bool{}, map[int64]int{}
		var pkgs pkgIndexWriter
		var dvs []DependencyVulnerability
		for i, nd := range deps {
			pos := int64(i + 1)
			d := Dependency{Name: nd.Name, Version: nd.Version, PackageManager: nd.PackageManager,
				FilePath: nd.FilePath, Licenses: nd.Licenses, Vulnerabilities: dvs[:0]}
			if eco, name := s.packageOfNew(&deps[i]); eco != "" {
				d.Ecosystem, d.Package = eco, name
			}
			for _, ref := range nd.Vulnerabilities {
				dv := stored[ref]
				if !slices.ContainsFunc(d.Vulnerabilities, func(x DependencyVulnerability) bool { return x.ID == dv.ID }) {
					d.Vulnerabilities = append(d.Vulnerabilities, dv)
				}
			}
			dvs = d.Vulnerabilities
			if cache != nil {
				if advs := cache.of(d.Ecosystem, packageName(&d)); len(advs) > 0 {
					if err := matchEntry(s.matcher, vr, &d, advs); err != nil {
						return err
					}
				}
			}
			for _, v := range d.Vulnerabilities {
				refs[v.ID]++
			}
			for _, l := range d.Licenses {
				licenses[[2]string{l.SPDX, l.Name}] = true
			}
			enc.add(&d)
			if enc.n == depsPerChunk {
				if err := flush(); err != nil {
					return err
				}
			}
			pkgs.add(&d, pos, len(deps))
			r := runs[d.PackageManager]
			if r == nil {
				r = &pmRun{}
				runs[d.PackageManager] = r
			}
			r.buf = binary.AppendUvarint(r.buf, uint64(pos-r.last))
			r.last, r.n = pos, r.n+1
			if r.n == posPerIndexChunk {
				if err := byPM.Put(depPMKey(project, d.PackageManager, r.seq), mem.copy(r.buf)); err != nil {
					return err
				}
				r.seq, r.last, r.n, r.buf = r.seq+1, 0, 0, r.buf[:0]
			}
			list.PackageManagers[d.PackageManager]++
		}
		if err := flush(); err != nil {
			return err
		}
		for pm, r := range runs {
			if r.n > 0 {
				if err := byPM.Put(depPMKey(project, pm, r.seq), mem.copy(r.buf)); err != nil {
					return err
				}
				r.seq++
			}
		}
		// What the old list had past the new one's end.
		if err := deleteWhere(depsB, pair(project, chunks), itob(project), nil); err != nil {
			return err
		}
		if err := deleteWhere(byPM, itob(project), itob(project), func(k []byte) bool {
			r := runs[string(k[8:len(k)-9])]
			return r == nil || btoi(k[len(k)-8:]) >= r.seq
		}); err != nil {
			return err
		}
		newPkgKeys, err := pkgs.write(byPkg, project, &mem, func(pos int64) []byte {
			return pkgKey(s.packageOfNew(&deps[pos-1]))
		})
		if err != nil {
			return err
		}
		for k := range oldPkgKeys {
			if !newPkgKeys[k] {
				if err := byPkg.Delete([]byte(k)); err != nil {
					return err
				}
			}
		}
		list.Dependencies, list.Licenses, list.Vulnerabilities = len(deps), len(licenses), len(refs)
		return putJSON(lists, itob(project), storedDepList{DependencyList: list, Layout: depLayoutPackages, VulnRefs: refs})
	})
	if err != nil {
		return DependencyList{}, err
	}
	return list, nil
}

// packageName is the advisory package name of a stored entry.
func packageName(d *Dependency) string {
	if d.Package != "" {
		return d.Package
	}
	return d.Name
}

// oldPackageKeys lists the package index keys of a project's stored list,
// from its manifest (dependencies_index.go).
func oldPackageKeys(byPkg kv.Bucket, project int64) map[string]bool {
	keys := map[string]bool{}
	for _, k := range manifestKeys(byPkg.Get(pkgManifestKey(project))) {
		keys[string(k)] = true
	}
	return keys
}

// dependencyListOf returns the summary of a project's list; a project that
// never had an SBOM has an empty one.
func (s *Store) dependencyListOf(project int64) (DependencyList, error) {
	list := storedDepList{DependencyList: DependencyList{ProjectID: project, PackageManagers: map[string]int{}}}
	err := s.db.View(func(tx kv.Tx) error {
		getJSON(tx.Bucket(bktDepLists), itob(project), &list)
		return nil
	})
	return list.DependencyList, err
}

// vulnerability returns a vulnerability by id.
func (s *Store) vulnerability(id int64) (Vulnerability, error) {
	var v Vulnerability
	err := s.db.View(func(tx kv.Tx) error {
		if !getJSON(tx.Bucket(bktVulns), itob(id), &v) {
			return notFound("Vulnerability")
		}
		return nil
	})
	return v, err
}

// Dependencies returns one page of a project's list in SBOM order, keeping
// only the given package managers when managers is not empty, and how many
// match in all. The unfiltered page is one seek; a filtered page walks the
// package managers' indexes up to offset + limit entries.
func (s *Store) Dependencies(project int64, managers []string, offset, limit int) ([]Dependency, int, error) {
	var out []Dependency
	total := 0
	err := s.db.View(func(tx kv.Tx) error {
		var list storedDepList
		if !getJSON(tx.Bucket(bktDepLists), itob(project), &list) {
			return nil
		}
		depsB := tx.Bucket(bktDependencies)
		chunked := list.Layout == depLayoutChunks || list.Layout == depLayoutPackages
		cr := &depChunkReader{b: depsB, project: project, chunk: -1}
		read := func(pos int64) error {
			var d Dependency
			if chunked {
				var found bool
				if d, found = cr.at(pos); !found {
					return notFound("Dependency")
				}
			} else if !getJSON(depsB, pair(project, pos), &d) {
				return notFound("Dependency")
			}
			out = append(out, d)
			return nil
		}
		managers = slices.Compact(slices.Sorted(slices.Values(managers)))
		if len(managers) == 0 {
			total = list.Dependencies
			for pos := int64(offset) + 1; pos <= int64(total) && len(out) < limit; pos++ {
				if err := read(pos); err != nil {
					return err
				}
			}
			return nil
		}
		var cs []*pmPositions
		for _, m := range managers {
			total += list.PackageManagers[m]
			p := &pmPositions{c: tx.Bucket(bktDepsByPM).Cursor(), prefix: depPMPrefix(project, m), chunked: chunked}
			if p.load(p.c.Seek(p.prefix)); p.pos != 0 {
				cs = append(cs, p)
			}
		}
		for seen := 0; len(cs) > 0 && len(out) < limit; seen++ {
			lo := 0
			for i := range cs {
				if cs[i].pos < cs[lo].pos {
					lo = i
				}
			}
			if seen >= offset {
				if err := read(cs[lo].pos); err != nil {
					return err
				}
			}
			if cs[lo].next(); cs[lo].pos == 0 {
				cs = slices.Delete(cs, lo, lo+1)
			}
		}
		return nil
	})
	return out, total, err
}
