// Package every is the loop of a periodic background job: call a function
// every d until the job's owner closes stop. It is what the proxy's
// download-count flusher, collector, evictor and audit retention job, the
// cleanup scheduler, the soak's admin, purge and metrics loops and the RSS
// and heap samplers of bench and sbomtest each wrote by hand.
//
// The period is a time.Ticker's: a call that outlasts d is followed at once
// by one more (the ticker keeps one tick; the others are dropped), not by a
// burst. Stop is seen between calls only (a tick due with it may still
// run fn once): a function that runs long watches stop itself. d must be positive (time.NewTicker panics
// otherwise). None of them closes a done channel: the caller's goroutine
// does, after they return.
package every

import "time"

// Tick calls fn every d until stop closes; the first call is after d.
func Tick(stop <-chan struct{}, d time.Duration, fn func()) { loop(stop, nil, d, false, fn) }

// TickNow is Tick with a first call at once, before the first wait (a job
// that also resumes what the last process left).
func TickNow(stop <-chan struct{}, d time.Duration, fn func()) { loop(stop, nil, d, true, fn) }

// TickOrWake is Tick that also calls fn as soon as wake receives (work was
// asked for early: a delete wants its entries collected). A tick that falls
// due meanwhile still comes: the ticker is not reset.
func TickOrWake(stop, wake <-chan struct{}, d time.Duration, fn func()) {
	loop(stop, wake, d, false, fn)
}

// loop is the one loop; a nil wake never receives.
func loop(stop, wake <-chan struct{}, d time.Duration, atOnce bool, fn func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	if atOnce {
		fn()
	}
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		case <-wake:
		}
		fn()
	}
}
