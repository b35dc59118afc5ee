package adapter_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/pkg/adapter"
	"github.com/opledger/opledger/pkg/op"
)

// A vendor that echoes a secret of the call (its credential, a sensitive
// argument) in what opledger keeps of its answer does not get it kept: a
// request id holding one is dropped, an object id holding one is dropped
// and makes a positive answer malformed, and error texts are masked.
// Breaking it: Scrub missing from the dispatcher (the canary test in
// cmd/opledger then finds the secret in results and the API).
func TestScrub(t *testing.T) {
	t.Parallel()
	const secret = "CANARY-not-a-secret-7f3a"
	secrets := []string{"Bearer " + secret, secret, "ab"}
	res := adapter.Scrub(adapter.Result{Outcome: op.OutcomeSuccess, ExternalRequestID: "Bearer " + secret, ExternalObjectID: "ch_1",
		Error: "x " + secret, ErrorCategory: secret}, secrets)
	require.Equal(t, op.OutcomeSuccess, res.Outcome)
	require.Empty(t, res.ExternalRequestID)
	require.Equal(t, "ch_1", res.ExternalObjectID)
	require.NotContains(t, res.Error+res.ErrorCategory, secret)

	res = adapter.Scrub(adapter.Result{Outcome: op.OutcomeSuccess, ExternalObjectID: "ch_" + secret}, secrets)
	require.Equal(t, op.OutcomeUnknown, res.Outcome)
	require.Equal(t, adapter.CategoryMalformedResponse, res.ErrorCategory)
	require.Empty(t, res.ExternalObjectID)

	res = adapter.Scrub(adapter.Result{Outcome: op.OutcomeSuccess, ExternalObjectID: "abc"}, secrets)
	require.Equal(t, "abc", res.ExternalObjectID, "secrets shorter than 4 bytes are not looked for")

	lr, ok := adapter.ScrubLookup(adapter.LookupResult{Found: true, Outcome: op.OutcomeSuccess, ExternalObjectID: secret}, secrets)
	require.False(t, ok)
	require.False(t, lr.Found)
}
