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
)

// fakeClock is a clock the test moves by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
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
// backoff 10s doubling to 80s, Retry-After capped at 5m, threshold 3,
// trials freed after 30s.
type healthEnv struct {
	t     *testing.T
	clock *fakeClock
	rec   *recorder
	h     *Health
}

func newHealthEnv(t *testing.T) *healthEnv {
	e := &healthEnv{t: t, clock: newFakeClock(), rec: &recorder{}}
	e.h = NewHealth(HealthOptions{
		InitialBackoff: 10 * time.Second,
		MaxBackoff:     80 * time.Second,
		MaxRetryAfter:  5 * time.Minute,
		Threshold:      3,
		TrialTimeout:   30 * time.Second,
		Now:            e.clock.Now,
		OnChange:       e.rec.on,
	})
	return e
}

// begin is Begin that must succeed.
func (e *healthEnv) begin(id int64) Ticket {
	e.t.Helper()
	tk, ok := e.h.Begin(id)
	if !ok {
		e.t.Fatalf("Begin(%d) refused; status %+v", id, e.h.Status(id))
	}
	return tk
}

// refused fails unless upstream id is closed to requests now.
func (e *healthEnv) refused(id int64) {
	e.t.Helper()
	if e.h.Available(id) {
		e.t.Fatalf("Available(%d) = true; status %+v", id, e.h.Status(id))
	}
	if _, ok := e.h.Begin(id); ok {
		e.t.Fatalf("Begin(%d) allowed; status %+v", id, e.h.Status(id))
	}
}

