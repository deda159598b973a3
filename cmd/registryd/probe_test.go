package main

import (
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"registryd/internal/testclock"
)

func TestDBProbe(t *testing.T) {
	var calls atomic.Int32
	var mu sync.Mutex
	answer := error(nil)
	block := make(chan struct{})
	close(block)
	clock := testclock.New(time.Unix(0, 0))
	p := &dbProbe{
		check: func() error {
			calls.Add(1)
			<-block
			mu.Lock()
			defer mu.Unlock()
			return answer
		},
		ttl: time.Second, timeout: 50 * time.Millisecond,
		now: clock.Now,
	}

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
	clock.Advance(time.Second)
	if err := p.Err(); err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("a database that is down: %v", err)
	}

	// A check that hangs: the caller gets an answer after the timeout, and
	// no second check starts while it hangs.
	block = make(chan struct{})
	clock.Advance(time.Second)
	before := calls.Load()
	if err := p.Err(); err == nil || !strings.Contains(err.Error(), "did not answer within") {
		t.Fatalf("a hung database: %v", err)
	}
	clock.Advance(time.Second)
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
		clock.Advance(time.Second)
		if p.Err() == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the probe never saw the database come back")
		}
		time.Sleep(time.Millisecond)
	}
}
