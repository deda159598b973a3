package cleanup

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"registryd/internal/boltstore"
	"registryd/internal/testclock"
	"registryd/store"
)

const day = 24 * time.Hour

func ptr[T any](v T) *T { return &v }

func must[T any](t testing.TB) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

// env: group acme (a registry with upstreams a and b) and group other (one
// upstream, o), n entries on each upstream created at t0 (entry i has size
// i+1). 20 days later the even entries of a and b are downloaded. Policies
// keep 30 days, so from t0+30d on a run of acme deletes its odd entries.
type env struct {
	t       *testing.T
	st      *store.Store
	clock   *testclock.Clock
	t0      time.Time
	acme    store.Group
	other   store.Group
	a, b, o int64
	n       int
	reg     *prometheus.Registry
}

func rel(i int) string { return fmt.Sprintf("/org/example/lib%d/1.0/lib%d-1.0.jar", i, i) }

func newEnv(t *testing.T, n int) *env {
	t.Helper()
	c := testclock.New(time.Date(2026, 1, 5, 8, 0, 0, 0, time.UTC))
	st, err := boltstore.Open(t.TempDir(), store.Options{SecretKey: make([]byte, 32), Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	e := &env{t: t, st: st, clock: c, t0: c.Now(), n: n}
	e.acme = must[store.Group](t)(st.CreateGroup(store.NewGroup{Name: "acme", Path: "acme"}))
	e.other = must[store.Group](t)(st.CreateGroup(store.NewGroup{Name: "other", Path: "other"}))
	r := must[store.Registry](t)(st.CreateRegistry(e.acme.ID, "main", ""))
	e.a = must[store.PositionedUpstream](t)(st.CreateUpstream(r.ID, store.NewUpstream{URL: "https://a.example/m", Name: "a"})).ID
	e.b = must[store.PositionedUpstream](t)(st.CreateUpstream(r.ID, store.NewUpstream{URL: "https://b.example/m", Name: "b"})).ID
	ro := must[store.Registry](t)(st.CreateRegistry(e.other.ID, "main", ""))
	e.o = must[store.PositionedUpstream](t)(st.CreateUpstream(ro.ID, store.NewUpstream{URL: "https://o.example/m", Name: "o"})).ID
	var es []store.CacheEntry
	for _, u := range []int64{e.a, e.b, e.o} {
		for i := range n {
			es = append(es, store.CacheEntry{UpstreamID: u, RelativePath: rel(i), Size: int64(i + 1),
				SHA256: fmt.Sprintf("%016x%048x", u, i)})
		}
	}
	if err := st.PutCacheEntries(es); err != nil {
		t.Fatal(err)
	}
	c.Advance(20 * day)
	var dl []store.DownloadCount
	for _, u := range []int64{e.a, e.b} {
		for i := 0; i < n; i += 2 {
			dl = append(dl, store.DownloadCount{UpstreamID: u, Rel: rel(i), Count: 3, Last: c.Now()})
		}
	}
	if err := st.AddDownloads(dl); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *env) scheduler(batch int, st Store) *Scheduler {
	e.t.Helper()
	if st == nil {
		st = e.st
	}
	e.reg = prometheus.NewRegistry()
	s, err := New(Options{Store: st, CheckInterval: time.Minute, BatchSize: batch, RunNowInterval: -1,
		Now: e.clock.Now, Registerer: e.reg, Rest: -1})
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

// gone reports which entries of upstream u are no longer served.
func (e *env) gone(u int64) []int {
	var out []int
	for i := range e.n {
		if _, err := e.st.CacheEntry(u, rel(i)); errors.Is(err, store.ErrNotFound) {
			out = append(out, i)
		} else if err != nil {
			e.t.Fatal(err)
		}
	}
	return out
}

// wantOddGone checks that exactly the odd entries of a and b are gone, and
// nothing of the other group.
func (e *env) wantOddGone() {
	e.t.Helper()
	var odd []int
	for i := 1; i < e.n; i += 2 {
		odd = append(odd, i)
	}
	for _, u := range []int64{e.a, e.b} {
		if got := e.gone(u); fmt.Sprint(got) != fmt.Sprint(odd) {
			e.t.Fatalf("upstream %d: gone %v, want %v", u, got, odd)
		}
	}
	if got := e.gone(e.o); len(got) != 0 {
		e.t.Fatalf("the other group's entries went: %v", got)
	}
}

// oddFigures are the entries and bytes of the odd entries of a and b.
func (e *env) oddFigures() (int64, int64) {
	var n, b int64
	for i := 1; i < e.n; i += 2 {
		n += 2
		b += 2 * int64(i+1)
	}
	return n, b
}

func (e *env) audit(group int64) []store.AuditEvent {
	e.t.Helper()
	evs, _, err := e.st.AuditEventsPage(store.AuditQuery{EntityType: store.AuditEntityGroup, EntityID: group, Limit: 100})
	if err != nil {
		e.t.Fatal(err)
	}
	return evs
}

func (e *env) metric(name string, labels ...string) float64 {
	e.t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		e.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			match := true
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
						found = true
					}
				}
				match = match && found
			}
			if match {
				if m.GetCounter() != nil {
					return m.GetCounter().GetValue()
				}
				return m.GetGauge().GetValue()
			}
		}
	}
	e.t.Fatalf("no metric %s %v", name, labels)
	return 0
}

