package advisories

import (
	"archive/zip"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"registryd/internal/boltstore"
	"registryd/osv"
	"registryd/sbom/sbomtest"
	"registryd/store"
)

// The advisory benchmarks (docs/performance.md, "Advisory database"):
//
//	go test -run '^$' -bench . -benchtime 3x ./advisories/
//
// A synthetic ecosystem is GitHub-shaped npm records (aliases, a CVSS
// vector, the database's severity word, one or two ranges, references):
// about 1.5 KB each, like osv.dev's npm/all.zip.

// record writes one synthetic advisory of package pkg.
func record(id, pkg string, rng *rand.Rand) string {
	fixed := fmt.Sprintf("%d.%d.%d", 1+rng.IntN(9), rng.IntN(20), 1+rng.IntN(30))
	ranges := `[{"type":"SEMVER","events":[{"introduced":"0"},{"fixed":"` + fixed + `"}]}]`
	if rng.IntN(3) == 0 {
		ranges = `[{"type":"SEMVER","events":[{"introduced":"0.5.0"},{"last_affected":"0.9.3"}]},` +
			`{"type":"SEMVER","events":[{"introduced":"1.0.0"},{"fixed":"` + fixed + `"}]}]`
	}
	sev := []string{"LOW", "MODERATE", "HIGH", "CRITICAL"}[rng.IntN(4)]
	return `{"schema_version":"1.4.0","id":"` + id + `","modified":"2026-01-02T03:04:05Z","published":"2025-01-02T03:04:05Z",` +
		`"aliases":["CVE-2025-` + id[len(id)-5:] + `"],"summary":"Prototype pollution in ` + pkg + `",` +
		`"details":"` + strings.Repeat("An attacker can make "+pkg+" do something it should not. ", 4) + `",` +
		`"severity":[{"type":"CVSS_V3","score":"CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H"}],` +
		`"affected":[{"package":{"ecosystem":"npm","name":"` + pkg + `"},"ranges":` + ranges + `,"database_specific":{"source":"https://github.com/advisories/` + id + `"}}],` +
		`"references":[{"type":"ADVISORY","url":"https://nvd.nist.gov/vuln/detail/CVE-2025-` + id[len(id)-5:] + `"},` +
		`{"type":"PACKAGE","url":"https://github.com/example/` + pkg + `"},{"type":"WEB","url":"https://github.com/example/` + pkg + `/commit/abcdef"}],` +
		`"database_specific":{"cwe_ids":["CWE-1321"],"severity":"` + sev + `","github_reviewed":true}}`
}

// ecosystemZip writes n synthetic records naming packages pkg-0 ...
// pkg-(pkgs-1) into an all.zip.
func ecosystemZip(b *testing.B, n, pkgs int) (string, int64) {
	b.Helper()
	path := filepath.Join(b.TempDir(), "all.zip")
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	zw := zip.NewWriter(f)
	rng := rand.New(rand.NewPCG(5, 6))
	for i := range n {
		id := fmt.Sprintf("GHSA-bnch-%04d-%05d", i/100000, i%100000)
		w, err := zw.Create(id + ".json")
		if err != nil {
			b.Fatal(err)
		}
		io.WriteString(w, record(id, fmt.Sprintf("pkg-%d", rng.IntN(pkgs)), rng))
	}
	if err := zw.Close(); err != nil {
		b.Fatal(err)
	}
	fi, _ := f.Stat()
	return path, fi.Size()
}

