package upstream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"registryd/internal/testclock"
)

// newClock is the clock the health tests move by hand.
func newClock() *testclock.Clock {
	return testclock.New(time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC))
}

// change is one OnChange call.
type change struct {
	id int64
	st HealthStatus
}

// recorder keeps the OnChange calls.
type recorder struct {
	mu  sync.Mutex
	got []change
}

func (r *recorder) on(id int64, st HealthStatus) {
	r.mu.Lock()
	r.got = append(r.got, change{id, st})
	r.mu.Unlock()
}

func (r *recorder) states() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, len(r.got))
	for i, c := range r.got {
		out[i] = c.st.State
	}
	return out
}

// healthEnv is a Health on a fake clock, with the test's step sizes:
// backoff 10s doubling to 80s, Retry-After capped at 5m, three distinct
// paths or two failures of one path within a minute, trials freed after
// 30s.
type healthEnv struct {
	t     *testing.T
	clock *testclock.Clock
	rec   *recorder
	h     *Health
}

func newHealthEnv(t *testing.T) *healthEnv {
	e := &healthEnv{t: t, clock: newClock(), rec: &recorder{}}
	e.h = NewHealth(HealthOptions{
		InitialBackoff: 10 * time.Second,
		MaxBackoff:     80 * time.Second,
		MaxRetryAfter:  5 * time.Minute,
		Threshold:      3,
		PathThreshold:  2,
		Window:         time.Minute,
		TrialTimeout:   30 * time.Second,
		Now:            e.clock.Now,
		OnChange:       e.rec.on,
	})
	return e
}

// The paths the tests ask for.
const (
	pathA = "org/example/a/1.0/a-1.0.jar"
	pathB = "org/example/b/1.0/b-1.0.jar"
	pathC = "org/example/c/1.0/c-1.0.jar"
	pathD = "org/example/d/1.0/d-1.0.jar"
)

// hostFault and pathFault are failures of the two classes.
func hostFault(reason string) Fault { return Fault{Class: FailHost, Reason: reason} }
func pathFault(reason string) Fault { return Fault{Class: FailPath, Reason: reason} }

// retryAfter is a host failure asking for a pause.
func retryAfterFault(reason string, d time.Duration) Fault {
	return Fault{Class: FailHost, Reason: reason, RetryAfter: d}
}

// begin is Begin that must succeed.
func (e *healthEnv) begin(id int64, p string) Ticket {
	e.t.Helper()
	tk, c, ok := e.h.Begin(id, p)
	if !ok {
		e.t.Fatalf("Begin(%d, %s) refused: %+v; status %+v", id, p, c, e.h.Status(id))
	}
	return tk
}

// refused fails unless a request for p to upstream id is refused now, and
// returns why.
func (e *healthEnv) refused(id int64, p string) Closure {
	e.t.Helper()
	c, ok := e.h.Check(id, p)
	if ok {
		e.t.Fatalf("Check(%d, %s) allowed; status %+v", id, p, e.h.Status(id))
	}
	if _, c2, ok := e.h.Begin(id, p); ok || c2 != c {
		e.t.Fatalf("Begin(%d, %s) allowed (%v) or closed otherwise (%+v, Check said %+v)", id, p, ok, c2, c)
	}
	return c
}

// trial begins the upstream's trial request, which must be one.
func (e *healthEnv) trial(id int64, p string) Ticket {
	e.t.Helper()
	if _, ok := e.h.Check(id, p); !ok {
		e.t.Fatalf("Check(%d, %s) refused at the end of the backoff; status %+v", id, p, e.h.Status(id))
	}
	tk := e.begin(id, p)
	if !tk.Trial() {
		e.t.Fatalf("Begin(%d, %s) is not a trial; status %+v", id, p, e.h.Status(id))
	}
	return tk
}

// wantUnhealthy checks the state, and that RetryAt is now+wait.
func (e *healthEnv) wantUnhealthy(id int64, wait time.Duration) HealthStatus {
	e.t.Helper()
	st := e.h.Status(id)
	if st.State != Unhealthy {
		e.t.Fatalf("status %+v, want unhealthy", st)
	}
	if want := e.clock.Now().Add(wait); !st.RetryAt.Equal(want) {
		e.t.Fatalf("RetryAt %v, want now+%v (%v)", st.RetryAt, wait, want)
	}
	return st
}

func (e *healthEnv) wantHealthy(id int64) HealthStatus {
	e.t.Helper()
	st := e.h.Status(id)
	if st.State != Healthy || !st.RetryAt.IsZero() {
		e.t.Fatalf("status %+v, want healthy without RetryAt", st)
	}
	return st
}

func (e *healthEnv) wantChanges(want ...string) {
	e.t.Helper()
	got := e.rec.states()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		e.t.Fatalf("OnChange calls %v, want %v", got, want)
	}
}

func TestHealthStartsHealthy(t *testing.T) {
	e := newHealthEnv(t)
	st := e.h.Status(7)
	if st != (HealthStatus{State: Healthy}) {
		t.Fatalf("status of an unknown upstream %+v", st)
	}
	if _, ok := e.h.Check(7, pathA); !ok {
		t.Fatal("an unknown upstream is not available")
	}
	tk := e.begin(7, pathA)
	if tk.Trial() || tk.PathTrial() {
		t.Fatal("a request to a healthy upstream is a trial")
	}
	e.h.Success(tk)
	e.h.Done(tk)
	if st := e.h.Status(7); st != (HealthStatus{State: Healthy}) {
		t.Fatalf("after a success: %+v", st)
	}
	e.wantChanges()
}

