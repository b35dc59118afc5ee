package patterns_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/api"
	"github.com/opledger/opledger/internal/app"
	"github.com/opledger/opledger/internal/failpoint"
	"github.com/opledger/opledger/internal/ingest"
	"github.com/opledger/opledger/internal/maintain"
	"github.com/opledger/opledger/internal/ops"
	"github.com/opledger/opledger/internal/reconcile"
	"github.com/opledger/opledger/internal/store"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/internal/vendors"
	"github.com/opledger/opledger/pkg/adapter/httpadapter"
	"github.com/opledger/opledger/pkg/client"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/wire"
)

// serviceEnv, when set, makes this test binary run as the opledger service
// it names instead of running tests: pattern 2 starts a dispatcher as a
// real process it can lose to SIGKILL. The service runs exactly as its
// binary under services/ (and `opledger service <name>`) runs it:
// app.ParseServiceFlags, then app.RunService.
const serviceEnv = "OPLEDGER_PATTERNS_SERVICE"

func TestMain(m *testing.M) {
	if name := os.Getenv(serviceEnv); name != "" {
		os.Exit(runService(name))
	}
	testdb.Main(m)
}

func runService(name string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	cfg, err := app.ParseServiceFlags(name, os.Args[1:], os.LookupEnv, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if err := app.RunService(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// TestPattern1TimeoutInducedDuplicateWrite: "The agent calls
// charge_customer(order_id=123, amount=49.00). The payment provider
// completes the charge but the network times out before the response is
// returned. The orchestrator reports a timeout to the model. The model says
// 'try again'."
//
// The capture commits at the vendor and the answer never comes: the
// attempt times out after sending, so the operation is unknown_outcome and
// the agent is told to let opledger confirm it. The model retries anyway,
// under a new tool-call id, while the reconciler is still asking the vendor
// (its lookup is slowed down so that the retry lands then). The retry is
// answered duplicate_operation and sends nothing; the reconciler finds the
// charge by its key and completes the operation with it. One charge.
func TestPattern1TimeoutInducedDuplicateWrite(t *testing.T) {
	t.Parallel()
	s := start(t)
	s.fault(t, vendors.Fault{Route: vendors.RouteCapture, Kind: vendors.FaultTimeoutAfterCommit})
	s.fault(t, vendors.Fault{Route: vendors.RouteCaptureLookup, Kind: vendors.FaultLatency, Delay: time.Second})

	const args = `{"order_id":"order_123","customer_id":"cust_1","amount_cents":4900,"currency":"USD"}`
	call1 := s.submit(t, intent("conv_1:call_1", "wf_1", "capture_payment", args))
	require.Equal(t, op.DecisionNew, call1.DedupeDecision)
	id := call1.OperationID

	timedOut := s.results.wait(t, "the capture's unknown outcome", func(r client.Result) bool {
		return r.OperationID == id && r.Status == client.StatusUnknownOutcome
	})
	require.Equal(t, op.RecommendReconcileBeforeRetry, timedOut.RetryRecommendation)
	require.False(t, timedOut.Final)

	// The model says "try again": the same charge, a new tool-call id, the
	// arguments as a model might spell them the second time.
	call2 := s.submit(t, intent("conv_1:call_2", "wf_1", "capture_payment",
		`{"currency":"usd","amount_cents":4900,"customer_id":"cust_1","order_id":"order_123"}`))
	require.Equal(t, op.DecisionDuplicateOperation, call2.DedupeDecision)
	require.Equal(t, id, call2.OperationID)
	require.Equal(t, client.StatusUnknownOutcome, call2.Status, "the retry arrived while the outcome was being confirmed")
	require.Equal(t, op.RecommendReconcileBeforeRetry, call2.RetryRecommendation)

	final := s.final(t, id)
	require.Equal(t, client.StatusCompletedSuccess, final.Status)

	// The vendor: one charge, one capture request; the retry never reached it.
	st := s.Vendors.Stats()
	require.Equal(t, 1, st.Captures)
	require.Equal(t, 1, st.Requests[vendors.RouteCapture])
	require.Equal(t, map[string]int{"payment:order_123:capture:4900:USD:v1": 1}, s.Vendors.EffectsByKey(vendors.KindCapture))
	require.Equal(t, s.vendorObject(t, "/v1/payments?idempotency_key=payment:order_123:capture:4900:USD:v1"), final.ExternalObjectID,
		"the ledger holds the charge the vendor made")

	// The ledger: one attempt, timed out; completed by reconciliation.
	o := s.operation(t, id)
	require.Equal(t, op.StateCompletedSuccess, o.State)
	require.Equal(t, 1, o.AttemptCount)
	require.Equal(t, []op.Event{op.EventCreate, op.EventEnqueue, op.EventDispatch, op.EventOutcomeUnknown, op.EventSucceed}, s.history(t, id))
	atts, err := s.st.Attempts(s.ctx, id)
	require.NoError(t, err)
	require.Len(t, atts, 1)
	require.Equal(t, op.OutcomeUnknown, atts[0].Outcome)
	require.Equal(t, httpadapter.CategoryTimeout, atts[0].ErrorCategory)
	require.Equal(t, op.DecisionNew, s.inbox(t, "conv_1:call_1").Decision)
	retry := s.inbox(t, "conv_1:call_2")
	require.Equal(t, op.DecisionDuplicateOperation, retry.Decision)
	require.Equal(t, id, retry.OperationID)
}

// TestPattern2ReplayAfterCrash: "The tool call was sent successfully, but
// the process crashed before marking the step complete. On recovery, the
// workflow replays from the last durable checkpoint and emits the same tool
// call again."
//
// The dispatcher runs as a process of its own (this test binary started as
// `dispatcher`, see serviceEnv) with the failpoint dispatch.after_call
// armed: it claims the capture, the vendor charges and answers, and the
// process is SIGKILLed before the outcome is committed. The rest of
// opledger runs in this process. The ledger is left with the operation in
// dispatched and an attempt without an outcome. The agent's workflow
// replays and emits the identical tool call again, twice: through JetStream
// inside its duplicate window (dropped there), and as a replay arriving
// after the window would (no Nats-Msg-Id, so the ledger must recognise the
// event id itself). A new dispatcher process starts. Nothing is sent again:
// the sweeper turns the orphaned attempt into unknown_outcome, the
// reconciler finds the charge, and the operation completes. One charge.
func TestPattern2ReplayAfterCrash(t *testing.T) {
	t.Parallel()
	s := start(t, app.PlannerIngest, app.Reconciler, app.Compensator)
	crashing := s.startProcess(t, app.Dispatcher, "dispatcher-1", failpoint.DispatchAfterCall)

	in := intent("conv_2:call_1", "wf_2", "capture_payment", `{"order_id":"order_2","customer_id":"cust_2","amount_cents":2500,"currency":"EUR"}`)
	in.Spec = wire.SpecIntent
	body, err := json.Marshal(in) // the bytes the client sends, kept for the replay
	require.NoError(t, err)
	call := s.submit(t, in)
	require.Equal(t, op.DecisionNew, call.DedupeDecision)
	id := call.OperationID

	// The crash: killed by its own failpoint, after the vendor answered.
	crashing.killedBy(t, syscall.SIGKILL)
	require.Equal(t, 1, s.Vendors.Stats().Captures, "the call was sent and the charge made")
	o := s.operation(t, id)
	require.Equal(t, op.StateDispatched, o.State, "the outcome never committed")
	atts, err := s.st.Attempts(s.ctx, id)
	require.NoError(t, err)
	require.Len(t, atts, 1)
	require.Empty(t, atts[0].Outcome, "the attempt has no outcome")

	// The replay: the same tool call, the same bytes, sent by hand as any
	// agent's queue would redeliver it. The ledger recognises the event id
	// and answers with the operation as it is.
	nc, err := nats.Connect(s.Infra.NATSURL)
	require.NoError(t, err)
	defer nc.Close()
	_, err = nc.Request(wire.IntentSubject(in.WorkflowID), body, 5*time.Second) // JetStream acks the publish
	require.NoError(t, err)
	replay := s.results.wait(t, "the answer to the replay", func(r client.Result) bool {
		return r.EventID == in.EventID && r.DedupeDecision == op.DecisionDuplicateEvent
	})
	require.Equal(t, id, replay.OperationID)
	require.True(t, replay.Status.State().Sent(), "the replay finds the call already sent (%s), not ready to send", replay.Status)

	// Recovery: a new dispatcher process; the sweeper and reconciler settle it.
	s.startProcess(t, app.Dispatcher, "dispatcher-2", "")
	final := s.final(t, id)
	require.Equal(t, client.StatusCompletedSuccess, final.Status)

	st := s.Vendors.Stats()
	require.Equal(t, 1, st.Captures)
	require.Equal(t, 1, st.Requests[vendors.RouteCapture], "nothing was sent again")
	require.Equal(t, map[string]int{"payment:order_2:capture:2500:EUR:v1": 1}, s.Vendors.EffectsByKey(vendors.KindCapture))
	require.Equal(t, s.vendorObject(t, "/v1/payments?idempotency_key=payment:order_2:capture:2500:EUR:v1"), final.ExternalObjectID)

	o = s.operation(t, id)
	require.Equal(t, 1, o.AttemptCount)
	require.Equal(t, []op.Event{op.EventCreate, op.EventEnqueue, op.EventDispatch, op.EventOutcomeUnknown, op.EventSucceed}, s.history(t, id),
		"swept to unknown_outcome, then found at the vendor")
	entry := s.inbox(t, in.EventID)
	require.Equal(t, op.DecisionNew, entry.Decision)
	require.Equal(t, 1, entry.DuplicateCount, "the replay that reached the ledger was recognised")
}

// TestPattern3SameIntentFromThreeChannels: "A user asks in chat, then clicks
// a UI button, then replies to an email. Three requests express the same
// intent."
//
// Three channels, three workflows and three event ids, each asking at the
// same time for the same charge, the same receipt email and the same
// ticket, spelled the way each channel spells things: other key order,
// currency and queue in other case, the address in other case, a
// zero-width space pasted into an id. Each action becomes one operation,
// and each happens once. Then a different email to the same person within
// send_email's dedupe window (24h per address and template) is suppressed,
// and runs only when sent again with dedupe_override, whose reason the
// ledger records on the operation's create event.
func TestPattern3SameIntentFromThreeChannels(t *testing.T) {
	t.Parallel()
	s := start(t)
	type call struct{ tool, args string }
	channels := map[string][]call{
		"chat": {
			{"capture_payment", `{"order_id":"order_3","customer_id":"cust_3","amount_cents":4900,"currency":"USD"}`},
			{"send_email", `{"to":"victim@example.com","template":"payment_receipt","reference":"order_3"}`},
			{"create_ticket", `{"conversation_id":"case_3","queue":"billing","summary":"Refund request for order_3"}`},
		},
		"ui": {
			{"capture_payment", `{"currency":"usd","amount_cents":4900,"customer_id":"cust_3","order_id":"order_3"}`},
			{"send_email", `{"reference":"order_3","template":"payment_receipt","to":"Victim@Example.COM"}`},
			{"create_ticket", `{"summary":"Refund request for order_3","queue":"Billing","conversation_id":"case_3"}`},
		},
		"email": {
			{"capture_payment", `{"amount_cents":4900,"order_id":"order_3\u200b","currency":"Usd","customer_id":"cust_3"}`},
			{"send_email", `{"to":"VICTIM@example.com","reference":"\u200border_3","template":"payment_receipt"}`},
			{"create_ticket", `{"queue":"BILLING","conversation_id":"case_3\u200b","summary":"Refund request for order_3"}`},
		},
	}
	var mu sync.Mutex
	answers := map[string][]client.Answer{} // per tool
	var wg sync.WaitGroup
	for channel, calls := range channels {
		for i, c := range calls {
			wg.Add(1)
			go func() {
				defer wg.Done()
				a, err := s.agent.Submit(s.ctx, intent(fmt.Sprintf("%s:msg_%d", channel, i), "wf_"+channel, c.tool, c.args))
				if !assertNoError(t, err) {
					return
				}
				mu.Lock()
				answers[c.tool] = append(answers[c.tool], a)
				mu.Unlock()
			}()
		}
	}
	wg.Wait()

	ids := map[string]string{} // tool → its one operation
	for tool, as := range answers {
		require.Len(t, as, 3, tool)
		decisions := map[op.Decision]int{}
		for _, a := range as {
			decisions[a.DedupeDecision]++
			require.Equal(t, as[0].OperationID, a.OperationID, "%s: one operation", tool)
			require.Equal(t, as[0].IdempotencyKey, a.IdempotencyKey, tool)
		}
		require.Equal(t, map[op.Decision]int{op.DecisionNew: 1, op.DecisionDuplicateOperation: 2}, decisions, tool)
		ids[tool] = as[0].OperationID
		require.Equal(t, client.StatusCompletedSuccess, s.final(t, ids[tool]).Status, tool)
	}
	require.Len(t, ids, 3)

	// One charge, one email, one ticket.
	st := s.Vendors.Stats()
	require.Equal(t, [3]int{1, 1, 1}, [3]int{st.Captures, st.Emails, st.Tickets})
	require.Equal(t, map[string]int{"order_3": 1}, s.Vendors.EffectsBy(vendors.KindCapture, vendors.AttrOrderID))
	require.Equal(t, map[string]int{"victim@example.com": 1}, s.Vendors.EffectsBy(vendors.KindEmail, vendors.AttrMailbox))
	require.Len(t, s.Vendors.EffectsByKey(vendors.KindTicket), 1)
	// The ledger: three operations holding the cleaned identity, nine answers.
	require.JSONEq(t, `{"order_id":"order_3","customer_id":"cust_3","amount_cents":4900,"currency":"USD"}`, string(s.operation(t, ids["capture_payment"]).Args))
	email := s.operation(t, ids["send_email"])
	require.Equal(t, "email:victim@example.com:payment_receipt:order_3:v1", email.IdempotencyKey)
	require.Equal(t, "ticket:case_3:create:billing:v1", s.operation(t, ids["create_ticket"]).IdempotencyKey)
	s.requireStates(t, map[op.State]int64{op.StateCompletedSuccess: 3})
	s.requireDecisions(t, map[op.Decision]int64{op.DecisionNew: 3, op.DecisionDuplicateOperation: 6})

	// A different email (another order's receipt) to the same person within
	// the window: suppressed, naming the email that was sent.
	second := intent("chat:msg_9", "wf_chat", "send_email", `{"to":"Victim@example.com","template":"payment_receipt","reference":"order_4"}`)
	suppressed := s.submit(t, second)
	require.Equal(t, op.DecisionDuplicateOperation, suppressed.DedupeDecision)
	require.Equal(t, email.ID, suppressed.OperationID)
	require.Contains(t, suppressed.Reason, "dedupe window")
	_, err := s.st.OperationByKey(s.ctx, "email:victim@example.com:payment_receipt:order_4:v1")
	require.ErrorIs(t, err, op.ErrNotFound, "nothing was created")

	// Sent again with an override: it runs, and the reason is on record.
	// (intent.v1.json allows dedupe_override; the wire decoder must too.)
	const why = "the customer asked for the receipt of order_4 as well"
	second.EventID = "chat:msg_10"
	second.DedupeOverride = &wire.Override{Reason: why}
	overridden := s.submit(t, second)
	require.Equal(t, op.DecisionNew, overridden.DedupeDecision)
	require.NotEqual(t, email.ID, overridden.OperationID)
	require.Equal(t, client.StatusCompletedSuccess, s.final(t, overridden.OperationID).Status)
	require.Equal(t, map[string]int{"victim@example.com": 2}, s.Vendors.EffectsBy(vendors.KindEmail, vendors.AttrMailbox))
	events, err := s.st.Events(s.ctx, overridden.OperationID)
	require.NoError(t, err)
	require.Equal(t, op.EventCreate, events[0].Event)
	var detail map[string]string
	require.NoError(t, json.Unmarshal(events[0].Detail, &detail))
	require.Equal(t, why, detail["dedupe_override"])
	require.Equal(t, op.DecisionDuplicateOperation, s.inbox(t, "chat:msg_9").Decision)
}

// TestPattern4MultiStepInconsistency: "The agent updates a CRM, then sends
// an email, then creates an internal ticket. The CRM write succeeds, the
// email succeeds, and the ticket creation fails permanently. A naive retry
// of the whole plan will duplicate the first two steps."
//
// The help desk refuses the ticket (400): failed_permanent, with the
// recommendation change_arguments. The whole workflow is then run again,
// the same business actions under new tool-call ids, and nothing is
// repeated: the CRM update and the email are duplicate_operation (answered
// completed_success), and so is the ticket (answered failed_permanent,
// change_arguments), so the agent learns each step's real state from the
// answers instead of inferring it.
//
// What re-running a permanently failed step means under the protocol: the
// operation keeps its key and stays failed; the same call is the same
// action, and a 4xx is not retried as it is (only a failure that did
// nothing for want of retries, retry_later, is reopened). A corrected call
// is a new action only if the correction changes its identity (the key):
// a ticket routed to another queue is a new ticket and runs; the same
// ticket with only its summary reworded keeps the key and is a conflict.
func TestPattern4MultiStepInconsistency(t *testing.T) {
	t.Parallel()
	s := start(t)
	s.fault(t, vendors.Fault{Route: vendors.RouteTicket, Kind: vendors.FaultClientError})

	const (
		crm    = `{"record_id":"crm_4","field":"status","value":"refund_pending"}`
		email  = `{"to":"customer4@example.com","template":"follow_up","reference":"case_4"}`
		ticket = `{"conversation_id":"case_4","queue":"billing","summary":"Refund the duplicate charge on order_4"}`
	)
	steps := []struct{ tool, args string }{{"update_crm_record", crm}, {"send_email", email}, {"create_ticket", ticket}}
	run := func(runID string, first int) []client.Result {
		var out []client.Result
		for i, st := range steps {
			in := intent(fmt.Sprintf("conv_4:call_%d", first+i), "wf_4", st.tool, st.args)
			in.RunID = runID
			r, err := s.agent.SubmitAndWait(s.ctx, in)
			require.NoError(t, err)
			out = append(out, r)
		}
		return out
	}

	run1 := run("run_1", 1)
	require.Equal(t, client.StatusCompletedSuccess, run1[0].Status)
	require.Equal(t, client.StatusCompletedSuccess, run1[1].Status)
	require.Equal(t, client.StatusFailedPermanent, run1[2].Status)
	require.Equal(t, op.RecommendChangeArguments, run1[2].RetryRecommendation)
	require.Equal(t, http.StatusBadRequest, run1[2].RawStatusCode)
	require.True(t, run1[2].Final)

	run2 := run("run_2", 4)
	for i, r := range run2 {
		require.Equal(t, op.DecisionDuplicateOperation, r.DedupeDecision, steps[i].tool)
		require.Equal(t, run1[i].OperationID, r.OperationID, steps[i].tool)
		require.Equal(t, run1[i].Status, r.Status, steps[i].tool)
		require.True(t, r.Final, steps[i].tool)
	}
	require.Equal(t, op.RecommendChangeArguments, run2[2].RetryRecommendation)

	st := s.Vendors.Stats()
	require.Equal(t, [3]int{1, 1, 0}, [3]int{st.CRMWrites, st.Emails, st.Tickets}, "CRM writes, emails, tickets")
	require.Equal(t, [3]int{1, 1, 1}, [3]int{st.Requests[vendors.RouteCRM], st.Requests[vendors.RouteEmail], st.Requests[vendors.RouteTicket]},
		"the re-run sent nothing")

	// Only the summary reworded: the same ticket (the key), other arguments.
	conflict := s.submit(t, intent("conv_4:call_7", "wf_4", "create_ticket",
		`{"conversation_id":"case_4","queue":"billing","summary":"Please refund the duplicate charge on order_4"}`))
	require.Equal(t, op.DecisionConflict, conflict.DedupeDecision)
	require.Equal(t, client.StatusRejected, conflict.Status)
	require.Equal(t, run1[2].OperationID, conflict.OperationID)

	// Corrected: routed to another queue, a new ticket.
	fixed, err := s.agent.SubmitAndWait(s.ctx, intent("conv_4:call_8", "wf_4", "create_ticket",
		`{"conversation_id":"case_4","queue":"general","summary":"Refund the duplicate charge on order_4"}`))
	require.NoError(t, err)
	require.Equal(t, op.DecisionNew, fixed.DedupeDecision)
	require.Equal(t, client.StatusCompletedSuccess, fixed.Status)

	st = s.Vendors.Stats()
	require.Equal(t, [3]int{1, 1, 1}, [3]int{st.CRMWrites, st.Emails, st.Tickets})
	require.Equal(t, map[string]int{"ticket:case_4:create:general:v1": 1}, s.Vendors.EffectsByKey(vendors.KindTicket))

	// The ledger has the workflow's true state, step by step.
	wf, err := s.st.OperationsByWorkflow(s.ctx, "wf_4")
	require.NoError(t, err)
	states := map[string]op.State{}
	for _, o := range wf {
		states[o.IdempotencyKey] = o.State
	}
	require.Equal(t, map[string]op.State{
		"crm:crm_4:status:refund_pending:e1:v1":           op.StateCompletedSuccess,
		"email:customer4@example.com:follow_up:case_4:v1": op.StateCompletedSuccess,
		"ticket:case_4:create:billing:v1":                 op.StateFailedPermanent,
		"ticket:case_4:create:general:v1":                 op.StateCompletedSuccess,
	}, states)
	failed := s.operation(t, run1[2].OperationID)
	require.Equal(t, 1, failed.AttemptCount, "the failed ticket was tried once")
	require.Equal(t, httpadapter.CategoryClientError, failed.LastErrorCategory)
	require.Equal(t, []op.Event{op.EventCreate, op.EventEnqueue, op.EventDispatch, op.EventFailPermanent}, s.history(t, failed.ID))
	s.requireDecisions(t, map[op.Decision]int64{op.DecisionNew: 4, op.DecisionDuplicateOperation: 3, op.DecisionConflict: 1})
}

// TestPattern5CompetingRuns: "Two separate workflows operate on the same
// business entity. A support agent run issues a refund while a retention
// agent run simultaneously offers account credit."
//
// refund_payment and credit_account both hold the lease of the customer
// entity, so the vendor is never busy with two of the customer's money
// requests at once (each is made to take 300 ms), and they run in the order
// the ledger gave them the lease. Refunds always need approval, which a
// person gives through the operators' HTTP API. First, the refund is
// approved at the moment the credit is proposed. Then a refund whose answer is lost holds
// the lease through unknown_outcome until the reconciler settles it: the
// two credits proposed meanwhile wait, and then run in the order they were
// created. Last, the refund guard (per charge) refuses refunds beyond the
// captured amount.
func TestPattern5CompetingRuns(t *testing.T) {
	t.Parallel()
	s := start(t)
	const customer = "cust_5"
	capture, err := s.agent.SubmitAndWait(s.ctx, intent("support:call_0", "wf_support", "capture_payment",
		`{"order_id":"order_5","customer_id":"cust_5","amount_cents":5000,"currency":"USD"}`))
	require.NoError(t, err)
	require.Equal(t, client.StatusCompletedSuccess, capture.Status)
	charge := capture.ExternalObjectID

	const busy = 300 * time.Millisecond
	s.fault(t, vendors.Fault{Route: vendors.RouteRefund, Kind: vendors.FaultLatency, Delay: busy})
	s.fault(t, vendors.Fault{Route: vendors.RouteCredit, Kind: vendors.FaultLatency, Delay: busy, Times: 3})
	supportAgent := &wire.Actor{Type: "agent", ID: "support-agent"}
	refund := func(eventID string, amount int) wire.Intent {
		in := intent(eventID, "wf_support", "refund_payment",
			fmt.Sprintf(`{"charge_id":%q,"customer_id":%q,"amount_cents":%d,"reason":"damaged item"}`, charge, customer, amount))
		in.Actor = supportAgent
		return in
	}
	credit := func(eventID, offer string, amount int) wire.Intent {
		return intent(eventID, "wf_retention", "credit_account",
			fmt.Sprintf(`{"customer_id":%q,"offer_id":%q,"amount_cents":%d,"reason":"retention offer"}`, customer, offer, amount))
	}
	// A person approves through the operators' HTTP API, as an approver
	// would (opledger ops approve does the same): read the operation, then
	// approve exactly the arguments shown.
	approve := func(id string) error {
		var shown struct {
			Operation op.Operation `json:"operation"`
		}
		if err := s.api(http.MethodGet, "/v1/operations/"+id, nil, &shown); err != nil {
			return err
		}
		return s.api(http.MethodPost, "/v1/operations/"+id+"/approve",
			map[string]string{"args_hash": shown.Operation.ArgsHash, "reason": "refund agreed with the customer"}, nil)
	}

	// Round 1, at once: the refund is approved as the credit is proposed.
	r1 := s.submit(t, refund("support:call_1", 1000))
	require.Equal(t, client.StatusAwaitingApproval, r1.Status)
	var c1 client.Answer
	var approveErr, creditErr error
	go1 := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); <-go1; approveErr = approve(r1.OperationID) }()
	go func() {
		defer wg.Done()
		<-go1
		c1, creditErr = s.agent.Submit(s.ctx, credit("retention:call_1", "winback_1", 1500))
	}()
	close(go1)
	wg.Wait()
	require.NoError(t, approveErr)
	require.NoError(t, creditErr)
	require.Equal(t, op.DecisionNew, c1.DedupeDecision)
	require.Equal(t, client.StatusCompletedSuccess, s.final(t, r1.OperationID).Status)
	require.Equal(t, client.StatusCompletedSuccess, s.final(t, c1.OperationID).Status)

	// Round 2: the refund's answer is lost. While it is dispatched and then
	// unknown, two credits are proposed, one after the other.
	s.fault(t, vendors.Fault{Route: vendors.RouteRefund, Kind: vendors.FaultTimeoutAfterCommit})
	r2 := s.submit(t, refund("support:call_2", 500))
	require.NoError(t, approve(r2.OperationID))
	s.await(t, "the second refund is dispatched", func() bool {
		o, err := s.st.Operation(s.ctx, r2.OperationID)
		return err == nil && o.State == op.StateDispatched
	})
	c2 := s.submit(t, credit("retention:call_2", "winback_2", 700))
	c3 := s.submit(t, credit("retention:call_3", "winback_3", 300))
	for _, id := range []string{r2.OperationID, c2.OperationID, c3.OperationID} {
		require.Equal(t, client.StatusCompletedSuccess, s.final(t, id).Status)
	}

	// The lease holder's outcome was unknown, and it kept the lease until
	// the reconciler settled it: the credits waited for that.
	require.Equal(t, []op.Event{op.EventCreate, op.EventRequireApproval, op.EventApprove, op.EventDispatch, op.EventOutcomeUnknown, op.EventSucceed},
		s.history(t, r2.OperationID))
	settled := s.eventAt(t, r2.OperationID, op.EventSucceed)
	require.True(t, s.operation(t, c3.OperationID).CreatedAt.Before(settled), "both credits were waiting when the refund settled")
	require.True(t, s.eventAt(t, c2.OperationID, op.EventDispatch).After(settled), "no credit ran while the refund's outcome was unknown")
	require.True(t, s.eventAt(t, c3.OperationID, op.EventDispatch).After(s.eventAt(t, c2.OperationID, op.EventDispatch)),
		"the waiting credits ran in the order they were created")

	// One at a time, in the ledger's order, at the vendor and in the ledger.
	ids := []string{r1.OperationID, c1.OperationID, r2.OperationID, c2.OperationID, c3.OperationID}
	slices.SortFunc(ids, func(a, b string) int {
		return s.eventAt(t, a, op.EventDispatch).Compare(s.eventAt(t, b, op.EventDispatch))
	})
	var ledgerOrder []string
	for i, id := range ids {
		o := s.operation(t, id)
		ledgerOrder = append(ledgerOrder, o.IdempotencyKey)
		if i > 0 {
			prev := s.eventAt(t, ids[i-1], op.EventSucceed)
			require.True(t, s.eventAt(t, id, op.EventDispatch).After(prev), "%s took the lease before %s let it go", id, ids[i-1])
		}
	}
	acts := s.Vendors.Activities(customer)
	var vendorOrder []string
	for i, a := range acts {
		vendorOrder = append(vendorOrder, a.IdempotencyKey)
		for _, b := range acts[:i] {
			require.False(t, overlaps(a, b), "the vendor processed %s and %s at the same time", a.IdempotencyKey, b.IdempotencyKey)
		}
	}
	require.Equal(t, ledgerOrder, vendorOrder, "the vendor saw them in the order the ledger leased them")
	st := s.Vendors.Stats()
	require.Equal(t, [2]int{2, 3}, [2]int{st.Refunds, st.Credits}, "refunds, credits")
	for _, kind := range []string{vendors.KindRefund, vendors.KindCredit} {
		for key, n := range s.Vendors.EffectsByKey(kind) {
			require.Equal(t, 1, n, key)
		}
	}

	// Together they stay within policy: refunds of this charge may not
	// exceed the 5000 captured (1000 + 500 refunded).
	over := s.submit(t, refund("support:call_3", 4000))
	require.Equal(t, op.DecisionRejected, over.DedupeDecision)
	require.Contains(t, over.Reason, "state guard")
	within := s.submit(t, refund("support:call_4", 3500))
	require.Equal(t, op.DecisionNew, within.DedupeDecision)
	require.Equal(t, client.StatusAwaitingApproval, within.Status)
}

// system is a whole opledger for one test, with an agent, a log of
// every result published, and an approver's token for the operators' API.
type system struct {
	*app.Stack
	st       *store.Store
	agent    *client.Client
	results  *resultLog
	ctx      context.Context
	approver string
}

// api calls the operators' HTTP API as the approver and decodes a 200's
// body into out (when not nil); any other status is an error.
func (s *system) api(method, path string, body, out any) error {
	var r io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return err
		}
		r = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(s.ctx, method, s.HTTP.URL()+path, r)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+s.approver)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, data)
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(data, out)
}