func benchStore(b *testing.B) *store.Store {
	b.Helper()
	st, err := boltstore.Open(b.TempDir(), store.Options{SecretKey: make([]byte, 32), Matcher: osv.Matcher{}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	return st
}

// benchImport imports the copy at src into a fresh store per iteration and
// reports records/s, the peak heap and RSS rise of the import, and the
// time of a second, unchanged import.
func benchImport(b *testing.B, src string) {
	var recs int
	var heap, rss int64
	var again time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		st := benchStore(b)
		im, err := New(Options{Store: st, Sources: []string{src}, TempDir: b.TempDir()})
		if err != nil {
			b.Fatal(err)
		}
		p, base, _ := sbomtest.StartHeapPeak()
		rise, rssOK := sbomtest.PeakRSS()
		b.StartTimer()
		res := im.Refresh(context.Background())
		b.StopTimer()
		peak, _ := p.End()
		if len(res) != 1 || !res[0].Complete {
			b.Fatalf("import %+v", res)
		}
		recs = res[0].Read
		heap = max(heap, int64(peak-base))
		if rssOK {
			rss = max(rss, rise())
		}
		start := time.Now()
		if res := im.Refresh(context.Background()); res[0].Unchanged != res[0].Read-res[0].Skipped-res[0].AdvisoryImportResult.Invalid {
			b.Fatalf("second import %+v", res)
		}
		again = max(again, time.Since(start))
		b.StartTimer()
	}
	b.ReportMetric(float64(recs)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
	b.ReportMetric(float64(recs), "records")
	b.ReportMetric(float64(heap)/(1<<20), "peak-heap-MiB")
	b.ReportMetric(float64(rss)/(1<<20), "peak-rss-rise-MiB")
	b.ReportMetric(again.Seconds(), "unchanged-reimport-s")
}

// BenchmarkImportEcosystem: 20,000 npm-like records in an all.zip.
func BenchmarkImportEcosystem(b *testing.B) {
	zipPath, size := ecosystemZip(b, 20000, 8000)
	b.Logf("all.zip of 20,000 records: %.1f MiB", float64(size)/(1<<20))
	benchImport(b, zipPath)
}

// BenchmarkImportGoVulnDB: the Go vulnerability database (4,789 records
// in the module's data/osv), when the module is in the module cache
// (go mod download golang.org/x/vulndb@v0.0.0-20261105234957-e22db6528018).
func BenchmarkImportGoVulnDB(b *testing.B) {
	dir := os.Getenv("REGISTRYD_BENCH_VULNDB")
	if dir == "" {
		out, err := exec.Command("go", "env", "GOMODCACHE").Output()
		if err != nil {
			b.Skip("no go command")
		}
		dir = filepath.Join(strings.TrimSpace(string(out)), "golang.org/x/vulndb@v0.0.0-20261105234957-e22db6528018/data/osv")
	}
	if _, err := os.Stat(dir); err != nil {
		b.Skipf("%s: %v (set REGISTRYD_BENCH_VULNDB to a vulndb data/osv directory)", dir, err)
	}
	benchImport(b, dir)
}

// npmDeps is a list of n entries of packages pkg-0 ... pkg-(pool-1).
func npmDeps(rng *rand.Rand, n, pool int) []store.NewDependency {
	deps := make([]store.NewDependency, n)
	for i := range deps {
		deps[i] = store.NewDependency{Name: fmt.Sprintf("pkg-%d", rng.IntN(pool)),
			Version: fmt.Sprintf("%d.%d.%d", rng.IntN(10), rng.IntN(20), rng.IntN(30)), PackageManager: "npm",
			FilePath: "package-lock.json"}
	}
	return deps
}

func importZip(b *testing.B, st *store.Store, path string) store.AdvisoryImportResult {
	b.Helper()
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	fi, _ := f.Stat()
	var stats osv.Stats
	res, err := st.ImportAdvisories(store.AdvisoryImport{Source: "bench", Full: true}, osv.ReadZip(f, fi.Size(), &stats))
	if err != nil {
		b.Fatal(err)
	}
	return res
}

// BenchmarkMatch10k uploads a list of 10,000 npm entries against the
// 20,000 synthetic advisories (8,000 packages: most entries have some) and
// against an empty database, and reports both and the matches.
func BenchmarkMatch10k(b *testing.B) {
	zipPath, _ := ecosystemZip(b, 20000, 8000)
	withDB, empty := benchStore(b), benchStore(b)
	importZip(b, withDB, zipPath)
	rng := rand.New(rand.NewPCG(7, 8))
	deps := npmDeps(rng, 10000, 8000)
	var projects [2]int64
	for i, st := range []*store.Store{withDB, empty} {
		g, err := st.CreateGroup(store.NewGroup{Name: "g", Path: "g"})
		if err != nil {
			b.Fatal(err)
		}
		p, err := st.CreateProject(store.NewProject{Name: "p", Path: "p", NamespaceID: g.ID})
		if err != nil {
			b.Fatal(err)
		}
		projects[i] = p.ID
	}
	var with, without time.Duration
	var list store.DependencyList
	for i := 0; i < b.N; i++ {
		start := time.Now()
		var err error
		if list, err = withDB.ReplaceDependencies(projects[0], deps, nil); err != nil {
			b.Fatal(err)
		}
		with += time.Since(start)
		b.StopTimer()
		start = time.Now()
		if _, err := empty.ReplaceDependencies(projects[1], deps, nil); err != nil {
			b.Fatal(err)
		}
		without += time.Since(start)
		b.StartTimer()
	}
	b.ReportMetric(float64(with.Milliseconds())/float64(b.N), "ms/upload")
	b.ReportMetric(float64(without.Milliseconds())/float64(b.N), "ms/upload-no-advisories")
	b.ReportMetric(float64(list.Vulnerabilities), "vulnerabilities")
}

// BenchmarkContinuousUpdate: 1,000 projects of 200 npm entries each
// (packages drawn from 5,000), then each iteration imports 100 new
// advisories naming 100 packages of the pool, which re-matches the
// entries of those packages in every project that uses them.
func BenchmarkContinuousUpdate(b *testing.B) {
	st := benchStore(b)
	g, err := st.CreateGroup(store.NewGroup{Name: "g", Path: "g"})
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(9, 10))
	for i := range 1000 {
		p, err := st.CreateProject(store.NewProject{Name: fmt.Sprint("p", i), Path: fmt.Sprint("p", i), NamespaceID: g.ID})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := st.ReplaceDependencies(p.ID, npmDeps(rng, 200, 5000), nil); err != nil {
			b.Fatal(err)
		}
	}
	var projects, entries int
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		var recs []*store.Advisory
		for j := range 100 {
			id := fmt.Sprintf("GHSA-cont-%04d-%05d", i, j)
			a, err := osv.Decode([]byte(record(id, fmt.Sprintf("pkg-%d", (i*100+j)%5000), rng)))
			if err != nil {
				b.Fatal(err)
			}
			recs = append(recs, a)
		}
		b.StartTimer()
		res, err := st.ImportAdvisories(store.AdvisoryImport{Source: "bench"}, func(yield func(*store.Advisory, error) bool) {
			for _, a := range recs {
				if !yield(a, nil) {
					return
				}
			}
		})
		if err != nil || res.Added != 100 {
			b.Fatalf("import %+v, %v", res, err)
		}
		projects, entries = res.Projects, res.Dependencies
	}
	b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/import")
	b.ReportMetric(float64(projects), "projects-changed")
	b.ReportMetric(float64(entries), "entries-changed")
}
