package proxy

import (
	"bytes"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"registryd/store/blob"
)

// Tests of a full data volume (passthrough.go): the volume's figures come
// from the env's blob.Faults (SetSpaceProbe) and temp file writes fail
// through them (ENOSPCAfter), as a real full volume makes them fail (the
// integration test itest/diskfull_test.go fills a real one).

const gib = int64(1) << 30

// volume is a fake data volume whose free space a test sets.
type volume struct{ free, total atomic.Int64 }

func (e *env) fakeVolume(free int64) *volume {
	v := &volume{}
	v.free.Store(free)
	v.total.Store(100 * gib)
	e.faults.SetSpaceProbe(func() (blob.Space, error) {
		return blob.Space{Free: v.free.Load(), Total: v.total.Load()}, nil
	})
	return v
}

// setFree changes the free space; the next fill sees it at once.
func (e *env) setFree(v *volume, free int64) {
	v.free.Store(free)
	e.faults.SetSpaceProbe(func() (blob.Space, error) {
		return blob.Space{Free: v.free.Load(), Total: v.total.Load()}, nil
	})
}

// expectUncached checks what an uncached fill leaves: no entry, no blob, no
// temp file, no memory held.
func (e *env) expectUncached(uid int64, path string) {
	e.t.Helper()
	e.noBrokenState()
	if _, ok := e.entry(uid, "/"+path); ok {
		e.t.Fatalf("%s was cached", path)
	}
	if n, _ := e.blobs.Stats(); n != 0 {
		e.t.Fatalf("%d blobs", n)
	}
	if held := e.srv.disk.held.Load(); held != 0 {
		e.t.Fatalf("%d bytes of uncached bodies still held in memory", held)
	}
}

// TestDiskFullBeforeFill: with the volume below its reserve, a miss is
// streamed to its client without writing anything, a large one through
// the memory window and a small one from memory; both are counted, the
// cache says it is not filling, and once space returns the next miss is
// cached.
func TestDiskFullBeforeFill(t *testing.T) {
	e := newEnv(t)
	vol := e.fakeVolume(100 << 20) // 0.1% of 100 GiB: below the 1% reserve
	up := newFakeUpstream(t)
	big := jarBytes(jarPath, 3<<20+7)
	pomPath := "org/example/lib/1.0/lib-1.0.pom"
	pom := []byte("<project><modelVersion>4.0.0</modelVersion></project>")
	_, sha1hex, _, _ := digests(big)
	up.set(jarPath, fakeFile{body: big, checksum: sha1hex})
	up.set(pomPath, fakeFile{body: pom})
	uid := e.upstream(up.URL, nil, nil)

	if got := e.metric("registryd_cache_filling"); got != 0 {
		t.Fatalf("registryd_cache_filling = %v on a full volume", got)
	}
	r := e.get(jarPath).expect(t, 200)
	if !bytes.Equal(r.body, big) {
		t.Fatalf("got %d bytes, want the %d of the file", len(r.body), len(big))
	}
	if cl := r.header.Get("Content-Length"); cl != strconv.Itoa(len(big)) {
		t.Fatalf("Content-Length %q", cl)
	}
	e.get(pomPath).expect(t, 200).expectBody(t, string(pom))
	e.expectUncached(uid, jarPath)
	e.expectUncached(uid, pomPath)
	if got := e.metric("registryd_cache_fill_disk_full_total", "stage", "before"); got != 2 {
		t.Fatalf("disk full (before) = %v, want 2", got)
	}
	// A checksum sidecar of an uncached file fetches it again (nothing is
	// stored to answer from) and answers from its digests.
	e.get(jarPath+".sha1").expect(t, 200).expectBody(t, sha1hex)

	e.setFree(vol, 50*gib)
	if got := e.metric("registryd_cache_filling"); got != 1 {
		t.Fatalf("registryd_cache_filling = %v once space returned", got)
	}
	e.get(jarPath).expect(t, 200).expectBody(t, string(big))
	if _, ok := e.entry(uid, "/"+jarPath); !ok {
		t.Fatal("not cached once space returned")
	}
	e.noBrokenState()
	e.lint()
}

