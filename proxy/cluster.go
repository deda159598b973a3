package proxy

import (
	"context"
	"errors"
	"strconv"
	"sync"

	"registryd/internal/clusterjob"
	"registryd/maven"
	"registryd/store"
	"registryd/store/blob"
	"registryd/upstream"
)

// Several nodes on one index (store.Clustered): a herd of misses for one
// file spread over the nodes makes one upstream request for the whole
// cluster. Each node keeps exactly one deduplication layer of its own, the
// flight (flight.go); the fill lease is the cluster's layer over it: a
// flight's fill takes the lease "fill:<upstream id>:<path>" before it asks
// the upstream, and then reads the entry again. When another node stored
// the file meanwhile (or, for a revalidation, checked it: the entry is
// fresh again), the flight asks nothing and ends "filled elsewhere": its
// clients are served that entry, as a hit would serve it (a blob stored by
// another node comes through the blobs layer). The lease is given back at
// the end of the fill, after its entry is committed (or the fill failed);
// a node that dies loses its leases at once, so a waiting node then takes
// the lease, finds no entry, and asks the upstream itself.
//
// On a single node no lease is taken and the entry is not read again:
// fills behave exactly as they always have.

// flightElsewhere is a flight that found its file stored (or revalidated)
// by another node of the cluster once it held the fill lease: no upstream
// was asked; result() returns the entry to serve. It extends flightKind
// (flight.go).
const flightElsewhere = flightFailed + 1

// leaseError is a fill that could not take (or check under) its cluster
// lease: the index is unavailable. The upstream is not asked unguarded,
// which would let every node of a herd ask it; the client gets 503.
type leaseError struct{ err error }

func (e *leaseError) Error() string { return "cluster fill lease: " + e.err.Error() }
func (e *leaseError) Unwrap() error { return e.err }

const leaseReason = "the index database is unavailable (cluster fill lease)"

func isLeaseError(err error) bool {
	var le *leaseError
	return errors.As(err, &le)
}

func noUnlock() {}

// fillKey names the cluster lease of a flight's upstream request.
func fillKey(f *flight) string {
	return "fill:" + strconv.FormatInt(f.up.id, 10) + ":" + f.key.rel
}

// leaseFill takes f's cluster lease (a single node: nothing to take) and
// reads f's entry again under it. done means the flight is decided and
// finished here (filled elsewhere, or a lease failure) and the fill must
// not go on; otherwise unlock gives the lease back at the fill's end.
func (s *engine) leaseFill(f *flight) (unlock func(), done bool) {
	if !s.st.Clustered() {
		return noUnlock, false
	}
	// The wait has its own fill timeout: a fill that waited for another
	// node's (failed) fill still has the whole of its own.
	ctx, cancel := context.WithTimeout(s.fillCtx, s.opts.Upstreams.FillTimeout)
	defer cancel()
	// A fill's publish takes a second lock (the blob's) while it holds
	// its lease, each on its own connection of the engine's capped lock
	// pool: with as many fills as the pool has connections, every fill
	// would hold one and wait for a second. Fill leases therefore take
	// at most half of the pool.
	select {
	case s.leaseSlots <- struct{}{}:
	case <-ctx.Done():
		s.leaseFailed(f, ctx.Err())
		return noUnlock, true
	}
	freeSlot := func() { <-s.leaseSlots }
	key := fillKey(f)
	lease, ok, err := s.st.TryLease(ctx, key)
	if err == nil && !ok {
		s.met.leaseWaits.Inc()
		lease, err = s.st.Lease(ctx, key)
	}
	if err != nil {
		freeSlot()
		s.leaseFailed(f, err)
		return noUnlock, true
	}
	var once sync.Once
	unlock = func() { once.Do(func() { lease(); freeSlot() }) }
	e, err := s.st.CacheEntry(f.up.id, f.relSlash)
	switch {
	case err == nil:
		kind := maven.Artifact
		if maven.IsMetadata(f.key.rel) {
			kind = maven.MetadataKind
		}
		// Its blob must be readable too: a flight started because the
		// object was gone finds the same entry again, and must fetch the
		// file rather than serve the gone object (a 503 for ever).
		if blob.ValidDigest(e.SHA256) && newEntryView(s, f.up, f.key.rel, e).fresh(kind, s.now()) &&
			s.blobReadable(ctx, e) {
			unlock()
			s.met.filledElsewhere.Inc()
			f.decide(flightElsewhere, nil)
			f.finish(e, nil)
			return noUnlock, true
		}
	case !errors.Is(err, store.ErrNotFound):
		unlock()
		s.leaseFailed(f, err)
		return noUnlock, true
	}
	return unlock, false
}

// blobReadable reports whether e's blob can be served here (its local file
// or its object). A bucket that does not answer counts as readable: the
// serve then answers 503 with the reason, where a fetch would publish into
// the same unreachable bucket.
func (s *engine) blobReadable(ctx context.Context, e store.CacheEntry) bool {
	ok, err := s.blobs.Present(ctx, e.SHA256, e.Size)
	return ok || err != nil
}

// newLeaseSlots bounds the fill leases held at once to half the engine's
// lock connections (store.postgres.max_locks), at least one.
func newLeaseSlots(maxLocks int) chan struct{} {
	return make(chan struct{}, max(1, maxLocks/2))
}

// leaseFailed ends a flight whose lease (or the read under it) failed.
func (s *engine) leaseFailed(f *flight, err error) {
	if s.fillCtx.Err() != nil {
		err = errShutdown
	} else {
		s.log.Warn("cluster: no fill lease; the upstream is not asked", "upstream", f.up.id, "path", f.relSlash,
			"err", err)
		err = &leaseError{err}
	}
	f.decide(flightFailed, err)
	f.finish(store.CacheEntry{}, nil)
}

// Scheduled jobs that run once per cluster (clusterjob): the download-count
// flush stays per node, its counts being added.
const (
	jobCollect = "collect"
	jobEvict   = "evict"
)

// jobLease takes the lease of one round of job (see clusterjob.Try).
func (s *engine) jobLease(job string) (unlock func(), run bool, err error) {
	return clusterjob.Try(s.st, job, s.met.jobSkipped, s.log)
}

// upstreamURLs remembers the url of each upstream as the last registry
// view saw it. The health tracker (upstream.Health) is keyed by upstream
// id but judges a server: when an upstream's url changes, what its
// predecessor did says nothing. The admin API forgets the health on the
// node that made the change; the other nodes of a cluster see the change
// as their views reload (the cache generation moves), and forget it here.
type upstreamURLs struct {
	mu sync.Mutex
	m  map[int64]string
}

func (u *upstreamURLs) note(h *upstream.Health, id int64, url string) {
	u.mu.Lock()
	old, seen := u.m[id]
	if !seen || old != url {
		if u.m == nil {
			u.m = map[int64]string{}
		}
		u.m[id] = url
	}
	u.mu.Unlock()
	if seen && old != url {
		h.Forget(id)
	}
}