// A connection that cannot be made says the host is down, whatever the
// path: the upstream is out at once, for every path.
func TestHealthHostFailureMarksAtOnce(t *testing.T) {
	e := newHealthEnv(t)
	e.h.Failure(e.begin(1, pathA), hostFault("Connection refused"))
	st := e.wantUnhealthy(1, 10*time.Second)
	now := e.clock.Now()
	if !st.Since.Equal(now) || st.LastError != "Connection refused" || !st.LastErrorAt.Equal(now) ||
		st.Failures != 1 || st.FailingPaths != 0 {
		t.Fatalf("status %+v", st)
	}
	for _, p := range []string{pathA, pathB} {
		if c := e.refused(1, p); c.Path || c.LastError != "Connection refused" || !c.RetryAt.Equal(st.RetryAt) {
			t.Fatalf("closure of %s: %+v", p, c)
		}
	}
	// Other upstreams are untouched.
	e.wantHealthy(2)
	e.begin(2, pathA)
	e.wantChanges(Unhealthy)
	// The host failed, not the path: after the backoff the same path may
	// be the trial.
	e.clock.Advance(10 * time.Second)
	e.trial(1, pathA)
}

// The attack of issue 20: a client retries one path that answers 502. The
// path's breaker opens; the upstream stays healthy for every other path,
// however often the failing one is asked.
func TestHealthOnePathDoesNotMarkUpstream(t *testing.T) {
	e := newHealthEnv(t)
	e.h.Failure(e.begin(1, pathA), pathFault("answered 502 Bad Gateway"))
	if st := e.wantHealthy(1); st.FailingPaths != 0 || st.Failures != 1 || st.LastError != "answered 502 Bad Gateway" {
		t.Fatalf("after one failure: %+v", st)
	}
	// One failure leaves the path open to a retry.
	e.clock.Advance(time.Second)
	e.h.Failure(e.begin(1, pathA), pathFault("answered 502 Bad Gateway"))
	if st := e.wantHealthy(1); st.FailingPaths != 1 {
		t.Fatalf("after two failures of one path: %+v", st)
	}
	c := e.refused(1, pathA)
	if !c.Path || c.LastError != "answered 502 Bad Gateway" || !c.RetryAt.Equal(e.clock.Now().Add(10*time.Second)) {
		t.Fatalf("closure %+v", c)
	}
	// Ninety other paths go through meanwhile, and their answers say the
	// upstream works.
	for i := range 90 {
		tk := e.begin(1, fmt.Sprintf("org/example/x%d/1.0/x%d-1.0.jar", i, i))
		e.h.Success(tk)
	}
	e.refused(1, pathA)
	e.wantHealthy(1)
	e.wantChanges()
}

// Distinct paths failing within the window with no answer between them
// say the upstream is broken: Threshold of them mark it.
func TestHealthDistinctPathsMarkUpstream(t *testing.T) {
	e := newHealthEnv(t)
	e.h.Failure(e.begin(1, pathA), pathFault("answered 500 Internal Server Error"))
	e.h.Failure(e.begin(1, pathA), pathFault("answered 500 Internal Server Error")) // the same path again
	e.h.Failure(e.begin(1, pathB), pathFault("answered 502 Bad Gateway"))
	e.wantHealthy(1)
	e.clock.Advance(time.Second)
	e.h.Failure(e.begin(1, pathC), pathFault("Connection timeout"))
	st := e.wantUnhealthy(1, 10*time.Second)
	if st.LastError != "Connection timeout" || !st.Since.Equal(e.clock.Now()) || st.Failures != 4 || st.FailingPaths != 1 {
		t.Fatalf("after three distinct paths: %+v", st)
	}
	e.refused(1, pathD)
	e.wantChanges(Unhealthy)

	// An answer in between starts the count over.
	e.h.Failure(e.begin(2, pathA), pathFault("answered 502 Bad Gateway"))
	e.h.Failure(e.begin(2, pathB), pathFault("answered 502 Bad Gateway"))
	e.h.Success(e.begin(2, pathD))
	e.h.Failure(e.begin(2, pathC), pathFault("answered 502 Bad Gateway"))
	e.wantHealthy(2)
	// So does time: failures older than the window do not count.
	e.clock.Advance(time.Minute)
	e.h.Failure(e.begin(2, pathB), pathFault("answered 502 Bad Gateway"))
	e.h.Failure(e.begin(2, pathD), pathFault("answered 502 Bad Gateway"))
	e.wantHealthy(2)
	e.h.Failure(e.begin(2, pathA), pathFault("answered 502 Bad Gateway"))
	e.wantUnhealthy(2, 10*time.Second)
}

