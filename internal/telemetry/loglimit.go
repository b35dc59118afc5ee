package telemetry

import (
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// LogLimit bounds how many lines of one kind a process writes: at most
// Burst a Period, the rest held back and counted. A line of a kind that
// anyone outside can cause at will (a refused intent, a refused token)
// would otherwise let a flood of requests become a flood of log lines; the
// kind's metric still counts every one. The first line let through after
// some were held back carries how many (Allow's second result), so the log
// says what it left out.
//
// A nil *LogLimit lets every line through.
type LogLimit struct {
	burst  int
	period time.Duration
	now    func() time.Time

	mu      sync.Mutex
	start   time.Time // of the current period
	written int       // lines let through in it
	held    int       // lines held back since the last one let through
}

// NewLogLimit lets through at most burst lines a period (burst at least 1,
// period at least a millisecond).
func NewLogLimit(burst int, period time.Duration) *LogLimit {
	return &LogLimit{burst: max(burst, 1), period: max(period, time.Millisecond), now: time.Now}
}

// Allow reports whether a line may be written now and, if so, how many
// were held back since the last one that was.
func (l *LogLimit) Allow() (ok bool, held int) {
	if l == nil {
		return true, 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if now.Sub(l.start) >= l.period || now.Before(l.start) {
		l.start, l.written = now, 0
	}
	if l.written >= l.burst {
		l.held++
		return false, 0
	}
	l.written++
	held, l.held = l.held, 0
	return true, held
}

// Event starts a line with newEvent (a logger's Warn, say) when one may be
// written now, with heldField saying how many were held back before it; it
// returns nil when the line is held back, on which zerolog's methods do
// nothing.
func (l *LogLimit) Event(newEvent func() *zerolog.Event, heldField string) *zerolog.Event {
	ok, held := l.Allow()
	if !ok {
		return nil
	}
	ev := newEvent()
	if held > 0 {
		ev = ev.Int(heldField, held)
	}
	return ev
}
