package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/opledger/opledger/internal/app"
	"github.com/opledger/opledger/internal/vendors"
	"github.com/opledger/opledger/pkg/client"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/wire"
)

// Demo replays the article's 2:13 a.m. incident against a running opledger:
// the payment call times out after the vendor captured the charge, the agent
// retries (a new tool call id, the same action) and its first message is
// redelivered, and a confirmation email is requested on both paths. It prints
// what the agent was told and what happened at the vendors, and returns an
// error unless the vendors saw exactly one charge and one email.
func Demo(ctx context.Context, d *app.Stack, w io.Writer) error {
	cl, err := client.Connect(d.Infra.NATSURL, "demo-agent")
	if err != nil {
		return err
	}
	defer cl.Close()
	wf := "wf_demo_" + op.NewID("x")[2:12]
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	results, err := cl.Results(ctx, wire.ResultSubject(wf))
	if err != nil {
		return err
	}
	// The vendor captures the charge, then the response never arrives.
	if err := d.Vendors.InjectFault(vendors.Fault{Route: vendors.RouteCapture, Kind: vendors.FaultTimeoutAfterCommit, Times: 1}); err != nil {
		return err
	}
	payment := json.RawMessage(`{"order_id":"order_123","customer_id":"cust_456","amount_cents":4900,"currency":"USD"}`)
	email := json.RawMessage(`{"to":"customer@example.com","template":"payment_receipt","reference":"order_123"}`)
	say := func(format string, a ...any) { fmt.Fprintf(w, format+"\n", a...) }
	send := func(eventID, tool string, args json.RawMessage) error {
		return cl.Publish(ctx, wire.Intent{EventID: eventID, WorkflowID: wf, Tool: tool, Args: args,
			Actor: &wire.Actor{Type: "agent", ID: "support-bot"}}, "")
	}
	// seen keeps every result, so a wait can be satisfied by one that arrived earlier.
	var seen []wire.Result
	await := func(eventID string, done func(wire.Result) bool) (wire.Result, error) {
		match := func(r wire.Result) bool { return (eventID == "" || r.EventID == eventID) && done(r) }
		for _, r := range seen {
			if match(r) {
				return r, nil
			}
		}
		for {
			select {
			case r := <-results:
				seen = append(seen, r)
				say("  ← %-15s %-16s status=%-17s decision=%-19s %s", r.EventID, r.Tool, r.Status, r.DedupeDecision, r.SafeUserMessage)
				if match(r) {
					return r, nil
				}
			case <-ctx.Done():
				return wire.Result{}, fmt.Errorf("demo: no result for %s: %w", eventID, ctx.Err())
			}
		}
	}
	statusIs := func(states ...op.State) func(wire.Result) bool {
		return func(r wire.Result) bool {
			for _, s := range states {
				if r.Status == string(s) {
					return true
				}
			}
			return false
		}
	}

	say("02:13 The agent captures $49.00 for order_123. The vendor charges the card, then the response is lost.")
	if err := send("conv_42:call_1", "capture_payment", payment); err != nil {
		return err
	}
	first, err := await("conv_42:call_1", statusIs(op.StateUnknownOutcome, op.StateCompletedSuccess))
	if err != nil {
		return err
	}
	say("02:13 opledger records unknown_outcome; the reconciler will ask the vendor by idempotency key, not charge again.")
	say("02:13 The agent times out too and retries the capture under a new tool-call id.")
	if err := send("conv_42:call_2", "capture_payment", payment); err != nil {
		return err
	}
	if _, err := await("conv_42:call_2", func(wire.Result) bool { return true }); err != nil {
		return err
	}
	say("02:13 The agent's queue redelivers the first tool call.")
	// A redelivery is the same message again, byte for byte (actor
	// included): the ledger answers it duplicate_event. Different bytes
	// under the same event id would be a conflict.
	if err := send("conv_42:call_1", "capture_payment", payment); err != nil {
		return err
	}
	again, err := await("conv_42:call_1", func(r wire.Result) bool { return r.DedupeDecision != op.DecisionNew })
	if err != nil {
		return err
	}
	if again.DedupeDecision != op.DecisionDuplicateEvent || again.OperationID != first.OperationID {
		return fmt.Errorf("demo: the redelivered tool call was answered %s (operation %s), not duplicate_event of %s",
			again.DedupeDecision, again.OperationID, first.OperationID)
	}
	if first, err = await("", func(r wire.Result) bool {
		return r.OperationID == first.OperationID && r.Status == string(op.StateCompletedSuccess)
	}); err != nil {
		return err
	}
	say("02:14 The payment is confirmed. Both agent paths now send the confirmation email.")
	if err := send("conv_42:call_3", "send_email", email); err != nil {
		return err
	}
	if err := send("conv_42:call_4", "send_email", email); err != nil {
		return err
	}
	answer, err := await("conv_42:call_3", func(wire.Result) bool { return true })
	if err != nil {
		return err
	}
	if _, err := await("conv_42:call_4", func(wire.Result) bool { return true }); err != nil {
		return err
	}
	if _, err := await("", func(r wire.Result) bool { return r.OperationID == answer.OperationID && r.Final }); err != nil {
		return err
	}
	time.Sleep(300 * time.Millisecond) // let any duplicate that slipped through reach the vendor

	st := d.Vendors.Stats()
	say("")
	say("At the vendors: %d charge(s), %d email(s) (payment requests seen: %d).", st.Captures, st.Emails, st.Requests[vendors.RouteCapture])
	evs, err := d.Services.Store.Events(ctx, first.OperationID)
	if err != nil {
		return err
	}
	say("Ledger history of %s (%s):", first.OperationID, first.IdempotencyKey)
	for _, e := range evs {
		say("  %2d %-16s %-17s → %-17s epoch=%d %s", e.Seq, e.Event, e.From, e.To, e.LeaseEpoch, e.Actor)
	}
	if st.Captures != 1 || st.Emails != 1 {
		return fmt.Errorf("demo: expected one charge and one email, the vendors saw %d and %d", st.Captures, st.Emails)
	}
	say("One charge, one email.")
	return nil
}