// trial begins the trial request, which must be one.
func (e *healthEnv) trial(id int64) Ticket {
	e.t.Helper()
	if !e.h.Available(id) {
		e.t.Fatalf("Available(%d) = false at the end of the backoff; status %+v", id, e.h.Status(id))
	}
	tk := e.begin(id)
	if !tk.Trial() {
		e.t.Fatalf("Begin(%d) is not a trial; status %+v", id, e.h.Status(id))
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
	if !e.h.Available(7) {
		t.Fatal("an unknown upstream is not available")
	}
	tk := e.begin(7)
	if tk.Trial() {
		t.Fatal("a request to a healthy upstream is a trial")
	}
	e.h.Success(tk)
	e.h.Done(tk)
	if st := e.h.Status(7); st != (HealthStatus{State: Healthy}) {
		t.Fatalf("after a success: %+v", st)
	}
	e.wantChanges()
}

func TestHealthHardFailureMarksAtOnce(t *testing.T) {
	e := newHealthEnv(t)
	e.h.Failure(e.begin(1), FailHard, "Connection timeout", 0)
	st := e.wantUnhealthy(1, 10*time.Second)
	now := e.clock.Now()
	if !st.Since.Equal(now) || st.LastError != "Connection timeout" || !st.LastErrorAt.Equal(now) || st.Failures != 1 {
		t.Fatalf("status %+v", st)
	}
	e.refused(1)
	// Other upstreams are untouched.
	e.wantHealthy(2)
	e.begin(2)
	e.wantChanges(Unhealthy)
}

func TestHealthSoftFailuresNeedThreshold(t *testing.T) {
	e := newHealthEnv(t)
	e.h.Failure(e.begin(1), FailSoft, "503 Service Unavailable", 0)
	e.h.Failure(e.begin(1), FailSoft, "500 Internal Server Error", 0)
	st := e.wantHealthy(1)
	if st.Failures != 2 || st.LastError != "500 Internal Server Error" || !st.Since.IsZero() {
		t.Fatalf("after two soft failures: %+v", st)
	}
	// A success resets the count; the last error stays as history.
	e.h.Success(e.begin(1))
	if st := e.wantHealthy(1); st.Failures != 0 || st.LastError != "500 Internal Server Error" || !st.Since.IsZero() {
		t.Fatalf("after a success: %+v", st)
	}
	e.wantChanges()
	for i := range 2 {
		e.h.Failure(e.begin(1), FailSoft, fmt.Sprint("soft ", i), 0)
		e.wantHealthy(1)
	}
	e.clock.Add(time.Second)
	e.h.Failure(e.begin(1), FailSoft, "soft 2", 0)
	st = e.wantUnhealthy(1, 10*time.Second)
	if st.Failures != 3 || st.LastError != "soft 2" || !st.Since.Equal(e.clock.Now()) {
		t.Fatalf("after three soft failures: %+v", st)
	}
	e.refused(1)
	e.wantChanges(Unhealthy)
}

func TestHealthBackoffAndOneTrial(t *testing.T) {
	e := newHealthEnv(t)
	e.h.Failure(e.begin(1), FailHard, "Connection refused", 0)
	e.clock.Add(10*time.Second - time.Nanosecond)
	e.refused(1)
	e.clock.Add(time.Nanosecond)
	tk := e.trial(1)
	// While the trial is out nobody else goes, however long the backoff is over.
	e.refused(1)
	e.clock.Add(29 * time.Second)
	e.refused(1)
	e.h.Success(tk)
	st := e.wantHealthy(1)
	if !st.Since.Equal(e.clock.Now()) || st.Failures != 0 || st.LastError != "Connection refused" {
		t.Fatalf("after the trial succeeded: %+v", st)
	}
	for range 3 {
		if tk := e.begin(1); tk.Trial() {
			t.Fatal("a request after the recovery is a trial")
		}
	}
	e.wantChanges(Unhealthy, Healthy)
}

func TestHealthConcurrentBeginOneTrial(t *testing.T) {
	e := newHealthEnv(t)
	e.h.Failure(e.begin(1), FailHard, "Connection refused", 0)
	e.clock.Add(10 * time.Second)
	const n = 64
	var (
		wg             sync.WaitGroup
		allowed, trial atomic.Int32
		start          = make(chan struct{})
	)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_ = e.h.Available(1)
			tk, ok := e.h.Begin(1)
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
	e.h.Failure(e.begin(1), FailHard, "Connection timeout", 0)
	since := e.clock.Now()
	wait := 10 * time.Second
	for _, next := range []time.Duration{20, 40, 80, 80, 80} {
		e.clock.Add(wait)
		e.h.Failure(e.trial(1), FailHard, "Connection timeout", 0)
		wait = next * time.Second
		st := e.wantUnhealthy(1, wait)
		if !st.Since.Equal(since) {
			t.Fatalf("Since moved on a failed trial: %+v", st)
		}
		e.refused(1)
	}
	// A soft failure of a trial is a failed trial too.
	e.clock.Add(wait)
	e.h.Failure(e.trial(1), FailSoft, "502 Bad Gateway", 0)
	e.wantUnhealthy(1, 80*time.Second)
	e.wantChanges(Unhealthy)
	// Success starts over from the first step.
	e.clock.Add(80 * time.Second)
	e.h.Success(e.trial(1))
	e.h.Failure(e.begin(1), FailHard, "Connection timeout", 0)
	e.wantUnhealthy(1, 10*time.Second)
	e.wantChanges(Unhealthy, Healthy, Unhealthy)
}

func TestHealthRetryAfter(t *testing.T) {
	e := newHealthEnv(t)
	// A 429 with Retry-After marks at once, however low the count, for as
	// long as asked.
	e.h.Failure(e.begin(1), FailSoft, "429 Too Many Requests", 2*time.Minute)
	e.wantUnhealthy(1, 2*time.Minute)
	e.clock.Add(2*time.Minute - time.Second)
	e.refused(1)
	e.clock.Add(time.Second)
	// A failed trial without Retry-After: the backoff's own next step.
	e.h.Failure(e.trial(1), FailSoft, "429 Too Many Requests", 0)
	e.wantUnhealthy(1, 20*time.Second)
	e.clock.Add(20 * time.Second)
	// A failed trial with a Retry-After longer than the step waits as asked.
	e.h.Failure(e.trial(1), FailSoft, "503 Service Unavailable", 3*time.Minute)
	e.wantUnhealthy(1, 3*time.Minute)
	e.clock.Add(3 * time.Minute)
	// ... and one shorter than the step waits the step.
	e.h.Failure(e.trial(1), FailSoft, "503 Service Unavailable", time.Second)
	e.wantUnhealthy(1, 80*time.Second)

	// Retry-After is capped by MaxRetryAfter.
	e.h.Failure(e.begin(2), FailSoft, "429 Too Many Requests", 10*time.Hour)
	e.wantUnhealthy(2, 5*time.Minute)
	e.clock.Add(5 * time.Minute)
	e.h.Failure(e.trial(2), FailSoft, "429 Too Many Requests", 48*time.Hour)
	e.wantUnhealthy(2, 5*time.Minute)
}

func TestHealthStaleFailureKeepsBackoff(t *testing.T) {
	e := newHealthEnv(t)
	// Three requests go out while the upstream is healthy; all fail.
	a, b, c := e.begin(1), e.begin(1), e.begin(1)
	e.h.Failure(a, FailHard, "Connection timeout", 0)
	e.wantUnhealthy(1, 10*time.Second)
	e.clock.Add(time.Second)
	e.h.Failure(b, FailHard, "Connection reset by peer", 0)
	st := e.wantUnhealthy(1, 9*time.Second)
	if st.LastError != "Connection reset by peer" || st.Failures != 2 {
		t.Fatalf("a late failure is not recorded: %+v", st)
	}
	// A late failure asking for longer than the backoff gets it, no more.
	e.h.Failure(c, FailSoft, "429 Too Many Requests", 30*time.Second)
	e.wantUnhealthy(1, 30*time.Second)
	e.clock.Add(30 * time.Second)
	// The backoff step is still the first: a failed trial makes it 20s, not more.
	e.h.Failure(e.trial(1), FailHard, "Connection timeout", 0)
	e.wantUnhealthy(1, 20*time.Second)
	e.wantChanges(Unhealthy)
}

func TestHealthTrialTimeout(t *testing.T) {
	e := newHealthEnv(t)
	e.h.Failure(e.begin(1), FailHard, "Connection timeout", 0)
	e.clock.Add(10 * time.Second)
	stuck := e.trial(1)
	e.clock.Add(30*time.Second - time.Nanosecond)
	e.refused(1)
	e.clock.Add(time.Nanosecond)
	next := e.trial(1)
	e.refused(1)
	// The stuck trial reports late: it neither frees the running trial nor
	// counts as a failed trial.
	e.h.Done(stuck)
	e.refused(1)
	e.h.Failure(stuck, FailHard, "Connection timeout", 0)
	e.refused(1)
	if st := e.h.Status(1); st.RetryAt.After(e.clock.Now()) {
		t.Fatalf("a superseded trial moved RetryAt: %+v", st)
	}
	// The running trial's verdict counts: failed, the first doubling.
	e.h.Failure(next, FailHard, "Connection timeout", 0)
	e.wantUnhealthy(1, 20*time.Second)
	e.wantChanges(Unhealthy)
}

func TestHealthDoneFreesTrial(t *testing.T) {
	e := newHealthEnv(t)
	e.h.Failure(e.begin(1), FailHard, "Connection timeout", 0)
	e.clock.Add(10 * time.Second)
	tk := e.trial(1)
	e.refused(1)
	e.h.Done(tk)
	st := e.wantUnhealthy(1, 0)
	if st.Failures != 1 {
		t.Fatalf("Done counted as a failure: %+v", st)
	}
	// The next request is the trial, and the backoff did not grow.
	e.h.Failure(e.trial(1), FailHard, "Connection timeout", 0)
	e.wantUnhealthy(1, 20*time.Second)
	// Done of an ordinary request changes nothing.
	e.h.Done(e.begin(2))
	e.wantHealthy(2)
	e.wantChanges(Unhealthy)
}

// TestHealthLateSuccessEndsEpisode: a request sent before the upstream
// turned unhealthy succeeds while a trial is out. The upstream is healthy;
// when it fails again, the old trial neither blocks the new episode's
// trial nor counts in it.
func TestHealthLateSuccessEndsEpisode(t *testing.T) {
	e := newHealthEnv(t)
	late := e.begin(1)
	e.h.Failure(e.begin(1), FailHard, "Connection timeout", 0)
	e.clock.Add(10 * time.Second)
	oldTrial := e.trial(1)
	e.h.Success(late)
	e.wantHealthy(1)
	e.h.Failure(e.begin(1), FailHard, "Connection refused", 0)
	e.wantUnhealthy(1, 10*time.Second)
	e.clock.Add(10 * time.Second)
	newTrial := e.trial(1)
	e.h.Failure(oldTrial, FailHard, "Connection timeout", 0)
	e.refused(1)
	e.wantUnhealthy(1, 0)
	e.h.Failure(newTrial, FailHard, "Connection refused", 0)
	e.wantUnhealthy(1, 20*time.Second)
	e.wantChanges(Unhealthy, Healthy, Unhealthy)
}

func TestHealthOnChange(t *testing.T) {
	e := newHealthEnv(t)
	e.h.Failure(e.begin(1), FailSoft, "500 Internal Server Error", 0)
	e.h.Failure(e.begin(1), FailSoft, "500 Internal Server Error", 0)
	e.wantChanges()
	e.h.Failure(e.begin(1), FailSoft, "502 Bad Gateway", 0)
	e.wantChanges(Unhealthy)
	// Further failures, late or of trials, are no transition.
	e.clock.Add(10 * time.Second)
	e.h.Failure(e.trial(1), FailHard, "Connection timeout", 0)
	e.wantChanges(Unhealthy)
	e.clock.Add(20 * time.Second)
	e.h.Success(e.trial(1))
	e.h.Success(e.begin(1))
	e.wantChanges(Unhealthy, Healthy)

	e.rec.mu.Lock()
	down, up := e.rec.got[0], e.rec.got[1]
	e.rec.mu.Unlock()
	if down.id != 1 || down.st.LastError != "502 Bad Gateway" || down.st.RetryAt.IsZero() || down.st.Since.IsZero() {
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
	e.h.Failure(e.begin(2), FailHard, "Connection timeout", 0)
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
				tk, ok := h.Begin(1)
				if !ok {
					// Unhealthy and backing off: report a late request's
					// success, as one sent before would.
					tk = Ticket{id: 1}
				}
				if (g+i)%2 == 0 {
					h.Failure(tk, FailHard, "Connection timeout", 0)
				} else {
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
}

func TestHealthForget(t *testing.T) {
	e := newHealthEnv(t)
	before := e.begin(1)
	e.h.Failure(e.begin(1), FailHard, "Connection timeout", 0)
	e.clock.Add(10 * time.Second)
	trial := e.trial(1)
	e.h.Forget(1)
	if st := e.h.Status(1); st != (HealthStatus{State: Healthy}) {
		t.Fatalf("after Forget: %+v", st)
	}
	tk := e.begin(1)
	if tk.Trial() {
		t.Fatal("a forgotten upstream's request is a trial")
	}
	// Requests sent before Forget went to the old server: they report nothing.
	e.h.Failure(before, FailHard, "Connection timeout", 0)
	e.h.Failure(trial, FailHard, "Connection timeout", 0)
	if st := e.h.Status(1); st != (HealthStatus{State: Healthy}) {
		t.Fatalf("a report from before Forget counted: %+v", st)
	}
	// Requests sent after do.
	e.h.Failure(tk, FailHard, "Connection refused", 0)
	e.wantUnhealthy(1, 10*time.Second)
	e.wantChanges(Unhealthy, Unhealthy)
}

func TestHealthDefaults(t *testing.T) {
	clock := newFakeClock()
	h := NewHealth(HealthOptions{Now: clock.Now})
	tk, _ := h.Begin(1)
	h.Failure(tk, FailHard, "x", 0)
	if st := h.Status(1); !st.RetryAt.Equal(clock.Now().Add(10 * time.Second)) {
		t.Fatalf("default first backoff: %+v", st)
	}
	// 10s doubling: 20s 40s 80s 160s 320s, then 600s.
	wait := 10 * time.Second
	for range 7 {
		clock.Add(wait)
		tk, ok := h.Begin(1)
		if !ok || !tk.Trial() {
			t.Fatal("no trial at the end of the backoff")
		}
		h.Failure(tk, FailHard, "x", 0)
		wait = min(2*wait, 10*time.Minute)
		if st := h.Status(1); !st.RetryAt.Equal(clock.Now().Add(wait)) {
			t.Fatalf("backoff %v, want %v", st.RetryAt.Sub(clock.Now()), wait)
		}
	}
	// Default threshold 3.
	for i := range 3 {
		tk, _ := h.Begin(2)
		h.Failure(tk, FailSoft, "x", 0)
		if got, want := h.Status(2).State, map[bool]string{true: Unhealthy, false: Healthy}[i == 2]; got != want {
			t.Fatalf("after %d soft failures: %s", i+1, got)
		}
	}
	// Retry-After capped at 1h by default.
	tk, _ = h.Begin(3)
	h.Failure(tk, FailSoft, "x", 5*time.Hour)
	if st := h.Status(3); !st.RetryAt.Equal(clock.Now().Add(time.Hour)) {
		t.Fatalf("default Retry-After cap: %v", st.RetryAt.Sub(clock.Now()))
	}
	// Default trial timeout 1m.
	clock.Add(time.Hour)
	if tk, ok := h.Begin(3); !ok || !tk.Trial() {
		t.Fatal("no trial")
	}
	clock.Add(time.Minute - time.Nanosecond)
	if _, ok := h.Begin(3); ok {
		t.Fatal("a second trial before the default trial timeout")
	}
	clock.Add(time.Nanosecond)
	if _, ok := h.Begin(3); !ok {
		t.Fatal("no trial after the default trial timeout")
	}
	// A MaxBackoff below InitialBackoff is raised to it.
	h = NewHealth(HealthOptions{Now: clock.Now, InitialBackoff: time.Minute, MaxBackoff: time.Second})
	tk, _ = h.Begin(1)
	h.Failure(tk, FailHard, "x", 0)
	clock.Add(time.Minute)
	tk, _ = h.Begin(1)
	h.Failure(tk, FailHard, "x", 0)
	if st := h.Status(1); !st.RetryAt.Equal(clock.Now().Add(time.Minute)) {
		t.Fatalf("MaxBackoff below InitialBackoff: %v", st.RetryAt.Sub(clock.Now()))
	}
}

func TestClassifyHealth(t *testing.T) {
	status := func(code int, ra time.Duration) error {
		return &StatusError{Op: "GET", URL: "https://r.example/a", Code: code, Status: http.StatusText(code), RetryAfter: ra}
	}
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
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
		{"500", status(500, 0), FailSoft, 0, true},
		{"502", status(502, 0), FailSoft, 0, true},
		{"503 with Retry-After", status(503, 30*time.Second), FailSoft, 30 * time.Second, true},
		{"429", status(429, 0), FailSoft, 0, true},
		{"429 with Retry-After", status(429, time.Minute), FailSoft, time.Minute, true},
		{"wrapped 500", fmt.Errorf("fill: %w", status(500, 0)), FailSoft, 0, true},
		{"timeout", newNetError("GET", "https://r.example/a", context.DeadlineExceeded), FailHard, 0, true},
		{"refused", newNetError("GET", "https://r.example/a", refused), FailHard, 0, true},
		{"reset", newNetError("GET", "https://r.example/a", syscall.ECONNRESET), FailHard, 0, true},
		{"cut body", newNetError("GET", "https://r.example/a", fmt.Errorf("read: %w", io.ErrUnexpectedEOF)), FailHard, 0, true},
		{"canceled", newNetError("GET", "https://r.example/a", context.Canceled), 0, 0, false},
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
			class, ra, ok := Classify(se)
			if !ok || class != FailSoft || ra != se.RetryAfter {
				t.Errorf("%s %s: Classify = %d, %v, %v", name, tt.path, class, ra, ok)
			}
		}
	}
}