// TestDiskFullMidBody: the temp file's writes fail with ENOSPC halfway
// through a body that a herd of requests is reading (GETs, a HEAD and a
// checksum sidecar joined to the one flight): every GET gets every byte,
// the others their answers, nothing is left in DATA_DIR/tmp or the blob
// store, and fills stay uncached until the volume has room again.
func TestDiskFullMidBody(t *testing.T) {
	e := newEnv(t)
	vol := e.fakeVolume(50 * gib)
	up := newFakeUpstream(t)
	body := jarBytes(jarPath, 6<<20+3)
	_, sha1hex, _, _ := digests(body)
	up.set(jarPath, fakeFile{body: body, fault: faultHold, checksum: sha1hex})
	uid := e.upstream(up.URL, nil, nil)
	// The upstream sends half (3 MiB) and holds: the writes fail past 4 MiB,
	// once every request has joined.
	e.faults.ENOSPCAfter(4 << 20)

	const gets = 4
	joined := make(chan struct{}, gets+2)
	e.hooks.OnJoin = func() { joined <- struct{}{} }
	var wg sync.WaitGroup
	results := make([]resp, gets+2)
	paths := []string{jarPath, jarPath, jarPath, jarPath, jarPath + ".sha1", jarPath}
	for i, p := range paths {
		wg.Add(1)
		go func() {
			defer wg.Done()
			method := http.MethodGet
			if i == gets+1 {
				method = http.MethodHead
			}
			results[i] = e.do(method, "/"+strconv.FormatInt(e.registry, 10)+"/"+p, nil, "Private-Token", rootToken)
		}()
	}
	<-up.midBody
	for range gets + 1 {
		<-joined
	}
	e.hooks.OnJoin = nil
	up.releaseHeld()
	wg.Wait()
	for i := range gets {
		r := results[i].expect(t, 200)
		if !bytes.Equal(r.body, body) {
			t.Fatalf("GET %d: %d bytes, want the %d of the file", i, len(r.body), len(body))
		}
	}
	results[gets].expect(t, 200).expectBody(t, sha1hex)
	h := results[gets+1].expect(t, 200)
	if h.header.Get("Content-Length") != strconv.Itoa(len(body)) || h.header.Get("X-Checksum-Sha1") != sha1hex {
		t.Fatalf("HEAD headers %v", h.header)
	}
	if got := up.calls(jarPath); got != 1 {
		t.Fatalf("upstream GETs = %d, want 1", got)
	}
	e.expectUncached(uid, jarPath)
	if got := e.metric("registryd_cache_fill_disk_full_total", "stage", "write"); got != 1 {
		t.Fatalf("disk full (write) = %v, want 1", got)
	}
	// The failure holds the fills off the disk: the next miss does not
	// even try (statfs shows no change, as with a quota).
	if got := e.metric("registryd_cache_filling"); got != 0 {
		t.Fatalf("registryd_cache_filling = %v after a failed write", got)
	}
	up.set(jarPath, fakeFile{body: body, checksum: sha1hex})
	e.get(jarPath).expect(t, 200).expectBody(t, string(body))
	e.expectUncached(uid, jarPath)
	if got := e.metric("registryd_cache_fill_disk_full_total", "stage", "before"); got != 1 {
		t.Fatalf("disk full (before) = %v, want 1", got)
	}

	// Space returns (the volume has more free space than after the
	// failure): fills write again, by themselves.
	e.faults.NoWriteFault()
	e.setFree(vol, 60*gib)
	e.get(jarPath).expect(t, 200).expectBody(t, string(body))
	if _, ok := e.entry(uid, "/"+jarPath); !ok {
		t.Fatal("not cached once space returned")
	}
	e.noBrokenState()
}

