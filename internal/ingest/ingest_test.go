package ingest_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/ingest"
	"github.com/opledger/opledger/internal/pipetest"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/wire"
)

func TestMain(m *testing.M) { testdb.Main(m) }

type bundle struct {
	*pipetest.Env
	svc *ingest.Service
}

func setup(t *testing.T) bundle {
	t.Helper()
	e := pipetest.Start(t, pipetest.Options{})
	return bundle{Env: e, svc: e.Ingester()}
}

func (b bundle) ingest(t *testing.T, subject string, header map[string]string, body []byte) *ingest.Answer {
	t.Helper()
	ans, err := b.svc.Ingest(b.Ctx, subject, header, body)
	require.NoError(t, err, "a verdict about the intent is an answer, never an error")
	return ans
}

func (b bundle) ingestIntent(t *testing.T, in wire.Intent) *ingest.Answer {
	t.Helper()
	subject, header, body := pipetest.IntentMsg(t, in)
	return b.ingest(t, subject, header, body)
}

func capture(eventID, workflowID, orderID, customerID string) wire.Intent {
	return wire.Intent{EventID: eventID, WorkflowID: workflowID, Tool: "capture_payment",
		Args: pipetest.CaptureArgs(orderID, customerID, 4900)}
}

// resultsFor returns the results in the outbox that answer eventID.
func (b bundle) resultsFor(t *testing.T, eventID string) []wire.Result {
	t.Helper()
	var out []wire.Result
	for _, r := range b.Results(t) {
		if r.EventID == eventID {
			out = append(out, r)
		}
	}
	return out
}

// A valid intent creates one operation in pending_dispatch and, in the same
// transaction, its dispatch command and the agent's answer.
//
// Breaking it: a dispatch command written outside the transaction (or not
// at all) leaves no dispatch row; an answer that names another state or
// decision fails the result checks.
func TestIngestValidIntent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	subject, header, body := pipetest.IntentMsg(t, capture("evt_1", "wf_1", "order_1", "cust_1"))

	ans := b.ingest(t, subject, header, body)
	require.Equal(t, op.DecisionNew, ans.Decision)
	require.Equal(t, string(op.StatePendingDispatch), ans.Result.Status)
	require.Equal(t, "payment:order_1:capture:4900:USD:v1", ans.Result.IdempotencyKey)

	o := b.Operation(t, ans.Result.OperationID)
	require.Equal(t, op.StatePendingDispatch, o.State)
	require.Equal(t, "capture_payment", o.Tool)
	require.Equal(t, "wf_1", o.WorkflowID)
	require.Equal(t, op.ClassExternalIrreversible, o.Class)
	require.JSONEq(t, `{"amount_cents":4900,"currency":"USD","customer_id":"cust_1","order_id":"order_1"}`, string(o.Args))

	rows := b.OutboxOf(t, o.ID)
	require.Len(t, rows, 2, "one dispatch command and one result")
	require.Equal(t, wire.OpsSubject(wire.KindDispatch, "capture_payment", o.ID), rows[0].Subject)
	cmd := rows[0].Command(t)
	require.Equal(t, wire.Command{Spec: wire.SpecCommand, Kind: wire.KindDispatch, OperationID: o.ID, Tool: o.Tool,
		IdempotencyKey: o.IdempotencyKey, LeaseEpoch: o.LeaseEpoch, WorkflowID: "wf_1", EventID: "evt_1",
		State: op.StatePendingDispatch}, cmd)
	require.Equal(t, wire.ResultSubject("wf_1"), rows[1].Subject)
	res := rows[1].Result(t)
	require.Equal(t, op.DecisionNew, res.DedupeDecision)
	require.Equal(t, string(op.StatePendingDispatch), res.Status)
	require.Equal(t, "evt_1", res.EventID)

	in, err := b.Store.InboxEntry(b.Ctx, ingest.Source, "evt_1")
	require.NoError(t, err)
	require.Equal(t, op.DecisionNew, in.Decision)
	require.Equal(t, o.ID, in.OperationID)
	sum := sha256.Sum256(body)
	require.Equal(t, hex.EncodeToString(sum[:]), in.PayloadHash, "the inbox keeps the hash of an accepted intent")
	require.Empty(t, in.Payload, "and not its raw bytes: the operation holds its canonical args")
}

