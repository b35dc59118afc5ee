package client

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/wire"
)

func result(msgID, opID string, version int64, d op.Decision, status op.State) Result {
	return Result{Result: wire.Result{Spec: wire.SpecResult, OperationID: opID, Version: version, DedupeDecision: d,
		Status: string(status)}, Status: Status(status), MsgID: msgID}
}

// The rules of Watch, one message at a time.
func TestOrderFilter(t *testing.T) {
	t.Parallel()
	var f orderFilter
	for i, tc := range []struct {
		r    Result
		keep bool
		why  string
	}{
		{result("m1", "op_a", 2, op.DecisionNew, op.StatePendingDispatch), true, "first of op_a"},
		{result("m1", "op_a", 2, op.DecisionNew, op.StatePendingDispatch), false, "the same message again"},
		{result("m2", "op_a", 5, op.DecisionNew, op.StateCompletedSuccess), true, "newer"},
		{result("m3", "op_a", 4, op.DecisionNew, op.StateUnknownOutcome), false, "older, after the newer"},
		{result("m4", "op_a", 5, op.DecisionNew, op.StateCompletedSuccess), false, "equal version, other message"},
		{result("m5", "op_a", 3, op.DecisionDuplicateEvent, op.StateDispatched), true, "an answer to another event, even if older"},
		{result("m5", "op_a", 3, op.DecisionDuplicateEvent, op.StateDispatched), false, "that answer again"},
		{result("m6", "op_a", 5, op.DecisionDuplicateOperation, op.StateCompletedSuccess), true, "an answer repeating the newest state"},
		{result("m7", "op_a", 0, op.DecisionConflict, op.StateRejected), true, "a conflict naming op_a"},
		{result("m8", "op_a", 6, op.DecisionNew, op.StateCompensating), true, "op_a moves on"},
		{result("m9", "", 0, op.DecisionRejected, op.StateRejected), true, "a rejection"},
		{result("", "op_b", 1, op.DecisionNew, op.StatePendingDispatch), true, "no message id"},
		{result("", "op_b", 1, op.DecisionNew, op.StatePendingDispatch), false, "no message id, same version"},
	} {
		require.Equal(t, tc.keep, f.keep(tc.r), "%d: %s", i, tc.why)
	}
}

// recent forgets the oldest keys first, and only past its bound.
func TestRecentForgetsOldestFirst(t *testing.T) {
	t.Parallel()
	var r recent[int]
	for i := range rememberMax + 10 {
		r.put(fmt.Sprint(i), i)
	}
	require.Len(t, r.m, rememberMax)
	for i := range 10 {
		_, ok := r.get(fmt.Sprint(i))
		require.False(t, ok, "key %d kept", i)
	}
	v, ok := r.get(fmt.Sprint(10))
	require.True(t, ok)
	require.Equal(t, 10, v)
	r.put("10", 99) // an update does not evict
	require.Len(t, r.m, rememberMax)
	_, ok = r.get(fmt.Sprint(11))
	require.True(t, ok)
}
