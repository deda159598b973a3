package sbom

import (
	"slices"

	"registryd/osv"
	"registryd/store"
)

// depKey is what makes two components one dependency list entry.
type depKey struct{ name, version, pm, file string }

func (k depKey) hash() uint64 {
	h := uint64(14695981039346656037)
	for _, s := range []string{k.name, k.version, k.pm, k.file} {
		for i := 0; i < len(s); i++ {
			h = (h ^ uint64(s[i])) * 1099511628211
		}
		h = (h ^ 0xff) * 1099511628211 // no byte of a string: ends it
	}
	return h
}

// depSet finds the entry a component duplicates. It keys entries by a hash
// of their depKey (12 bytes an entry rather than 68 for the strings), and
// keeps the rare entries whose hash another entry has in a map of its own.
type depSet struct {
	byHash   map[uint64]int32
	collided map[depKey]int32
}

func newDepSet(n int) *depSet { return &depSet{byHash: make(map[uint64]int32, n)} }

func keyOf(d *store.NewDependency) depKey {
	return depKey{d.Name, d.Version, d.PackageManager, d.FilePath}
}

func (s *depSet) get(k depKey, deps []store.NewDependency) (int32, bool) {
	if i, ok := s.byHash[k.hash()]; ok && keyOf(&deps[i]) == k {
		return i, true
	}
	i, ok := s.collided[k]
	return i, ok
}

func (s *depSet) put(k depKey, i int32) {
	h := k.hash()
	if _, taken := s.byHash[h]; !taken {
		s.byHash[h] = i
		return
	}
	if s.collided == nil {
		s.collided = map[depKey]int32{}
	}
	s.collided[k] = i
}

// result turns the components into dependency list entries.
func (sr *sbomReader) result(opts Options) (*Result, error) {
	res := &Result{SpecVersion: firstOf(sr.version, sr.spdx.version), Skipped: sr.skipped}
	root := sr.root.String()
	optFile := cleanPath(opts.FilePath)
	relative := map[string]string{} // SrcFile -> path in the repository

	listed := 0
	for i := range sr.comps {
		if sr.comps[i].listed {
			listed++
		}
	}
	res.Dependencies = make([]store.NewDependency, 0, listed)
	// bom-ref -> index in res.Dependencies; a bom-ref shared by several
	// entries has the others in moreByRef. Only needed for vulnerabilities.
	byRef, moreByRef := map[string]int32{}, map[string][]int32{}
	seen := newDepSet(listed)
	for i := range sr.comps {
		c := &sr.comps[i]
		if !c.listed {
			continue
		}
		d := store.NewDependency{Name: c.name, Version: c.version, Licenses: c.licenses}
		rel := ""
		if c.srcFile != "" {
			var ok bool
			if rel, ok = relative[c.srcFile]; !ok {
				rel = relativeTo(root, c.srcFile)
				relative[c.srcFile] = rel
			}
		}
		d.FilePath = firstOf(c.inputFile, sr.metaFile, optFile, c.syftLoc, rel, c.occurrence, sr.toolFile)
		d.PackageManager = firstOf(c.pmProp, sr.metaPM)
		if d.PackageManager == "" {
			d.PackageManager = derivePackageManager(c.ptype, d.FilePath)
		}
		d.Package = advisoryPackage(c, sr.pkgs[i], d.PackageManager)
		key := depKey{d.Name, d.Version, d.PackageManager, d.FilePath}
		idx, dup := seen.get(key, res.Dependencies)
		if dup {
			res.Skipped++
			for _, l := range d.Licenses {
				if !slices.Contains(res.Dependencies[idx].Licenses, l) {
					res.Dependencies[idx].Licenses = append(res.Dependencies[idx].Licenses, l)
				}
			}
		} else {
			idx = int32(len(res.Dependencies))
			seen.put(key, idx)
			res.Dependencies = append(res.Dependencies, d)
		}
		if c.bomRef != "" && len(sr.affects) > 0 {
			if first, ok := byRef[c.bomRef]; !ok {
				byRef[c.bomRef] = idx
			} else if first != idx && !slices.Contains(moreByRef[c.bomRef], idx) {
				moreByRef[c.bomRef] = append(moreByRef[c.bomRef], idx)
			}
		}
		*c = compRecord{}
	}
	sr.comps, sr.pkgs, seen = nil, nil, nil

	// Each affects reference, in SBOM order, adds the vulnerability to the
	// entries it names.
	used := make([]bool, len(sr.vulns))
	for _, a := range sr.affects {
		first, ok := byRef[a.ref]
		if !ok {
			continue
		}
		key := sr.vulns[a.vuln].key
		for _, di := range append([]int32{first}, moreByRef[a.ref]...) {
			d := &res.Dependencies[di]
			if !slices.Contains(d.Vulnerabilities, key) {
				d.Vulnerabilities = append(d.Vulnerabilities, key)
				used[a.vuln] = true
			}
		}
	}
	// Keep only the vulnerabilities that affect a listed dependency.
	for i, v := range sr.vulns {
		if used[i] {
			res.Vulnerabilities = append(res.Vulnerabilities, store.NewVulnerability{
				ExternalID: v.key, Name: v.key, Severity: v.severity, Description: v.desc})
		}
	}
	return res, nil
}

// advisoryPackage is the entry's store.NewDependency.Package: "" when the
// package advisories know it by follows from its package manager and name
// (osv.PackageOfManager, which the store applies), else the one its purl
// names (purlPkg when it is not the listed name's; none for a purl type
// without advisories: deb, rpm, ...). Most entries need nothing here, so
// the list holds no second copy of names.
func advisoryPackage(c *compRecord, purlPkg, pm string) string {
	if c.ptype == "" {
		return ""
	}
	eco := osv.EcosystemOfPurlType(c.ptype)
	if purlPkg == "" && eco == osv.EcosystemOfManager(pm) {
		return "" // the same ecosystem, the same name
	}
	pkg := purlPkg
	if pkg == "" {
		pkg = osv.NormalizeName(eco, c.name)
	}
	deco, dpkg := osv.PackageOfManager(pm, c.name)
	if eco == deco && (eco == "" || pkg == dpkg) {
		return ""
	}
	if eco == "" {
		return store.PackageRef("", "")
	}
	return store.PackageRef(eco, pkg)
}

func firstOf(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}

func truncateUTF8(s string, n int) string {
	for n > 0 && n < len(s) && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n]
}