func TestScheduledRun(t *testing.T) {
	e := newEnv(t, 40)
	st := e.st
	// acme's policy is created 20 days after t0: its first run is due a
	// week later, at t0+27d. other's stays disabled.
	created := must[store.CleanupPolicy](t)(st.CreateCleanupPolicy(e.acme.ID, store.CleanupPolicyPatch{Enabled: ptr(true)}))
	if want := e.t0.Add(27 * day); !created.NextRunAt.Equal(want) {
		t.Fatalf("next_run_at %s, want %s", created.NextRunAt, want)
	}
	must[store.CleanupPolicy](t)(st.CreateCleanupPolicy(e.other.ID, store.CleanupPolicyPatch{KeepNDaysAfterDownload: ptr(1)}))
	s := e.scheduler(7, nil)

	e.clock.Advance(6 * day) // t0+26d: not due
	s.Tick()
	if len(e.gone(e.a)) != 0 || len(e.audit(e.acme.ID)) != 0 {
		t.Fatal("a run before next_run_at")
	}

	e.clock.Advance(14 * day) // t0+40d: cutoff t0+10d
	runAt := e.clock.Now()
	s.Tick()
	e.wantOddGone()
	wantN, wantB := e.oddFigures()
	p := must[store.CleanupPolicy](t)(st.CleanupPolicy(e.acme.ID))
	if p.Status != store.CleanupScheduled || p.LastRunAt == nil || !p.LastRunAt.Equal(runAt) ||
		!p.NextRunAt.Equal(runAt.Add(7*day)) || p.LastRunDeletedEntriesCount != wantN || p.LastRunDeletedSize != wantB ||
		p.LastRunDetailedMetrics["maven"] != (store.CleanupMetrics{DeletedEntriesCount: wantN, DeletedSize: wantB}) ||
		p.FailureMessage != "" || p.Run != nil {
		t.Fatalf("policy after the run: %+v", p)
	}
	// The deleted entries wait for the proxy's collector, which frees them.
	var collected int
	var freed int64
	for {
		c := must[store.Collected](t)(st.CollectPending(100))
		collected += c.Entries
		freed += c.Bytes
		if !c.More {
			break
		}
	}
	if int64(collected) != wantN || freed != wantB {
		t.Fatalf("collected %d entries (%d bytes), want %d (%d)", collected, freed, wantN, wantB)
	}

	evs := e.audit(e.acme.ID)
	if len(evs) != 1 {
		t.Fatalf("%d audit events", len(evs))
	}
	ev := evs[0]
	wantMsg := fmt.Sprintf("Scheduled cleanup policy run: deleted %d cache entries (%d bytes) last downloaded before "+
		"2026-01-15T08:00:00.000Z; next run at 2026-02-21T08:00:00.000Z", wantN, wantB)
	if ev.EventName != "virtual_registries_cleanup_policy_run" || ev.Message != wantMsg || ev.EntityPath != "acme" ||
		ev.TargetType != "VirtualRegistries::Cleanup::Policy" || ev.TargetID != e.acme.ID || ev.AuthorID != 0 ||
		ev.AuthorName != "registryd" {
		t.Fatalf("audit event %+v", ev)
	}
	if len(e.audit(e.other.ID)) != 0 || len(e.gone(e.o)) != 0 {
		t.Fatal("the disabled policy ran")
	}
	if got := e.metric("registryd_cleanup_runs_total", "outcome", "success"); got != 1 {
		t.Fatalf("runs %v", got)
	}
	if got := e.metric("registryd_cleanup_deleted_entries_total"); got != float64(wantN) {
		t.Fatalf("entries metric %v", got)
	}
	if got := e.metric("registryd_cleanup_deleted_bytes_total"); got != float64(wantB) {
		t.Fatalf("bytes metric %v", got)
	}
	if got := e.metric("registryd_cleanup_runs_in_progress"); got != 0 {
		t.Fatalf("in progress %v", got)
	}

	// The next check finds nothing due; the next run comes a week later
	// and finds nothing more to delete until the kept entries age.
	s.Tick()
	if len(e.audit(e.acme.ID)) != 1 {
		t.Fatal("a second run before the cadence")
	}
	e.clock.Advance(7*day + time.Second) // t0+47d: cutoff t0+17d, the downloads (t0+20d) stay
	s.Tick()
	p = must[store.CleanupPolicy](t)(st.CleanupPolicy(e.acme.ID))
	if p.LastRunDeletedEntriesCount != 0 || len(e.audit(e.acme.ID)) != 2 {
		t.Fatalf("second run: %+v", p)
	}
	e.clock.Advance(7*day + time.Second) // t0+54d: cutoff t0+24d: the downloaded entries go too
	s.Tick()
	p = must[store.CleanupPolicy](t)(st.CleanupPolicy(e.acme.ID))
	if p.LastRunDeletedEntriesCount != int64(e.n) || len(e.gone(e.a)) != e.n || len(e.gone(e.o)) != 0 {
		t.Fatalf("third run: %+v", p)
	}
}

