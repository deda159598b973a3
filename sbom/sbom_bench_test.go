package sbom

import (
	"io"
	"os"
	"runtime"
	"testing"

	"registryd/sbom/sbomtest"
)

// BenchmarkSBOMParse is the reading alone, without the store.
func BenchmarkSBOMParse(b *testing.B) {
	benchParse(b, func(w io.Writer) (int, error) { return sbomtest.WriteLarge(w, 50<<20, true) })
}

// BenchmarkSPDXParse is BenchmarkSBOMParse for a syft-like SPDX 2.3
// document of the same size.
func BenchmarkSPDXParse(b *testing.B) {
	benchParse(b, func(w io.Writer) (int, error) { return sbomtest.WriteLargeSPDX(w, 50<<20) })
}

func benchParse(b *testing.B, write func(io.Writer) (int, error)) {
	file, n, _ := sbomtest.LargeFileOf(b, write)
	b.SetBytes(n)
	b.ReportAllocs()
	var inuse int64
	for b.Loop() {
		f, err := os.Open(file)
		if err != nil {
			b.Fatal(err)
		}
		p, base, _ := sbomtest.StartHeapPeak()
		res, err := Read(f, Options{})
		peak, _ := p.End()
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
