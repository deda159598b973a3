// Package testclock is the clock tests inject where a component takes a
// `Now func() time.Time` (store, auth, upstream health, cleanup, proxy,
// admin): it stands still until the test moves it, so expiry, freshness and
// schedules are tested without sleeping. It is safe for concurrent use: the
// component reads it from its own goroutines while the test moves it.
package testclock

import (
	"sync"
	"time"
)

// Clock is a hand-moved clock. Its zero value stands at the zero time; New
// sets where it starts.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// New is a clock standing at t.
func New(t time.Time) *Clock { return &Clock{t: t} }

// Now is where the clock stands; pass the method value (c.Now) as the
// component's clock.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock by d (back when d is negative).
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// Set puts the clock at t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}
