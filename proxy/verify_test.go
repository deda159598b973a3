package proxy

import (
	"bytes"
	"compress/gzip"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"registryd/store"
)

// An upstream answer is untrusted input. These tests play a hostile first
// upstream in front of a good second one, on a miss and on a revalidation,
// and check what the client got, what the cache holds afterwards, and that
// a later request gets the right bytes.

// badAnswer is one way an upstream can fail to hand over the file: every
// fault class of DESIGN.md's "Tests", transport faults and answer faults.
type badAnswer struct {
	name string
	file func(body []byte) fakeFile
	// down: nothing listens at the upstream's address (file is unused).
	down bool
	// cfg sets the timeouts the fault needs to show within a test.
	cfg func(*envOptions)
	// streamed: the refusal comes after the headers went out (a large
	// body whose checksum does not match at its end), so the first client
	// sees a 200 that ends short rather than the next upstream's file; the
	// refusal is remembered, so its retry gets the next upstream's.
	streamed bool
	// midStream: a transport failure after the headers went out (a large
	// body): the client's 200 ends short, nothing is cached, and the next
	// upstream is not asked in that request.
	midStream bool
	// broken: a transport failure, not a refused answer (not counted as a
	// refusal).
	broken bool
}

func badAnswers(large bool) []badAnswer {
	custom := func(h func(w http.ResponseWriter, r *http.Request, body []byte)) func(body []byte) fakeFile {
		return func(body []byte) fakeFile {
			return fakeFile{body: body, custom: func(w http.ResponseWriter, r *http.Request) { h(w, r, body) }}
		}
	}
	fault := func(f fault) func(body []byte) fakeFile {
		return func(body []byte) fakeFile { return fakeFile{body: body, fault: f} }
	}
	return []badAnswer{
		// Transport faults.
		{name: "connection refused", down: true, broken: true},
		{name: "reset before the headers", file: custom(func(w http.ResponseWriter, _ *http.Request, _ []byte) {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.(*net.TCPConn).SetLinger(0)
				conn.Close()
			}
		}), broken: true},
		{name: "hang before the headers", file: custom(func(_ http.ResponseWriter, r *http.Request, _ []byte) {
			<-r.Context().Done()
		}), cfg: func(o *envOptions) { o.upstream.HeaderTimeout = 300 * time.Millisecond }, broken: true},
		{name: "reset mid-body", file: fault(faultReset), broken: true, midStream: large},
		{name: "slow drip past the fill timeout", file: custom(func(w http.ResponseWriter, r *http.Request, body []byte) {
			w.Header().Set("Content-Length", strconv.Itoa(len(body)))
			half := len(body) / 2
			w.Write(body[:half])
			w.(http.Flusher).Flush()
			tick := time.NewTicker(50 * time.Millisecond)
			defer tick.Stop()
			for i := half; i < len(body); i++ {
				select {
				case <-tick.C:
					w.Write(body[i : i+1])
					w.(http.Flusher).Flush()
				case <-r.Context().Done():
					return
				}
			}
		}), cfg: func(o *envOptions) { o.Upstreams.FillTimeout = time.Second }, broken: true, midStream: large},
		{name: "Content-Length larger than the body", file: fault(faultWrongLen), broken: true, midStream: large},
		{name: "cut chunked body", file: fault(faultTruncated), broken: true, midStream: large},
		{name: "503", file: func(body []byte) fakeFile { return fakeFile{body: body, status: 503} }, broken: true},
		{name: "429 with Retry-After", file: custom(func(w http.ResponseWriter, _ *http.Request, _ []byte) {
			w.Header().Set("Retry-After", "120")
			w.WriteHeader(http.StatusTooManyRequests)
		}), broken: true},

		// Answer faults: a 2xx without the file.
		{name: "204 No Content", file: custom(func(w http.ResponseWriter, _ *http.Request, _ []byte) {
			w.WriteHeader(http.StatusNoContent)
		})},
		{name: "unsolicited 206", file: custom(func(w http.ResponseWriter, _ *http.Request, body []byte) {
			w.Header().Set("Content-Range", "bytes 0-99/"+strconv.Itoa(len(body)))
			w.Header().Set("Content-Length", "100")
			w.WriteHeader(http.StatusPartialContent)
			w.Write(body[:100])
		})},
		{name: "201 Created", file: custom(func(w http.ResponseWriter, _ *http.Request, body []byte) {
			w.WriteHeader(http.StatusCreated)
			w.Write(body)
		})},
		{name: "HTML page as text/html", file: custom(func(w http.ResponseWriter, _ *http.Request, _ []byte) {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			w.Write([]byte("<!DOCTYPE html><html><body>Please log in to the hotel Wi-Fi</body></html>"))
		})},
		{name: "HTML page as octet-stream", file: custom(func(w http.ResponseWriter, _ *http.Request, body []byte) {
			page := append([]byte("\n<html><head><title>portal</title></head>"), bytes.Repeat([]byte(" "), len(body))...)
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Write(page)
		})},
		{name: "empty 200 for a jar", file: custom(func(w http.ResponseWriter, _ *http.Request, _ []byte) {
			w.Header().Set("Content-Length", "0")
		})},
		{name: "text/plain for a jar", file: custom(func(w http.ResponseWriter, _ *http.Request, body []byte) {
			w.Header().Set("Content-Type", "text/plain")
			w.Write(body)
		})},
		{name: "Content-Encoding br", file: custom(func(w http.ResponseWriter, _ *http.Request, body []byte) {
			w.Header().Set("Content-Encoding", "br")
			w.Write(body)
		})},
		{name: "Content-Length shorter than the body", file: fault(faultLongBody), streamed: large},
		{name: "X-Checksum-Sha1 contradicts the body", file: func(body []byte) fakeFile {
			return fakeFile{body: body, checksum: "0123456789abcdef0123456789abcdef01234567"}
		}, streamed: large},
		{name: "X-Checksum-Md5 contradicts the body", file: func(body []byte) fakeFile {
			return fakeFile{body: body, md5: "0123456789abcdef0123456789abcdef"}
		}, streamed: large},
		{name: "Nexus ETag names another SHA-1", file: func(body []byte) fakeFile {
			return fakeFile{body: body, etag: `"{SHA1{0123456789abcdef0123456789abcdef01234567}}"`}
		}, streamed: large},
	}
}

