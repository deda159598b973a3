package maven

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the expected merged.xml of the golden metadata cases")

// goldenCase is one directory of testdata/metadata: upstream-N.xml (N from 1; a
// missing N is an upstream without the document), an optional keep.txt ("N version"
// lines: refused for upstream N), and the expected merged.xml.
type goldenCase struct {
	name string
	docs []*Metadata
	raw  [][]byte // the upstream files, nil where missing
	keep map[[2]string]bool
}

func loadGolden(t testing.TB, dir string) goldenCase {
	t.Helper()
	c := goldenCase{name: filepath.Base(dir), keep: map[[2]string]bool{}}
	last := 0
	for n := 1; n <= 9; n++ {
		if _, err := os.Stat(filepath.Join(dir, fmt.Sprintf("upstream-%d.xml", n))); err == nil {
			last = n
		}
	}
	for n := 1; n <= last; n++ {
		data, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("upstream-%d.xml", n)))
		if errors.Is(err, os.ErrNotExist) {
			c.docs, c.raw = append(c.docs, nil), append(c.raw, nil)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		m, err := ParseMetadata(bytes.NewReader(data), 1<<20)
		if err != nil {
			t.Fatalf("%s/upstream-%d.xml: %v", c.name, n, err)
		}
		c.docs, c.raw = append(c.docs, m), append(c.raw, data)
	}
	if data, err := os.ReadFile(filepath.Join(dir, "keep.txt")); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if f := strings.Fields(line); len(f) == 2 && !strings.HasPrefix(line, "#") {
				c.keep[[2]string{f[0], f[1]}] = true
			}
		}
	}
	return c
}

func (c goldenCase) keepFunc() func(int, string) bool {
	if len(c.keep) == 0 {
		return nil
	}
	return func(i int, v string) bool { return !c.keep[[2]string{strconv.Itoa(i + 1), v}] }
}

// TestMetadataGolden merges each case and compares with merged.xml (reviewed by
// hand; -update rewrites them). It also checks that merging twice gives the same
// bytes, that the result re-parses to itself, and that the inputs are untouched.
func TestMetadataGolden(t *testing.T) {
	dirs := goldenDirs(t)
	if len(dirs) < 10 {
		t.Fatalf("golden cases: %v", dirs)
	}
	for _, dir := range dirs {
		c := loadGolden(t, dir)
		t.Run(c.name, func(t *testing.T) {
			before := deepCopyDocs(c.docs)
			got := MergeMetadata(c.docs, c.keepFunc()).Marshal()
			if !reflect.DeepEqual(before, c.docs) {
				t.Fatal("MergeMetadata modified its inputs")
			}
			if again := MergeMetadata(c.docs, c.keepFunc()).Marshal(); !bytes.Equal(got, again) {
				t.Fatalf("merging twice gave different bytes:\n%s\n%s", got, again)
			}
			reparsed, err := ParseMetadata(bytes.NewReader(got), 1<<20)
			if err != nil {
				t.Fatalf("merged document does not parse: %v", err)
			}
			if re := reparsed.Marshal(); !bytes.Equal(re, got) {
				t.Fatalf("Marshal(Parse(merged)) differs:\n%s\nvs\n%s", re, got)
			}
			path := filepath.Join(dir, "merged.xml")
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("merged:\n%s\nwant:\n%s", got, want)
			}
		})
	}
}

// TestMetadataCentralLayout: the made-up upstream documents are written in Maven
// Central's exact format (MetadataXpp3Writer's order and indentation), so Marshal of
// their parse gives them back byte for byte. The real-* ones come from Debian's Maven,
// whose writer orders <version> and <snapshot> differently (see gen.sh); Marshal
// puts them in Maven's model order, and re-parsing gives the same Metadata.
func TestMetadataCentralLayout(t *testing.T) {
	for _, dir := range goldenDirs(t) {
		c := loadGolden(t, dir)
		for n, m := range c.docs {
			if m == nil {
				continue
			}
			out := m.Marshal()
			if !strings.HasPrefix(c.name, "real-") && !bytes.Equal(out, c.raw[n]) {
				t.Errorf("%s/upstream-%d.xml: Marshal(Parse) differs:\n%s\nvs\n%s", c.name, n+1, out, c.raw[n])
			}
			m2, err := ParseMetadata(bytes.NewReader(out), 1<<20)
			if err != nil || !reflect.DeepEqual(m, m2) {
				t.Errorf("%s/upstream-%d.xml: Parse(Marshal(m)) = %+v, %v; want %+v", c.name, n+1, m2, err, m)
			}
		}
	}
}

