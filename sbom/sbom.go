// Package sbom reads CycloneDX JSON SBOMs into dependency list entries.
package sbom

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"

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

// CycloneDX properties registryd reads. The gitlab: names are GitLab's own
// (lib/gitlab/ci/parsers/sbom/cyclonedx_properties.rb); the others are what
// common scanners write.
const (
	propPackageManager = "gitlab:dependency_scanning:package_manager:name"
	propInputFile      = "gitlab:dependency_scanning:input_file:path"
	propSyftLocation   = "syft:location:0:path" // syft
	propCdxgenSrcFile  = "SrcFile"              // cdxgen
)

// maxComponentDepth bounds the nesting of components, so a hostile body
// cannot grow the reader's stack.
const maxComponentDepth = 256

// supportedSpecVersions are the CycloneDX versions whose JSON this reader
// knows; older ones name fields differently.
var supportedSpecVersions = []string{"1.4", "1.5", "1.6"}

// listedComponentTypes are the component types that are dependencies. Files,
// operating systems, devices, firmware, data and models are not.
var listedComponentTypes = []string{"", "library", "framework", "application", "container"}

type cdxProperty struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

type cdxLicense struct {
	License *struct {
		ID   string `json:"id"`
		Name string `json:"name"`
		URL  string `json:"url"`
	} `json:"license"`
	Expression string `json:"expression"`
}

type cdxEvidence struct {
	Occurrences []struct {
		Location string `json:"location"`
	} `json:"occurrences"`
}

type cdxVulnerability struct {
	BOMRef      string `json:"bom-ref"`
	ID          string `json:"id"`
	Description string `json:"description"`
	Detail      string `json:"detail"`
	Ratings     []struct {
		Severity string `json:"severity"`
	} `json:"ratings"`
	Affects []struct {
		Ref string `json:"ref"`
	} `json:"affects"`
}

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
	SpecVersion     string
	Dependencies    []store.NewDependency
	Vulnerabilities []store.NewVulnerability
	// Skipped counts components that are not dependencies (files, operating
	// systems, ...) and duplicates of an earlier entry.
	Skipped int
}

// compRecord is what the reader keeps of a component: the fields of its
// entry, and the locations its file path is chosen from once the whole SBOM
// (metadata, every SrcFile) has been read. The strings other than name,
// version and bom-ref are interned.
type compRecord struct {
	listed                bool
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
}

// Read reads a CycloneDX JSON SBOM. A body that is not JSON, not
// CycloneDX or of an unsupported version is an *Error naming the problem; a
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

