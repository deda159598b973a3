package upstream

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// Health tracks whether a request is worth sending, at two levels: per
// (upstream, path), a path breaker, and per upstream.
//
// One path can fail on a working server: a Nexus group with one broken
// remote answers 502 for that remote's files and serves every other one,
// and a client retries the failing file (Maven three times). So a failure
// that concerns one request (an error answer, a wait for the answer that
// timed out, a connection reset once made) counts against its path first:
// PathThreshold failures of a path within Window open the path's breaker,
// and the path is then not asked for a backoff (the caller answers from
// its last failure). The upstream itself turns unhealthy only when
// Threshold distinct paths fail within Window with no answer from it in
// between: a client retrying one failing path cannot take the upstream
// out for everyone else.
//
// A failure that says the host itself cannot be reached (no connection
// could be made: refused, a name that does not resolve, a connect or TLS
// timeout or failure), a 429 (its rate limit is on registryd, whatever the
// path) and a 503 with Retry-After (the server asking for a pause) mark the
// upstream unhealthy at once: every further request would fail the same
// way, the first ones after paying a connect timeout each.
//
// An unhealthy upstream is skipped for a backoff; when it runs out, one
// trial request at a time is let through, and any answer makes the
// upstream healthy again at once. The trial is never a path that has
// failed within Window: that path's failure would say nothing new about
// the upstream, and a client retrying it would keep the upstream out. The
// failing path gets its own trial once its own backoff is over and the
// upstream is back (or once it has not failed for Window, it may be the
// upstream's trial: a client asking only for failing paths does not keep
// the upstream out for ever).
//
// Backoffs (the upstream's and each path's) start at InitialBackoff (10s)
// and double on every failed trial up to MaxBackoff (10m). Short first
// steps suit builds: a server that blipped is asked again within the same
// build, while a dead one costs one trial request every ten minutes at
// most (Nexus's Fibonacci sequence from 40s to 60min is built for the same
// trade-off, with a longer first step than a build can wait out). A
// Retry-After lengthens the backoff to what it asked for (bounded by
// MaxRetryAfter).
//
// Policy refusals are no failure at all (the caller reports them with
// Done): a redirect to an address registryd does not connect to, an answer
// refused by what may be cached. Health is kept in memory: a restart
// starts every upstream and path healthy. At most MaxPaths path states are
// kept (least recently used out; an evicted breaker is closed).
type Health struct {
	opt HealthOptions

	// notify is held across a transition and its OnChange call, so the
	// calls come in the order of the transitions: a log or a gauge that
	// follows them ends on the current state. Lock order: notify, then mu.
	notify sync.Mutex

	mu     sync.Mutex
	m      map[int64]*healthState
	paths  *simplelru.LRU[pathKey, *pathState] // only paths that failed lately
	epochs map[int64]uint64                    // Forget calls per id: a ticket from before one is void
	trials uint64                              // numbers the trials, so a late report of an old one is told apart
}

// HealthOptions tunes a Health. The zero value takes the defaults.
type HealthOptions struct {
	// InitialBackoff is the first backoff after an upstream turns
	// unhealthy, or a path's breaker opens. Default 10s.
	InitialBackoff time.Duration
	// MaxBackoff caps the doubling backoff. Default 10m.
	MaxBackoff time.Duration
	// MaxRetryAfter caps how long a Retry-After may keep an upstream out.
	// Default 1h.
	MaxRetryAfter time.Duration
	// Threshold is how many distinct paths failing within Window, with no
	// answer from the upstream in between, turn a healthy upstream
	// unhealthy. Default 3.
	Threshold int
	// PathThreshold is how many failures of one path within Window open
	// its breaker. Default 2.
	PathThreshold int
	// Window is how long a failure counts, towards Threshold and
	// PathThreshold. Default 1m.
	Window time.Duration
	// MaxPaths bounds the path states kept (paths that failed lately),
	// least recently used out. Default 10000.
	MaxPaths int
	// TrialTimeout is how long a trial may go without a verdict before
	// another request may try: a bound, in case the trial's request never
	// reports. Default 1m.
	TrialTimeout time.Duration
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// OnChange, when set, is called once per transition between healthy
	// and unhealthy, with the new status, in the order of the transitions.
	// It may call Status, Check, Begin and Forget, but must not report
	// (Success, Failure), which would wait for it.
	OnChange func(id int64, st HealthStatus)
}

