package ingest_test

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/ingest"
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
