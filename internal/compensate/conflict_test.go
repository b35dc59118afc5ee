package compensate_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/compensate"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/wire"
)

// The agent already asked for a refund of the same charge and amount (same
// idempotency key, another reason). The playbook's refund would be that
// operation's conflict: Request must say so and leave the original alone,
// rather than pass off the agent's refund as the compensation (and burn the
// compensation's inbox entry so that no later request could succeed).
func TestRequestRefusesAnotherOperationsKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	capture := b.completedCapture(t, "order_c1")
	args, err := json.Marshal(map[string]any{"charge_id": capture.ExternalObjectID, "customer_id": "cust_1", "amount_cents": 4900, "reason": "customer asked"})
	require.NoError(t, err)
	b.Submit(t, wire.Intent{EventID: "evt_agent_refund", WorkflowID: "wf_1", Tool: "refund_payment", Args: args,
		Actor: &wire.Actor{Type: "agent", ID: "support-bot"}})

	_, err = compensate.Request(b.Ctx, b.Store, b.Registry, capture.ID, "operator:test", "duplicate charge")
	require.ErrorIs(t, err, op.ErrConflict)
	require.Equal(t, op.StateCompletedSuccess, b.Operation(t, capture.ID).State, "the original is not compensating")
	_, err = b.Store.InboxEntry(b.Ctx, compensate.Source, "compensate:"+capture.ID)
	require.ErrorIs(t, err, op.ErrNotFound, "nothing was recorded for the refused request")
}
