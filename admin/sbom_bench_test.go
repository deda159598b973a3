package admin

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"registryd/auth"
	"registryd/config"
	"registryd/store"
)

// The SBOM memory benchmark: a realistic large CycloneDX upload (cdxgen-like
// components with purls, hashes, licenses, properties, evidence, external
// references and nested components, the dependency graph and vulnerabilities)
// is PUT through the admin handler onto a real store, and the peak heap of
// the upload is reported next to the SBOM size.
//
//	go test -run '^$' -bench BenchmarkSBOM -benchtime 3x ./admin/

// countingWriter counts what goes through it.
type countingWriter struct {
	w *bufio.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

func (c *countingWriter) str(s string) { _, _ = c.w.WriteString(s); c.n += int64(len(s)) }

// writeLargeSBOM writes a deterministic CycloneDX 1.5 SBOM of about size
// bytes and returns how many components (nested ones included) it lists.
// Dense components are what cyclonedx-gomod, cyclonedx-npm or syft write
// for big trees (name, version, purl, bom-ref, a license, a few properties:
// about 450 bytes); rich ones are cdxgen's with hashes, descriptions,
// external references and evidence (about 2 KB).
func writeLargeSBOM(w io.Writer, size int64, dense bool) (int, error) {
	bw := bufio.NewWriterSize(w, 64<<10)
	cw := &countingWriter{w: bw}
	rng := rand.New(rand.NewPCG(1, 2))
	hex := func(n int) string {
		const digits = "0123456789abcdef"
		b := make([]byte, n)
		for i := range b {
			b[i] = digits[rng.IntN(16)]
		}
		return string(b)
	}
	words := strings.Fields("the a library for parsing and writing data with fast streaming support of common " +
		"formats utilities collections logging http client server json xml yaml crypto testing")
	sentence := func(n int) string {
		var sb strings.Builder
		for i := 0; i < n; i++ {
			if i > 0 {
				sb.WriteByte(' ')
			}
			sb.WriteString(words[rng.IntN(len(words))])
		}
		return sb.String()
	}
	licenses := []string{`[{"license":{"id":"Apache-2.0"}}]`, `[{"license":{"id":"MIT","url":"https://opensource.org/licenses/MIT"}}]`,
		`[{"expression":"(MIT OR Apache-2.0) AND BSD-3-Clause"}]`, `[{"license":{"name":"Bouncy Castle Licence"}}]`,
		`[{"license":{"id":"EPL-2.0"}},{"license":{"id":"GPL-2.0-with-classpath-exception"}}]`}
	type eco struct{ purl, file, prop string }
	ecos := []eco{
		{"maven", "/builds/acme/monorepo/services/api/pom.xml", "cdx:maven:component_scope"},
		{"npm", "/builds/acme/monorepo/web/package-lock.json", "cdx:npm:package:development"},
		{"pypi", "/builds/acme/monorepo/ml/requirements.txt", "cdx:pypi:requiresDist"},
		{"golang", "/builds/acme/monorepo/tools/go.mod", "cdx:go:indirect"},
	}
	var refs []string
	var component func(i int, nested bool)
	component = func(i int, nested bool) {
		e := ecos[i%len(ecos)]
		group := "org.example.g" + strconv.Itoa(i%97)
		name := "component-" + strconv.Itoa(i) + "-" + sentence(1)
		version := fmt.Sprintf("%d.%d.%d", rng.IntN(10), rng.IntN(30), rng.IntN(100))
		purl := "pkg:" + e.purl + "/" + group + "/" + name + "@" + version
		if e.purl == "maven" {
			purl += "?type=jar"
		}
		refs = append(refs, purl)
		if dense {
			cw.str(`{"type":"library","bom-ref":"` + purl + `","group":"` + group + `","name":"` + name + `","version":"` + version +
				`","licenses":` + licenses[i%len(licenses)] + `,"purl":"` + purl + `","properties":[{"name":"SrcFile","value":"` + e.file +
				`"},{"name":"` + e.prop + `","value":"` + sentence(1) + `"}]`)
		} else {
			cw.str(`{"group":"` + group + `","name":"` + name + `","version":"` + version + `","description":"` + sentence(12) +
				`","scope":"required","hashes":[{"alg":"SHA-512","content":"` + hex(128) + `"},{"alg":"SHA-1","content":"` + hex(40) +
				`"}],"licenses":` + licenses[i%len(licenses)] + `,"purl":"` + purl + `","type":"library","bom-ref":"` + purl +
				`","externalReferences":[{"type":"vcs","url":"https://github.com/example/` + name + `"},{"type":"website","url":"https://example.org/` +
				name + `"},{"type":"distribution","url":"https://repo.example.org/` + group + `/` + name + `/` + version + `"}]` +
				`,"properties":[{"name":"SrcFile","value":"` + e.file + `"},{"name":"` + e.prop + `","value":"` + sentence(2) +
				`"},{"name":"ResolvedUrl","value":"https://repo.example.org/` + name + `-` + version + `.tgz"},{"name":"Namespaces","value":"` +
				sentence(40) + `"}],"evidence":{"identity":{"field":"purl","confidence":1,"methods":[{"technique":"manifest-analysis","confidence":1,"value":"` +
				e.file + `"}]},"occurrences":[{"location":"` + e.file + `"}]}`)
		}
		if !nested && i%10 == 0 {
			cw.str(`,"components":[`)
			for j := 0; j < 2; j++ {
				if j > 0 {
					cw.str(",")
				}
				component(i*1000+j+1_000_000, true)
			}
			cw.str(`]`)
		}
		cw.str(`}`)
	}
	cw.str(`{"bomFormat":"CycloneDX","specVersion":"1.5","serialNumber":"urn:uuid:3e671687-395b-41f5-a30f-a58921a69b79","version":1,` +
		`"metadata":{"timestamp":"2026-11-21T10:04:05Z","tools":{"components":[{"group":"@cyclonedx","name":"cdxgen","version":"10.9.4","type":"application"}]},` +
		`"component":{"name":"monorepo","version":"1.0.0","type":"application","bom-ref":"pkg:generic/monorepo@1.0.0"}},"components":[`)
	// Components take about 70 % of the document, the dependency graph and
	// the vulnerabilities the rest.
	for i := 0; cw.n < size*70/100; i++ {
		if i > 0 {
			cw.str(",")
		}
		component(i, false)
	}
	cw.str(`],"dependencies":[`)
	for i, ref := range refs {
		if i > 0 {
			cw.str(",")
		}
		cw.str(`{"ref":"` + ref + `","dependsOn":[`)
		for j := 0; j < 1+i%5; j++ {
			if j > 0 {
				cw.str(",")
			}
			cw.str(`"` + refs[rng.IntN(len(refs))] + `"`)
		}
		cw.str(`]}`)
		if cw.n >= size*95/100 {
			break
		}
	}
	cw.str(`],"vulnerabilities":[`)
	for i := 0; cw.n < size-4; i++ {
		if i > 0 {
			cw.str(",")
		}
		cw.str(`{"bom-ref":"vuln-` + strconv.Itoa(i) + `","id":"CVE-2026-` + strconv.Itoa(10000+i) + `","source":{"name":"NVD"},` +
			`"ratings":[{"severity":"` + store.Severities[i%4] + `","method":"CVSSv31","score":7.5}],"description":"` + sentence(30) +
			`","affects":[{"ref":"` + refs[(i*37)%len(refs)] + `"},{"ref":"` + refs[(i*91)%len(refs)] + `"}]}`)
	}
	cw.str(`]}`)
	return len(refs), bw.Flush()
}

// largeSBOM writes an SBOM of about size bytes into a temp file.
func largeSBOM(tb testing.TB, size int64, dense bool) (path string, n int64, comps int) {
	tb.Helper()
	path = filepath.Join(tb.TempDir(), "sbom.json")
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	if comps, err = writeLargeSBOM(f, size, dense); err != nil {
		tb.Fatal(err)
	}
	fi, err := f.Stat()
	if err != nil {
		tb.Fatal(err)
	}
	return path, fi.Size(), comps
}

// heapPeak samples the heap while an upload runs. It reads runtime/metrics,
// which does not stop the world, every 200µs.
type heapPeak struct {
	stop chan struct{}
	done chan struct{}
	mu   sync.Mutex
	// inuse is the peak of heap spans in use (objects, live or not yet
	// swept, and the free space inside their spans): runtime.MemStats.HeapInuse.
	inuse uint64
	// mapped is the peak of heap memory obtained from the OS and not
	// returned: what the heap adds to RSS.
	mapped uint64
}

var heapSamples = []string{
	"/memory/classes/heap/objects:bytes",
	"/memory/classes/heap/unused:bytes",
	"/memory/classes/heap/free:bytes",
}

func readHeap(s []rtmetrics.Sample) (inuse, mapped uint64) {
	rtmetrics.Read(s)
	inuse = s[0].Value.Uint64() + s[1].Value.Uint64()
	return inuse, inuse + s[2].Value.Uint64()
}

// startHeapPeak settles the heap, then samples until stop. Peaks are
// reported above the settled baseline.
func startHeapPeak() (*heapPeak, uint64, uint64) {
	runtime.GC()
	debug.FreeOSMemory()
	s := make([]rtmetrics.Sample, len(heapSamples))
	for i, n := range heapSamples {
		s[i].Name = n
	}
	baseInuse, baseMapped := readHeap(s)
	p := &heapPeak{stop: make(chan struct{}), done: make(chan struct{}), inuse: baseInuse, mapped: baseMapped}
	go func() {
		defer close(p.done)
		t := time.NewTicker(200 * time.Microsecond)
		defer t.Stop()
		for {
			in, mp := readHeap(s)
			p.mu.Lock()
			p.inuse, p.mapped = max(p.inuse, in), max(p.mapped, mp)
			p.mu.Unlock()
			select {
			case <-p.stop:
				return
			case <-t.C:
			}
		}
	}()
	return p, baseInuse, baseMapped
}

func (p *heapPeak) end() (inuse, mapped uint64) {
	close(p.stop)
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.inuse, p.mapped
}

// peakRSS resets the kernel's high-water mark of this process (Linux
// clear_refs 5) and returns a function that reports how far RSS rose above
// where it stood. ok is false where the kernel does not offer it.
func peakRSS() (rise func() int64, ok bool) {
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		return nil, false
	}
	base, ok := procStatus("VmRSS")
	if !ok {
		return nil, false
	}
	return func() int64 {
		hwm, _ := procStatus("VmHWM")
		return hwm - base
	}, true
}

