package store

import "time"

// RepeatLookups is how many repeats s answered after reading the ledger
// with OperationRepeatLookup, instead of with what OperationSubmitNew read.
func RepeatLookups(s *Store) int64 { return s.repeatLookups.Load() }

// HoldGroup stops s's group commit from starting statements, so that a
// test can queue submissions and see them written together; Queued says
// how many wait, and release lets them go.
func HoldGroup(s *Store) (queued func() int, release func()) {
	return hold(s.submits)
}

// HoldOutcomes is HoldGroup for outcomes.
func HoldOutcomes(s *Store) (queued func() int, release func()) {
	return hold(s.outcomes)
}

// HoldClaims is HoldGroup for leased claims.
func HoldClaims(s *Store) (queued func() int, release func()) {
	return hold(s.claims)
}

func hold[T any](g *group[T]) (queued func() int, release func()) {
	// A write just answered leaves its drain to exit a moment later; held
	// while it still runs, that drain would take the next write queued
	// and run it alone. So wait for every drain to end.
	deadline := time.Now().Add(10 * time.Second)
	for {
		g.mu.Lock()
		if g.running == 0 {
			g.running = g.statements
			g.mu.Unlock()
			break
		}
		g.mu.Unlock()
		if time.Now().After(deadline) {
			panic("store: a group statement still runs after 10s; cannot hold the group")
		}
		time.Sleep(time.Millisecond)
	}
	queued = func() int {
		g.mu.Lock()
		defer g.mu.Unlock()
		return len(g.queue)
	}
	release = func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		g.running -= g.statements
		for g.running < g.statements {
			g.running++
			go g.drain()
		}
	}
	return queued, release
}