func goldenDirs(t testing.TB) []string {
	t.Helper()
	entries, err := os.ReadDir("testdata/metadata")
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for _, e := range entries {
		if e.IsDir() {
			dirs = append(dirs, filepath.Join("testdata/metadata", e.Name()))
		}
	}
	return dirs
}

func deepCopyDocs(docs []*Metadata) []*Metadata {
	out := make([]*Metadata, len(docs))
	for i, d := range docs {
		if d == nil {
			continue
		}
		c := *d
		c.Plugins = append([]Plugin(nil), d.Plugins...)
		if v := d.Versioning; v != nil {
			cv := *v
			cv.Versions = append([]string(nil), v.Versions...)
			cv.SnapshotVersions = append([]SnapshotVersion(nil), v.SnapshotVersions...)
			if v.Snapshot != nil {
				s := *v.Snapshot
				cv.Snapshot = &s
			}
			c.Versioning = &cv
		}
		out[i] = &c
	}
	return out
}

func TestParseMetadataFields(t *testing.T) {
	doc := `<?xml version="1.0" encoding="UTF-8"?>
<!-- a comment -->
<metadata xmlns="http://maven.apache.org/METADATA/1.1.0" modelVersion=" 1.1.0 ">
  <groupId>
     org.example  </groupId>
  <artifactId><![CDATA[lib]]></artifactId>
  <unknown><deep><deeper>x</deeper></deep></unknown>
  <version>1.0-SNAPSHOT</version>
  <versioning>
    <latest>1.0-SNAPSHOT</latest>
    <snapshot><timestamp>20240102.030405</timestamp><buildNumber> 7 </buildNumber><localCopy>TRUE</localCopy></snapshot>
    <versions><version>1.0-SNAPSHOT</version><version>  </version><other/><version>1.0 &amp; more</version></versions>
    <lastUpdated>20240102030405</lastUpdated>
    <snapshotVersions>
      <snapshotVersion><classifier>sources</classifier><extension>jar</extension><value>1.0-20240102.030405-7</value><updated>20240102030405</updated></snapshotVersion>
      <snapshotVersion></snapshotVersion>
    </snapshotVersions>
  </versioning>
  <plugins><plugin><name>N</name><prefix>p</prefix><artifactId>p-maven-plugin</artifactId><goals/></plugin><plugin/></plugins>
</metadata>
<!-- trailing comment -->
`
	m, err := ParseMetadata(strings.NewReader(doc), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	want := &Metadata{
		ModelVersion: "1.1.0", GroupID: "org.example", ArtifactID: "lib", Version: "1.0-SNAPSHOT",
		Versioning: &Versioning{
			Latest:      "1.0-SNAPSHOT",
			Versions:    []string{"1.0-SNAPSHOT", "1.0 & more"},
			LastUpdated: "20240102030405",
			Snapshot:    &Snapshot{Timestamp: "20240102.030405", BuildNumber: 7, LocalCopy: true},
			SnapshotVersions: []SnapshotVersion{
				{Classifier: "sources", Extension: "jar", Value: "1.0-20240102.030405-7", Updated: "20240102030405"},
			},
		},
		Plugins: []Plugin{{Name: "N", Prefix: "p", ArtifactID: "p-maven-plugin"}},
	}
	if !reflect.DeepEqual(m, want) {
		t.Fatalf("got %+v\nwant %+v", m, want)
	}
	const wantXML = `<?xml version="1.0" encoding="UTF-8"?>
<metadata modelVersion="1.1.0">
  <groupId>org.example</groupId>
  <artifactId>lib</artifactId>
  <version>1.0-SNAPSHOT</version>
  <versioning>
    <latest>1.0-SNAPSHOT</latest>
    <snapshot>
      <timestamp>20240102.030405</timestamp>
      <buildNumber>7</buildNumber>
      <localCopy>true</localCopy>
    </snapshot>
    <versions>
      <version>1.0-SNAPSHOT</version>
      <version>1.0 &amp; more</version>
    </versions>
    <lastUpdated>20240102030405</lastUpdated>
    <snapshotVersions>
      <snapshotVersion>
        <classifier>sources</classifier>
        <extension>jar</extension>
        <value>1.0-20240102.030405-7</value>
        <updated>20240102030405</updated>
      </snapshotVersion>
    </snapshotVersions>
  </versioning>
  <plugins>
    <plugin>
      <name>N</name>
      <prefix>p</prefix>
      <artifactId>p-maven-plugin</artifactId>
    </plugin>
  </plugins>
</metadata>
`
	if got := string(m.Marshal()); got != wantXML {
		t.Fatalf("Marshal:\n%s\nwant:\n%s", got, wantXML)
	}
}

func TestParseMetadataLastElementWins(t *testing.T) {
	m, err := ParseMetadata(strings.NewReader(`<metadata><groupId>a</groupId><groupId>b</groupId>
		<versioning><versions><version>1</version></versions></versioning>
		<versioning><versions><version>2</version></versions><versions><version>3</version></versions></versioning></metadata>`), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if m.GroupID != "b" || !reflect.DeepEqual(m.Versioning.Versions, []string{"3"}) {
		t.Fatalf("got %+v %+v", m, m.Versioning)
	}
}

func TestParseMetadataEmptyStructures(t *testing.T) {
	m, err := ParseMetadata(strings.NewReader(`<metadata><versioning><snapshot><buildNumber>0</buildNumber></snapshot><versions/></versioning><plugins/></metadata>`), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(m, &Metadata{}) {
		t.Fatalf("got %+v, want an empty Metadata", m)
	}
	if got := string(m.Marshal()); got != "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<metadata/>\n" {
		t.Fatalf("Marshal of an empty Metadata: %q", got)
	}
}

// The parser's bounds: each hostile or broken document gets the right error, fast,
// and the reason quotes nothing of the document.
func TestParseMetadataBounds(t *testing.T) {
	laughs := `<?xml version="1.0"?>
<!DOCTYPE lolz [
 <!ENTITY lol "lol">
 <!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
 <!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">
 <!ENTITY lol4 "&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;">
 <!ENTITY lol5 "&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;">
 <!ENTITY lol6 "&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;">
 <!ENTITY lol7 "&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;">
 <!ENTITY lol8 "&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;">
 <!ENTITY lol9 "&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;">
]>
<metadata><groupId>&lol9;</groupId></metadata>`
	nested := strings.Repeat("<a>", 10000) + strings.Repeat("</a>", 10000)
	manyVersions := "<metadata><versioning><versions>" + strings.Repeat("<version>1</version>", MaxMetadataElements) + "</versions></versioning></metadata>"
	big := "<metadata><groupId>" + strings.Repeat("x", 2000) + "</groupId></metadata>"
	for _, c := range []struct {
		name, doc string
		max       int64
		want      error
	}{
		{"billion laughs", laughs, 1 << 20, ErrDoctype},
		{"external entity", `<?xml version="1.0"?><!DOCTYPE m [<!ENTITY xxe SYSTEM "file:///etc/passwd">]><metadata><groupId>&xxe;</groupId></metadata>`, 1 << 20, ErrDoctype},
		{"doctype without entities", `<!DOCTYPE metadata><metadata/>`, 1 << 20, ErrDoctype},
		{"doctype after the root", `<metadata/><!DOCTYPE metadata>`, 1 << 20, ErrDoctype},
		{"undeclared entity", `<metadata><groupId>&lol;</groupId></metadata>`, 1 << 20, ErrBadMetadata},
		{"over max", big, 1000, ErrMetadataTooLarge},
		{"over max by one byte", "<metadata/>", int64(len("<metadata/>")) - 1, ErrMetadataTooLarge},
		{"10k nested in root", "<metadata>" + nested + "</metadata>", 1 << 20, ErrBadMetadata},
		{"10k nested", nested, 1 << 20, ErrBadMetadata},
		{"too many elements", manyVersions, 1 << 30, ErrBadMetadata},
		{"non-metadata root", `<project><groupId>x</groupId></project>`, 1 << 20, ErrBadMetadata},
		{"truncated", `<metadata><groupId>org.ex`, 1 << 20, ErrBadMetadata},
		{"truncated after root start", `<?xml version="1.0"?><metadata>`, 1 << 20, ErrBadMetadata},
		{"unclosed tags", `<metadata><versioning></metadata>`, 1 << 20, ErrBadMetadata},
		{"html", "<!DOCTYPE html>\n<html><head><title>Login</title></head><body>sign in</body></html>", 1 << 20, ErrDoctype},
		{"html without doctype", "<html><body>Not Found</body></html>", 1 << 20, ErrBadMetadata},
		{"html not xml", "<html><body><br></body></html>", 1 << 20, ErrBadMetadata},
		{"json", `{"errors":[{"status":404}]}`, 1 << 20, ErrBadMetadata},
		{"empty", ``, 1 << 20, ErrBadMetadata},
		{"only a declaration", `<?xml version="1.0"?>`, 1 << 20, ErrBadMetadata},
		{"second root", `<metadata/><metadata/>`, 1 << 20, ErrBadMetadata},
		{"text after root", `<metadata/>garbage`, 1 << 20, ErrBadMetadata},
		{"text before root", `garbage<metadata/>`, 1 << 20, ErrBadMetadata},
		{"element in text field", `<metadata><groupId>a<b/>c</groupId></metadata>`, 1 << 20, ErrBadMetadata},
		{"bad buildNumber", `<metadata><versioning><snapshot><buildNumber>seven</buildNumber></snapshot></versioning></metadata>`, 1 << 20, ErrBadMetadata},
		{"buildNumber over int32", `<metadata><versioning><snapshot><buildNumber>2147483648</buildNumber></snapshot></versioning></metadata>`, 1 << 20, ErrBadMetadata},
		{"latin-1", `<?xml version="1.0" encoding="ISO-8859-1"?><metadata/>`, 1 << 20, ErrBadMetadata},
		{"xml 1.1", `<?xml version="1.1"?><metadata/>`, 1 << 20, ErrBadMetadata},
		{"invalid utf-8", "<metadata><groupId>\xff</groupId></metadata>", 1 << 20, ErrBadMetadata},
		{"control character", "<metadata><groupId>\x01</groupId></metadata>", 1 << 20, ErrBadMetadata},
	} {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			m, err := ParseMetadata(strings.NewReader(c.doc), c.max)
			if err == nil {
				t.Fatalf("parsed: %+v", m)
			}
			if !errors.Is(err, c.want) || !errors.Is(err, ErrBadMetadata) {
				t.Fatalf("error %v, want %v (and ErrBadMetadata)", err, c.want)
			}
			var me *MetadataError
			if !errors.As(err, &me) || me.Reason() == "" {
				t.Fatalf("error %v is not a *MetadataError with a reason", err)
			}
			for _, leak := range []string{"lol", "xxe", "passwd", "project", "html", "Login", "garbage", "seven", "ISO", "x" + "xxx", "errors"} {
				if strings.Contains(err.Error(), leak) {
					t.Fatalf("error %q quotes the document (%q)", err, leak)
				}
			}
			t.Logf("refused in %v", time.Since(start)) // fast: see -v; no timed assertion

		})
	}
}

// errReader fails after its data.
type errReader struct {
	data []byte
	err  error
}

func (r *errReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, r.err
	}
	n := copy(p, r.data)
	r.data = r.data[n:]
	return n, nil
}

