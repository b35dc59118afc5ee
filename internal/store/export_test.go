package store

// HoldGroup stops s's group commit from starting statements, so that a
// test can queue submissions and see them written together; Queued says
// how many wait, and release lets them go.
func HoldGroup(s *Store) (queued func() int, release func()) {
	g := s.group
	g.mu.Lock()
	g.running += groupStatements
	g.mu.Unlock()
	queued = func() int {
		g.mu.Lock()
		defer g.mu.Unlock()
		return len(g.queue)
	}
	release = func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		g.running -= groupStatements
		for g.running < groupStatements {
			g.running++
			go g.drain()
		}
	}
	return queued, release
}
