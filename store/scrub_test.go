package store

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"registryd/store/kv"
)

// refCount is the blob's reference count in the index (0: no row).
func refCount(t testing.TB, s *Store, sha string) int64 {
	t.Helper()
	var n int64
	noErr(t, s.db.View(func(tx kv.Tx) error {
		if v := tx.Bucket(bktBlobRefs).Get([]byte(sha)); v != nil {
			n = btoi(v)
		}
		return nil
	}))
	return n
}

// flipByte flips the first byte of the file at path.
func flipByte(t testing.TB, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	noErr(t, err)
	b[0] ^= 0xff
	noErr(t, os.WriteFile(path, b, 0o640))
}

// countingLimiter is a Limiter that takes no time and counts the bytes
// asked for; cancel, when set, is called once after the limit bytes.
type countingLimiter struct {
	mu     sync.Mutex
	bytes  int64
	limit  int64
	cancel func()
}

func (l *countingLimiter) Wait(ctx context.Context, n int) error {
	l.mu.Lock()
	l.bytes += int64(n)
	over := l.cancel != nil && l.bytes > l.limit
	l.mu.Unlock()
	if over {
		l.cancel()
	}
	return ctx.Err()
}

func (e blobEnv) scrubber(o ScrubOptions) *Scrubber {
	if o.Limiter == nil {
		o.Limiter = &countingLimiter{}
	}
	if o.QuarantineMaxBytes == 0 {
		o.QuarantineMaxBytes = 1 << 20
	}
	return e.s.NewScrubber(e.b, o)
}

func TestScrubQuarantinesAFlippedByteAndDropsItsEntries(t *testing.T) {
	e := newBlobEnv(t)
	bad1 := e.publish(t, "/g/a/1/a-1.jar", "bytes that will rot")
	e.publish(t, "/g/b/1/b-1.jar", "bytes that will rot") // the same blob, a second entry
	good := e.publish(t, "/g/c/1/c-1.jar", "bytes that stay")
	sha := bad1.SHA256
	if n := refCount(t, e.s, sha); n != 2 {
		t.Fatalf("refs before = %d, want 2", n)
	}
	flipByte(t, e.b.Path(sha))

	sc := e.scrubber(ScrubOptions{})
	cyc := sc.Run(context.Background())
	if cyc.Error != "" || cyc.Checked != 2 || cyc.FinishedAt == nil {
		t.Fatalf("cycle = %+v", cyc)
	}
	if len(cyc.Corrupt) != 1 || len(cyc.Missing) != 0 {
		t.Fatalf("corrupt %+v missing %+v", cyc.Corrupt, cyc.Missing)
	}
	f := cyc.Corrupt[0]
	q := filepath.Join(e.b.QuarantineDir(), sha)
	if f.SHA256 != sha || f.Tier != "local" || f.Quarantined != q || len(f.Entries) != 2 || cyc.EntriesDropped != 2 {
		t.Fatalf("finding = %+v", f)
	}
	paths := []string{f.Entries[0].RelativePath, f.Entries[1].RelativePath}
	if !strings.Contains(strings.Join(paths, " "), "/g/a/1/a-1.jar") || !strings.Contains(strings.Join(paths, " "), "/g/b/1/b-1.jar") {
		t.Fatalf("entries = %v", paths)
	}
	if exists(e.b.Path(sha)) || !exists(q) {
		t.Fatal("the bad file was not moved to the quarantine")
	}
	for _, rel := range []string{"/g/a/1/a-1.jar", "/g/b/1/b-1.jar"} {
		if _, err := e.s.CacheEntry(e.up, rel); !errors.Is(err, ErrNotFound) {
			t.Fatalf("entry %s after the scrub: %v", rel, err)
		}
	}
	if _, err := e.s.CacheEntry(e.up, "/g/c/1/c-1.jar"); err != nil {
		t.Fatalf("the good entry: %v", err)
	}
	// The dropped entries wait for the collector with their references.
	if n := refCount(t, e.s, sha); n != 2 {
		t.Fatalf("refs after the scrub = %d, want 2 (pending)", n)
	}
	r, err := e.s.CollectBlobs(e.b, 100)
	noErr(t, err)
	if r.Entries != 2 || refCount(t, e.s, sha) != 0 || refCount(t, e.s, good.SHA256) != 1 {
		t.Fatalf("collect = %+v, refs %d / %d", r, refCount(t, e.s, sha), refCount(t, e.s, good.SHA256))
	}
	// The self-heal: a fill of the right bytes places a good file again.
	again := e.publish(t, "/g/a/1/a-1.jar", "bytes that will rot")
	got, err := os.ReadFile(e.b.Path(again.SHA256))
	noErr(t, err)
	if string(got) != "bytes that will rot" || refCount(t, e.s, sha) != 1 {
		t.Fatalf("refilled %q, refs %d", got, refCount(t, e.s, sha))
	}
	if sc.Stats.Corrupt.Load() != 1 || sc.Stats.Checked.Load() != 2 || sc.Stats.EntriesDropped.Load() != 2 ||
		sc.Stats.BytesHashed.Load() != int64(len("bytes that will rot")+len("bytes that stay")) || sc.Stats.LastCompleted.Load() == 0 {
		t.Fatalf("stats = checked %d corrupt %d dropped %d bytes %d", sc.Stats.Checked.Load(), sc.Stats.Corrupt.Load(),
			sc.Stats.EntriesDropped.Load(), sc.Stats.BytesHashed.Load())
	}
	// A second cycle finds nothing.
	if cyc := sc.Run(context.Background()); len(cyc.Corrupt)+len(cyc.Missing) != 0 || cyc.Checked != 2 {
		t.Fatalf("second cycle = %+v", cyc)
	}
}

