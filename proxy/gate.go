package proxy

import (
	"context"
	"sync"
)

// gates cap the requests out to each upstream at once
// (upstreams.max_concurrent_requests): a cold build asks for hundreds of
// files in parallel, and public repositories answer too many connections
// from one address with 429 (Maven Central's consumption limits). A fill
// past the cap waits its turn in a queue, in arrival order, for as long as
// its fill may last; the upstream's health is judged when its turn comes,
// so a queue behind an upstream that has just turned unhealthy drains at
// once.
type gates struct {
	limit int

	mu sync.Mutex
	m  map[int64]*gate
}

type gate struct {
	slots   chan struct{}
	waiting int // under gates.mu
}

func newGates(limit int) *gates {
	return &gates{limit: max(limit, 1), m: map[int64]*gate{}}
}

func (g *gates) of(id int64) *gate {
	g.mu.Lock()
	defer g.mu.Unlock()
	gt := g.m[id]
	if gt == nil {
		gt = &gate{slots: make(chan struct{}, g.limit)}
		g.m[id] = gt
	}
	return gt
}

// acquire takes a slot of upstream id, waiting until one is free or ctx
// ends. The returned release may be called more than once.
func (g *gates) acquire(ctx context.Context, id int64) (release func(), err error) {
	gt := g.of(id)
	select {
	case gt.slots <- struct{}{}:
	default:
		g.mu.Lock()
		gt.waiting++
		g.mu.Unlock()
		select {
		case gt.slots <- struct{}{}:
		case <-ctx.Done():
			err = ctx.Err()
		}
		g.mu.Lock()
		gt.waiting--
		g.mu.Unlock()
		if err != nil {
			return func() {}, err
		}
	}
	var once sync.Once
	return func() { once.Do(func() { <-gt.slots }) }, nil
}

// gateLoad is one upstream's requests out and waiting, for the metrics.
type gateLoad struct {
	active, waiting int
}

func (g *gates) load() map[int64]gateLoad {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make(map[int64]gateLoad, len(g.m))
	for id, gt := range g.m {
		out[id] = gateLoad{active: len(gt.slots), waiting: gt.waiting}
	}
	return out
}