func TestParseMetadataReadError(t *testing.T) {
	_, err := ParseMetadata(&errReader{[]byte("<metadata><groupId>a"), io.ErrUnexpectedEOF}, 1<<20)
	if !errors.Is(err, ErrBadMetadata) || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("got %v, want ErrBadMetadata wrapping io.ErrUnexpectedEOF", err)
	}
	if errors.Is(err, ErrMetadataTooLarge) || errors.Is(err, ErrDoctype) {
		t.Fatalf("a read error is neither too large nor a doctype: %v", err)
	}
}

func TestMarshalEscaping(t *testing.T) {
	m := &Metadata{
		ModelVersion: "1\"\t\n<&>",
		GroupID:      "  a<b>&c\"d'e  ",
		ArtifactID:   "x\ry\x00z\xff",
		Versioning:   &Versioning{Versions: []string{"]]>", " "}, Snapshot: &Snapshot{}},
		Plugins:      []Plugin{{Name: " "}},
	}
	out := m.Marshal()
	const want = `<?xml version="1.0" encoding="UTF-8"?>
<metadata modelVersion="1&quot;&#9;&#10;&lt;&amp;&gt;">
  <groupId>a&lt;b&gt;&amp;c"d'e</groupId>
  <artifactId>x&#13;y` + "\uFFFD" + `z` + "\uFFFD" + `</artifactId>
  <versioning>
    <versions>
      <version>]]&gt;</version>
    </versions>
  </versioning>
</metadata>
`
	if string(out) != want {
		t.Fatalf("got:\n%s\nwant:\n%s", out, want)
	}
	m2, err := ParseMetadata(bytes.NewReader(out), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if m2.ModelVersion != "1\"\t\n<&>" || m2.ArtifactID != "x\ry\uFFFDz\uFFFD" {
		t.Fatalf("escaped values did not come back: %q %q", m2.ModelVersion, m2.ArtifactID)
	}
	if !bytes.Equal(m2.Marshal(), out) {
		t.Fatal("Marshal(Parse(Marshal(m))) != Marshal(m)")
	}
}

func TestMergeMetadataRules(t *testing.T) {
	if MergeMetadata(nil, nil) != nil || MergeMetadata([]*Metadata{nil, nil}, nil) != nil {
		t.Fatal("merging no document must give nil")
	}

	a := &Metadata{GroupID: "g", Versioning: &Versioning{
		Versions: []string{"1.0", "1.0", "2.0", " 3.0 ", ""}, Latest: "3.0", LastUpdated: "20240101000000",
	}}
	b := &Metadata{ArtifactID: "a", Versioning: &Versioning{
		Versions: []string{"2.0", "2.0.0", "4.0-SNAPSHOT"}, Latest: "4.0-SNAPSHOT", Release: "2.0", LastUpdated: "20240102000000",
	}}
	calls := map[string]int{}
	m := MergeMetadata([]*Metadata{a, nil, b}, func(i int, v string) bool {
		calls[fmt.Sprintf("%d %s", i, v)]++
		return !(i == 2 && v == "4.0-SNAPSHOT")
	})
	v := m.Versioning
	if m.GroupID != "g" || m.ArtifactID != "a" {
		t.Errorf("coordinates: %+v", m)
	}
	if !reflect.DeepEqual(v.Versions, []string{"1.0", "2.0", "3.0"}) {
		t.Errorf("versions %q", v.Versions)
	}
	// b is newer but its latest was refused: a's latest; b's release.
	if v.Latest != "3.0" || v.Release != "2.0" || v.LastUpdated != "20240102000000" {
		t.Errorf("latest %q release %q lastUpdated %q", v.Latest, v.Release, v.LastUpdated)
	}
	for k, n := range calls {
		if n != 1 {
			t.Errorf("keep(%s) asked %d times", k, n)
		}
	}
	for _, k := range []string{"0 1.0", "0 2.0", "0 3.0", "2 2.0", "2 2.0.0", "2 4.0-SNAPSHOT"} {
		if calls[k] != 1 {
			t.Errorf("keep(%s) not asked", k)
		}
	}
	if len(calls) != 6 {
		t.Errorf("keep asked about %v", calls)
	}

	// Everything refused: no versions, no latest, no release; lastUpdated stays.
	m = MergeMetadata([]*Metadata{a, b}, func(int, string) bool { return false })
	if v := m.Versioning; v == nil || len(v.Versions) != 0 || v.Latest != "" || v.Release != "" || v.LastUpdated != "20240102000000" {
		t.Errorf("all refused: %+v", v)
	}

	// The result shares no memory with the inputs.
	m = MergeMetadata([]*Metadata{b}, nil)
	m.Versioning.Versions[0] = "changed"
	if b.Versioning.Versions[0] != "2.0" {
		t.Error("the result aliases an input")
	}
}

func TestValidLastUpdated(t *testing.T) {
	for s, want := range map[string]bool{
		"20240102030405": true, "20240229235959": true, "20230229000000": false, "20241301000000": false,
		"2024010203040": false, "202401020304050": false, "2024-01-02T03:": false, "": false, "20240102030460": false,
		"\uff12\uff10\uff12\uff14\uff10\uff11\uff10\uff12\uff10\uff13\uff10\uff14\uff10\uff15": false,
	} {
		if got := validLastUpdated(s); got != want {
			t.Errorf("validLastUpdated(%q) = %v", s, got)
		}
	}
}

func FuzzParseMetadata(f *testing.F) {
	dirs, _ := filepath.Glob("testdata/metadata/*/*.xml")
	for _, p := range dirs {
		if data, err := os.ReadFile(p); err == nil {
			f.Add(data)
		}
	}
	f.Add([]byte(`<metadata modelVersion="x"><versioning><snapshot><buildNumber>-3</buildNumber><localCopy>true</localCopy></snapshot></versioning></metadata>`))
	f.Add([]byte(`<!DOCTYPE x><metadata/>`))
	f.Add([]byte("<metadata><groupId>a&#13;b&#x1F600;</groupId></metadata>"))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ParseMetadata(bytes.NewReader(data), 1<<16)
		if err != nil {
			var me *MetadataError
			if !errors.Is(err, ErrBadMetadata) || !errors.As(err, &me) || me.Reason() == "" {
				t.Fatalf("error %v is not a *MetadataError wrapping ErrBadMetadata", err)
			}
			return
		}
		out := m.Marshal()
		m2, err := ParseMetadata(bytes.NewReader(out), 1<<20)
		if err != nil {
			t.Fatalf("re-marshalled document does not parse: %v\n%s", err, out)
		}
		if !reflect.DeepEqual(m, m2) {
			t.Fatalf("Parse(Marshal(m)) != m:\n%+v\n%+v", m, m2)
		}
		if out2 := m2.Marshal(); !bytes.Equal(out, out2) {
			t.Fatalf("Marshal not stable:\n%s\n%s", out, out2)
		}
		// Merging a document with itself is deterministic and parses.
		merged := MergeMetadata([]*Metadata{m, nil, m}, nil).Marshal()
		if !bytes.Equal(merged, MergeMetadata([]*Metadata{m, nil, m}, nil).Marshal()) {
			t.Fatal("merge not deterministic")
		}
		if _, err := ParseMetadata(bytes.NewReader(merged), 1<<20); err != nil {
			t.Fatalf("merged document does not parse: %v", err)
		}
	})
}

