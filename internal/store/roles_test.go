package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/store"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/pkg/op"
)

// TestEachRoleRunsItsStatements runs the store methods each part of
// opledger calls, each on a store in that part's role (Options.Role, SET
// ROLE), through one operation's life: intake and a duplicate (ingest), the
// relay's claim, mark and release, a dispatch and a recorded answer
// (dispatcher), the sweeper's fencing of a stuck attempt, its passes and
// retention (maintainer), the reconciler's verdict and the operator's reads
// and audit. A statement that needs a grant schema/grants.sql does not give
// fails here with permission denied (42501), naming the method.
func TestEachRoleRunsItsStatements(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testdb.New(t)
	as := func(role string) *store.Store {
		st, err := store.Open(ctx, url, store.Options{Role: role, MaxConns: 2})
		require.NoError(t, err, role)
		t.Cleanup(st.Close)
		return st
	}
	ingest, relay, dispatcher := as("opledger_ingest"), as("opledger_relay"), as("opledger_dispatcher")
	maintainer, reconciler, operator := as("opledger_maintainer"), as("opledger_reconciler"), as("opledger_operator")

	// ingest: a new intent, its redelivery, and garbage.
	res, err := ingest.Submit(ctx, submission("evt_1", newOp("k1", "x")))
	require.NoError(t, err, "ingest: submit")
	_, err = ingest.Submit(ctx, submission("evt_1", newOp("k1", "x")))
	require.NoError(t, err, "ingest: duplicate event")
	_, err = ingest.Submit(ctx, submission("evt_2", newOp("k1", "x")))
	require.NoError(t, err, "ingest: duplicate operation")
	_, err = ingest.Submit(ctx, store.Submission{Source: "nats:intents", EventID: "evt_bad", Payload: []byte("garbage"), RejectReason: "not JSON"})
	require.NoError(t, err, "ingest: rejected")

	// relay: claim the new intent's batch and delete it once published;
	// claim a row, publish it, and give back another after a failure.
	batches, err := relay.OutboxClaimBatches(ctx, "r1", nil, 10, time.Minute)
	require.NoError(t, err, "relay: claim batches")
	require.Len(t, batches, 1)
	_, err = relay.OutboxBatchesSent(ctx, "r1", []string{batches[0].ID})
	require.NoError(t, err, "relay: delete a published batch")
	require.NoError(t, maintainer.InTx(ctx, func(tx *store.Tx) error {
		return tx.Enqueue(ctx, msg("redrive-1", res.Operation.ID, 0), msg("redrive-2", res.Operation.ID, 0))
	}), "maintainer: re-drive enqueue")
	rows, err := relay.OutboxClaim(ctx, "r1", 10, time.Minute)
	require.NoError(t, err, "relay: claim")
	require.Len(t, rows, 2)
	_, err = relay.OutboxSent(ctx, "r1", []int64{rows[0].ID})
	require.NoError(t, err, "relay: delete published")
	require.NoError(t, relay.OutboxRelease(ctx, store.Release{Relay: "r1", IDs: []int64{rows[1].ID}, Delay: time.Second,
		Reason: "nats down", MessageFault: true, MaxFailures: 3}), "relay: release")
	_, err = relay.OutboxSentHandedOff(ctx, []string{"redrive-2"}, []string{"no-such-batch"})
	require.NoError(t, err, "relay: delete handed-off rows and batches")

	// dispatcher: claim, answer retryable, claim again.
	o, att, err := dispatcher.BeginAttempt(ctx, res.Operation.ID, 0, "w1", 2*time.Second)
	require.NoError(t, err, "dispatcher: begin attempt")
	a := *att
	a.Outcome, a.ErrorCategory = op.OutcomeRetryable, "rate_limited"
	o, err = dispatcher.Transition(ctx, store.Change{OperationID: o.ID, From: op.StateDispatched, LeaseEpoch: o.LeaseEpoch,
		Events: []op.Event{op.EventFailRetryable, op.EventRetry}, ErrorCategory: "rate_limited", AttemptID: att.ID, Actor: "w1",
		Finish: &a, Operation: o, Outbox: func(*op.Operation) []store.Message { return []store.Message{msg("retry-1", o.ID, 0)} }})
	require.NoError(t, err, "dispatcher: record the answer")
	o, att, err = dispatcher.BeginAttempt(ctx, o.ID, o.LeaseEpoch, "w1", 2*time.Second)
	require.NoError(t, err, "dispatcher: second attempt")

	// relay: the outcome's batch, which NATS refused, made rows.
	batches, err = relay.OutboxClaimBatches(ctx, "r1", nil, 10, time.Minute)
	require.NoError(t, err)
	require.Len(t, batches, 1)
	moved, err := relay.OutboxSplitBatch(ctx, store.Split{Relay: "r1", BatchID: batches[0].ID, Unsent: []string{"retry-1"},
		Refused: []string{"retry-1"}, Delay: time.Second, Reason: "too large"})
	require.NoError(t, err, "relay: split a batch")
	require.EqualValues(t, 1, moved)

	// maintainer: leadership, its passes, the sweeper fencing the attempt,
	// approvals expiry, retention.
	lead, err := maintainer.TryLead(ctx, "m1", 5*time.Second)
	require.NoError(t, err, "maintainer: lead")
	require.NotNil(t, lead)
	require.NoError(t, lead.Heartbeat(ctx), "maintainer: heartbeat")
	_, err = maintainer.OpsStreamCreated(ctx)
	require.NoError(t, err, "maintainer: OPS stream creation time")
	require.NoError(t, maintainer.SetOpsStreamCreated(ctx, time.Now()), "maintainer: record OPS stream creation time")
	lead.Release()
	_, err = maintainer.OperationsStuckDispatched(ctx, 0, 10)
	require.NoError(t, err, "maintainer: stuck")
	_, err = maintainer.OperationsDispatchedUnclaimed(ctx, 0, 10)
	require.NoError(t, err, "maintainer: unclaimed")
	_, err = maintainer.OperationsUnattended(ctx, time.Hour, nil, 10)
	require.NoError(t, err, "maintainer: unattended")
	_, _, err = maintainer.OutboxParked(ctx, 5)
	require.NoError(t, err, "maintainer: parked")
	_, err = maintainer.ExpiredApprovals(ctx, 10)
	require.NoError(t, err, "maintainer: expired approvals")
	_, err = maintainer.DeleteRejectedInbox(ctx, time.Hour, 10)
	require.NoError(t, err, "maintainer: inbox retention")
	_, err = maintainer.DeleteDoneLookups(ctx, time.Hour, 10)
	require.NoError(t, err, "maintainer: lookup counter retention")
	o, err = maintainer.Transition(ctx, store.Change{OperationID: o.ID, From: op.StateDispatched, LeaseEpoch: o.LeaseEpoch,
		Events: []op.Event{op.EventOutcomeUnknown}, BumpEpoch: true, AttemptID: att.ID, Actor: "m1/sweeper",
		Finish: &op.Attempt{ID: att.ID, Outcome: op.OutcomeUnknown, ErrorCategory: "swept", Error: "stuck"}, Operation: o})
	require.NoError(t, err, "maintainer: sweep")

	// reconciler: reads, then its verdict.
	_, err = reconciler.Attempts(ctx, o.ID)
	require.NoError(t, err, "reconciler: attempts")
	_, err = reconciler.DBNow(ctx)
	require.NoError(t, err, "reconciler: now")
	_, err = reconciler.NoteLookup(ctx, o.ID, o.Version, true, time.Second)
	require.NoError(t, err, "reconciler: note a lookup")
	_, err = reconciler.NoteLookup(ctx, o.ID, o.Version, true, time.Second)
	require.NoError(t, err, "reconciler: note another lookup")
	o, err = reconciler.Transition(ctx, store.Change{OperationID: o.ID, From: op.StateUnknownOutcome, LeaseEpoch: o.LeaseEpoch,
		Events: []op.Event{op.EventSucceed}, ExternalObjectID: "ch_1", Actor: "rec"})
	require.NoError(t, err, "reconciler: settle")
	require.Equal(t, op.StateCompletedSuccess, o.State)

	// operator: what an operator's detail shows, and the audit trail.
	_, err = operator.ListOperations(ctx, store.Filter{State: op.StateCompletedSuccess})
	require.NoError(t, err, "operator: list")
	_, err = operator.Events(ctx, o.ID)
	require.NoError(t, err, "operator: events")
	_, err = operator.Attempts(ctx, o.ID)
	require.NoError(t, err, "operator: attempts")
	_, err = operator.Approval(ctx, o.ID)
	require.ErrorIs(t, err, op.ErrNotFound, "operator: approval")
	require.NoError(t, operator.Audit(ctx, store.AuditEntry{Actor: "alice", Role: "operator", Action: "show", OperationID: o.ID, Outcome: "ok"}))
	trail, err := operator.AuditTrail(ctx, o.ID)
	require.NoError(t, err, "operator: audit trail")
	require.Len(t, trail, 1)
	_, _, err = operator.ListParked(ctx, 10)
	require.NoError(t, err, "operator: parked rows")
	err = operator.InTx(ctx, func(tx *store.Tx) error { _, err := tx.RequeueParked(ctx, 1); return err })
	require.ErrorIs(t, err, op.ErrNotFound, "operator: requeue a parked row")
}
