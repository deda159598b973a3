// Package fakecluster is an in-memory kv.Cluster for tests: a Broker shared
// by fake nodes delivers every published message to every subscribed node
// (in order, from one goroutine per node, as the contract says), can inject
// a possible loss (fn(nil)), and keeps cluster-wide locks that a test may
// also hold on behalf of "another node" to see what waits for them.
package fakecluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"registryd/store/kv"
)

// ErrDown is what a node's Publish, Lock and TryLock return while the test
// has set them to fail; it wraps kv.ErrUnavailable, as an engine's would.
var ErrDown = fmt.Errorf("fakecluster: down: %w", kv.ErrUnavailable)

// Broker connects the nodes of one fake cluster.
type Broker struct {
	mu      sync.Mutex
	nodes   []*Node
	holders map[string]string // lock key -> holder name
	waiting map[string]int    // lock key -> Lock calls waiting for it
	changed chan struct{}     // closed and replaced whenever a lock is released
	closed  bool
}

// New returns an empty broker; Node adds nodes.
func New() *Broker {
	return &Broker{holders: map[string]string{}, waiting: map[string]int{}, changed: make(chan struct{})}
}

// Node is one registryd node's view of the cluster: it implements
// kv.Cluster.
type Node struct {
	b    *Broker
	name string

	mu         sync.Mutex
	fn         func([]byte)
	queue      [][]byte
	has        chan struct{} // signalled when the queue gains a message
	publishErr error
	lockErr    error
	published  int
	delivered  int
}

var _ kv.Cluster = (*Node)(nil)

// Node returns a new node named name (lock holders are named by it).
func (b *Broker) Node(name string) *Node {
	n := &Node{b: b, name: name, has: make(chan struct{}, 1)}
	b.mu.Lock()
	b.nodes = append(b.nodes, n)
	b.mu.Unlock()
	return n
}

// Close stops every node's delivery.
func (b *Broker) Close() {
	b.mu.Lock()
	b.closed = true
	nodes := b.nodes
	b.mu.Unlock()
	for _, n := range nodes {
		n.signal()
	}
}

func (b *Broker) isClosed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.closed
}

// Broadcast delivers msg to every subscribed node, as if a node outside
// the test had published it.
func (b *Broker) Broadcast(msg []byte) {
	b.mu.Lock()
	nodes := b.nodes
	b.mu.Unlock()
	for _, n := range nodes {
		n.enqueue(append([]byte(nil), msg...))
	}
}

// Hold takes the lock named key for holder (a node outside the test),
// waiting while it is taken; release gives it back (safe to call twice).
func (b *Broker) Hold(key, holder string) (release func()) {
	unlock, err := b.lock(context.Background(), key, holder, true)
	if err != nil {
		panic(err)
	}
	return unlock
}

// Holder names who holds the lock named key ("" when free).
func (b *Broker) Holder(key string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.holders[key]
}

// Waiting counts the Lock calls waiting for the lock named key.
func (b *Broker) Waiting(key string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.waiting[key]
}

func (b *Broker) lock(ctx context.Context, key, holder string, wait bool) (func(), error) {
	b.mu.Lock()
	counted := false
	defer func() {
		if counted {
			b.waiting[key]--
		}
		b.mu.Unlock()
	}()
	for {
		if _, taken := b.holders[key]; !taken {
			b.holders[key] = holder
			var once sync.Once
			return func() {
				once.Do(func() {
					b.mu.Lock()
					delete(b.holders, key)
					close(b.changed)
					b.changed = make(chan struct{})
					b.mu.Unlock()
				})
			}, nil
		}
		if !wait {
			return nil, nil
		}
		if !counted {
			counted = true
			b.waiting[key]++
		}
		ch := b.changed
		b.mu.Unlock()
		select {
		case <-ch:
			b.mu.Lock()
		case <-ctx.Done():
			b.mu.Lock()
			return nil, ctx.Err()
		}
	}
}

// FailPublish makes the node's Publish return ErrDown (true) or succeed.
func (n *Node) FailPublish(fail bool) {
	n.mu.Lock()
	n.publishErr = nil
	if fail {
		n.publishErr = ErrDown
	}
	n.mu.Unlock()
}

// FailLocks makes the node's Lock and TryLock return ErrDown (true) or work.
func (n *Node) FailLocks(fail bool) {
	n.mu.Lock()
	n.lockErr = nil
	if fail {
		n.lockErr = ErrDown
	}
	n.mu.Unlock()
}

// Lost delivers fn(nil) to this node: messages may have been lost.
func (n *Node) Lost() { n.enqueue(nil) }

// Published counts the node's successful Publish calls.
func (n *Node) Published() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.published
}

// Delivered counts the messages (fn(nil) included) handed to the node's
// subscriber so far.
func (n *Node) Delivered() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.delivered
}

// Publish implements kv.Cluster.
func (n *Node) Publish(ctx context.Context, msg []byte) error {
	if len(msg) > 7900 {
		return errors.New("fakecluster: message longer than 7900 bytes")
	}
	n.mu.Lock()
	err := n.publishErr
	if err == nil {
		n.published++
	}
	n.mu.Unlock()
	if err != nil {
		return err
	}
	n.b.Broadcast(msg)
	return nil
}

// Subscribe implements kv.Cluster; interval is ignored (Lost injects what a
// re-check would find).
func (n *Node) Subscribe(fn func(msg []byte), _ time.Duration) {
	n.mu.Lock()
	n.fn = fn
	n.mu.Unlock()
	go n.deliver()
}

func (n *Node) enqueue(msg []byte) {
	n.mu.Lock()
	if n.fn == nil {
		n.mu.Unlock()
		return
	}
	n.queue = append(n.queue, msg)
	n.mu.Unlock()
	n.signal()
}

func (n *Node) signal() {
	select {
	case n.has <- struct{}{}:
	default:
	}
}

func (n *Node) deliver() {
	for {
		<-n.has
		for {
			if n.b.isClosed() {
				return
			}
			n.mu.Lock()
			if len(n.queue) == 0 {
				n.mu.Unlock()
				break
			}
			msg := n.queue[0]
			n.queue = n.queue[1:]
			fn := n.fn
			n.mu.Unlock()
			fn(msg)
			n.mu.Lock()
			n.delivered++
			n.mu.Unlock()
		}
	}
}

// Lock implements kv.Cluster.
func (n *Node) Lock(ctx context.Context, key string) (func(), error) {
	n.mu.Lock()
	err := n.lockErr
	n.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return n.b.lock(ctx, key, n.name, true)
}

// TryLock implements kv.Cluster.
func (n *Node) TryLock(ctx context.Context, key string) (func(), bool, error) {
	n.mu.Lock()
	err := n.lockErr
	n.mu.Unlock()
	if err != nil {
		return nil, false, err
	}
	unlock, err := n.b.lock(ctx, key, n.name, false)
	return unlock, unlock != nil, err
}