// TestDisabledPolicyNeverRuns: a policy switched off is never run by the
// scheduler, however long overdue; switched on again, it is due a cadence
// after the switch (GitLab's next_run_at on every save).
func TestDisabledPolicyNeverRuns(t *testing.T) {
	e := newEnv(t, 6)
	must[store.CleanupPolicy](t)(e.st.CreateCleanupPolicy(e.acme.ID, store.CleanupPolicyPatch{Enabled: ptr(true), Cadence: ptr(1)}))
	must[store.CleanupPolicy](t)(e.st.UpdateCleanupPolicy(e.acme.ID, store.CleanupPolicyPatch{Enabled: ptr(false)}))
	s := e.scheduler(100, nil)
	for range 5 {
		e.clock.Advance(30 * day)
		s.Tick()
	}
	if len(e.gone(e.a)) != 0 || len(e.audit(e.acme.ID)) != 0 {
		t.Fatal("a disabled policy ran")
	}
	p := must[store.CleanupPolicy](t)(e.st.UpdateCleanupPolicy(e.acme.ID, store.CleanupPolicyPatch{Enabled: ptr(true)}))
	if !p.NextRunAt.Equal(e.clock.Now().Add(day)) {
		t.Fatalf("re-enabled: next_run_at %s", p.NextRunAt)
	}
	s.Tick()
	if len(e.audit(e.acme.ID)) != 0 {
		t.Fatal("ran at once when re-enabled")
	}
	e.clock.Advance(day + time.Millisecond)
	s.Tick()
	if len(e.gone(e.a)) != e.n {
		t.Fatalf("gone %v", e.gone(e.a))
	}
}

