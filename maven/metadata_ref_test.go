package maven

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// The merge that versionUnion replaced (maps of versions, a parsed version per
// candidate), kept as the reference FuzzMergeMetadataUnion checks it against.

func refMergeMetadata(docs []*Metadata, keep func(i int, version string) bool) *Metadata {
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

	slices.SortStableFunc(union, func(a, b entry) int { return refCompareParsed(&a.p, &b.p) })
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

// FuzzMergeMetadataUnion: the compact union gives the reference merge's document,
// and asks keep about the same (document, version) pairs, once each.
func FuzzMergeMetadataUnion(f *testing.F) {
	for i := uint64(0); i < 8; i++ {
		f.Add(i, i*3+1, uint8(3), uint8(20))
	}
	f.Fuzz(func(t *testing.T, s1, s2 uint64, ndocs, per uint8) {
		r := rand.New(rand.NewPCG(s1, s2))
		pool := make([]string, 1+int(per)/2)
		for j := range pool {
			pool[j] = genVersion(r)
			if r.IntN(4) == 0 {
				pool[j] = " " + pool[j] + "\n"
			}
		}
		docs := make([]*Metadata, int(ndocs)%6)
		for i := range docs {
			if r.IntN(5) == 0 {
				continue // an upstream without the document
			}
			v := &Versioning{LastUpdated: fmt.Sprintf("2024010%d000000", r.IntN(3)+1)}
			for n := r.IntN(int(per) + 1); n > 0; n-- {
				v.Versions = append(v.Versions, pool[r.IntN(len(pool))])
			}
			if r.IntN(2) == 0 {
				v.Latest = pool[r.IntN(len(pool))]
			}
			if r.IntN(2) == 0 {
				v.Release = pool[r.IntN(len(pool))]
			}
			docs[i] = &Metadata{GroupID: "g", ArtifactID: "a", Versioning: v}
		}
		refuse := r.Uint64()
		keepAsked := func(asked map[string]int) func(int, string) bool {
			return func(i int, v string) bool {
				asked[fmt.Sprintf("%d %q", i, v)]++
				h := refuse
				for _, c := range []byte(v) {
					h = h*31 + uint64(c)
				}
				return (h+uint64(i))%5 != 0
			}
		}
		gotAsked, wantAsked := map[string]int{}, map[string]int{}
		got := MergeMetadata(docs, keepAsked(gotAsked))
		want := refMergeMetadata(docs, keepAsked(wantAsked))
		if (got == nil) != (want == nil) || got != nil && string(got.Marshal()) != string(want.Marshal()) {
			t.Fatalf("merge:\n%s\nreference:\n%s", marshalOrNil(got), marshalOrNil(want))
		}
		for k, n := range gotAsked {
			if n != 1 {
				t.Fatalf("keep(%s) asked %d times", k, n)
			}
		}
		keys := func(m map[string]int) []string {
			var ks []string
			for k := range m {
				ks = append(ks, k)
			}
			slices.Sort(ks)
			return ks
		}
		if g, w := keys(gotAsked), keys(wantAsked); !slices.Equal(g, w) {
			t.Fatalf("keep asked about %s\nthe reference about %s", strings.Join(g, ", "), strings.Join(w, ", "))
		}
		if nilKeep, ref := MergeMetadata(docs, nil), refMergeMetadata(docs, nil); nilKeep != nil && string(nilKeep.Marshal()) != string(ref.Marshal()) {
			t.Fatal("merge without keep differs from the reference")
		}
	})
}

func marshalOrNil(m *Metadata) string {
	if m == nil {
		return "<nil>"
	}
	return string(m.Marshal())
}
