package reconcile_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/vendors"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/wire"
)

// A dispatch command that was published (its outbox row marked sent) and
// then lost — terminated, aged out of the stream, lost in a JetStream crash —
// must not leave its operation in pending_dispatch forever: after
// RedriveAfter the sweeper writes it again, once. Breaking the rule shows up
// as no second command, or as a new command on every pass.
func TestRedriveLostCommand(t *testing.T) {
	t.Parallel()
	b := setup(t)
	o := b.SubmitCapture(t, "wf_1", "order_lost")
	now := time.Now()

	n, err := b.svc.Redrive(b.Ctx, now.Add(time.Hour))
	require.NoError(t, err)
	require.Zero(t, n, "its command is still waiting in the outbox")

	// The relay published it; JetStream then lost it.
	_, err = b.DB.Exec(b.Ctx, `UPDATE outbox SET sent_at = now() WHERE operation_id = $1`, o.ID)
	require.NoError(t, err)
	n, err = b.svc.Redrive(b.Ctx, now.Add(time.Minute))
	require.NoError(t, err)
	require.Zero(t, n, "not waiting long enough yet")

	n, err = b.svc.Redrive(b.Ctx, now.Add(time.Hour))
	require.NoError(t, err)
	require.Equal(t, 1, n)
	again := b.LastCommand(t, o, wire.KindDispatch)
	require.Nil(t, again.SentAt)
	cmd := again.Command(t)
	require.Equal(t, o.LeaseEpoch, cmd.LeaseEpoch)
	require.Equal(t, "evt_order_lost", cmd.EventID)

	n, err = b.svc.Redrive(b.Ctx, now.Add(time.Hour))
	require.NoError(t, err)
	require.Zero(t, n, "written once, not on every pass")

	require.NoError(t, b.dispatcher.Handle(b.Ctx, again.Delivery(1)))
	require.Equal(t, op.StateCompletedSuccess, b.Operation(t, o.ID).State)
	require.Equal(t, 1, b.Vendors.Stats().Captures)
	require.Equal(t, 1, b.Vendors.Stats().Requests[vendors.RouteCapture])
}