func procStatus(field string) (int64, bool) {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10, err == nil
		}
	}
	return 0, false
}

// sbomServer is an admin server on a real store with one project, and the
// root token that may upload to it.
func sbomServer(tb testing.TB, mutate func(*config.Config)) (srv *Server, path string, token string) {
	tb.Helper()
	st, err := store.Open(tb.TempDir(), store.Options{SecretKey: make([]byte, 32)})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { st.Close() })
	cfg := config.Default()
	if mutate != nil {
		mutate(&cfg)
	}
	srv, err = New(Deps{Config: cfg, Store: st, Auth: auth.New(st, cfg, time.Now), Registerer: prometheus.NewRegistry()})
	if err != nil {
		tb.Fatal(err)
	}
	token = "rdpat-sbom-bench-root-token"
	if _, err := st.EnsureRoot(token); err != nil {
		tb.Fatal(err)
	}
	root, err := st.UserByUsername("root")
	if err != nil {
		tb.Fatal(err)
	}
	g, err := st.CreateGroup(store.NewGroup{Name: "acme", Path: "acme", Visibility: store.Private})
	if err != nil {
		tb.Fatal(err)
	}
	p, err := st.CreateProject(store.NewProject{Name: "app", Path: "app", NamespaceID: g.ID,
		Visibility: store.Private, CreatorID: root.ID})
	if err != nil {
		tb.Fatal(err)
	}
	return srv, "/api/v4/projects/" + strconv.FormatInt(p.ID, 10) + "/dependencies", token
}

