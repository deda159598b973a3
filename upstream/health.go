package upstream

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"
)

// Health tracks, per upstream id, whether an upstream is worth asking. An
// upstream that keeps failing (timeouts, refused or reset connections, 5xx,
// 429) is marked unhealthy and skipped for a backoff; when it runs out, one
// trial request at a time is let through, and any success makes the
// upstream healthy again at once.
//
// The backoff starts at Options.InitialBackoff (10s) and doubles on every
// failed trial up to MaxBackoff (10m). Short first steps suit builds: an
// upstream that blipped (a restart, a full connection pool) is asked again
// within the same build, while a dead one costs one trial request every ten
// minutes at most. Nexus's Fibonacci sequence from 40s to 60min is built for
// the same trade-off, with a longer first step than a build can wait out. A
// Retry-After from the upstream lengthens the backoff to what it asked for
// (bounded by MaxRetryAfter).
//
// Failures that cost a client a wait (a timeout, a connection that could not
// be made or was reset) mark the upstream unhealthy at the first
// occurrence: every further request would pay the same wait. An error
// answer (5xx, 429 without Retry-After) marks it after Threshold
// consecutive ones, since one path can fail on an otherwise working server.
// A 429 or 503 with Retry-After marks it at once. Health is kept in memory:
// a restart starts every upstream healthy.
type Health struct {
	opt HealthOptions

	// notify is held across a transition and its OnChange call, so the
	// calls come in the order of the transitions: a log or a gauge that
	// follows them ends on the current state. Lock order: notify, then mu.
	notify sync.Mutex

	mu     sync.Mutex
	m      map[int64]*healthState
	epochs map[int64]uint64 // Forget calls per id: a ticket from before one is void
	trials uint64           // numbers the trials, so a late report of an old one is told apart
}

// HealthOptions tunes a Health. The zero value takes the defaults.
type HealthOptions struct {
	// InitialBackoff is the first backoff after an upstream turns unhealthy.
	// Default 10s.
	InitialBackoff time.Duration
	// MaxBackoff caps the doubling backoff. Default 10m.
	MaxBackoff time.Duration
	// MaxRetryAfter caps how long a Retry-After may keep an upstream out.
	// Default 1h.
	MaxRetryAfter time.Duration
	// Threshold is how many consecutive error answers (5xx, 429 without
	// Retry-After) turn a healthy upstream unhealthy. Default 3.
	Threshold int
	// TrialTimeout is how long a trial may go without a verdict before
	// another request may try: a bound, in case the trial's request never
	// reports. Default 1m.
	TrialTimeout time.Duration
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// OnChange, when set, is called once per transition between healthy
	// and unhealthy, with the new status, in the order of the transitions.
	// It may call Status, Available, Begin and Forget, but must not report
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
	// since start). It stays after a recovery, as history.
	LastError string
	// LastErrorAt is when LastError happened.
	LastErrorAt time.Time
	// RetryAt is when the next trial request may go, while Unhealthy.
	RetryAt time.Time
	// Failures counts consecutive failures (reset by a success).
	Failures int
	// RetryAfterAsked says RetryAt is the upstream's own Retry-After, not
	// only the backoff.
	RetryAfterAsked bool
}

type healthState struct {
	HealthStatus
	backoff time.Duration // the current step, while unhealthy
	trial   time.Time     // when the running trial started; zero when none
	trialN  uint64        // the running trial's number; 0 when none
}

// Failure classes for Health.Failure.
const (
	// FailHard is a failure that cost a wait: a timeout, a connection
	// refused or reset. It marks an upstream unhealthy at once.
	FailHard = iota
	// FailSoft is an error answer: 5xx, or 429 without Retry-After.
	FailSoft
)

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
	if o.TrialTimeout <= 0 {
		o.TrialTimeout = time.Minute
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Health{opt: o, m: map[int64]*healthState{}, epochs: map[int64]uint64{}}
}

