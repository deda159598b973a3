package maven

import (
	"bytes"
	"strconv"
	"unicode/utf8"
)

// Rendering a maven-metadata.xml document (see metadata.go).

// Marshal renders m deterministically, in the layout of Maven's MetadataXpp3Writer:
// the XML declaration, <metadata> with a modelVersion attribute only when set,
// elements in Maven's order (groupId, artifactId, version, versioning{latest,
// release, snapshot, versions, lastUpdated, snapshotVersions}, plugins), two-space
// indent, "\n" line ends and a final newline. Values are trimmed of XML white space
// and escaped; a character XML cannot carry becomes U+FFFD. Empty values, a zero
// buildNumber, a false localCopy and structures left empty are omitted.
func (m *Metadata) Marshal() []byte {
	var w xmlWriter
	w.Grow(m.sizeHint())
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

// MarshalLimited is Marshal for a document that must keep within lim, as a merged
// one must: more versions, elements (counted as Marshal would write them, empty
// values included) or bytes than lim allows is ErrMetadataTooLarge, with a reason
// that names the bound. Counts are checked before anything is rendered.
func (m *Metadata) MarshalLimited(lim MetadataLimits) ([]byte, error) {
	versions := 0
	if m.Versioning != nil {
		versions = len(m.Versioning.Versions)
	}
	if lim.Versions > 0 && versions > lim.Versions {
		return nil, tooLarge("more than " + strconv.Itoa(lim.Versions) + " versions")
	}
	if max := lim.elements(); m.elements() > max {
		return nil, tooLarge("more than " + strconv.Itoa(max) + " elements")
	}
	out := m.Marshal()
	if int64(len(out)) > lim.Bytes {
		return nil, tooLarge("document larger than the limit")
	}
	return out, nil
}

// elements bounds the elements Marshal writes: it counts those left out for
// being empty too.
func (m *Metadata) elements() int {
	n := 4 // metadata, groupId, artifactId, version
	if len(m.Plugins) > 0 {
		n += 1 + 4*len(m.Plugins) // plugins; plugin, name, prefix, artifactId
	}
	if v := m.Versioning; v != nil {
		// versioning, latest, release, lastUpdated, snapshot (and timestamp,
		// buildNumber, localCopy), versions (and each version),
		// snapshotVersions (and each snapshotVersion and its four).
		n += 10 + len(v.Versions) + 5*len(v.SnapshotVersions)
	}
	return n
}

// sizeHint is about the length of Marshal's output (exact but for escaping and
// values that are left out), so that it is written into one buffer.
func (m *Metadata) sizeHint() int {
	const (
		version = len("      <version></version>\n")
		element = len("    <snapshotVersion></snapshotVersion>\n") // the longest element name, with indent
	)
	n := 256 + len(m.ModelVersion) + len(m.GroupID) + len(m.ArtifactID) + len(m.Version)
	if v := m.Versioning; v != nil {
		n += 6*element + len(v.Latest) + len(v.Release) + len(v.LastUpdated)
		for _, s := range v.Versions {
			n += version + len(s)
		}
		if s := v.Snapshot; s != nil {
			n += 4*element + len(s.Timestamp)
		}
		for _, sv := range v.SnapshotVersions {
			n += 6*element + len(sv.Classifier) + len(sv.Extension) + len(sv.Value) + len(sv.Updated)
		}
	}
	for _, pl := range m.Plugins {
		n += 5*element + len(pl.Name) + len(pl.Prefix) + len(pl.ArtifactID)
	}
	return n
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