// uploadFile PUTs the SBOM at file through srv, streamed from disk.
func uploadFile(tb testing.TB, srv *Server, path, token, file string) *httptest.ResponseRecorder {
	tb.Helper()
	f, err := os.Open(file)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	req := httptest.NewRequest(http.MethodPut, path, f)
	if fi, err := f.Stat(); err == nil {
		req.ContentLength = fi.Size()
	}
	req.Header.Set("PRIVATE-TOKEN", token)
	req.Header.Set("Content-Type", "application/vnd.cyclonedx+json")
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, req)
	return rec
}

// sbomUploadPeak uploads file once and returns the peak rise of the heap in
// use and of the heap mapped from the OS, and of RSS (-1 when unknown).
func sbomUploadPeak(tb testing.TB, srv *Server, path, token, file string) (inuse, mapped, rss int64) {
	tb.Helper()
	p, baseInuse, baseMapped := startHeapPeak()
	rise, ok := peakRSS()
	rec := uploadFile(tb, srv, path, token, file)
	peakInuse, peakMapped := p.end()
	rss = -1
	if ok {
		rss = rise()
	}
	if rec.Code != http.StatusOK {
		tb.Fatalf("upload: status %d: %s", rec.Code, rec.Body)
	}
	return int64(peakInuse - baseInuse), int64(peakMapped - baseMapped), rss
}

