package vendors

import (
	"context"
	"sync"
)

// inflight counts the vendor requests being handled.
type inflight struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed while n is 0
}

func (f *inflight) begin() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n == 0 {
		f.idle = make(chan struct{})
	}
	f.n++
}

func (f *inflight) end() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n--; f.n == 0 {
		close(f.idle)
	}
}

// WaitIdle waits until the server handles no request: every request it was
// sent has been applied, refused or dropped, including a slow one whose
// client gave up long ago. Tests count effects after it, so that an effect
// still on its way is counted too. It returns ctx's error if ctx ends first.
func (s *Server) WaitIdle(ctx context.Context) error {
	s.busy.mu.Lock()
	if s.busy.n == 0 {
		s.busy.mu.Unlock()
		return nil
	}
	idle := s.busy.idle
	s.busy.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
