package adapter_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/pkg/adapter"
	"github.com/opledger/opledger/pkg/op"
)

// What a worker checks a vendor's answer against is the adapter's
// credentials and the call's sensitive arguments (registry's CallSecrets):
// a request id holding a sensitive value is dropped, an object id holding
// one is dropped and makes a positive answer unknown, and error texts are
// masked. Breaking it: the dispatcher redacting only the adapter's own
// credentials (the canary test in cmd/opledger then finds the card token
// in results and the API).
func TestRedactSensitiveValues(t *testing.T) {
	t.Parallel()
	const token = "CANARY-not-a-secret-7f3a"
	secrets := []string{"Bearer sk_test_x", token}
	res := adapter.Redact(adapter.Result{Outcome: op.OutcomeSuccess, ExternalRequestID: "req_" + token, ExternalObjectID: "ch_1",
		Error: "x " + token}, secrets)
	require.Equal(t, op.OutcomeSuccess, res.Outcome)
	require.Empty(t, res.ExternalRequestID)
	require.Equal(t, "ch_1", res.ExternalObjectID)
	require.NotContains(t, res.Error, token)

	res = adapter.Redact(adapter.Result{Outcome: op.OutcomeSuccess, ExternalObjectID: "ch_" + token}, secrets)
	require.Equal(t, op.OutcomeUnknown, res.Outcome)
	require.Empty(t, res.ExternalObjectID)
	require.True(t, adapter.HoldsSecret("x"+token, secrets))
}
