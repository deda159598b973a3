package proxy

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// BenchmarkFill64MiB measures a cold miss of a 64 MiB file end to end over
// loopback, as a client sees it: time to the last byte (ns/op, and B/s),
// time to the first body byte (ttfb-ns), and how long after the client's
// last byte the fill took to hash, fsync and publish the blob (publish-ns,
// not part of ns/op). Each round asks for a new path holding the same bytes.
// The upstream serves the file from disk (sendfile, as nginx would), and
// "direct" downloads it from there without registryd: the ratio of the two
// ns/op is the proxy's overhead on this machine.
func BenchmarkFill64MiB(b *testing.B) {
	const size = 64 << 20
	file := filepath.Join(b.TempDir(), "big.jar")
	if err := os.WriteFile(file, jarBytes("big", size), 0o600); err != nil {
		b.Fatal(err)
	}
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, "/maven2/org/bench/") {
			http.NotFound(w, r)
			return
		}
		f, err := os.Open(file)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		defer f.Close()
		w.Header().Set("Content-Type", "application/java-archive")
		http.ServeContent(w, r, "", time.Time{}, f)
	}))
	b.Cleanup(origin.Close)
	client := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	b.Cleanup(client.CloseIdleConnections)
	buf := make([]byte, 256<<10)

	get := func(b *testing.B, url string, hdr ...string) time.Duration {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		start := time.Now()
		res, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		defer res.Body.Close()
		var ttfb time.Duration
		var n int64
		for {
			m, err := res.Body.Read(buf)
			if m > 0 && ttfb == 0 {
				ttfb = time.Since(start)
			}
			n += int64(m)
			if err == io.EOF {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
		}
		if res.StatusCode != 200 || n != size {
			b.Fatalf("status %d, %d bytes", res.StatusCode, n)
		}
		return ttfb
	}
	path := func(i int) string { return fmt.Sprintf("org/bench/b%d/1.0/b%d-1.0.jar", i, i) }

	b.Run("registryd", func(b *testing.B) {
		e := newEnv(b)
		e.upstream(origin.URL+"/maven2", nil, nil)
		base := e.base + "/" + strconv.FormatInt(e.registry, 10) + "/"
		get(b, base+path(-1), "Private-Token", rootToken) // warm the connections and the page cache
		e.waitFills()
		b.SetBytes(size)
		b.ReportAllocs()
		var ttfb, publish time.Duration
		i := 0
		for b.Loop() {
			ttfb += get(b, base+path(i), "Private-Token", rootToken)
			b.StopTimer()
			done := time.Now()
			e.waitFills()
			publish += time.Since(done)
			b.StartTimer()
			i++
		}
		b.ReportMetric(float64(ttfb.Nanoseconds())/float64(i), "ttfb-ns")
		b.ReportMetric(float64(publish.Nanoseconds())/float64(i), "publish-ns")
	})
	b.Run("direct", func(b *testing.B) {
		get(b, origin.URL+"/maven2/"+path(-1))
		b.SetBytes(size)
		b.ReportAllocs()
		var ttfb time.Duration
		i := 0
		for b.Loop() {
			ttfb += get(b, origin.URL+"/maven2/"+path(i))
			i++
		}
		b.ReportMetric(float64(ttfb.Nanoseconds())/float64(i), "ttfb-ns")
	})
}