// After the backoff, the trial is not a path that failed lately: its
// failure would say nothing new, and a client retrying it would keep the
// upstream out. Another path is the trial; the failing one is asked again
// once the upstream is back and its own backoff is over.
func TestHealthTrialIsAnotherPath(t *testing.T) {
	e := newHealthEnv(t)
	for _, p := range []string{pathA, pathA, pathB} {
		e.h.Failure(e.begin(1, p), pathFault("answered 502 Bad Gateway"))
	}
	e.clock.Advance(5 * time.Second)
	e.h.Failure(e.begin(1, pathC), pathFault("answered 502 Bad Gateway"))
	e.wantUnhealthy(1, 10*time.Second)
	// A's breaker is open until its own backoff ends.
	if c := e.refused(1, pathA); !c.Path || !c.RetryAt.Equal(e.clock.Now().Add(5*time.Second)) {
		t.Fatalf("closure of A %+v", c)
	}
	e.clock.Advance(10 * time.Second)
	for _, p := range []string{pathA, pathB, pathC} {
		if c := e.refused(1, p); c.Path || c.RetryAt.After(e.clock.Now()) {
			t.Fatalf("closure of %s %+v, want the upstream's, waiting for a trial", p, c)
		}
	}
	tk := e.trial(1, pathD)
	e.refused(1, pathD) // one trial at a time
	e.h.Success(tk)
	e.wantHealthy(1)
	// B and C failed once each: asked again at once. A's own backoff is
	// over: A is its own trial.
	e.h.Success(e.begin(1, pathB))
	e.h.Success(e.begin(1, pathC))
	ptk := e.begin(1, pathA)
	if !ptk.PathTrial() || ptk.Trial() {
		t.Fatalf("A's request after its backoff: trial %v, path trial %v", ptk.Trial(), ptk.PathTrial())
	}
	e.refused(1, pathA) // one path trial at a time
	e.h.Success(ptk)
	if st := e.wantHealthy(1); st.FailingPaths != 0 {
		t.Fatalf("after A's good trial: %+v", st)
	}
	if tk := e.begin(1, pathA); tk.PathTrial() {
		t.Fatal("a request after the path recovered is a trial")
	}
	e.wantChanges(Unhealthy, Healthy)
}

// A path's breaker: its backoff doubles on every failed trial, up to
// MaxBackoff, and an answer closes it.
func TestHealthPathBreakerBackoff(t *testing.T) {
	e := newHealthEnv(t)
	e.h.Failure(e.begin(1, pathA), Fault{Class: FailPath, Reason: "Connection timeout", Timeout: true})
	e.h.Failure(e.begin(1, pathA), Fault{Class: FailPath, Reason: "Connection timeout", Timeout: true})
	wait := 10 * time.Second
	for _, next := range []time.Duration{20, 40, 80, 80} {
		c := e.refused(1, pathA)
		if !c.Path || !c.Timeout || !c.RetryAt.Equal(e.clock.Now().Add(wait)) {
			t.Fatalf("closure %+v, want a path timeout until now+%v", c, wait)
		}
		e.clock.Advance(wait)
		tk := e.begin(1, pathA)
		if !tk.PathTrial() {
			t.Fatal("no path trial after the backoff")
		}
		e.h.Failure(tk, Fault{Class: FailPath, Reason: "Connection timeout", Timeout: true})
		wait = next * time.Second
	}
	e.clock.Advance(wait)
	e.h.Failure(e.begin(1, pathA), pathFault("answered 504 Gateway Timeout"))
	if c := e.refused(1, pathA); c.Timeout || c.LastError != "answered 504 Gateway Timeout" ||
		!c.RetryAt.Equal(e.clock.Now().Add(wait)) {
		t.Fatalf("closure after an error answer %+v", c)
	}
	// A late failure of a request begun before the breaker opened changes
	// no backoff; Done of a trial frees it without a verdict.
	e.clock.Advance(wait)
	tk := e.begin(1, pathA)
	e.h.Done(tk)
	tk = e.begin(1, pathA)
	if !tk.PathTrial() {
		t.Fatal("Done did not free the path trial")
	}
	// A host failure is no verdict on the path either.
	e.h.Failure(tk, hostFault("Connection refused"))
	e.wantUnhealthy(1, 10*time.Second)
	e.clock.Advance(10 * time.Second)
	e.h.Success(e.trial(1, pathB))
	ptk := e.begin(1, pathA)
	if !ptk.PathTrial() {
		t.Fatal("the path trial ended by a host failure was not freed")
	}
	e.h.Success(ptk)
	if st := e.h.Status(1); st.FailingPaths != 0 {
		t.Fatalf("FailingPaths %d after the path answered", st.FailingPaths)
	}
	if e.h.paths.Len() != 0 {
		t.Fatalf("%d path states kept after every path answered", e.h.paths.Len())
	}
}

// Path states are bounded: the least recently used goes, its breaker
// closed and uncounted.
func TestHealthPathStatesBounded(t *testing.T) {
	clock := newClock()
	h := NewHealth(HealthOptions{Now: clock.Now, MaxPaths: 4, Threshold: 100, PathThreshold: 1})
	for i := range 10 {
		tk, _, ok := h.Begin(1, fmt.Sprint("p", i))
		if !ok {
			t.Fatalf("path %d refused", i)
		}
		h.Failure(tk, pathFault("answered 500 Internal Server Error"))
	}
	if n := h.paths.Len(); n != 4 {
		t.Fatalf("%d path states kept, want 4", n)
	}
	if st := h.Status(1); st.FailingPaths != 4 || st.State != Healthy {
		t.Fatalf("status %+v, want 4 failing paths", st)
	}
	if _, _, ok := h.Begin(1, "p0"); !ok {
		t.Fatal("an evicted path is still refused")
	}
	if _, _, ok := h.Begin(1, "p9"); ok {
		t.Fatal("a kept path is allowed")
	}
	h.Forget(1)
	if n := h.paths.Len(); n != 0 {
		t.Fatalf("%d path states kept after Forget", n)
	}
}

