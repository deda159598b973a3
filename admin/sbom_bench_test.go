package admin

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"registryd/auth"
	"registryd/internal/boltstore"
	"registryd/sbom/sbomtest"
	"registryd/store"
)

// The SBOM memory benchmark: a realistic large CycloneDX upload (cdxgen-like
// components with purls, hashes, licenses, properties, evidence, external
// references and nested components, the dependency graph and vulnerabilities)
// is PUT through the admin handler onto a real store, and the peak heap of
// the upload is reported next to the SBOM size (sbomtest writes the SBOM and
// samples the heap; BenchmarkSBOMParse in sbom/ is the reading alone).
//
//	go test -run '^$' -bench BenchmarkSBOM -benchtime 3x ./admin/ ./sbom/

// sbomServer is an admin server on a real store with one project, and the
// root token that may upload to it.
func sbomServer(tb testing.TB, mutate func(*Options)) (srv *Server, path string, token string) {
	tb.Helper()
	st, err := boltstore.Open(tb.TempDir(), store.Options{SecretKey: make([]byte, 32)})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { st.Close() })
	var o Options
	if mutate != nil {
		mutate(&o)
	}
	srv, err = New(Deps{Options: o, Store: st, Auth: auth.New(st, auth.Options{}), Registerer: prometheus.NewRegistry()})
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
	p, baseInuse, baseMapped := sbomtest.StartHeapPeak()
	rise, ok := sbomtest.PeakRSS()
	rec := uploadFile(tb, srv, path, token, file)
	peakInuse, peakMapped := p.End()
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

// BenchmarkSBOMUpload17 is the dense one as CycloneDX 1.7.
func BenchmarkSBOMUpload17(b *testing.B) {
	benchSBOMUploadOf(b, func(w io.Writer) (int, error) { return sbomtest.WriteLargeSpec(w, 50<<20, true, "1.7") })
}

// BenchmarkSBOMUploadSPDX is a syft-like SPDX 2.3 document of the same size
// (packages, lockfiles, DESCRIBES, CONTAINS and evident-by relationships).
func BenchmarkSBOMUploadSPDX(b *testing.B) {
	benchSBOMUploadOf(b, func(w io.Writer) (int, error) { return sbomtest.WriteLargeSPDX(w, 50<<20) })
}

func benchSBOMUpload(b *testing.B, size int64, dense bool) {
	benchSBOMUploadOf(b, func(w io.Writer) (int, error) { return sbomtest.WriteLarge(w, size, dense) })
}

func benchSBOMUploadOf(b *testing.B, write func(io.Writer) (int, error)) {
	file, n, comps := sbomtest.LargeFileOf(b, write)
	srv, path, token := sbomServer(b, func(o *Options) { o.MaxSBOMBytes = int64(2 * n) })
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