func TestScrubDropsTheEntriesOfAMissingBlob(t *testing.T) {
	e := newBlobEnv(t)
	a := e.publish(t, "/g/a/1/a-1.jar", "gone soon")
	noErr(t, os.Remove(e.b.Path(a.SHA256)))
	cyc := e.scrubber(ScrubOptions{}).Run(context.Background())
	if len(cyc.Missing) != 1 || cyc.Missing[0].SHA256 != a.SHA256 || len(cyc.Missing[0].Entries) != 1 || len(cyc.Corrupt) != 0 {
		t.Fatalf("cycle = %+v", cyc)
	}
	if _, err := e.s.CacheEntry(e.up, "/g/a/1/a-1.jar"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("entry after the scrub: %v", err)
	}
	if _, err := e.s.CollectBlobs(e.b, 100); err != nil || refCount(t, e.s, a.SHA256) != 0 {
		t.Fatalf("collect: %v, refs %d", err, refCount(t, e.s, a.SHA256))
	}
}

func TestScrubResumesFromItsCursor(t *testing.T) {
	e := newBlobEnv(t)
	const n = scrubBatch + 40
	for i := range n {
		e.publish(t, "/g/a/1/f-"+strconv.Itoa(i)+".jar", "content "+strconv.Itoa(i))
	}
	// The first cycle is cut short after about half of the batch.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	lim := &countingLimiter{limit: scrubChunk * (scrubBatch + 10), cancel: cancel}
	sc := e.scrubber(ScrubOptions{Limiter: lim})
	first := sc.Run(ctx)
	if first.Error == "" || first.Checked == 0 || first.Checked >= n {
		t.Fatalf("first cycle = %+v", first)
	}
	st, err := sc.loadState()
	noErr(t, err)
	if st.Cursor == "" || st.StartedAt.IsZero() {
		t.Fatalf("state after the stop = %+v", st)
	}
	// A new process continues after the cursor: nothing is checked twice
	// but the blob a stop cut short, and the cycle ends.
	sc2 := e.scrubber(ScrubOptions{})
	if due, resume := sc2.due(); !due || !resume {
		t.Fatalf("due = %v, resume = %v", due, resume)
	}
	second := sc2.Run(context.Background())
	if second.Error != "" || !second.Resumed || !second.StartedAt.Equal(st.StartedAt) {
		t.Fatalf("second cycle = %+v", second)
	}
	if total := first.Checked + second.Checked; total < n || total > n+1 {
		t.Fatalf("checked %d + %d, want %d (+1 for the blob cut short)", first.Checked, second.Checked, n)
	}
	st, err = sc2.loadState()
	noErr(t, err)
	if st.Cursor != "" || st.LastFinished.IsZero() {
		t.Fatalf("state after the cycle = %+v", st)
	}
}

