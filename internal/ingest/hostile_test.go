package ingest_test

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/ingest"
	"github.com/opledger/opledger/internal/pipetest"
	"github.com/opledger/opledger/pkg/op"
)

// Bytes Postgres refuses in text columns (invalid UTF-8 in the Nats-Msg-Id
// header, NUL inside a JSON string that ends up in the reason) must be
// answered like any other invalid intent. If they reached a text column the
// write would fail with a data exception on every redelivery, and such
// intents would pile up in the shared consumer's ack-pending window until
// ingestion stopped for everyone.
func TestHostileBytesAreRejectedNotRetried(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cases := []struct {
		name    string
		subject string
		header  map[string]string
		body    []byte
	}{
		{"invalid UTF-8 event id header", "opledger.intents.wf_1", map[string]string{"Nats-Msg-Id": "bad\xff\xfe"}, []byte(`{"spec":"nope"}`)},
		{"NUL in a field echoed by the reason", "opledger.intents.wf_1", nil, []byte(`{"spec":"\u0000evil"}`)},
		{"invalid UTF-8 subject token", "opledger.intents.wf\xff", nil, []byte(`{`)},
	}
	for _, c := range cases {
		ans, err := b.svc.Ingest(b.Ctx, c.subject, c.header, c.body)
		require.NoError(t, err, c.name)
		require.Equal(t, op.DecisionRejected, ans.Decision, c.name)
		sum := sha256.Sum256(c.body)
		in, err := b.Store.InboxEntry(b.Ctx, ingest.Source, "sha256:"+hex.EncodeToString(sum[:]))
		require.NoError(t, err, "%s: kept in the inbox under the payload hash", c.name)
		require.Equal(t, c.body, in.Payload, c.name)
		require.NotContains(t, in.Reason, "\x00", c.name)
	}
}

// Invalid UTF-8 in any header of an otherwise valid intent is refused with a
// reason, answered on the body's event id; nothing is created. A traceparent
// that is valid UTF-8 but not W3C trace context starts a new trace instead,
// as W3C Trace Context asks.
//
// Breaking it: reading headers without checking them (as before) turns the
// first intent into a capture with a fresh trace.
func TestIngestRejectsInvalidUTF8Headers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	subject, header, body := pipetest.IntentMsg(t, capture("conv_h:call_1", "wf_1", "order_hdr_1", "cust_1"))
	header["traceparent"] = "00-\xff\xfe-x-01"
	ans := b.ingest(t, subject, header, body)
	require.Equal(t, op.DecisionRejected, ans.Decision)
	require.Equal(t, "conv_h:call_1", ans.Result.EventID)
	require.Equal(t, "header traceparent is not valid UTF-8", ans.Result.Reason)
	require.Empty(t, ans.Result.OperationID)

	subject, header, body = pipetest.IntentMsg(t, capture("conv_h:call_2", "wf_1", "order_hdr_2", "cust_1"))
	header["traceparent"] = "not a traceparent"
	ans = b.ingest(t, subject, header, body)
	require.Equal(t, op.DecisionNew, ans.Decision)
	require.NotEmpty(t, ans.Result.OperationID)
}