func TestHealthBackoffAndOneTrial(t *testing.T) {
	e := newHealthEnv(t)
	e.h.Failure(e.begin(1, pathA), hostFault("Connection refused"))
	e.clock.Advance(10*time.Second - time.Nanosecond)
	e.refused(1, pathB)
	e.clock.Advance(time.Nanosecond)
	tk := e.trial(1, pathB)
	// While the trial is out nobody else goes, however long the backoff is over.
	e.refused(1, pathC)
	e.clock.Advance(29 * time.Second)
	e.refused(1, pathC)
	e.h.Success(tk)
	st := e.wantHealthy(1)
	if !st.Since.Equal(e.clock.Now()) || st.Failures != 0 || st.LastError != "Connection refused" {
		t.Fatalf("after the trial succeeded: %+v", st)
	}
	for range 3 {
		if tk := e.begin(1, pathC); tk.Trial() {
			t.Fatal("a request after the recovery is a trial")
		}
	}
	e.wantChanges(Unhealthy, Healthy)
}

func TestHealthConcurrentBeginOneTrial(t *testing.T) {
	e := newHealthEnv(t)
	e.h.Failure(e.begin(1, pathA), hostFault("Connection refused"))
	e.clock.Advance(10 * time.Second)
	const n = 64
	var (
		wg             sync.WaitGroup
		allowed, trial atomic.Int32
		start          = make(chan struct{})
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			p := fmt.Sprint("p", i)
			_, _ = e.h.Check(1, p)
			tk, _, ok := e.h.Begin(1, p)
			if ok {
				allowed.Add(1)
			}
			if tk.Trial() {
				trial.Add(1)
			}
		}()
	}
	close(start)
	wg.Wait()
	if allowed.Load() != 1 || trial.Load() != 1 {
		t.Fatalf("%d of %d Begin calls allowed (%d trials), want exactly one trial", allowed.Load(), n, trial.Load())
	}
}

func TestHealthFailedTrialDoublesToMax(t *testing.T) {
	e := newHealthEnv(t)
	e.h.Failure(e.begin(1, pathA), hostFault("Connection timeout"))
	since := e.clock.Now()
	wait := 10 * time.Second
	for _, next := range []time.Duration{20, 40, 80, 80, 80} {
		e.clock.Advance(wait)
		e.h.Failure(e.trial(1, pathA), hostFault("Connection timeout"))
		wait = next * time.Second
		st := e.wantUnhealthy(1, wait)
		if !st.Since.Equal(since) {
			t.Fatalf("Since moved on a failed trial: %+v", st)
		}
		e.refused(1, pathA)
	}
	// A path failure of a trial is a failed trial too.
	e.clock.Advance(wait)
	e.h.Failure(e.trial(1, pathB), pathFault("answered 502 Bad Gateway"))
	e.wantUnhealthy(1, 80*time.Second)
	e.wantChanges(Unhealthy)
	// Success starts over from the first step.
	e.clock.Advance(80 * time.Second)
	e.h.Success(e.trial(1, pathC))
	e.h.Failure(e.begin(1, pathA), hostFault("Connection timeout"))
	e.wantUnhealthy(1, 10*time.Second)
	e.wantChanges(Unhealthy, Healthy, Unhealthy)
}

func TestHealthRetryAfter(t *testing.T) {
	e := newHealthEnv(t)
	// A 429 with Retry-After marks at once, for as long as asked.
	e.h.Failure(e.begin(1, pathA), retryAfterFault("answered 429 Too Many Requests", 2*time.Minute))
	st := e.wantUnhealthy(1, 2*time.Minute)
	if !st.RetryAfterAsked {
		t.Fatalf("RetryAfterAsked not set: %+v", st)
	}
	if c := e.refused(1, pathB); !c.RetryAfterAsked || !c.RetryAt.Equal(st.RetryAt) {
		t.Fatalf("closure %+v", c)
	}
	e.clock.Advance(2*time.Minute - time.Second)
	e.refused(1, pathA)
	e.clock.Advance(time.Second)
	// A failed trial without Retry-After: the backoff's own next step.
	e.h.Failure(e.trial(1, pathA), hostFault("answered 429 Too Many Requests"))
	e.wantUnhealthy(1, 20*time.Second)
	e.clock.Advance(20 * time.Second)
	// A failed trial with a Retry-After longer than the step waits as asked.
	e.h.Failure(e.trial(1, pathA), retryAfterFault("answered 503 Service Unavailable", 3*time.Minute))
	e.wantUnhealthy(1, 3*time.Minute)
	e.clock.Advance(3 * time.Minute)
	// ... and one shorter than the step waits the step.
	e.h.Failure(e.trial(1, pathA), retryAfterFault("answered 503 Service Unavailable", time.Second))
	e.wantUnhealthy(1, 80*time.Second)

	// Retry-After is capped by MaxRetryAfter.
	e.h.Failure(e.begin(2, pathA), retryAfterFault("answered 429 Too Many Requests", 10*time.Hour))
	e.wantUnhealthy(2, 5*time.Minute)
	e.clock.Advance(5 * time.Minute)
	e.h.Failure(e.trial(2, pathA), retryAfterFault("answered 429 Too Many Requests", 48*time.Hour))
	e.wantUnhealthy(2, 5*time.Minute)
}

func TestHealthStaleFailureKeepsBackoff(t *testing.T) {
	e := newHealthEnv(t)
	// Three requests go out while the upstream is healthy; all fail.
	a, b, c := e.begin(1, pathA), e.begin(1, pathB), e.begin(1, pathC)
	e.h.Failure(a, hostFault("Connection refused"))
	e.wantUnhealthy(1, 10*time.Second)
	e.clock.Advance(time.Second)
	e.h.Failure(b, pathFault("Connection reset by peer"))
	st := e.wantUnhealthy(1, 9*time.Second)
	if st.LastError != "Connection reset by peer" || st.Failures != 2 {
		t.Fatalf("a late failure is not recorded: %+v", st)
	}
	// A late failure asking for longer than the backoff gets it, no more.
	e.h.Failure(c, retryAfterFault("answered 429 Too Many Requests", 30*time.Second))
	e.wantUnhealthy(1, 30*time.Second)
	e.clock.Advance(30 * time.Second)
	// The backoff step is still the first: a failed trial makes it 20s, not more.
	e.h.Failure(e.trial(1, pathD), hostFault("Connection refused"))
	e.wantUnhealthy(1, 20*time.Second)
	e.wantChanges(Unhealthy)
}

