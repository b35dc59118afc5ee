package client_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/vendors"
	"github.com/opledger/opledger/pkg/client"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/wire"
)

// tenantClient connects a client of tenant to the bundle's NATS.
func (b *bundle) tenantClient(t *testing.T, tenant string) *client.Client {
	t.Helper()
	cl, err := client.Connect(b.stack.Infra.NATSURL, "tenant-"+tenant, client.Tenant(tenant))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return cl
}

// The attack seen in the field: an agent of one tenant publishes first with
// another tenant's event id in Nats-Msg-Id (and the same workflow name and
// business key). The victim's intent must neither vanish as a JetStream
// duplicate nor be answered with the attacker's operation: each tenant gets
// its own operation, its own vendor effect under its own key, and answers
// that name only its own operations.
//
// The attacker even sets Nats-Msg-Id to the victim's event id, and a
// victim of another make sets it too: INTENTS keeps no duplicate window, so
// JetStream's stream-wide dedupe cannot drop the victim's intent.
//
// Breaking it: INTENTS with a duplicate window (the victim that sends
// Nats-Msg-Id has its intent dropped: no answer ever comes); event ids or
// keys not scoped by tenant answer the victim
// duplicate_event/duplicate_operation/conflict with the attacker's
// operation id.
func TestTenantsCannotBlockOrSeeEachOther(t *testing.T) {
	t.Parallel()
	b := setup(t)
	attacker := b.tenantClient(t, "attacker")
	victim := b.tenantClient(t, "victim")
	const eventID = "conv_42:call_7"

	// The attacker goes first, with different arguments (a conflict if the
	// ids were shared) and the victim's event id as Nats-Msg-Id, then with
	// the victim's exact arguments under a new event id (a
	// duplicate_operation if keys were shared).
	watch, err := attacker.Watch(b.ctx, attacker.ResultSubject("wf_shared"))
	require.NoError(t, err)
	in := capture("wf_shared", eventID, "order_1", 100)
	in.Spec = wire.SpecIntent
	body, err := json.Marshal(in)
	require.NoError(t, err)
	m := nats.NewMsg(wire.TenantIntentSubject("attacker", "wf_shared"))
	m.Data = body
	m.Header.Set(wire.HeaderMsgID, eventID)
	_, err = b.js.PublishMsg(b.ctx, m)
	require.NoError(t, err)
	bad := collect(t, b.ctx, watch, func(r client.Result) bool { return r.EventID == eventID })[0]
	require.Equal(t, op.DecisionNew, bad.Decision())
	same, err := attacker.Submit(b.ctx, capture("wf_shared", "conv_42:call_8", "order_1", 4900))
	require.NoError(t, err)
	require.Equal(t, op.DecisionNew, same.Decision())
	require.Equal(t, "attacker", same.Tenant)

	// The victim right after, inside JetStream's window.
	ans, err := victim.Submit(b.ctx, capture("wf_shared", eventID, "order_1", 4900))
	require.NoError(t, err)
	require.Equal(t, op.DecisionNew, ans.Decision(), "the victim's intent is its own: %+v", ans.Result.Result)
	require.Equal(t, "victim", ans.Tenant)
	require.NotEqual(t, bad.OperationID, ans.OperationID)
	require.NotEqual(t, same.OperationID, ans.OperationID)
	require.True(t, strings.HasPrefix(ans.IdempotencyKey, "victim/"), ans.IdempotencyKey)

	final, err := victim.SubmitAndWait(b.ctx, capture("wf_shared", eventID, "order_1", 4900))
	require.NoError(t, err)
	require.Equal(t, ans.OperationID, final.OperationID)
	require.Equal(t, client.StatusCompletedSuccess, final.Status)
	other, err := attacker.SubmitAndWait(b.ctx, capture("wf_shared", "conv_42:call_8", "order_1", 4900))
	require.NoError(t, err)
	require.Equal(t, client.StatusCompletedSuccess, other.Status)
	require.NotEqual(t, final.ExternalObjectID, other.ExternalObjectID, "two captures, two charges")

	// The vendor saw one capture per tenant per key, never one tenant's key
	// under the other's name.
	keys := b.stack.Vendors.EffectsByKey(vendors.KindCapture)
	require.Equal(t, 1, keys[final.IdempotencyKey], keys)
	require.Equal(t, 1, keys[other.IdempotencyKey], keys)
	require.Len(t, keys, 3, "attacker's 100-cent capture, attacker's and victim's 4900: %v", keys)

	// Everything the victim can read names only its own operations.
	own := map[string]bool{ans.OperationID: true}
	ctx, cancel := context.WithTimeout(b.ctx, 3*time.Second)
	defer cancel()
	ch, err := victim.Results(ctx, victim.AllResults())
	require.NoError(t, err)
	n := 0
	for r := range ch {
		n++
		require.True(t, own[r.OperationID], "the victim read another tenant's result: %+v", r)
		require.Equal(t, "victim", r.Tenant)
	}
	require.NotZero(t, n)

	// A victim whose client sets Nats-Msg-Id, right after the attacker
	// published that id: still stored, and answered in its own tenant.
	vwatch, err := victim.Watch(b.ctx, victim.ResultSubject("wf_hdr"))
	require.NoError(t, err)
	for _, tn := range []string{"attacker", "victim"} {
		in := capture("wf_hdr", "conv_42:call_9", "order_9", 4900)
		in.Spec = wire.SpecIntent
		body, err := json.Marshal(in)
		require.NoError(t, err)
		m := nats.NewMsg(wire.TenantIntentSubject(tn, "wf_hdr"))
		m.Data = body
		m.Header.Set(wire.HeaderMsgID, "conv_42:call_9")
		ack, err := b.js.PublishMsg(b.ctx, m)
		require.NoError(t, err)
		require.False(t, ack.Duplicate, "%s's intent dropped by JetStream", tn)
	}
	got := collect(t, b.ctx, vwatch, func(r client.Result) bool { return r.EventID == "conv_42:call_9" })
	require.Equal(t, op.DecisionNew, got[len(got)-1].Decision())
	require.Equal(t, "victim", got[len(got)-1].Tenant)
}

