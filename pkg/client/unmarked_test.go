package client_test

import (
	"context"
	"encoding/json"
	"fmt"
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

// bareStreams connects to the server at url and makes INTENTS and RESULTS
// in memory, plain, for a test that plays the ledger itself.
func bareStreams(t *testing.T, ctx context.Context, url string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, js := connectJS(t, url)
	for name, subject := range map[string]string{wire.StreamIntents: wire.IntentSubjectPrefix + ">", wire.StreamResults: wire.ResultSubjectPrefix + ">"} {
		_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{subject}, Storage: jetstream.MemoryStorage})
		require.NoError(t, err)
	}
	return nc, js
}

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
	nc, js := bareStreams(t, ctx, ns.URL())

	// The services run in NATS's goroutine and may still be publishing when
	// the test ends: they record what failed, checked once the calls are
	// done, and publish on a context of their own.
	var mu sync.Mutex
	var failed []error
	ops := map[string]*op.Operation{} // by event id
	publish := func(o *op.Operation, eventID string, d op.Decision) {
		body, err := json.Marshal(wire.ResultFor(o, eventID, d))
		if err == nil {
			pctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err = js.Publish(pctx, wire.ResultSubject(o.WorkflowID), body) // no wire.HeaderAnswer
			cancel()
		}
		if err != nil {
			failed = append(failed, err)
		}
	}
	sub, err := nc.Subscribe(wire.IntentSubjectPrefix+">", func(m *nats.Msg) {
		mu.Lock()
		defer mu.Unlock()
		in, err := wire.DecodeIntent(m.Subject, "", m.Data)
		if err != nil {
			failed = append(failed, err)
			return
		}
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
	require.NoError(t, nc.Flush(), "the subscription is on the server before any intent is sent")
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
	mu.Lock()
	defer mu.Unlock()
	require.Empty(t, failed, "the services answered every intent")
}

// A call's subscription starts at a stream sequence, not with JetStream's
// "deliver new": nats.go makes an ordered consumer that is reset (its
// server-side consumer deleted, as a restarted NATS server loses it) before
// it delivered anything again with its first deliver policy, so "new"
// would then skip what was stored in between, such as the answer the call
// waits for, and the call would wait for ever. The test plays the ledger
// and, for each intent, reads the configuration of the RESULTS consumer
// the waiting call made: it must start at a sequence past the stream's end
// when the call began. Breaking it: a subscription with DeliverNewPolicy.
// (Deleting the consumer instead, and checking that the answer still
// arrives, depends on how soon nats.go notices: 10 s in most runs here.)
func TestCallsSubscribeFromASequence(t *testing.T) {
	t.Parallel()
	ns := startNATS(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	nc, js := bareStreams(t, ctx, ns.URL())
	results, err := js.Stream(ctx, wire.StreamResults)
	require.NoError(t, err)

	var mu sync.Mutex
	var failed []error
	var starts []uint64 // OptStartSeq of the consumer each call waited on
	sub, err := nc.Subscribe(wire.IntentSubjectPrefix+">", func(m *nats.Msg) {
		mu.Lock()
		defer mu.Unlock()
		pctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err := func() error {
			in, err := wire.DecodeIntent(m.Subject, "", m.Data)
			if err != nil {
				return err
			}
			newest := uint64(0) // an earlier call's consumer may still be there
			for info := range results.ListConsumers(pctx).Info() {
				if info.Config.DeliverPolicy != jetstream.DeliverByStartSequencePolicy {
					// Answered all the same, so that the test ends at once.
					failed = append(failed, fmt.Errorf("consumer %s delivers by %v, not from a sequence", info.Name, info.Config.DeliverPolicy))
				}
				newest = max(newest, info.Config.OptStartSeq)
			}
			starts = append(starts, newest)
			o := &op.Operation{ID: op.NewID("op"), WorkflowID: in.WorkflowID, Tool: in.Tool, Tenant: wire.DefaultTenant,
				State: op.StateCompletedSuccess, Version: 2, UpdatedAt: time.Now()}
			body, err := json.Marshal(wire.ResultFor(o, in.EventID, op.DecisionNew))
			if err != nil {
				return err
			}
			msg := nats.NewMsg(wire.ResultSubject(in.WorkflowID))
			msg.Data = body
			msg.Header.Set(wire.HeaderAnswer, "1")
			_, err = js.PublishMsg(pctx, msg)
			return err
		}()
		if err != nil {
			failed = append(failed, err)
		}
	})
	require.NoError(t, err)
	require.NoError(t, nc.Flush(), "the subscription is on the server before any intent is sent")
	t.Cleanup(func() { _ = sub.Unsubscribe() })

	cl, err := client.Connect(ns.URL(), "from-sequence")
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	for i := range 3 {
		r, err := cl.SubmitAndWait(ctx, capture("wf_seq", fmt.Sprintf("conv_1:call_%d", i), fmt.Sprintf("order_%d", i), 100))
		require.NoError(t, err, "call %d", i)
		require.Equal(t, client.StatusCompletedSuccess, r.Status)
	}
	mu.Lock()
	defer mu.Unlock()
	require.Empty(t, failed)
	// Each call's consumer starts past the answers before it: 1, 2, 3.
	require.Equal(t, []uint64{1, 2, 3}, starts)
}
