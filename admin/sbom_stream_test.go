package admin

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// streamingPut sends a PUT whose body, n bytes, is written by a goroutine
// through a pipe as the transport asks for it: a client streaming a large
// SBOM. It returns the answer and its body as the client read them, and
// whether the whole body was sent.
func streamingPut(t *testing.T, url, token string, n int64, hdr ...string) (*http.Response, []byte, error, <-chan error) {
	t.Helper()
	pr, pw := io.Pipe()
	sent := make(chan error, 1)
	go func() {
		chunk := bytes.Repeat([]byte(" "), 64<<10)
		var err error
		for left := n; left > 0 && err == nil; left -= int64(len(chunk)) {
			_, err = pw.Write(chunk[:min(int64(len(chunk)), left)])
		}
		pw.Close()
		sent <- err
	}()
	t.Cleanup(func() { pr.CloseWithError(io.ErrClosedPipe) })
	req, err := http.NewRequest(http.MethodPut, url, pr)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = n
	req.Header.Set("PRIVATE-TOKEN", token)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	// A client that sends Expect: 100-continue waits for the go-ahead (Go
	// sends the header only with a timeout set).
	c := &http.Client{Transport: &http.Transport{ExpectContinueTimeout: time.Minute}}
	defer c.CloseIdleConnections()
	res, err := c.Do(req)
	if err != nil {
		return nil, nil, err, sent
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	return res, body, err, sent
}

// The 429 of an SBOM upload over admin.max_sbom_ingests reaches a client
// that streams a large body as an answer it can read (status, Retry-After
// and the JSON body), not as a connection reset: with its body sent in
// full (drained by the server, up to admin.max_sbom_bytes), and, when it
// sent Expect: 100-continue, without sending its body at all.
func TestPutDependenciesLimitReadByStreamingClient(t *testing.T) {
	e := newActEnv(t, func(o *serverOptions) { o.admin.MaxSBOMIngests = 1 })
	srv := httptest.NewServer(e.srv)
	t.Cleanup(srv.Close)
	url := srv.URL + depsPath(e, "private", "")

	// One upload holds the only slot: it is served in process, so its
	// first byte is read by the handler, which then holds the slot.
	hold, holdW := io.Pipe()
	held := make(chan struct{})
	go func() {
		defer close(held)
		e.do(http.MethodPut, depsPath(e, "private", ""), "maintainer", hold, "Content-Type", "application/json")
	}()
	if _, err := holdW.Write([]byte("{")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { holdW.CloseWithError(io.ErrClosedPipe); <-held })

	const want = `{"message":"429 Too Many Requests - 1 SBOM uploads are being processed; retry after 5 seconds"}`

	// A client that writes its whole request before it reads (most HTTP
	// libraries, curl -T without Expect): it used to get a reset.
	t.Run("write all, then read", func(t *testing.T) {
		conn, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		const n = 16 << 20
		head := fmt.Sprintf("PUT %s HTTP/1.1\r\nHost: registryd\r\nPRIVATE-TOKEN: %s\r\n"+
			"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n", depsPath(e, "private", ""), e.tokens["maintainer"], n)
		if _, err := io.WriteString(conn, head); err != nil {
			t.Fatal(err)
		}
		if _, err := io.CopyN(conn, zeros{}, n); err != nil {
			t.Fatalf("writing the body: %v (the server did not take it)", err)
		}
		res, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("reading the answer: %v", err)
		}
		body, err := io.ReadAll(res.Body)
		if err != nil || res.StatusCode != http.StatusTooManyRequests || string(bytes.TrimSpace(body)) != want {
			t.Fatalf("answer %d %s (%v), want 429 %s", res.StatusCode, body, err, want)
		}
	})
	for _, tt := range []struct {
		name string
		hdr  []string
	}{
		{"streaming", nil},
		{"expect 100-continue", []string{"Expect", "100-continue"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			res, body, err, sent := streamingPut(t, url, e.tokens["maintainer"], 16<<20, tt.hdr...)
			if err != nil {
				t.Fatalf("the client got no answer it could read: %v", err)
			}
			if res.StatusCode != http.StatusTooManyRequests || res.Header.Get("Retry-After") != sbomRetryAfter {
				t.Fatalf("answer %d, Retry-After %q: %s", res.StatusCode, res.Header.Get("Retry-After"), body)
			}
			var m map[string]any
			if json.Unmarshal(body, &m) != nil || string(bytes.TrimSpace(body)) != want {
				t.Fatalf("body %s, want %s", body, want)
			}
			if tt.hdr == nil {
				if err := <-sent; err != nil {
					t.Fatalf("the body was not taken in full: %v", err)
				}
			}
		})
	}
}

// zeros reads as spaces without end (a JSON body's whitespace).
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = ' '
	}
	return len(p), nil
}
