// Package maintain is the maintenance leader: the background work that keeps
// every operation moving and the ledger's size flat, run by one elected
// instance at a time (whoever holds the store's advisory lock, as River
// elects its queue maintainer) while any number of reconcilers run.
//
//   - The sweeper fences off attempts whose dispatcher died or hangs: an
//     operation in dispatched past its attempt's deadline (plus grace) on
//     the database's clock, whatever its attempts say, becomes
//     unknown_outcome at a new lease epoch, its attempt is marked finished,
//     and the reconciler asks the vendor. It also keeps the parked-rows
//     gauge current.
//   - The re-drive pass writes the command again for operations waiting on
//     one that was lost after it was published (a NATS server that lost its
//     store, a terminated message). A command's subject names its operation
//     and the OPS stream keeps one message per subject, so re-drives never
//     multiply commands. When the OPS stream is found recreated (its
//     creation time, kept in the ledger, changed), every waiting operation
//     is re-driven at once.
//   - Retention deletes published outbox rows, rejected inbox rows and the
//     reconciler's lookup counters of episodes that are over after their
//     periods.
//   - The webhook pass looks again at held webhook evidence that is due
//     (internal/evidence): it settles the operation it names once it can,
//     and flags it (with an alert) when its hold runs out.
//
// Each task loops until a batch comes back short, up to a cap per pass;
// a pass that hits the cap is counted and logged, never silent.
package maintain

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/opledger/opledger/internal/evidence"
	"github.com/opledger/opledger/internal/followup"
	"github.com/opledger/opledger/internal/outbox"
	"github.com/opledger/opledger/internal/store"
	"github.com/opledger/opledger/internal/telemetry"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/registry"
	"github.com/opledger/opledger/pkg/wire"
)

// Config tunes maintenance. Zero values take the defaults.
type Config struct {
	// Name identifies this instance in maintenance_leader and event rows.
	Name string
	// ElectInterval is how often a follower tries to become leader and the
	// leader shows it is alive (default 2s).
	ElectInterval time.Duration
	// SweepInterval is how often the sweeper runs (default 1s).
	SweepInterval time.Duration
	// StrandInterval is how often the sweeper also looks for operations in
	// dispatched that no unfinished attempt holds (default 5s), through the
	// index of unsettled operations; the other query reads open attempts.
	StrandInterval time.Duration
	// DispatchedGrace is added to an attempt's deadline before it counts as
	// stuck (default 5s).
	DispatchedGrace time.Duration
	// RedriveAfter is how long an operation may wait on a command, on the
	// database's clock, with nothing in the outbox to move it before its
	// command is written again (default 2m).
	RedriveAfter time.Duration
	// RedriveInterval is how often the re-drive pass runs (default 30s).
	RedriveInterval time.Duration
	// RetentionInterval is how often retention runs (default 1m).
	RetentionInterval time.Duration
	// RejectedRetention keeps rejected inbox rows this long (default 7 days).
	RejectedRetention time.Duration
	// LookupRetention keeps the reconciler's lookup counters of episodes
	// that are over this long (default 1h).
	LookupRetention time.Duration
	// Batch is the rows per statement (default 500); MaxBatches caps the
	// batches of one task per pass (default 20).
	Batch, MaxBatches int
	// Evidence, when set, runs the webhook pass with the sweeper: held
	// webhook evidence is settled, or flagged once its hold runs out.
	Evidence *evidence.Settler
}

func (c *Config) setDefaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	if c.Name == "" {
		c.Name = "maintainer"
	}
	def(&c.ElectInterval, 2*time.Second)
	def(&c.SweepInterval, time.Second)
	def(&c.StrandInterval, 5*time.Second)
	def(&c.DispatchedGrace, 5*time.Second)
	def(&c.RedriveAfter, 2*time.Minute)
	def(&c.RedriveInterval, 30*time.Second)
	def(&c.RetentionInterval, time.Minute)
	def(&c.RejectedRetention, 7*24*time.Hour)
	def(&c.LookupRetention, time.Hour)
	if c.Batch <= 0 {
		c.Batch = 500
	}
	if c.MaxBatches <= 0 {
		c.MaxBatches = 20
	}
}

