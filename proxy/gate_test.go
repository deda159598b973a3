package proxy

import (
	"context"
	"errors"
	"sync"
	"testing"
)

// gateEnv drives one upstream's gate of gates directly.
type gateEnv struct {
	t *testing.T
	g *gates
}

// take acquires a slot that must be granted at once.
func (e gateEnv) take(bulk bool) *slot {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // a slot that is not free at once fails
	s, err := e.g.acquire(ctx, 1, bulk)
	if err != nil {
		e.t.Fatalf("acquire(bulk=%v) waited; load %+v", bulk, e.g.load()[1])
	}
	return s
}

// full fails unless a request of the class would wait.
func (e gateEnv) full(bulk bool) {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if s, err := e.g.acquire(ctx, 1, bulk); err == nil {
		s.release()
		e.t.Fatalf("acquire(bulk=%v) granted; load %+v", bulk, e.g.load()[1])
	}
}

// queue starts a waiting acquire; its slot comes on the channel.
func (e gateEnv) queue(ctx context.Context, bulk bool) <-chan *slot {
	e.t.Helper()
	before := e.g.load()[1].waiting
	got := make(chan *slot, 1)
	go func() {
		s, err := e.g.acquire(ctx, 1, bulk)
		if err != nil {
			s = nil
		}
		got <- s
	}()
	waitFor(e.t, "the request to queue", func() bool { return e.g.load()[1].waiting == before+1 })
	return got
}

func (e gateEnv) want(active, bulk, idle, waiting int) {
	e.t.Helper()
	if l := e.g.load()[1]; l != (gateLoad{active: active, bulk: bulk, idle: idle, waiting: waiting}) {
		e.t.Fatalf("load %+v, want active %d bulk %d idle %d waiting %d", l, active, bulk, idle, waiting)
	}
}

// Large bodies hold at most the cap less the reserved slots; small files
// take the reserved ones, and pass large requests in the queue.
func TestGateReservesSmallSlots(t *testing.T) {
	e := gateEnv{t, newGates(4, 1, 1<<20)}
	var large []*slot
	for range 3 {
		large = append(large, e.take(true))
	}
	e.full(true)
	queued := e.queue(context.Background(), true)
	small := e.take(false) // passes the large request queued before it
	e.want(4, 3, 0, 1)
	e.full(false)
	small.release()
	e.want(3, 3, 0, 1) // the freed slot is a reserved one: the large request still waits
	large[0].release()
	s := <-queued
	if s == nil {
		t.Fatal("the queued large request failed")
	}
	e.want(3, 3, 0, 0)
	s.release()
	s.release() // twice is harmless
	e.want(2, 2, 0, 0)

	// At most half of the cap is reserved.
	e = gateEnv{t, newGates(5, 4, 1<<20)}
	e.take(true)
	e.take(true)
	e.take(true)
	e.full(true)
	e.take(false)
	e.take(false)
	e.full(false)
}

// The answer's Content-Length reclassifies a slot: a small body of a
// large-looking path gives its large share back at once; a large body of
// a small-looking path counts as large.
func TestGateSizedByContentLength(t *testing.T) {
	e := gateEnv{t, newGates(3, 1, 1000)}
	a, b := e.take(true), e.take(true)
	queued := e.queue(context.Background(), true)
	a.sized(-1) // unknown: stays large
	e.want(2, 2, 0, 1)
	a.sized(1000)
	if s := <-queued; s == nil {
		t.Fatal("the queued large request failed")
	}
	e.want(3, 2, 0, 0)
	b.sized(5000) // already large
	e.want(3, 2, 0, 0)
	a.release()
	c := e.take(false)
	c.sized(1001)
	e.want(3, 3, 0, 0) // over the large share, never over the cap
	e.full(false)
}