func TestHealthTrialTimeout(t *testing.T) {
	e := newHealthEnv(t)
	e.h.Failure(e.begin(1, pathA), hostFault("Connection timeout"))
	e.clock.Advance(10 * time.Second)
	stuck := e.trial(1, pathA)
	e.clock.Advance(30*time.Second - time.Nanosecond)
	e.refused(1, pathB)
	e.clock.Advance(time.Nanosecond)
	next := e.trial(1, pathB)
	e.refused(1, pathC)
	// The stuck trial reports late: it neither frees the running trial nor
	// counts as a failed trial.
	e.h.Done(stuck)
	e.refused(1, pathC)
	e.h.Failure(stuck, hostFault("Connection timeout"))
	e.refused(1, pathC)
	if st := e.h.Status(1); st.RetryAt.After(e.clock.Now()) {
		t.Fatalf("a superseded trial moved RetryAt: %+v", st)
	}
	// The running trial's verdict counts: failed, the first doubling.
	e.h.Failure(next, hostFault("Connection timeout"))
	e.wantUnhealthy(1, 20*time.Second)
	e.wantChanges(Unhealthy)
}

func TestHealthDoneFreesTrial(t *testing.T) {
	e := newHealthEnv(t)
	e.h.Failure(e.begin(1, pathA), hostFault("Connection timeout"))
	e.clock.Advance(10 * time.Second)
	tk := e.trial(1, pathA)
	e.refused(1, pathB)
	e.h.Done(tk)
	st := e.wantUnhealthy(1, 0)
	if st.Failures != 1 {
		t.Fatalf("Done counted as a failure: %+v", st)
	}
	// The next request is the trial, and the backoff did not grow.
	e.h.Failure(e.trial(1, pathB), hostFault("Connection timeout"))
	e.wantUnhealthy(1, 20*time.Second)
	// Done of an ordinary request changes nothing.
	e.h.Done(e.begin(2, pathA))
	e.wantHealthy(2)
	e.wantChanges(Unhealthy)
}

// TestHealthLateSuccessEndsEpisode: a request sent before the upstream
// turned unhealthy succeeds while a trial is out. The upstream is healthy;
// when it fails again, the old trial neither blocks the new episode's
// trial nor counts in it.
func TestHealthLateSuccessEndsEpisode(t *testing.T) {
	e := newHealthEnv(t)
	late := e.begin(1, pathA)
	e.h.Failure(e.begin(1, pathB), hostFault("Connection timeout"))
	e.clock.Advance(10 * time.Second)
	oldTrial := e.trial(1, pathC)
	e.h.Success(late)
	e.wantHealthy(1)
	e.h.Failure(e.begin(1, pathB), hostFault("Connection refused"))
	e.wantUnhealthy(1, 10*time.Second)
	e.clock.Advance(10 * time.Second)
	newTrial := e.trial(1, pathD)
	e.h.Failure(oldTrial, hostFault("Connection timeout"))
	e.refused(1, pathA)
	e.wantUnhealthy(1, 0)
	e.h.Failure(newTrial, hostFault("Connection refused"))
	e.wantUnhealthy(1, 20*time.Second)
	e.wantChanges(Unhealthy, Healthy, Unhealthy)
}

func TestHealthOnChange(t *testing.T) {
	e := newHealthEnv(t)
	e.h.Failure(e.begin(1, pathA), pathFault("answered 500 Internal Server Error"))
	e.h.Failure(e.begin(1, pathB), pathFault("answered 500 Internal Server Error"))
	e.wantChanges()
	e.h.Failure(e.begin(1, pathC), pathFault("answered 502 Bad Gateway"))
	e.wantChanges(Unhealthy)
	// Further failures, late or of trials, are no transition.
	e.clock.Advance(10 * time.Second)
	e.h.Failure(e.trial(1, pathD), hostFault("Connection timeout"))
	e.wantChanges(Unhealthy)
	e.clock.Advance(20 * time.Second)
	e.h.Success(e.trial(1, pathD))
	e.h.Success(e.begin(1, pathD))
	e.wantChanges(Unhealthy, Healthy)

	e.rec.mu.Lock()
	down, up := e.rec.got[0], e.rec.got[1]
	e.rec.mu.Unlock()
	if down.id != 1 || down.st.LastError != "answered 502 Bad Gateway" || down.st.RetryAt.IsZero() || down.st.Since.IsZero() {
		t.Fatalf("unhealthy call %+v", down)
	}
	if up.id != 1 || up.st.State != Healthy || !up.st.Since.Equal(e.clock.Now()) || !up.st.RetryAt.IsZero() ||
		up.st.LastError != "Connection timeout" {
		t.Fatalf("healthy call %+v", up)
	}
	if !down.st.Since.Before(up.st.Since) {
		t.Fatalf("Since does not mark the transitions: %v, %v", down.st.Since, up.st.Since)
	}
	// Forget calls nothing.
	e.h.Failure(e.begin(2, pathA), hostFault("Connection timeout"))
	e.h.Forget(2)
	e.wantChanges(Unhealthy, Healthy, Unhealthy)
}

