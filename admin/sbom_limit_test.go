package admin

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
)

// unreadBody fails the test if the handler reads it.
type unreadBody struct{ reads atomic.Int32 }

func (b *unreadBody) Read(p []byte) (int, error) {
	b.reads.Add(1)
	return 0, io.EOF
}

// At most admin.max_sbom_ingests uploads are read at once; one more is
// answered 429 with Retry-After without its body being read, and a slot
// frees when an upload ends.
func TestPutDependenciesConcurrencyLimit(t *testing.T) {
	const limit = 2
	e := newActEnv(t, func(o *serverOptions) { o.admin.MaxSBOMIngests = limit })
	body := fixtureBytes(t, "cyclonedx-npm-vulnerable-1.5.json")
	type held struct {
		pw   *io.PipeWriter
		done chan testResp
	}
	var hs []held
	for range limit {
		pr, pw := io.Pipe()
		h := held{pw: pw, done: make(chan testResp, 1)}
		go func() {
			h.done <- e.do(http.MethodPut, depsPath(e, "private", ""), "maintainer", pr,
				"Content-Type", "application/vnd.cyclonedx+json")
		}()
		// The handler reads the body only once it holds a slot: when this
		// write returns, it holds one.
		if _, err := pw.Write(body[:1]); err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
	}

	var ub unreadBody
	r := e.do(http.MethodPut, depsPath(e, "public", ""), "root", &ub, "Content-Type", "application/json")
	r.want(t, http.StatusTooManyRequests)
	if got := r.header.Get("Retry-After"); got != sbomRetryAfter {
		t.Errorf("Retry-After %q, want %q", got, sbomRetryAfter)
	}
	if want := `{"message":"429 Too Many Requests - 2 SBOM uploads are being processed; retry after 5 seconds"}`; strings.TrimSpace(string(r.body)) != want {
		t.Errorf("body %s, want %s", r.body, want)
	}
	if n := ub.reads.Load(); n != 0 {
		t.Errorf("the refused body was read %d times", n)
	}
	// Other requests are not limited.
	e.do(http.MethodGet, depsPath(e, "private", ""), "root", nil).want(t, http.StatusOK)

	for _, h := range hs {
		if _, err := h.pw.Write(body[1:]); err != nil {
			t.Fatal(err)
		}
		h.pw.Close()
		(<-h.done).want(t, http.StatusOK)
	}
	// Both slots are free again.
	for range limit + 1 {
		e.do(http.MethodPut, depsPath(e, "public", ""), "root", bytes.NewReader(body),
			"Content-Type", "application/json").want(t, http.StatusOK)
	}
}

// A body over admin.max_sbom_bytes is a 413 naming the limit: at once when
// its Content-Length says so, and when the stream passes the limit
// otherwise. Nothing is stored.
func TestPutDependenciesLimitWhileStreaming(t *testing.T) {
	e := newActEnv(t, func(o *serverOptions) { o.admin.MaxSBOMBytes = 4 << 10 })
	big := `{"bomFormat":"CycloneDX","specVersion":"1.6","components":[` +
		strings.Repeat(`{"name":"a","version":"1"},`, 500) + `{"name":"b"}]}`
	const want = `{"message":"413 Request Entity Too Large - the SBOM is larger than 4KiB (admin.max_sbom_bytes)"}`

	var ub unreadBody
	req := func(body io.Reader, n int64) testResp {
		r := httpRequest(e, depsPath(e, "private", ""), body)
		r.ContentLength = n
		return serve(e.srv, r)
	}
	r := req(&ub, int64(len(big)))
	r.want(t, http.StatusRequestEntityTooLarge)
	if strings.TrimSpace(string(r.body)) != want || ub.reads.Load() != 0 {
		t.Errorf("announced: body %s (want %s), %d reads", r.body, want, ub.reads.Load())
	}
	// Unknown length: the stream is cut at the limit.
	r = req(io.MultiReader(strings.NewReader(big)), -1)
	r.want(t, http.StatusRequestEntityTooLarge)
	if strings.TrimSpace(string(r.body)) != want {
		t.Errorf("streamed: body %s, want %s", r.body, want)
	}
	if list := e.do(http.MethodGet, depsPath(e, "private", ""), "root", nil).want(t, 200).list(t); len(list) != 0 {
		t.Errorf("stored %d entries", len(list))
	}
}

func httpRequest(e *actEnv, path string, body io.Reader) *http.Request {
	r, err := http.NewRequest(http.MethodPut, path, body)
	if err != nil {
		e.t.Fatal(err)
	}
	r.RequestURI = path
	r.Header.Set("PRIVATE-TOKEN", e.tokens["root"])
	r.Header.Set("Content-Type", "application/json")
	return r
}