// TestStopAndResume: a stop at a batch boundary leaves the policy running
// with its progress; the next process (a new scheduler on the same store)
// resumes it at its first check, and the figures count every batch once.
// The store's state after a crash between batches is the same: each batch
// is one committed transaction.
func TestStopAndResume(t *testing.T) {
	e := newEnv(t, 30)
	must[store.CleanupPolicy](t)(e.st.CreateCleanupPolicy(e.acme.ID, store.CleanupPolicyPatch{Enabled: ptr(true)}))
	e.clock.Advance(20 * day)
	s := e.scheduler(4, nil)
	batches := 0
	s.afterBatch = func(store.CleanupBatch) {
		if batches++; batches == 2 {
			s.Stop() // returns at once: Tick is not one of the runs Stop waits for
		}
	}
	s.Tick()
	p := must[store.CleanupPolicy](t)(e.st.CleanupPolicy(e.acme.ID))
	if p.Status != store.CleanupRunning || p.Run == nil || p.Run.DeletedEntries != 8 {
		t.Fatalf("after the stop: %+v %+v", p, p.Run)
	}
	if got := e.metric("registryd_cleanup_runs_total", "outcome", "interrupted"); got != 1 {
		t.Fatalf("interrupted %v", got)
	}
	if len(e.audit(e.acme.ID)) != 0 {
		t.Fatal("an interrupted run was audited")
	}
	if _, err := s.RunNow(e.acme.ID, 1, "root"); !errors.Is(err, ErrStopped) {
		t.Fatalf("RunNow after Stop: %v", err)
	}

	e.clock.Advance(time.Hour)
	s2 := e.scheduler(4, nil)
	s2.Tick()
	e.wantOddGone()
	wantN, wantB := e.oddFigures()
	p = must[store.CleanupPolicy](t)(e.st.CleanupPolicy(e.acme.ID))
	if p.Status != store.CleanupScheduled || p.LastRunDeletedEntriesCount != wantN || p.LastRunDeletedSize != wantB {
		t.Fatalf("after the resumed run: %+v", p)
	}
	evs := e.audit(e.acme.ID)
	if len(evs) != 1 || !strings.Contains(evs[0].Message, "resumed 1 times after an interruption") ||
		!strings.Contains(evs[0].Message, fmt.Sprintf("deleted %d cache entries", wantN)) {
		t.Fatalf("audit %+v", evs)
	}
	// Metrics of the second process count what it deleted.
	if got := e.metric("registryd_cleanup_deleted_entries_total"); got != float64(wantN-8) {
		t.Fatalf("entries metric %v", got)
	}
}

// TestCrashLeftRunning: a policy a crash left running (status running, no
// batch done yet) is resumed by the first check, even disabled meanwhile.
func TestCrashLeftRunning(t *testing.T) {
	e := newEnv(t, 10)
	must[store.CleanupPolicy](t)(e.st.CreateCleanupPolicy(e.acme.ID, store.CleanupPolicyPatch{Enabled: ptr(true)}))
	e.clock.Advance(20 * day)
	must[store.CleanupPolicy](t)(e.st.StartCleanupRun(e.acme.ID, store.CleanupStart{Due: true}))
	// The crash: the process is gone. The policy still says running, and
	// is switched off before the restart.
	must[store.CleanupPolicy](t)(e.st.UpdateCleanupPolicy(e.acme.ID, store.CleanupPolicyPatch{Enabled: ptr(false)}))
	s := e.scheduler(3, nil)
	s.Tick()
	e.wantOddGone()
	p := must[store.CleanupPolicy](t)(e.st.CleanupPolicy(e.acme.ID))
	if p.Status != store.CleanupScheduled || p.Run != nil {
		t.Fatalf("not recovered: %+v", p)
	}
}