// BenchmarkSBOMUpload PUTs a 50 MiB SBOM of dense components through the
// handler onto a real store and reports, per upload, the peak heap and RSS
// rise and their ratio to the SBOM's size.
func BenchmarkSBOMUpload(b *testing.B) {
	benchSBOMUpload(b, 50<<20, true)
}

// BenchmarkSBOMUploadRich is the same with cdxgen-like rich components:
// fewer of them for the same size.
func BenchmarkSBOMUploadRich(b *testing.B) {
	benchSBOMUpload(b, 50<<20, false)
}

// BenchmarkSBOMUpload8MiB is the dense one smaller, to see how the peak
// scales.
func BenchmarkSBOMUpload8MiB(b *testing.B) {
	benchSBOMUpload(b, 8<<20, true)
}

func benchSBOMUpload(b *testing.B, size int64, dense bool) {
	file, n, comps := largeSBOM(b, size, dense)
	srv, path, token := sbomServer(b, func(c *config.Config) { c.Admin.MaxSBOMBytes = config.ByteSize(2 * n) })
	b.Logf("SBOM %.1f MiB, %d components", float64(n)/(1<<20), comps)
	b.SetBytes(n)
	b.ReportAllocs()
	var inuse, mapped, rss int64
	for b.Loop() {
		in, mp, r := sbomUploadPeak(b, srv, path, token, file)
		inuse, mapped, rss = max(inuse, in), max(mapped, mp), max(rss, r)
	}
	mib := float64(1 << 20)
	b.ReportMetric(float64(n)/mib, "sbom-MiB")
	b.ReportMetric(float64(inuse)/mib, "peak-heap-MiB")
	b.ReportMetric(float64(inuse)/float64(n), "peak-heap/size")
	b.ReportMetric(float64(mapped)/float64(n), "heap-mapped/size")
	if rss >= 0 {
		b.ReportMetric(float64(rss)/mib, "peak-rss-rise-MiB")
		b.ReportMetric(float64(rss)/float64(n), "peak-rss/size")
	}
}

// BenchmarkSBOMParse is the reading alone, without the store.
func BenchmarkSBOMParse(b *testing.B) {
	file, n, _ := largeSBOM(b, 50<<20, true)
	b.SetBytes(n)
	b.ReportAllocs()
	var inuse int64
	for b.Loop() {
		f, err := os.Open(file)
		if err != nil {
			b.Fatal(err)
		}
		p, base, _ := startHeapPeak()
		res, err := parseSBOM(f, sbomOptions{})
		peak, _ := p.end()
		f.Close()
		if err != nil {
			b.Fatal(err)
		}
		runtime.KeepAlive(res)
		inuse = max(inuse, int64(peak-base))
	}
	b.ReportMetric(float64(inuse)/(1<<20), "peak-heap-MiB")
	b.ReportMetric(float64(inuse)/float64(n), "peak-heap/size")
}