// Invalid intents are kept in the inbox with their raw bytes and the reason,
// create nothing, and are answered with a rejected result that says why.
//
// Breaking it: dropping an invalid intent silently (no inbox row, or no
// result), creating an operation for it, or answering without a reason fails
// the checks below.
func TestIngestRejectsInvalidIntents(t *testing.T) {
	t.Parallel()
	valid := func(mut func(*wire.Intent)) (string, map[string]string, []byte) {
		in := capture("", "wf_r", "order_r", "cust_r")
		mut(&in)
		in.Spec = wire.SpecIntent
		body, err := json.Marshal(in)
		if err != nil {
			panic(err)
		}
		return wire.IntentSubject(in.WorkflowID), map[string]string{wire.HeaderMsgID: in.EventID}, body
	}
	for _, tc := range []struct {
		name    string
		eventID string
		msg     func() (string, map[string]string, []byte)
		reason  string // a part of the reason the agent is told
	}{{
		name: "bad JSON", eventID: "evt_badjson",
		msg: func() (string, map[string]string, []byte) {
			return wire.IntentSubject("wf_r"), map[string]string{wire.HeaderMsgID: "evt_badjson"},
				[]byte(`{"spec":"opledger.intent.v1","event_id":"evt_badjson",`)
		},
		reason: "not valid JSON",
	}, {
		name: "unknown tool", eventID: "evt_tool",
		msg: func() (string, map[string]string, []byte) {
			return valid(func(in *wire.Intent) { in.EventID, in.Tool = "evt_tool", "launch_rockets" })
		},
		reason: `tool "launch_rockets" is not registered`,
	}, {
		name: "float amount fails the schema", eventID: "evt_float",
		msg: func() (string, map[string]string, []byte) {
			return valid(func(in *wire.Intent) {
				in.EventID = "evt_float"
				in.Args = json.RawMessage(`{"order_id":"order_r","customer_id":"cust_r","amount_cents":49.5,"currency":"USD"}`)
			})
		},
		reason: "amount_cents",
	}, {
		name: "subject and workflow disagree", eventID: "evt_subject",
		msg: func() (string, map[string]string, []byte) {
			_, h, body := valid(func(in *wire.Intent) { in.EventID = "evt_subject" })
			return wire.IntentSubject("wf_other"), h, body
		},
		reason: `published on "opledger.intents.wf_other" but workflow_id says "wf_r"`,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			subject, header, body := tc.msg()

			ans := b.ingest(t, subject, header, body)
			require.Equal(t, op.DecisionRejected, ans.Decision)
			require.Equal(t, string(op.StateRejected), ans.Result.Status)
			require.Contains(t, ans.Result.Reason, tc.reason)
			require.Empty(t, ans.Result.OperationID)

			in, err := b.Store.InboxEntry(b.Ctx, ingest.Source, tc.eventID)
			require.NoError(t, err)
			require.Equal(t, op.DecisionRejected, in.Decision)
			require.Equal(t, body, in.Payload, "the raw bytes are kept as received")
			require.Contains(t, in.Reason, tc.reason)
			require.Empty(t, in.OperationID)

			results := b.resultsFor(t, tc.eventID)
			require.Len(t, results, 1, "exactly one answer in the outbox")
			require.Equal(t, string(op.StateRejected), results[0].Status)
			require.Equal(t, op.DecisionRejected, results[0].DedupeDecision)
			require.Contains(t, results[0].Reason, tc.reason)
			require.True(t, results[0].Final)

			counts, err := b.Store.CountByState(b.Ctx)
			require.NoError(t, err)
			require.Empty(t, counts, "no operation is created")
			require.Len(t, b.Outbox(t), 1, "the answer is the only outbox row: no command")
		})
	}
}

// The same event delivered twice (a JetStream redelivery, or a resend past
// its duplicate window) is recognised by the inbox and creates nothing new.
//
// Breaking it: without the inbox check the second delivery would go on to
// the idempotency key and be answered duplicate_operation, or create a
// second dispatch command.
func TestIngestSameEventTwice(t *testing.T) {
	t.Parallel()
	b := setup(t)
	subject, header, body := pipetest.IntentMsg(t, capture("evt_1", "wf_1", "order_1", "cust_1"))
	first := b.ingest(t, subject, header, body)
	require.Equal(t, op.DecisionNew, first.Decision)

	again := b.ingest(t, subject, header, body)
	require.Equal(t, op.DecisionDuplicateEvent, again.Decision)
	require.Equal(t, first.Result.OperationID, again.Result.OperationID)
	require.Equal(t, string(op.StatePendingDispatch), again.Result.Status)

	o := b.Operation(t, first.Result.OperationID)
	require.Len(t, b.Commands(t, o, wire.KindDispatch), 1, "one dispatch command")
	ops, err := b.Store.OperationsByWorkflow(b.Ctx, "wf_1")
	require.NoError(t, err)
	require.Len(t, ops, 1)
	in, err := b.Store.InboxEntry(b.Ctx, ingest.Source, "evt_1")
	require.NoError(t, err)
	require.Equal(t, op.DecisionNew, in.Decision, "the inbox keeps the first decision")
	require.Equal(t, 1, in.DuplicateCount)
	results := b.resultsFor(t, "evt_1")
	require.Len(t, results, 2, "both deliveries are answered")
	require.Equal(t, op.DecisionDuplicateEvent, results[1].DedupeDecision)
}

