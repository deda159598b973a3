package maven

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// maven-metadata.xml: parsing an upstream's document, merging several, rendering one.
//
// A virtual registry answers g/a/maven-metadata.xml (and g/maven-metadata.xml, with
// its <plugins>) with the merge of what its upstreams have, so that a client sees
// every version any upstream offers. An upstream's document is untrusted input: the
// parser is bounded in bytes, depth and elements, refuses DTDs, and reports failures
// with a short reason that quotes nothing of the document.

// Metadata is one maven-metadata.xml document.
type Metadata struct {
	ModelVersion string // the modelVersion attribute of <metadata>, "" when absent
	GroupID      string
	ArtifactID   string
	Version      string
	Versioning   *Versioning // nil when the document has none
	Plugins      []Plugin    // group-level metadata
}

// Versioning is the <versioning> element.
type Versioning struct {
	Latest, Release  string
	Versions         []string
	LastUpdated      string // yyyyMMddHHmmss as written; "" when absent
	Snapshot         *Snapshot
	SnapshotVersions []SnapshotVersion
}

// Snapshot is <versioning><snapshot> of version-level SNAPSHOT metadata.
type Snapshot struct {
	Timestamp   string
	BuildNumber int
	LocalCopy   bool
}

// SnapshotVersion is one <snapshotVersion> of version-level SNAPSHOT metadata.
type SnapshotVersion struct{ Classifier, Extension, Value, Updated string }

// Plugin is one <plugin> of group-level metadata: how a prefix ("deploy" in
// deploy:deploy-file) maps to a plugin artifact of the group.
type Plugin struct{ Name, Prefix, ArtifactID string }

// Limits ParseMetadata enforces besides its max bytes. Maven's own documents nest 5
// deep (metadata/versioning/snapshotVersions/snapshotVersion/value); the element limit
// counts every element, so it bounds versions, snapshotVersions and plugins together
// and the work a document of max bytes made of tiny elements can cause. The largest
// artifact-level documents on Maven Central list some tens of thousands of versions.
const (
	MaxMetadataDepth    = 16
	MaxMetadataElements = 1 << 20
)

// Errors of ParseMetadata. Every failure is a *MetadataError that errors.Is
// ErrBadMetadata; a document over max bytes is also ErrMetadataTooLarge, one with a
// DOCTYPE or another DTD declaration also ErrDoctype.
var (
	ErrBadMetadata            = errors.New("bad maven-metadata.xml")
	ErrMetadataTooLarge error = &kindError{"maven-metadata.xml too large"}
	ErrDoctype          error = &kindError{"maven-metadata.xml has a DOCTYPE"}
)

// kindError is a sentinel that is itself an ErrBadMetadata.
type kindError struct{ msg string }

func (e *kindError) Error() string { return e.msg }
func (e *kindError) Unwrap() error { return ErrBadMetadata }

// MetadataError is a document ParseMetadata refused, with a reason safe to show a
// client: it quotes no byte of the document (element names it cites are the ones the
// parser looks for, not the ones it found).
type MetadataError struct {
	reason string
	kind   error // ErrBadMetadata, ErrMetadataTooLarge or ErrDoctype
	cause  error // the reader's error when reading failed; nil otherwise
}

func (e *MetadataError) Error() string {
	if e.cause != nil {
		return "maven-metadata.xml: " + e.reason + ": " + e.cause.Error()
	}
	return "maven-metadata.xml: " + e.reason
}

// Reason is the short, client-safe reason ("not well-formed XML (line 3)").
func (e *MetadataError) Reason() string { return e.reason }

func (e *MetadataError) Unwrap() []error {
	if e.cause != nil {
		return []error{e.kind, e.cause}
	}
	return []error{e.kind}
}

func badMetadata(reason string) error { return &MetadataError{reason: reason, kind: ErrBadMetadata} }

