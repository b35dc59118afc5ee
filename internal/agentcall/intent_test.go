package agentcall

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/wire"
)

// An agent's own intent keeps its event id and fields and gets the tool's
// canonical arguments, so two spellings of one call are one body; what the
// registry refuses is refused before anything is sent.
func TestPrepareIntent(t *testing.T) {
	t.Parallel()
	d := door(t)
	in := wire.Intent{EventID: "conv_1:call_1", WorkflowID: "wf", Tool: "capture_payment", RunID: "run_1", Intent: "collect",
		Args:        json.RawMessage(`{"currency":"usd","amount_cents":4900,"customer_id":"c","order_id":" o_1"}`),
		Correlation: map[string]string{"k": "v"}, Tenant: "acme"}
	got, prep, err := d.PrepareIntent(in)
	require.NoError(t, err)
	require.Equal(t, "conv_1:call_1", got.EventID, "the agent's event id, not a derived one")
	require.Equal(t, wire.SpecIntent, got.Spec)
	require.Equal(t, "run_1", got.RunID)
	require.Equal(t, "collect", got.Intent)
	require.Equal(t, map[string]string{"k": "v"}, got.Correlation)
	require.Empty(t, got.Tenant, "the door's client decides the tenant")
	require.Equal(t, &wire.Actor{Type: "agent", ID: "opledger-door"}, got.Actor, "the door's actor when none is named")
	other, _, err := d.PrepareIntent(wire.Intent{EventID: "conv_1:call_1", WorkflowID: "wf", Tool: "capture_payment", RunID: "run_1",
		Intent: "collect", Args: json.RawMessage(capture), Correlation: map[string]string{"k": "v"}})
	require.NoError(t, err)
	a, _ := json.Marshal(got)
	b, _ := json.Marshal(other)
	require.Equal(t, string(b), string(a), "one call, one body")
	require.Len(t, prep.Args.Hash, 64)

	named := in
	named.Actor = &wire.Actor{Type: "agent", ID: "bot"}
	got, _, err = d.PrepareIntent(named)
	require.NoError(t, err)
	require.Equal(t, "bot", got.Actor.ID)

	for name, bad := range map[string]wire.Intent{
		"unknown tool":        {EventID: "e", WorkflowID: "wf", Tool: "nope", Args: json.RawMessage(`{}`)},
		"bad arguments":       {EventID: "e", WorkflowID: "wf", Tool: "capture_payment", Args: json.RawMessage(`{"order_id":1}`)},
		"no event id":         {WorkflowID: "wf", Tool: "capture_payment", Args: json.RawMessage(capture)},
		"leading space":       {EventID: " e", WorkflowID: "wf", Tool: "capture_payment", Args: json.RawMessage(capture)},
		"workflow with a dot": {EventID: "e", WorkflowID: "w.f", Tool: "capture_payment", Args: json.RawMessage(capture)},
	} {
		_, _, err := d.PrepareIntent(bad)
		var inv *InvalidError
		require.True(t, errors.As(err, &inv), "%s: %v", name, err)
		require.ErrorIs(t, err, op.ErrInvalid, name)
	}
}
