package blob

import (
	"crypto/md5"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// patterned is n deterministic bytes that differ from piece to piece, so a
// hasher that skipped or repeated a piece would get another digest.
func patterned(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i>>16)
	}
	return b
}

func wantDigests(b []byte) Digests {
	m, s1, s2, s5 := md5.Sum(b), sha1.Sum(b), sha256.Sum256(b), sha512.Sum512(b)
	return Digests{Size: int64(len(b)), MD5: hex.EncodeToString(m[:]), SHA1: hex.EncodeToString(s1[:]),
		SHA256: hex.EncodeToString(s2[:]), SHA512: hex.EncodeToString(s5[:])}
}

// hashers counts the goroutines running Writer.hash.
func hashers() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	return strings.Count(string(buf), "store.(*Writer).hash(")
}

// TestBlobWriterHashesBehindTheWriter writes in the shapes a fill and an
// upload produce: the digests must be those of the bytes whether the hashers
// kept pace, fell behind by more than hashLagMax and waited for the end, or
// had their slot taken and did everything in Finish.
func TestBlobWriterHashesBehindTheWriter(t *testing.T) {
	e := newBlobEnv(t)
	cases := []struct {
		name    string
		size    int
		chunk   int
		noSlots bool // the hashing slots are held until Finish
	}{
		{name: "one byte", size: 1, chunk: 1},
		{name: "one chunk smaller than a piece", size: 10 << 10, chunk: 64 << 10},
		{name: "odd chunks across pieces", size: 1<<20 + 12345, chunk: 4099},
		{name: "past the lag bound", size: 3*hashLagMax + 17, chunk: 256 << 10},
		{name: "one large write", size: hashLagMax + hashPiece + 1, chunk: hashLagMax + hashPiece + 1},
		{name: "hashers starved until Finish", size: 2*hashLagMax + 5, chunk: 256 << 10, noSlots: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			body := patterned(c.size)
			w, err := e.b.Create()
			noErr(t, err)
			defer w.Abort()
			if c.noSlots {
				for range cap(e.b.disk.hashSlots) {
					e.b.disk.hashSlots <- struct{}{}
				}
			}
			for off := 0; off < len(body); off += c.chunk {
				if _, err := w.Write(body[off:min(off+c.chunk, len(body))]); err != nil {
					t.Fatal(err)
				}
			}
			if c.noSlots {
				for range cap(e.b.disk.hashSlots) {
					<-e.b.disk.hashSlots
				}
			}
			d, err := w.Finish()
			noErr(t, err)
			if want := wantDigests(body); d != want {
				t.Fatalf("digests = %+v\nwant %+v", d, want)
			}
			if n := hashers(); n != 0 {
				t.Fatalf("%d hashers still running after Finish", n)
			}
		})
	}
}

