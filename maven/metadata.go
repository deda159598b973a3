package maven

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"slices"
	"strconv"
	"strings"
)

// maven-metadata.xml: parsing an upstream's document, merging several, rendering one.
//
// A virtual registry answers g/a/maven-metadata.xml (and g/maven-metadata.xml, with
// its <plugins>) with the merge of what its upstreams have, so that a client sees
// every version any upstream offers. An upstream's document is untrusted input: the
// parser is bounded in bytes, depth, elements and versions, refuses DTDs, and reports
// failures with a short reason that quotes nothing of the document. Parsing and
// merging keep only what the merge uses, compactly: a merge of large documents
// allocates about four times their size (BenchmarkMergeLarge,
// TestMergeMemoryBounded).

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

// MetadataLimits bound one document: an upstream's that ParseMetadataBytes reads,
// or a merged one that MarshalLimited renders. Past any of them the document is
// refused with ErrMetadataTooLarge.
type MetadataLimits struct {
	Bytes    int64 // its size
	Elements int   // its elements, all kinds together; 0: MaxMetadataElements
	Versions int   // the versions its <versions> lists; 0: as many as Elements allows
}

func (l MetadataLimits) elements() int {
	if l.Elements <= 0 {
		return MaxMetadataElements
	}
	return l.Elements
}

// Errors of ParseMetadata. Every failure is a *MetadataError that errors.Is
// ErrBadMetadata; a document over max bytes is also ErrMetadataTooLarge, one with a
// DOCTYPE or another DTD declaration also ErrDoctype.
var (
	ErrBadMetadata            = errors.New("bad maven-metadata.xml")
	ErrMetadataTooLarge error = &kindError{"maven-metadata.xml too large"}
	ErrDoctype          error = &kindError{"maven-metadata.xml has a DOCTYPE"}
	// ErrMetadataMisplaced is a document that names other coordinates than its
	// path (CheckPath).
	ErrMetadataMisplaced error = &kindError{"maven-metadata.xml for other coordinates"}
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
	data     []byte
	r        *bytes.Reader // data, under d
	skipped  int64         // bytes of data the fast path read past d (fastVersions)
	fast     bool          // use the fast path
	lim      MetadataLimits
	depth    int
	elements int
	strs     arena // the versions' text
}

// ParseMetadata reads one document from r: at most max bytes (more:
// ErrMetadataTooLarge), then parses it as ParseMetadataBytes does, with the default
// element limit and no version limit beyond it.
func ParseMetadata(r io.Reader, max int64) (*Metadata, error) {
	data, err := io.ReadAll(&capReader{r: r, left: max})
	switch {
	case errors.Is(err, errTooLarge):
		return nil, tooLarge("document larger than the limit")
	case err != nil:
		return nil, &MetadataError{reason: "reading the document failed", kind: ErrBadMetadata, cause: err}
	}
	return ParseMetadataBytes(data, MetadataLimits{Bytes: max})
}

// ParseMetadataBytes parses one document within lim; the result shares no memory
// with data. It streams through encoding/xml's Decoder in Strict mode without
// entities: any DOCTYPE, ENTITY or other DTD directive is refused (ErrDoctype), so
// there is no entity expansion at all (no billion laughs) and no external entity;
// nesting deeper than MaxMetadataDepth is refused too, and a document over any of
// lim's bounds is ErrMetadataTooLarge. Only UTF-8 documents are read.
//
// The root must be <metadata> (in any namespace). As Maven's reader in its lenient
// mode, it skips unknown elements and, for an element given twice, keeps the last.
// Text is trimmed of XML white space. Empty structures are normalised away: a
// <versioning> or <snapshot> with nothing in it is nil, empty list entries are
// dropped; Marshal omits the same things, so a parsed document re-marshals and
// re-parses to itself. Content after the root element other than comments, processing
// instructions and white space is refused.
//
// It keeps only what a merge uses, and the versions (most of a large document) in a
// few large blocks: parsing costs about twice the document's size in allocations.
func ParseMetadataBytes(data []byte, lim MetadataLimits) (*Metadata, error) {
	return parseMetadata(data, lim, true)
}

