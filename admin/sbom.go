package admin

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"registryd/store"
)

// CycloneDX JSON, read as a stream: the top-level object is walked key by
// key, and components and vulnerabilities are decoded one array element at a
// time, so a 64 MiB SBOM is never held as text. Only what the dependency list
// needs is kept.

// CycloneDX properties registryd reads. The gitlab: names are GitLab's own
// (lib/gitlab/ci/parsers/sbom/cyclonedx_properties.rb); the others are what
// common scanners write.
const (
	propPackageManager = "gitlab:dependency_scanning:package_manager:name"
	propInputFile      = "gitlab:dependency_scanning:input_file:path"
	propSyftLocation   = "syft:location:0:path" // syft
	propCdxgenSrcFile  = "SrcFile"              // cdxgen
)

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

type cdxComponent struct {
	Type       string        `json:"type"`
	BOMRef     string        `json:"bom-ref"`
	Group      string        `json:"group"`
	Name       string        `json:"name"`
	Version    string        `json:"version"`
	PURL       string        `json:"purl"`
	Licenses   []cdxLicense  `json:"licenses"`
	Properties []cdxProperty `json:"properties"`
	Evidence   *struct {
		Occurrences []struct {
			Location string `json:"location"`
		} `json:"occurrences"`
	} `json:"evidence"`
	Components []cdxComponent `json:"components"`
}

type cdxMetadata struct {
	Tools      json.RawMessage `json:"tools"`
	Properties []cdxProperty   `json:"properties"`
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

func property(props []cdxProperty, name string) string {
	for _, p := range props {
		if p.Name == name && p.Value != "" {
			return p.Value
		}
	}
	return ""
}

// sbomOptions are per-upload defaults.
type sbomOptions struct {
	// FilePath is the dependency file for components nothing else locates.
	FilePath string
}

// sbomResult is a parsed upload, ready for store.ReplaceDependencies.
type sbomResult struct {
	SpecVersion     string
	Dependencies    []store.NewDependency
	Vulnerabilities []store.NewVulnerability
	// Skipped counts components that are not dependencies (files, operating
	// systems, ...) and duplicates of an earlier entry.
	Skipped int
}

type sbomReader struct {
	dec                   *json.Decoder
	format, version       string
	sawFormat, sawVersion bool
	meta                  cdxMetadata
	comps                 []*cdxComponent // flattened, in SBOM order
	vulns                 []cdxVulnerability
	problems              *store.ValidationError
}

// parseSBOM reads a CycloneDX JSON SBOM. A body that is not JSON, not
// CycloneDX or of an unsupported version is a 400 naming the problem; a
// component without a name is a validation error naming its JSON path; a
// body over the listener's limit surfaces as *http.MaxBytesError (413).
func parseSBOM(r io.Reader, opts sbomOptions) (*sbomResult, error) {
	sr := &sbomReader{dec: json.NewDecoder(r), problems: &store.ValidationError{}}
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
		return badRequest("the body is not a CycloneDX JSON SBOM: it is not a JSON object")
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
				return badRequest(`the body is not a CycloneDX JSON SBOM: bomFormat is ` + strconv.Quote(sr.format) + `, not "CycloneDX"`)
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
			if err := sr.dec.Decode(&sr.meta); err != nil {
				return sr.decodeError(err, "metadata")
			}
		case "components":
			if err := sr.array(key, sr.component); err != nil {
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
		return badRequest("the body has data after the SBOM")
	}
	switch {
	case !sr.sawFormat:
		return badRequest(`the body is not a CycloneDX JSON SBOM: bomFormat is missing`)
	case !sr.sawVersion:
		return badRequest("the SBOM has no specVersion")
	}
	return nil
}

func unsupportedVersion(v string) error {
	return badRequest("CycloneDX specVersion " + strconv.Quote(v) + " is not supported; use " +
		strings.Join(supportedSpecVersions, ", "))
}

func (sr *sbomReader) decodeString(dst *string, key string) error {
	if err := sr.dec.Decode(dst); err != nil {
		return sr.decodeError(err, key)
	}
	return nil
}

// array calls each for every element of the array that comes next.
func (sr *sbomReader) array(key string, each func(i int) error) error {
	tok, err := sr.dec.Token()
	if err != nil {
		return sr.jsonError(err)
	}
	if tok == nil { // null: no entries
		return nil
	}
	if d, ok := tok.(json.Delim); !ok || d != '[' {
		return badRequest(key + " must be an array")
	}
	for i := 0; sr.dec.More(); i++ {
		if err := each(i); err != nil {
			return err
		}
		if len(sr.problems.Fields) >= store.MaxImportProblems {
			return sr.problems
		}
	}
	_, err = sr.dec.Token()
	if err != nil {
		return sr.jsonError(err)
	}
	return nil
}

func (sr *sbomReader) component(i int) error {
	at := "components[" + strconv.Itoa(i) + "]"
	c := new(cdxComponent)
	if err := sr.dec.Decode(c); err != nil {
		return sr.decodeError(err, at)
	}
	sr.flatten(c, at)
	return nil
}

// flatten lists a component and its nested components depth first, the
// order in which they appear in the SBOM.
func (sr *sbomReader) flatten(c *cdxComponent, at string) {
	if c.Name == "" {
		sr.problems.Add(at+".name", "is missing")
	}
	sr.comps = append(sr.comps, c)
	for j := range c.Components {
		sr.flatten(&c.Components[j], at+".components["+strconv.Itoa(j)+"]")
	}
	c.Components = nil
}

func (sr *sbomReader) vulnerability(i int) error {
	var v cdxVulnerability
	if err := sr.dec.Decode(&v); err != nil {
		return sr.decodeError(err, "vulnerabilities["+strconv.Itoa(i)+"]")
	}
	if v.ID == "" && v.BOMRef == "" {
		sr.problems.Add("vulnerabilities["+strconv.Itoa(i)+"].id", "is missing")
	}
	sr.vulns = append(sr.vulns, v)
	return nil
}

// jsonError turns a failure of the JSON reader into a 400, letting a body
// over the limit through for the 413.
func (sr *sbomReader) jsonError(err error) error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return err
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return badRequest(fmt.Sprintf("the body is not valid JSON (at byte %d: %s)", se.Offset, se.Error()))
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return badRequest("the body ends before the SBOM does")
	}
	return badRequest("the body could not be read")
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

