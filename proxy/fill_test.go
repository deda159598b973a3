package proxy

import (
	"bytes"
	"io"
	"strconv"
	"testing"
)

// TestFillFramings streams fills of several sizes to a client, with the
// upstream's Content-Length (the body goes out by sendfile from the temp
// file) and without one (chunked, copied by ReadAt): the client gets exactly
// the upstream's bytes, and the entry is written.
func TestFillFramings(t *testing.T) {
	for _, chunked := range []bool{false, true} {
		for _, size := range []int{0, 1, 300 << 10, 3<<20 + 7} {
			name := "content-length/"
			if chunked {
				name = "chunked/"
			}
			t.Run(name+strconv.Itoa(size), func(t *testing.T) {
				e := newEnv(t)
				up := newFakeUpstream(t)
				// An empty jar is refused (the smallest zip has 22 bytes);
				// an empty text file is a file.
				path := jarPath
				if size == 0 {
					path = "org/example/lib/1.0/NOTICE.txt"
				}
				body := jarBytes(path, size)
				up.set(path, fakeFile{body: body, chunked: chunked})
				uid := e.upstream(up.URL, nil, nil)
				r := e.get(path).expect(t, 200)
				if !bytes.Equal(r.body, body) {
					t.Fatalf("got %d bytes, want %d (or other bytes)", len(r.body), len(body))
				}
				if cl := r.header.Get("Content-Length"); !chunked && cl != strconv.Itoa(size) {
					t.Fatalf("Content-Length %q, want %d", cl, size)
				}
				ce, ok := e.entry(uid, "/"+path)
				if !ok || ce.Size != int64(size) {
					t.Fatalf("entry %+v, %v", ce, ok)
				}
				_, _, sha256hex, _ := digests(body)
				if ce.SHA256 != sha256hex {
					t.Fatalf("entry SHA-256 %s, want %s", ce.SHA256, sha256hex)
				}
				e.noBrokenState()
			})
		}
	}
}

// TestFlightReaderRead reads a flight through Read rather than WriteTo (what
// fasthttp uses): the same bytes, the last one only at the clean end.
func TestFlightReaderRead(t *testing.T) {
	e := newEnv(t)
	up := newFakeUpstream(t)
	body := jarBytes(jarPath, 200<<10)
	up.set(jarPath, fakeFile{body: body, fault: faultHold})
	uid := e.upstream(up.URL, nil, nil)
	reg, err := e.srv.registry(e.registry, e.st.CacheGeneration())
	if err != nil {
		t.Fatal(err)
	}
	f, _ := e.srv.join(reg.upstream(uid), jarPath, "", false, anyGen)
	<-f.ready
	if f.kind != flightStreaming {
		t.Fatalf("flight kind %d", f.kind)
	}
	r := &flightReader{f: f, bytes: e.srv.met.series.bytes(e.registry, resMiss)}
	defer r.Close()
	<-up.midBody
	first := make([]byte, len(body)/2)
	if _, err := io.ReadFull(r, first); err != nil {
		t.Fatal(err)
	}
	up.releaseHeld()
	rest, err := io.ReadAll(r)
	if err != nil || !bytes.Equal(append(first, rest...), body) {
		t.Fatalf("read %d bytes, %v", len(first)+len(rest), err)
	}
	e.waitFills()
	if _, ok := e.entry(uid, "/"+jarPath); !ok {
		t.Fatal("no entry")
	}
}

// TestClientGoneMidFill: a client that hangs up does not stop the fill, and
// a request that arrives later is answered from the entry it wrote.
func TestClientGoneMidFill(t *testing.T) {
	e := newEnv(t)
	up := newFakeUpstream(t)
	body := jarBytes(jarPath, 512<<10)
	up.set(jarPath, fakeFile{body: body, fault: faultHold})
	uid := e.upstream(up.URL, nil, nil)
	res := e.startHeld(jarPath)
	<-up.midBody
	if _, err := io.ReadFull(res.Body, make([]byte, 1000)); err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	e.client.CloseIdleConnections()
	up.releaseHeld()
	e.waitFills()
	if _, ok := e.entry(uid, "/"+jarPath); !ok {
		t.Fatal("the fill stopped with its client")
	}
	e.get(jarPath).expect(t, 200).expectBody(t, string(body))
	if got := up.calls(jarPath); got != 1 {
		t.Fatalf("upstream GETs = %d, want 1", got)
	}
	e.noBrokenState()
}
