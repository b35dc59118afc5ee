package wire_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/wire"
)

// intentSeeds are intents valid and hostile, as bytes: the seed corpus of
// the intent door's fuzz targets (run by every go test).
var intentSeeds = []string{
	`{"spec":"opledger.intent.v1","event_id":"conv_1:call_1","workflow_id":"wf_1","tool":"capture_payment","args":{"order_id":"o","customer_id":"c","amount_cents":4900,"currency":"USD"}}`,
	`{"spec":"opledger.intent.v1","event_id":"e","workflow_id":"wf_1","run_id":"r","tool":"t","intent":"i","args":{},"actor":{"type":"agent","id":"a"},"correlation":{"k":"v"},"dedupe_override":{"reason":"why"}}`,
	`{"spec":"opledger.intent.v1","event_id":"e","workflow_id":"wf_1","tool":"t","args":{"a":{"b":[1,2,{"c":null}]}}}`,
	`{"spec":"opledger.intent.v1","spec":"opledger.intent.v1"}`,
	`{"Spec":"opledger.intent.v1"}`,
	`{"spec":"opledger.intent.v1","event_id":"\ud800","workflow_id":"wf_1","tool":"t","args":{}}`,
	"{\"spec\":\"opledger.intent.v1\",\"event_id\":\"e\xff\",\"workflow_id\":\"wf_1\",\"tool\":\"t\",\"args\":{}}",
	`{"spec":"opledger.intent.v1","event_id":"e\u0000","workflow_id":"wf_1","tool":"t","args":{}}`,
	`{"spec":"opledger.intent.v1","event_id":"e","workflow_id":"wf.1","tool":"t","args":{}}`,
	`{"spec":"opledger.intent.v1","event_id":"e","workflow_id":"wf_1","tool":"t","args":[]} trailing`,
	`{"spec":"opledger.intent.v1","event_id":"e","workflow_id":"wf_1","tool":"t","args":{"x":1,"x":2}}`,
	`{"spec":"opledger.intent.v1","event_id":"e","workflow_id":"wf_1","tool":"t","args":{},"actor":{"type":"agent","id":"a","ID":"b"}}`,
	`[` + strings.Repeat(`[`, 200),
	``, `null`, `{}`, `"x"`, `{"spec":1e400}`,
}

// DecodeIntent never panics, refuses with op.ErrInvalid and a stable reason,
// and what it accepts is bounded as documented and reads back the same:
// encoding an accepted intent and decoding it again gives the same intent.
// (Seeds cover both; `go test -fuzz FuzzDecodeIntent ./pkg/wire` explores.)
func FuzzDecodeIntent(f *testing.F) {
	for _, s := range intentSeeds {
		f.Add("opledger.intents.wf_1", "", []byte(s))
	}
	f.Add("opledger.intents.acme.wf_1", "conv_1:call_1", []byte(intentSeeds[0]))
	f.Add("opledger.intents.Bad.wf_1", "", []byte(intentSeeds[0]))
	f.Add("", "x\xff", []byte(intentSeeds[1]))
	f.Fuzz(func(t *testing.T, subject, msgID string, body []byte) {
		in, err := wire.DecodeIntent(subject, msgID, body)
		if err != nil {
			if !errors.Is(err, op.ErrInvalid) {
				t.Fatalf("refusal without op.ErrInvalid: %v", err)
			}
			if wire.RefusalReason(err) == "" {
				t.Fatalf("refusal without a reason: %v", err)
			}
			if !utf8.ValidString(err.Error()) {
				t.Fatalf("refusal text is not UTF-8: %q", err.Error())
			}
			return
		}
		switch {
		case !wire.ValidID(in.EventID), !wire.ValidWorkflowID(in.WorkflowID), !wire.ValidTenant(in.Tenant),
			in.Tool == "", len(in.Args) == 0 || in.Args[0] != '{', len(body) > wire.MaxIntentLen:
			t.Fatalf("accepted an intent out of bounds: %+v", in)
		case msgID != "" && msgID != in.EventID:
			t.Fatalf("accepted a Nats-Msg-Id that is not the event id")
		}
		again, err := json.Marshal(in)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		back, err := wire.DecodeIntent(subject, msgID, again)
		if err != nil {
			t.Fatalf("an accepted intent, re-encoded, is refused: %v\n%s", err, again)
		}
		if back.EventID != in.EventID || back.WorkflowID != in.WorkflowID || back.Tool != in.Tool || back.Tenant != in.Tenant {
			t.Fatalf("read back differently: %+v vs %+v", back, in)
		}
	})
}

// DecodeCommand never panics; a command it accepts names an operation.
func FuzzDecodeCommand(f *testing.F) {
	for _, s := range []string{
		`{"spec":"opledger.command.v1","kind":"dispatch","operation_id":"op_1","tool":"t","idempotency_key":"k","lease_epoch":1,"workflow_id":"wf","state":"pending_dispatch"}`,
		`{"spec":"opledger.command.v1","operation_id":""}`,
		`{"spec":"opledger.command.v1","operation_id":"op_1","operation_id":"op_2"}`,
		`{"spec":"opledger.command.v1","operation_id":"op_1","lease_epoch":1.5}`,
		`{"spec":"opledger.command.v1","operation_id":"op_1","extra":1}`,
		"{\"spec\":\"opledger.command.v1\",\"operation_id\":\"op\xff\"}", `{`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		c, err := wire.DecodeCommand(body)
		if err != nil {
			if !errors.Is(err, op.ErrInvalid) {
				t.Fatalf("refusal without op.ErrInvalid: %v", err)
			}
			return
		}
		if c.Spec != wire.SpecCommand || c.OperationID == "" {
			t.Fatalf("accepted a command without spec or operation id: %+v", c)
		}
	})
}

// ParseIntentSubject never panics, and a subject it accepts names a valid
// tenant and workflow whose canonical subject parses back to them (the
// explicit default tenant and the short form are one tenant).
func FuzzParseIntentSubject(f *testing.F) {
	for _, s := range []string{"opledger.intents.wf_1", "opledger.intents.acme.wf_1", "opledger.intents.default.wf_1",
		"opledger.intents.", "opledger.intents.a.b.c", "opledger.intents.Acme.wf", "opledger.intents.wf\xff", "opledger.results.wf",
		"opledger.intents._unroutable", "opledger.intents.acme.*", "opledger.intents. "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, subject string) {
		tenant, wf, ok := wire.ParseIntentSubject(subject)
		if !ok {
			return
		}
		if !wire.ValidTenant(tenant) || !wire.ValidWorkflowID(wf) {
			t.Fatalf("%q parsed to invalid tenant %q or workflow %q", subject, tenant, wf)
		}
		t2, wf2, ok := wire.ParseIntentSubject(wire.TenantIntentSubject(tenant, wf))
		if !ok || t2 != tenant || wf2 != wf {
			t.Fatalf("%q → %q/%q does not parse back (%q/%q, %v)", subject, tenant, wf, t2, wf2, ok)
		}
	})
}
