package sbom

import (
	"slices"

	"registryd/osv"
	"registryd/store"
)

// depKey is what makes two components one dependency list entry.
type depKey struct{ name, version, pm, file string }

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
	seen := map[depKey]int32{}
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
		d.Ecosystem, d.Package = advisoryPackage(c, d.PackageManager)
		key := depKey{d.Name, d.Version, d.PackageManager, d.FilePath}
		idx, dup := seen[key]
		if dup {
			res.Skipped++
			for _, l := range d.Licenses {
				if !slices.Contains(res.Dependencies[idx].Licenses, l) {
					res.Dependencies[idx].Licenses = append(res.Dependencies[idx].Licenses, l)
				}
			}
		} else {
			idx = int32(len(res.Dependencies))
			seen[key] = idx
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
	sr.comps, seen = nil, nil

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

// advisoryPackage is the ecosystem and package name advisories know the
// entry by: from its purl, else from its package manager and name. The
// package is "" when it is the entry's name.
func advisoryPackage(c *compRecord, pm string) (eco, pkg string) {
	if c.eco != "" {
		return c.eco, c.pkg
	}
	if c.ptype != "" {
		return "", "" // a purl of a type without advisories here (deb, rpm, ...)
	}
	eco, pkg = osv.PackageOfManager(pm, c.name)
	if pkg == c.name {
		pkg = ""
	}
	return eco, pkg
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
