package store

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"log/slog"
	"sync"
	"time"

	"registryd/store/kv"
)

// Several registryd nodes on one engine (kv.Cluster) keep their in-memory
// views of the index right without talking to each other: every view is
// keyed to a generation of this package (AuthGeneration, CacheGeneration,
// ForgetEpoch per upstream) or woken by CollectWanted, and after each
// commit the node that made it bumps its own generations at once (as a
// single node does) and publishes one small message saying which of them
// moved. Every other node's subscriber bumps the same generations when the
// message arrives; a possible loss (the engine's fn(nil): a reconnect, or
// its periodic re-check found a gap) bumps them all. A message never
// carries data: a view reloads from the index, which is the one truth, so
// a late or duplicated message costs a reload, never a wrong answer.

// change is what one or more commits moved: the message's content.
type change struct {
	auth, cache, work bool
	forgetAll         bool
	forget            []int64 // upstreams whose forget epochs moved
}

func (c *change) empty() bool {
	return !c.auth && !c.cache && !c.work && !c.forgetAll && len(c.forget) == 0
}

func (c *change) merge(o change) {
	c.auth = c.auth || o.auth
	c.cache = c.cache || o.cache
	c.work = c.work || o.work
	c.forgetAll = c.forgetAll || o.forgetAll
	if c.forgetAll {
		c.forget = nil
		return
	}
	for _, id := range o.forget {
		if !containsID(c.forget, id) {
			c.forget = append(c.forget, id)
		}
	}
}

func containsID(ids []int64, id int64) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

// The message: a version byte, the publishing node's id (8 bytes, random
// per Open: a node ignores its own messages, having bumped at commit), a
// flags byte, then the upstream ids of forget epochs as uvarints. A list
// that would pass maxMessage becomes forgetAll.
const (
	msgVersion = 1
	msgHeader  = 1 + 8 + 1
	// maxMessage stays under kv.Cluster's 7900 bytes.
	maxMessage = 7800

	flagAuth      = 1 << 0
	flagCache     = 1 << 1
	flagWork      = 1 << 2
	flagForgetAll = 1 << 3
)

func encodeChange(node uint64, c change) []byte {
	msg := make([]byte, msgHeader, msgHeader+len(c.forget)*3)
	msg[0] = msgVersion
	binary.BigEndian.PutUint64(msg[1:9], node)
	var flags byte
	if c.auth {
		flags |= flagAuth
	}
	if c.cache {
		flags |= flagCache
	}
	if c.work {
		flags |= flagWork
	}
	if !c.forgetAll {
		for _, id := range c.forget {
			if len(msg)+binary.MaxVarintLen64 > maxMessage {
				c.forgetAll = true
				msg = msg[:msgHeader]
				break
			}
			msg = binary.AppendUvarint(msg, uint64(id))
		}
	}
	if c.forgetAll {
		flags |= flagForgetAll
	}
	msg[9] = flags
	return msg
}

// decodeChange reads a message; ok is false for one this version does not
// know (a newer node's), which the caller treats as "everything changed".
func decodeChange(msg []byte) (node uint64, c change, ok bool) {
	if len(msg) < msgHeader || msg[0] != msgVersion {
		return 0, change{}, false
	}
	node = binary.BigEndian.Uint64(msg[1:9])
	flags := msg[9]
	c = change{auth: flags&flagAuth != 0, cache: flags&flagCache != 0, work: flags&flagWork != 0,
		forgetAll: flags&flagForgetAll != 0}
	for rest := msg[msgHeader:]; len(rest) > 0; {
		id, n := binary.Uvarint(rest)
		if n <= 0 {
			return node, change{}, false
		}
		c.forget = append(c.forget, int64(id))
		rest = rest[n:]
	}
	return node, c, true
}

// clusterState is the store's part in a cluster; nil on a single node.
type clusterState struct {
	c    kv.Cluster
	node uint64
	log  *slog.Logger

	mu      sync.Mutex
	pending change
	failing bool // the last publish failed (logged once per outage)

	kick     chan struct{} // buffer 1: pending has something
	stop     chan struct{}
	done     chan struct{}
	stopOnce sync.Once
}

// Publish retry bounds: a failed publish keeps its change pending (merged
// with later ones) and is tried again, so that the other nodes learn of a
// commit once the engine is back even if its re-check would not notice a
// message that was never sent.
const (
	publishTimeout    = 5 * time.Second
	publishRetryFirst = 100 * time.Millisecond
	publishRetryMax   = 2 * time.Second
)