// envFor is a test env with the timeouts c needs.
func envFor(t *testing.T, c badAnswer) *env {
	if c.cfg != nil {
		return newEnv(t, c.cfg)
	}
	return newEnv(t)
}

func TestBadAnswersOnAMiss(t *testing.T) { badAnswersOnAMiss(t, envFor) }

// badAnswersOnAMiss feeds every fault class to a miss on the envs mk makes
// (a single node, or a cluster node: cluster_faults_test.go).
func badAnswersOnAMiss(t *testing.T, mk func(*testing.T, badAnswer) *env) {
	for _, size := range []int{2 << 10, 200 << 10} {
		large := size > memBodyMax
		for _, c := range badAnswers(large) {
			t.Run(strconv.Itoa(size)+"/"+c.name, func(t *testing.T) {
				e := mk(t, c)
				bad, good := newFakeUpstream(t), newFakeUpstream(t)
				body := jarBytes(jarPath, size)
				badURL := bad.URL
				if c.down {
					badURL = downURL(t)
				} else {
					bad.set(jarPath, c.file(body))
				}
				good.set(jarPath, fakeFile{body: body})
				badID, goodID := e.upstream(badURL, nil, nil), e.upstream(good.URL, nil, nil)

				r := e.get(jarPath)
				// No fault class is ever taken for the file's absence.
				if e.rememberedAbsent(badID, jarPath) {
					t.Fatal("a faulty answer was remembered as a 404")
				}
				if c.midStream {
					// The answer had started: it ends short, caches nothing,
					// and is not remembered (a transport fault may pass).
					if r.status != 200 || r.readErr == nil {
						t.Fatalf("status %d, read error %v: a body broken mid-stream must end short", r.status, r.readErr)
					}
					e.waitFills()
					if _, ok := e.entry(badID, "/"+jarPath); ok {
						t.Fatal("a broken body was cached")
					}
					if good.total() != 0 {
						t.Fatal("the next upstream was asked after the answer had started")
					}
					e.noBrokenState()
					return
				}
				if c.streamed {
					// The body was on its way when it failed its check: the
					// response must end short, never look complete.
					if r.status != 200 || r.readErr == nil {
						t.Fatalf("status %d, read error %v: a refused streamed body must end short", r.status, r.readErr)
					}
					e.waitFills()
					// The retry a client makes goes to the good upstream.
					r = e.get(jarPath)
				}
				r.expect(t, 200).expectBody(t, string(body))
				_, sha1hex, _, _ := digests(body)
				if got := r.header.Get("X-Checksum-Sha1"); got != sha1hex && !(large && got == "") {
					t.Fatalf("X-Checksum-Sha1 %q, want %q", got, sha1hex)
				}
				e.waitFills()
				if _, ok := e.entry(badID, "/"+jarPath); ok {
					t.Fatal("the refused answer was cached")
				}
				ce, ok := e.entry(goodID, "/"+jarPath)
				if !ok || ce.SHA1 != sha1hex {
					t.Fatalf("the good upstream's entry: %+v, %v", ce, ok)
				}
				want := 1.0
				if c.broken {
					want = 0
				}
				if n := e.metric("registryd_upstream_refusals_total", "upstream", strconv.FormatInt(badID, 10)); n != want {
					t.Fatalf("refusals counted: %v, want %v", n, want)
				}
				e.noBrokenState()

				calls := bad.total() + good.total()
				e.get(jarPath).expect(t, 200).expectBody(t, string(body))
				if bad.total()+good.total() != calls {
					t.Fatal("the next request was not a hit")
				}
			})
		}
	}
}