func (sr *sbomReader) read() error {
	tok, err := sr.dec.Token()
	if err != nil {
		return sr.jsonError(err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return formatError("the body is not a CycloneDX JSON SBOM: it is not a JSON object")
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
				return formatError(`the body is not a CycloneDX JSON SBOM: bomFormat is ` + strconv.Quote(sr.format) + `, not "CycloneDX"`)
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
	case !sr.sawFormat:
		return formatError(`the body is not a CycloneDX JSON SBOM: bomFormat is missing`)
	case !sr.sawVersion:
		return formatError("the SBOM has no specVersion")
	}
	return nil
}

func unsupportedVersion(v string) error {
	return formatError("CycloneDX specVersion " + strconv.Quote(v) + " is not supported; use " +
		strings.Join(supportedSpecVersions, ", "))
}

func (sr *sbomReader) decodeString(dst *string, at string) error {
	if err := sr.dec.Decode(dst); err != nil {
		return sr.decodeError(err, at)
	}
	return nil
}

// decodeAt decodes the next value into dst; a problem names at()+key.
func (sr *sbomReader) decodeAt(dst any, at func() string, key string) error {
	if err := sr.dec.Decode(dst); err != nil {
		return sr.decodeError(err, at()+key)
	}
	return nil
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

// array calls each for every element of the top-level array that comes
// next; anything but an array (or null) is a 400.
func (sr *sbomReader) array(key string, each func(i int) error) error {
	tok, err := sr.dec.Token()
	if err != nil {
		return sr.jsonError(err)
	}
	if tok == nil { // null: no entries
		return nil
	}
	if d, ok := tok.(json.Delim); !ok || d != '[' {
		return formatError(key + " must be an array")
	}
	return sr.elements(each)
}

// elements calls each for every element of the array whose '[' was read,
// and reads its ']'.
func (sr *sbomReader) elements(each func(i int) error) error {
	for i := 0; sr.dec.More(); i++ {
		if err := each(i); err != nil {
			return err
		}
		if len(sr.problems.Fields) >= store.MaxImportProblems {
			return sr.problems
		}
	}
	if _, err := sr.dec.Token(); err != nil {
		return sr.jsonError(err)
	}
	return nil
}

// openAt reads the start of the value at at()+key, which must be a want
// ('{' or '['). null is ok == false with no error; another kind of value is
// a validation error naming it.
func (sr *sbomReader) openAt(at func() string, key string, want json.Delim) (ok bool, err error) {
	tok, err := sr.dec.Token()
	if err != nil {
		return false, sr.jsonError(err)
	}
	if tok == nil {
		return false, nil
	}
	if d, isDelim := tok.(json.Delim); isDelim && d == want {
		return true, nil
	}
	kind := "object"
	if want == '[' {
		kind = "array"
	}
	sr.problems.Add(at()+key, "must be a JSON "+kind+", not "+tokenKind(tok))
	return false, sr.problems
}

// tokenKind names the kind of JSON value a token starts, as
// json.UnmarshalTypeError does.
func tokenKind(tok json.Token) string {
	switch t := tok.(type) {
	case json.Delim:
		if t == '[' {
			return "array"
		}
		return "object"
	case string:
		return "string"
	case bool:
		return "bool"
	}
	return "number"
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
	c.listed, c.name, c.ptype = true, name, sr.intern(purlType(purl))
	if group != "" {
		// Maven groupId, npm scope: GitLab lists group/name.
		c.name = group + "/" + name
	}
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

// jsonError turns a failure of the JSON reader into an *Error; a failure
// of the body's reader stays reachable through it (a body over the
// listener's limit is a 413, not a bad SBOM).
func (sr *sbomReader) jsonError(err error) error {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return formatError(fmt.Sprintf("the body is not valid JSON (at byte %d: %s)", se.Offset, se.Error()))
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return formatError("the body ends before the SBOM does")
	}
	return &Error{Reason: "the body could not be read", Err: err}
}

// decodeError names where a value has the wrong JSON type.
func (sr *sbomReader) decodeError(err error, at string) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		field := at
		if te.Field != "" {
			field += "." + te.Field
		}
		sr.problems.Add(field, "must be a JSON "+jsonKind(te.Type.Kind().String())+", not "+te.Value)
		return sr.problems
	}
	return sr.jsonError(err)
}

func jsonKind(goKind string) string {
	switch goKind {
	case "string":
		return "string"
	case "slice":
		return "array"
	case "struct", "map", "ptr":
		return "object"
	case "bool":
		return "boolean"
	}
	return "number"
}

// skipValue reads past the next JSON value without keeping it.
func skipValue(dec *json.Decoder) error {
	depth := 0
	for {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		if d, ok := tok.(json.Delim); ok {
			switch d {
			case '{', '[':
				depth++
			case '}', ']':
				depth--
			}
		}
		if depth == 0 {
			return nil
		}
	}
}

// depKey is what makes two components one dependency list entry.
type depKey struct{ name, version, pm, file string }

