package sbom

import (
	"encoding/json"
	"errors"
	"io"
	"slices"
	"strconv"
	"strings"

	"registryd/osv"
	"registryd/store"
)

// CycloneDX JSON, read as a stream of tokens: the top-level object is walked
// key by key, and so is every component, nested ones included; only small
// leaves (a license list, one property, the evidence, one vulnerability) are
// decoded whole. What the reader keeps of a component is the few strings its
// dependency list entry is made of, with repeated values (paths, package
// managers, license lists) shared, so an upload's memory is a fraction of its
// size however the SBOM is laid out: the decoder buffers one token or one
// leaf, never a component tree or the dependency graph.

// compRecord is what the reader keeps of a component: the fields of its
// entry, and the locations its file path is chosen from once the whole SBOM
// (metadata, every SrcFile) has been read. The strings other than name,
// version and bom-ref are interned.
type compRecord struct {
	listed                bool
	spdx                  bool // an SPDX package (bomRef is its SPDXID)
	name, version, bomRef string
	pmProp, ptype         string
	inputFile, syftLoc    string // cleaned
	srcFile               string // as cdxgen wrote it
	occurrence            string // cleaned
	licenses              []store.License
}

// vulnRecord is a vulnerability of the SBOM, once per key.
type vulnRecord struct {
	key, severity, desc string
}

// affect is one "affects" reference, in SBOM order.
type affect struct {
	vuln int32 // index in sbomReader.vulns
	ref  string
}

type sbomReader struct {
	dec                   *json.Decoder
	format, version       string
	sawFormat, sawVersion bool
	metaPM, metaFile      string
	toolFile              string
	root                  srcRoot
	comps                 []compRecord // components, nested ones after their parent, in SBOM order
	skipped               int
	vulns                 []vulnRecord
	vulnIndex             map[string]int32
	affects               []affect
	strs                  map[string]string
	lics                  map[string][]store.License
	problems              *store.ValidationError
	spdx                  spdxState
	// pkgs holds, by index in comps, the package names advisories know a
	// purl by that are not the listed name's (a Maven purl of a component
	// without a group): few, so no component pays for a field.
	pkgs map[int]string
}

