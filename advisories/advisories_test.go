package advisories

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"registryd/internal/boltstore"
	"registryd/osv"
	"registryd/store"
)

func newImporter(t *testing.T, mutate func(*Options)) (*Importer, *store.Store) {
	t.Helper()
	st, err := boltstore.Open(t.TempDir(), store.Options{SecretKey: make([]byte, 32), Matcher: osv.Matcher{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	o := Options{Store: st, TempDir: t.TempDir()}
	if mutate != nil {
		mutate(&o)
	}
	im, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(im.Stop)
	return im, st
}

func fixtureDir(name string) string {
	abs, _ := filepath.Abs(filepath.Join("..", "testdata", "osv", name))
	return abs
}

// A directory source and a record file are imported as full copies; a
// second refresh of the same copies changes nothing.
func TestRefreshPaths(t *testing.T) {
	file := filepath.Join(t.TempDir(), "ghsa.ndjson")
	var nd bytes.Buffer
	for _, n := range []string{"GHSA-35jh-r3h4-6jhm.json", "GHSA-xvch-5gv4-984h.json"} {
		raw, err := os.ReadFile(filepath.Join(fixtureDir("ghsa"), n))
		if err != nil {
			t.Fatal(err)
		}
		nd.Write(bytes.Join(bytes.Fields(raw), []byte(" ")))
		nd.WriteByte('\n')
	}
	if err := os.WriteFile(file, nd.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	im, st := newImporter(t, func(o *Options) { o.Sources = []string{fixtureDir("go"), file} })
	res := im.Refresh(context.Background())
	if len(res) != 2 || res[0].Added != 7 || res[0].Skipped != 1 || res[1].Added != 2 || !res[1].Complete {
		t.Fatalf("first refresh %+v", res)
	}
	res = im.Refresh(context.Background())
	if res[0].Unchanged != 7 || res[0].Added+res[0].Changed+res[0].Removed != 0 || res[1].Unchanged != 2 {
		t.Fatalf("second refresh %+v", res)
	}
	s, err := st.AdvisoryStatus()
	if err != nil || s.Advisories != 9 || len(s.Imports) != 2 {
		t.Fatalf("status %+v, %v", s, err)
	}
}

// A URL source is fetched again only when it changed (ETag).
func TestRefreshURL(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(fixtureDir("ghsa"), "GHSA-35jh-r3h4-6jhm.json"))
	if err != nil {
		t.Fatal(err)
	}
	var full, conditional atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("If-None-Match") == `"v1"` {
			conditional.Add(1)
			w.WriteHeader(http.StatusNotModified)
			return
		}
		full.Add(1)
		w.Header().Set("ETag", `"v1"`)
		w.Write(raw)
	}))
	defer srv.Close()
	im, _ := newImporter(t, func(o *Options) { o.Sources = []string{srv.URL + "/osv/npm.json"} })
	if res := im.Refresh(context.Background()); len(res) != 1 || res[0].Added != 1 {
		t.Fatalf("first refresh %+v", res)
	}
	if res := im.Refresh(context.Background()); !res[0].NotModified || full.Load() != 1 || conditional.Load() != 1 {
		t.Fatalf("second refresh %+v; %d full and %d conditional fetches", res, full.Load(), conditional.Load())
	}
}

func TestImportUploadBounds(t *testing.T) {
	im, st := newImporter(t, func(o *Options) { o.MaxBytes = 1 << 20 })
	_, err := im.ImportUpload(context.Background(), Upload{Source: "up", Body: strings.NewReader(strings.Repeat(" ", 1<<20+1))})
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("over max_bytes: %v", err)
	}
	// One import at a time: a second one is refused before it reads.
	im.running.Lock()
	body := &countingReader{r: strings.NewReader("{}")}
	_, err = im.ImportUpload(context.Background(), Upload{Source: "up", Body: body})
	im.running.Unlock()
	if !errors.Is(err, ErrBusy) || body.n != 0 {
		t.Fatalf("while another runs: %v, %d bytes read", err, body.n)
	}
	// A broken stream is a ReadError.
	_, err = im.ImportUpload(context.Background(), Upload{Source: "up", Body: strings.NewReader(`{"id":"A","modified":`)})
	var re *ReadError
	if !errors.As(err, &re) {
		t.Fatalf("a cut stream: %v", err)
	}
	if s, _ := st.AdvisoryStatus(); s.Advisories != 0 {
		t.Fatalf("%d advisories after refused imports", s.Advisories)
	}
}

type countingReader struct {
	r *strings.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}
