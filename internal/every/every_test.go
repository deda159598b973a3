package every

import (
	"testing"
	"time"
)

// run starts f (one of the loops) in a goroutine and returns its calls and
// a stop that waits for it to return.
func run(f func(stop <-chan struct{}, fn func())) (calls <-chan struct{}, stop func()) {
	c := make(chan struct{}, 16)
	s, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		f(s, func() {
			select {
			case c <- struct{}{}:
			default: // the test is not reading: a call more or less is all one
			}
		})
	}()
	return c, func() { close(s); <-done }
}

func wantCall(t *testing.T, calls <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-calls:
	case <-time.After(10 * time.Second):
		t.Fatalf("no call %s", what)
	}
}

func wantNoCall(t *testing.T, calls <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-calls:
		t.Fatalf("a call %s", what)
	case <-time.After(20 * time.Millisecond):
	}
}

func TestTick(t *testing.T) {
	// An hour: no call comes before the stop.
	calls, stop := run(func(s <-chan struct{}, fn func()) { Tick(s, time.Hour, fn) })
	wantNoCall(t, calls, "before the first period")
	stop()
	// A short period: calls come, and none after the stop returned.
	calls, stop = run(func(s <-chan struct{}, fn func()) { Tick(s, time.Millisecond, fn) })
	wantCall(t, calls, "after the period")
	wantCall(t, calls, "after the second period")
	stop()
	for len(calls) > 0 {
		<-calls
	}
	wantNoCall(t, calls, "after the stop")
}

func TestTickNow(t *testing.T) {
	calls, stop := run(func(s <-chan struct{}, fn func()) { TickNow(s, time.Hour, fn) })
	wantCall(t, calls, "at once")
	wantNoCall(t, calls, "before the first period")
	stop()
}

func TestTickOrWake(t *testing.T) {
	wake := make(chan struct{})
	calls, stop := run(func(s <-chan struct{}, fn func()) { TickOrWake(s, wake, time.Hour, fn) })
	wantNoCall(t, calls, "before a wake")
	wake <- struct{}{}
	wantCall(t, calls, "on the wake")
	wake <- struct{}{}
	wantCall(t, calls, "on the second wake")
	stop()
}