// StreamWatch returns when the OPS stream was created on the NATS server
// (bus.StreamCreated); nil skips the watch.
type StreamWatch func(ctx context.Context) (time.Time, error)

// Maintainer runs maintenance while it leads.
type Maintainer struct {
	cfg   Config
	store *store.Store
	reg   *registry.Registry
	watch StreamWatch
	m     *telemetry.Metrics
	log   zerolog.Logger

	mu       sync.Mutex
	redriven map[string]time.Time // operation id → when this leader last re-drove it (host clock, local pacing only)
	stranded time.Time            // when the sweeper last looked for stranded operations (host clock, local pacing only)

	// Passes, when set, receives the name of each task after each pass
	// (tests wait on it instead of sleeping).
	Passes chan<- string
}

// New returns a maintainer; call Start.
func New(cfg Config, st *store.Store, reg *registry.Registry, watch StreamWatch, m *telemetry.Metrics, log zerolog.Logger) *Maintainer {
	cfg.setDefaults()
	return &Maintainer{cfg: cfg, store: st, reg: reg, watch: watch, m: m, log: log.With().Str("component", "maintenance").Logger(),
		redriven: map[string]time.Time{}}
}

// Start campaigns for leadership and, while leading, runs the tasks, until
// the returned stop is called or ctx ends.
func (mt *Maintainer) Start(ctx context.Context) (stop func(), err error) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		mt.campaign(ctx)
	}()
	return func() { cancel(); <-done }, nil
}

