package ingest_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/dispatch"
	"github.com/opledger/opledger/internal/ingest"
	"github.com/opledger/opledger/internal/vendors"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/wire"
)

// Look-alike inputs are one action. Seen: three spellings of one address
// made three operations and three emails to one mailbox; an order id with a
// zero-width space or a byte order mark made a second and a third charge.
//
// Breaking it: without identity normalization each look-alike is
// decision new.
func TestLookAlikesAreOneAction(t *testing.T) {
	t.Parallel()
	b := setup(t)
	email := func(ev, to string) *wireAnswer {
		return answer(b.ingestIntent(t, wire.Intent{EventID: ev, WorkflowID: "wf_1", Tool: "send_email",
			Args: json.RawMessage(fmt.Sprintf(`{"to":%s,"template":"payment_receipt","reference":"order_1"}`, jsonString(to)))}))
	}
	first := email("evt_m1", "victim@example.com")
	require.Equal(t, op.DecisionNew, first.decision)
	for i, to := range []string{"Victim@Example.COM", "victim@EXAMPLE.com", "victim@example.com\u200b"} {
		a := email(fmt.Sprintf("evt_m%d", i+2), to)
		require.Equal(t, op.DecisionDuplicateOperation, a.decision, "%q", to)
		require.Equal(t, first.operation, a.operation)
	}
	order := func(ev, id string) *wireAnswer {
		return answer(b.ingestIntent(t, wire.Intent{EventID: ev, WorkflowID: "wf_1", Tool: "capture_payment",
			Args: json.RawMessage(fmt.Sprintf(`{"order_id":%s,"customer_id":"c","amount_cents":4900,"currency":"USD"}`, jsonString(id)))}))
	}
	charge := order("evt_o1", "ord_77")
	require.Equal(t, op.DecisionNew, charge.decision)
	for i, id := range []string{"ord_77\u200b", "\ufefford_77", "ord\u00ad_77", "ord_\u202e77"} {
		a := order(fmt.Sprintf("evt_o%d", i+2), id)
		require.Equal(t, op.DecisionDuplicateOperation, a.decision, "%q", id)
		require.Equal(t, charge.operation, a.operation)
	}
	// Different orders stay different.
	require.Equal(t, op.DecisionNew, order("evt_o9", "ord_78").decision)
	nul := order("evt_o10", "ord_77\u0000")
	require.Equal(t, op.DecisionRejected, nul.decision, "a control character is garbage, not a look-alike")
}

type wireAnswer struct {
	decision  op.Decision
	operation string
}

func answer(a *ingest.Answer) *wireAnswer { return &wireAnswer{a.Decision, a.Result.OperationID} }