// TestBadAnswerAloneIs502: with no other upstream, a refused answer is a
// 502 that names the reason, never a 200 of the wrong bytes.
func TestBadAnswerAloneIs502(t *testing.T) {
	e := newEnv(t)
	up := newFakeUpstream(t)
	up.set(jarPath, fakeFile{body: []byte("<html>captive</html>"), ctype: "text/html"})
	uid := e.upstream(up.URL, nil, nil)
	r := e.get(jarPath).expect(t, 502)
	r.expectMessage(t, "message",
		"502 Bad Gateway - Upstream not available: upstream 1: answered text/html (a web page) for a file that is not HTML")
	e.noBrokenState()
	if _, ok := e.entry(uid, "/"+jarPath); ok {
		t.Fatal("the page was cached")
	}
}

func TestBadAnswersOnARevalidation(t *testing.T) { badAnswersOnARevalidation(t, envFor) }

// badAnswersOnARevalidation feeds every fault class to a revalidation on the
// envs mk makes.
func badAnswersOnARevalidation(t *testing.T, mk func(*testing.T, badAnswer) *env) {
	for _, size := range []int{2 << 10, 200 << 10} {
		// A revalidation answers nothing before a new body is whole and
		// verified: every fault, mid-body ones included, serves the copy.
		for _, c := range badAnswers(false) {
			t.Run(strconv.Itoa(size)+"/"+c.name, func(t *testing.T) {
				e := mk(t, c)
				up := newFakeUpstream(t)
				good := jarBytes(jarPath, size)
				up.set(jarPath, fakeFile{body: good, etag: `"v1"`})
				uid := e.upstream(up.URL, hours(1), nil)
				e.get(jarPath).expect(t, 200).expectBody(t, string(good))
				e.waitFills()
				before, ok := e.entry(uid, "/"+jarPath)
				if !ok {
					t.Fatal("not cached")
				}

				// The copy goes stale; the upstream now answers badly with a
				// changed file.
				e.clock.Advance(2 * time.Hour)
				changed := jarBytes("changed/"+jarPath, size)
				if !c.down {
					up.set(jarPath, c.file(changed))
				}
				calls := up.calls(jarPath)
				if c.down {
					up.srv.Close()
				}
				r := e.get(jarPath)
				r.expect(t, 200).expectBody(t, string(good))
				if e.rememberedAbsent(uid, jarPath) {
					t.Fatal("a faulty answer was remembered as a 404")
				}
				// One GET; net/http retries one that died before any answer on
				// a kept-alive connection, once, on a new connection.
				if n := up.calls(jarPath) - calls; !c.down && (n < 1 || n > 2) {
					t.Fatalf("%d upstream GETs for one revalidation", n)
				}
				_, sha1hex, _, _ := digests(good)
				if r.header.Get("X-Checksum-Sha1") != sha1hex {
					t.Fatalf("X-Checksum-Sha1 %q, want the stored copy's %q", r.header.Get("X-Checksum-Sha1"), sha1hex)
				}
				e.waitFills()
				after, ok := e.entry(uid, "/"+jarPath)
				if !ok || after.SHA256 != before.SHA256 {
					t.Fatalf("the good copy was replaced or removed: %+v, %v", after, ok)
				}
				if n := e.metric("registryd_cache_lookups_total", "result", "stale"); n != 1 {
					t.Fatalf("stale_served %v, want 1", n)
				}
				e.noBrokenState()
				if c.down {
					return
				}

				// Repaired: the next revalidation takes the new file.
				e.clock.Advance(2 * time.Minute) // past the refusal memory
				up.set(jarPath, fakeFile{body: changed, etag: `"v2"`})
				e.get(jarPath).expect(t, 200).expectBody(t, string(changed))
				e.waitFills()
				if ce, _ := e.entry(uid, "/"+jarPath); ce.SHA1 == sha1hex {
					t.Fatal("the repaired upstream's new file did not replace the stored copy")
				}
			})
		}
	}
}

