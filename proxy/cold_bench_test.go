package proxy

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// BenchmarkColdSmall measures the fixed cost of a cold miss: one request for
// a 1 KiB file nobody asked for before, over loopback keep-alive connections,
// against the same request sent straight to the upstream ("direct"). ns/op is
// the whole response; ttfb-ns is the time to the first body byte. The
// difference between the two ns/op is what starting a fill costs.
func BenchmarkColdSmall(b *testing.B) {
	body := jarBytes("small", 1024)
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, "/maven2/org/bench/") {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/java-archive")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.Write(body)
	}))
	b.Cleanup(origin.Close)
	client := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	b.Cleanup(client.CloseIdleConnections)

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
		var one [1]byte
		if _, err := io.ReadFull(res.Body, one[:]); err != nil {
			b.Fatal(err)
		}
		ttfb := time.Since(start)
		n, err := io.Copy(io.Discard, res.Body)
		if err != nil || res.StatusCode != 200 || n+1 != int64(len(body)) {
			b.Fatalf("status %d, %d bytes, %v", res.StatusCode, n+1, err)
		}
		return ttfb
	}
	path := func(i int) string { return fmt.Sprintf("org/bench/s%d/1.0/s%d-1.0.jar", i, i) }

	b.Run("registryd", func(b *testing.B) {
		e := newEnv(b)
		e.upstream(origin.URL+"/maven2", nil, nil)
		base := e.base + "/" + strconv.FormatInt(e.registry, 10) + "/"
		get(b, base+path(-1), "Private-Token", rootToken) // warm the connections
		e.waitFills()
		var ttfb time.Duration
		i := 0
		for b.Loop() {
			ttfb += get(b, base+path(i), "Private-Token", rootToken)
			b.StopTimer()
			e.waitFills()
			b.StartTimer()
			i++
		}
		b.ReportMetric(float64(ttfb.Nanoseconds())/float64(i), "ttfb-ns")
	})
	b.Run("direct", func(b *testing.B) {
		get(b, origin.URL+"/maven2/"+path(-1))
		var ttfb time.Duration
		i := 0
		for b.Loop() {
			ttfb += get(b, origin.URL+"/maven2/"+path(i))
			i++
		}
		b.ReportMetric(float64(ttfb.Nanoseconds())/float64(i), "ttfb-ns")
	})
}

// BenchmarkColdHerd32 measures 32 concurrent cold requests for one 1 KiB
// file over open keep-alive connections: ns/op is the time until the last of
// them has its whole body (the fill's hashing, fsync and publish are not
// counted).
func BenchmarkColdHerd32(b *testing.B) {
	body := jarBytes("small", 1024)
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/java-archive")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.Write(body)
	}))
	b.Cleanup(origin.Close)
	const n = 32
	client := &http.Client{Transport: &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: n}}
	b.Cleanup(client.CloseIdleConnections)
	e := newEnv(b)
	e.upstream(origin.URL+"/maven2", nil, nil)
	base := e.base + "/" + strconv.FormatInt(e.registry, 10) + "/"
	herd := func(p string) {
		var wg sync.WaitGroup
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				req, _ := http.NewRequest(http.MethodGet, base+p, nil)
				req.Header.Set("Private-Token", rootToken)
				res, err := client.Do(req)
				if err != nil {
					b.Error(err)
					return
				}
				m, err := io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if err != nil || res.StatusCode != 200 || m != int64(len(body)) {
					b.Errorf("status %d, %d bytes, %v", res.StatusCode, m, err)
				}
			}()
		}
		wg.Wait()
	}
	herd("org/bench/h/1.0/h-1.0.jar") // open the connections
	e.waitFills()
	i := 0
	for b.Loop() {
		herd(fmt.Sprintf("org/bench/h%d/1.0/h%d-1.0.jar", i, i))
		b.StopTimer()
		e.waitFills()
		b.StartTimer()
		i++
	}
}
