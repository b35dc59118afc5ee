package benchkit

import (
	"context"
	"math"
	mrand "math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/pkg/op"
)

func TestRunIDsDiffer(t *testing.T) {
	t.Parallel()
	now := time.Now()
	a, b := RunID(now), RunID(now)
	require.NotEqual(t, a, b, "two runs started in the same second")
	require.True(t, strings.HasPrefix(a, "r"))
	require.Regexp(t, `^r[0-9a-z]+$`, a)
}

// IDAt makes ids of op.NewID's shape, sorting by the time given.
func TestIDAt(t *testing.T) {
	t.Parallel()
	rng := mrand.New(mrand.NewPCG(1, 2))
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	id := IDAt("op", at, rng)
	real := op.NewID("op")
	require.Len(t, id, len(real))
	require.True(t, IsID(id), id)
	require.True(t, IsID(real), real)
	require.Less(t, id, real, "an id of 2026-01-02 sorts before one of now")
	require.Less(t, id, IDAt("op", at.Add(time.Millisecond), rng))
	require.NotEqual(t, id, IDAt("op", at, rng), "the random part differs")
	require.False(t, IsID("op_123"))
	require.False(t, IsID("wf_"+strings.Repeat("I", 26)), "I is not a ULID digit")
}

func TestFindIDs(t *testing.T) {
	t.Parallel()
	a, b := op.NewID("op"), op.NewID("att")
	s := `{"operation_id":"` + a + `","attempt":"` + b + `"} ` + a + ":v3"
	require.Equal(t, []string{a, b}, FindIDs(s))
	require.Empty(t, FindIDs("payment:order_1:capture:100:USD:v1"))
}

func TestSummarize(t *testing.T) {
	t.Parallel()
	var xs []time.Duration
	for i := 100; i >= 1; i-- {
		xs = append(xs, time.Duration(i)*time.Millisecond)
	}
	d := Summarize(xs)
	require.Equal(t, Dist{N: 100, P50: 50, P90: 90, P99: 99, Max: 100, Mean: 50.5}, d)
	require.Equal(t, Dist{}, Summarize(nil))
	require.Equal(t, 7*time.Millisecond, Quantile([]time.Duration{7 * time.Millisecond}, .99))
}

// A schedule holds about rate × duration arrivals, all inside the
// duration, in order; uniform ones are evenly spaced, and a seed repeats.
func TestSchedule(t *testing.T) {
	t.Parallel()
	u := Schedule(Uniform, 100, time.Second, 1)
	require.Len(t, u, 99) // 10ms … 990ms
	require.Equal(t, 10*time.Millisecond, u[0])
	require.Equal(t, 10*time.Millisecond, u[1]-u[0])
	p := Schedule(Poisson, 1000, 10*time.Second, 7)
	require.InDelta(t, 10000, len(p), 400)
	require.IsIncreasing(t, p)
	require.Less(t, p[len(p)-1], 10*time.Second)
	require.Equal(t, p, Schedule(Poisson, 1000, 10*time.Second, 7))
	require.Empty(t, Schedule(Poisson, 0, time.Second, 1))
	require.True(t, Poisson.Valid())
	require.False(t, Arrivals("bursty").Valid())
}

func TestRatio(t *testing.T) {
	t.Parallel()
	first, last, r := Ratio([]float64{1, 1, 1, 2, 2, 2})
	require.Equal(t, []float64{1, 2, 2}, []float64{first, last, r})
	_, _, r = Ratio([]float64{5})
	require.Equal(t, 1.0, r)
	_, _, r = Ratio([]float64{0, 0, 3})
	require.True(t, math.IsInf(r, 1))
	_, _, r = Ratio(nil)
	require.Equal(t, 1.0, r)
}

func TestIDTime(t *testing.T) {
	t.Parallel()
	at := time.UnixMilli(time.Now().UnixMilli())
	got, ok := IDTime(IDAt("att", at, mrand.New(mrand.NewPCG(3, 4))))
	require.True(t, ok)
	require.True(t, at.Equal(got), "%s != %s", at, got)
	before := time.Now().Add(-time.Millisecond)
	got, ok = IDTime(op.NewID("op"))
	require.True(t, ok)
	require.WithinDuration(t, before, got, time.Second)
	_, ok = IDTime("payment:x")
	require.False(t, ok)
}

// OpenLoop fires every arrival at its time without waiting for earlier
// ones to return, and waits for all of them.
func TestOpenLoop(t *testing.T) {
	t.Parallel()
	sched := Schedule(Uniform, 200, 100*time.Millisecond, 1) // every 5ms
	release := make(chan struct{})
	var mu sync.Mutex
	var fired []int
	var dues []time.Time
	go func() {
		// Every call blocks until all have been fired: a closed loop
		// would deadlock here.
		for {
			mu.Lock()
			n := len(fired)
			mu.Unlock()
			if n == len(sched) {
				close(release)
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	start := time.Now()
	_, err := OpenLoop(t.Context(), sched, func(i int, due time.Time) {
		mu.Lock()
		fired, dues = append(fired, i), append(dues, due)
		mu.Unlock()
		<-release
	})
	require.NoError(t, err)
	require.Len(t, fired, len(sched))
	slices.Sort(fired)
	require.Equal(t, len(sched)-1, fired[len(fired)-1])
	for _, d := range dues {
		require.False(t, d.Before(start))
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err = OpenLoop(ctx, Schedule(Uniform, 10, time.Second, 1), func(int, time.Time) {})
	require.ErrorIs(t, err, context.Canceled)
}
