package proxy

import (
	"context"
	"path"
	"slices"
	"sync"

	"registryd/maven"
)

// gates cap the requests out to each upstream at once
// (upstreams.max_concurrent_requests): a cold build asks for hundreds of
// files in parallel, and public repositories answer too many connections
// from one address with 429 (Maven Central's consumption limits). A fill
// past the cap waits its turn in a queue, in arrival order, for as long as
// its fill may last; the upstream's health is judged when its turn comes,
// so a queue behind an upstream that has just turned unhealthy drains at
// once.
//
// Within the cap, small files never wait for all of it behind large ones:
// a large body (a jar, an archive) may take at most the cap less
// upstreams.reserved_small_requests slots, so a POM, a checksum or a
// metadata file always finds one of the reserved slots free, or soon free
// (small bodies take little time), however many large downloads run. A
// fill is small by its path (metadata, POMs, Gradle module files,
// signatures, checksums), and once its answer's headers came, by a
// Content-Length of at most upstreams.small_file_bytes: a large-looking
// path announcing a small body gives its large slot back at once, a
// small-looking one announcing a large body counts as large from then on
// (it may then run over the large share; new large fills wait until the
// share is back under it).
//
// A slot whose fill was abandoned (every client left and nobody joined,
// see flight.orphaned) is given back when a request waits for a slot it
// could take: the fill is cancelled then, not before, so when nobody
// waits the file is still cached for the next build. A fill abandoned
// while it still waits in the queue is dequeued at once.
type gates struct {
	limit     int
	bulkLimit int   // slots large bodies may take: limit - reserved
	smallMax  int64 // the largest Content-Length of a small fill

	mu sync.Mutex
	m  map[int64]*gate
}

// gate is one upstream's share of gates. Under gates.mu.
type gate struct {
	active int // slots held
	bulk   int // of which by large bodies
	queue  []*waiter
	// idle are the slots whose fill was abandoned, oldest first: taken
	// back (slot.take) when a request waits for a slot.
	idle []*slot
	// preempting counts the idle slots told to give back whose release
	// has not come yet: the waiters they will serve.
	preempting int
}

type waiter struct {
	s     *slot
	ready chan struct{} // closed when s is granted
}

// slot is one request's turn in an upstream's cap. Its fields are under
// gates.mu.
type slot struct {
	g    *gates
	gt   *gate
	bulk bool
	held bool
	// take, while the slot is idle, asks its fill to give it back (it
	// cancels the fill); false when a client joined meanwhile.
	take      func() bool
	preempted bool // take was called and said yes; the release is coming
}

func newGates(limit, reserved int, smallMax int64) *gates {
	limit = max(limit, 1)
	// Large bodies always keep at least half of the cap.
	reserved = min(max(reserved, 0), limit/2)
	return &gates{limit: limit, bulkLimit: limit - reserved, smallMax: smallMax, m: map[int64]*gate{}}
}

// smallByPath reports whether rel names a file that is small by what it
// is: repository metadata, a POM, Gradle module metadata, a signature or a
// checksum. Anything else may be large until its Content-Length says
// otherwise.
func smallByPath(rel string) bool {
	if maven.IsMetadata(rel) {
		return true
	}
	switch path.Ext(rel) {
	case ".pom", ".module", ".asc", ".sha1", ".md5", ".sha256", ".sha512":
		return true
	}
	return false
}

func (g *gates) of(id int64) *gate {
	gt := g.m[id]
	if gt == nil {
		gt = &gate{}
		g.m[id] = gt
	}
	return gt
}

// fitsLocked reports whether a request of the class may take a slot now.
func (g *gates) fitsLocked(gt *gate, bulk bool) bool {
	return gt.active < g.limit && (!bulk || gt.bulk < g.bulkLimit)
}

// grantLocked gives free slots to the queue in arrival order; a small
// request passes large ones that the large share holds back.
func (g *gates) grantLocked(gt *gate) {
	kept := gt.queue[:0]
	for _, w := range gt.queue {
		if !g.fitsLocked(gt, w.s.bulk) {
			kept = append(kept, w)
			continue
		}
		w.s.held = true
		gt.active++
		if w.s.bulk {
			gt.bulk++
		}
		close(w.ready)
	}
	clear(gt.queue[len(kept):])
	gt.queue = kept
}

// preemptLocked picks the idle slots to take back for the waiters that
// no slot being given back covers yet; the caller calls preempt with them
// once it dropped the lock.
func (g *gates) preemptLocked(gt *gate) (victims []*slot) {
	for i := gt.preempting; i < len(gt.queue) && len(gt.idle) > 0; i++ {
		// A large waiter held back by the large share needs a large slot
		// back; any other needs any slot.
		w := gt.queue[i]
		needBulk := w.s.bulk && gt.bulk >= g.bulkLimit
		j := slices.IndexFunc(gt.idle, func(s *slot) bool { return s.bulk })
		if j < 0 && !needBulk {
			j = 0
		}
		if j < 0 {
			continue
		}
		v := gt.idle[j]
		gt.idle = slices.Delete(gt.idle, j, j+1)
		v.preempted = true
		gt.preempting++
		victims = append(victims, v)
	}
	return victims
}