// TestHealthOnChangeOrder: under concurrent failures and successes, the
// calls alternate and the last one is the current state, so a log or a
// gauge that follows them is right.
func TestHealthOnChangeOrder(t *testing.T) {
	var (
		mu   sync.Mutex
		seen []string
	)
	var h *Health
	h = NewHealth(HealthOptions{Threshold: 1, OnChange: func(id int64, st HealthStatus) {
		mu.Lock()
		seen = append(seen, st.State)
		mu.Unlock()
		_ = h.Status(id) // allowed from OnChange
	}})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				p := fmt.Sprint("p", i%5)
				tk, _, ok := h.Begin(1, p)
				if !ok {
					// Unhealthy and backing off: report a late request's
					// success, as one sent before would.
					tk = Ticket{id: 1, path: p}
				}
				switch (g + i) % 3 {
				case 0:
					h.Failure(tk, hostFault("Connection refused"))
				case 1:
					h.Failure(tk, pathFault("answered 502 Bad Gateway"))
				default:
					h.Success(tk)
				}
			}
		}()
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if len(seen) == 0 {
		t.Fatal("no transition")
	}
	for i, s := range seen {
		want := Unhealthy
		if i%2 == 1 {
			want = Healthy
		}
		if s != want {
			t.Fatalf("call %d of %d is %s, want %s (calls %d.. %v)", i, len(seen), s, want, max(0, i-3), seen[max(0, i-3):i+1])
		}
	}
	if last := seen[len(seen)-1]; last != h.Status(1).State {
		t.Fatalf("last call %s, state %s", last, h.Status(1).State)
	}
	// The count of open breakers stays that of the path states kept.
	h.mu.Lock()
	open := 0
	for _, ps := range h.paths.Values() {
		if ps.open {
			open++
		}
	}
	h.mu.Unlock()
	if st := h.Status(1); st.FailingPaths != open {
		t.Fatalf("FailingPaths %d, %d breakers open", st.FailingPaths, open)
	}
}

func TestHealthForget(t *testing.T) {
	e := newHealthEnv(t)
	before := e.begin(1, pathA)
	e.h.Failure(e.begin(1, pathB), pathFault("answered 502 Bad Gateway"))
	e.h.Failure(e.begin(1, pathB), pathFault("answered 502 Bad Gateway"))
	e.h.Failure(e.begin(1, pathA), hostFault("Connection timeout"))
	e.clock.Advance(10 * time.Second)
	trial := e.trial(1, pathC)
	e.h.Forget(1)
	if st := e.h.Status(1); st != (HealthStatus{State: Healthy}) {
		t.Fatalf("after Forget: %+v", st)
	}
	if tk := e.begin(1, pathB); tk.Trial() || tk.PathTrial() {
		t.Fatal("a forgotten upstream's request is a trial")
	}
	tk := e.begin(1, pathA)
	// Requests sent before Forget went to the old server: they report nothing.
	e.h.Failure(before, hostFault("Connection timeout"))
	e.h.Failure(trial, hostFault("Connection timeout"))
	if st := e.h.Status(1); st != (HealthStatus{State: Healthy}) {
		t.Fatalf("a report from before Forget counted: %+v", st)
	}
	// Requests sent after do.
	e.h.Failure(tk, hostFault("Connection refused"))
	e.wantUnhealthy(1, 10*time.Second)
	e.wantChanges(Unhealthy, Unhealthy)
}

func TestHealthDefaults(t *testing.T) {
	clock := newClock()
	h := NewHealth(HealthOptions{Now: clock.Now})
	begin := func(id int64, p string) Ticket {
		t.Helper()
		tk, _, ok := h.Begin(id, p)
		if !ok {
			t.Fatalf("Begin(%d, %s) refused", id, p)
		}
		return tk
	}
	h.Failure(begin(1, "a"), hostFault("x"))
	if st := h.Status(1); !st.RetryAt.Equal(clock.Now().Add(10 * time.Second)) {
		t.Fatalf("default first backoff: %+v", st)
	}
	// 10s doubling: 20s 40s 80s 160s 320s, then 600s.
	wait := 10 * time.Second
	for range 7 {
		clock.Advance(wait)
		tk, _, ok := h.Begin(1, "a")
		if !ok || !tk.Trial() {
			t.Fatal("no trial at the end of the backoff")
		}
		h.Failure(tk, hostFault("x"))
		wait = min(2*wait, 10*time.Minute)
		if st := h.Status(1); !st.RetryAt.Equal(clock.Now().Add(wait)) {
			t.Fatalf("backoff %v, want %v", st.RetryAt.Sub(clock.Now()), wait)
		}
	}
	// Default path threshold 2, threshold 3 distinct paths.
	h.Failure(begin(2, "a"), pathFault("x"))
	if _, ok := h.Check(2, "a"); !ok {
		t.Fatal("one failure opened a path's breaker")
	}
	h.Failure(begin(2, "a"), pathFault("x"))
	if _, ok := h.Check(2, "a"); ok {
		t.Fatal("two failures did not open a path's breaker")
	}
	h.Failure(begin(2, "b"), pathFault("x"))
	if h.Status(2).State != Healthy {
		t.Fatal("two distinct paths marked the upstream")
	}
	h.Failure(begin(2, "c"), pathFault("x"))
	if h.Status(2).State != Unhealthy {
		t.Fatal("three distinct paths did not mark the upstream")
	}
	// Default window 1m.
	h.Failure(begin(4, "a"), pathFault("x"))
	h.Failure(begin(4, "b"), pathFault("x"))
	clock.Advance(time.Minute)
	h.Failure(begin(4, "c"), pathFault("x"))
	h.Failure(begin(4, "a"), pathFault("x"))
	if h.Status(4).State != Healthy {
		t.Fatal("failures a minute old counted")
	}
	if _, ok := h.Check(4, "a"); !ok {
		t.Fatal("a path failure a minute old counted towards its breaker")
	}
	// Default MaxPaths 10000.
	if n := h.paths.Resize(10000); n != 0 {
		t.Fatalf("default MaxPaths below 10000 (%d evicted)", n)
	}
	// Retry-After capped at 1h by default.
	h.Failure(begin(3, "a"), retryAfterFault("x", 5*time.Hour))
	if st := h.Status(3); !st.RetryAt.Equal(clock.Now().Add(time.Hour)) {
		t.Fatalf("default Retry-After cap: %v", st.RetryAt.Sub(clock.Now()))
	}
	// Default trial timeout 1m.
	clock.Advance(time.Hour)
	if tk, _, ok := h.Begin(3, "a"); !ok || !tk.Trial() {
		t.Fatal("no trial")
	}
	clock.Advance(time.Minute - time.Nanosecond)
	if _, _, ok := h.Begin(3, "a"); ok {
		t.Fatal("a second trial before the default trial timeout")
	}
	clock.Advance(time.Nanosecond)
	if _, _, ok := h.Begin(3, "a"); !ok {
		t.Fatal("no trial after the default trial timeout")
	}
	// A MaxBackoff below InitialBackoff is raised to it.
	h = NewHealth(HealthOptions{Now: clock.Now, InitialBackoff: time.Minute, MaxBackoff: time.Second})
	tk, _, _ := h.Begin(1, "a")
	h.Failure(tk, hostFault("x"))
	clock.Advance(time.Minute)
	tk, _, _ = h.Begin(1, "a")
	h.Failure(tk, hostFault("x"))
	if st := h.Status(1); !st.RetryAt.Equal(clock.Now().Add(time.Minute)) {
		t.Fatalf("MaxBackoff below InitialBackoff: %v", st.RetryAt.Sub(clock.Now()))
	}
}

