package store

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"registryd/internal/testclock"
)

const day = 24 * time.Hour

func TestCleanupPolicyCreateDefaultsAndValidation(t *testing.T) {
	s, clock := openTest(t)
	g := topGroup(t, s, "acme")
	sub := ok(s.CreateGroup(NewGroup{Name: "sub", Path: "sub", ParentID: g.ID}))(t)
	now := clock.Now().UTC().Truncate(time.Millisecond)

	c := ok(s.CreateCleanupPolicy(g.ID, CleanupPolicyPatch{}))(t)
	want := CleanupPolicy{GroupID: g.ID, KeepNDaysAfterDownload: 30, Cadence: 7, Status: CleanupScheduled,
		NextRunAt: now.Add(7 * day), CreatedAt: now, UpdatedAt: now}
	if fmt.Sprintf("%+v", c) != fmt.Sprintf("%+v", want) {
		t.Fatalf("created %+v\nwant    %+v", c, want)
	}
	if got := ok(s.CleanupPolicy(g.ID))(t); fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", want) {
		t.Fatalf("read back %+v", got)
	}

	_, err := s.CreateCleanupPolicy(g.ID, CleanupPolicyPatch{})
	wantValidation(t, err, "group", "has already been taken")
	_, err = s.CreateCleanupPolicy(sub.ID, CleanupPolicyPatch{})
	wantValidation(t, err, "group", "must be a top level Group")
	if _, err := s.CreateCleanupPolicy(999, CleanupPolicyPatch{}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown group: %v", err)
	}
	other := topGroup(t, s, "other")
	for _, tc := range []struct {
		p          CleanupPolicyPatch
		field, msg string
	}{
		{CleanupPolicyPatch{KeepNDaysAfterDownload: ptr(0)}, "keep_n_days_after_download", "must be greater than 0"},
		{CleanupPolicyPatch{KeepNDaysAfterDownload: ptr(366)}, "keep_n_days_after_download", "must be less than or equal to 365"},
		{CleanupPolicyPatch{Cadence: ptr(2)}, "cadence", "is not included in the list"},
	} {
		_, err := s.CreateCleanupPolicy(other.ID, tc.p)
		wantValidation(t, err, tc.field, tc.msg)
	}
	if _, err := s.CleanupPolicy(other.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a refused policy was stored: %v", err)
	}
	for _, cad := range CleanupCadences {
		o := topGroup(t, s, fmt.Sprintf("cad%d", cad))
		c := ok(s.CreateCleanupPolicy(o.ID, CleanupPolicyPatch{Cadence: ptr(cad), KeepNDaysAfterDownload: ptr(365),
			Enabled: ptr(true), NotifyOnSuccess: ptr(true), NotifyOnFailure: ptr(true)}))(t)
		if !c.Enabled || !c.NotifyOnSuccess || !c.NotifyOnFailure || c.KeepNDaysAfterDownload != 365 ||
			!c.NextRunAt.Equal(now.Add(time.Duration(cad)*day)) {
			t.Fatalf("cadence %d: %+v", cad, c)
		}
	}
}

func TestCleanupPolicyUpdateMovesNextRunAndDelete(t *testing.T) {
	s, clock := openTest(t)
	g := topGroup(t, s, "acme")
	created := ok(s.CreateCleanupPolicy(g.ID, CleanupPolicyPatch{}))(t)
	clock.Advance(3 * day)
	now := clock.Now().UTC().Truncate(time.Millisecond)

	// Every save moves next_run_at to now plus the cadence (GitLab's
	// before_save), even one that changes a notification flag only.
	c := ok(s.UpdateCleanupPolicy(g.ID, CleanupPolicyPatch{NotifyOnSuccess: ptr(true)}))(t)
	if !c.NextRunAt.Equal(now.Add(7*day)) || !c.UpdatedAt.Equal(now) || !c.CreatedAt.Equal(created.CreatedAt) || !c.NotifyOnSuccess {
		t.Fatalf("after PATCH: %+v", c)
	}
	c = ok(s.UpdateCleanupPolicy(g.ID, CleanupPolicyPatch{Enabled: ptr(true), Cadence: ptr(1), KeepNDaysAfterDownload: ptr(2)}))(t)
	if !c.Enabled || c.Cadence != 1 || c.KeepNDaysAfterDownload != 2 || !c.NextRunAt.Equal(now.Add(day)) {
		t.Fatalf("after PATCH: %+v", c)
	}
	before := snapshot(t, s)
	_, err := s.UpdateCleanupPolicy(g.ID, CleanupPolicyPatch{Cadence: ptr(3)})
	wantValidation(t, err, "cadence", "is not included in the list")
	if snapshot(t, s) != before {
		t.Fatal("a refused update wrote")
	}
	if _, err := s.UpdateCleanupPolicy(999, CleanupPolicyPatch{Enabled: ptr(true)}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("update of no policy: %v", err)
	}

	earlier := now.Add(-time.Hour)
	if err := s.DeleteCleanupPolicy(g.ID, &earlier); !errors.Is(err, ErrPreconditionFailed) {
		t.Fatalf("If-Unmodified-Since before updated_at: %v", err)
	}
	later := now.Add(time.Hour)
	noErr(t, s.DeleteCleanupPolicy(g.ID, &later))
	if err := s.DeleteCleanupPolicy(g.ID, nil); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}
	// A new policy may be created once the old one is gone.
	ok(s.CreateCleanupPolicy(g.ID, CleanupPolicyPatch{}))(t)
}