// BenchmarkMergeMetadata: three upstreams of 500 versions each, overlapping by half,
// parsed beforehand (the proxy caches parsed documents or not: see the Parse one).
func BenchmarkMergeMetadata(b *testing.B) {
	docs := benchDocs(3, 500)
	b.ReportAllocs()
	for b.Loop() {
		MergeMetadata(docs, func(int, string) bool { return true })
	}
}

// BenchmarkMergeMetadataParseMarshal: the same, from the upstreams' bytes to the
// merged bytes.
func BenchmarkMergeMetadataParseMarshal(b *testing.B) {
	var raw [][]byte
	for _, d := range benchDocs(3, 500) {
		raw = append(raw, d.Marshal())
	}
	b.ReportAllocs()
	for b.Loop() {
		docs := make([]*Metadata, len(raw))
		for i, r := range raw {
			d, err := ParseMetadata(bytes.NewReader(r), 1<<20)
			if err != nil {
				b.Fatal(err)
			}
			docs[i] = d
		}
		MergeMetadata(docs, nil).Marshal()
	}
}

func benchDocs(n, per int) []*Metadata {
	var docs []*Metadata
	for u := 0; u < n; u++ {
		v := &Versioning{LastUpdated: fmt.Sprintf("202401%02d000000", u+1)}
		for i := 0; i < per; i++ {
			k := u*per/2 + i
			s := fmt.Sprintf("%d.%d.%d", k/100, k/10%10, k%10)
			switch k % 7 {
			case 0:
				s += "-SNAPSHOT"
			case 3:
				s += "-rc" + strconv.Itoa(k%4)
			}
			v.Versions = append(v.Versions, s)
		}
		v.Latest, v.Release = v.Versions[len(v.Versions)-1], v.Versions[len(v.Versions)-2]
		docs = append(docs, &Metadata{GroupID: "org.example", ArtifactID: "lib", Versioning: v})
	}
	return docs
}

