package store

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
	g.mu.Lock()
	g.running += g.statements
	g.mu.Unlock()
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