func TestCleanupRunStartModes(t *testing.T) {
	s, clock := openTest(t)
	g := topGroup(t, s, "acme")
	ok(s.CreateCleanupPolicy(g.ID, CleanupPolicyPatch{Cadence: ptr(1)}))(t)

	// Disabled: never due, however late.
	clock.Advance(10 * day)
	if _, err := s.StartCleanupRun(g.ID, CleanupStart{Due: true}); !errors.Is(err, ErrCleanupNotDue) {
		t.Fatalf("disabled policy started: %v", err)
	}
	ok(s.UpdateCleanupPolicy(g.ID, CleanupPolicyPatch{Enabled: ptr(true)}))(t)
	// Enabled now, due a day later: not before (GitLab's next_run_at < now).
	clock.Advance(day)
	if _, err := s.StartCleanupRun(g.ID, CleanupStart{Due: true}); !errors.Is(err, ErrCleanupNotDue) {
		t.Fatalf("started at next_run_at exactly: %v", err)
	}
	clock.Advance(time.Millisecond)
	c := ok(s.StartCleanupRun(g.ID, CleanupStart{Due: true}))(t)
	now := clock.Now().UTC().Truncate(time.Millisecond)
	if c.Status != CleanupRunning || c.Run == nil || c.Run.Manual || !c.Run.Cutoff.Equal(now.Add(-30*day)) ||
		!c.Run.StartedAt.Equal(now) {
		t.Fatalf("started %+v %+v", c, c.Run)
	}
	if !c.UpdatedAt.Before(now) {
		t.Fatal("starting a run touched updated_at (GitLab's worker does not)")
	}
	for _, how := range []CleanupStart{{Due: true}, {AuthorID: 1, AuthorName: "root"}} {
		if _, err := s.StartCleanupRun(g.ID, how); !errors.Is(err, ErrCleanupRunning) {
			t.Fatalf("%+v while running: %v", how, err)
		}
	}
	r := ok(s.StartCleanupRun(g.ID, CleanupStart{Resume: true}))(t)
	if r.Run.Resumed != 1 || !r.Run.StartedAt.Equal(c.Run.StartedAt) {
		t.Fatalf("resumed %+v", r.Run)
	}
	ok3(s.FinishCleanupRun(g.ID, ""))(t)
	if _, err := s.StartCleanupRun(g.ID, CleanupStart{Resume: true}); !errors.Is(err, ErrCleanupNotDue) {
		t.Fatalf("resume of a policy not running: %v", err)
	}
	// A manual run starts whatever the schedule and the switch say.
	ok(s.UpdateCleanupPolicy(g.ID, CleanupPolicyPatch{Enabled: ptr(false)}))(t)
	m := ok(s.StartCleanupRun(g.ID, CleanupStart{AuthorID: 1, AuthorName: "root"}))(t)
	if !m.Run.Manual || m.Run.AuthorID != 1 || m.Run.AuthorName != "root" {
		t.Fatalf("manual run %+v", m.Run)
	}
	if _, err := s.StartCleanupRun(404, CleanupStart{}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("no policy: %v", err)
	}
}