// result turns the components into dependency list entries.
func (sr *sbomReader) result(opts Options) (*Result, error) {
	res := &Result{SpecVersion: sr.version, Skipped: sr.skipped}
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

// cleanPath makes a tool's file location a repository-relative path.
func cleanPath(p string) string {
	p = strings.TrimSpace(p)
	p = strings.TrimPrefix(p, "file://")
	for strings.HasPrefix(p, "./") {
		p = p[2:]
	}
	return strings.TrimLeft(p, "/")
}

// srcRoot is the directory cdxgen scanned, as far as its SrcFile properties
// tell: they are absolute paths on the scanning machine (or relative to its
// temp dir), and the longest directory holding all of them is taken as the
// repository root. One lockfile gives its own directory. It is built one
// SrcFile at a time, as components are read.
type srcRoot struct {
	dirs []string
	seen bool
	last string
}

func (r *srcRoot) add(p string) {
	if p == "" || (r.seen && p == r.last) {
		return
	}
	r.last = p
	dir := strings.Split(path.Dir(path.Clean(strings.ReplaceAll(p, `\`, "/"))), "/")
	if !r.seen {
		r.dirs, r.seen = dir, true
		return
	}
	n := 0
	for n < len(r.dirs) && n < len(dir) && r.dirs[n] == dir[n] {
		n++
	}
	r.dirs = r.dirs[:n]
}

func (r *srcRoot) String() string { return strings.Join(r.dirs, "/") }

// relativeTo makes p relative to root (see srcRoot).
func relativeTo(root, p string) string {
	if p == "" {
		return ""
	}
	p = path.Clean(strings.ReplaceAll(p, `\`, "/"))
	if root != "" && root != "." {
		p = strings.TrimPrefix(p, strings.TrimSuffix(root, "/")+"/")
	}
	return cleanPath(p)
}

func occurrence(ev *cdxEvidence) string {
	if ev == nil {
		return ""
	}
	for _, o := range ev.Occurrences {
		if p := cleanPath(o.Location); p != "" {
			return p
		}
	}
	return ""
}

// toolDefaultFile is the input file of generators that read exactly one
// kind of file and do not say which: cyclonedx-npm reads package-lock.json,
// cyclonedx-gomod go.mod. metadata.tools is an array of tools before
// CycloneDX 1.5 and an object with components and services since.
func toolDefaultFile(raw json.RawMessage) string {
	type tool struct {
		Name string `json:"name"`
	}
	var names []string
	var list []tool
	var obj struct {
		Components []tool `json:"components"`
		Services   []tool `json:"services"`
	}
	if json.Unmarshal(raw, &list) == nil {
		for _, t := range list {
			names = append(names, t.Name)
		}
	} else if json.Unmarshal(raw, &obj) == nil {
		for _, t := range append(obj.Components, obj.Services...) {
			names = append(names, t.Name)
		}
	}
	for _, n := range names {
		switch n {
		case "cyclonedx-npm":
			return "package-lock.json"
		case "cyclonedx-gomod":
			return "go.mod"
		}
	}
	return ""
}

// purlType is the type of a package URL (pkg:TYPE/...), lower-cased.
func purlType(purl string) string {
	rest, ok := strings.CutPrefix(purl, "pkg:")
	if !ok {
		return ""
	}
	rest = strings.TrimLeft(rest, "/")
	t, _, _ := strings.Cut(rest, "/")
	return strings.ToLower(t)
}

// derivePackageManager is registryd's fallback when no property names the
// package manager: the purl type, refined by the dependency file's name
// (maven + build.gradle is gradle, npm + yarn.lock is yarn, ...). Without a
// purl the file name alone decides. Unknown combinations have none.
func derivePackageManager(ptype, file string) string {
	base := strings.ToLower(path.Base(file))
	if file == "" {
		base = ""
	}
	switch ptype {
	case "maven":
		switch {
		case base == "build.gradle", base == "build.gradle.kts", base == "gradle.lockfile", base == "settings.gradle",
			base == "settings.gradle.kts":
			return "gradle"
		case base == "build.sbt":
			return "sbt"
		}
		return "maven"
	case "npm":
		switch base {
		case "yarn.lock":
			return "yarn"
		case "pnpm-lock.yaml":
			return "pnpm"
		}
		return "npm"
	case "pypi":
		switch {
		case base == "pipfile", base == "pipfile.lock":
			return "pipenv"
		case base == "poetry.lock":
			return "poetry"
		case base == "setup.py", base == "setup.cfg":
			return "setuptools"
		}
		return "pip"
	case "gem":
		return "bundler"
	case "golang":
		return "go"
	case "nuget", "composer", "conan", "cargo", "pub", "conda", "apk":
		return ptype
	case "":
		return packageManagerOfFile(base)
	}
	return ""
}

var requirementsRE = regexp.MustCompile(`^requirements.*\.(txt|pip)$`)

func packageManagerOfFile(base string) string {
	switch base {
	case "go.mod", "go.sum":
		return "go"
	case "package-lock.json", "npm-shrinkwrap.json", "package.json":
		return "npm"
	case "yarn.lock":
		return "yarn"
	case "pnpm-lock.yaml":
		return "pnpm"
	case "pom.xml":
		return "maven"
	case "build.gradle", "build.gradle.kts", "gradle.lockfile":
		return "gradle"
	case "build.sbt":
		return "sbt"
	case "gemfile", "gemfile.lock", "gems.locked":
		return "bundler"
	case "composer.json", "composer.lock":
		return "composer"
	case "pipfile", "pipfile.lock":
		return "pipenv"
	case "poetry.lock":
		return "poetry"
	case "setup.py", "setup.cfg":
		return "setuptools"
	case "packages.lock.json", "packages.config":
		return "nuget"
	case "conan.lock", "conanfile.txt", "conanfile.py":
		return "conan"
	case "cargo.lock":
		return "cargo"
	case "pubspec.lock":
		return "pub"
	case "environment.yml", "environment.yaml":
		return "conda"
	}
	if requirementsRE.MatchString(base) {
		return "pip"
	}
	return ""
}

// licenses reads a component's licenses: named ones as given, SPDX ids with
// their spdx.org page, and the ids inside an expression one by one.
func licenses(in []cdxLicense) []store.License {
	var out []store.License
	add := func(l store.License) {
		if l.Name != "" && !slices.Contains(out, l) {
			out = append(out, l)
		}
	}
	for _, l := range in {
		switch {
		case l.License != nil && l.License.ID != "":
			add(spdxLicense(l.License.ID, l.License.Name, l.License.URL))
		case l.License != nil:
			add(store.License{Name: l.License.Name, URL: l.License.URL})
		case l.Expression != "":
			for _, id := range expressionIDs(l.Expression) {
				add(spdxLicense(id, "", ""))
			}
		}
	}
	return out
}

var spdxIDRE = regexp.MustCompile(`^[A-Za-z0-9.+-]+$`)

func spdxLicense(id, name, link string) store.License {
	l := store.License{Name: firstOf(name, id), URL: link}
	if strings.HasPrefix(id, "LicenseRef-") || strings.HasPrefix(id, "DocumentRef-") || !spdxIDRE.MatchString(id) {
		return l
	}
	l.SPDX = id
	if l.URL == "" {
		l.URL = "https://spdx.org/licenses/" + strings.TrimSuffix(id, "+") + ".html"
	}
	return l
}

// expressionIDs lists the license ids of an SPDX expression, leaving out the
// operators and the exceptions that follow WITH.
func expressionIDs(expr string) []string {
	fields := strings.Fields(strings.NewReplacer("(", " ", ")", " ").Replace(expr))
	var ids []string
	for i := 0; i < len(fields); i++ {
		switch strings.ToUpper(fields[i]) {
		case "AND", "OR":
		case "WITH":
			i++ // the exception
		default:
			ids = append(ids, fields[i])
		}
	}
	return ids
}

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