// TestBlobWriterAbortReapsHashers: Abort returns only once the hashers have
// returned, whatever they were doing: waiting for bytes, waiting for the end
// after falling behind, waiting for a hashing slot, or never started.
func TestBlobWriterAbortReapsHashers(t *testing.T) {
	e := newBlobEnv(t)
	holdSlots := func() {
		for range cap(e.b.disk.hashSlots) {
			e.b.disk.hashSlots <- struct{}{}
		}
	}
	freeSlots := func() {
		for range cap(e.b.disk.hashSlots) {
			<-e.b.disk.hashSlots
		}
	}
	write := func(t *testing.T, w *Writer, n int) {
		body := patterned(n)
		for off := 0; off < n; off += 256 << 10 {
			if _, err := w.Write(body[off:min(off+256<<10, n)]); err != nil {
				t.Fatal(err)
			}
		}
	}
	state := func(w *Writer, idle, behind int) func() bool {
		return func() bool {
			w.mu.Lock()
			defer w.mu.Unlock()
			return w.idle == idle && w.behind == behind
		}
	}
	cases := []struct {
		name string
		// run brings w into the state Abort must cope with; it returns
		// what to do after Abort.
		run func(t *testing.T, w *Writer) (after func())
	}{
		{name: "before any write", run: func(t *testing.T, w *Writer) func() { return nil }},
		{name: "caught up, waiting for bytes", run: func(t *testing.T, w *Writer) func() {
			write(t, w, 1000)
			waitFor(t, state(w, len(hashGroups), 0))
			return nil
		}},
		{name: "fell behind, waiting for the end", run: func(t *testing.T, w *Writer) func() {
			holdSlots()
			write(t, w, 3*hashLagMax)
			freeSlots()
			waitFor(t, state(w, 0, len(hashGroups)))
			return nil
		}},
		{name: "waiting for a slot", run: func(t *testing.T, w *Writer) func() {
			holdSlots()
			write(t, w, 3*hashPiece)
			return freeSlots
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if n := hashers(); n != 0 {
				t.Fatalf("%d hashers before the test", n)
			}
			w, err := e.b.Create()
			noErr(t, err)
			after := c.run(t, w)
			name := w.Name()
			w.Abort()
			// Abort has waited for every hasher's wg.Done; a goroutine
			// still shows hash() in a stack dump until it has fully exited
			// a moment later, so the count is polled, not read once.
			waitFor(t, func() bool { return hashers() == 0 })
			if after != nil {
				after()
			}
			if exists(name) {
				t.Fatal("temp file survived Abort")
			}
			if _, err := w.Write([]byte("x")); err == nil {
				t.Fatal("Write after Abort succeeded")
			}
			if _, err := w.Finish(); err == nil {
				t.Fatal("Finish after Abort succeeded")
			}
		})
	}
}

// waitFor polls cond: the state it waits for is reached by goroutines the
// test cannot signal from (hashers parking on a condition variable).
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached")
		}
		runtime.Gosched()
	}
}

// TestBlobWriterDetectsAShrunkTempFile: if the temp file loses bytes behind
// the writer's back before the hashers read them, Finish fails rather than
// name a blob by digests of other bytes.
func TestBlobWriterDetectsAShrunkTempFile(t *testing.T) {
	e := newBlobEnv(t)
	w, err := e.b.Create()
	noErr(t, err)
	defer w.Abort()
	for range cap(e.b.disk.hashSlots) {
		e.b.disk.hashSlots <- struct{}{}
	}
	if _, err := w.Write(patterned(3 * hashPiece)); err != nil {
		t.Fatal(err)
	}
	noErr(t, os.Truncate(w.Name(), hashPiece))
	for range cap(e.b.disk.hashSlots) {
		<-e.b.disk.hashSlots
	}
	if _, err := w.Finish(); err == nil || !strings.Contains(err.Error(), "reading back the temp file") {
		t.Fatalf("Finish = %v, want a read-back error", err)
	}
}

// BenchmarkBlobWriter64MiB writes 64 MiB by 256 KiB, as a fill does, and
// finishes the blob. Of ns/op, write-ns is the Write calls (what a fill's
// clients wait for: the hashers keep off that path) and finish-ns is Finish
// (the hashing the writer outran, and the fsync).
func BenchmarkBlobWriter64MiB(b *testing.B) {
	blobs, err := Open(b.TempDir(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	body := patterned(64 << 20)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	var writes, finishes time.Duration
	for b.Loop() {
		w, err := blobs.Create()
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		for off := 0; off < len(body); off += 256 << 10 {
			if _, err := w.Write(body[off : off+256<<10]); err != nil {
				b.Fatal(err)
			}
		}
		mid := time.Now()
		if _, err := w.Finish(); err != nil {
			b.Fatal(err)
		}
		writes += mid.Sub(start)
		finishes += time.Since(mid)
		w.Abort()
	}
	b.ReportMetric(float64(writes.Nanoseconds())/float64(b.N), "write-ns")
	b.ReportMetric(float64(finishes.Nanoseconds())/float64(b.N), "finish-ns")
}