// TestDiskFullSmallFile: a small body is answered from memory before its
// temp file is written; a write that fails then costs its clients nothing.
func TestDiskFullSmallFile(t *testing.T) {
	e := newEnv(t)
	e.fakeVolume(50 * gib)
	up := newFakeUpstream(t)
	pomPath := "org/example/lib/1.0/lib-1.0.pom"
	pom := bytes.Repeat([]byte("<project/>"), 500)
	up.set(pomPath, fakeFile{body: pom})
	uid := e.upstream(up.URL, nil, nil)
	e.faults.ENOSPCAfter(100)
	e.get(pomPath).expect(t, 200).expectBody(t, string(pom))
	e.expectUncached(uid, pomPath)
	if got := e.metric("registryd_cache_fill_disk_full_total", "stage", "store"); got != 1 {
		t.Fatalf("disk full (store) = %v, want 1", got)
	}
}

// TestDiskFullWindow: a body three times the memory window goes uncached
// to three concurrent clients; each gets every byte while the memory held
// stays within the window.
func TestDiskFullWindow(t *testing.T) {
	e := newEnv(t)
	e.fakeVolume(0)
	up := newFakeUpstream(t)
	body := jarBytes(jarPath, 3*spillWindow+12345)
	up.set(jarPath, fakeFile{body: body})
	uid := e.upstream(up.URL, nil, nil)
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := e.getNow(jarPath).expect(t, 200)
			if !bytes.Equal(r.body, body) {
				t.Errorf("got %d bytes, want the %d of the file", len(r.body), len(body))
			}
		}()
	}
	wg.Wait()
	e.expectUncached(uid, jarPath)
	// The window is per flight: a client that, on a loaded machine, came
	// after the first flight ended started a second one, whose window may
	// overlap the first's last pieces.
	flights := int64(up.calls(jarPath))
	if p := e.srv.disk.peak.Load(); p > flights*(spillWindow+spillChunk) || p == 0 {
		t.Fatalf("peak memory %d over %d flight(s), want within the window of %d each", p, flights, spillWindow)
	}
}

// TestDiskFullClientGone: an uncached fill whose client hangs up stops
// reading the upstream (nothing would be stored) and frees its memory.
func TestDiskFullClientGone(t *testing.T) {
	e := newEnv(t)
	e.fakeVolume(0)
	up := newFakeUpstream(t)
	body := jarBytes(jarPath, 4*spillWindow)
	up.set(jarPath, fakeFile{body: body, fault: faultHold})
	uid := e.upstream(up.URL, nil, nil)
	res := e.startHeld(jarPath)
	if _, err := io.ReadFull(res.Body, make([]byte, 1000)); err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	e.client.CloseIdleConnections()
	e.waitFills() // returns: the fill ended although the upstream still holds half the body
	e.expectUncached(uid, jarPath)
	if got := e.metric("registryd_upstream_requests_total", "outcome", "aborted"); got != 1 {
		t.Fatalf("aborted upstream requests = %v, want 1", got)
	}
}

// TestDiskFullRevalidation: a stale entry whose upstream changed the file
// while the volume is full. The new body, held back until it is whole and
// verified as every revalidation's is, fits the memory window: it is
// served, the stored copy stays. A body larger than the window cannot be
// held back: the stored copy is served, as when a revalidation fails.
func TestDiskFullRevalidation(t *testing.T) {
	e := newEnv(t)
	vol := e.fakeVolume(50 * gib)
	up := newFakeUpstream(t)
	old := jarBytes(jarPath, 300<<10)
	up.set(jarPath, fakeFile{body: old, etag: `"v1"`})
	uid := e.upstream(up.URL, hours(1), nil)
	e.get(jarPath).expect(t, 200).expectBody(t, string(old))

	e.setFree(vol, 0)
	newer := jarBytes("changed/"+jarPath, 500<<10)
	up.set(jarPath, fakeFile{body: newer, etag: `"v2"`})
	e.clock.Advance(2 * time.Hour)
	e.get(jarPath).expect(t, 200).expectBody(t, string(newer))
	ce, ok := e.entry(uid, "/"+jarPath)
	if !ok || ce.ETag != `"v1"` {
		t.Fatalf("entry after an uncached revalidation: %+v %v", ce, ok)
	}

	huge := jarBytes("huge/"+jarPath, spillWindow+spillChunk+1)
	up.set(jarPath, fakeFile{body: huge, etag: `"v3"`})
	e.get(jarPath).expect(t, 200).expectBody(t, string(old))
	if held := e.srv.disk.held.Load(); held != 0 {
		t.Fatalf("%d bytes still held", held)
	}
	e.noBrokenState()
}

