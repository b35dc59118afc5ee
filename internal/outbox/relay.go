// Package outbox relays the transactional outbox to NATS JetStream.
//
// Messages reach JetStream two ways, both with Nats-Msg-Id = the row's msg
// id, and a row is deleted once JetStream has acknowledged its message:
//
//   - handed off: a write that commits in a process gives its messages to
//     one of that process's relays in memory (Handoff), which publishes them
//     at once and deletes their rows in batches. Nothing is claimed or
//     marked, and the writer's commit is the only wait on the way to NATS.
//     A repeat's answer is also handed off ahead of its commit
//     (store.Message.Ahead): published, and nothing deleted for it.
//   - claimed: a relay polls for due rows nobody published — rows whose
//     hand-off grace has passed (their process died, or its relays fell
//     behind), delayed retries, rows written by a process without relays —
//     claims them in batches (FOR UPDATE SKIP LOCKED, as a lease), publishes
//     them, waits for the PubAcks and deletes them; a message NATS refuses
//     is counted and, after MaxFailures refusals, parked.
//
// The messages due at once that a statement of the hot path writes (a new
// intent's, an outcome's) are one row of outbox_batches for the whole
// statement rather than a row of outbox each (store.Message.Batch names
// it). A batch goes the same two ways, whole: it is deleted once JetStream
// has every one of its messages, and one that cannot be published whole is
// split, its unpublished messages becoming rows of outbox that are
// retried, counted and parked one by one.
//
// Any number of relays may run against one database: claims are disjoint. A
// crash between PubAck and delete only causes a re-publish (after the
// grace, or the lease), which JetStream's duplicate window or the consumers'
// ledger checks absorb.
package outbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/opledger/opledger/internal/bus"
	"github.com/opledger/opledger/internal/failpoint"
	"github.com/opledger/opledger/internal/store"
	"github.com/opledger/opledger/pkg/wire"
)

// Config tunes a relay.
type Config struct {
	// ID names this relay in claims (default "relay").
	ID string
	// BatchSize is the most rows claimed per pass (default 256).
	BatchSize int
	// Lease is how long claimed rows are reserved (default 30s).
	Lease time.Duration
	// PollInterval is the fallback when no notification arrives (default 500ms).
	PollInterval time.Duration
	// RetryDelay is how long a row waits after a failed publish (default 1s).
	RetryDelay time.Duration
	// MaxFailures parks a row after this many failed publishes that were the
	// message's own fault (too large, refused by the stream), default 5; a
	// NATS outage is not counted.
	MaxFailures int
	// PublishTimeout bounds the wait for JetStream's acknowledgements of a
	// batch (default 5s, and at most a third of Lease): rows whose publish
	// was not acknowledged by then go back to the outbox for any relay to
	// publish, instead of waiting for this relay's lease to end.
	PublishTimeout time.Duration
	// ProbeTimeout bounds the round trip to NATS that a relay makes before
	// each claim (default 1s): a relay that cannot reach NATS claims
	// nothing, and leaves the rows to relays that can.
	ProbeTimeout time.Duration
	// Handoff, when set, brings messages committed in this process
	// (Handoff.Take): the relay publishes them as they come.
	Handoff <-chan []store.Message
	// DeleteEvery spaces the statements that delete the rows of handed-off
	// messages JetStream acknowledged (default DefaultDeleteEvery): what
	// is acknowledged meanwhile waits for the next one. At a moderate load
	// each message would otherwise cost a statement and a commit of its
	// own; a row not yet deleted when the process dies is published again,
	// under its Nats-Msg-Id, once its grace has passed.
	DeleteEvery time.Duration
	// Subjects, when set, are the subject prefixes this relay publishes:
	// those its NATS user may (a service's own, app.PublishPrefixes). It
	// claims only rows on them, and leaves the others to relays that may.
	// What Handoff brings is this process's own, and always its to publish.
	Subjects []string
}