// TestHeadWaitsForTheCheck: a HEAD that starts a large miss must not say
// 200 for a body that then fails its checksum.
func TestHeadWaitsForTheCheck(t *testing.T) {
	e := newEnv(t)
	up := newFakeUpstream(t)
	up.set(jarPath, fakeFile{body: jarBytes(jarPath, 200<<10), checksum: "0123456789abcdef0123456789abcdef01234567"})
	uid := e.upstream(up.URL, nil, nil)
	if r := e.head(jarPath); r.status == 200 {
		t.Fatalf("HEAD answered 200 (%v) for a body its checksum refuses", r.header)
	}
	e.waitFills()
	if _, ok := e.entry(uid, "/"+jarPath); ok {
		t.Fatal("cached")
	}
	e.noBrokenState()
}

// TestGzipEncodingIsDecoded: an upstream that sends Content-Encoding: gzip
// although registryd asked for identity gets its body decoded; the cache
// holds (and the checksums describe) the file, not the gzip.
func TestGzipEncodingIsDecoded(t *testing.T) {
	gzipped := func(body []byte) fakeFile {
		var gz bytes.Buffer
		zw := gzip.NewWriter(&gz)
		zw.Write(body)
		zw.Close()
		_, sha1hex, _, _ := digests(body)
		return fakeFile{body: body, custom: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Encoding", "gzip")
			w.Header().Set("Content-Length", strconv.Itoa(gz.Len()))
			w.Header().Set("X-Checksum-Sha1", sha1hex) // of the file, as Maven Central's are
			w.Write(gz.Bytes())
		}}
	}
	for _, size := range []int{2 << 10, 200 << 10} {
		t.Run(strconv.Itoa(size), func(t *testing.T) {
			e := newEnv(t)
			up := newFakeUpstream(t)
			uid := e.upstream(up.URL, hours(1), nil)
			// On a miss, then on a revalidation that finds a changed file.
			for _, body := range [][]byte{jarBytes(jarPath, size), jarBytes("v2/"+jarPath, size)} {
				up.set(jarPath, gzipped(body))
				_, sha1hex, _, _ := digests(body)
				r := e.get(jarPath).expect(t, 200).expectBody(t, string(body))
				if r.header.Get("Content-Encoding") != "" {
					t.Fatalf("Content-Encoding %q passed on", r.header.Get("Content-Encoding"))
				}
				e.waitFills()
				ce, ok := e.entry(uid, "/"+jarPath)
				if !ok || ce.SHA1 != sha1hex || ce.Size != int64(size) {
					t.Fatalf("entry %+v, %v: want the decoded file", ce, ok)
				}
				e.get(jarPath+".sha1").expect(t, 200).expectBody(t, sha1hex)
				e.clock.Advance(2 * time.Hour)
			}
		})
	}
}

