package ops_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/pipetest"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/wire"
)

// Compensating is idempotent for an operator: asking to compensate the same
// operation twice (a double click, a retried HTTP call, two operators)
// returns the same compensation operation, and the original is moved to
// compensating once.
//
// Breaking it: checking that the original may still be compensated before
// looking for its compensation refuses the second request (the original is
// compensating by then); creating a second refund would pay it back twice.
func TestCompensateTwiceReturnsTheSameCompensation(t *testing.T) {
	t.Parallel()
	b := setup(t, pipetest.Options{})
	o := b.SubmitCapture(t, "wf_comp", "order_comp")
	require.NoError(t, b.d.Handle(b.Ctx, b.LastCommand(t, o, wire.KindDispatch).Delivery(1)))
	require.Equal(t, op.StateCompletedSuccess, b.Operation(t, o.ID).State)

	first, err := b.ops.Compensate(b.Ctx, oscar, o.ID, "the customer returned the goods")
	require.NoError(t, err)
	require.Equal(t, o.ID, first.CompensatesID)
	afterFirst := b.Operation(t, o.ID)
	require.Equal(t, op.StateCompensating, afterFirst.State)

	second, err := b.ops.Compensate(b.Ctx, oscar, o.ID, "asked again")
	require.NoError(t, err, "a second request is answered with the compensation that stands")
	require.Equal(t, first.ID, second.ID)
	require.Equal(t, afterFirst.Version, b.Operation(t, o.ID).Version, "the original is not touched again")

	// A viewer may not compensate, even what is already compensated.
	_, err = b.ops.Compensate(b.Ctx, vera, o.ID, "me too")
	require.Error(t, err)

	events, err := b.Store.Events(b.Ctx, o.ID)
	require.NoError(t, err)
	n := 0
	for _, e := range events {
		if e.Event == op.EventCompensate {
			n++
		}
	}
	require.Equal(t, 1, n, "one compensate event")
}
