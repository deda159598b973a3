package sbom

import (
	"slices"
	"strconv"
	"strings"

	"registryd/store"
)

// SPDX 2.2 and 2.3 JSON documents (syft, Trivy, GitHub's dependency graph
// export) are read into the same records as CycloneDX components, in the
// same pass: a package is decoded whole (it is small, like a CycloneDX
// license list), a file keeps its name, a relationship keeps the two ids it
// links when it can locate a package's file. What a package's entry is
// made of is resolved at the end, since relationships may come before or
// after the packages they name.

// supportedSPDXVersions are the SPDX JSON versions this reader knows; 2.2
// and 2.3 differ only in fields it does not read.
var supportedSPDXVersions = []string{"SPDX-2.2", "SPDX-2.3"}

// acceptedFormats names what an upload may be, for error messages.
const acceptedFormats = "CycloneDX 1.4, 1.5, 1.6 or 1.7 JSON, or SPDX 2.2 or 2.3 JSON"

// listedPurposes are the SPDX primaryPackagePurpose values of dependencies,
// as listedComponentTypes are CycloneDX's; a package without one is
// listed too.
var listedPurposes = []string{"", "LIBRARY", "FRAMEWORK", "APPLICATION", "CONTAINER"}

type spdxPackage struct {
	SPDXID           string `json:"SPDXID"`
	Name             string `json:"name"`
	VersionInfo      string `json:"versionInfo"`
	LicenseConcluded string `json:"licenseConcluded"`
	LicenseDeclared  string `json:"licenseDeclared"`
	SourceInfo       string `json:"sourceInfo"`
	Purpose          string `json:"primaryPackagePurpose"`
	ExternalRefs     []struct {
		Type    string `json:"referenceType"`
		Locator string `json:"referenceLocator"`
	} `json:"externalRefs"`
}

type spdxFile struct {
	SPDXID   string `json:"SPDXID"`
	FileName string `json:"fileName"`
}

type spdxRelationship struct {
	Element string `json:"spdxElementId"`
	Type    string `json:"relationshipType"`
	Related string `json:"relatedSpdxElement"`
	Comment string `json:"comment"`
}

// spdxState is what the reader keeps of an SPDX document besides its
// packages.
type spdxState struct {
	version   string
	seen      bool              // spdxVersion was read
	content   bool              // packages, files or relationships were read
	fileNames map[string]string // file id (or dependency-file package id) -> cleaned path
	described map[string]bool   // ids the document describes: the project itself
	evidentBy map[string]string // package id -> file id (syft's OTHER "evident-by")
	contained map[string]string // package id -> id of what CONTAINS it (Trivy's lockfile packages)
}

func (st *spdxState) init() {
	if st.fileNames == nil {
		st.fileNames, st.described = map[string]string{}, map[string]bool{}
		st.evidentBy, st.contained = map[string]string{}, map[string]string{}
	}
}

func unsupportedSPDX(v string) error {
	return formatError("SPDX version " + strconv.Quote(v) + " is not supported; use " +
		strings.Join(supportedSPDXVersions, ", ") + " (JSON), or CycloneDX " + strings.Join(supportedSpecVersions, ", "))
}

// spdxPackageAt reads packages[i].
func (sr *sbomReader) spdxPackageAt(i int) error {
	sr.spdx.init()
	sr.spdx.content = true
	at := func() string { return "packages[" + strconv.Itoa(i) + "]" }
	var p spdxPackage
	if err := sr.decodeAt(&p, at, ""); err != nil {
		return err
	}
	if p.Name == "" {
		sr.problems.Add(at()+".name", "is missing")
		return nil
	}
	purl := ""
	for _, r := range p.ExternalRefs {
		if r.Type == "purl" && r.Locator != "" {
			purl = r.Locator
			break
		}
	}
	id := sr.intern(p.SPDXID)
	if purl == "" && packageManagerOfFile(strings.ToLower(pathBase(p.Name))) != "" {
		// Trivy lists each lockfile as a package CONTAINING its
		// dependencies: a file, not a dependency.
		if id != "" {
			sr.spdx.fileNames[id] = sr.intern(cleanPath(p.Name))
		}
		sr.skipped++
		return nil
	}
	if !slices.Contains(listedPurposes, strings.ToUpper(p.Purpose)) {
		sr.skipped++
		return nil
	}
	c := compRecord{listed: true, spdx: true, name: p.Name, version: p.VersionInfo, bomRef: id}
	ptype, ns, _ := purlParts(purl)
	if ns != "" && !strings.Contains(p.Name, "/") && (ptype == "maven" || ptype == "npm" || ptype == "composer") {
		// As CycloneDX's group/name: syft names a Maven package by its
		// artifact id alone.
		c.name = ns + "/" + p.Name
	}
	sr.purlPackage(len(sr.comps), &c, purl)
	lic := p.LicenseConcluded
	if noAssertion(lic) {
		lic = p.LicenseDeclared
	}
	if !noAssertion(lic) {
		var ls []store.License
		for _, id := range expressionIDs(lic) {
			if !noAssertion(id) {
				ls = appendLicense(ls, spdxLicense(id, "", ""))
			}
		}
		c.licenses = sr.internLicenses(ls)
	}
	c.occurrence = sr.intern(sourceInfoPath(p.SourceInfo))
	sr.comps = append(sr.comps, c)
	return nil
}