// FuzzParseMetadataFast: the fast path for plain <version> elements reads every
// document exactly as the decoder alone does: the same Metadata, or the same error,
// under the same limits.
func FuzzParseMetadataFast(f *testing.F) {
	dirs, _ := filepath.Glob("testdata/metadata/*/*.xml")
	for _, p := range dirs {
		if data, err := os.ReadFile(p); err == nil {
			f.Add(data, uint16(0), uint16(0))
		}
	}
	for _, doc := range []string{
		"<metadata><versioning><versions>\n  <version>1</version>\n  <version> 2 </version><!-- c --><version>3</version>\r\n<version>4</version></versions></versioning></metadata>",
		"<metadata><versioning><versions><version>1&amp;2</version><version><![CDATA[3]]></version><version>4\r</version><version>5\n6</version></versions></versioning></metadata>",
		"<metadata><versioning><versions/><versions><version/><version></version><version>  </version><x><version>9</version></x><version>7</version ><version>8</version></versions></versioning></metadata>",
		"<metadata><versioning><versions><version>1</version><version>2</versions></versioning></metadata>",
		"<metadata><versioning><versions><version>1</version><version>\xff</version><version>3</version></versions></versioning></metadata>",
		"<metadata><versioning><versions><version>1</version><version>2</version></version></versions></versioning></metadata>",
		"<m:metadata xmlns:m='x'><m:versioning><m:versions><m:version>1</m:version><version>2</version></m:versions></m:versioning></m:metadata>",
		"<metadata><versioning><versions><version>a]]b</version><version>x>y</version><version>\t1\t</version></versions></versioning></metadata>\n<!-- end -->",
		"<metadata><versioning><versions>text<version>1</version>more<version>2</version></versions></versioning></metadata>",
		"<metadata><versioning><versions><version>1</version>",
	} {
		f.Add([]byte(doc), uint16(0), uint16(0))
		f.Add([]byte(doc), uint16(3), uint16(12))
	}
	f.Fuzz(func(t *testing.T, data []byte, versions, elements uint16) {
		lim := MetadataLimits{Bytes: 1 << 16, Versions: int(versions), Elements: int(elements)}
		fast, ferr := parseMetadata(data, lim, true)
		slow, serr := parseMetadata(data, lim, false)
		if (ferr == nil) != (serr == nil) || ferr != nil && ferr.Error() != serr.Error() {
			t.Fatalf("fast path: %v; decoder alone: %v", ferr, serr)
		}
		if !reflect.DeepEqual(fast, slow) {
			t.Fatalf("fast path:\n%+v\ndecoder alone:\n%+v", fast, slow)
		}
	})
}