// TestCleanupRunNowMinInterval: a manual run within MinInterval of the last
// run's start (any run's, as recorded by FinishCleanupRun) is refused with
// how long to wait; a running policy is still a conflict first; scheduled
// and resumed runs ignore the interval.
func TestCleanupRunNowMinInterval(t *testing.T) {
	s, clock := openTest(t)
	g := topGroup(t, s, "acme")
	ok(s.CreateCleanupPolicy(g.ID, CleanupPolicyPatch{Enabled: ptr(true), Cadence: ptr(1)}))(t)
	manual := CleanupStart{AuthorID: 1, AuthorName: "root", MinInterval: time.Minute}
	// Never ran: nothing to wait for.
	c := ok(s.StartCleanupRun(g.ID, manual))(t)
	started := c.Run.StartedAt
	if _, err := s.StartCleanupRun(g.ID, manual); !errors.Is(err, ErrCleanupRunning) {
		t.Fatalf("manual run while running: %v", err)
	}
	clock.Advance(20 * time.Second) // the run took 20s
	c, _ = ok3(s.FinishCleanupRun(g.ID, ""))(t)
	if c.LastRunStartedAt == nil || !c.LastRunStartedAt.Equal(started) || !c.lastRunStart().Equal(started) {
		t.Fatalf("last run start %v, want %v", c.LastRunStartedAt, started)
	}
	var tse *CleanupTooSoonError
	if _, err := s.StartCleanupRun(g.ID, manual); !errors.As(err, &tse) || tse.RetryAfter != 40*time.Second ||
		tse.Interval != time.Minute {
		t.Fatalf("manual run 20s after the start: %v", err)
	}
	if got := ok(s.CleanupPolicy(g.ID))(t); got.Status != CleanupScheduled || got.Run != nil {
		t.Fatalf("a refused run changed the policy: %+v", got)
	}
	// Without a minimum, or once it has passed (counted from the start,
	// not the end), the run starts.
	clock.Advance(40*time.Second - time.Millisecond)
	if _, err := s.StartCleanupRun(g.ID, manual); !errors.As(err, &tse) || tse.RetryAfter != time.Millisecond {
		t.Fatalf("manual run 1ms early: %v", err)
	}
	clock.Advance(time.Millisecond)
	ok(s.StartCleanupRun(g.ID, manual))(t)
	ok3(s.FinishCleanupRun(g.ID, ""))(t)
	ok(s.StartCleanupRun(g.ID, CleanupStart{AuthorID: 1, MinInterval: 0}))(t)
	ok3(s.FinishCleanupRun(g.ID, ""))(t)

	// A scheduled run ignores it, and counts as the last run.
	clock.Advance(day + time.Second)
	ok(s.StartCleanupRun(g.ID, CleanupStart{Due: true, MinInterval: time.Hour}))(t)
	ok3(s.FinishCleanupRun(g.ID, ""))(t)
	if _, err := s.StartCleanupRun(g.ID, manual); !errors.As(err, &tse) || tse.RetryAfter != time.Minute {
		t.Fatalf("manual run right after a scheduled one: %v", err)
	}

	// A policy whose last run ended before starts were recorded counts
	// from that end; a start after now (a clock set back) waits at most
	// the interval.
	p := CleanupPolicy{LastRunAt: ptr(clock.Now())}
	if got := p.runNowWait(clock.Now().Add(10*time.Second), time.Minute); got != 50*time.Second {
		t.Fatalf("wait from last_run_at %v", got)
	}
	if got := p.runNowWait(clock.Now().Add(-time.Hour), time.Minute); got != time.Minute {
		t.Fatalf("wait with the clock set back %v", got)
	}
	if got := (CleanupPolicy{}).runNowWait(clock.Now(), time.Minute); got != 0 {
		t.Fatalf("never ran: wait %v", got)
	}
}

func ok3[A, B any](a A, b B, err error) func(testing.TB) (A, B) {
	return func(t testing.TB) (A, B) {
		t.Helper()
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		return a, b
	}
}

// cleanupFixture: group acme with a registry of two upstreams (a, b) and
// group other with one upstream (o). Each upstream gets n entries at t0
// (size i+1, a blob each); the even ones of a and b are downloaded 20 days
// later; the clock then stands 40 days after t0. With the default 30 days,
// a run deletes the odd entries of a and b (never downloaded, created 40
// days ago) and keeps the even ones (downloaded 20 days ago).
type cleanupFixture struct {
	s       *Store
	clock   *testclock.Clock
	g, o    Group
	a, b, x int64
	n       int
}

