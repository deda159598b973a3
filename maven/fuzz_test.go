package maven

import (
	"errors"
	"net/url"
	"strings"
	"testing"
)

func FuzzParse(f *testing.F) {
	validCases(func(_, raw string, _ Path) { f.Add(raw) })
	invalidCases(func(_, raw, _ string) { f.Add(raw) })
	f.Fuzz(func(t *testing.T, raw string) {
		p, err := Parse(raw)
		c, cerr := Classify(raw)
		if err != nil {
			var pe *Error
			if !errors.Is(err, ErrInvalid) || !errors.As(err, &pe) || pe.Reason() == "" {
				t.Fatalf("Parse(%q): error %v is not an *Error wrapping ErrInvalid", raw, err)
			}
			if cerr != err {
				t.Fatalf("Parse(%q) error %v, Classify error %v", raw, err, cerr)
			}
			return
		}
		if cerr != nil {
			t.Fatalf("Parse(%q) ok, Classify error %v", raw, cerr)
		}
		checkPath(t, raw, p)
		want := p
		want.GroupID = ""
		if c != want {
			t.Fatalf("Classify(%q) = %+v, want Parse's %+v without GroupID", raw, c, want)
		}

		// The standard library decodes the same way (it only accepts more).
		s := strings.TrimPrefix(raw, "/")
		if dec, err := url.PathUnescape(s); err != nil || dec != p.Rel {
			t.Fatalf("Parse(%q).Rel = %q; url.PathUnescape: %q, %v", raw, p.Rel, dec, err)
		}

		// Idempotent: Rel parses to the same Path, with or without a leading slash.
		for _, again := range []string{p.Rel, "/" + p.Rel} {
			q, err := Parse(again)
			if err != nil || q != p {
				t.Fatalf("Parse(%q) = %+v but Parse(%q) = %+v, %v", raw, p, again, q, err)
			}
		}
	})
}

// checkPath asserts the invariants of every Path that Parse returns.
func checkPath(t *testing.T, raw string, p Path) {
	t.Helper()
	rel := p.Rel
	if len(rel) == 0 || len(rel) > MaxLen {
		t.Fatalf("Parse(%q): Rel %q has length %d", raw, rel, len(rel))
	}
	segs := strings.Split(rel, "/")
	if len(segs) > MaxSegments {
		t.Fatalf("Parse(%q): Rel %q has %d segments", raw, rel, len(segs))
	}
	for _, seg := range segs {
		if seg == "" || seg == "." || seg == ".." || len(seg) > MaxSegmentLen {
			t.Fatalf("Parse(%q): Rel %q has segment %q", raw, rel, seg)
		}
	}
	for i := 0; i < len(rel); i++ {
		if c := rel[i]; c != '/' && !allowed[c] {
			t.Fatalf("Parse(%q): Rel %q contains %q", raw, rel, c)
		}
	}
	if strings.ContainsAny(rel, "\\\x00%?#:") {
		t.Fatalf("Parse(%q): Rel %q contains a forbidden byte", raw, rel)
	}
	if p.File != segs[len(segs)-1] {
		t.Fatalf("Parse(%q): File %q, last segment %q", raw, p.File, segs[len(segs)-1])
	}
	if (p.Kind == MetadataKind) != IsMetadata(rel) {
		t.Fatalf("Parse(%q): Kind %v, IsMetadata %v", raw, p.Kind, IsMetadata(rel))
	}
	switch p.Kind {
	case Artifact, MetadataKind:
		if p.Algo != 0 || p.Parent != "" || p.ParentKind != 0 {
			t.Fatalf("Parse(%q): %v with checksum fields %+v", raw, p.Kind, p)
		}
	case Checksum:
		if p.Algo.Ext() == "" || p.Parent+p.Algo.Ext() != rel {
			t.Fatalf("Parse(%q): checksum Algo %v Parent %q Rel %q", raw, p.Algo, p.Parent, rel)
		}
		q, err := Parse(p.Parent)
		if err != nil || q.Kind != p.ParentKind || q.Kind == Checksum {
			t.Fatalf("Parse(%q): Parent %q kind %v parses to %+v, %v", raw, p.Parent, p.ParentKind, q, err)
		}
		if q.GroupID != p.GroupID || q.ArtifactID != p.ArtifactID || q.Version != p.Version {
			t.Fatalf("Parse(%q): coordinates %+v differ from the parent's %+v", raw, p, q)
		}
	default:
		t.Fatalf("Parse(%q): Kind %d", raw, p.Kind)
	}
	if p.GroupID != strings.ReplaceAll(p.GroupPath, "/", ".") {
		t.Fatalf("Parse(%q): GroupID %q, GroupPath %q", raw, p.GroupID, p.GroupPath)
	}
	if p.GroupPath != "" && !strings.HasPrefix(rel, p.GroupPath+"/") {
		t.Fatalf("Parse(%q): GroupPath %q is not a prefix directory of %q", raw, p.GroupPath, rel)
	}
	if (p.ArtifactID != "" || p.Version != "") && p.GroupPath == "" {
		t.Fatalf("Parse(%q): artifact or version without a group: %+v", raw, p)
	}
	if p.Version != "" && p.ArtifactID == "" {
		t.Fatalf("Parse(%q): version without an artifact: %+v", raw, p)
	}
}