// TestDiskFullUpload: an upload the volume cannot take answers 507, not 500.
func TestDiskFullUpload(t *testing.T) {
	e := newEnv(t)
	up := newFakeUpstream(t)
	uid := e.upstream(up.URL, nil, nil)
	e.faults.ENOSPCAfter(10)
	good := gatewayToken(e.secret, "HS256", map[string]any{"iat": e.clock.Now().Unix(), "iss": "gateway"})
	b, ctype := multipartBody(t, []byte("uploaded jar bytes"), "path", jarPath)
	r := e.do(http.MethodPost, "/"+strconv.FormatInt(e.registry, 10)+"/"+jarPath+"/upload", b,
		"Content-Type", ctype, "Upstream-GID", "gid://registryd/Upstream/"+strconv.FormatInt(uid, 10),
		"Svc-Gateway-Api-Request", good, "Private-Token", rootToken)
	if r.status != 507 {
		t.Fatalf("status %d, want 507: %s", r.status, r.body)
	}
	r.expectMessage(t, "message", "507 Insufficient Storage - the data volume is full")
	e.noBrokenState()
}

// slowClientFlight starts an uncached flight of a large file with two
// clients: one reads it all (in the background; its answer comes on the
// returned channel), the other reads 1000 bytes and stops (the returned
// response, for the caller to close). The flight goes uncached mid-body
// (a write fault), after both joined it.
func (e *env) slowClientFlight(up *fakeUpstream, body []byte) (<-chan resp, *http.Response) {
	e.t.Helper()
	up.set(jarPath, fakeFile{body: body, fault: faultHold})
	e.faults.ENOSPCAfter(int64(len(body))/2 + spillChunk)
	joined := make(chan struct{}, 4)
	e.hooks.OnJoin = func() { joined <- struct{}{} }
	fast := make(chan resp, 1)
	go func() {
		fast <- e.do(http.MethodGet, "/"+strconv.FormatInt(e.registry, 10)+"/"+jarPath, nil, "Private-Token", rootToken)
	}()
	<-up.midBody
	slow := e.startHeld(jarPath)
	<-joined
	e.hooks.OnJoin = nil
	if _, err := io.ReadFull(slow.Body, make([]byte, 1000)); err != nil {
		e.t.Fatal(err)
	}
	up.releaseHeld()
	return fast, slow
}

// TestDiskFullSlowClient: a client that stops reading an uncached download
// holds back the others of its flight for spillStall at most: then it is
// cut off (its response ends short), the others get the whole file, and
// the upstream, which did nothing wrong, is not charged for it.
//
// The stall is taken when the fast client has read all there is (stallNow),
// not after a time: with a short spillStall a loaded machine could keep the
// fast client inside one write for longer and make it look stalled too.
func TestDiskFullSlowClient(t *testing.T) {
	e := newEnv(t)
	e.fakeVolume(50 * gib)
	e.hooks.SpillStall = time.Hour
	e.hooks.StallNow = fastReaderCaughtUp
	up := newFakeUpstream(t)
	uid := e.upstream(up.URL, nil, nil)
	body := jarBytes(jarPath, 4*spillWindow+777)
	fastc, slow := e.slowClientFlight(up, body)
	r := (<-fastc).expect(t, 200)
	if !bytes.Equal(r.body, body) {
		t.Fatalf("the fast client got %d bytes, want the %d of the file", len(r.body), len(body))
	}
	if got := e.metric("registryd_cache_uncached_slow_client_cuts_total"); got < 1 {
		t.Fatalf("slow client cuts = %v, want at least 1", got)
	}
	rest, err := io.ReadAll(slow.Body)
	if err == nil || 1000+len(rest) >= len(body) {
		t.Fatalf("the stalled client read %d more bytes, err %v: want its response cut short", len(rest), err)
	}
	slow.Body.Close()
	e.client.CloseIdleConnections()
	e.waitFills()
	e.expectUncached(uid, jarPath)
	if got := e.metric("registryd_upstream_requests_total", "outcome", "ok"); got != 1 {
		t.Fatalf("upstream requests ok = %v, want 1 (the body was whole)", got)
	}
	if st := e.srv.health.Status(uid); st.Failures != 0 || st.LastError != "" {
		t.Fatalf("upstream health %+v after a client stalled", st)
	}
}