func cleanupPath(i int) string { return fmt.Sprintf("/org/c/lib%d/1.0/lib%d-1.0.jar", i, i) }

func newCleanupFixture(t *testing.T, n int) *cleanupFixture {
	t.Helper()
	s, clock := openTest(t)
	f := &cleanupFixture{s: s, clock: clock, n: n, g: topGroup(t, s, "acme"), o: topGroup(t, s, "other")}
	r := ok(s.CreateRegistry(f.g.ID, "main", ""))(t)
	f.a, f.b = up(t, s, r.ID, "https://a.example/m").ID, up(t, s, r.ID, "https://b.example/m").ID
	ro := ok(s.CreateRegistry(f.o.ID, "main", ""))(t)
	f.x = up(t, s, ro.ID, "https://o.example/m").ID
	var es []CacheEntry
	for _, u := range []int64{f.a, f.b, f.x} {
		for i := range n {
			es = append(es, CacheEntry{UpstreamID: u, RelativePath: cleanupPath(i), Size: int64(i + 1),
				SHA256: fmt.Sprintf("%016x%048x", u, i)})
		}
	}
	noErr(t, s.PutCacheEntries(es))
	clock.Advance(20 * day)
	var dl []DownloadCount
	for _, u := range []int64{f.a, f.b} {
		for i := 0; i < n; i += 2 {
			dl = append(dl, DownloadCount{UpstreamID: u, Rel: cleanupPath(i), Count: 1, Last: clock.Now()})
		}
	}
	noErr(t, s.AddDownloads(dl))
	clock.Advance(20 * day)
	return f
}

// wantFigures: the deleted entries are the odd ones of a and b.
func (f *cleanupFixture) deletedFigures() (entries, bytes int64) {
	for i := 1; i < f.n; i += 2 {
		entries += 2
		bytes += 2 * int64(i+1)
	}
	return entries, bytes
}

func (f *cleanupFixture) check(t *testing.T) {
	t.Helper()
	for _, u := range []int64{f.a, f.b, f.x} {
		for i := range f.n {
			_, err := f.s.CacheEntry(u, cleanupPath(i))
			gone := u != f.x && i%2 == 1
			if gone != errors.Is(err, ErrNotFound) || (!gone && err != nil) {
				t.Fatalf("upstream %d entry %d: err %v, want gone=%v", u, i, err, gone)
			}
		}
	}
}