func (c *Config) setDefaults() {
	if c.ID == "" {
		c.ID = "relay"
	}
	if c.BatchSize <= 0 {
		c.BatchSize = 256
	}
	if c.Lease <= 0 {
		c.Lease = 30 * time.Second
	}
	if c.PollInterval <= 0 {
		c.PollInterval = 500 * time.Millisecond
	}
	if c.RetryDelay <= 0 {
		c.RetryDelay = time.Second
	}
	if c.MaxFailures <= 0 {
		c.MaxFailures = 5
	}
	if c.PublishTimeout <= 0 {
		c.PublishTimeout = 5 * time.Second
	}
	c.PublishTimeout = min(c.PublishTimeout, c.Lease/3)
	if c.ProbeTimeout <= 0 {
		c.ProbeTimeout = time.Second
	}
	if c.DeleteEvery <= 0 {
		c.DeleteEvery = DefaultDeleteEvery
	}
}

// DefaultDeleteEvery is Config.DeleteEvery's default. It is well inside the
// hand-off grace (store.DefaultHandoffGrace), so that the rows of published
// messages are gone long before another relay may claim them. Measured
// (docs/architecture.md): against 20ms, a fifth fewer statements per
// operation at 100 ops/s and 4-7% less Postgres CPU per operation at
// 300 ops/s, with the same latency.
const DefaultDeleteEvery = 200 * time.Millisecond

// Relay moves outbox rows to JetStream.
type Relay struct {
	cfg   Config
	store *store.Store
	bus   *bus.Bus
	log   zerolog.Logger
	// claimed and handedOff count the messages published each way.
	claimed, handedOff atomic.Int64
}

// Published returns how many messages the relay has published from rows it
// claimed and from hand-offs.
func (r *Relay) Published() (claimed, handedOff int64) {
	return r.claimed.Load(), r.handedOff.Load()
}

// New returns a relay; call Run.
func New(cfg Config, st *store.Store, b *bus.Bus, log zerolog.Logger) *Relay {
	cfg.setDefaults()
	return &Relay{cfg: cfg, store: st, bus: b, log: log.With().Str("component", "outbox-relay").Logger()}
}

