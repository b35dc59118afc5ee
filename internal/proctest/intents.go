package proctest

import (
	"encoding/json"
	"fmt"

	"github.com/opledger/opledger/pkg/wire"
)

// Batch describes a mix of intents: captures and emails, each for its own
// order or mailbox, some of them sent again the ways agents do.
type Batch struct {
	// Prefix makes event ids, orders and mailboxes unique to the batch
	// (lower-case letters and digits).
	Prefix string
	// Workflow receives the results (default "wf_" + Prefix).
	Workflow         string
	Captures, Emails int
	// NoDuplicates sends each intent once.
	NoDuplicates bool
}

// Sent is one intent as a Batch publishes it.
type Sent struct {
	Intent wire.Intent
	// NoMsgID: published without Nats-Msg-Id, so that only the ledger's
	// inbox can tell it is a resend.
	NoMsgID bool
}

// Intents returns the batch's intents in publishing order. For every
// distinct action (a capture for order i, an email to mailbox i) the first
// intent creates it; unless NoDuplicates, every third is retried with a new
// event id and the same arguments (a deliberate retry: duplicate_operation),
// every fourth is resent with the same event id and bytes but no
// Nats-Msg-Id (duplicate_event from the ledger, not JetStream), and every
// fifth capture is sent again for the same order and amount by another
// customer (the same key with other arguments: conflict). Capture 4 (of
// batches with five or more) is above the approval threshold
// (awaiting_approval, never sent), and the last intent is invalid
// (rejected).
func (b Batch) Intents() []Sent {
	wf := b.Workflow
	if wf == "" {
		wf = "wf_" + b.Prefix
	}
	var out []Sent
	add := func(i int, kind, tool string, args, other json.RawMessage) {
		// Every intent names its agent: a call that needs approval must.
		first := wire.Intent{EventID: fmt.Sprintf("%s:%s_%d", b.Prefix, kind, i), WorkflowID: wf, Tool: tool, Args: args,
			Actor: &wire.Actor{Type: "agent", ID: "proctest-agent"}}
		out = append(out, Sent{Intent: first})
		if b.NoDuplicates {
			return
		}
		if i%3 == 0 {
			retry := first
			retry.EventID += "_retry"
			out = append(out, Sent{Intent: retry})
		}
		if i%4 == 1 {
			out = append(out, Sent{Intent: first, NoMsgID: true})
		}
		if other != nil && i%5 == 2 {
			c := first
			c.EventID += "_conflict"
			c.Args = other
			out = append(out, Sent{Intent: c})
		}
	}
	for i := range max(b.Captures, b.Emails) {
		if i < b.Captures {
			order := fmt.Sprintf("%s_order_%d", b.Prefix, i)
			amount := 100 + i
			if i == 4 {
				amount = 2_000_000 // needs approval
			}
			add(i, "capture", "capture_payment", CaptureArgs(order, "cust_1", amount), CaptureArgs(order, "cust_999", amount))
		}
		if i < b.Emails {
			add(i, "email", "send_email", EmailArgs(fmt.Sprintf("%s_user_%d@example.com", b.Prefix, i), fmt.Sprintf("%s_order_%d", b.Prefix, i)), nil)
		}
	}
	if b.Captures > 0 {
		out = append(out, Sent{Intent: wire.Intent{EventID: b.Prefix + ":invalid", WorkflowID: wf, Tool: "capture_payment",
			Args: json.RawMessage(`{"order_id":"x","customer_id":"c","amount_cents":100,"currency":"JPY"}`)}})
	}
	return out
}

// CaptureArgs are capture_payment arguments (USD, below the approval threshold).
func CaptureArgs(orderID, customerID string, amountCents int) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"order_id":%q,"customer_id":%q,"amount_cents":%d,"currency":"USD"}`, orderID, customerID, amountCents))
}

// EmailArgs are send_email arguments: a payment receipt about reference.
func EmailArgs(to, reference string) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"to":%q,"template":"payment_receipt","reference":%q}`, to, reference))
}

// PublishBatch publishes a batch's intents in order and returns them.
func (s *System) PublishBatch(b Batch) []Sent {
	s.t.Helper()
	sent := b.Intents()
	for _, in := range sent {
		s.PublishSent(in)
	}
	return sent
}

// PublishSent publishes one intent of a batch the way it says.
func (s *System) PublishSent(in Sent) {
	s.t.Helper()
	if in.NoMsgID {
		s.PublishWithoutMsgID(in.Intent)
	} else {
		s.Publish(in.Intent)
	}
}