// TestGoneUpstreamEntryIsDropped: a stale entry whose upstream now says 404
// is removed, and the file is stored from the next upstream, so the next
// request is a hit again.
func TestGoneUpstreamEntryIsDropped(t *testing.T) {
	for _, status := range []int{404, 410} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			e := newEnv(t)
			first, second := newFakeUpstream(t), newFakeUpstream(t)
			body := jarBytes(jarPath, 4<<10)
			first.set(jarPath, fakeFile{body: body, etag: `"a"`})
			second.set(jarPath, fakeFile{body: body})
			firstID := e.upstream(first.URL, hours(1), nil)
			secondID := e.upstream(second.URL, hours(1), nil)
			e.get(jarPath).expect(t, 200)
			e.waitFills()

			e.clock.Advance(2 * time.Hour)
			first.set(jarPath, fakeFile{status: status})
			e.get(jarPath).expect(t, 200).expectBody(t, string(body))
			e.waitFills()
			if _, ok := e.entry(firstID, "/"+jarPath); ok {
				t.Fatal("the entry its upstream no longer has is still there")
			}
			if _, ok := e.entry(secondID, "/"+jarPath); !ok {
				t.Fatal("the file was not stored from the next upstream")
			}
			calls := first.total() + second.total()
			e.get(jarPath).expect(t, 200).expectBody(t, string(body))
			if first.total()+second.total() != calls {
				t.Fatal("the next request asked an upstream: not a hit")
			}
		})
	}
}

// TestChecksumHeadersOnEveryDownload: x-checksum-sha1 and x-checksum-md5 on
// a small miss (computed before the answer), on a streamed miss whose
// upstream offered them (verified before the last byte), on a hit; only a
// streamed miss whose upstream offers none goes without.
func TestChecksumHeadersOnEveryDownload(t *testing.T) {
	small := jarBytes(jarPath, 2<<10)
	large := jarBytes(jarPath, 200<<10)
	md5s, sha1s, _, _ := digests(small)
	md5l, sha1l, _, _ := digests(large)
	cases := []struct {
		name              string
		file              fakeFile
		wantSHA1, wantMD5 string
	}{
		{"small, upstream offers nothing", fakeFile{body: small}, sha1s, md5s},
		{"large, upstream offers both", fakeFile{body: large, checksum: sha1l, md5: md5l}, sha1l, md5l},
		{"large, upstream offers SHA-1 only", fakeFile{body: large, checksum: sha1l}, sha1l, ""},
		{"large, upstream offers nothing", fakeFile{body: large}, "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			up := newFakeUpstream(t)
			up.set(jarPath, c.file)
			e.upstream(up.URL, nil, nil)
			md5hex, sha1hex, _, _ := digests(c.file.body)
			r := e.get(jarPath).expect(t, 200).expectBody(t, string(c.file.body))
			gotSHA1, gotMD5 := r.header.Get("X-Checksum-Sha1"), r.header.Get("X-Checksum-Md5")
			// A client whose answer starts after a fast upstream's body is
			// already whole gets its digests: never wrong ones.
			whole := gotSHA1 == sha1hex && gotMD5 == md5hex
			if !whole && (gotSHA1 != c.wantSHA1 || gotMD5 != c.wantMD5) {
				t.Fatalf("miss: sha1 %q md5 %q, want %q %q", r.header.Get("X-Checksum-Sha1"),
					r.header.Get("X-Checksum-Md5"), c.wantSHA1, c.wantMD5)
			}
			e.waitFills()
			r = e.get(jarPath).expect(t, 200)
			if r.header.Get("X-Checksum-Sha1") != sha1hex || r.header.Get("X-Checksum-Md5") != md5hex {
				t.Fatalf("hit: sha1 %q md5 %q", r.header.Get("X-Checksum-Sha1"), r.header.Get("X-Checksum-Md5"))
			}
		})
	}
}