func TestScrubHonoursItsBudget(t *testing.T) {
	e := newBlobEnv(t)
	const size = 3<<20 + 5
	e.publish(t, "/g/a/1/big.jar", string(bytes.Repeat([]byte("x"), size)))
	// A fake clock: Sleep moves it forward instead of waiting.
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	start := now
	var slept time.Duration
	tb := &TokenBucket{Rate: 1 << 20,
		Now: func() time.Time { mu.Lock(); defer mu.Unlock(); return now },
		Sleep: func(_ context.Context, d time.Duration) error {
			mu.Lock()
			defer mu.Unlock()
			now = now.Add(d)
			slept += d
			return nil
		}}
	cyc := e.scrubber(ScrubOptions{Limiter: tb}).Run(context.Background())
	if cyc.Error != "" || cyc.BytesHashed != size {
		t.Fatalf("cycle = %+v", cyc)
	}
	// 3 MiB and a chunk at 1 MiB/s, with a burst of 1 MiB: the reads
	// took at least 2 s of the clock and not much more than 3.
	took := now.Sub(start)
	if took < 2*time.Second || took > 3*time.Second+time.Second/8 || slept != took {
		t.Fatalf("reading %d bytes at 1 MiB/s took %s of the clock (slept %s)", size, took, slept)
	}
}

func TestScrubIntervalIsDueFromTheLastCycle(t *testing.T) {
	e := newBlobEnv(t)
	sc := e.scrubber(ScrubOptions{Interval: time.Hour})
	if due, _ := sc.due(); due {
		t.Fatal("a first look is due at once; want one interval after it")
	}
	st, err := sc.loadState()
	noErr(t, err)
	if st.Since.IsZero() {
		t.Fatal("the first look was not recorded")
	}
	st.Since = st.Since.Add(-2 * time.Hour)
	noErr(t, sc.saveState(st))
	if due, resume := sc.due(); !due || resume {
		t.Fatalf("due = %v resume = %v after two intervals", due, resume)
	}
	sc.Run(context.Background())
	if due, _ := sc.due(); due {
		t.Fatal("due right after a cycle")
	}
}

func TestScrubStartNowRefusesWhileOneRuns(t *testing.T) {
	e := newBlobEnv(t)
	e.publish(t, "/g/a/1/a-1.jar", "a")
	sc := e.scrubber(ScrubOptions{})
	noErr(t, sc.StartNow())
	if err := sc.StartNow(); !errors.Is(err, ErrScrubRunning) {
		t.Fatalf("a second StartNow: %v", err)
	}
	if r := sc.Report(); !r.Running || r.Current == nil {
		t.Fatalf("report = %+v", r)
	}
	sc.Start()
	deadline := time.Now().Add(10 * time.Second)
	for sc.Report().Running {
		if time.Now().After(deadline) {
			t.Fatal("the asked cycle did not end")
		}
		time.Sleep(5 * time.Millisecond)
	}
	sc.Stop()
	r := sc.Report()
	if r.Last == nil || r.Last.Checked != 1 || r.Last.FinishedAt == nil {
		t.Fatalf("report = %+v", r)
	}
}

func TestQuarantineKeepsItsBound(t *testing.T) {
	e := newBlobEnv(t)
	a := e.publish(t, "/g/a/1/a.jar", strings.Repeat("a", 600))
	b := e.publish(t, "/g/b/1/b.jar", strings.Repeat("b", 600))
	unlock, err := e.b.Lock(context.Background(), a.SHA256)
	noErr(t, err)
	qa, err := e.b.Quarantine(a.SHA256, 1000)
	unlock()
	noErr(t, err)
	old := time.Now().Add(-time.Hour)
	noErr(t, os.Chtimes(qa, old, old))
	unlock, err = e.b.Lock(context.Background(), b.SHA256)
	noErr(t, err)
	qb, err := e.b.Quarantine(b.SHA256, 1000)
	unlock()
	noErr(t, err)
	if exists(qa) || !exists(qb) {
		t.Fatalf("quarantine holds a: %v, b: %v; want only the newer b", exists(qa), exists(qb))
	}
	if n, _ := e.b.Stats(); n != 0 {
		t.Fatalf("Stats counts %d blob files after both were quarantined", n)
	}
}