func (sr *sbomReader) read() error {
	tok, err := sr.dec.Token()
	if err != nil {
		return sr.jsonError(err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return formatError("the body is not a JSON SBOM: it is not a JSON object; send " + acceptedFormats)
	}
	for sr.dec.More() {
		tok, err := sr.dec.Token()
		if err != nil {
			return sr.jsonError(err)
		}
		key, _ := tok.(string)
		switch key {
		case "bomFormat":
			if err := sr.decodeString(&sr.format, key); err != nil {
				return err
			}
			sr.sawFormat = true
			if sr.format != "CycloneDX" {
				return formatError(`the body is not a CycloneDX JSON SBOM: bomFormat is ` + strconv.Quote(sr.format) + `, not "CycloneDX"; send ` +
					acceptedFormats)
			}
		case "specVersion":
			if err := sr.decodeString(&sr.version, key); err != nil {
				return err
			}
			sr.sawVersion = true
			if !slices.Contains(supportedSpecVersions, sr.version) {
				return unsupportedVersion(sr.version)
			}
		case "metadata":
			if err := sr.metadata(); err != nil {
				return err
			}
		case "components":
			if err := sr.array(key, func(i int) error {
				return sr.component("components", i, 1)
			}); err != nil {
				return err
			}
		case "vulnerabilities":
			if err := sr.array(key, sr.vulnerability); err != nil {
				return err
			}
		case "spdxVersion":
			if err := sr.decodeString(&sr.spdx.version, key); err != nil {
				return err
			}
			sr.spdx.seen = true
			if !slices.Contains(supportedSPDXVersions, sr.spdx.version) {
				return unsupportedSPDX(sr.spdx.version)
			}
		case "packages":
			if err := sr.array(key, sr.spdxPackageAt); err != nil {
				return err
			}
		case "files":
			if err := sr.array(key, sr.spdxFileAt); err != nil {
				return err
			}
		case "relationships":
			if err := sr.array(key, sr.spdxRelationshipAt); err != nil {
				return err
			}
		case "documentDescribes":
			if err := sr.documentDescribes(); err != nil {
				return err
			}
		case "@context", "@graph":
			return formatError("SPDX 3 (JSON-LD) is not supported; send " + acceptedFormats)
		default:
			if err := skipValue(sr.dec); err != nil {
				return sr.jsonError(err)
			}
		}
		if len(sr.problems.Fields) >= store.MaxImportProblems {
			return sr.problems
		}
	}
	if _, err := sr.dec.Token(); err != nil { // the closing brace
		return sr.jsonError(err)
	}
	if _, err := sr.dec.Token(); !errors.Is(err, io.EOF) {
		if err != nil {
			return sr.jsonError(err)
		}
		return formatError("the body has data after the SBOM")
	}
	switch {
	case sr.spdx.seen && sr.sawFormat:
		return formatError("the body has both bomFormat (CycloneDX) and spdxVersion (SPDX); send one SBOM")
	case sr.spdx.seen:
		sr.finishSPDX()
	case !sr.sawFormat && sr.spdx.content:
		return formatError("the SPDX document has no spdxVersion")
	case !sr.sawFormat:
		return formatError("the body is not an SBOM registryd reads: it has neither bomFormat (CycloneDX) nor spdxVersion (SPDX); send " +
			acceptedFormats)
	case !sr.sawVersion:
		return formatError("the SBOM has no specVersion")
	}
	return nil
}

func unsupportedVersion(v string) error {
	return formatError("CycloneDX specVersion " + strconv.Quote(v) + " is not supported; use " +
		strings.Join(supportedSpecVersions, ", "))
}

// purlPackage sets the purl type of c (comps[slot]) and keeps the package
// its purl names when it is not its listed name's.
func (sr *sbomReader) purlPackage(slot int, c *compRecord, purl string) {
	ptype, ns, name := purlParts(purl)
	c.ptype = sr.intern(ptype)
	if eco, pkg := osv.PackageOfPurl(ptype, ns, name); eco != "" && pkg != c.name && pkg != osv.NormalizeName(eco, c.name) {
		if sr.pkgs == nil {
			sr.pkgs = map[int]string{}
		}
		sr.pkgs[slot] = pkg
	}
}

// intern returns the kept copy of s, so a value repeated on every component
// (a lockfile path, a package manager) is held once.
func (sr *sbomReader) intern(s string) string {
	if s == "" {
		return ""
	}
	if v, ok := sr.strs[s]; ok {
		return v
	}
	s = strings.Clone(s) // s may be a slice of a longer string
	sr.strs[s] = s
	return s
}

// internLicenses shares one copy of each distinct license list. The copy's
// capacity is its length, so appending to it (duplicates merge their
// licenses) makes a new array.
func (sr *sbomReader) internLicenses(ls []store.License) []store.License {
	if len(ls) == 0 {
		return nil
	}
	var k strings.Builder
	for _, l := range ls {
		k.WriteString(l.SPDX)
		k.WriteByte(0)
		k.WriteString(l.Name)
		k.WriteByte(0)
		k.WriteString(l.URL)
		k.WriteByte(1)
	}
	if v, ok := sr.lics[k.String()]; ok {
		return v
	}
	ls = slices.Clip(ls)
	sr.lics[k.String()] = ls
	return ls
}

// properties reads the properties array at at()+key, calling keep for each
// one.
func (sr *sbomReader) properties(at func() string, key string, keep func(p cdxProperty)) error {
	ok, err := sr.openAt(at, key, '[')
	if !ok {
		return err
	}
	return sr.elements(func(int) error {
		var p cdxProperty
		if err := sr.decodeAt(&p, at, key); err != nil {
			return err
		}
		keep(p)
		return nil
	})
}

// metadata reads the package manager and input file GitLab's analyzers put
// in metadata.properties and the generator's name in metadata.tools.
// metadata.component, which may be a tree of its own, is skipped.
func (sr *sbomReader) metadata() error {
	ok, err := sr.openAt(func() string { return "metadata" }, "", '{')
	if !ok {
		return err
	}
	for sr.dec.More() {
		tok, err := sr.dec.Token()
		if err != nil {
			return sr.jsonError(err)
		}
		switch key, _ := tok.(string); key {
		case "tools":
			var raw json.RawMessage
			if err := sr.dec.Decode(&raw); err != nil {
				return sr.jsonError(err)
			}
			sr.toolFile = toolDefaultFile(raw)
		case "properties":
			var gotPM, gotFile bool
			err = sr.properties(func() string { return "metadata" }, ".properties", func(p cdxProperty) {
				switch {
				case p.Value == "":
				case p.Name == propPackageManager && !gotPM:
					sr.metaPM, gotPM = p.Value, true
				case p.Name == propInputFile && !gotFile:
					sr.metaFile, gotFile = cleanPath(p.Value), true
				}
			})
		default:
			err = skipValue(sr.dec)
			if err != nil {
				err = sr.jsonError(err)
			}
		}
		if err != nil {
			return err
		}
	}
	if _, err := sr.dec.Token(); err != nil {
		return sr.jsonError(err)
	}
	return nil
}

// component reads the component at at and its nested components, which it
// lists after itself, depth first: the order in which they appear in the
// SBOM.
// Its JSON path is prefix[i], built only when a problem names it.
func (sr *sbomReader) component(prefix string, i, depth int) error {
	at := func() string { return prefix + "[" + strconv.Itoa(i) + "]" }
	if depth > maxComponentDepth {
		return formatError("components are nested more than " + strconv.Itoa(maxComponentDepth) + " deep")
	}
	ok, err := sr.openAt(at, "", '{')
	if err != nil {
		return err
	}
	slot := len(sr.comps)
	sr.comps = append(sr.comps, compRecord{})
	var c compRecord
	var typ, group, name, purl string
	for ok && sr.dec.More() {
		tok, err := sr.dec.Token()
		if err != nil {
			return sr.jsonError(err)
		}
		key, _ := tok.(string)
		switch key {
		case "type":
			err = sr.decodeAt(&typ, at, ".type")
		case "bom-ref":
			err = sr.decodeAt(&c.bomRef, at, ".bom-ref")
		case "group":
			err = sr.decodeAt(&group, at, ".group")
		case "name":
			err = sr.decodeAt(&name, at, ".name")
		case "version":
			err = sr.decodeAt(&c.version, at, ".version")
		case "purl":
			err = sr.decodeAt(&purl, at, ".purl")
		case "licenses":
			var ls []cdxLicense
			err = sr.decodeAt(&ls, at, ".licenses")
			c.licenses = sr.internLicenses(licenses(ls))
		case "properties":
			// The first property of a name with a value counts.
			var got [4]bool
			err = sr.properties(at, ".properties", func(p cdxProperty) {
				switch {
				case p.Value == "":
				case p.Name == propPackageManager && !got[0]:
					c.pmProp, got[0] = sr.intern(p.Value), true
				case p.Name == propInputFile && !got[1]:
					c.inputFile, got[1] = sr.intern(cleanPath(p.Value)), true
				case p.Name == propSyftLocation && !got[2]:
					c.syftLoc, got[2] = sr.intern(cleanPath(p.Value)), true
				case p.Name == propCdxgenSrcFile && !got[3]:
					c.srcFile, got[3] = sr.intern(p.Value), true
				}
			})
		case "evidence":
			var ev *cdxEvidence
			err = sr.decodeAt(&ev, at, ".evidence")
			c.occurrence = sr.intern(occurrence(ev))
		case "components":
			var isArray bool
			if isArray, err = sr.openAt(at, ".components", '['); isArray {
				nested := at() + ".components"
				err = sr.elements(func(j int) error { return sr.component(nested, j, depth+1) })
			}
		default:
			if err = skipValue(sr.dec); err != nil {
				err = sr.jsonError(err)
			}
		}
		if err != nil {
			return err
		}
	}
	if ok {
		if _, err := sr.dec.Token(); err != nil { // the closing brace
			return sr.jsonError(err)
		}
	}
	if name == "" {
		sr.problems.Add(at()+".name", "is missing")
	}
	sr.root.add(c.srcFile)
	if !slices.Contains(listedComponentTypes, typ) {
		sr.skipped++
		return nil
	}
	c.listed, c.name = true, name
	if group != "" {
		// Maven groupId, npm scope: GitLab lists group/name.
		c.name = group + "/" + name
	}
	sr.purlPackage(slot, &c, purl)
	sr.comps[slot] = c
	return nil
}

func (sr *sbomReader) vulnerability(i int) error {
	var v cdxVulnerability
	if err := sr.dec.Decode(&v); err != nil {
		return sr.decodeError(err, "vulnerabilities["+strconv.Itoa(i)+"]")
	}
	if v.ID == "" && v.BOMRef == "" {
		sr.problems.Add("vulnerabilities["+strconv.Itoa(i)+"].id", "is missing")
		return nil
	}
	key := firstOf(v.ID, v.BOMRef)
	sev := severity(v)
	vi, ok := sr.vulnIndex[key]
	if !ok {
		vi = int32(len(sr.vulns))
		sr.vulnIndex[key] = vi
		desc := firstOf(v.Description, v.Detail)
		if len(desc) > store.MaxVulnerabilityDesc {
			desc = strings.Clone(truncateUTF8(desc, store.MaxVulnerabilityDesc))
		}
		sr.vulns = append(sr.vulns, vulnRecord{key: key, severity: sev, desc: desc})
	} else if moreSevere(sev, sr.vulns[vi].severity) {
		sr.vulns[vi].severity = sev
	}
	for _, a := range v.Affects {
		sr.affects = append(sr.affects, affect{vuln: vi, ref: bomLinkRef(a.Ref)})
	}
	return nil
}
