package ingest

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/opledger/opledger/internal/telemetry"
)

// DefaultMaxBacklog is Config.MaxBacklog's default: about a second of work
// for a fleet that completes a couple of thousand operations a second, and
// many times what one dispatcher pulls ahead of its workers. Measured in
// docs/architecture.md: under overload, a bound of 2,000 kept the ledger's
// unsettled operations near it and completed more per second than no bound.
const DefaultMaxBacklog = 2000

// DefaultHoldFor is Config.HoldFor's default.
const DefaultHoldFor = 2 * time.Second

// DefaultBacklogEvery is Config.BacklogEvery's default.
const DefaultBacklogEvery = 100 * time.Millisecond

// admission holds new intents while the dispatch backlog (commands no
// dispatcher has taken yet, fleet-wide) is over a bound, so that under
// overload the excess waits in the INTENTS stream, where it costs nothing,
// instead of as operations in the ledger that every claim, outcome and
// maintenance scan then works around. It only delays: an intent is held at
// most holdFor and then goes in anyway, and a backlog that cannot be read
// (NATS unreachable, no dispatcher consumer yet) holds nothing.
type admission struct {
	max     uint64
	holdFor time.Duration
	every   time.Duration
	read    func(ctx context.Context) (uint64, error)
	m       *telemetry.Metrics
	log     zerolog.Logger

	// mu guards open, which the handlers read; the rest is run's alone.
	mu sync.Mutex
	// open is closed while intents are admitted; a fresh one is made when
	// the backlog goes over the bound, and closed when it falls again.
	open    chan struct{}
	readErr bool // the last read failed with something other than "no consumer"
	// logged is when the gate's last change was logged at Info: a backlog
	// hovering at the bound changes it every read, and the log says so at
	// most once a minute (the rest at Debug; the metrics count every hold).
	logged time.Time
}

func newAdmission(max int, holdFor, every time.Duration, read func(context.Context) (uint64, error), m *telemetry.Metrics, log zerolog.Logger) *admission {
	a := &admission{max: uint64(max), holdFor: holdFor, every: every, read: read, m: m, log: log, open: make(chan struct{})}
	close(a.open)
	return a
}

// run reads the backlog every a.every until ctx ends.
func (a *admission) run(ctx context.Context) {
	t := time.NewTicker(a.every)
	defer t.Stop()
	for {
		a.poll(ctx)
		select {
		case <-ctx.Done():
			a.set(0, false) // release whoever is held
			return
		case <-t.C:
		}
	}
}

// poll reads the backlog once and opens or closes the gate.
func (a *admission) poll(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, max(a.every, time.Second))
	n, err := a.read(rctx)
	cancel()
	if err != nil {
		// No consumer or stream yet means no dispatcher has started: nothing
		// to say. Anything else is said once, until a read succeeds again.
		absent := errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrStreamNotFound)
		if !absent && !a.readErr && ctx.Err() == nil {
			a.log.Warn().Err(err).Msg("cannot read the dispatch backlog; admitting every intent until it can be read")
		}
		a.readErr = !absent
		a.set(0, false)
		return
	}
	if a.readErr {
		a.log.Info().Uint64("backlog", n).Msg("the dispatch backlog can be read again")
		a.readErr = false
	}
	a.m.DispatchBacklog(n)
	a.set(n, true)
}

// set opens the gate, or closes it when backlog is known and over the bound.
func (a *admission) set(backlog uint64, known bool) {
	over := known && backlog > a.max
	a.mu.Lock()
	defer a.mu.Unlock()
	select {
	case <-a.open:
		if over {
			a.open = make(chan struct{})
			a.gateLog().Uint64("backlog", backlog).Uint64("max_backlog", a.max).
				Msg("dispatch backlog over its bound; holding new intents in their stream")
		}
	default:
		if !over {
			close(a.open)
			a.gateLog().Uint64("backlog", backlog).Bool("known", known).Msg("admitting intents again")
		}
	}
}

// gateLog is the event a change of the gate is logged with.
func (a *admission) gateLog() *zerolog.Event {
	if time.Since(a.logged) < time.Minute {
		return a.log.Debug()
	}
	a.logged = time.Now()
	return a.log.Info()
}

// wait returns at once while intents are admitted; otherwise when they are
// again, when the hold's bound passes, or when ctx ends.
func (a *admission) wait(ctx context.Context) {
	a.mu.Lock()
	open := a.open
	a.mu.Unlock()
	select {
	case <-open:
		return
	default:
	}
	t := time.NewTimer(a.holdFor)
	defer t.Stop()
	select {
	case <-open:
		a.m.IntentHeld(false)
	case <-t.C:
		a.m.IntentHeld(true)
	case <-ctx.Done():
	}
}