func noAssertion(s string) bool {
	s = strings.TrimSpace(s)
	return s == "" || s == "NOASSERTION" || s == "NONE"
}

func appendLicense(ls []store.License, l store.License) []store.License {
	if slices.Contains(ls, l) {
		return ls
	}
	return append(ls, l)
}

func pathBase(p string) string {
	p = strings.TrimRight(strings.ReplaceAll(p, `\`, "/"), "/")
	return p[strings.LastIndexByte(p, '/')+1:]
}

// sourceInfoPath is the first path of syft's sourceInfo ("acquired package
// info from the following paths: /app/package-lock.json, ...").
func sourceInfoPath(info string) string {
	i := strings.LastIndex(info, ": ")
	if i < 0 {
		return ""
	}
	first, _, _ := strings.Cut(info[i+2:], ", ")
	first = strings.TrimSpace(first)
	if !strings.HasPrefix(first, "/") && !strings.HasPrefix(first, "./") {
		return ""
	}
	return cleanPath(first)
}

// spdxFileAt reads files[i]: only its id and name.
func (sr *sbomReader) spdxFileAt(i int) error {
	sr.spdx.init()
	sr.spdx.content = true
	var f spdxFile
	if err := sr.decodeAt(&f, func() string { return "files[" + strconv.Itoa(i) + "]" }, ""); err != nil {
		return err
	}
	if f.SPDXID != "" && f.FileName != "" {
		sr.spdx.fileNames[sr.intern(f.SPDXID)] = sr.intern(cleanPath(f.FileName))
	}
	return nil
}

// spdxRelationshipAt reads relationships[i], keeping the links that say
// what the document describes and where a package comes from.
func (sr *sbomReader) spdxRelationshipAt(i int) error {
	sr.spdx.init()
	sr.spdx.content = true
	var r spdxRelationship
	if err := sr.decodeAt(&r, func() string { return "relationships[" + strconv.Itoa(i) + "]" }, ""); err != nil {
		return err
	}
	st := &sr.spdx
	keep := func(m map[string]string, k, v string) {
		if _, ok := m[k]; !ok && k != "" && v != "" {
			m[sr.intern(k)] = sr.intern(v)
		}
	}
	switch strings.ToUpper(r.Type) {
	case "DESCRIBES":
		st.described[sr.intern(r.Related)] = true
	case "DESCRIBED_BY":
		st.described[sr.intern(r.Element)] = true
	case "CONTAINS":
		keep(st.contained, r.Related, r.Element)
	case "CONTAINED_BY":
		keep(st.contained, r.Element, r.Related)
	case "OTHER":
		if strings.HasPrefix(r.Comment, "evident-by") {
			keep(st.evidentBy, r.Element, r.Related)
		}
	}
	return nil
}

// documentDescribes reads SPDX 2.2's list of described ids.
func (sr *sbomReader) documentDescribes() error {
	sr.spdx.init()
	var ids []string
	if err := sr.decodeAt(&ids, func() string { return "documentDescribes" }, ""); err != nil {
		return err
	}
	for _, id := range ids {
		sr.spdx.described[sr.intern(id)] = true
	}
	return nil
}

// finishSPDX drops the packages the document describes (the project, as
// CycloneDX's metadata.component) and locates each package's file: the
// file it is evident by, else the file or lockfile package that contains
// it, else its sourceInfo path.
func (sr *sbomReader) finishSPDX() {
	st := &sr.spdx
	st.init()
	for i := range sr.comps {
		c := &sr.comps[i]
		if !c.spdx {
			continue
		}
		if st.described[c.bomRef] {
			c.listed = false
			continue
		}
		file := st.fileNames[st.evidentBy[c.bomRef]]
		if file == "" {
			file = st.fileNames[st.contained[c.bomRef]]
		}
		if file != "" {
			c.syftLoc = file
		}
	}
	st.fileNames, st.described, st.evidentBy, st.contained = nil, nil, nil, nil
}