// fastReaderCaughtUp reports whether the fastest reader of f has sent every
// byte the fill wrote: the window is full and only the laggards hold it.
func fastReaderCaughtUp(f *flight) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, off := range f.pass.readers {
		if off == f.written {
			return true
		}
	}
	return false
}

// TestDiskFullAllClientsStalled: when every client of an uncached download
// stops reading, the flight ends after spillStall (the upstream connection
// and its concurrency slot are given back), and the upstream's health is
// not charged.
func TestDiskFullAllClientsStalled(t *testing.T) {
	e := newEnv(t)
	e.fakeVolume(50 * gib)
	e.hooks.SpillStall = 20 * time.Millisecond
	up := newFakeUpstream(t)
	uid := e.upstream(up.URL, nil, nil)
	body := jarBytes(jarPath, 4*spillWindow)
	up.set(jarPath, fakeFile{body: body, fault: faultHold})
	e.faults.ENOSPCAfter(int64(len(body))/2 + spillChunk)
	slow := e.startHeld(jarPath)
	if _, err := io.ReadFull(slow.Body, make([]byte, 1000)); err != nil {
		t.Fatal(err)
	}
	<-up.midBody
	up.releaseHeld()
	e.waitFills() // returns while the client still holds its response
	if got := e.metric("registryd_upstream_requests_total", "outcome", "aborted"); got != 1 {
		t.Fatalf("aborted upstream requests = %v, want 1", got)
	}
	if st := e.srv.health.Status(uid); st.Failures != 0 || st.LastError != "" {
		t.Fatalf("upstream health %+v: the client stalled, not the upstream", st)
	}
	slow.Body.Close()
	e.client.CloseIdleConnections()
	e.expectUncached(uid, jarPath)
}

// TestDiskFullSidecarMemo: the checksum sidecars Maven asks for right after
// a file streamed uncached answer from that file's digests, without a
// second fetch of the file; once the memo expires, a sidecar fetches the
// file again (only its digests answer a sidecar).
func TestDiskFullSidecarMemo(t *testing.T) {
	e := newEnv(t)
	e.fakeVolume(0)
	up := newFakeUpstream(t)
	body := jarBytes(jarPath, 3<<20)
	md5hex, sha1hex, _, _ := digests(body)
	up.set(jarPath, fakeFile{body: body})
	uid := e.upstream(up.URL, nil, nil)
	e.get(jarPath).expect(t, 200).expectBody(t, string(body))
	e.get(jarPath+".sha1").expect(t, 200).expectBody(t, sha1hex)
	e.get(jarPath+".md5").expect(t, 200).expectBody(t, md5hex)
	if got := up.calls(jarPath); got != 1 {
		t.Fatalf("upstream GETs of the file = %d, want 1", got)
	}
	e.expectUncached(uid, jarPath)
	e.clock.Advance(uncachedSumsTTL)
	e.get(jarPath+".sha1").expect(t, 200).expectBody(t, sha1hex)
	if got := up.calls(jarPath); got != 2 {
		t.Fatalf("upstream GETs of the file = %d after the memo expired, want 2", got)
	}
}

// waitUnheld waits until the uncached bodies' memory is given back: the
// last holder of a flight releases it when fasthttp closes its response,
// a moment after the client has read (or lost) it.
func (e *env) waitUnheld() {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for e.srv.disk.held.Load() != 0 {
		if time.Now().After(deadline) {
			e.t.Fatalf("%d bytes of uncached bodies still held", e.srv.disk.held.Load())
		}
		time.Sleep(time.Millisecond) // a poll interval, not a synchronisation
	}
}