// TestParseMetadataLimits: a document over a limit of MetadataLimits is refused as
// too large, naming the bound; one at the limit is read. Versions in the plain form
// (the fast path) and in a form only the decoder reads count alike.
func TestParseMetadataLimits(t *testing.T) {
	doc := func(n int, plain bool) []byte {
		var b strings.Builder
		b.WriteString("<metadata><versioning><versions>\n")
		for i := 0; i < n; i++ {
			if plain {
				fmt.Fprintf(&b, "  <version>1.%d</version>\n", i)
			} else {
				fmt.Fprintf(&b, "  <version>1.<!-- -->%d</version>\n", i)
			}
		}
		b.WriteString("</versions></versioning></metadata>\n")
		return []byte(b.String())
	}
	for _, plain := range []bool{true, false} {
		at := doc(100, plain)
		over := doc(101, plain)
		for _, c := range []struct {
			name   string
			data   []byte
			lim    MetadataLimits
			reason string // "" when it must parse
		}{
			{"versions at the limit", at, MetadataLimits{Bytes: 1 << 20, Versions: 100}, ""},
			{"versions over", over, MetadataLimits{Bytes: 1 << 20, Versions: 100}, "more than 100 versions"},
			{"elements at the limit", at, MetadataLimits{Bytes: 1 << 20, Elements: 103}, ""},
			{"elements over", over, MetadataLimits{Bytes: 1 << 20, Elements: 103}, "more than 103 elements"},
			{"bytes at the limit", at, MetadataLimits{Bytes: int64(len(at))}, ""},
			{"bytes over", at, MetadataLimits{Bytes: int64(len(at)) - 1}, "document larger than the limit"},
		} {
			t.Run(fmt.Sprintf("%s plain=%v", c.name, plain), func(t *testing.T) {
				m, err := ParseMetadataBytes(c.data, c.lim)
				if c.reason == "" {
					if err != nil || len(m.Versioning.Versions) != 100 {
						t.Fatalf("got %v", err)
					}
					return
				}
				var me *MetadataError
				if !errors.Is(err, ErrMetadataTooLarge) || !errors.As(err, &me) || me.Reason() != c.reason {
					t.Fatalf("got %v, want ErrMetadataTooLarge %q", err, c.reason)
				}
			})
		}
	}
}