// Health states.
const (
	Healthy   = "healthy"
	Unhealthy = "unhealthy"
)

// HealthStatus is an upstream's health as the admin API and the metrics
// show it.
type HealthStatus struct {
	// State is Healthy or Unhealthy.
	State string
	// Since is when State last changed; zero when the upstream has been
	// healthy since registryd started.
	Since time.Time
	// LastError is the last failure's short, safe reason ("" when none
	// since start), of the upstream or of one of its paths. It stays after
	// a recovery, as history.
	LastError string
	// LastErrorAt is when LastError happened.
	LastErrorAt time.Time
	// RetryAt is when the next trial request may go, while Unhealthy.
	RetryAt time.Time
	// Failures counts consecutive failures (reset by any answer).
	Failures int
	// RetryAfterAsked says RetryAt is the upstream's own Retry-After, not
	// only the backoff.
	RetryAfterAsked bool
	// FailingPaths is how many of the upstream's paths have an open
	// breaker: they are not asked until their own trial.
	FailingPaths int
}

// Closure says why a request may not be sent now (Check).
type Closure struct {
	// Path is set when the path's breaker is open; otherwise the upstream
	// is unhealthy.
	Path bool
	// LastError is the short, safe reason of the failure that closed it.
	LastError string
	// Timeout says that failure was a timeout.
	Timeout bool
	// RetryAt is when the next trial may go. When it is past, the
	// upstream waits for a trial by another path than this one.
	RetryAt time.Time
	// RetryAfterAsked says RetryAt is the upstream's own Retry-After.
	RetryAfterAsked bool
}

type healthState struct {
	HealthStatus
	backoff time.Duration // the current step, while unhealthy
	trial   time.Time     // when the running trial started; zero when none
	trialN  uint64        // the running trial's number; 0 when none
	// failing are the distinct paths that failed since the upstream last
	// answered, oldest first, at most Threshold of them.
	failing []pathFailure
}

type pathFailure struct {
	path string
	at   time.Time
}

type pathKey struct {
	id   int64
	path string
}

// pathState is one path's breaker. It exists only while the path has
// failed lately: an answer for it removes it.
type pathState struct {
	failures  int       // within Window of each other, since the last answer
	lastAt    time.Time // the last failure
	lastError string
	timeout   bool
	open      bool
	retryAt   time.Time // while open
	backoff   time.Duration
	asked     bool      // retryAt is a Retry-After
	trial     time.Time // the path's running trial; zero when none
	trialN    uint64
}

// Failure classes for Health.Failure.
const (
	// FailHost is a failure of the upstream's host, whatever the path: no
	// connection could be made, a 429, a 503 with Retry-After. It marks
	// the upstream unhealthy at once.
	FailHost = iota
	// FailPath is a failure of one request: an error answer, a reset or a
	// timeout once connected, a redirect loop, a body that breaks. It
	// counts against its path, and against the upstream once Threshold
	// distinct paths fail.
	FailPath
)

// Fault is a failed request, for Failure.
type Fault struct {
	// Class is FailHost or FailPath.
	Class int
	// Reason is a short, safe reason ("Connection refused", "answered 502
	// Bad Gateway").
	Reason string
	// RetryAfter is the upstream's Retry-After (0 when none).
	RetryAfter time.Duration
	// Timeout says the failure was a timeout.
	Timeout bool
}