// preempt asks each victim's fill to give its slot back. A fill that a
// client joined meanwhile keeps it; another idle slot is tried instead.
func (g *gates) preempt(gt *gate, victims []*slot) {
	for len(victims) > 0 {
		v := victims[0]
		victims = victims[1:]
		// The slot may have been given back since it was picked (its
		// fill's body ended): release cleared take, undid the
		// preemption's count and granted the slot to the queue.
		g.mu.Lock()
		take := v.take
		g.mu.Unlock()
		if take == nil || take() {
			continue
		}
		g.mu.Lock()
		if v.preempted {
			v.preempted = false
			gt.preempting--
		}
		v.take = nil
		victims = append(victims, g.preemptLocked(gt)...)
		g.mu.Unlock()
	}
}

// acquire takes a slot of upstream id for a request of the class (bulk:
// a body that may be large), waiting in the queue until one is free or
// ctx ends (then with ctx's cause).
func (g *gates) acquire(ctx context.Context, id int64, bulk bool) (*slot, error) {
	g.mu.Lock()
	gt := g.of(id)
	s := &slot{g: g, gt: gt, bulk: bulk}
	w := &waiter{s: s, ready: make(chan struct{})}
	gt.queue = append(gt.queue, w)
	g.grantLocked(gt)
	if s.held {
		g.mu.Unlock()
		return s, nil
	}
	victims := g.preemptLocked(gt)
	g.mu.Unlock()
	g.preempt(gt, victims)
	select {
	case <-w.ready:
		return s, nil
	case <-ctx.Done():
	}
	g.mu.Lock()
	if i := slices.Index(gt.queue, w); i >= 0 {
		gt.queue = slices.Delete(gt.queue, i, i+1)
		// The waiters behind it may have been counted as covered by a
		// preemption meant for it: nothing to redo, the slot given back
		// goes to the next in the queue.
	}
	g.mu.Unlock()
	s.release() // granted just as ctx ended
	return nil, context.Cause(ctx)
}

// release gives the slot back; it may be called more than once, and on a
// nil slot.
func (s *slot) release() {
	if s == nil {
		return
	}
	g, gt := s.g, s.gt
	g.mu.Lock()
	defer g.mu.Unlock()
	if !s.held {
		return
	}
	s.held = false
	gt.active--
	if s.bulk {
		gt.bulk--
	}
	if s.preempted {
		s.preempted = false
		gt.preempting--
	}
	if s.take != nil {
		gt.idle = slices.DeleteFunc(gt.idle, func(o *slot) bool { return o == s })
		s.take = nil
	}
	g.grantLocked(gt)
}

// sized classifies the slot by its answer's Content-Length (n < 0:
// unknown, the path's class stays).
func (s *slot) sized(n int64) {
	if s == nil || n < 0 {
		return
	}
	bulk := n > s.g.smallMax
	g, gt := s.g, s.gt
	g.mu.Lock()
	defer g.mu.Unlock()
	if !s.held || s.bulk == bulk {
		return
	}
	s.bulk = bulk
	if bulk {
		gt.bulk++
		return
	}
	gt.bulk--
	g.grantLocked(gt)
}

// idle marks the slot as held by a fill nobody waits for: take cancels
// the fill, and is called when a request waits for a slot (at once, when
// one waits already).
func (s *slot) idle(take func() bool) {
	if s == nil {
		return
	}
	g, gt := s.g, s.gt
	g.mu.Lock()
	if !s.held || s.take != nil || s.preempted {
		g.mu.Unlock()
		return
	}
	s.take = take
	gt.idle = append(gt.idle, s)
	victims := g.preemptLocked(gt)
	g.mu.Unlock()
	g.preempt(gt, victims)
}

// busy undoes idle: a client joined the fill again.
func (s *slot) busy() {
	if s == nil {
		return
	}
	s.g.mu.Lock()
	defer s.g.mu.Unlock()
	if s.take != nil && !s.preempted {
		s.gt.idle = slices.DeleteFunc(s.gt.idle, func(o *slot) bool { return o == s })
		s.take = nil
	}
}

// gateLoad is one upstream's requests out and waiting, for the metrics.
type gateLoad struct {
	active, bulk, idle, waiting int
}

func (g *gates) load() map[int64]gateLoad {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make(map[int64]gateLoad, len(g.m))
	for id, gt := range g.m {
		out[id] = gateLoad{active: gt.active, bulk: gt.bulk, idle: len(gt.idle), waiting: len(gt.queue)}
	}
	return out
}