// The same action under a new event id (the agent retried the tool call) is
// the known operation: no second operation, no second dispatch, and the
// answer carries the operation's current status, not a fresh one.
//
// Breaking it: keying operations by event id instead of the idempotency key
// would create a second capture; answering from the new envelope instead of
// the stored operation would report pending_dispatch instead of dispatched.
func TestIngestSameActionNewEventID(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first := b.ingestIntent(t, capture("evt_1", "wf_1", "order_1", "cust_1"))
	require.Equal(t, op.DecisionNew, first.Decision)
	// The operation moves on before the retry arrives: a dispatcher took it.
	o, _, err := b.Store.BeginAttempt(b.Ctx, first.Result.OperationID, 0, "dispatcher-test", pipetest.DefaultToolTimeout)
	require.NoError(t, err)
	require.Equal(t, op.StateDispatched, o.State)

	// Same arguments in another key order, spacing and currency case: the
	// same canonical action.
	in := capture("evt_2", "wf_1", "", "")
	in.Args = json.RawMessage(`{ "currency":"usd", "amount_cents":4900, "order_id":"order_1", "customer_id":"cust_1" }`)
	again := b.ingestIntent(t, in)
	require.Equal(t, op.DecisionDuplicateOperation, again.Decision)
	require.Equal(t, o.ID, again.Result.OperationID)
	require.Equal(t, string(op.StateDispatched), again.Result.Status, "the known operation's current status")
	require.Equal(t, 1, again.Result.AttemptCount)
	require.Equal(t, op.RecommendWait, again.Result.RetryRecommendation)

	ops, err := b.Store.OperationsByWorkflow(b.Ctx, "wf_1")
	require.NoError(t, err)
	require.Len(t, ops, 1)
	require.Len(t, b.Commands(t, o, wire.KindDispatch), 1, "no second dispatch command")
	entry, err := b.Store.InboxEntry(b.Ctx, ingest.Source, "evt_2")
	require.NoError(t, err)
	require.Equal(t, op.DecisionDuplicateOperation, entry.Decision)
	require.Equal(t, o.ID, entry.OperationID)
}

// The same idempotency key with other arguments is a conflict: nothing is
// created and the agent is told which operation holds the key.
//
// Breaking it: comparing keys without the args hash would answer
// duplicate_operation (and the agent would believe the other customer's
// capture was its own); inserting anyway would make a second operation.
func TestIngestSameKeyOtherArgs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first := b.ingestIntent(t, capture("evt_1", "wf_1", "order_1", "cust_1"))
	require.Equal(t, op.DecisionNew, first.Decision)

	// customer_id is not part of capture_payment's key template.
	ans := b.ingestIntent(t, capture("evt_2", "wf_1", "order_1", "cust_2"))
	require.Equal(t, op.DecisionConflict, ans.Decision)
	require.Equal(t, string(op.StateRejected), ans.Result.Status)
	require.Equal(t, first.Result.OperationID, ans.Result.OperationID, "the answer names the operation holding the key")
	require.Contains(t, ans.Result.Reason, first.Result.OperationID)
	require.Contains(t, ans.Result.Reason, "different arguments")

	ops, err := b.Store.OperationsByWorkflow(b.Ctx, "wf_1")
	require.NoError(t, err)
	require.Len(t, ops, 1)
	require.JSONEq(t, `{"amount_cents":4900,"currency":"USD","customer_id":"cust_1","order_id":"order_1"}`, string(ops[0].Args))
	require.Len(t, b.Commands(t, ops[0], wire.KindDispatch), 1)
	entry, err := b.Store.InboxEntry(b.Ctx, ingest.Source, "evt_2")
	require.NoError(t, err)
	require.Equal(t, op.DecisionConflict, entry.Decision)
	require.True(t, strings.Contains(entry.Reason, "different arguments"), entry.Reason)
	results := b.resultsFor(t, "evt_2")
	require.Len(t, results, 1)
	require.Equal(t, op.DecisionConflict, results[0].DedupeDecision)
}

