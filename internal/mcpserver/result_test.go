package mcpserver

import (
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/pkg/client"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/wire"
)

func result(state op.State, d op.Decision) client.Result {
	o := &op.Operation{ID: "op_1", WorkflowID: "wf", Tool: "capture_payment", State: state, Version: 5, AttemptCount: 1,
		IdempotencyKey: "k:v1", UpdatedAt: time.Now()}
	w := wire.ResultFor(o, "mcp:c:1", d)
	return client.Result{Result: w, Status: client.Status(w.Status)}
}

// An unknown outcome is a complete answer: not an error, and it says not
// to call again and how to follow the operation.
func TestUnknownOutcomeIsACompleteAnswer(t *testing.T) {
	t.Parallel()
	r := result(op.StateUnknownOutcome, op.DecisionNew)
	res := fromClient(r, r, "abc", "opledger ops show op_1")
	advise(res, true, "")
	out := render(res)
	require.False(t, out.IsError)
	require.Equal(t, "reconcile_before_retry", res.RetryRecommendation)
	require.Contains(t, res.Next, "Do NOT call this tool again")
	require.Equal(t, &Follow{Tool: ToolGetOperation, Arguments: map[string]string{"operation_id": "op_1"}}, res.Follow)
	require.Equal(t, res.SafeUserMessage, out.Content[0].(*mcp.TextContent).Text, "the first text is the safe user message")
	require.Contains(t, out.Content[1].(*mcp.TextContent).Text, "opledger receipt op_1")

	for state, isErr := range map[op.State]bool{op.StateCompletedSuccess: false, op.StateFailedPermanent: true, op.StateRejected: true,
		op.StateCancelled: true, op.StateEscalated: false, op.StateAwaitingApproval: false, op.StatePendingDispatch: false} {
		r := result(state, op.DecisionNew)
		res := fromClient(r, r, "", "")
		advise(res, false, "call again")
		require.Equal(t, isErr, render(res).IsError, "%s", state)
		require.NotEmpty(t, res.Next)
	}
}

func TestReceiptDigest(t *testing.T) {
	t.Parallel()
	a := NewReceipt("op_1", "t", "completed_success", 4, "k", "h", "ch_1", time.Now(), "")
	b := NewReceipt("op_1", "t", "completed_success", 4, "k", "h", "ch_1", time.Now().Add(time.Hour), "")
	require.Equal(t, a.Digest, b.Digest, "the writer's clock is not digested")
	c := NewReceipt("op_1", "t", "completed_success", 5, "k", "h", "ch_1", time.Now(), "")
	require.NotEqual(t, a.Digest, c.Digest)
}

func TestRequestState(t *testing.T) {
	t.Parallel()
	s := &server{stateKey: make([]byte, 32)}
	st := approvalState{EventID: "e", OperationID: "op_1", ArgsHash: "h", Mode: "url", Expires: time.Now().Add(time.Minute).Unix()}
	signed, err := s.signState(st)
	require.NoError(t, err)
	got, err := s.verifyState(signed)
	require.NoError(t, err)
	require.Equal(t, st, got)
	_, err = (&server{stateKey: []byte("another key, another server......")}).verifyState(signed)
	require.Error(t, err, "signed by another key")
	_, err = s.verifyState(signed[:len(signed)-2] + "xx")
	require.Error(t, err, "tampered")
	st.Expires = time.Now().Add(-time.Second).Unix()
	old, _ := s.signState(st)
	_, err = s.verifyState(old)
	require.Error(t, err, "expired")
}