func (mt *Maintainer) campaign(ctx context.Context) {
	t := time.NewTicker(mt.cfg.ElectInterval)
	defer t.Stop()
	for {
		l, err := mt.store.TryLead(ctx, mt.cfg.Name, leaseTTL*mt.cfg.ElectInterval)
		switch {
		case err != nil && ctx.Err() == nil:
			mt.log.Warn().Err(err).Msg("could not campaign for maintenance leadership")
		case l != nil:
			mt.log.Info().Msg("elected maintenance leader")
			mt.m.Leader(true)
			mt.lead(ctx, l)
			mt.m.Leader(false)
			// Only the leader reports parked rows: a former leader's count
			// would go stale.
			mt.m.Parked(0)
			l.Release()
			if ctx.Err() == nil {
				mt.log.Warn().Msg("lost maintenance leadership")
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// leaseTTL is how many election intervals the lock outlives a silent
// holder (see store.TryLead): a few missed heartbeats, not one.
const leaseTTL = 5

// lead runs the tasks until ctx ends or the lock's connection fails.
func (mt *Maintainer) lead(ctx context.Context, l *store.Leadership) {
	ctx, cancel := context.WithCancel(ctx)
	// The heartbeat runs on its own: a task stuck on a statement that
	// hangs (a database cut off, a pass of up to a minute) must neither
	// delay it past the lock's TTL, which would let the server end the
	// session under a leader still at work, nor keep this instance
	// believing it leads once the lock is gone. When a heartbeat fails,
	// the tasks are cancelled.
	beating := make(chan struct{})
	go func() {
		defer close(beating)
		defer cancel()
		elect := time.NewTicker(mt.cfg.ElectInterval)
		defer elect.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-elect.C:
			}
			hctx, hcancel := context.WithTimeout(ctx, mt.cfg.ElectInterval)
			err := l.Heartbeat(hctx)
			hcancel()
			if err != nil {
				if ctx.Err() == nil {
					mt.log.Warn().Err(err).Msg("maintenance leader heartbeat failed; stepping down")
				}
				return
			}
		}
	}()
	defer func() {
		cancel()
		<-beating
	}()
	sweep := time.NewTicker(mt.cfg.SweepInterval)
	redrive := time.NewTicker(mt.cfg.RedriveInterval)
	retain := time.NewTicker(mt.cfg.RetentionInterval)
	defer sweep.Stop()
	defer redrive.Stop()
	defer retain.Stop()
	mt.runTask(ctx, "sweep", mt.Sweep)
	mt.runTask(ctx, "parked", mt.CountParked)
	mt.runTask(ctx, "redrive", mt.redriveTask)
	for {
		select {
		case <-ctx.Done():
			return
		case <-sweep.C:
			mt.runTask(ctx, "sweep", mt.Sweep)
			mt.runTask(ctx, "approvals", mt.ExpireApprovals)
			mt.runTask(ctx, "webhooks", mt.SettleHeld)
			mt.runTask(ctx, "parked", mt.CountParked)
		case <-redrive.C:
			mt.runTask(ctx, "redrive", mt.redriveTask)
		case <-retain.C:
			mt.runTask(ctx, "retention", mt.Retain)
		}
	}
}

func (mt *Maintainer) runTask(ctx context.Context, name string, task func(context.Context) (int, error)) {
	// A pass has a timeout of its own: a hung statement must not stall the
	// leader's other tasks forever.
	tctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if _, err := task(tctx); err != nil && ctx.Err() == nil {
		mt.log.Warn().Err(err).Str("task", name).Msg("maintenance pass failed")
	}
	if mt.Passes != nil {
		select {
		case mt.Passes <- name:
		default:
		}
	}
}

// Sweep fences off every operation in dispatched past its attempt's
// deadline plus grace, whatever its attempts say: dispatched →
// unknown_outcome at a new lease epoch (a late dispatcher's write is
// refused), the attempt finished as swept, a reconcile command and a result
// to the agent, in one statement each. Operations whose attempt is still
// open are found through the open attempts every pass; those no unfinished
// attempt holds (it finished, yet the operation never moved; or there is
// none) through the index of unsettled operations, every StrandInterval.
// It returns how many it moved.
func (mt *Maintainer) Sweep(ctx context.Context) (int, error) {
	moved, err := mt.sweepStuck(ctx)
	if err != nil {
		return moved, err
	}
	mt.mu.Lock()
	due := time.Since(mt.stranded) >= mt.cfg.StrandInterval
	if due {
		mt.stranded = time.Now()
	}
	mt.mu.Unlock()
	if !due {
		return moved, nil
	}
	n, err := mt.SweepStranded(ctx)
	return moved + n, err
}

func (mt *Maintainer) sweepStuck(ctx context.Context) (int, error) {
	moved := 0
	for range mt.cfg.MaxBatches {
		stuck, err := mt.store.OperationsStuckDispatched(ctx, mt.cfg.DispatchedGrace, mt.cfg.Batch)
		if err != nil {
			return moved, err
		}
		for _, s := range stuck {
			ok, err := mt.fence(ctx, s.Operation, s.AttemptID,
				fmt.Sprintf("no outcome recorded by the attempt's deadline (%s) plus %s", s.DeadlineAt.UTC().Format(time.RFC3339Nano), mt.cfg.DispatchedGrace))
			if err != nil {
				return moved, err
			}
			if ok {
				moved++
			}
		}
		if len(stuck) < mt.cfg.Batch {
			mt.m.Maintained("sweep", moved)
			return moved, nil
		}
	}
	mt.m.Maintained("sweep", moved)
	mt.m.Capped("sweep")
	mt.log.Warn().Int("moved", moved).Msg("sweeper stopped at its cap with more stuck operations waiting; it goes on at its next pass")
	return moved, nil
}

// SweepStranded fences off operations in dispatched that no unfinished
// attempt at their lease epoch holds, once the deadline of their latest
// attempt (or, without one, the time they entered dispatched) plus grace
// has passed on the database's clock, looping until a batch comes back
// short (up to the cap). It returns how many it moved.
func (mt *Maintainer) SweepStranded(ctx context.Context) (int, error) {
	moved := 0
	for range mt.cfg.MaxBatches {
		stranded, err := mt.store.OperationsDispatchedUnclaimed(ctx, mt.cfg.DispatchedGrace, mt.cfg.Batch)
		if err != nil {
			return moved, err
		}
		for _, o := range stranded {
			ok, err := mt.fence(ctx, o, "", "in dispatched with no unfinished attempt, past the attempt's deadline")
			if err != nil {
				return moved, err
			}
			if ok {
				moved++
			}
		}
		if len(stranded) < mt.cfg.Batch {
			mt.m.Maintained("strand", moved)
			return moved, nil
		}
	}
	mt.m.Maintained("strand", moved)
	mt.m.Capped("strand")
	mt.log.Warn().Int("moved", moved).Msg("sweeper stopped at its cap with more stranded operations waiting; it goes on at its next pass")
	return moved, nil
}

// fence moves one stuck operation to unknown_outcome. It reports whether it
// did (false: the operation moved on by itself).
func (mt *Maintainer) fence(ctx context.Context, o *op.Operation, attemptID, why string) (bool, error) {
	tp := telemetry.FromTraceID(o.TraceID)
	plan, err := followup.Decide(mt.tool(o), o, followup.Outcome{Event: op.EventOutcomeUnknown, ErrorCategory: "stuck", Error: why,
		Reason: "no answer was recorded in time; the vendor will be asked before anything is sent again"}, o.OriginEventID, tp)
	if err != nil {
		return false, err
	}
	c := plan.Change(o, mt.cfg.Name+"/sweeper", map[string]any{"reason": why})
	c.BumpEpoch = true
	if attemptID != "" {
		c.AttemptID = attemptID
		c.Finish = &op.Attempt{ID: attemptID, Outcome: op.OutcomeUnknown, ErrorCategory: "swept", Error: why}
	}
	_, err = plan.Write(ctx, mt.store, c)
	var stale *op.StaleError
	if errors.As(err, &stale) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	mt.log.Warn().Str("operation_id", o.ID).Str("tool", o.Tool).Str("idempotency_key", o.IdempotencyKey).
		Str("attempt_id", attemptID).Str("state_transition", "dispatched->unknown_outcome").Str("reason", why).Msg("swept stuck operation")
	return true, nil
}

// SettleHeld looks again at every held webhook evidence that is due (each
// is looked at with backoff): it applies it when its operation can be
// settled, confirms or flags it when its operation already settled, and
// flags it with an alert when its hold ran out. It returns how many it
// decided.
func (mt *Maintainer) SettleHeld(ctx context.Context) (int, error) {
	if mt.cfg.Evidence == nil {
		return 0, nil
	}
	n := 0
	for range mt.cfg.MaxBatches {
		due, err := mt.store.DueEvidence(ctx, mt.cfg.Batch)
		if err != nil {
			return n, err
		}
		for _, e := range due {
			d, err := mt.cfg.Evidence.SettleIn(ctx, mt.store, e)
			if err != nil {
				return n, err
			}
			if d.Status != "" && d.Status != store.EvidenceHeld {
				n++
			}
		}
		if len(due) < mt.cfg.Batch {
			mt.m.Maintained("webhooks", n)
			return n, nil
		}
	}
	mt.m.Maintained("webhooks", n)
	mt.m.Capped("webhooks")
	mt.log.Warn().Int("decided", n).Msg("webhook pass stopped at its cap with more held evidence due; it goes on at its next pass")
	return n, nil
}

// ExpireApprovals cancels operations whose approval request expired on the
// database's clock: nothing was sent, and the agent is told. It returns how
// many it cancelled.
func (mt *Maintainer) ExpireApprovals(ctx context.Context) (int, error) {
	n := 0
	for range mt.cfg.MaxBatches {
		ids, err := mt.store.ExpiredApprovals(ctx, mt.cfg.Batch)
		if err != nil {
			return n, err
		}
		for _, id := range ids {
			err := mt.store.InTx(ctx, func(tx *store.Tx) error {
				req, err := tx.LockApproval(ctx, id)
				if err != nil || req.Status != "pending" || !req.Expired {
					return err
				}
				o, err := tx.Operation(ctx, id)
				if err != nil {
					return err
				}
				if err := tx.CloseApproval(ctx, id, "expired"); err != nil {
					return err
				}
				if o.State != op.StateAwaitingApproval {
					return nil
				}
				why := fmt.Sprintf("the approval request expired at %s without enough approvals (%d of %d); nothing was done",
					req.ExpiresAt.UTC().Format(time.RFC3339), len(req.Votes), req.Required)
				tp := telemetry.FromTraceID(o.TraceID)
				cur, err := tx.Transition(ctx, store.Change{OperationID: o.ID, From: o.State, LeaseEpoch: o.LeaseEpoch,
					Events: []op.Event{op.EventCancel}, Actor: mt.cfg.Name, Operation: o, ErrorCategory: "approval_expired", Error: why,
					Detail: map[string]string{"reason": why},
					Outbox: func(after *op.Operation) []store.Message {
						r := wire.ResultFor(after, after.OriginEventID, op.DecisionNew)
						r.Reason = why
						return []store.Message{outbox.Result(r, tp)}
					}})
				if err != nil {
					return err
				}
				// An expired compensation hands its original back.
				if err := followup.WithdrawCompensation(ctx, tx, cur, mt.cfg.Name, "its approval request expired"); err != nil {
					return err
				}
				n++
				mt.log.Warn().Str("operation_id", o.ID).Str("tool", o.Tool).Msg("approval expired; operation cancelled")
				return nil
			})
			var stale *op.StaleError
			if err != nil && !errors.As(err, &stale) {
				return n, err
			}
		}
		if len(ids) < mt.cfg.Batch {
			break
		}
	}
	mt.m.Maintained("approvals", n)
	return n, nil
}

// tool returns o's tool, or a stand-in with the default retry policy when
// this instance's registry lacks it (the sweeper's decisions need no more).
func (mt *Maintainer) tool(o *op.Operation) *registry.Tool {
	if t, err := mt.reg.Tool(o.Tool); err == nil {
		return t
	}
	return &registry.Tool{Name: o.Tool, Retry: registry.RetryPolicy{MaxAttempts: 1}}
}

// redriveTask is the periodic re-drive: it re-drives everything at once
// when the OPS stream was recreated since a leader last looked. The
// creation time a leader saw is kept in the ledger (maintenance_leader), so
// that a leader elected after the NATS server lost its store still sees
// the change.
func (mt *Maintainer) redriveTask(ctx context.Context) (int, error) {
	after := mt.cfg.RedriveAfter
	if recreated, err := mt.opsRecreated(ctx); err != nil {
		mt.log.Warn().Err(err).Msg("cannot tell whether the OPS stream was recreated; re-driving on schedule only")
	} else if recreated {
		mt.mu.Lock()
		clear(mt.redriven)
		mt.mu.Unlock()
		after = 0
	}
	return mt.Redrive(ctx, after)
}

// opsRecreated reads the OPS stream's creation time, compares it with the
// one recorded in the ledger and records it when it changed. It reports
// whether the stream was created again since it was first recorded.
func (mt *Maintainer) opsRecreated(ctx context.Context) (bool, error) {
	if mt.watch == nil {
		return false, nil
	}
	created, err := mt.watch(ctx)
	if err != nil {
		return false, fmt.Errorf("read the OPS stream: %w", err)
	}
	created = created.UTC().Truncate(time.Microsecond) // as timestamptz keeps it
	seen, err := mt.store.OpsStreamCreated(ctx)
	if err != nil {
		return false, err
	}
	if seen.Equal(created) {
		return false, nil
	}
	if err := mt.store.SetOpsStreamCreated(ctx, created); err != nil {
		return false, err
	}
	if seen.IsZero() {
		return false, nil // the first look: nothing to compare with
	}
	mt.log.Warn().Time("created", created).Time("before", seen).
		Msg("the OPS stream was recreated (the NATS server lost its store); re-driving every waiting operation")
	return true, nil
}

// Redrive writes the command again for every operation waiting longer than
// olderThan (on the database's clock) in pending_dispatch, unknown_outcome or
// acknowledged with nothing in the outbox to move it (and, for a reconcile
// command, whose next lookup is overdue by as long: one the reconciler is
// only holding back is alive). An operation it re-drove is not re-driven
// again by this leader for RedriveAfter. The OPS stream keeps one message
// per subject, and a command's subject names its operation, so writing one
// again never multiplies it. It loops until a batch comes back short, up to
// the cap, and returns how many operations it re-drove.
func (mt *Maintainer) Redrive(ctx context.Context, olderThan time.Duration) (int, error) {
	now := time.Now()
	mt.mu.Lock()
	for id, at := range mt.redriven {
		if now.Sub(at) >= mt.cfg.RedriveAfter {
			delete(mt.redriven, id)
		}
	}
	mt.mu.Unlock()
	redriven := 0
	var last *op.Operation
	for range mt.cfg.MaxBatches {
		ops, err := mt.store.OperationsUnattended(ctx, olderThan, last, mt.cfg.Batch)
		if err != nil {
			return redriven, err
		}
		if len(ops) > 0 {
			last = ops[len(ops)-1]
		}
		var todo []*op.Operation
		mt.mu.Lock()
		for _, o := range ops {
			if _, done := mt.redriven[o.ID]; !done {
				todo = append(todo, o)
			}
		}
		mt.mu.Unlock()
		for _, o := range todo {
			kind := wire.KindUnknown
			if o.State == op.StatePendingDispatch {
				kind = wire.KindDispatch
			}
			err := mt.store.InTx(ctx, func(tx *store.Tx) error {
				return tx.Enqueue(ctx, outbox.Command(kind, o, o.OriginEventID, telemetry.FromTraceID(o.TraceID), 0))
			})
			if err != nil {
				return redriven, err
			}
			mt.mu.Lock()
			mt.redriven[o.ID] = now
			mt.mu.Unlock()
			redriven++
			mt.m.Redriven(kind, o.Tool)
			mt.log.Warn().Str("operation_id", o.ID).Str("tool", o.Tool).Str("idempotency_key", o.IdempotencyKey).
				Str("state", string(o.State)).Time("updated_at", o.UpdatedAt).Msg("command lost after publish; written again")
		}
		if len(ops) < mt.cfg.Batch {
			mt.m.Maintained("redrive", redriven)
			return redriven, nil
		}
	}
	mt.m.Maintained("redrive", redriven)
	mt.m.Capped("redrive")
	mt.log.Warn().Int("redriven", redriven).Msg("re-drive stopped at its cap with more operations waiting; it goes on at its next pass")
	return redriven, nil
}

// Retain deletes rejected inbox rows older than RejectedRetention and
// counts parked outbox rows (published outbox rows are deleted by the relay
// that published them). It returns how many rows it deleted.
func (mt *Maintainer) Retain(ctx context.Context) (int, error) {
	total := 0
	for _, task := range []struct {
		name string
		del  func(context.Context, time.Duration, int) (int64, error)
		keep time.Duration
	}{
		{"retention_inbox", mt.store.DeleteRejectedInbox, mt.cfg.RejectedRetention},
		{"retention_lookups", mt.store.DeleteDoneLookups, mt.cfg.LookupRetention},
	} {
		deleted, capped := 0, true
		for range mt.cfg.MaxBatches {
			n, err := task.del(ctx, task.keep, mt.cfg.Batch)
			if err != nil {
				return total + deleted, err
			}
			deleted += int(n)
			if int(n) < mt.cfg.Batch {
				capped = false
				break
			}
		}
		mt.m.Maintained(task.name, deleted)
		if capped {
			mt.m.Capped(task.name)
			mt.log.Warn().Str("task", task.name).Int("deleted", deleted).Msg("retention stopped at its cap; it goes on at its next pass")
		}
		total += deleted
	}
	parked, n, err := mt.store.OutboxParked(ctx, 5)
	if err != nil {
		return total, err
	}
	mt.m.Parked(n)
	if n > 0 {
		mt.log.Warn().Int64("parked", n).Str("first_msg_id", parked[0].MsgID).Str("first_error", parked[0].LastError).
			Msg("outbox rows are parked: NATS refused them repeatedly; a person must look (opledger ops parked)")
	}
	return total, nil
}

// CountParked sets the parked-rows gauge from the ledger (the leader does it
// every sweep pass, so that a row parked or requeued shows within seconds).
// It returns the count.
func (mt *Maintainer) CountParked(ctx context.Context) (int, error) {
	_, n, err := mt.store.OutboxParked(ctx, 0)
	if err != nil {
		return 0, err
	}
	mt.m.Parked(n)
	return int(n), nil
}