// "Set it back" is a new action. Seen: active → suspended → active was
// answered duplicate_operation the third time, "completed", while the CRM
// record stayed suspended. With {entity_version} in the key, a repeat of
// the last action on the record is still a repeat, and any other action
// moves the record's version on.
//
// Breaking it: without {entity_version}, evt_4 is a duplicate of evt_1 and
// the record ends suspended.
func TestSettingBackIsANewAction(t *testing.T) {
	t.Parallel()
	b := setup(t)
	d := dispatch.New(dispatch.Config{Name: "dispatcher-1"}, b.Store, b.Bus, b.Registry, b.Adapters, nil, b.Log)
	set := func(ev, value string) *ingest.Answer {
		a := b.ingestIntent(t, wire.Intent{EventID: ev, WorkflowID: "wf_1", Tool: "update_crm_record",
			Args: json.RawMessage(fmt.Sprintf(`{"record_id":"rec_1","field":"status","value":%q}`, value))})
		if a.Decision == op.DecisionNew {
			o := b.Operation(t, a.Result.OperationID)
			require.NoError(t, d.Handle(b.Ctx, b.LastCommand(t, o, wire.KindDispatch).Delivery(1)))
			require.Equal(t, op.StateCompletedSuccess, b.Operation(t, o.ID).State)
		}
		return a
	}
	status := func() string {
		rec, ok := b.Vendors.CRMRecord("rec_1")
		require.True(t, ok)
		var v string
		require.NoError(t, json.Unmarshal(rec.Fields["status"], &v))
		return v
	}
	first := set("evt_1", "active")
	require.Equal(t, op.DecisionNew, first.Decision)
	again := set("evt_2", "active")
	require.Equal(t, op.DecisionDuplicateOperation, again.Decision, "the same action twice in a row is one")
	require.Equal(t, first.Result.OperationID, again.Result.OperationID)
	require.Equal(t, op.DecisionNew, set("evt_3", "suspended").Decision)
	require.Equal(t, "suspended", status())
	back := set("evt_4", "active")
	require.Equal(t, op.DecisionNew, back.Decision, "setting it back after another change is a new action")
	require.Equal(t, "active", status())
	require.Equal(t, op.DecisionDuplicateOperation, set("evt_5", "active").Decision)
	require.NotEqual(t, first.Result.IdempotencyKey, back.Result.IdempotencyKey)
	require.Len(t, b.Vendors.EffectsByKey(vendors.KindCRM), 3, "three changes at the vendor")
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// {entity_version} counts the actions accepted on the entity, not the ones
// completed, and that is what keeps "set it back" right:
//
//   - Actions in flight: active, suspended and active again are accepted
//     before any has run (the lease runs them in that order). Counting
//     completed actions, all three would see version 0 and the third would
//     be a repeat of the first: the record would end suspended.
//   - A change that failed: active (done) → suspended (refused for good by
//     the vendor) → active is a new action under accepted counting: the
//     vendor is asked to set active once more, which a set makes harmless,
//     and the record is active either way. Sending the failed suspended
//     again is a repeat of it (its version and key), not a new attempt.
func TestEntityVersionCountsAcceptedActions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	d := dispatch.New(dispatch.Config{Name: "dispatcher-1"}, b.Store, b.Bus, b.Registry, b.Adapters, nil, b.Log)
	accept := func(ev, record, value string) *ingest.Answer {
		return b.ingestIntent(t, wire.Intent{EventID: ev, WorkflowID: "wf_1", Tool: "update_crm_record",
			Args: json.RawMessage(fmt.Sprintf(`{"record_id":%q,"field":"status","value":%q}`, record, value))})
	}
	run := func(a *ingest.Answer) op.State {
		o := b.Operation(t, a.Result.OperationID)
		require.NoError(t, d.Handle(b.Ctx, b.LastCommand(t, o, wire.KindDispatch).Delivery(1)))
		return b.Operation(t, o.ID).State
	}
	status := func(record string) string {
		rec, ok := b.Vendors.CRMRecord(record)
		require.True(t, ok)
		var v string
		require.NoError(t, json.Unmarshal(rec.Fields["status"], &v))
		return v
	}

	// In flight.
	a1, s2, a3 := accept("evt_f1", "rec_f", "active"), accept("evt_f2", "rec_f", "suspended"), accept("evt_f3", "rec_f", "active")
	for _, a := range []*ingest.Answer{a1, s2, a3} {
		require.Equal(t, op.DecisionNew, a.Decision, "each change accepted while the others wait is an action of its own")
	}
	require.Equal(t, "crm:rec_f:status:active:e1:v1", a1.Result.IdempotencyKey)
	require.Equal(t, "crm:rec_f:status:suspended:e2:v1", s2.Result.IdempotencyKey)
	require.Equal(t, "crm:rec_f:status:active:e3:v1", a3.Result.IdempotencyKey)
	for _, a := range []*ingest.Answer{a1, s2, a3} {
		require.Equal(t, op.StateCompletedSuccess, run(a))
	}
	require.Equal(t, "active", status("rec_f"), "the last change asked for is the one that stays")

	// A change that failed for good in between.
	require.Equal(t, op.StateCompletedSuccess, run(accept("evt_p1", "rec_p", "active")))
	require.NoError(t, b.Vendors.InjectFault(vendors.Fault{Route: vendors.RouteCRM, Kind: vendors.FaultClientError, Times: 1}))
	failed := accept("evt_p2", "rec_p", "suspended")
	require.Equal(t, op.StateFailedPermanent, run(failed))
	require.Equal(t, "active", status("rec_p"))
	again := accept("evt_p3", "rec_p", "suspended")
	require.Equal(t, op.DecisionDuplicateOperation, again.Decision, "the failed change sent again is a repeat of it")
	require.Equal(t, failed.Result.OperationID, again.Result.OperationID)
	back := accept("evt_p4", "rec_p", "active")
	require.Equal(t, op.DecisionNew, back.Decision)
	require.Equal(t, "crm:rec_p:status:active:e3:v1", back.Result.IdempotencyKey)
	require.Equal(t, op.StateCompletedSuccess, run(back))
	require.Equal(t, "active", status("rec_p"))
}