// failingStore fails the batches and ends of runs it is told to.
type failingStore struct {
	*store.Store
	failBatch  atomic.Int32 // fail the batch with this number (1-based); 0: none
	batches    atomic.Int32
	failFinish atomic.Int32 // fail this many FinishCleanupRun calls
}

var errDisk = errors.New("write /data/registry.db: no space left on device")

func (f *failingStore) CleanupRunBatch(group int64, limit int) (store.CleanupBatch, error) {
	if n := f.batches.Add(1); n == f.failBatch.Load() {
		return store.CleanupBatch{}, errDisk
	}
	return f.Store.CleanupRunBatch(group, limit)
}

func (f *failingStore) FinishCleanupRun(group int64, failure string) (store.CleanupPolicy, store.CleanupRun, error) {
	if f.failFinish.Load() > 0 {
		f.failFinish.Add(-1)
		return store.CleanupPolicy{}, store.CleanupRun{}, errDisk
	}
	return f.Store.FinishCleanupRun(group, failure)
}

// TestFailedRun: a batch that cannot be written ends the run "failed" with
// a message that does not show the error (it may name files), the next run
// scheduled; and a run whose end cannot be recorded is not left running:
// the next check resumes and records it.
func TestFailedRun(t *testing.T) {
	e := newEnv(t, 20)
	must[store.CleanupPolicy](t)(e.st.CreateCleanupPolicy(e.acme.ID, store.CleanupPolicyPatch{Enabled: ptr(true)}))
	e.clock.Advance(20 * day)
	fs := &failingStore{Store: e.st}
	fs.failBatch.Store(2)
	s := e.scheduler(5, fs)
	s.Tick()
	p := must[store.CleanupPolicy](t)(e.st.CleanupPolicy(e.acme.ID))
	now := e.clock.Now()
	if p.Status != store.CleanupFailed || p.FailureMessage != failureMessage || strings.Contains(p.FailureMessage, "/data") ||
		p.Run != nil || p.LastRunDeletedEntriesCount != 0 || !p.LastRunAt.Equal(now) || !p.NextRunAt.Equal(now.Add(7*day)) {
		t.Fatalf("after a failed batch: %+v", p)
	}
	if got := e.metric("registryd_cleanup_runs_total", "outcome", "failed"); got != 1 {
		t.Fatalf("failed runs %v", got)
	}
	evs := e.audit(e.acme.ID)
	if len(evs) != 1 || !strings.Contains(evs[0].Message, "failed: deleted 5 cache entries") ||
		!strings.HasSuffix(evs[0].Message, failureMessage) {
		t.Fatalf("audit %+v", evs)
	}

	// A failed policy runs again when due; this time its end cannot be
	// written once.
	fs.failBatch.Store(0)
	fs.failFinish.Store(1)
	e.clock.Advance(7*day + time.Second)
	s.Tick()
	p = must[store.CleanupPolicy](t)(e.st.CleanupPolicy(e.acme.ID))
	if p.Status != store.CleanupRunning {
		t.Fatalf("status %s after a failed end", p.Status)
	}
	s.Tick() // resumed: the batches find the rest done, and the end is recorded
	p = must[store.CleanupPolicy](t)(e.st.CleanupPolicy(e.acme.ID))
	wantN, _ := e.oddFigures()
	if p.Status != store.CleanupScheduled || p.LastRunDeletedEntriesCount != wantN-5 || p.FailureMessage != "" {
		t.Fatalf("after the resumed run: %+v", p)
	}
	e.wantOddGone()
}

