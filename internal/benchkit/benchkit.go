// Package benchkit holds the parts of "opledger bench" that do no I/O: run
// ids, latency distributions, open-loop arrival schedules, and the verdict
// of a steady run (did a figure stay flat between its first and last
// intervals).
package benchkit

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"math"
	mrand "math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// RunID returns a short identifier for one bench run, used as the prefix of
// every workflow id, event id and business key the run makes, so that runs
// against the same database never meet each other's operations: "r", the
// start time in base 36 (seconds), and 4 random hex digits, e.g.
// "rt3k9qa1f2c". It sorts by start time to the second.
func RunID(now time.Time) string {
	var b [2]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never returns an error
	return "r" + strconv.FormatInt(now.Unix(), 36) + hex.EncodeToString(b[:])
}

// crockford is the alphabet of ULIDs (and of op.NewID).
const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// IDAt returns prefix + "_" + a ULID-shaped id whose time part is at (the
// same shape as op.NewID, which always uses the current time): 48 bits of
// milliseconds, then 80 bits from rng. A preloaded ledger gets ids that sort
// by their rows' creation times, as the pipeline's do.
func IDAt(prefix string, at time.Time, rng *mrand.Rand) string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(at.UnixMilli())<<16)
	binary.BigEndian.PutUint64(b[8:], rng.Uint64())
	binary.BigEndian.PutUint16(b[6:8], uint16(rng.Uint32()))
	hi := binary.BigEndian.Uint64(b[:8])
	lo := binary.BigEndian.Uint64(b[8:])
	out := make([]byte, len(prefix)+1+26)
	copy(out, prefix)
	out[len(prefix)] = '_'
	d := out[len(prefix)+1:]
	for i := 25; i >= 0; i-- {
		d[i] = crockford[lo&31]
		lo = lo>>5 | hi<<59
		hi >>= 5
	}
	return string(out)
}

// idShape is what IDAt and op.NewID produce: a lowercase prefix, "_", and
// 26 ULID digits, standing alone.
var idShape = regexp.MustCompile(`\b[a-z]+_[0-9A-HJKMNP-TV-Z]{26}\b`)

// IsID reports whether s has the shape IDAt and op.NewID produce.
func IsID(s string) bool {
	loc := idShape.FindStringIndex(s)
	return loc != nil && loc[0] == 0 && loc[1] == len(s)
}

// FindIDs returns the distinct ULID-shaped ids (see IsID) inside s, in the
// order they first appear.
func FindIDs(s string) []string {
	var out []string
	for _, id := range idShape.FindAllString(s, -1) {
		if !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out
}

// Dist summarises a latency sample. Durations are in the JSON output as
// milliseconds (the *_ms fields).
type Dist struct {
	N    int     `json:"n"`
	P50  float64 `json:"p50_ms"`
	P90  float64 `json:"p90_ms"`
	P99  float64 `json:"p99_ms"`
	Max  float64 `json:"max_ms"`
	Mean float64 `json:"mean_ms"`
}

// Summarize returns the distribution of xs (which it sorts). Quantiles are
// nearest-rank: p99 of 100 samples is the 99th smallest.
func Summarize(xs []time.Duration) Dist {
	if len(xs) == 0 {
		return Dist{}
	}
	slices.Sort(xs)
	var sum time.Duration
	for _, x := range xs {
		sum += x
	}
	return Dist{N: len(xs), P50: ms(Quantile(xs, .5)), P90: ms(Quantile(xs, .9)), P99: ms(Quantile(xs, .99)),
		Max: ms(xs[len(xs)-1]), Mean: ms(sum / time.Duration(len(xs)))}
}

// Quantile returns the nearest-rank q-quantile of sorted xs (0 when empty).
func Quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func ms(d time.Duration) float64 { return math.Round(float64(d)/1e3) / 1e3 }

// Arrivals is how an open-loop schedule spaces its arrivals.
type Arrivals string

const (
	// Poisson arrivals: exponentially distributed gaps with mean 1/rate, as
	// independent callers produce; bursts included.
	Poisson Arrivals = "poisson"
	// Uniform arrivals: evenly spaced, one every 1/rate.
	Uniform Arrivals = "uniform"
)

// Valid reports whether a is a known pattern.
func (a Arrivals) Valid() bool { return a == Poisson || a == Uniform }

// Schedule returns the arrival offsets from the start of an open-loop run
// at rate per second for d: every offset is below d. seed makes it
// repeatable.
func Schedule(a Arrivals, rate float64, d time.Duration, seed uint64) []time.Duration {
	if rate <= 0 || d <= 0 {
		return nil
	}
	rng := mrand.New(mrand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	mean := float64(time.Second) / rate
	out := make([]time.Duration, 0, int(rate*d.Seconds())+1)
	var at float64
	for {
		gap := mean
		if a == Poisson {
			gap = rng.ExpFloat64() * mean
		}
		at += gap
		if time.Duration(at) >= d {
			return out
		}
		out = append(out, time.Duration(at))
	}
}

// Ratio returns last/first, comparing the mean of the last k values of xs
// with the mean of its first k, k a third of len(xs) (at least 1). With one
// value it is 1; it is +Inf when the first mean is 0 and the last is not.
func Ratio(xs []float64) (first, last, ratio float64) {
	if len(xs) == 0 {
		return 0, 0, 1
	}
	k := max(len(xs)/3, 1)
	mean := func(v []float64) float64 {
		s := 0.0
		for _, x := range v {
			s += x
		}
		return s / float64(len(v))
	}
	first, last = mean(xs[:k]), mean(xs[len(xs)-k:])
	switch {
	case first == 0 && last == 0:
		return first, last, 1
	case first == 0:
		return first, last, math.Inf(1)
	}
	return first, last, last / first
}

// IDTime returns the time part of a ULID-shaped id (see IsID), to the
// millisecond; ok is false when id has not that shape.
func IDTime(id string) (t time.Time, ok bool) {
	if !IsID(id) {
		return time.Time{}, false
	}
	d := id[len(id)-26:]
	var ms uint64
	for i := range 10 { // the first 10 digits hold 50 bits: 2 zero bits, then 48 of time
		ms = ms<<5 | uint64(strings.IndexByte(crockford, d[i]))
	}
	return time.UnixMilli(int64(ms)), true
}

// OpenLoop calls fire once per offset of schedule, at start + offset, each
// call in a goroutine of its own, whether or not earlier calls have
// returned (an open loop: arrivals do not wait for answers, as independent
// callers do not), and waits for every call to return. fire gets the time
// it was due, from which latency is to be measured: a generator that falls
// behind then counts against the system, not in its favour. It returns how
// late the latest call was fired; when ctx ends, it fires no more and
// returns ctx's error after the fired calls have returned.
func OpenLoop(ctx context.Context, schedule []time.Duration, fire func(i int, due time.Time)) (maxLate time.Duration, err error) {
	var wg sync.WaitGroup
	defer wg.Wait()
	start := time.Now()
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	for i, off := range schedule {
		due := start.Add(off)
		if wait := time.Until(due); wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-ctx.Done():
				return maxLate, ctx.Err()
			}
		}
		maxLate = max(maxLate, time.Since(due))
		wg.Go(func() { fire(i, due) })
	}
	return maxLate, nil
}