func TestClassifyHealth(t *testing.T) {
	status := func(code int, ra time.Duration) error {
		return &StatusError{Op: "GET", URL: "https://r.example/a", Code: code, Status: http.StatusText(code), RetryAfter: ra}
	}
	netErr := func(cause error, unreached bool) error {
		ne := newNetError("GET", "https://r.example/a", cause)
		ne.unreached = unreached
		return ne
	}
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	blocked := &net.OpError{Op: "dial", Net: "tcp", Err: &URLError{Reason: ReasonLocalNetwork, Host: "10.0.0.1"}}
	tests := []struct {
		name  string
		err   error
		class int
		ra    time.Duration
		ok    bool
	}{
		{"404", status(404, 0), 0, 0, false},
		{"410", status(410, 0), 0, 0, false},
		{"403", status(403, 0), 0, 0, false},
		{"401", status(401, 0), 0, 0, false},
		{"500", status(500, 0), FailPath, 0, true},
		{"502", status(502, 0), FailPath, 0, true},
		{"503", status(503, 0), FailPath, 0, true},
		{"503 with Retry-After", status(503, 30*time.Second), FailHost, 30 * time.Second, true},
		{"429", status(429, 0), FailHost, 0, true},
		{"429 with Retry-After", status(429, time.Minute), FailHost, time.Minute, true},
		{"wrapped 500", fmt.Errorf("fill: %w", status(500, 0)), FailPath, 0, true},
		{"connect timeout", netErr(context.DeadlineExceeded, true), FailHost, 0, true},
		{"answer timeout", netErr(context.DeadlineExceeded, false), FailPath, 0, true},
		{"refused", netErr(refused, true), FailHost, 0, true},
		{"dns", netErr(&net.DNSError{Err: "no such host", IsNotFound: true}, true), FailHost, 0, true},
		{"reset", netErr(syscall.ECONNRESET, false), FailPath, 0, true},
		{"cut body", netErr(fmt.Errorf("read: %w", io.ErrUnexpectedEOF), false), FailPath, 0, true},
		{"redirect loop", netErr(ErrTooManyRedirects, false), FailPath, 0, true},
		{"blocked", netErr(blocked, true), 0, 0, false},
		{"blocked redirect", netErr(blocked, false), 0, 0, false},
		{"canceled", netErr(context.Canceled, false), 0, 0, false},
		{"answer", &AnswerError{Op: "GET", URL: "https://r.example/a", Reason: "answered 204 No Content"}, 0, 0, false},
		{"plain error", errors.New("x"), 0, 0, false},
		{"nil", nil, 0, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			class, ra, ok := Classify(tt.err)
			if ok != tt.ok || (ok && (class != tt.class || ra != tt.ra)) {
				t.Fatalf("Classify(%v) = %d, %v, %v; want %d, %v, %v", tt.err, class, ra, ok, tt.class, tt.ra, tt.ok)
			}
		})
	}
}