// TestRunNow: an admin's run starts at once, for a disabled policy too,
// runs in the background, refuses a second run while it goes on (409), and
// its audit event names the admin.
func TestRunNow(t *testing.T) {
	e := newEnv(t, 12)
	must[store.CleanupPolicy](t)(e.st.CreateCleanupPolicy(e.acme.ID, store.CleanupPolicyPatch{}))
	e.clock.Advance(20 * day)
	hold := make(chan struct{})
	s := e.scheduler(100, nil)
	s.beforeRun = func() error { <-hold; return nil }
	p, err := s.RunNow(e.acme.ID, 1, "Administrator")
	if err != nil || p.Status != store.CleanupRunning || p.Run == nil || !p.Run.Manual {
		t.Fatalf("RunNow: %+v, %v", p, err)
	}
	if _, err := s.RunNow(e.acme.ID, 1, "Administrator"); !errors.Is(err, store.ErrCleanupRunning) {
		t.Fatalf("second RunNow: %v", err)
	}
	// A check meanwhile neither resumes nor starts it a second time.
	s.Tick()
	if _, err := s.RunNow(e.other.ID, 1, "Administrator"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("RunNow of no policy: %v", err)
	}
	close(hold)
	s.Wait()
	e.wantOddGone()
	evs := e.audit(e.acme.ID)
	if len(evs) != 1 || evs[0].AuthorID != 1 || evs[0].AuthorName != "Administrator" || evs[0].AuthorClass != "User" ||
		!strings.HasPrefix(evs[0].Message, "Cleanup policy run asked for by Administrator: deleted 12 cache entries") {
		t.Fatalf("audit %+v", evs)
	}
	p = must[store.CleanupPolicy](t)(e.st.CleanupPolicy(e.acme.ID))
	if p.Status != store.CleanupScheduled || p.Enabled || p.LastRunDeletedEntriesCount != 12 {
		t.Fatalf("after RunNow: %+v", p)
	}
}

// countingStore counts the cluster leases asked for and the runs started.
type countingStore struct {
	*store.Store
	leases, starts atomic.Int32
}

func (c *countingStore) TryLease(ctx context.Context, key string) (func(), bool, error) {
	c.leases.Add(1)
	return c.Store.TryLease(ctx, key)
}

func (c *countingStore) StartCleanupRun(group int64, how store.CleanupStart) (store.CleanupPolicy, error) {
	c.starts.Add(1)
	return c.Store.StartCleanupRun(group, how)
}

// TestRunNowInterval: with cleanup.run_now_interval, a run now within the
// interval of the last run's start is refused with the time left (after
// "running", which comes first), costing no lease and no write; once the
// interval has passed it starts. A scheduled run counts as a last run.
func TestRunNowInterval(t *testing.T) {
	e := newEnv(t, 6)
	must[store.CleanupPolicy](t)(e.st.CreateCleanupPolicy(e.acme.ID, store.CleanupPolicyPatch{Enabled: ptr(true)}))
	e.clock.Advance(20 * day)
	cs := &countingStore{Store: e.st}
	s := e.scheduler(100, cs)
	s.runNowMin = time.Minute
	hold := make(chan struct{})
	s.beforeRun = func() error { <-hold; return nil }
	must[store.CleanupPolicy](t)(s.RunNow(e.acme.ID, 1, "Administrator"))
	if _, err := s.RunNow(e.acme.ID, 1, "Administrator"); !errors.Is(err, store.ErrCleanupRunning) {
		t.Fatalf("RunNow while running, within the interval: %v", err)
	}
	close(hold)
	s.Wait()

	var tse *store.CleanupTooSoonError
	leases, starts := cs.leases.Load(), cs.starts.Load()
	e.clock.Advance(59 * time.Second)
	if _, err := s.RunNow(e.acme.ID, 1, "Administrator"); !errors.As(err, &tse) ||
		tse.RetryAfter != time.Second || tse.Interval != time.Minute {
		t.Fatalf("RunNow 59s after the last start: %v", err)
	}
	if cs.leases.Load() != leases || cs.starts.Load() != starts {
		t.Fatal("a refused RunNow took a lease or tried to start a run")
	}
	if len(e.audit(e.acme.ID)) != 1 {
		t.Fatal("a refused RunNow was audited")
	}
	// Refused, it claimed nothing: the next one, a second later, starts.
	e.clock.Advance(time.Second)
	if p, err := s.RunNow(e.acme.ID, 1, "Administrator"); err != nil || p.Status != store.CleanupRunning {
		t.Fatalf("RunNow once the interval passed: %+v, %v", p, err)
	}
	s.Wait()

	// A scheduled run is not held back by the interval, and counts as the
	// last run for the next run now.
	e.clock.Advance(7*day + time.Second)
	s.Tick()
	p := must[store.CleanupPolicy](t)(e.st.CleanupPolicy(e.acme.ID))
	if p.LastRunStartedAt == nil || !p.LastRunStartedAt.Equal(e.clock.Now()) || len(e.audit(e.acme.ID)) != 3 {
		t.Fatalf("the scheduled run did not run: %+v", p)
	}
	if _, err := s.RunNow(e.acme.ID, 1, "Administrator"); !errors.As(err, &tse) || tse.RetryAfter != time.Minute {
		t.Fatalf("RunNow right after a scheduled run: %v", err)
	}
}

