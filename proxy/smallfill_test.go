package proxy

import (
	"strconv"
	"strings"
	"testing"
)

// Bodies of at most memBodyMax are read whole before the clients are
// answered and sent from memory. These tests hold that path to its
// guarantees: a body that breaks is an upstream failure (never a 200) and
// caches nothing, a complete body reaches the client whole even when
// storing it fails, and a herd costs one upstream GET.

func TestSmallBodyFaults(t *testing.T) {
	body := jarBytes(jarPath, 1<<10)
	cases := []struct {
		name string
		file fakeFile
	}{
		{name: "connection reset mid-body", file: fakeFile{body: body, fault: faultReset}},
		{name: "Content-Length larger than the body", file: fakeFile{body: body, fault: faultWrongLen}},
		{name: "truncated chunked body", file: fakeFile{body: body, fault: faultTruncated}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			up := newFakeUpstream(t)
			up.set(jarPath, c.file)
			uid := e.upstream(up.URL, nil, nil)
			// Nothing was answered before the body was whole: the failure
			// is the upstream's, like a 5xx (the next upstream would be
			// asked; there is none).
			r := e.get(jarPath).expect(t, 502)
			if !strings.HasPrefix(string(r.body), `{"message":"502 Bad Gateway - Upstream not available: upstream 1: `) {
				t.Fatalf("body %q", r.body)
			}
			e.waitFills()
			if _, ok := e.entry(uid, "/"+jarPath); ok {
				t.Fatal("a broken fill left a cache entry")
			}
			e.noBrokenState()

			up.set(jarPath, fakeFile{body: body})
			e.get(jarPath).expect(t, 200).expectBody(t, string(body))
			e.waitFills()
			if ce, ok := e.entry(uid, "/"+jarPath); !ok || ce.Size != int64(len(body)) {
				t.Fatalf("after the retry: entry %+v, %v", ce, ok)
			}
		})
	}
}

func TestSmallBodyStoreFailure(t *testing.T) {
	e := newEnv(t)
	up := newFakeUpstream(t)
	body := jarBytes(jarPath, 2<<10)
	up.set(jarPath, fakeFile{body: body, fault: faultHold})
	uid := e.upstream(up.URL, nil, nil)
	// The answer waits for the whole body, so the request runs aside.
	answer := make(chan resp, 1)
	go func() { answer <- e.get(jarPath) }()
	<-up.midBody
	if err := e.st.DeleteUpstream(uid); err != nil {
		t.Fatal(err)
	}
	up.releaseHeld()
	r := <-answer
	if r.status != 200 || r.readErr != nil || string(r.body) != string(body) {
		t.Fatalf("status %d, read %d of %d bytes, error %v: the body arrived whole, so must the response",
			r.status, len(r.body), len(body), r.readErr)
	}
	e.waitFills()
	e.expectNothingStored(uid, jarPath)
}

func TestSmallBodyHerd(t *testing.T) {
	e := newEnv(t)
	up := newFakeUpstream(t)
	body := jarBytes(jarPath, memBodyMax)
	up.set(jarPath, fakeFile{body: body, fault: faultHold})
	uid := e.upstream(up.URL, nil, nil)

	const n = 16
	results := e.herd(up, jarPath, n)
	for i, r := range results {
		if r.readErr != nil || r.status != 200 || string(r.body) != string(body) {
			t.Fatalf("request %d: status %d, %d bytes, %v", i, r.status, len(r.body), r.readErr)
		}
		if cl := r.header.Get("Content-Length"); cl != strconv.Itoa(len(body)) {
			t.Fatalf("request %d: Content-Length %q, want %d", i, cl, len(body))
		}
	}
	if got := up.calls(jarPath); got != 1 {
		t.Fatalf("upstream GETs = %d, want exactly 1", got)
	}
	e.waitFills()
	if err := e.srv.FlushDownloads(); err != nil {
		t.Fatal(err)
	}
	ce, ok := e.entry(uid, "/"+jarPath)
	if !ok || ce.Size != int64(len(body)) {
		t.Fatalf("entry %+v, %v", ce, ok)
	}
	if ce.DownloadsCount != n {
		t.Fatalf("downloads_count = %d, want %d: one per response", ce.DownloadsCount, n)
	}
	_, sha1hex, _, _ := digests(body)
	e.get(jarPath+".sha1").expect(t, 200).expectBody(t, sha1hex)
}