func TestCleanupRunInBatches(t *testing.T) {
	f := newCleanupFixture(t, 25)
	s := f.s
	ok(s.CreateCleanupPolicy(f.g.ID, CleanupPolicyPatch{Enabled: ptr(true)}))(t)
	wantEntries, wantBytes := f.deletedFigures()

	preview := ok(s.CleanupCandidates(f.g.ID, 30, 3, 5))(t)
	if int64(preview.Count) != wantEntries || preview.Bytes != wantBytes || len(preview.Page) != 5 ||
		preview.Page[0].UpstreamID != f.a || !preview.Cutoff.Equal(f.clock.Now().Add(-30*day).Truncate(time.Millisecond)) {
		t.Fatalf("preview %d entries %d bytes, page of %d; want %d, %d", preview.Count, preview.Bytes, len(preview.Page),
			wantEntries, wantBytes)
	}
	for _, e := range preview.Page {
		if e.DownloadedAt != nil {
			t.Fatalf("preview lists a downloaded entry: %+v", e)
		}
	}

	ok(s.StartCleanupRun(f.g.ID, CleanupStart{AuthorID: 1}))(t)
	gen := s.CacheGeneration()
	var batches []CleanupBatch
	for range 100 {
		b := ok(s.CleanupRunBatch(f.g.ID, 4))(t)
		if b.Entries > 4 {
			t.Fatalf("a batch of 4 deleted %d", b.Entries)
		}
		batches = append(batches, b)
		if b.Done {
			break
		}
	}
	last := batches[len(batches)-1]
	if !last.Done || last.Run.DeletedEntries != wantEntries || last.Run.DeletedSize != wantBytes {
		t.Fatalf("after %d batches: %+v, want %d entries %d bytes", len(batches), last, wantEntries, wantBytes)
	}
	// 24 deletions in batches of at most 4, each visiting at most 16
	// entries of the 50 of the group: 6 or 7 batches, never a walk of the
	// whole cache (or of the other group's).
	if len(batches) < 6 || len(batches) > 8 {
		t.Fatalf("%d batches", len(batches))
	}
	if s.CacheGeneration() == gen {
		t.Fatal("deleting entries did not move the cache generation")
	}
	select {
	case <-s.CollectWanted():
	default:
		t.Fatal("deleting entries did not wake the collector")
	}
	f.check(t)
	if st := s.CacheStats(); int64(st.Pending) != wantEntries {
		t.Fatalf("pending %d, want %d", st.Pending, wantEntries)
	}
	var collected int
	var freed int64
	for _, c := range collectAll(t, s, 100) {
		collected += c.Entries
		freed += c.Bytes
	}
	if int64(collected) != wantEntries || freed != wantBytes {
		t.Fatalf("collected %d entries, %d bytes", collected, freed)
	}

	f.clock.Advance(time.Minute)
	now := f.clock.Now().UTC().Truncate(time.Millisecond)
	c, run := ok3(s.FinishCleanupRun(f.g.ID, ""))(t)
	if c.Status != CleanupScheduled || c.Run != nil || c.LastRunAt == nil || !c.LastRunAt.Equal(now) ||
		!c.NextRunAt.Equal(now.Add(7*day)) || c.LastRunDeletedEntriesCount != wantEntries || c.LastRunDeletedSize != wantBytes ||
		c.LastRunDetailedMetrics["maven"] != (CleanupMetrics{DeletedEntriesCount: wantEntries, DeletedSize: wantBytes}) ||
		c.FailureMessage != "" || !c.UpdatedAt.Equal(now) {
		t.Fatalf("finished %+v", c)
	}
	if run.DeletedEntries != wantEntries || !run.Manual {
		t.Fatalf("run %+v", run)
	}
	if _, err := s.CleanupRunBatch(f.g.ID, 4); !errors.Is(err, ErrCleanupNotRunning) {
		t.Fatalf("batch after the end: %v", err)
	}
	// A second run finds nothing more, and moves no cache generation
	// (the proxy's views stay valid) nor wakes the collector.
	ok(s.StartCleanupRun(f.g.ID, CleanupStart{}))(t)
	gen = s.CacheGeneration()
	select {
	case <-s.CollectWanted():
	default:
	}
	if b := ok(s.CleanupRunBatch(f.g.ID, 100))(t); b.Entries != 0 || !b.Done {
		t.Fatalf("second run: %+v", b)
	}
	if s.CacheGeneration() != gen {
		t.Fatal("a batch that deleted nothing moved the cache generation")
	}
	select {
	case <-s.CollectWanted():
		t.Fatal("a batch that deleted nothing woke the collector")
	default:
	}
	c, _ = ok3(s.FinishCleanupRun(f.g.ID, ""))(t)
	if c.LastRunDeletedEntriesCount != 0 || c.LastRunDetailedMetrics["maven"] != (CleanupMetrics{}) {
		t.Fatalf("second run figures %+v", c)
	}
}

// TestCleanupRunResumesAfterInterruption: a run stopped between batches
// keeps its progress in the policy; resumed, it deletes the rest and its
// figures count both parts once.
func TestCleanupRunResumesAfterInterruption(t *testing.T) {
	f := newCleanupFixture(t, 30)
	s := f.s
	ok(s.CreateCleanupPolicy(f.g.ID, CleanupPolicyPatch{Enabled: ptr(true)}))(t)
	ok(s.StartCleanupRun(f.g.ID, CleanupStart{}))(t)
	first := ok(s.CleanupRunBatch(f.g.ID, 5))(t)
	if first.Entries != 5 || first.Done {
		t.Fatalf("first batch %+v", first)
	}
	// The interruption: nothing in memory survives; the policy says running.
	c := ok(s.CleanupPolicy(f.g.ID))(t)
	if c.Status != CleanupRunning || c.Run == nil || c.Run.DeletedEntries != 5 || c.Run.Next == nil {
		t.Fatalf("after one batch: %+v", c)
	}
	ok(s.StartCleanupRun(f.g.ID, CleanupStart{Resume: true}))(t)
	for {
		b := ok(s.CleanupRunBatch(f.g.ID, 7))(t)
		if b.Done {
			break
		}
	}
	c, _ = ok3(s.FinishCleanupRun(f.g.ID, ""))(t)
	wantEntries, wantBytes := f.deletedFigures()
	if c.LastRunDeletedEntriesCount != wantEntries || c.LastRunDeletedSize != wantBytes {
		t.Fatalf("figures %d, %d; want %d, %d", c.LastRunDeletedEntriesCount, c.LastRunDeletedSize, wantEntries, wantBytes)
	}
	f.check(t)
}

