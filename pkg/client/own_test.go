package client_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/pkg/client"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/wire"
)

// A client reads its own tenant's results only, whatever filter it is
// given and whatever the server lets through: results on another tenant's
// subjects, and results on its own subjects that name another tenant, are
// skipped. Breaking it: a client that delivers every v1 result its
// consumer receives hands acme globex's operation.
func TestClientIgnoresOtherTenantsResults(t *testing.T) {
	t.Parallel()
	ns := startNATS(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	acme, err := client.Connect(ns.URL(), "acme", client.Tenant("acme"))
	require.NoError(t, err)
	t.Cleanup(acme.Close)
	// With no RESULTS stream yet, the client makes one for its tenant.
	require.NoError(t, acme.EnsureResultsStream(ctx, 0))
	_, js := connectJS(t, ns.URL())
	st, err := js.Stream(ctx, wire.StreamResults)
	require.NoError(t, err)
	require.Equal(t, []string{"opledger.results.acme.>"}, st.CachedInfo().Config.Subjects)
	// Widen it, as a single-account deployment's RESULTS is, so that the
	// client's own check is what keeps other tenants out.
	cfg := st.CachedInfo().Config
	cfg.Subjects = []string{"opledger.results.>"}
	_, err = js.UpdateStream(ctx, cfg)
	require.NoError(t, err)
	require.NoError(t, acme.EnsureResultsStream(ctx, 0), "an existing RESULTS is left as it is")

	publish := func(subject, tenant, opID string) {
		data, err := json.Marshal(wire.Result{Spec: wire.SpecResult, Tenant: tenant, OperationID: opID, EventID: "evt_" + opID,
			WorkflowID: "wf_1", Tool: "capture_payment", Status: string(op.StateCompletedSuccess), DedupeDecision: op.DecisionNew,
			Final: true, Version: 1, At: time.Now().UTC()})
		require.NoError(t, err)
		_, err = js.Publish(ctx, subject, data)
		require.NoError(t, err)
	}
	publish("opledger.results.globex.wf_1", "globex", "op_globex")
	publish("opledger.results.acme.wf_1", "globex", "op_forged") // acme's subject, another tenant's result
	publish("opledger.results.wf_1", "", "op_default")
	publish("opledger.results.acme.wf_1", "acme", "op_acme")

	wctx, wcancel := context.WithTimeout(ctx, 2*time.Second)
	defer wcancel()
	ch, err := acme.Watch(wctx, "opledger.results.>")
	require.NoError(t, err)
	var got []string
	for r := range ch {
		got = append(got, r.OperationID)
	}
	require.Equal(t, []string{"op_acme"}, got)
}
