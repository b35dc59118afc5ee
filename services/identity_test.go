package services_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/proctest"
	"github.com/opledger/opledger/internal/vendors"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/wire"
)

// TestIdentityAcrossProcesses sends issue 8's inputs through NATS to the
// service binaries, as an outside client would, and counts what the vendor
// did per mailbox, per order and per record value:
//
//   - look-alikes: one address in three spellings (and with a zero-width
//     space) is one email to one mailbox; an order id with U+200B or U+FEFF
//     is one charge of that order, and another order is another charge;
//   - set it back: a CRM record's status active, suspended, active again is
//     three changes, and the record ends active;
//   - strict decoding: {"tool":"get_account_status","TOOL":"capture_payment"}
//     and a tool given twice are rejected, and nothing is charged;
//   - invalid UTF-8: two event ids that differ only in an invalid byte are
//     both rejected (never one taken for the other, which a U+FFFD
//     replacement made a conflict), and so is an intent whose traceparent
//     header is not UTF-8; none is charged.
func TestIdentityAcrossProcesses(t *testing.T) {
	t.Parallel()
	sys := proctest.Start(t, proctest.Options{})
	const wf = "wf_id"

	// Look-alikes, each sent under an event id of its own once the first is answered.
	send := func(in wire.Intent) wire.Result {
		t.Helper()
		sys.Publish(in)
		var ans wire.Result
		sys.WaitFor("the answer to "+in.EventID, time.Minute, func() bool {
			for _, r := range sys.Answers(in.EventID) {
				if r.DedupeDecision != op.DecisionNew || r.Version <= 2 { // the answer, not a later result
					ans = r
					return true
				}
			}
			return false
		})
		return ans
	}
	email := func(ev, to string) wire.Result {
		return send(wire.Intent{EventID: ev, WorkflowID: wf, Tool: "send_email", Args: proctest.EmailArgs(to, "order_la")})
	}
	capture := func(ev, order string) wire.Result {
		return send(wire.Intent{EventID: ev, WorkflowID: wf, Tool: "capture_payment", Args: proctest.CaptureArgs(order, "cust_1", 4900)})
	}
	first := email("la:mail_1", "victim@example.com")
	require.Equal(t, op.DecisionNew, first.DedupeDecision)
	for i, to := range []string{"Victim@Example.COM", "victim@EXAMPLE.com", "victim@example.com\u200b"} {
		a := email(fmt.Sprintf("la:mail_%d", i+2), to)
		require.Equal(t, op.DecisionDuplicateOperation, a.DedupeDecision, "%q", to)
		require.Equal(t, first.OperationID, a.OperationID, "%q", to)
	}
	charge := capture("la:order_1", "ord_la")
	require.Equal(t, op.DecisionNew, charge.DedupeDecision)
	for i, order := range []string{"ord_la\u200b", "\ufefford_la"} {
		a := capture(fmt.Sprintf("la:order_%d", i+2), order)
		require.Equal(t, op.DecisionDuplicateOperation, a.DedupeDecision, "%q", order)
		require.Equal(t, charge.OperationID, a.OperationID, "%q", order)
	}
	require.Equal(t, op.DecisionNew, capture("la:order_9", "ord_lb").DedupeDecision, "another order is another charge")

	// Set it back: each change once the one before has settled.
	var changes []string
	for i, v := range []string{"active", "suspended", "active"} {
		a := send(wire.Intent{EventID: fmt.Sprintf("sb:%d", i), WorkflowID: wf, Tool: "update_crm_record",
			Args: json.RawMessage(fmt.Sprintf(`{"record_id":"rec_sb","field":"status","value":%q}`, v))})
		require.Equal(t, op.DecisionNew, a.DedupeDecision, "change %d (%s) is an action of its own", i, v)
		changes = append(changes, a.OperationID)
		sys.WaitFor("change "+v+" completed", time.Minute, func() bool {
			r, ok := sys.LatestResult(a.OperationID)
			return ok && r.Status == string(op.StateCompletedSuccess)
		})
	}
	require.Len(t, changes, 3)

	// Strict decoding and invalid UTF-8, sent as raw bytes.
	rawCapture := func(eventID, order string) string {
		return fmt.Sprintf(`"spec":"opledger.intent.v1","event_id":"%s","workflow_id":"%s","args":{"order_id":"%s","customer_id":"c","amount_cents":4900,"currency":"USD"}`, eventID, wf, order)
	}
	subject := wire.IntentSubject(wf)
	withID := func(id string) nats.Header { return nats.Header{wire.HeaderMsgID: []string{id}} }
	rejected := map[string]string{} // answer's event id → what its reason must say
	sys.PublishRaw(subject, withID("st:1"), []byte(`{`+rawCapture("st:1", "ord_st1")+`,"tool":"get_account_status","TOOL":"capture_payment"}`))
	rejected["st:1"] = `unknown field "TOOL" (field names are case-sensitive: "tool")`
	sys.PublishRaw(subject, withID("st:2"), []byte(`{`+rawCapture("st:2", "ord_st2")+`,"tool":"get_account_status","tool":"capture_payment"}`))
	rejected["st:2"] = `field "tool" appears twice`
	for _, b := range []string{"\xff", "\xfe"} {
		body := []byte(`{` + rawCapture("h:utf"+b, "ord_utf_"+hex.EncodeToString([]byte(b))) + `,"tool":"capture_payment"}`)
		sum := sha256.Sum256(body)
		sys.PublishRaw(subject, nil, body)
		rejected["sha256:"+hex.EncodeToString(sum[:])] = "invalid UTF-8 at byte"
	}
	hdr := withID("hdr:1")
	hdr.Set(wire.HeaderTraceparent, "00-\xff\xfe-01")
	sys.PublishRaw(subject, hdr, []byte(`{`+rawCapture("hdr:1", "ord_hdr")+`,"tool":"capture_payment"}`))
	rejected["hdr:1"] = "header traceparent is not valid UTF-8"
	for ev, why := range rejected {
		sys.WaitFor("the answer to "+ev, time.Minute, func() bool { return len(sys.Answers(ev)) > 0 })
		for _, r := range sys.Answers(ev) {
			require.Equal(t, op.DecisionRejected, r.DedupeDecision, "%s: %s", ev, r.Reason)
			require.Equal(t, string(op.StateRejected), r.Status)
			require.Empty(t, r.OperationID, "%s: nothing was created, nor taken for another", ev)
			require.Contains(t, r.Reason, why, ev)
		}
	}

	ops, _ := sys.WaitSettled(time.Minute)
	require.Len(t, ops, 1+2+3, "one email, two charges, three changes")
	e := sys.CheckEffects(ops)
	require.Equal(t, map[string]int{"victim@example.com": 1}, e.ByMailbox, "one email to one mailbox")
	require.Equal(t, map[string]int{"ord_la": 1, "ord_lb": 1}, e.ByOrder, "one charge per order, none for a rejected intent")
	crm := sys.Vendors.EffectsByKey(vendors.KindCRM)
	require.Len(t, crm, 3, "three changes of the record: %v", crm)
	rec, ok := sys.Vendors.CRMRecord("rec_sb")
	require.True(t, ok)
	require.JSONEq(t, `"active"`, string(rec.Fields["status"]), "the record ends as last set")
}
