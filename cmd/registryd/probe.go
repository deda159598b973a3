package main

import (
	"fmt"
	"sync"
	"time"

	"registryd/store/kv"
)

// dbProbe tells /-/readiness whether the shared index database answers. A
// node whose database is away can serve no miss and no admin request, so a
// load balancer should send its clients elsewhere; the answer says why.
//
// One cheap read transaction runs at most every ttl (load balancers poll
// often, and every node polls the same database), and a caller waits for it
// at most timeout: a probe still running then counts as a failure, and no
// second one starts until it returns, so a hung connection does not pile up
// goroutines.
type dbProbe struct {
	check        func() error
	ttl, timeout time.Duration
	now          func() time.Time

	mu      sync.Mutex
	at      time.Time // when last was found; zero: never
	last    error
	running chan struct{} // closed when the check under way returns; nil: none
}

// newDBProbe probes db with a read of one key of the meta bucket.
func newDBProbe(db kv.DB) *dbProbe {
	return &dbProbe{
		check: func() error {
			err := db.View(func(tx kv.Tx) error {
				if b := tx.Bucket([]byte("meta")); b != nil {
					b.Get([]byte("schema_version"))
				}
				return nil
			})
			if err != nil {
				return fmt.Errorf("the index database (%s) is unavailable: %w", db.Describe(), err)
			}
			return nil
		},
		ttl: time.Second, timeout: 2 * time.Second, now: time.Now,
	}
}

// Err is nil when the database answered within the last ttl, else why not.
func (p *dbProbe) Err() error {
	p.mu.Lock()
	if !p.at.IsZero() && p.now().Sub(p.at) < p.ttl {
		err := p.last
		p.mu.Unlock()
		return err
	}
	done := p.running
	if done == nil {
		done = make(chan struct{})
		p.running = done
		go func() {
			err := p.check()
			p.mu.Lock()
			p.last, p.at, p.running = err, p.now(), nil
			p.mu.Unlock()
			close(done)
		}()
	}
	p.mu.Unlock()
	t := time.NewTimer(p.timeout)
	defer t.Stop()
	select {
	case <-done:
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.last
	case <-t.C:
		err := fmt.Errorf("the index database did not answer within %s", p.timeout)
		p.mu.Lock()
		p.last, p.at = err, p.now()
		p.mu.Unlock()
		return err
	}
}
