package proxy

import (
	"testing"
)

// TestGatePreemptsReleasedSlot: acquire (and idle) pick an idle slot as a
// victim under gates.mu and call its take once the lock is dropped. The
// abandoned fill holding that slot may give it back in between (its body
// ended: freeSlot), and release sets take to nil under the lock. preempt
// must not then call a nil take (a panic in a fill goroutine, or in
// flightReader.Close after the handler returned: neither is recovered, the
// daemon dies).
func TestGatePreemptsReleasedSlot(t *testing.T) {
	e := gateEnv{t, newGates(1, 0, 1<<20)}
	a := e.take(true)
	a.idle(func() bool { a.release(); return true })
	e.want(1, 1, 1, 0)

	// What acquire does for a request that finds no free slot, with a's
	// release landing between its preemptLocked and its preempt.
	g := e.g
	g.mu.Lock()
	gt := g.of(1)
	w := &waiter{s: &slot{g: g, gt: gt, bulk: true}, ready: make(chan struct{})}
	gt.queue = append(gt.queue, w)
	g.grantLocked(gt)
	victims := g.preemptLocked(gt)
	g.mu.Unlock()
	if len(victims) != 1 || victims[0] != a {
		t.Fatalf("victims %v, want a", victims)
	}
	a.release() // the fill's freeSlot, concurrently
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("preempt of a slot released meanwhile panicked: %v", r)
			}
		}()
		g.preempt(gt, victims)
	}()
	<-w.ready
	w.s.release()
	e.want(0, 0, 0, 0)
	if gt.preempting != 0 {
		t.Fatalf("preempting %d at the end", gt.preempting)
	}
}