// joinCluster subscribes s to c and starts its publisher.
func (s *Store) joinCluster(c kv.Cluster, log *slog.Logger) error {
	var id [8]byte
	if _, err := rand.Read(id[:]); err != nil {
		return err
	}
	cs := &clusterState{c: c, node: binary.BigEndian.Uint64(id[:]), log: log,
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	s.cluster = cs
	s.forget.publish = func(ids []int64) { cs.add(change{forget: ids}) }
	c.Subscribe(s.received, 0)
	go cs.publisher()
	return nil
}

// leaveCluster publishes what is pending (one try) and stops the publisher.
func (s *Store) leaveCluster() {
	if s.cluster == nil {
		return
	}
	s.cluster.stopOnce.Do(func() { close(s.cluster.stop) })
	<-s.cluster.done
}

// committed bumps this node's generations after a commit that changed
// what auth, cache or work say (see update) and, on a cluster, queues the
// message for the other nodes. It never waits for the message, and a
// failed publish never fails the commit, which is done.
func (s *Store) committed(auth, cache, work bool) {
	if auth {
		s.authGen.Add(1)
	}
	if cache {
		s.cacheGen.Add(1)
	}
	if work {
		s.wakeCollector()
	}
	if s.cluster != nil && (auth || cache || work) {
		s.cluster.add(change{auth: auth, cache: cache, work: work})
	}
}

func (s *Store) wakeCollector() {
	select {
	case s.collect <- struct{}{}:
	default:
	}
}

// received is the subscriber: another node's change, or nil (messages may
// have been lost: everything is stale).
func (s *Store) received(msg []byte) {
	node, c, ok := decodeChange(msg)
	if ok && node == s.cluster.node {
		return // bumped at commit
	}
	if msg == nil || !ok {
		c = change{auth: true, cache: true, work: true, forgetAll: true}
	}
	if c.auth {
		s.authGen.Add(1)
	}
	if c.cache {
		s.cacheGen.Add(1)
	}
	if c.forgetAll {
		s.forget.bumpAll()
	} else if len(c.forget) > 0 {
		s.forget.bumpLocal(c.forget...)
	}
	if c.work {
		s.wakeCollector()
	}
}

func (cs *clusterState) add(c change) {
	cs.mu.Lock()
	cs.pending.merge(c)
	cs.mu.Unlock()
	select {
	case cs.kick <- struct{}{}:
	default:
	}
}

// publisher sends the pending change, merged from every commit since the
// last message, so that a burst of fills makes a few messages, not one
// per fill.
func (cs *clusterState) publisher() {
	defer close(cs.done)
	retry := time.Duration(0)
	for {
		if retry == 0 {
			select {
			case <-cs.kick:
			case <-cs.stop:
				cs.flush()
				return
			}
		} else {
			t := time.NewTimer(retry)
			select {
			case <-t.C:
			case <-cs.stop:
				t.Stop()
				cs.flush()
				return
			}
		}
		if cs.flush() {
			retry = 0
		} else {
			retry = min(max(2*retry, publishRetryFirst), publishRetryMax)
		}
	}
}

// flush publishes the pending change; false when that failed (the change
// stays pending).
func (cs *clusterState) flush() bool {
	cs.mu.Lock()
	c := cs.pending
	cs.pending = change{}
	cs.mu.Unlock()
	if c.empty() {
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), publishTimeout)
	err := cs.c.Publish(ctx, encodeChange(cs.node, c))
	cancel()
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if err != nil {
		c.merge(cs.pending)
		cs.pending = c
		if !cs.failing {
			cs.failing = true
			cs.log.Warn("cluster: publishing a change to the other nodes failed; retrying (the commit stands; logged once until it works again)",
				"err", err)
		}
		return false
	}
	if cs.failing {
		cs.failing = false
		cs.log.Info("cluster: publishing changes to the other nodes works again")
	}
	return true
}

// Clustered reports whether the store shares its engine with other nodes.
func (s *Store) Clustered() bool { return s.cluster != nil }

// noUnlock is the unlock of a lease on a single node.
func noUnlock() {}

// Lease takes the cluster-wide lease named key, waiting until it is free or
// ctx ends; unlock gives it back (safe to call more than once). A node that
// dies loses its leases at once (the engine's lock is its connection's). On
// a single node it is granted at once: the process's own locks (the proxy's
// flights, the jobs' loops) are the only ones needed there. An error means
// the engine is unavailable (it wraps kv.ErrUnavailable) or ctx ended.
func (s *Store) Lease(ctx context.Context, key string) (unlock func(), err error) {
	if s.cluster == nil {
		return noUnlock, nil
	}
	return s.cluster.c.Lock(ctx, key)
}

// TryLease takes the cluster-wide lease named key when no node holds it;
// ok is false when one does. On a single node it is always granted.
func (s *Store) TryLease(ctx context.Context, key string) (unlock func(), ok bool, err error) {
	if s.cluster == nil {
		return noUnlock, true, nil
	}
	unlock, ok, err = s.cluster.c.TryLock(ctx, key)
	if !ok || err != nil {
		return noUnlock, false, err
	}
	return unlock, true, nil
}