// result turns the components into dependency list entries.
func (sr *sbomReader) result(opts sbomOptions) (*sbomResult, error) {
	res := &sbomResult{SpecVersion: sr.version}
	metaPM := property(sr.meta.Properties, propPackageManager)
	metaFile := cleanPath(property(sr.meta.Properties, propInputFile))
	toolFile := toolDefaultFile(sr.meta.Tools)
	srcRoot := srcFileRoot(sr.comps)

	byRef := map[string][]int{} // bom-ref -> index in res.Dependencies
	seen := map[string]int{}
	for _, c := range sr.comps {
		if !slices.Contains(listedComponentTypes, c.Type) {
			res.Skipped++
			continue
		}
		d := store.NewDependency{Name: c.Name, Version: c.Version, Licenses: licenses(c.Licenses)}
		if c.Group != "" {
			// Maven groupId, npm scope: GitLab lists group/name.
			d.Name = c.Group + "/" + c.Name
		}
		d.FilePath = firstOf(
			cleanPath(property(c.Properties, propInputFile)),
			metaFile,
			cleanPath(opts.FilePath),
			cleanPath(property(c.Properties, propSyftLocation)),
			relativeTo(srcRoot, property(c.Properties, propCdxgenSrcFile)),
			occurrence(c),
			toolFile,
		)
		d.PackageManager = firstOf(property(c.Properties, propPackageManager), metaPM)
		if d.PackageManager == "" {
			d.PackageManager = derivePackageManager(purlType(c.PURL), d.FilePath)
		}
		key := d.Name + "\x00" + d.Version + "\x00" + d.PackageManager + "\x00" + d.FilePath
		idx, dup := seen[key]
		if dup {
			res.Skipped++
			for _, l := range d.Licenses {
				if !slices.Contains(res.Dependencies[idx].Licenses, l) {
					res.Dependencies[idx].Licenses = append(res.Dependencies[idx].Licenses, l)
				}
			}
		} else {
			idx = len(res.Dependencies)
			seen[key] = idx
			res.Dependencies = append(res.Dependencies, d)
		}
		if c.BOMRef != "" {
			byRef[c.BOMRef] = append(byRef[c.BOMRef], idx)
		}
	}

	index := map[string]int{} // vulnerability key -> index in res.Vulnerabilities
	for _, v := range sr.vulns {
		key := firstOf(v.ID, v.BOMRef)
		sev := severity(v)
		i, ok := index[key]
		if !ok {
			i = len(res.Vulnerabilities)
			index[key] = i
			desc := firstOf(v.Description, v.Detail)
			if len(desc) > store.MaxVulnerabilityDesc {
				desc = truncateUTF8(desc, store.MaxVulnerabilityDesc)
			}
			res.Vulnerabilities = append(res.Vulnerabilities, store.NewVulnerability{
				ExternalID: key, Name: key, Severity: sev, Description: desc})
		} else if moreSevere(sev, res.Vulnerabilities[i].Severity) {
			res.Vulnerabilities[i].Severity = sev
		}
		for _, a := range v.Affects {
			for _, di := range byRef[bomLinkRef(a.Ref)] {
				if !slices.Contains(res.Dependencies[di].Vulnerabilities, key) {
					res.Dependencies[di].Vulnerabilities = append(res.Dependencies[di].Vulnerabilities, key)
				}
			}
		}
	}
	// Keep only the vulnerabilities that affect a listed dependency.
	used := map[string]bool{}
	for _, d := range res.Dependencies {
		for _, k := range d.Vulnerabilities {
			used[k] = true
		}
	}
	res.Vulnerabilities = slices.DeleteFunc(res.Vulnerabilities, func(v store.NewVulnerability) bool { return !used[v.ExternalID] })
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

// srcFileRoot is the directory cdxgen scanned, as far as its SrcFile
// properties tell: they are absolute paths on the scanning machine (or
// relative to its temp dir), and the longest directory holding all of them
// is taken as the repository root. One lockfile gives its own directory.
func srcFileRoot(comps []*cdxComponent) string {
	var root []string
	first := true
	for _, c := range comps {
		p := property(c.Properties, propCdxgenSrcFile)
		if p == "" {
			continue
		}
		dir := strings.Split(path.Dir(path.Clean(strings.ReplaceAll(p, `\`, "/"))), "/")
		if first {
			root, first = dir, false
			continue
		}
		n := 0
		for n < len(root) && n < len(dir) && root[n] == dir[n] {
			n++
		}
		root = root[:n]
	}
	return strings.Join(root, "/")
}

// relativeTo makes p relative to root (see srcFileRoot).
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

func occurrence(c *cdxComponent) string {
	if c.Evidence == nil {
		return ""
	}
	for _, o := range c.Evidence.Occurrences {
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