// parseMetadata is ParseMetadataBytes; fast false leaves every element to the
// decoder (the reference the fast path is tested against).
func parseMetadata(data []byte, lim MetadataLimits, fast bool) (*Metadata, error) {
	if int64(len(data)) > lim.Bytes {
		return nil, tooLarge("document larger than the limit")
	}
	r := bytes.NewReader(data)
	// A bytes.Reader is an io.ByteReader, so the decoder reads it byte by byte
	// and holds nothing of its own beyond what it returned (fastVersions
	// relies on it, and checks).
	d := xml.NewDecoder(r)
	d.Strict = true
	d.CharsetReader = func(string, io.Reader) (io.Reader, error) { return nil, errCharset }
	p := &metaParser{d: d, data: data, r: r, fast: fast, lim: lim}
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

func tooLarge(reason string) error { return &MetadataError{reason: reason, kind: ErrMetadataTooLarge} }

// token is Decoder.Token with the limits, DTDs refused and errors made safe.
func (p *metaParser) token() (xml.Token, error) {
	tok, err := p.d.Token()
	if err != nil {
		return nil, p.fail(err)
	}
	switch tok.(type) {
	case xml.StartElement:
		if err := p.open(); err != nil {
			return nil, err
		}
	case xml.EndElement:
		p.depth--
	case xml.Directive:
		return nil, &MetadataError{reason: "DOCTYPE or other DTD declaration refused", kind: ErrDoctype}
	}
	return tok, nil
}

// open counts an element that starts.
func (p *metaParser) open() error {
	p.depth++
	p.elements++
	if p.depth > MaxMetadataDepth {
		return badMetadata("elements nested deeper than " + strconv.Itoa(MaxMetadataDepth))
	}
	if max := p.lim.elements(); p.elements > max {
		return tooLarge("more than " + strconv.Itoa(max) + " elements")
	}
	return nil
}

// offset is where the next token starts in data.
func (p *metaParser) offset() int64 { return p.d.InputOffset() + p.skipped }

// fail turns a Decoder error into a *MetadataError; io.EOF stays io.EOF (the caller
// decides whether the end was expected).
func (p *metaParser) fail(err error) error {
	switch {
	case err == io.EOF:
		return io.EOF
	case errors.Is(err, errCharset):
		return badMetadata("encoding other than UTF-8")
	}
	// A *xml.SyntaxError's message quotes the document (element names, characters):
	// keep only the line.
	return badMetadata("not well-formed XML (line " + strconv.Itoa(p.line()) + ")")
}

// line is the line the decoder has read to (the decoder's own count does not see
// what fastVersions read).
func (p *metaParser) line() int {
	return 1 + bytes.Count(p.data[:min(p.offset(), int64(len(p.data)))], []byte{'\n'})
}

// next is token for the inside of an element: the end of the input is an error.
func (p *metaParser) next() (xml.Token, error) {
	tok, err := p.token()
	if err == io.EOF {
		return nil, badMetadata("document ends inside an element (line " + strconv.Itoa(p.line()) + ")")
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
			err = p.versions(v)
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

// versions reads <versions>, whose start was just read.
func (p *metaParser) versions(v *Versioning) error {
	var list versionList
	defer func() { v.Versions = list.strings() }()
	// The fast path may run where the decoder is between elements with nothing
	// pending: after this start tag, unless it closed itself (<versions/>: the
	// decoder has its end to return), and after each child's end tag.
	off := p.offset()
	fast := p.fast && off >= 2 && string(p.data[off-2:off]) != "/>"
	for {
		if fast {
			if err := p.fastVersions(&list); err != nil {
				return err
			}
		}
		tok, err := p.next()
		if err != nil {
			return err
		}
		switch t := tok.(type) {
		case xml.StartElement:
			if t.Name.Local != "version" {
				err = p.skip()
			} else {
				var s string
				s, err = p.text("version")
				if s != "" {
					if cerr := p.addVersion(&list, s); cerr != nil {
						return cerr
					}
				}
			}
			if err != nil {
				return err
			}
			fast = p.fast
		case xml.EndElement:
			return nil
		default:
			fast = false
		}
	}
}

// addVersion appends a version to the list, within the limit.
func (p *metaParser) addVersion(list *versionList, s string) error {
	if max := p.lim.Versions; max > 0 && list.n >= max {
		return tooLarge("more than " + strconv.Itoa(max) + " versions")
	}
	list.add(s)
	return nil
}

// versionList gathers a list of versions in blocks, then makes one slice of the
// right length: growing one slice as they come would allocate several times its
// final size (a slice of many grows by a quarter at a time).
type versionList struct {
	blocks [][]string
	n      int
}

const versionBlock = 1024

func (l *versionList) add(s string) {
	if len(l.blocks) == 0 || len(l.blocks[len(l.blocks)-1]) == versionBlock {
		l.blocks = append(l.blocks, make([]string, 0, versionBlock))
	}
	b := &l.blocks[len(l.blocks)-1]
	*b = append(*b, s)
	l.n++
}

// strings is the list; nil when empty.
func (l *versionList) strings() []string {
	if l.n == 0 {
		return nil
	}
	if len(l.blocks) == 1 {
		return slices.Clip(l.blocks[0])
	}
	out := make([]string, 0, l.n)
	for _, b := range l.blocks {
		out = append(out, b...)
	}
	return out
}

var (
	openVersion  = []byte("<version>")
	closeVersion = []byte("</version>")
)

// plainText marks the bytes fastVersions takes as a version's text: printable
// ASCII but markup ('<', '&', '>': "]]>" is not allowed in text), and the white
// space that XML reads unchanged (a carriage return is normalised: it is left to
// the decoder).
var plainText = func() (t [256]bool) {
	for c := ' '; c < 0x7f; c++ {
		t[c] = c != '<' && c != '&' && c != '>'
	}
	t['\t'], t['\n'] = true, true
	return t
}()

// fastVersions reads the <version> elements that come next straight from the
// bytes, as long as they are in the plain form every writer uses:
// <version>text</version>, the text printable ASCII, white space between. The
// decoder would return a start, a text and an end token for each, several
// allocations, for the elements that make most of a large document; this reads
// them exactly as the decoder would (the same text, the same counts and limits)
// and stores their text in a few large blocks. It stops at anything else (a
// comment, an entity, another element, a byte outside that set) and hands the
// rest back to the decoder, which reads on from there.
//
// It must only run where the decoder returned a whole tag and holds nothing back.
// The decoder reads data byte by byte, so it holds a byte back exactly when the
// reader is ahead of the decoder's offset (it peeked at the '<' that ends a text):
// then this does nothing.
func (p *metaParser) fastVersions(list *versionList) error {
	off := p.offset()
	if off != p.r.Size()-int64(p.r.Len()) {
		return nil
	}
	data := p.data
	i := int(off)
	for {
		j := i
		for j < len(data) && isXMLSpace(data[j]) {
			j++
		}
		if !bytes.HasPrefix(data[j:], openVersion) {
			break
		}
		k := j + len(openVersion)
		e := k
		for e < len(data) && plainText[data[e]] {
			e++
		}
		if !bytes.HasPrefix(data[e:], closeVersion) {
			break
		}
		if err := p.open(); err != nil {
			return err
		}
		p.depth--
		if t := bytes.Trim(data[k:e], xmlSpace); len(t) > 0 {
			if err := p.addVersion(list, p.strs.add(t)); err != nil {
				return err
			}
		}
		i = e + len(closeVersion)
	}
	if n := int64(i) - off; n > 0 {
		p.r.Seek(int64(i), io.SeekStart)
		p.skipped += n
	}
	return nil
}

const xmlSpace = " \t\r\n"

func isXMLSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }

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

// CheckPath returns nil when m may be the maven-metadata.xml at p (artifact or
// group level: p.EntryRel() is a maven-metadata.xml), else ErrMetadataMisplaced:
// its groupId or artifactId names other coordinates, and merging it would answer
// for one artifact with the versions of another. The same path is read both ways
// (g1/g2/maven-metadata.xml is the artifact g1:g2 and the group g1.g2), so m fits
// when either reading agrees: groupId is the directory of the artifact, or the
// whole directory for a group-level document, written with '.' for '/', and
// artifactId the artifact's directory (a group-level document has none). A
// value that is absent contradicts nothing: group-level documents often have
// neither.
func (m *Metadata) CheckPath(p Path) error {
	dir := strings.TrimSuffix(strings.TrimSuffix(p.EntryRel(), MetadataFile), "/")
	g, a := trimXML(m.GroupID), trimXML(m.ArtifactID)
	gdir := strings.ReplaceAll(g, ".", "/")
	if strings.Contains(g, "/") {
		gdir = "/" // no directory: a groupId has no '/'
	}
	group, artifact, ok := cutLast(dir)
	switch {
	case ok && (g == "" || gdir == group) && (a == "" || a == artifact): // artifact level
		return nil
	case a == "" && (g == "" || gdir == dir): // group level
		return nil
	case a != "" && (!ok || a != artifact):
		return &MetadataError{reason: "artifactId differs from the path", kind: ErrMetadataMisplaced}
	}
	return &MetadataError{reason: "groupId differs from the path", kind: ErrMetadataMisplaced}
}

// trimXML trims XML white space (and only that, unlike strings.TrimSpace).
func trimXML(s string) string { return strings.Trim(s, xmlSpace) }

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
