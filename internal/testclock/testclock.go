// Package testclock is a clock a test sets by hand, to stand in for the
// database's clock (store.Options.Clock, pipetest.Options.Clock): leases,
// deadlines and retention expire when the test says, without waiting.
package testclock

import (
	"sync"
	"time"
)

// Clock is safe for concurrent use: services read it while the test moves it.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// New returns a clock that reads start until it is advanced.
func New(start time.Time) *Clock { return &Clock{now: start} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}