// Available reports whether a request to upstream id may be sent now: it
// is healthy, or its backoff is over and no trial runs. It claims nothing;
// Begin does.
func (h *Health) Available(id int64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	st := h.m[id]
	return st == nil || st.State == Healthy || h.trialOpen(st, h.opt.Now())
}

func (h *Health) trialOpen(st *healthState, now time.Time) bool {
	return !now.Before(st.RetryAt) && (st.trial.IsZero() || now.Sub(st.trial) >= h.opt.TrialTimeout)
}

// Ticket is a permission to send one request, from Begin; report its end
// with Success, Failure or Done.
type Ticket struct {
	id    int64
	epoch uint64 // the id's Forget count at Begin
	trial uint64 // the trial's number; 0 for an ordinary request
}

// Trial reports whether this request is the one re-testing an unhealthy
// upstream.
func (t Ticket) Trial() bool { return t.trial != 0 }

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

// Begin asks to send a request to upstream id now. ok is false while the
// upstream is unhealthy and its backoff runs, or another trial is out.
func (h *Health) Begin(id int64) (t Ticket, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	st := h.m[id]
	t = Ticket{id: id, epoch: h.epochs[id]}
	if st == nil || st.State == Healthy {
		return t, true
	}
	now := h.opt.Now()
	if !h.trialOpen(st, now) {
		return Ticket{}, false
	}
	h.trials++
	st.trial, st.trialN = now, h.trials
	t.trial = h.trials
	return t, true
}

// Success reports that the request got a proper answer (a file, 304, 404):
// the upstream is healthy from now on.
func (h *Health) Success(t Ticket) {
	h.mu.Lock()
	st, _ := h.state(t)
	if st == nil {
		h.mu.Unlock()
		return
	}
	endTrial(st, t)
	st.Failures = 0
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
// (the fill was cancelled at shutdown, the answer was refused as content):
// a trial may be taken again.
func (h *Health) Done(t Ticket) {
	if t.trial == 0 {
		return
	}
	h.mu.Lock()
	if st, _ := h.state(t); st != nil {
		endTrial(st, t)
	}
	h.mu.Unlock()
}

// Failure reports a failed request: class FailHard or FailSoft, a short safe
// reason, and the upstream's Retry-After (0 when none).
func (h *Health) Failure(t Ticket, class int, reason string, retryAfter time.Duration) {
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
	st.LastError, st.LastErrorAt = reason, now
	retryAfter = min(retryAfter, h.opt.MaxRetryAfter)
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
	case class == FailHard || retryAfter > 0 || st.Failures >= h.opt.Threshold:
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

// Forget drops what is known of upstream id (it was deleted, or its URL
// changed): it starts healthy, and requests begun before report nothing.
// It calls no OnChange: the upstream is gone, or is a new server.
func (h *Health) Forget(id int64) {
	h.mu.Lock()
	delete(h.m, id)
	h.epochs[id]++
	h.mu.Unlock()
}

// Classify sorts a request's error for Failure (a failure before the
// answer's headers; a body that breaks after them is FailSoft whatever the
// cause, the server having answered): ok is false for errors that
// say nothing about the upstream's health (a 404, a 4xx other than 429, an
// unusable answer, a cancelled request). retryAfter is the upstream's
// Retry-After of a 429 or 503.
func Classify(err error) (class int, retryAfter time.Duration, ok bool) {
	var se *StatusError
	var ne *NetError
	switch {
	case errors.As(err, &se):
		if se.Code == http.StatusTooManyRequests || se.Code >= 500 {
			return FailSoft, se.RetryAfter, true
		}
		return 0, 0, false
	case errors.As(err, &ne):
		switch {
		case errors.Is(ne.Err, context.Canceled) && !ne.Timeout():
			return 0, 0, false
		case errors.Is(ne, ErrTooManyRedirects):
			// The server answers, with a loop: an error answer.
			return FailSoft, 0, true
		}
		return FailHard, 0, true
	}
	return 0, 0, false
}