// TestPolicyDeletedDuringRun: deleting the policy stops its run at the next
// batch; what it deleted stays deleted and is audited.
func TestPolicyDeletedDuringRun(t *testing.T) {
	e := newEnv(t, 20)
	must[store.CleanupPolicy](t)(e.st.CreateCleanupPolicy(e.acme.ID, store.CleanupPolicyPatch{Enabled: ptr(true)}))
	e.clock.Advance(20 * day)
	s := e.scheduler(4, nil)
	s.afterBatch = func(b store.CleanupBatch) {
		if b.Run.DeletedEntries == 4 {
			if err := e.st.DeleteCleanupPolicy(e.acme.ID, nil); err != nil {
				t.Error(err)
			}
		}
	}
	s.Tick()
	if got := len(e.gone(e.a)) + len(e.gone(e.b)); got != 4 {
		t.Fatalf("%d entries gone, want the first batch's 4", got)
	}
	evs := e.audit(e.acme.ID)
	if len(evs) != 1 || !strings.Contains(evs[0].Message, "stopped, the policy was deleted: deleted 4 cache entries") {
		t.Fatalf("audit %+v", evs)
	}
	if got := e.metric("registryd_cleanup_runs_total", "outcome", "deleted"); got != 1 {
		t.Fatalf("deleted runs %v", got)
	}
}