// TestClassifyRealFailures: the client tells a host it cannot reach from
// a failure once connected, and a request refused by policy from both.
func TestClassifyRealFailures(t *testing.T) {
	hung := blockingServer(t, nil)
	loop := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, r.URL.Path, http.StatusFound)
	}))
	toFTP := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "ftp://files.example/a.jar", http.StatusFound)
	}))
	c := local(Options{HeaderTimeout: 50 * time.Millisecond})
	defer c.CloseIdleConnections()
	get := func(c *Client, url string) error {
		_, err := c.Get(context.Background(), Endpoint{URL: url}, "a/1/a-1.jar", "")
		return err
	}
	tests := []struct {
		name  string
		err   error
		class int
		ok    bool
	}{
		{"refused", get(c, refusedURL(t)), FailHost, true},
		{"hung answer", get(c, hung.URL), FailPath, true},
		{"redirect loop", get(c, loop.URL), FailPath, true},
		{"redirect to ftp", get(c, toFTP.URL), 0, false},
		// The dialer's address check, as a redirect to a local address
		// meets it.
		{"blocked address", get(New(Options{}), hung.URL), 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			class, _, ok := Classify(tt.err)
			if ok != tt.ok || (ok && class != tt.class) {
				t.Fatalf("Classify(%v) = %d, %v; want %d, %v", tt.err, class, ok, tt.class, tt.ok)
			}
			if !tt.ok && !errors.Is(tt.err, ErrBlocked) {
				t.Fatalf("%v is not ErrBlocked", tt.err)
			}
			if !errors.Is(tt.err, ErrUnavailable) {
				t.Fatalf("%v is not ErrUnavailable", tt.err)
			}
		})
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		in   string
		want time.Duration
	}{
		{"", 0},
		{"0", 0},
		{"120", 2 * time.Minute},
		{" 7 ", 7 * time.Second},
		{"86400", 24 * time.Hour},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
		{now.Add(90 * time.Second).Format(time.RFC850), 90 * time.Second},
		{now.Add(90 * time.Second).Format(time.ANSIC), 90 * time.Second},
		{now.Add(90*time.Second + 400*time.Millisecond).Format(http.TimeFormat), 90 * time.Second},
		{now.Add(-time.Hour).Format(http.TimeFormat), 0},
		{now.Format(http.TimeFormat), 0},
		{"-5", 0},
		{"1.5", 0},
		{"99999999999999999999", 0},
		{"soon", 0},
		{"Mon, 32 Jan 2025 00:00:00 GMT", 0},
	}
	for _, tt := range tests {
		if got := parseRetryAfter(tt.in, now); got != tt.want {
			t.Errorf("parseRetryAfter(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

// TestStatusErrorRetryAfter: a 429 or 503 from a real server carries its
// Retry-After, in seconds or as a date; other statuses do not.
func TestStatusErrorRetryAfter(t *testing.T) {
	srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var code int
		fmt.Sscanf(r.URL.Path, "/%d/", &code)
		switch r.URL.Path[len(r.URL.Path)-1] {
		case 's':
			w.Header().Set("Retry-After", "120")
		case 'd':
			w.Header().Set("Retry-After", time.Now().Add(time.Hour).UTC().Format(http.TimeFormat))
		case 'g':
			w.Header().Set("Retry-After", "whenever")
		}
		w.WriteHeader(code)
	}))
	c := local(Options{})
	defer c.CloseIdleConnections()
	tests := []struct {
		path     string
		min, max time.Duration
	}{
		{"429/s", 2 * time.Minute, 2 * time.Minute},
		{"503/s", 2 * time.Minute, 2 * time.Minute},
		{"429/d", 59 * time.Minute, time.Hour},
		{"503/d", 59 * time.Minute, time.Hour},
		{"429/g", 0, 0},
		{"429/n", 0, 0},
		{"500/s", 0, 0},
		{"502/s", 0, 0},
	}
	ep := Endpoint{URL: srv.URL}
	for _, tt := range tests {
		calls := map[string]func() error{
			"Get": func() error { _, err := c.Get(context.Background(), ep, tt.path, ""); return err },
			"Revalidate": func() error {
				_, err := c.Revalidate(context.Background(), ep, tt.path, `"e"`)
				return err
			},
			"Head": func() error { _, err := c.Head(context.Background(), ep, tt.path); return err },
		}
		for name, call := range calls {
			var se *StatusError
			if err := call(); !errors.As(err, &se) {
				t.Fatalf("%s %s: %v, want a StatusError", name, tt.path, err)
			}
			if se.RetryAfter < tt.min || se.RetryAfter > tt.max {
				t.Errorf("%s %s: RetryAfter %v, want %v..%v", name, tt.path, se.RetryAfter, tt.min, tt.max)
			}
			// A rate limit, or a pause asked for, concerns the host; any
			// other error answer the path.
			want := FailPath
			if se.Code == http.StatusTooManyRequests || se.RetryAfter > 0 {
				want = FailHost
			}
			class, ra, ok := Classify(se)
			if !ok || class != want || ra != se.RetryAfter {
				t.Errorf("%s %s: Classify = %d, %v, %v; want %d", name, tt.path, class, ra, ok, want)
			}
		}
	}
}

// A client that asks only for files that failed does not keep the
// upstream out for ever: once a file has not failed for Window, it may be
// the trial.
func TestHealthFailingPathsTrialAfterWindow(t *testing.T) {
	e := newHealthEnv(t)
	for _, p := range []string{pathA, pathA, pathB, pathB, pathC} {
		e.h.Failure(e.begin(1, p), pathFault("answered 502 Bad Gateway"))
	}
	e.wantUnhealthy(1, 10*time.Second)
	e.clock.Advance(time.Minute - time.Nanosecond)
	for _, p := range []string{pathA, pathB, pathC} {
		e.refused(1, p)
	}
	e.clock.Advance(time.Nanosecond)
	tk := e.trial(1, pathA)
	e.h.Success(tk)
	if st := e.wantHealthy(1); st.FailingPaths != 1 {
		t.Fatalf("after A's good trial: %+v, want B's breaker still open", st)
	}
}
