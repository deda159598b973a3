package main

import (
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestDBProbe(t *testing.T) {
	var calls atomic.Int32
	var mu sync.Mutex
	answer := error(nil)
	block := make(chan struct{})
	close(block)
	clock := time.Unix(0, 0)
	p := &dbProbe{
		check: func() error {
			calls.Add(1)
			<-block
			mu.Lock()
			defer mu.Unlock()
			return answer
		},
		ttl: time.Second, timeout: 50 * time.Millisecond,
		now: func() time.Time { mu.Lock(); defer mu.Unlock(); return clock },
	}
	advance := func(d time.Duration) { mu.Lock(); clock = clock.Add(d); mu.Unlock() }

	if err := p.Err(); err != nil {
		t.Fatalf("a database that answers: %v", err)
	}
	// Within the ttl the answer is reused: no second query.
	p.Err()
	if calls.Load() != 1 {
		t.Fatalf("%d checks within the ttl, want 1", calls.Load())
	}

	mu.Lock()
	answer = errors.New("connection refused")
	mu.Unlock()
	advance(time.Second)
	if err := p.Err(); err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("a database that is down: %v", err)
	}

	// A check that hangs: the caller gets an answer after the timeout, and
	// no second check starts while it hangs.
	block = make(chan struct{})
	advance(time.Second)
	before := calls.Load()
	if err := p.Err(); err == nil || !strings.Contains(err.Error(), "did not answer within") {
		t.Fatalf("a hung database: %v", err)
	}
	advance(time.Second)
	if err := p.Err(); err == nil {
		t.Fatal("still hung: want an error")
	}
	if calls.Load() != before+1 {
		t.Fatalf("%d checks started while one hung, want 1", calls.Load()-before)
	}
	mu.Lock()
	answer = nil
	mu.Unlock()
	close(block)
	// The hung check returns; once it has, the next call sees the database back.
	deadline := time.Now().Add(5 * time.Second)
	for {
		advance(time.Second)
		if p.Err() == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the probe never saw the database come back")
		}
		time.Sleep(time.Millisecond)
	}
}