// A redelivery of an intent refused as a key conflict (same event id, same
// bytes: JetStream redelivers after a lost ack, or the agent resends) is
// refused again. It is not answered with the status of the operation that
// holds the key, which would tell the agent its capture for cust_2 is in
// progress.
//
// Breaking it: answering every duplicate_event from the known operation
// (the store reports the key holder for it) gives pending_dispatch, "wait",
// not final. (This was a live bug while these tests were written; fixed in
// d2bf84e.)
func TestIngestConflictingEventRedeliveredStaysRejected(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first := b.ingestIntent(t, capture("evt_1", "wf_1", "order_1", "cust_1"))
	require.Equal(t, op.DecisionNew, first.Decision)
	conflicting := capture("evt_2", "wf_1", "order_1", "cust_2")
	refused := b.ingestIntent(t, conflicting)
	require.Equal(t, op.DecisionConflict, refused.Decision)
	require.Equal(t, string(op.StateRejected), refused.Result.Status)

	again := b.ingestIntent(t, conflicting)
	require.Equal(t, op.DecisionDuplicateEvent, again.Decision)
	require.Equal(t, string(op.StateRejected), again.Result.Status,
		"the redelivery of a refused intent must be refused again, not answered with operation %s's status", first.Result.OperationID)
	require.True(t, again.Result.Final)
	require.Equal(t, op.RecommendChangeArguments, again.Result.RetryRecommendation)
	require.Contains(t, again.Result.Reason, "different arguments")
}

// A capture above the approval threshold waits for approval: no dispatch
// command is written.
//
// Breaking it: ignoring the registry's approval rule would enqueue a
// dispatch command and capture ten thousand dollars unreviewed.
func TestIngestAboveThresholdAwaitsApproval(t *testing.T) {
	t.Parallel()
	b := setup(t)
	in := capture("evt_big", "wf_1", "order_big", "cust_1")
	in.Args = pipetest.CaptureArgs("order_big", "cust_1", 2_000_000)

	// Without a proposer nobody could be kept from approving their own
	// call: refused, and nothing is created.
	ans := b.ingestIntent(t, in)
	require.Equal(t, op.DecisionRejected, ans.Decision)
	require.Equal(t, ingest.NoProposerReason, ans.Result.Reason)
	require.Empty(t, ans.Result.OperationID)
	ops, err := b.Store.OperationsByWorkflow(b.Ctx, "wf_1")
	require.NoError(t, err)
	require.Empty(t, ops)

	in.EventID, in.Actor = "evt_big_2", &wire.Actor{Type: "agent", ID: "support-bot"}
	ans = b.ingestIntent(t, in)
	require.Equal(t, op.DecisionNew, ans.Decision)
	require.Equal(t, string(op.StateAwaitingApproval), ans.Result.Status)
	require.Equal(t, op.RecommendAwaitApproval, ans.Result.RetryRecommendation)
	o := b.Operation(t, ans.Result.OperationID)
	require.Equal(t, op.StateAwaitingApproval, o.State)
	require.Equal(t, "support-bot", o.ProposedBy)
	require.Empty(t, b.Commands(t, o, wire.KindDispatch))

	// A repeat of the action without actor is still its duplicate: the
	// key decides first.
	in.EventID, in.Actor = "evt_big_3", nil
	ans = b.ingestIntent(t, in)
	require.Equal(t, op.DecisionDuplicateOperation, ans.Decision)
	require.Equal(t, o.ID, ans.Result.OperationID)
}

// An intent in workflow wf_2 that duplicates an operation created by wf_1
// (the key is the business action: one order captured from two
// conversations) is answered on wf_2's results subject, where its agent
// listens.
//
// Breaking it: building the answer from the stored operation alone gives it
// workflow_id wf_1, so it is published on opledger.results.wf_1: wf_2's
// agent never gets an answer and wf_1's receives one to an event it never
// sent. (This was a live bug while these tests were written; fixed in
// d2bf84e.)
func TestIngestDuplicateOperationFromOtherWorkflowAnswersAsker(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first := b.ingestIntent(t, capture("conv_a:call_1", "wf_1", "order_1", "cust_1"))
	require.Equal(t, op.DecisionNew, first.Decision)

	ans := b.ingestIntent(t, capture("conv_b:call_1", "wf_2", "order_1", "cust_1"))
	require.Equal(t, op.DecisionDuplicateOperation, ans.Decision)
	require.Equal(t, first.Result.OperationID, ans.Result.OperationID)

	var subjects []string
	for _, r := range b.Outbox(t) {
		if r.OperationID == first.Result.OperationID && strings.HasPrefix(r.Subject, wire.ResultSubjectPrefix) &&
			r.Result(t).EventID == "conv_b:call_1" {
			subjects = append(subjects, r.Subject)
		}
	}
	require.Equal(t, []string{wire.ResultSubject("wf_2")}, subjects,
		"the answer to wf_2's intent must be published where wf_2's agent listens")
}