// TestMarshalLimited: a merged document is rendered only within its limits.
func TestMarshalLimited(t *testing.T) {
	m := MergeMetadata(benchDocs(2, 50), nil) // 75 versions
	want := m.Marshal()
	for _, c := range []struct {
		name   string
		lim    MetadataLimits
		reason string
	}{
		{"within", MetadataLimits{Bytes: int64(len(want)), Versions: 75, Elements: 90}, ""},
		{"versions", MetadataLimits{Bytes: 1 << 20, Versions: 74}, "more than 74 versions"},
		{"elements", MetadataLimits{Bytes: 1 << 20, Elements: 80}, "more than 80 elements"},
		{"bytes", MetadataLimits{Bytes: int64(len(want)) - 1}, "document larger than the limit"},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, err := m.MarshalLimited(c.lim)
			if c.reason == "" {
				if err != nil || !bytes.Equal(out, want) {
					t.Fatalf("got %v", err)
				}
				return
			}
			var me *MetadataError
			if out != nil || !errors.Is(err, ErrMetadataTooLarge) || !errors.As(err, &me) || me.Reason() != c.reason {
				t.Fatalf("got %d bytes, %v; want ErrMetadataTooLarge %q", len(out), err, c.reason)
			}
		})
	}
}

// TestMetadataCheckPath: a document fits its path when its groupId and artifactId
// (those it has) agree with either reading of the path; otherwise it is misplaced,
// with a reason that quotes nothing of the document.
func TestMetadataCheckPath(t *testing.T) {
	for _, c := range []struct {
		path, group, artifact string
		reason                string // "" when it fits
	}{
		{"org/example/lib/maven-metadata.xml", "org.example", "lib", ""},
		{"org/example/lib/maven-metadata.xml", " org.example\n", "lib ", ""},
		{"org/example/lib/maven-metadata.xml", "", "", ""},
		{"org/example/lib/maven-metadata.xml", "org.example", "", ""},
		{"org/example/lib/maven-metadata.xml", "", "lib", ""},
		{"org/example/lib/maven-metadata.xml", "org.example.lib", "", ""}, // the group org.example.lib
		{"org/apache/maven/plugins/maven-metadata.xml", "org.apache.maven.plugins", "", ""},
		{"junit/maven-metadata.xml", "junit", "", ""},
		{"maven-metadata.xml", "", "", ""},
		{"org/example/lib/maven-metadata.xml.sha1", "org.example", "lib", ""},
		{"org/example/lib/maven-metadata.xml", "org.example", "other", "artifactId differs from the path"},
		{"org/example/lib/maven-metadata.xml", "org.other", "lib", "groupId differs from the path"},
		{"org/example/lib/maven-metadata.xml", "org.other", "", "groupId differs from the path"},
		{"org/example/lib/maven-metadata.xml", "org.example.lib", "lib", "groupId differs from the path"},
		{"org/example/lib/maven-metadata.xml", "org/example", "lib", "groupId differs from the path"},
		{"org/example/lib/maven-metadata.xml", "ORG.EXAMPLE", "lib", "groupId differs from the path"},
		{"junit/maven-metadata.xml", "junit", "junit", "artifactId differs from the path"},
		{"junit/maven-metadata.xml", "other", "", "groupId differs from the path"},
		{"maven-metadata.xml", "org.example", "", "groupId differs from the path"},
	} {
		p, err := Parse(c.path)
		if err != nil {
			t.Fatal(err)
		}
		err = (&Metadata{GroupID: c.group, ArtifactID: c.artifact}).CheckPath(p)
		var me *MetadataError
		switch {
		case c.reason == "" && err != nil:
			t.Errorf("%s with %q:%q: %v", c.path, c.group, c.artifact, err)
		case c.reason != "" && (!errors.Is(err, ErrMetadataMisplaced) || !errors.Is(err, ErrBadMetadata) || !errors.As(err, &me) || me.Reason() != c.reason):
			t.Errorf("%s with %q:%q: %v, want ErrMetadataMisplaced %q", c.path, c.group, c.artifact, err, c.reason)
		}
	}
}
