package telemetry

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A flood gets Burst lines a period; the rest are counted, and the first
// line of the next period says how many were left out.
func TestLogLimit(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	now := t0
	l := NewLogLimit(3, time.Second)
	l.now = func() time.Time { return now }

	for i := range 3 {
		ok, held := l.Allow()
		require.True(t, ok, i)
		require.Zero(t, held, i)
	}
	for i := range 1000 {
		ok, _ := l.Allow()
		require.False(t, ok, i)
	}
	now = t0.Add(999 * time.Millisecond)
	ok, _ := l.Allow()
	require.False(t, ok, "still the same period")

	now = t0.Add(time.Second)
	ok, held := l.Allow()
	require.True(t, ok)
	require.Equal(t, 1001, held, "the first line of the next period carries the count")
	ok, held = l.Allow()
	require.True(t, ok)
	require.Zero(t, held, "counted once")

	// A clock stepped back starts a new period rather than holding every
	// line until it catches up.
	now = t0
	ok, _ = l.Allow()
	require.True(t, ok)
}

func TestLogLimitNilAllowsAll(t *testing.T) {
	var l *LogLimit
	for range 10 {
		ok, held := l.Allow()
		require.True(t, ok)
		require.Zero(t, held)
	}
}

func TestLogLimitBounds(t *testing.T) {
	l := NewLogLimit(0, 0)
	require.Equal(t, 1, l.burst)
	require.Equal(t, time.Millisecond, l.period)
}
