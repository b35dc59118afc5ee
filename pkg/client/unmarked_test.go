package client_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/pkg/client"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/wire"
)

// Services from before answers were marked (wire.HeaderAnswer) publish the
// same results without the mark: a client reads the workflow's history for
// every answer then, as it always did, and answers as before. The test
// plays those services on a real JetStream: each new event id gets an
// answer and a later result of its operation, both carrying the event id
// and the decision new; a resend gets duplicate_event. Breaking it: a
// client that waits for a marked answer (it never comes), or one that takes
// the first result carrying the event id after it subscribed as the answer
// to a first publish (it would take the duplicate_event, or a later
// result).
func TestAnswersFromServicesThatDoNotMarkThem(t *testing.T) {
	t.Parallel()
	ns := startNATS(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nc, js := connectJS(t, ns.URL())
	for name, subject := range map[string]string{wire.StreamIntents: wire.IntentSubjectPrefix + ">", wire.StreamResults: wire.ResultSubjectPrefix + ">"} {
		_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{subject}, Storage: jetstream.MemoryStorage})
		require.NoError(t, err)
	}

	var mu sync.Mutex
	ops := map[string]*op.Operation{} // by event id
	publish := func(o *op.Operation, eventID string, d op.Decision) {
		body, err := json.Marshal(wire.ResultFor(o, eventID, d))
		require.NoError(t, err)
		_, err = js.Publish(ctx, wire.ResultSubject(o.WorkflowID), body) // no wire.HeaderAnswer
		require.NoError(t, err)
	}
	sub, err := nc.Subscribe(wire.IntentSubjectPrefix+">", func(m *nats.Msg) {
		in, err := wire.DecodeIntent(m.Subject, "", m.Data)
		require.NoError(t, err)
		mu.Lock()
		defer mu.Unlock()
		if o, seen := ops[in.EventID]; seen {
			// A later result of the operation lands between the resend's
			// subscription and its answer.
			o.Version, o.UpdatedAt = o.Version+1, time.Now()
			publish(o, in.EventID, op.DecisionNew)
			publish(o, in.EventID, op.DecisionDuplicateEvent)
			return
		}
		o := &op.Operation{ID: op.NewID("op"), WorkflowID: in.WorkflowID, Tool: in.Tool, Tenant: wire.DefaultTenant,
			State: op.StatePendingDispatch, Version: 1, UpdatedAt: time.Now()}
		ops[in.EventID] = o
		publish(o, in.EventID, op.DecisionNew)
		o.State, o.Version, o.UpdatedAt = op.StateCompletedSuccess, 2, time.Now()
		publish(o, in.EventID, op.DecisionNew) // a later result of the operation
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })

	cl, err := client.Connect(ns.URL(), "unmarked")
	require.NoError(t, err)
	t.Cleanup(cl.Close)

	in := capture("wf_unmarked", "conv_1:call_1", "order_1", 100)
	first, err := cl.Submit(ctx, in)
	require.NoError(t, err)
	require.Equal(t, op.DecisionNew, first.Decision())
	require.Equal(t, client.StatusPendingDispatch, first.Status, "the answer, not the later result")
	require.False(t, first.Earlier)

	again, err := cl.Submit(ctx, in)
	require.NoError(t, err)
	require.True(t, again.Earlier)
	again.Earlier = false
	require.Equal(t, first.Result, again.Result, "the first publish's answer, not the duplicate_event")

	final, err := cl.SubmitAndWait(ctx, capture("wf_unmarked", "conv_1:call_2", "order_2", 100))
	require.NoError(t, err)
	require.Equal(t, client.StatusCompletedSuccess, final.Status)
	require.Equal(t, "conv_1:call_2", final.EventID)
}