var (
	errTooLarge = errors.New("too large")           // capReader's: the document passed max
	errCharset  = errors.New("unsupported charset") // CharsetReader's: only UTF-8 is read
)

// capReader lets through at most max bytes; past that it fails with errTooLarge. It
// remembers the underlying reader's own error so that ParseMetadata can tell an I/O
// failure from a bad document.
type capReader struct {
	r    io.Reader
	left int64 // bytes still allowed
	err  error // the last non-EOF error of r
}

func (c *capReader) Read(p []byte) (int, error) {
	if c.left < 0 {
		return 0, errTooLarge
	}
	if int64(len(p)) > c.left { // ask for one byte more than allowed to see whether there is one
		p = p[:c.left+1]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	if c.left < 0 {
		return 0, errTooLarge
	}
	if err != nil && err != io.EOF {
		c.err = err
	}
	return n, err
}

// metaParser reads tokens with the limits applied.
type metaParser struct {
	d        *xml.Decoder
	cr       *capReader
	depth    int
	elements int
}

// ParseMetadata reads one document from r: at most max bytes (more:
// ErrMetadataTooLarge). It streams through encoding/xml's Decoder in Strict mode
// without entities: any DOCTYPE, ENTITY or other DTD directive is refused
// (ErrDoctype), so there is no entity expansion at all (no billion laughs) and no
// external entity; nesting deeper than MaxMetadataDepth and more than
// MaxMetadataElements elements are refused too. Only UTF-8 documents are read.
//
// The root must be <metadata> (in any namespace). As Maven's reader in its lenient
// mode, it skips unknown elements and, for an element given twice, keeps the last.
// Text is trimmed of XML white space. Empty structures are normalised away: a
// <versioning> or <snapshot> with nothing in it is nil, empty list entries are
// dropped; Marshal omits the same things, so a parsed document re-marshals and
// re-parses to itself. Content after the root element other than comments, processing
// instructions and white space is refused.
func ParseMetadata(r io.Reader, max int64) (*Metadata, error) {
	cr := &capReader{r: r, left: max}
	d := xml.NewDecoder(cr)
	d.Strict = true
	d.CharsetReader = func(string, io.Reader) (io.Reader, error) { return nil, errCharset }
	p := &metaParser{d: d, cr: cr}
	for {
		tok, err := p.token()
		if err == io.EOF {
			return nil, badMetadata("no root element")
		}
		if err != nil {
			return nil, err
		}
		switch t := tok.(type) {
		case xml.StartElement:
			if t.Name.Local != "metadata" {
				return nil, badMetadata("root element is not <metadata>")
			}
			m := &Metadata{}
			for _, a := range t.Attr {
				if a.Name.Space == "" && a.Name.Local == "modelVersion" {
					m.ModelVersion = trimXML(a.Value)
				}
			}
			if err := p.metadata(m); err != nil {
				return nil, err
			}
			if err := p.epilog(); err != nil {
				return nil, err
			}
			m.normalize()
			return m, nil
		case xml.CharData:
			if trimXML(string(t)) != "" {
				return nil, badMetadata("text before the root element")
			}
		}
	}
}

// token is Decoder.Token with the limits, DTDs refused and errors made safe.
func (p *metaParser) token() (xml.Token, error) {
	tok, err := p.d.Token()
	if err != nil {
		return nil, p.fail(err)
	}
	switch tok.(type) {
	case xml.StartElement:
		p.depth++
		p.elements++
		if p.depth > MaxMetadataDepth {
			return nil, badMetadata("elements nested deeper than " + strconv.Itoa(MaxMetadataDepth))
		}
		if p.elements > MaxMetadataElements {
			return nil, badMetadata("more than " + strconv.Itoa(MaxMetadataElements) + " elements")
		}
	case xml.EndElement:
		p.depth--
	case xml.Directive:
		return nil, &MetadataError{reason: "DOCTYPE or other DTD declaration refused", kind: ErrDoctype}
	}
	return tok, nil
}

// fail turns a Decoder error into a *MetadataError; io.EOF stays io.EOF (the caller
// decides whether the end was expected).
func (p *metaParser) fail(err error) error {
	switch {
	case err == io.EOF:
		return io.EOF
	case errors.Is(err, errTooLarge):
		return &MetadataError{reason: "document larger than the limit", kind: ErrMetadataTooLarge}
	case p.cr.err != nil && errors.Is(err, p.cr.err):
		return &MetadataError{reason: "reading the document failed", kind: ErrBadMetadata, cause: err}
	case errors.Is(err, errCharset):
		return badMetadata("encoding other than UTF-8")
	}
	// A *xml.SyntaxError's message quotes the document (element names, characters):
	// keep only the line.
	line, _ := p.d.InputPos()
	return badMetadata("not well-formed XML (line " + strconv.Itoa(line) + ")")
}

// next is token for the inside of an element: the end of the input is an error.
func (p *metaParser) next() (xml.Token, error) {
	tok, err := p.token()
	if err == io.EOF {
		line, _ := p.d.InputPos()
		return nil, badMetadata("document ends inside an element (line " + strconv.Itoa(line) + ")")
	}
	return tok, err
}

// children calls f for each child element of the element just opened, skipping text
// and comments, until that element's end. f must consume the child (to its end).
func (p *metaParser) children(f func(name string) error) error {
	for {
		tok, err := p.next()
		if err != nil {
			return err
		}
		switch t := tok.(type) {
		case xml.StartElement:
			if err := f(t.Name.Local); err != nil {
				return err
			}
		case xml.EndElement:
			return nil
		}
	}
}

// skip consumes the rest of an element whose start was just read.
func (p *metaParser) skip() error {
	end := p.depth - 1
	for p.depth > end {
		if _, err := p.next(); err != nil {
			return err
		}
	}
	return nil
}

// text reads the trimmed text content of a simple element whose start was just read;
// what names the element in the reason.
func (p *metaParser) text(what string) (string, error) {
	var b []byte
	for {
		tok, err := p.next()
		if err != nil {
			return "", err
		}
		switch t := tok.(type) {
		case xml.CharData:
			b = append(b, t...)
		case xml.StartElement:
			return "", badMetadata("element inside <" + what + ">")
		case xml.EndElement:
			return trimXML(string(b)), nil
		}
	}
}

func (p *metaParser) metadata(m *Metadata) error {
	return p.children(func(name string) (err error) {
		switch name {
		case "groupId":
			m.GroupID, err = p.text("groupId")
		case "artifactId":
			m.ArtifactID, err = p.text("artifactId")
		case "version":
			m.Version, err = p.text("version")
		case "versioning":
			m.Versioning = &Versioning{}
			err = p.versioning(m.Versioning)
		case "plugins":
			m.Plugins = nil
			err = p.children(func(name string) error {
				if name != "plugin" {
					return p.skip()
				}
				return p.plugin(&m.Plugins)
			})
		default:
			err = p.skip()
		}
		return err
	})
}

func (p *metaParser) versioning(v *Versioning) error {
	return p.children(func(name string) (err error) {
		switch name {
		case "latest":
			v.Latest, err = p.text("latest")
		case "release":
			v.Release, err = p.text("release")
		case "lastUpdated":
			v.LastUpdated, err = p.text("lastUpdated")
		case "snapshot":
			v.Snapshot = &Snapshot{}
			err = p.snapshot(v.Snapshot)
		case "versions":
			v.Versions = nil
			err = p.children(func(name string) error {
				if name != "version" {
					return p.skip()
				}
				s, err := p.text("version")
				if s != "" {
					v.Versions = append(v.Versions, s)
				}
				return err
			})
		case "snapshotVersions":
			v.SnapshotVersions = nil
			err = p.children(func(name string) error {
				if name != "snapshotVersion" {
					return p.skip()
				}
				return p.snapshotVersion(&v.SnapshotVersions)
			})
		default:
			err = p.skip()
		}
		return err
	})
}

func (p *metaParser) snapshot(s *Snapshot) error {
	return p.children(func(name string) error {
		switch name {
		case "timestamp":
			t, err := p.text("timestamp")
			s.Timestamp = t
			return err
		case "buildNumber":
			t, err := p.text("buildNumber")
			if err != nil {
				return err
			}
			s.BuildNumber = 0
			if t != "" {
				n, err := strconv.ParseInt(t, 10, 32) // a Java int, as Maven reads it
				if err != nil {
					return badMetadata("<buildNumber> is not an integer")
				}
				s.BuildNumber = int(n)
			}
			return nil
		case "localCopy":
			t, err := p.text("localCopy")
			s.LocalCopy = strings.EqualFold(t, "true") // Java's Boolean.valueOf
			return err
		}
		return p.skip()
	})
}

func (p *metaParser) snapshotVersion(list *[]SnapshotVersion) error {
	var sv SnapshotVersion
	err := p.children(func(name string) (err error) {
		switch name {
		case "classifier":
			sv.Classifier, err = p.text("classifier")
		case "extension":
			sv.Extension, err = p.text("extension")
		case "value":
			sv.Value, err = p.text("value")
		case "updated":
			sv.Updated, err = p.text("updated")
		default:
			err = p.skip()
		}
		return err
	})
	if sv != (SnapshotVersion{}) {
		*list = append(*list, sv)
	}
	return err
}

func (p *metaParser) plugin(list *[]Plugin) error {
	var pl Plugin
	err := p.children(func(name string) (err error) {
		switch name {
		case "name":
			pl.Name, err = p.text("name")
		case "prefix":
			pl.Prefix, err = p.text("prefix")
		case "artifactId":
			pl.ArtifactID, err = p.text("artifactId")
		default:
			err = p.skip()
		}
		return err
	})
	if pl != (Plugin{}) {
		*list = append(*list, pl)
	}
	return err
}

// epilog reads what follows the root element: only comments, processing
// instructions and white space may.
func (p *metaParser) epilog() error {
	for {
		tok, err := p.token()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		switch t := tok.(type) {
		case xml.StartElement:
			return badMetadata("content after the root element")
		case xml.CharData:
			if trimXML(string(t)) != "" {
				return badMetadata("text after the root element")
			}
		}
	}
}

// trimXML trims XML white space (and only that, unlike strings.TrimSpace).
func trimXML(s string) string { return strings.Trim(s, " \t\r\n") }

// normalize drops what Marshal would not write, so that Parse(Marshal(m)) is m.
func (m *Metadata) normalize() {
	if v := m.Versioning; v != nil {
		if v.Snapshot != nil && *v.Snapshot == (Snapshot{}) {
			v.Snapshot = nil
		}
		if v.empty() {
			m.Versioning = nil
		}
	}
}

func (v *Versioning) empty() bool {
	return v.Latest == "" && v.Release == "" && len(v.Versions) == 0 && v.LastUpdated == "" &&
		v.Snapshot == nil && len(v.SnapshotVersions) == 0
}

// MergeMetadata merges documents given in upstream position order (nil entries: that
// upstream has none, skip). keep, when non-nil, is asked whether docs[i] may
// contribute a version (i = the index in docs); a refused version is dropped from
// what docs[i] contributes, also as its latest or release. keep is called at most
// once per distinct (i, version): for each version docs[i] lists and for its latest
// and release when they are candidates. Returns nil when every entry is nil. The
// inputs are not modified and share no memory with the result.
//
// Rules, and why:
//   - versions: the union, ordered by CompareVersions ascending (Maven's order, which
//     clients use for ranges). Duplicates are by exact string. Two different spellings
//     that Maven holds equal ("1.0" and "1.0.0") from different upstreams keep the
//     first upstream's spelling only: a client cannot tell them apart by order, and
//     the first upstream is the one the registry answers from first; spellings that
//     one upstream lists side by side both stay (they are two directories there).
//   - lastUpdated: the newest. The values are fixed-width yyyyMMddHHmmss, so they are
//     compared as strings once validated; an invalid one counts as absent.
//   - latest and release: from the document with the newest valid lastUpdated that
//     names one (ties, and documents without a valid lastUpdated after all others:
//     position order), skipping a value keep refused. That is Maven's own merge rule
//     (the newer document's latest/release win). When no document names one: the
//     highest version of the union (release: the highest that is not a snapshot,
//     IsSnapshot); empty when the union is empty.
//   - plugins: the union by prefix, the first upstream winning a conflict (as Maven's
//     merge keeps the plugin it had), ordered by prefix for deterministic output.
//   - groupId, artifactId, version, modelVersion, snapshot, snapshotVersions: from the
//     first document that has them. keep does not apply to snapshotVersions: their
//     values are timestamped builds of the document's own version.
//
// Versions, latest and release are trimmed of XML white space, and empty ones
// ignored, as ParseMetadata would have done.
func MergeMetadata(docs []*Metadata, keep func(i int, version string) bool) *Metadata {
	out := &Metadata{}
	found := false
	total := 0
	for _, d := range docs {
		if d != nil && d.Versioning != nil {
			total += len(d.Versioning.Versions)
		}
	}

	type keepKey struct {
		i int
		v string
	}
	var asked map[keepKey]bool
	kept := func(i int, v string) bool {
		if keep == nil {
			return true
		}
		k := keepKey{i, v}
		ok, done := asked[k]
		if !done {
			if asked == nil {
				asked = make(map[keepKey]bool, total)
			}
			ok = keep(i, v)
			asked[k] = ok
		}
		return ok
	}

	type entry struct {
		v string
		p version
	}
	var (
		union      = make([]entry, 0, total)
		inUnion    = make(map[string]bool, total)
		keyOwner   = make(map[string]int, total) // versionKey -> the document that contributed it first
		versioning *Versioning
		withVers   []int // documents with a <versioning>, in position order
		plugins    []Plugin
		prefixes   = make(map[string]bool)
	)
	for i, d := range docs {
		if d == nil {
			continue
		}
		found = true
		firstNonEmpty(&out.ModelVersion, d.ModelVersion)
		firstNonEmpty(&out.GroupID, d.GroupID)
		firstNonEmpty(&out.ArtifactID, d.ArtifactID)
		firstNonEmpty(&out.Version, d.Version)
		for _, pl := range d.Plugins {
			if pl != (Plugin{}) && !prefixes[pl.Prefix] {
				prefixes[pl.Prefix] = true
				plugins = append(plugins, pl)
			}
		}
		v := d.Versioning
		if v == nil {
			continue
		}
		withVers = append(withVers, i)
		if versioning == nil {
			versioning = &Versioning{}
		}
		for _, s := range v.Versions {
			s = trimXML(s)
			if s == "" || !kept(i, s) || inUnion[s] {
				continue
			}
			p := parseVersion(s)
			k := versionKey(&p)
			if owner, ok := keyOwner[k]; ok && owner != i {
				continue // an earlier upstream has this version, spelt differently
			}
			keyOwner[k] = i
			inUnion[s] = true
			union = append(union, entry{s, p})
		}
		if lu := v.LastUpdated; validLastUpdated(lu) && lu > versioning.LastUpdated {
			versioning.LastUpdated = lu
		}
		if versioning.Snapshot == nil && v.Snapshot != nil && *v.Snapshot != (Snapshot{}) {
			s := *v.Snapshot
			versioning.Snapshot = &s
		}
		if versioning.SnapshotVersions == nil && len(v.SnapshotVersions) > 0 {
			versioning.SnapshotVersions = slices.Clone(v.SnapshotVersions)
		}
	}
	if !found {
		return nil
	}

	if len(plugins) > 0 {
		slices.SortStableFunc(plugins, func(a, b Plugin) int { return strings.Compare(a.Prefix, b.Prefix) })
		out.Plugins = plugins
	}
	if versioning == nil {
		return out
	}

	slices.SortStableFunc(union, func(a, b entry) int { return compareParsed(&a.p, &b.p) })
	if len(union) > 0 {
		versioning.Versions = make([]string, len(union))
		for j, e := range union {
			versioning.Versions[j] = e.v
		}
	}

	// The documents by newest valid lastUpdated, ties and the undated in position order.
	slices.SortStableFunc(withVers, func(a, b int) int {
		return -strings.Compare(validOrEmpty(docs[a].Versioning.LastUpdated), validOrEmpty(docs[b].Versioning.LastUpdated))
	})
	pick := func(field func(*Versioning) string) string {
		for _, i := range withVers {
			if s := trimXML(field(docs[i].Versioning)); s != "" && kept(i, s) {
				return s
			}
		}
		return ""
	}
	versioning.Latest = pick(func(v *Versioning) string { return v.Latest })
	versioning.Release = pick(func(v *Versioning) string { return v.Release })
	if versioning.Latest == "" && len(union) > 0 {
		versioning.Latest = union[len(union)-1].v
	}
	if versioning.Release == "" {
		for j := len(union) - 1; j >= 0; j-- {
			if !IsSnapshot(union[j].v) {
				versioning.Release = union[j].v
				break
			}
		}
	}
	if !versioning.empty() {
		out.Versioning = versioning
	}
	return out
}

func firstNonEmpty(dst *string, s string) {
	if *dst == "" {
		*dst = s
	}
}

// validLastUpdated reports whether s is a yyyyMMddHHmmss timestamp of a real instant.
func validLastUpdated(s string) bool {
	if len(s) != 14 || !allASCIIDigits(s) {
		return false
	}
	_, err := time.Parse("20060102150405", s)
	return err == nil
}

func validOrEmpty(s string) string {
	if validLastUpdated(s) {
		return s
	}
	return ""
}

// Marshal renders m deterministically, in the layout of Maven's MetadataXpp3Writer:
// the XML declaration, <metadata> with a modelVersion attribute only when set,
// elements in Maven's order (groupId, artifactId, version, versioning{latest,
// release, snapshot, versions, lastUpdated, snapshotVersions}, plugins), two-space
// indent, "\n" line ends and a final newline. Values are trimmed of XML white space
// and escaped; a character XML cannot carry becomes U+FFFD. Empty values, a zero
// buildNumber, a false localCopy and structures left empty are omitted.
func (m *Metadata) Marshal() []byte {
	var w xmlWriter
	w.WriteString(`<?xml version="1.0" encoding="UTF-8"?>` + "\n")
	w.WriteString("<metadata")
	if mv := trimXML(m.ModelVersion); mv != "" {
		w.WriteString(` modelVersion="`)
		w.escape(mv, true)
		w.WriteByte('"')
	}
	body := w.Len()
	w.WriteString(">\n")
	w.elem(1, "groupId", m.GroupID)
	w.elem(1, "artifactId", m.ArtifactID)
	w.elem(1, "version", m.Version)
	if v := m.Versioning; v != nil {
		w.versioning(v)
	}
	w.list(1, "plugins", len(m.Plugins), func(i int) {
		pl := m.Plugins[i]
		w.group(2, "plugin", func() {
			w.elem(3, "name", pl.Name)
			w.elem(3, "prefix", pl.Prefix)
			w.elem(3, "artifactId", pl.ArtifactID)
		})
	})
	if w.Len() == body+2 { // nothing inside: <metadata/>
		w.Truncate(body)
		w.WriteString("/>\n")
		return w.Bytes()
	}
	w.WriteString("</metadata>\n")
	return w.Bytes()
}

type xmlWriter struct{ bytes.Buffer }

func (w *xmlWriter) versioning(v *Versioning) {
	w.group(1, "versioning", func() {
		w.elem(2, "latest", v.Latest)
		w.elem(2, "release", v.Release)
		if s := v.Snapshot; s != nil {
			w.group(2, "snapshot", func() {
				w.elem(3, "timestamp", s.Timestamp)
				if s.BuildNumber != 0 {
					w.elem(3, "buildNumber", strconv.Itoa(s.BuildNumber))
				}
				if s.LocalCopy {
					w.elem(3, "localCopy", "true")
				}
			})
		}
		w.list(2, "versions", len(v.Versions), func(i int) { w.elem(3, "version", v.Versions[i]) })
		w.elem(2, "lastUpdated", v.LastUpdated)
		w.list(2, "snapshotVersions", len(v.SnapshotVersions), func(i int) {
			sv := v.SnapshotVersions[i]
			w.group(3, "snapshotVersion", func() {
				w.elem(4, "classifier", sv.Classifier)
				w.elem(4, "extension", sv.Extension)
				w.elem(4, "value", sv.Value)
				w.elem(4, "updated", sv.Updated)
			})
		})
	})
}

func (w *xmlWriter) indent(depth int) {
	for ; depth > 0; depth-- {
		w.WriteString("  ")
	}
}

// elem writes <name>value</name> on its own line, or nothing when value trims to "".
func (w *xmlWriter) elem(depth int, name, value string) {
	value = trimXML(value)
	if value == "" {
		return
	}
	w.indent(depth)
	w.open(name)
	w.escape(value, false)
	w.WriteString("</")
	w.WriteString(name)
	w.WriteString(">\n")
}

// group writes <name>, what body writes, </name>; nothing when body writes nothing.
func (w *xmlWriter) group(depth int, name string, body func()) {
	start := w.Len()
	w.indent(depth)
	w.open(name)
	w.WriteByte('\n')
	inner := w.Len()
	body()
	if w.Len() == inner {
		w.Truncate(start)
		return
	}
	w.indent(depth)
	w.WriteString("</")
	w.WriteString(name)
	w.WriteString(">\n")
}

func (w *xmlWriter) open(name string) {
	w.WriteByte('<')
	w.WriteString(name)
	w.WriteByte('>')
}

// list is group over n items.
func (w *xmlWriter) list(depth int, name string, n int, item func(i int)) {
	if n == 0 {
		return
	}
	w.group(depth, name, func() {
		for i := 0; i < n; i++ {
			item(i)
		}
	})
}

// escape writes s as XML character data (attr: as an attribute value). Carriage
// returns, and in attributes tabs and newlines, are written as references so that a
// parser's line-end and attribute normalisation gives them back unchanged.
func (w *xmlWriter) escape(s string, attr bool) {
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			w.WriteRune('\uFFFD')
			i++
			continue
		}
		i += n
		switch {
		case r == '&':
			w.WriteString("&amp;")
		case r == '<':
			w.WriteString("&lt;")
		case r == '>':
			w.WriteString("&gt;")
		case r == '"' && attr:
			w.WriteString("&quot;")
		case r == '\r':
			w.WriteString("&#13;")
		case (r == '\n' || r == '\t') && attr:
			w.WriteString("&#" + strconv.Itoa(int(r)) + ";")
		case !xmlChar(r):
			w.WriteRune('\uFFFD')
		default:
			w.WriteRune(r)
		}
	}
}

// xmlChar is XML 1.0's Char production.
func xmlChar(r rune) bool {
	return r == 0x09 || r == 0x0A || r == 0x0D ||
		r >= 0x20 && r <= 0xD7FF || r >= 0xE000 && r <= 0xFFFD || r >= 0x10000 && r <= 0x10FFFF
}