// NewHealth returns a Health with every upstream healthy.
func NewHealth(o HealthOptions) *Health {
	if o.InitialBackoff <= 0 {
		o.InitialBackoff = 10 * time.Second
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 10 * time.Minute
	}
	if o.MaxBackoff < o.InitialBackoff {
		o.MaxBackoff = o.InitialBackoff
	}
	if o.MaxRetryAfter <= 0 {
		o.MaxRetryAfter = time.Hour
	}
	if o.Threshold <= 0 {
		o.Threshold = 3
	}
	if o.PathThreshold <= 0 {
		o.PathThreshold = 2
	}
	if o.Window <= 0 {
		o.Window = time.Minute
	}
	if o.MaxPaths <= 0 {
		o.MaxPaths = 10000
	}
	if o.TrialTimeout <= 0 {
		o.TrialTimeout = time.Minute
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	h := &Health{opt: o, m: map[int64]*healthState{}, epochs: map[int64]uint64{}}
	// Removal and eviction alike close the breaker: its upstream counts
	// one failing path less. Called with mu held.
	h.paths, _ = simplelru.NewLRU(o.MaxPaths, func(k pathKey, ps *pathState) {
		if st := h.m[k.id]; st != nil && ps.open {
			st.FailingPaths--
		}
	})
	return h
}

func (h *Health) trialOpen(retryAt, trial time.Time, now time.Time) bool {
	return !now.Before(retryAt) && (trial.IsZero() || now.Sub(trial) >= h.opt.TrialTimeout)
}

// failing reports whether the path failed within window: it may not be
// the trial of its upstream. Only lately: were every path asked for one
// that failed once, the upstream would otherwise never have a trial.
func (ps *pathState) failing(now time.Time, window time.Duration) bool {
	return now.Sub(ps.lastAt) < window
}

// Ticket is a permission to send one request, from Begin; report its end
// with Success, Failure or Done.
type Ticket struct {
	id     int64
	path   string
	epoch  uint64 // the id's Forget count at Begin
	trial  uint64 // the upstream trial's number; 0 for an ordinary request
	ptrial uint64 // the path trial's number; 0 when not one
}

// Trial reports whether this request is the one re-testing an unhealthy
// upstream.
func (t Ticket) Trial() bool { return t.trial != 0 }

// PathTrial reports whether this request is the one re-testing its path
// after the path's breaker opened.
func (t Ticket) PathTrial() bool { return t.ptrial != 0 }

// state is the ticket's upstream state, nil when none is kept or the
// ticket predates a Forget (it reports on a server that is no longer
// this upstream). Called with mu held.
func (h *Health) state(t Ticket) (st *healthState, current bool) {
	if h.epochs[t.id] != t.epoch {
		return nil, false
	}
	return h.m[t.id], true
}

// endTrial ends the running trial if t is it, and reports whether it was.
// A trial ticket that is not the running trial any more (TrialTimeout
// gave its turn to another, or the upstream recovered meanwhile) reports
// like an ordinary request: it must neither end the running trial, which
// would let a second one start beside it, nor count as a failed trial.
// Called with mu held.
func endTrial(st *healthState, t Ticket) bool {
	if t.trial == 0 || st.trialN != t.trial {
		return false
	}
	st.trial, st.trialN = time.Time{}, 0
	return true
}

// endPathTrial is endTrial for the path's trial.
func endPathTrial(ps *pathState, t Ticket) bool {
	if t.ptrial == 0 || ps.trialN != t.ptrial {
		return false
	}
	ps.trial, ps.trialN = time.Time{}, 0
	return true
}

// Check reports whether a request for path may be sent to upstream id
// now, and when not, why. It claims nothing; Begin does.
func (h *Health) Check(id int64, path string) (Closure, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c, _, ok := h.admit(id, path, false)
	return c, ok
}

// Begin asks to send a request for path to upstream id now. ok is false,
// and c says why, while the upstream is unhealthy and its backoff runs or
// another trial is out, or the path failed lately and the upstream waits
// for a trial, or the path's breaker is open and its backoff runs or its
// trial is out.
func (h *Health) Begin(id int64, path string) (t Ticket, c Closure, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c, t, ok = h.admit(id, path, true)
	return t, c, ok
}

// admit is Check and, with claim, Begin. Called with mu held.
func (h *Health) admit(id int64, path string, claim bool) (Closure, Ticket, bool) {
	t := Ticket{id: id, path: path, epoch: h.epochs[id]}
	st := h.m[id]
	if st == nil {
		return Closure{}, t, true // no failure since start or Forget: no path state either
	}
	now := h.opt.Now()
	k := pathKey{id, path}
	ps, _ := h.paths.Peek(k)
	if claim && ps != nil {
		h.paths.Get(k) // a path asked for stays longer
	}
	if st.State == Unhealthy {
		switch {
		case ps != nil && ps.open && now.Before(ps.retryAt):
			return ps.closure(), Ticket{}, false
		case !h.trialOpen(st.RetryAt, st.trial, now), ps != nil && ps.failing(now, h.opt.Window):
			return Closure{LastError: st.LastError, RetryAt: st.RetryAt, RetryAfterAsked: st.RetryAfterAsked}, Ticket{}, false
		}
		if claim {
			h.trials++
			st.trial, st.trialN = now, h.trials
			t.trial = h.trials
		}
		return Closure{}, t, true
	}
	if ps == nil || !ps.open {
		return Closure{}, t, true
	}
	if !h.trialOpen(ps.retryAt, ps.trial, now) {
		return ps.closure(), Ticket{}, false
	}
	if claim {
		h.trials++
		ps.trial, ps.trialN = now, h.trials
		t.ptrial = h.trials
	}
	return Closure{}, t, true
}

func (ps *pathState) closure() Closure {
	return Closure{Path: true, LastError: ps.lastError, Timeout: ps.timeout, RetryAt: ps.retryAt, RetryAfterAsked: ps.asked}
}

// Success reports that the request got a proper answer (a file, 304, 404):
// its path is fine, and the upstream is healthy from now on.
func (h *Health) Success(t Ticket) {
	h.mu.Lock()
	st, _ := h.state(t)
	if st == nil {
		h.mu.Unlock()
		return
	}
	endTrial(st, t)
	h.paths.Remove(pathKey{t.id, t.path})
	st.Failures = 0
	st.failing = st.failing[:0]
	if st.State == Healthy {
		h.mu.Unlock()
		return
	}
	h.mu.Unlock()

	// A recovery: take notify first (the lock order), then look again.
	h.notify.Lock()
	defer h.notify.Unlock()
	h.mu.Lock()
	st, _ = h.state(t)
	if st == nil || st.State == Healthy {
		h.mu.Unlock()
		return
	}
	st.State, st.Since, st.RetryAt, st.backoff, st.RetryAfterAsked = Healthy, h.opt.Now(), time.Time{}, 0, false
	// A trial still out belongs to the episode that just ended.
	st.trial, st.trialN = time.Time{}, 0
	out := st.HealthStatus
	h.mu.Unlock()
	h.changed(t.id, out)
}

// Done reports that the request ended without a verdict on the upstream
// or the path (the fill was cancelled, the answer was refused by policy):
// a trial may be taken again.
func (h *Health) Done(t Ticket) {
	if t.trial == 0 && t.ptrial == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	st, _ := h.state(t)
	if st == nil {
		return
	}
	endTrial(st, t)
	if ps, ok := h.paths.Peek(pathKey{t.id, t.path}); ok {
		endPathTrial(ps, t)
	}
}

// Failure reports a failed request.
func (h *Health) Failure(t Ticket, f Fault) {
	h.notify.Lock()
	defer h.notify.Unlock()
	now := h.opt.Now()
	h.mu.Lock()
	st, current := h.state(t)
	if !current {
		h.mu.Unlock()
		return
	}
	if st == nil {
		st = &healthState{HealthStatus: HealthStatus{State: Healthy}}
		h.m[t.id] = st
	}
	trial := endTrial(st, t)
	st.Failures++
	st.LastError, st.LastErrorAt = f.Reason, now
	retryAfter := min(f.RetryAfter, h.opt.MaxRetryAfter)
	if f.Class == FailPath {
		h.pathFailed(st, t, f, retryAfter, now)
	} else if ps, ok := h.paths.Peek(pathKey{t.id, t.path}); ok {
		// The host failed, not the path: no verdict on the path.
		endPathTrial(ps, t)
	}
	var out HealthStatus
	changed := false
	switch {
	case st.State == Unhealthy && trial:
		// The trial failed: the next step of the backoff.
		st.backoff = min(st.backoff*2, h.opt.MaxBackoff)
		st.RetryAt = now.Add(max(st.backoff, retryAfter))
		st.RetryAfterAsked = retryAfter > st.backoff
	case st.State == Unhealthy:
		// A request that started before the upstream turned unhealthy:
		// it says nothing new, unless the upstream asked for longer.
		if until := now.Add(retryAfter); until.After(st.RetryAt) {
			st.RetryAt, st.RetryAfterAsked = until, true
		}
	case f.Class == FailHost || retryAfter > 0 || h.noteFailing(st, t.path, now) >= h.opt.Threshold:
		st.State, st.Since, st.backoff = Unhealthy, now, h.opt.InitialBackoff
		st.RetryAt = now.Add(max(st.backoff, retryAfter))
		st.RetryAfterAsked = retryAfter > st.backoff
		out, changed = st.HealthStatus, true
	}
	h.mu.Unlock()
	if changed {
		h.changed(t.id, out)
	}
}

// pathFailed counts a failure against t's path: its breaker opens at
// PathThreshold failures within Window; a failed trial of an open breaker
// doubles its backoff. Called with mu held.
func (h *Health) pathFailed(st *healthState, t Ticket, f Fault, retryAfter time.Duration, now time.Time) {
	k := pathKey{t.id, t.path}
	ps, ok := h.paths.Get(k)
	if !ok {
		ps = &pathState{}
		h.paths.Add(k, ps)
	}
	trial := endPathTrial(ps, t)
	if !ps.open && now.Sub(ps.lastAt) >= h.opt.Window {
		ps.failures = 0 // the last failure was too long ago to count with this one
	}
	ps.failures++
	ps.lastAt, ps.lastError, ps.timeout = now, f.Reason, f.Timeout
	switch {
	case ps.open && trial:
		ps.backoff = min(ps.backoff*2, h.opt.MaxBackoff)
		ps.retryAt = now.Add(max(ps.backoff, retryAfter))
		ps.asked = retryAfter > ps.backoff
	case ps.open:
		if until := now.Add(retryAfter); until.After(ps.retryAt) {
			ps.retryAt, ps.asked = until, true
		}
	case ps.failures >= h.opt.PathThreshold || retryAfter > 0:
		ps.open, ps.backoff = true, h.opt.InitialBackoff
		ps.retryAt = now.Add(max(ps.backoff, retryAfter))
		ps.asked = retryAfter > ps.backoff
		st.FailingPaths++
	}
}

// noteFailing adds path to the distinct paths that failed since the
// upstream last answered, forgetting those older than Window, and returns
// how many there are. Called with mu held.
func (h *Health) noteFailing(st *healthState, path string, now time.Time) int {
	kept := st.failing[:0]
	for _, pf := range st.failing {
		if pf.path != path && now.Sub(pf.at) < h.opt.Window {
			kept = append(kept, pf)
		}
	}
	kept = append(kept, pathFailure{path: path, at: now})
	if len(kept) > h.opt.Threshold {
		kept = append(kept[:0], kept[len(kept)-h.opt.Threshold:]...)
	}
	st.failing = kept
	return len(kept)
}

func (h *Health) changed(id int64, st HealthStatus) {
	if h.opt.OnChange != nil {
		h.opt.OnChange(id, st)
	}
}

// Status returns upstream id's health.
func (h *Health) Status(id int64) HealthStatus {
	h.mu.Lock()
	defer h.mu.Unlock()
	if st := h.m[id]; st != nil {
		return st.HealthStatus
	}
	return HealthStatus{State: Healthy}
}

// Forget drops what is known of upstream id and its paths (it was
// deleted, or its URL changed): it starts healthy, and requests begun
// before report nothing. It calls no OnChange: the upstream is gone, or is
// a new server.
func (h *Health) Forget(id int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m[id] != nil {
		for _, k := range h.paths.Keys() {
			if k.id == id {
				h.paths.Remove(k)
			}
		}
	}
	delete(h.m, id)
	h.epochs[id]++
}

// Classify sorts a request's error for Failure (a failure before the
// answer's headers; a body that breaks after them is FailPath whatever the
// cause, the server having answered): ok is false for errors that say
// nothing about the upstream's health (a 404, a 4xx other than 429, an
// unusable answer, a request refused by policy, a cancelled request).
// retryAfter is the upstream's Retry-After of a 429 or 503.
func Classify(err error) (class int, retryAfter time.Duration, ok bool) {
	var se *StatusError
	var ne *NetError
	switch {
	case errors.As(err, &se):
		switch {
		case se.Code == http.StatusTooManyRequests:
			// A rate limit is on registryd's address, not on a path:
			// asking for other files only makes it last.
			return FailHost, se.RetryAfter, true
		case se.Code == http.StatusServiceUnavailable && se.RetryAfter > 0:
			return FailHost, se.RetryAfter, true
		case se.Code >= 500:
			return FailPath, 0, true
		}
		return 0, 0, false
	case errors.As(err, &ne):
		switch {
		case errors.Is(ne.Err, context.Canceled) && !ne.Timeout():
			return 0, 0, false
		case errors.Is(ne, ErrBlocked):
			return 0, 0, false
		case ne.Unreached():
			return FailHost, 0, true
		}
		return FailPath, 0, true
	}
	return 0, 0, false
}