// start runs a stack on a fresh database with the named services in this
// process (all when none), quick maintenance and reconciliation.
func start(t *testing.T, run ...string) *system {
	t.Helper()
	return startWith(t, app.RegistryConfig{}, run...)
}

// startWith is start with the registry reg names.
func startWith(t *testing.T, reg app.RegistryConfig, run ...string) *system {
	t.Helper()
	token, entry, err := api.GenerateToken("approver_1", ops.RoleApprover)
	require.NoError(t, err)
	tokens, err := api.NewTokens([]api.TokenEntry{entry})
	require.NoError(t, err)
	d, err := app.StartStack(context.Background(), app.StackConfig{
		HTTPAddr: "127.0.0.1:0", APITokens: tokens, Registry: reg,
		Infra: app.InfraConfig{DatabaseURL: testdb.New(t), MemoryStreams: true},
		Services: app.ServicesConfig{Run: run,
			Reconcile: reconcile.Config{SettleDelay: 500 * time.Millisecond},
			Maintain: maintain.Config{SweepInterval: 100 * time.Millisecond, ElectInterval: 100 * time.Millisecond,
				DispatchedGrace: 500 * time.Millisecond}},
	})
	require.NoError(t, err)
	t.Cleanup(d.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	t.Cleanup(cancel)
	agent, err := client.Connect(d.Infra.NATSURL, t.Name())
	require.NoError(t, err)
	t.Cleanup(agent.Close)
	s := &system{Stack: d, st: d.Services.Store, agent: agent, ctx: ctx, approver: token}
	s.results = watch(t, ctx, agent)
	return s
}

func intent(eventID, workflowID, tool, args string) wire.Intent {
	return wire.Intent{EventID: eventID, WorkflowID: workflowID, Tool: tool, Args: json.RawMessage(args)}
}

func (s *system) fault(t *testing.T, f vendors.Fault) {
	t.Helper()
	require.NoError(t, s.Vendors.InjectFault(f))
}

// submit publishes an intent and returns the ledger's answer.
func (s *system) submit(t *testing.T, in wire.Intent) client.Answer {
	t.Helper()
	a, err := s.agent.Submit(s.ctx, in)
	require.NoError(t, err)
	return a
}

// final waits for the operation's final result: completed, failed,
// rejected, cancelled or compensated. (Results of operations waiting on a
// person are not final: they are waited through.)
func (s *system) final(t *testing.T, id string) client.Result {
	t.Helper()
	return s.results.wait(t, "operation "+id+" final", func(r client.Result) bool {
		return r.OperationID == id && r.DedupeDecision == op.DecisionNew && (r.Final || r.Status.Final())
	})
}

func (s *system) operation(t *testing.T, id string) *op.Operation {
	t.Helper()
	o, err := s.st.Operation(s.ctx, id)
	require.NoError(t, err)
	return o
}

// history is the operation's events, in order.
func (s *system) history(t *testing.T, id string) []op.Event {
	t.Helper()
	events, err := s.st.Events(s.ctx, id)
	require.NoError(t, err)
	var out []op.Event
	for _, e := range events {
		out = append(out, e.Event)
	}
	return out
}

// eventAt is when the operation's first event ev happened, on the database's clock.
func (s *system) eventAt(t *testing.T, id string, ev op.Event) time.Time {
	t.Helper()
	events, err := s.st.Events(s.ctx, id)
	require.NoError(t, err)
	for _, e := range events {
		if e.Event == ev {
			return e.At
		}
	}
	t.Fatalf("operation %s has no %s event", id, ev)
	return time.Time{}
}

func (s *system) inbox(t *testing.T, eventID string) *store.InboxEntry {
	t.Helper()
	e, err := s.st.InboxEntry(s.ctx, ingest.Source, eventID)
	require.NoError(t, err)
	return e
}

func (s *system) requireStates(t *testing.T, want map[op.State]int64) {
	t.Helper()
	got, err := s.st.CountByState(s.ctx)
	require.NoError(t, err)
	require.Equal(t, want, got)
}

// requireDecisions waits for the inbox's decisions to be want: a repeat's
// answer leaves ahead of its inbox record (store.firstAnswers), so the
// agent can hold the answer a moment before the record commits.
func (s *system) requireDecisions(t *testing.T, want map[op.Decision]int64) {
	t.Helper()
	var got map[op.Decision]int64
	assert.Eventually(t, func() bool {
		var err error
		got, err = s.st.DecisionCounts(s.ctx)
		require.NoError(t, err)
		for d, n := range got {
			if n == 0 {
				delete(got, d)
			}
		}
		return assert.ObjectsAreEqual(want, got)
	}, 5*time.Second, 10*time.Millisecond)
	require.Equal(t, want, got)
}

// vendorObject asks the vendor's lookup route for the id of what it holds.
func (s *system) vendorObject(t *testing.T, path string) string {
	t.Helper()
	resp, err := http.Get(s.Vendors.URL() + path)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var obj struct {
		ID string `json:"id"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&obj))
	return obj.ID
}

// await waits for a condition on the ledger that no result announces.
func (s *system) await(t *testing.T, what string, cond func() bool) {
	t.Helper()
	require.Eventually(t, cond, 20*time.Second, 10*time.Millisecond, what)
}

// resultLog keeps every result published on opledger.results.>, with
// repeats dropped (client.Watch), and wakes whoever waits for one.
type resultLog struct {
	mu   sync.Mutex
	all  []client.Result
	more chan struct{} // closed when a result arrives or the stream ends
	done bool
}

func watch(t *testing.T, ctx context.Context, agent *client.Client) *resultLog {
	t.Helper()
	ch, err := agent.Watch(ctx, wire.ResultSubjectPrefix+">")
	require.NoError(t, err)
	l := &resultLog{more: make(chan struct{})}
	go func() {
		for r := range ch {
			l.mu.Lock()
			l.all = append(l.all, r)
			close(l.more)
			l.more = make(chan struct{})
			l.mu.Unlock()
		}
		l.mu.Lock()
		l.done = true
		close(l.more)
		l.mu.Unlock()
	}()
	return l
}

// wait returns the first result, in arrival order, that match accepts.
func (l *resultLog) wait(t *testing.T, what string, match func(client.Result) bool) client.Result {
	t.Helper()
	seen := 0
	for {
		l.mu.Lock()
		for ; seen < len(l.all); seen++ {
			if match(l.all[seen]) {
				r := l.all[seen]
				l.mu.Unlock()
				return r
			}
		}
		more, done := l.more, l.done
		l.mu.Unlock()
		if done {
			t.Fatalf("waiting for %s: the results stream ended (timeout or closed client)", what)
		}
		<-more
	}
}

// process is an opledger service running as a process of its own.
type process struct {
	name string
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	logs *bytes.Buffer // read only once done is closed
}

// startProcess starts this test binary as the named service against the
// system's Postgres, NATS and vendors, with failpoints armed (none if "").
// It is stopped with SIGTERM when the test ends, and its logs are printed
// if the test failed.
func (s *system) startProcess(t *testing.T, service, instance, failpoints string) *process {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-instance", instance, "-http", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), serviceEnv+"="+service, "DATABASE_URL="+s.Infra.DatabaseURL, "NATS_URL="+s.Infra.NATSURL,
		"OPLEDGER_LOG=warn", "OPLEDGER_LOG_FORMAT=json", failpoint.EnvVar+"="+failpoints)
	for _, v := range app.VendorNames {
		cmd.Env = append(cmd.Env, app.VendorEnv(v)+"="+s.Vendors.URL())
	}
	p := &process{name: instance, cmd: cmd, done: make(chan struct{}), logs: &bytes.Buffer{}}
	cmd.Stdout, cmd.Stderr = p.logs, p.logs // one writer: exec calls it from one goroutine at a time
	require.NoError(t, cmd.Start())
	go func() {
		_ = cmd.Wait() // the exit status is read from cmd.ProcessState
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-p.done:
			case <-time.After(10 * time.Second):
				_ = cmd.Process.Kill()
				<-p.done
			}
		}
		if t.Failed() {
			t.Logf("%s output:\n%s", instance, p.logs)
		}
	})
	return p
}

// killedBy waits for the process to die of sig.
func (p *process) killedBy(t *testing.T, sig syscall.Signal) {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s still running", p.name)
	}
	ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
	require.True(t, ok)
	require.True(t, ws.Signaled() && ws.Signal() == sig, "%s: %s", p.name, p.cmd.ProcessState)
}

// assertNoError is require.NoError for goroutines other than the test's.
func assertNoError(t *testing.T, err error) bool {
	t.Helper()
	if err != nil {
		t.Errorf("unexpected error: %v", err)
		return false
	}
	return true
}

// overlaps reports whether the vendor processed a and b at the same time.
func overlaps(a, b vendors.Activity) bool {
	return a.Start.Before(b.End) && b.Start.Before(a.End)
}