func (e *env) upstreamWithPolicy(url, policy string) int64 {
	e.t.Helper()
	u, err := e.st.CreateUpstream(e.registry, store.NewUpstream{URL: url, Name: url, ChecksumPolicy: policy})
	if err != nil {
		e.t.Fatal(err)
	}
	return u.ID
}

func TestChecksumPolicies(t *testing.T) {
	body := jarBytes(jarPath, 200<<10)
	_, sha1hex, _, _ := digests(body)
	wrong := "0123456789abcdef0123456789abcdef01234567"
	cases := []struct {
		name, global, policy string
		file                 fakeFile
		sidecar              *fakeFile // the upstream's .sha1, when it has one
		wantCached           bool
	}{
		{name: "require, sidecar matches", policy: "require", file: fakeFile{body: body},
			sidecar: &fakeFile{body: []byte(sha1hex + "  lib-1.0.jar\n")}, wantCached: true},
		{name: "require, header offered", policy: "require", file: fakeFile{body: body, checksum: sha1hex}, wantCached: true},
		{name: "require, no checksum at all", policy: "require", file: fakeFile{body: body}},
		{name: "require, sidecar wrong", policy: "require", file: fakeFile{body: body},
			sidecar: &fakeFile{body: []byte(wrong)}},
		{name: "require, sidecar malformed", policy: "require", file: fakeFile{body: body},
			sidecar: &fakeFile{body: []byte("<html>nope</html>")}},
		{name: "require from the global default", global: "require", file: fakeFile{body: body}},
		{name: "off ignores a wrong header", policy: "off", file: fakeFile{body: body, checksum: wrong}, wantCached: true},
		{name: "global off, upstream verify", global: "off", policy: "verify",
			file: fakeFile{body: body, checksum: wrong}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, func(o *envOptions) {
				if c.global != "" {
					o.Upstreams.ChecksumPolicy = c.global
				}
			})
			up := newFakeUpstream(t)
			up.set(jarPath, c.file)
			if c.sidecar != nil {
				up.set(jarPath+".sha1", *c.sidecar)
			}
			uid := e.upstreamWithPolicy(up.URL, c.policy)
			r := e.get(jarPath)
			e.waitFills()
			_, cached := e.entry(uid, "/"+jarPath)
			if cached != c.wantCached {
				t.Fatalf("cached %v, want %v (status %d)", cached, c.wantCached, r.status)
			}
			if c.wantCached {
				r.expect(t, 200).expectBody(t, string(body))
				return
			}
			// Refused before or at the end of the body: never a whole 200.
			if r.status == 200 && r.readErr == nil {
				t.Fatal("a refused file was answered as a complete 200")
			}
			if e.metric("registryd_upstream_refusals_total", "upstream", strconv.FormatInt(uid, 10)) != 1 {
				t.Fatal("the refusal was not counted")
			}
			e.noBrokenState()
		})
	}
}