// TestHitsUnharmedDuringLargeRun: while a run deletes 10,000 of 20,000
// entries, lookups of the kept ones (what a cache hit reads) never fail
// and never see a missing entry.
func TestHitsUnharmedDuringLargeRun(t *testing.T) {
	c := testclock.New(time.Date(2026, 1, 5, 8, 0, 0, 0, time.UTC))
	st, err := boltstore.Open(t.TempDir(), store.Options{SecretKey: make([]byte, 32), Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	g := must[store.Group](t)(st.CreateGroup(store.NewGroup{Name: "acme", Path: "acme"}))
	r := must[store.Registry](t)(st.CreateRegistry(g.ID, "main", ""))
	u := must[store.PositionedUpstream](t)(st.CreateUpstream(r.ID, store.NewUpstream{URL: "https://a.example/m", Name: "a"})).ID
	const n = 20000
	es := make([]store.CacheEntry, 0, n)
	for i := range n {
		es = append(es, store.CacheEntry{UpstreamID: u, RelativePath: rel(i), Size: 100, SHA256: fmt.Sprintf("%064x", i)})
	}
	if err := st.PutCacheEntries(es); err != nil {
		t.Fatal(err)
	}
	c.Advance(40 * day)
	var dl []store.DownloadCount
	for i := 0; i < n; i += 2 {
		dl = append(dl, store.DownloadCount{UpstreamID: u, Rel: rel(i), Count: 1, Last: c.Now()})
	}
	if err := st.AddDownloads(dl); err != nil {
		t.Fatal(err)
	}
	must[store.CleanupPolicy](t)(st.CreateCleanupPolicy(g.ID, store.CleanupPolicyPatch{Enabled: ptr(true)}))
	c.Advance(8 * day)
	s, err := New(Options{Store: st, CheckInterval: time.Minute, BatchSize: 500, RunNowInterval: -1, Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	var batches atomic.Int32
	s.afterBatch = func(store.CleanupBatch) { batches.Add(1) }

	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Tick()
	}()
	lookups, during := 0, 0
	for i := 0; ; i = (i + 2) % n {
		select {
		case <-done:
		default:
			if _, err := st.CacheEntry(u, rel(i)); err != nil {
				t.Fatalf("lookup of kept entry %d during the run (batch %d): %v", i, batches.Load(), err)
			}
			if _, found, err := st.FirstCacheEntry([]int64{u}, rel(i)); err != nil || !found {
				t.Fatalf("first lookup of kept entry %d during the run: %v %v", i, found, err)
			}
			lookups++
			if b := batches.Load(); b > 0 && b < 20 {
				during++
			}
			continue
		}
		break
	}
	p := must[store.CleanupPolicy](t)(st.CleanupPolicy(g.ID))
	if p.LastRunDeletedEntriesCount != n/2 || p.LastRunDeletedSize != n/2*100 || batches.Load() < 20 || batches.Load() > 21 {
		t.Fatalf("run: %+v in %d batches", p, batches.Load())
	}
	if during == 0 {
		t.Fatalf("no lookup overlapped the run's batches (%d lookups)", lookups)
	}
	t.Logf("%d lookups, %d of them between the run's first and last batch", lookups, during)
	for i := range n {
		_, err := st.CacheEntry(u, rel(i))
		if (i%2 == 1) != errors.Is(err, store.ErrNotFound) {
			t.Fatalf("entry %d: %v", i, err)
		}
	}
}

// TestStartAndStop: Start checks at once (resuming a run a crash left),
// and Stop waits for the run in progress to reach its batch boundary.
func TestStartAndStop(t *testing.T) {
	e := newEnv(t, 30)
	must[store.CleanupPolicy](t)(e.st.CreateCleanupPolicy(e.acme.ID, store.CleanupPolicyPatch{Enabled: ptr(true)}))
	e.clock.Advance(20 * day)
	must[store.CleanupPolicy](t)(e.st.StartCleanupRun(e.acme.ID, store.CleanupStart{Due: true}))

	s := e.scheduler(4, nil)
	inBatch, release := make(chan struct{}), make(chan struct{})
	var first sync.Once
	s.afterBatch = func(store.CleanupBatch) {
		first.Do(func() {
			close(inBatch)
			<-release
		})
	}
	s.Start()
	<-inBatch // the first check resumed the run without waiting for the interval
	stopped := make(chan struct{})
	go func() {
		s.Stop()
		close(stopped)
	}()
	<-s.stop // Stop has asked; the run is still inside its first batch
	close(release)
	<-stopped
	// Stop returned after the run had stopped: its end is counted, and the
	// policy holds exactly the first batch.
	if got := e.metric("registryd_cleanup_runs_total", "outcome", "interrupted"); got != 1 {
		t.Fatalf("interrupted runs %v when Stop returned", got)
	}
	p := must[store.CleanupPolicy](t)(e.st.CleanupPolicy(e.acme.ID))
	if p.Status != store.CleanupRunning || p.Run.DeletedEntries != 4 {
		t.Fatalf("after Stop: %+v %+v", p, p.Run)
	}
	s.Stop()  // twice is fine
	s.Start() // and a stopped scheduler does not start again
	if got := e.metric("registryd_cleanup_runs_in_progress"); got != 0 {
		t.Fatalf("in progress %v", got)
	}

	// The next process finishes it on its first check.
	s2 := e.scheduler(4, nil)
	s2.Start()
	deadline := time.Now().Add(10 * time.Second)
	for {
		p = must[store.CleanupPolicy](t)(e.st.CleanupPolicy(e.acme.ID))
		if p.Status == store.CleanupScheduled {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the run was not resumed: %+v", p)
		}
		time.Sleep(5 * time.Millisecond) // polling a condition, not synchronising on time
	}
	s2.Stop()
	e.wantOddGone()
}
