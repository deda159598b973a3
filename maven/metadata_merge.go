package maven

import (
	"slices"
	"strings"
	"time"
)

// Merging maven-metadata.xml documents (see metadata.go).

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
	var (
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

	u := unionOf(docs, keep)
	versioning.Versions = u.versions

	// The documents by newest valid lastUpdated, ties and the undated in position order.
	slices.SortStableFunc(withVers, func(a, b int) int {
		return -strings.Compare(validOrEmpty(docs[a].Versioning.LastUpdated), validOrEmpty(docs[b].Versioning.LastUpdated))
	})
	pick := func(field func(*Versioning) string) string {
		for _, i := range withVers {
			if s := trimXML(field(docs[i].Versioning)); s != "" && u.kept(i, s) {
				return s
			}
		}
		return ""
	}
	versioning.Latest = pick(func(v *Versioning) string { return v.Latest })
	versioning.Release = pick(func(v *Versioning) string { return v.Release })
	if n := len(u.versions); versioning.Latest == "" && n > 0 {
		versioning.Latest = u.versions[n-1]
	}
	if versioning.Release == "" {
		for j := len(u.versions) - 1; j >= 0; j-- {
			if !IsSnapshot(u.versions[j]) {
				versioning.Release = u.versions[j]
				break
			}
		}
	}
	if !versioning.empty() {
		out.Versioning = versioning
	}
	return out
}

// versionUnion is the union of the documents' versions (MergeMetadata's rules),
// built to cost a few dozen bytes per listed version: each is a candidate that
// refers to its document's string and carries its key (versionKey) in a shared
// arena, and duplicates are found by sorting, not in maps. The largest documents
// list hundreds of thousands of versions.
type versionUnion struct {
	versions []string // the union in Maven's order
	docs     []*Metadata
	keep     func(int, string) bool
	cands    []candidate
	byKey    []int32 // indexes of cands by (key, doc, version, position)
	vp       versionParser
	keyBuf   []byte
	asked    map[keepKey]bool // keep's answers for a latest or release no document lists
}

// candidate is one version as a document lists it: docs[doc].Versioning.Versions[at].
type candidate struct {
	key   string // its versionKey
	doc   int32
	at    int32
	state uint8
}

// version is c's version, trimmed.
func (u *versionUnion) version(c *candidate) string {
	return trimXML(u.docs[c.doc].Versioning.Versions[c.at])
}

// States of a candidate.
const (
	candKept  uint8 = 1 << iota // keep let its document contribute it
	candAsked                   // keep was asked about it
	candIn                      // it is in the union
)

type keepKey struct {
	i int
	v string
}

func unionOf(docs []*Metadata, keep func(int, string) bool) *versionUnion {
	u := &versionUnion{docs: docs, keep: keep}
	total := 0
	for _, d := range docs {
		if d != nil && d.Versioning != nil {
			total += len(d.Versioning.Versions)
		}
	}
	u.cands = make([]candidate, 0, total)
	var keys arena
	for i, d := range docs {
		if d == nil || d.Versioning == nil {
			continue
		}
		for at, s := range d.Versioning.Versions {
			if s = trimXML(s); s != "" {
				u.keyBuf = u.vp.appendKey(u.keyBuf[:0], s)
				u.cands = append(u.cands, candidate{key: keys.add(u.keyBuf), doc: int32(i), at: int32(at)})
			}
		}
	}
	u.byKey = make([]int32, len(u.cands))
	for j := range u.byKey {
		u.byKey[j] = int32(j)
	}
	slices.SortFunc(u.byKey, u.cmpCand)
	u.choose()

	// The union in the order the documents list it, then in Maven's order; the
	// stable sort keeps that listing order for versions Maven holds equal.
	n := 0
	for j := range u.cands {
		if u.cands[j].state&candIn != 0 {
			n++
		}
	}
	union := make([]int32, 0, n)
	for j := range u.cands {
		if u.cands[j].state&candIn != 0 {
			union = append(union, int32(j))
		}
	}
	slices.SortStableFunc(union, func(a, b int32) int { return compareKeys(u.cands[a].key, u.cands[b].key) })
	u.versions = make([]string, len(union))
	for j, c := range union {
		u.versions[j] = u.version(&u.cands[c])
	}
	return u
}

// cmpCand orders candidates (by index) by key, document, version and position.
func (u *versionUnion) cmpCand(x, y int32) int {
	a, b := &u.cands[x], &u.cands[y]
	if r := strings.Compare(a.key, b.key); r != 0 {
		return r
	}
	if r := cmpInt(int(a.doc), int(b.doc)); r != 0 {
		return r
	}
	if r := strings.Compare(u.version(a), u.version(b)); r != 0 {
		return r
	}
	return cmpInt(int(x), int(y))
}

// choose asks keep about every distinct (document, version) and marks the
// candidates that make the union: for each key (each version as Maven
// compares them), the first document in position order that may contribute
// one gives every distinct spelling of it that it may contribute, each once.
func (u *versionUnion) choose() {
	c, idx := u.cands, u.byKey
	for i := 0; i < len(idx); {
		owner := int32(-1)
		key := c[idx[i]].key
		for ; i < len(idx) && c[idx[i]].key == key; i++ {
			first := &c[idx[i]]
			v := u.version(first)
			state := candAsked
			if u.keep == nil || u.keep(int(first.doc), v) {
				state |= candKept
				if owner < 0 {
					owner = first.doc
				}
				if owner == first.doc {
					first.state |= candIn
				}
			}
			first.state |= state
			// The same version listed again by the same document.
			for i+1 < len(idx) && c[idx[i+1]].doc == first.doc && u.version(&c[idx[i+1]]) == v {
				i++
				c[idx[i]].state |= state
			}
		}
	}
}

// kept reports whether docs[i] may contribute version s (trimmed, not empty),
// asking keep only about a version none of its candidates is.
func (u *versionUnion) kept(i int, s string) bool {
	if u.keep == nil {
		return true
	}
	u.keyBuf = u.vp.appendKey(u.keyBuf[:0], s)
	key := string(u.keyBuf)
	j, found := slices.BinarySearchFunc(u.byKey, 0, func(x int32, _ int) int {
		a := &u.cands[x]
		if r := strings.Compare(a.key, key); r != 0 {
			return r
		}
		if r := cmpInt(int(a.doc), i); r != 0 {
			return r
		}
		return strings.Compare(u.version(a), s)
	})
	if found {
		return u.cands[u.byKey[j]].state&candKept != 0
	}
	k := keepKey{i, s}
	ok, done := u.asked[k]
	if !done {
		if u.asked == nil {
			u.asked = make(map[keepKey]bool)
		}
		ok = u.keep(i, s)
		u.asked[k] = ok
	}
	return ok
}

// arena holds many short strings in a few large blocks, so that each costs its
// bytes and not an allocation of its own. A strings.Builder only ever appends, so
// the strings cut from what it returns never change.
type arena struct{ b strings.Builder }

const arenaBlock = 64 << 10

func (a *arena) add(p []byte) string {
	if a.b.Cap()-a.b.Len() < len(p) {
		a.b = strings.Builder{}
		a.b.Grow(max(arenaBlock, len(p)))
	}
	start := a.b.Len()
	a.b.Write(p)
	return a.b.String()[start:]
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