// A slot whose fill was abandoned is taken back when a request waits for
// one, and not before; a fill a client joined again keeps it.
func TestGateTakesIdleSlotsBack(t *testing.T) {
	e := gateEnv{t, newGates(2, 0, 1<<20)}
	a, b := e.take(true), e.take(true)
	var taken []string
	give := func(name string, s *slot, ok bool) func() bool {
		return func() bool {
			taken = append(taken, name)
			if ok {
				s.release() // as the cancelled fill does, at once here
			}
			return ok
		}
	}
	a.idle(give("a", a, false)) // a client will have joined a by then
	e.want(2, 2, 1, 0)
	if len(taken) != 0 {
		t.Fatal("an idle slot was taken back while nobody waited")
	}
	b.idle(give("b", b, true))
	s, err := e.g.acquire(context.Background(), 1, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(taken) != 2 || taken[0] != "a" || taken[1] != "b" {
		t.Fatalf("take calls %v, want a (refused: joined again), then b", taken)
	}
	e.want(2, 2, 0, 0)

	// busy undoes idle: a is not offered again.
	a.idle(give("a", a, true))
	a.busy()
	e.want(2, 2, 0, 0)
	e.full(true)
	if len(taken) != 2 {
		t.Fatalf("a busy slot was taken back: %v", taken)
	}
	// An idle slot while a request already waits goes at once.
	ctx, cancel := context.WithCancel(context.Background())
	waiting := e.queue(ctx, true)
	s.idle(give("s", s, true))
	if got := <-waiting; got == nil {
		t.Fatal("the waiting request failed")
	}
	if taken[len(taken)-1] != "s" {
		t.Fatalf("take calls %v", taken)
	}
	cancel()
}

// A request that gives up waiting leaves the queue, with its context's
// cause.
func TestGateDequeue(t *testing.T) {
	e := gateEnv{t, newGates(1, 0, 1<<20)}
	held := e.take(true)
	ctx, cancel := context.WithCancelCause(context.Background())
	got := make(chan error, 1)
	go func() {
		_, err := e.g.acquire(ctx, 1, true)
		got <- err
	}()
	waitFor(t, "the request to queue", func() bool { return e.g.load()[1].waiting == 1 })
	cancel(errAbandoned)
	if err := <-got; !errors.Is(err, errAbandoned) {
		t.Fatalf("acquire ended with %v, want errAbandoned", err)
	}
	e.want(1, 1, 0, 0)
	held.release()
	e.want(0, 0, 0, 0)
	e.take(true)
}

// TestGateStress: many requests of both classes acquire, resize, go idle,
// are taken back, join again, give up waiting and release, at once. The
// cap is never exceeded, large bodies never pass their share unless a
// slot was resized to large, and everything is given back in the end.
func TestGateStress(t *testing.T) {
	const limit, reserved = 6, 2
	g := newGates(limit, reserved, 100)
	check := func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		gt := g.m[1]
		if gt == nil {
			return
		}
		if gt.active > limit || gt.bulk > gt.active || gt.preempting < 0 || gt.preempting > len(gt.idle)+gt.active {
			t.Errorf("gate %+v", *gt)
		}
	}
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 300 {
				bulk := (w+i)%3 != 0
				ctx, cancel := context.WithCancel(context.Background())
				if i%7 == 0 {
					cancel() // gives up at once when it would wait
				}
				s, err := g.acquire(ctx, 1, bulk)
				cancel()
				check()
				if err != nil {
					continue
				}
				switch i % 4 {
				case 0:
					s.sized(int64(i % 200))
				case 1:
					s.idle(func() bool { s.release(); return true })
				case 2:
					s.idle(func() bool { return false })
					s.busy()
				}
				check()
				s.release()
				check()
			}
		}()
	}
	wg.Wait()
	if l := g.load()[1]; l != (gateLoad{}) {
		t.Fatalf("load at the end %+v, want nothing held or waiting", l)
	}
	if gt := g.m[1]; gt.preempting != 0 {
		t.Fatalf("preempting %d at the end", gt.preempting)
	}
}
