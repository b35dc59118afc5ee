package reconcile_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/dispatch"
	"github.com/opledger/opledger/internal/pipetest"
	"github.com/opledger/opledger/internal/reconcile"
	"github.com/opledger/opledger/internal/regedit"
	"github.com/opledger/opledger/internal/vendors"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/wire"
)

// Lookups that keep failing escalate after the tool's max_lookups, counted
// in the ledger: every delivery here is a first one (Delivered 1), as it is
// after the re-drive wrote the command again or a NATS server that lost its
// store got it back, which starts JetStream's delivery count from one.
//
// Breaking it: counting by the delivery count (as the reconciler did) never
// reaches 3 here, and the operation waits for the tool's deadline (10
// minutes) however often its lookups fail.
func TestMaxLookupsCountedInTheLedger(t *testing.T) {
	t.Parallel()
	e := pipetest.Start(t, pipetest.Options{EditRegistry: func(data []byte) ([]byte, error) {
		return regedit.Set(data, "reconcile.max_lookups", "3", func(tl regedit.Tool) bool { return tl.Name == "capture_payment" })
	}})
	d := dispatch.New(dispatch.Config{Name: "dispatcher-1"}, e.Store, e.Bus, e.Registry, e.Adapters, nil, e.Log)
	rc := reconcile.New(reconcile.Config{Name: "reconciler-1", SettleDelay: settleDelay}, e.Store, e.Bus, e.Registry, e.Adapters, nil, e.Log)
	require.NoError(t, e.Vendors.InjectFault(vendors.Fault{Route: vendors.RouteCapture, Kind: vendors.FaultTimeoutAfterCommit}))
	require.NoError(t, e.Vendors.InjectFault(vendors.Fault{Route: vendors.RouteCaptureLookup, Kind: vendors.FaultError500BeforeCommit, Times: 100}))
	o := e.SubmitCapture(t, "wf_1", "order_lookups")
	require.NoError(t, d.Handle(e.Ctx, e.LastCommand(t, o, wire.KindDispatch).Delivery(1)))
	o = e.Operation(t, o.ID)
	require.Equal(t, op.StateUnknownOutcome, o.State)

	for i := range 2 {
		require.Error(t, rc.Handle(e.Ctx, e.LastCommand(t, o, wire.KindUnknown).Delivery(1)), "lookup %d failed: look again", i+1)
		require.Equal(t, o, e.Operation(t, o.ID), "a failed lookup changes nothing")
	}
	require.NoError(t, rc.Handle(e.Ctx, e.LastCommand(t, o, wire.KindUnknown).Delivery(1)))
	got := e.Operation(t, o.ID)
	require.Equal(t, op.StateEscalated, got.State, "the third failed lookup escalates")
	events, err := e.Store.Events(e.Ctx, o.ID)
	require.NoError(t, err)
	require.Contains(t, string(events[len(events)-1].Detail), "lookups keep failing")
	require.Equal(t, 3, e.Vendors.Stats().Requests[vendors.RouteCaptureLookup])
	require.Equal(t, 1, e.Vendors.Stats().Requests[vendors.RouteCapture], "nothing re-sent")
}