// Run relays until ctx ends. It returns ctx's error.
func (r *Relay) Run(ctx context.Context) error {
	if r.cfg.Handoff != nil {
		done := make(chan struct{})
		defer func() { <-done }()
		go func() {
			defer close(done)
			r.runHandoff(ctx)
		}()
	}
	tick := time.NewTicker(r.cfg.PollInterval)
	defer tick.Stop()
	for {
		_, full, err := r.runOnce(ctx)
		if err != nil && ctx.Err() == nil {
			r.log.Warn().Err(err).Msg("relay pass failed")
		}
		if full && err == nil {
			continue // more may be waiting
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// runHandoff publishes handed-off messages until ctx ends: whatever has
// come in by the time the previous batch is acknowledged goes out as the
// next batch, and the acknowledged rows are deleted by a second goroutine,
// so that publishing never waits for Postgres. A message whose publish
// fails is left alone: its row is claimed (and its failures counted) once
// its grace has passed.
func (r *Relay) runHandoff(ctx context.Context) {
	acked := make(chan published, 64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.deleteHandedOff(ctx, acked)
	}()
	defer func() { close(acked); <-done }()
	var batch []store.Message
	for {
		batch = batch[:0]
		select {
		case <-ctx.Done():
			return
		case due := <-r.cfg.Handoff:
			batch = append(batch, due...)
		}
	more:
		for len(batch) < r.cfg.BatchSize {
			select {
			case due := <-r.cfg.Handoff:
				batch = append(batch, due...)
			default:
				break more
			}
		}
		if !r.bus.Conn().IsConnected() {
			// Disconnected (reconnecting): leave these to the claims,
			// which wait for NATS to answer, rather than buffer them.
			continue
		}
		msgs := make([]bus.Message, len(batch))
		for i, m := range batch {
			msgs[i] = bus.Message{Subject: m.Subject, MsgID: m.MsgID, Header: m.Header, Data: m.Payload}
		}
		pctx, cancel := context.WithTimeout(ctx, r.cfg.PublishTimeout)
		errs := r.bus.PublishBatch(pctx, msgs)
		cancel()
		var done published
		var failed error
		ok := 0
		// A batch (store.Message.Batch) is handed off whole, in one slice:
		// its row goes once JetStream has every one of its messages.
		whole := map[string]bool{}
		for i, err := range errs {
			m := batch[i]
			if err != nil {
				failed = cmp.Or(failed, err)
			} else {
				ok++
			}
			if m.Ahead {
				// Sent ahead of its row's commit: the row is handed off
				// (and deleted) after it.
				continue
			}
			if m.Batch == "" {
				if err == nil {
					done.msgIDs = append(done.msgIDs, m.MsgID)
				}
				continue
			}
			all, seen := whole[m.Batch]
			whole[m.Batch] = (all || !seen) && err == nil
		}
		for id, all := range whole {
			if all {
				done.batchIDs = append(done.batchIDs, id)
			}
		}
		if failed != nil && ctx.Err() == nil {
			r.log.Warn().Err(failed).Int("failed", len(batch)-ok).Int("of", len(batch)).
				Msg("publishing handed-off messages failed; their rows will be claimed")
		}
		if ok > 0 {
			r.handedOff.Add(int64(ok))
		}
		if len(done.msgIDs) > 0 || len(done.batchIDs) > 0 {
			failpoint.Hit(failpoint.RelayBeforeMark)
			acked <- done
		}
	}
}

// published is what JetStream acknowledged of handed-off messages: the
// rows of outbox by msg id, and the batches all of whose messages it has.
type published struct{ msgIDs, batchIDs []string }

// deleteHandedOff deletes the rows of acknowledged messages, as many per
// statement as have arrived, at most one round every DeleteEvery (sooner
// when 4×BatchSize are waiting), until acked is closed. The deletes run
// even after ctx ends: the messages are already in JetStream.
func (r *Relay) deleteHandedOff(ctx context.Context, acked <-chan published) {
	dctx := context.WithoutCancel(ctx)
	var last time.Time
	for p := range acked {
		// Until DeleteEvery has passed since the last round (at once when
		// it has), take what else is acknowledged.
		due := time.NewTimer(max(r.cfg.DeleteEvery-time.Since(last), 0))
	more:
		for len(p.msgIDs)+len(p.batchIDs) < 4*r.cfg.BatchSize {
			select {
			case next, ok := <-acked:
				if !ok {
					break more
				}
				p.msgIDs, p.batchIDs = append(p.msgIDs, next.msgIDs...), append(p.batchIDs, next.batchIDs...)
			case <-due.C:
				break more
			}
		}
		due.Stop()
		last = time.Now()
		if _, err := r.store.OutboxSentHandedOff(dctx, p.msgIDs, p.batchIDs); err != nil {
			// The rows stay; once their grace has passed a relay claims
			// them and publishes them again with the same msg ids: a
			// duplicate, absorbed downstream.
			r.log.Warn().Err(err).Int("rows", len(p.msgIDs)).Int("batches", len(p.batchIDs)).
				Msg("could not delete published rows; they will be published again")
		}
	}
}

// RunOnce claims one batch of rows and a few of outbox_batches, publishes
// them and deletes what JetStream acknowledged. It returns how many
// messages it published.
func (r *Relay) RunOnce(ctx context.Context) (int, error) {
	n, _, err := r.runOnce(ctx)
	return n, err
}

// runOnce is RunOnce, also saying whether it claimed as much as it may
// (more may be waiting).
func (r *Relay) runOnce(ctx context.Context) (n int, full bool, err error) {
	// Every relay sees every row (polling), whatever its own NATS
	// connection is like. One that cannot publish must not claim: its rows
	// would wait out its lease while relays that can publish stand idle.
	pctx, cancel := context.WithTimeout(ctx, r.cfg.ProbeTimeout)
	reachable := r.bus.Reachable(pctx)
	cancel()
	if !reachable {
		return 0, false, nil
	}
	rows, rowsFull, rowsErr := r.publishRows(ctx)
	batches, batchesFull, batchesErr := r.publishBatches(ctx)
	return rows + batches, rowsFull || batchesFull, errors.Join(rowsErr, batchesErr)
}

// batchesPerPass bounds the batches one pass claims: a batch holds the
// messages of up to a group statement's writes (two each, or so), and
// several hundred of them make a publish as large as BatchSize rows do.
func (r *Relay) batchesPerPass() int { return max(1, r.cfg.BatchSize/32) }

// publishBatches claims due rows of outbox_batches, publishes their
// messages, deletes the batches JetStream acknowledged whole and splits the
// others (store.OutboxSplitBatch): their unacknowledged messages become
// rows of outbox, retried, counted and parked one by one.
func (r *Relay) publishBatches(ctx context.Context) (int, bool, error) {
	claimed, err := r.store.OutboxClaimBatches(ctx, r.cfg.ID, r.cfg.Subjects, r.batchesPerPass(), r.cfg.Lease)
	if err != nil || len(claimed) == 0 {
		return 0, false, err
	}
	var msgs []bus.Message
	for _, b := range claimed {
		for _, m := range b.Messages {
			msgs = append(msgs, bus.Message{Subject: m.Subject, MsgID: m.MsgID, Header: m.Header, Data: m.Payload})
		}
	}
	pctx, cancel := context.WithTimeout(ctx, r.cfg.PublishTimeout)
	errs := r.bus.PublishBatch(pctx, msgs)
	cancel()
	mctx := context.WithoutCancel(ctx)
	var whole []string
	var errs2 []error
	sent, i := 0, 0
	for _, b := range claimed {
		sp := store.Split{Relay: r.cfg.ID, BatchID: b.ID, Delay: r.cfg.RetryDelay}
		var cause error
		for _, m := range b.Messages {
			err := errs[i]
			i++
			if err == nil {
				sent++
				continue
			}
			cause = cmp.Or(cause, err)
			refused := bus.MessageFault(err)
			if refused {
				r.log.Warn().Err(err).Str("msg_id", m.MsgID).Str("operation_id", m.OperationID).Int("bytes", len(m.Payload)).
					Msg("NATS refused the message itself; it will be parked after repeated refusals")
			}
			sp.Unsent = append(sp.Unsent, m.MsgID)
			if refused {
				sp.Refused = append(sp.Refused, m.MsgID)
			}
		}
		if len(sp.Unsent) == 0 {
			whole = append(whole, b.ID)
			continue
		}
		sp.Reason = shortErr(cause)
		if _, err := r.store.OutboxSplitBatch(mctx, sp); err != nil {
			errs2 = append(errs2, err)
		}
		errs2 = append(errs2, fmt.Errorf("publish failed for %d of the %d messages of batch %s, which were put back one by one: %w",
			len(sp.Unsent), len(b.Messages), b.ID, cause))
	}
	if sent > 0 {
		r.claimed.Add(int64(sent))
		failpoint.Hit(failpoint.RelayBeforeMark)
	}
	if len(whole) > 0 {
		if _, err := r.store.OutboxBatchesSent(mctx, r.cfg.ID, whole); err != nil {
			// The batches stay claimed until the lease ends, then are
			// published again with the same msg ids: duplicates, absorbed
			// downstream.
			errs2 = append(errs2, fmt.Errorf("delete %d published batches: %w", len(whole), err))
		}
	}
	return sent, len(claimed) == r.batchesPerPass(), errors.Join(errs2...)
}

// publishRows claims one batch of rows of outbox, publishes it and deletes
// what JetStream acknowledged.
func (r *Relay) publishRows(ctx context.Context) (int, bool, error) {
	claimed, err := r.store.OutboxClaimSubjects(ctx, r.cfg.ID, r.cfg.Subjects, r.cfg.BatchSize, r.cfg.Lease)
	if err != nil || len(claimed) == 0 {
		return 0, false, err
	}
	msgs := make([]bus.Message, len(claimed))
	for i, c := range claimed {
		msgs[i] = bus.Message{Subject: c.Message.Subject, MsgID: c.Message.MsgID, Header: c.Message.Header, Data: c.Message.Payload}
	}
	// A connection lost after the probe must not hold the rows for the
	// whole lease either.
	pctx, cancel := context.WithTimeout(ctx, r.cfg.PublishTimeout)
	errs := r.bus.PublishBatch(pctx, msgs)
	cancel()
	var sent, transport, refused []int64
	var transportErr, refusedErr error
	for i, c := range claimed {
		switch err := errs[i]; {
		case err == nil:
			sent = append(sent, c.ID)
		case bus.MessageFault(err):
			refused = append(refused, c.ID)
			refusedErr = cmp.Or(refusedErr, err)
			r.log.Warn().Err(err).Str("msg_id", c.Message.MsgID).Str("operation_id", c.Message.OperationID).
				Int("bytes", len(c.Message.Payload)).Msg("NATS refused the message itself; it will be parked after repeated refusals")
		default:
			transport = append(transport, c.ID)
			transportErr = cmp.Or(transportErr, err)
		}
	}
	if len(sent) > 0 {
		r.claimed.Add(int64(len(sent)))
		failpoint.Hit(failpoint.RelayBeforeMark)
	}
	// Deleting runs even if ctx ended: the messages are already in JetStream.
	mctx := context.WithoutCancel(ctx)
	var errs2 []error
	if len(sent) > 0 {
		if _, err := r.store.OutboxSent(mctx, r.cfg.ID, sent); err != nil {
			// Rows stay claimed until the lease ends, then are re-published with
			// the same msg id: a duplicate, absorbed downstream.
			errs2 = append(errs2, fmt.Errorf("delete %d published rows: %w", len(sent), err))
		}
	}
	if len(transport) > 0 {
		if bus.StreamMissing(transportErr) {
			// A NATS server that lost its store: put the streams back so that
			// these rows, and the re-drive, have somewhere to go.
			if err := r.bus.EnsureStreams(mctx, bus.StreamOptions{}); err != nil {
				errs2 = append(errs2, err)
			} else {
				r.log.Warn().Msg("streams were missing on the NATS server; recreated them")
			}
		}
		if err := r.store.OutboxRelease(mctx, store.Release{Relay: r.cfg.ID, IDs: transport, Delay: r.cfg.RetryDelay,
			Reason: shortErr(transportErr)}); err != nil {
			errs2 = append(errs2, err)
		}
		errs2 = append(errs2, fmt.Errorf("publish failed for %d of %d rows: %w", len(transport), len(claimed), transportErr))
	}
	if len(refused) > 0 {
		if err := r.store.OutboxRelease(mctx, store.Release{Relay: r.cfg.ID, IDs: refused, Delay: r.cfg.RetryDelay,
			Reason: shortErr(refusedErr), MessageFault: true, MaxFailures: r.cfg.MaxFailures}); err != nil {
			errs2 = append(errs2, err)
		}
		errs2 = append(errs2, fmt.Errorf("NATS refused %d of %d rows: %w", len(refused), len(claimed), refusedErr))
	}
	return len(sent), len(claimed) == r.cfg.BatchSize, errors.Join(errs2...)
}

func shortErr(err error) string {
	return wire.Clip200(err.Error())
}
