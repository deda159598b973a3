package blob

import (
	"context"
	"fmt"
	"sync"
)

// keyedLocks is a mutex per digest (created on demand), taken under a ctx.
type keyedLocks struct {
	mu sync.Mutex
	m  map[string]*keyedLock
}

type keyedLock struct {
	ch   chan struct{} // holds one token while locked
	refs int
}

func (k *keyedLocks) acquire(sha string) *keyedLock {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.m == nil {
		k.m = map[string]*keyedLock{}
	}
	l := k.m[sha]
	if l == nil {
		l = &keyedLock{ch: make(chan struct{}, 1)}
		k.m[sha] = l
	}
	l.refs++
	return l
}

func (k *keyedLocks) drop(sha string, l *keyedLock) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if l.refs--; l.refs == 0 {
		delete(k.m, sha)
	}
}

func (k *keyedLocks) lock(ctx context.Context, sha string) (func(), error) {
	l := k.acquire(sha)
	select {
	case l.ch <- struct{}{}:
		return func() { <-l.ch; k.drop(sha, l) }, nil
	case <-ctx.Done():
		k.drop(sha, l)
		return nil, fmt.Errorf("blobs: waiting for the lock of %s: %w", sha, ctx.Err())
	}
}

func (k *keyedLocks) tryLock(sha string) (func(), bool) {
	l := k.acquire(sha)
	select {
	case l.ch <- struct{}{}:
		return func() { <-l.ch; k.drop(sha, l) }, true
	default:
		k.drop(sha, l)
		return nil, false
	}
}