// TestBadAnswersOnAnUncachedMiss: every upstream fault class on a miss while
// the disk is full (the fill streams uncached, passthrough.go): the client
// never holds a complete-looking wrong file, the next upstream serves as
// when caching, nothing is stored, no memory stays held, and the checksum
// sidecar that follows answers the served file's digest (the memo keeps
// only digests of bodies served whole), never the faulty upstream's.
func TestBadAnswersOnAnUncachedMiss(t *testing.T) {
	for _, size := range []int{2 << 10, 3 * spillChunk} {
		large := size > memBodyMax
		for _, c := range badAnswers(large) {
			t.Run(strconv.Itoa(size)+"/"+c.name, func(t *testing.T) {
				e := envFor(t, c)
				e.fakeVolume(0)
				bad, good := newFakeUpstream(t), newFakeUpstream(t)
				body := jarBytes(jarPath, size)
				badURL := bad.URL
				if c.down {
					badURL = downURL(t)
				} else {
					bad.set(jarPath, c.file(jarBytes("bad/"+jarPath, size)))
				}
				good.set(jarPath, fakeFile{body: body})
				badID, goodID := e.upstream(badURL, nil, nil), e.upstream(good.URL, nil, nil)

				r := e.get(jarPath)
				if c.midStream || c.streamed {
					if r.status != 200 || r.readErr == nil {
						t.Fatalf("status %d, read error %v: a body broken mid-stream must end short", r.status, r.readErr)
					}
					e.waitFills()
					if c.midStream && good.total() != 0 {
						t.Fatal("the next upstream was asked after the answer had started")
					}
					r = e.get(jarPath) // the client's retry
				}
				if c.midStream && r.readErr != nil {
					// A transport fault may well repeat: the retry may end
					// short again, but never look complete.
					if r.status != 200 {
						t.Fatalf("retry status %d", r.status)
					}
				} else {
					r.expect(t, 200).expectBody(t, string(body))
					_, sha1hex, _, _ := digests(body)
					calls := good.calls(jarPath)
					e.get(jarPath+".sha1").expect(t, 200).expectBody(t, sha1hex)
					if good.calls(jarPath) != calls {
						t.Fatal("the sidecar fetched the file again")
					}
				}
				e.waitFills()
				e.waitUnheld()
				e.expectUncached(badID, jarPath)
				e.expectUncached(goodID, jarPath)
				if e.rememberedAbsent(badID, jarPath) {
					t.Fatal("a faulty answer was remembered as a 404")
				}
			})
		}
	}
}

// TestBadAnswersOnAnUncachedRevalidation: every upstream fault class on
// the revalidation of a stale entry while the disk is full: the stored copy
// is served and stays.
func TestBadAnswersOnAnUncachedRevalidation(t *testing.T) {
	for _, c := range badAnswers(false) {
		t.Run(c.name, func(t *testing.T) {
			e := envFor(t, c)
			vol := e.fakeVolume(50 * gib)
			up := newFakeUpstream(t)
			good := jarBytes(jarPath, 3*spillChunk)
			up.set(jarPath, fakeFile{body: good, etag: `"v1"`})
			uid := e.upstream(up.URL, hours(1), nil)
			e.get(jarPath).expect(t, 200).expectBody(t, string(good))
			before, ok := e.entry(uid, "/"+jarPath)
			if !ok {
				t.Fatal("not cached")
			}
			e.setFree(vol, 0)
			e.clock.Advance(2 * time.Hour)
			if c.down {
				up.srv.Close()
			} else {
				up.set(jarPath, c.file(jarBytes("changed/"+jarPath, 3*spillChunk)))
			}
			e.get(jarPath).expect(t, 200).expectBody(t, string(good))
			e.waitFills()
			e.waitUnheld()
			after, ok := e.entry(uid, "/"+jarPath)
			if !ok || after.SHA256 != before.SHA256 {
				t.Fatalf("the stored copy was replaced or removed: %+v, %v", after, ok)
			}
			if e.rememberedAbsent(uid, jarPath) {
				t.Fatal("a faulty answer was remembered as a 404")
			}
			e.noBrokenState()
		})
	}
}