// A refused intent is answered on its tenant's subject; an intent on a
// subject that names no valid tenant is answered only on the unroutable
// subject; the legacy three-token subject and the explicit "default" tenant
// are the same tenant.
func TestTenantSubjects(t *testing.T) {
	t.Parallel()
	b := setup(t)
	acme := b.tenantClient(t, "acme")

	ans, err := acme.Submit(b.ctx, wire.Intent{EventID: "evt_unknown", WorkflowID: "wf_1", Tool: "no_such_tool", Args: json.RawMessage(`{}`)})
	require.NoError(t, err)
	require.Equal(t, op.DecisionRejected, ans.Decision())
	require.Equal(t, "acme", ans.Tenant, "the refusal says whose it is")

	// The explicit default tenant and the short form share event ids.
	first, err := b.cl.Submit(b.ctx, capture("wf_d", "evt_d", "order_d", 4900))
	require.NoError(t, err)
	require.Equal(t, op.DecisionNew, first.Decision())
	require.Empty(t, first.Tenant, "the default tenant is not named in results")
	watch, err := b.cl.Watch(b.ctx, wire.ResultSubject("wf_d"))
	require.NoError(t, err)
	in := capture("wf_d", "evt_d", "order_d", 4900)
	in.Spec = wire.SpecIntent
	body, err := json.Marshal(in)
	require.NoError(t, err)
	_, err = b.js.Publish(b.ctx, wire.IntentSubjectPrefix+"default.wf_d", body)
	require.NoError(t, err)
	got := collect(t, b.ctx, watch, func(r client.Result) bool { return r.Decision() == op.DecisionDuplicateEvent })
	require.Equal(t, first.OperationID, got[len(got)-1].OperationID)

	// A subject with an invalid tenant: answered on the unroutable subject.
	un, err := b.cl.Watch(b.ctx, wire.UnroutableSubject)
	require.NoError(t, err)
	in = capture("wf_x", "evt_x", "order_x", 4900)
	in.Spec = wire.SpecIntent
	body, err = json.Marshal(in)
	require.NoError(t, err)
	m := nats.NewMsg(wire.IntentSubjectPrefix + "Bad_Tenant.wf_x")
	m.Data = body
	m.Header.Set(wire.HeaderMsgID, "evt_x")
	_, err = b.js.PublishMsg(b.ctx, m)
	require.NoError(t, err)
	r := collect(t, b.ctx, un, func(r client.Result) bool { return r.EventID == "evt_x" })
	require.Equal(t, op.DecisionRejected, r[len(r)-1].Decision())
	require.Empty(t, r[len(r)-1].OperationID)

	_, err = client.Connect(b.stack.Infra.NATSURL, "bad", client.Tenant("Not A Tenant"))
	require.ErrorContains(t, err, "tenant")
}