// TestCleanupRunSkipsPurgedEntries: entries of a purge in progress are
// already absent; a run neither counts them nor marks them a second time
// (which would drop a blob reference twice).
func TestCleanupRunSkipsPurgedEntries(t *testing.T) {
	f := newCleanupFixture(t, 10)
	s := f.s
	ok(s.PurgeUpstreamCache(f.b))(t)
	ok(s.CreateCleanupPolicy(f.g.ID, CleanupPolicyPatch{}))(t)
	ok(s.StartCleanupRun(f.g.ID, CleanupStart{}))(t)
	b := ok(s.CleanupRunBatch(f.g.ID, 100))(t)
	if b.Entries != 5 || !b.Done {
		t.Fatalf("batch %+v, want the 5 odd entries of upstream a only", b)
	}
	total := 0
	for _, c := range collectAll(t, s, 100) {
		total += c.Entries
	}
	if total != 15 { // 5 of a's by the run, 10 of b's by the purge
		t.Fatalf("collected %d", total)
	}
	for i := range f.n {
		sha := fmt.Sprintf("%016x%048x", f.b, i)
		if n := refs(t, s, sha); n != 0 {
			t.Fatalf("blob of b's entry %d has %d references", i, n)
		}
	}
}

func TestCleanupRunFailureAndDeletedPolicy(t *testing.T) {
	f := newCleanupFixture(t, 4)
	s := f.s
	ok(s.CreateCleanupPolicy(f.g.ID, CleanupPolicyPatch{}))(t)
	ok(s.StartCleanupRun(f.g.ID, CleanupStart{}))(t)
	ok(s.CleanupRunBatch(f.g.ID, 100))(t)
	ok3(s.FinishCleanupRun(f.g.ID, ""))(t)
	f.clock.Advance(day)
	ok(s.StartCleanupRun(f.g.ID, CleanupStart{}))(t)
	long := "Failed to execute cleanup policy: " + string(make([]byte, 300))
	c, _ := ok3(s.FinishCleanupRun(f.g.ID, long))(t)
	if c.Status != CleanupFailed || len([]rune(c.FailureMessage)) != 255 || c.FailureMessage[252:] != "..." {
		t.Fatalf("failed: status %s, message of %d characters", c.Status, len([]rune(c.FailureMessage)))
	}
	// The figures of the last success stay.
	if c.LastRunDeletedEntriesCount != 4 || c.LastRunDetailedMetrics["maven"].DeletedEntriesCount != 4 {
		t.Fatalf("figures after a failure: %+v", c)
	}
	// A failed policy is runnable again when due (GitLab's active scope).
	ok(s.UpdateCleanupPolicy(f.g.ID, CleanupPolicyPatch{Enabled: ptr(true)}))(t)
	f.clock.Advance(8 * day)
	ok(s.StartCleanupRun(f.g.ID, CleanupStart{Due: true}))(t)
	c, _ = ok3(s.FinishCleanupRun(f.g.ID, ""))(t)
	if c.Status != CleanupScheduled || c.FailureMessage != "" {
		t.Fatalf("success after a failure: %+v", c)
	}

	ok(s.StartCleanupRun(f.g.ID, CleanupStart{}))(t)
	noErr(t, s.DeleteCleanupPolicy(f.g.ID, nil))
	if _, err := s.CleanupRunBatch(f.g.ID, 10); !errors.Is(err, ErrNotFound) {
		t.Fatalf("batch of a deleted policy: %v", err)
	}
	if _, _, err := s.FinishCleanupRun(f.g.ID, ""); !errors.Is(err, ErrNotFound) {
		t.Fatalf("finish of a deleted policy: %v", err)
	}
}
