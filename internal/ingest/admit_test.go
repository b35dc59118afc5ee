package ingest_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/bus"
	"github.com/opledger/opledger/internal/ingest"
	"github.com/opledger/opledger/internal/pipetest"
	"github.com/opledger/opledger/internal/telemetry"
	"github.com/opledger/opledger/pkg/wire"
)

// admissionEnv is planner-ingest consuming from a real JetStream into a real
// ledger, with admission control at maxBacklog and holds of holdFor, and
// the dispatchers' consumer made (when withConsumer) but consumed by nobody
// until the test takes its commands.
type admissionEnv struct {
	*pipetest.Env
	reg  *prometheus.Registry
	cons jetstream.Consumer
}

func startAdmission(t *testing.T, maxBacklog int, holdFor time.Duration, withConsumer bool) admissionEnv {
	t.Helper()
	e := pipetest.Start(t, pipetest.Options{})
	a := admissionEnv{Env: e, reg: prometheus.NewRegistry()}
	if withConsumer {
		var err error
		a.cons, err = e.JS.CreateOrUpdateConsumer(e.Ctx, wire.StreamOps, jetstream.ConsumerConfig{Durable: "dispatcher",
			FilterSubject: wire.OpsFilter(wire.KindDispatch), AckPolicy: jetstream.AckExplicitPolicy})
		require.NoError(t, err)
	}
	svc := ingest.New(ingest.Config{MaxBacklog: maxBacklog, HoldFor: holdFor, BacklogEvery: 20 * time.Millisecond},
		e.Store, e.Bus, e.Registry, telemetry.NewMetrics(a.reg), e.Log)
	stop, err := svc.Start(e.Ctx)
	require.NoError(t, err)
	t.Cleanup(stop)
	return a
}

// backlog puts n dispatch commands in OPS for nobody to take yet.
func (a admissionEnv) backlog(t *testing.T, n int) {
	t.Helper()
	for i := range n {
		_, err := a.Bus.Publish(a.Ctx, bus.Message{Subject: wire.OpsSubject(wire.KindDispatch, "capture_payment", fmt.Sprintf("op_waiting_%d", i)), Data: []byte(`{}`)})
		require.NoError(t, err)
	}
}

// publish sends n capture intents, as an agent does, to the INTENTS stream.
func (a admissionEnv) publish(t *testing.T, prefix string, n int) {
	t.Helper()
	for i := range n {
		subject, header, body := pipetest.IntentMsg(t, capture(fmt.Sprintf("%s_evt_%d", prefix, i), "wf_"+prefix, fmt.Sprintf("%s_order_%d", prefix, i), "cust_1"))
		_, err := a.Bus.Publish(a.Ctx, bus.Message{Subject: subject, Header: header, Data: body})
		require.NoError(t, err)
	}
}

func (a admissionEnv) operations(t *testing.T) int {
	t.Helper()
	var n int
	require.NoError(t, a.DB.QueryRow(a.Ctx, "SELECT count(*) FROM operations").Scan(&n))
	return n
}

// held is opledger_intents_held_total{end}.
func (a admissionEnv) held(t *testing.T, end string) float64 {
	t.Helper()
	mfs, err := a.reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if mf.GetName() == "opledger_intents_held_total" && m.GetLabel()[0].GetValue() == end {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// backlogRead is opledger_dispatch_backlog, the backlog admission last read.
func (a admissionEnv) backlogRead(t *testing.T) float64 {
	t.Helper()
	mfs, err := a.reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == "opledger_dispatch_backlog" {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return -1
}

// While more dispatch commands wait for a dispatcher than the bound allows,
// new intents stay in their stream and the ledger gets none of them; once
// the dispatchers take the backlog, every one of them goes in.
//
// Breaking it: a handler that does not wait for admission (the intents reach
// the ledger at once), or a gate that never opens again (they stay out
// until their minute-long hold ends, past the test's wait).
func TestIngestHoldsIntentsWhileDispatchIsBehind(t *testing.T) {
	t.Parallel()
	a := startAdmission(t, 5, time.Minute, true)
	a.backlog(t, 6)
	require.Eventually(t, func() bool {
		return a.backlogRead(t) == 6
	}, 5*time.Second, 10*time.Millisecond, "the gauge shows the backlog read")

	a.publish(t, "held", 5)
	require.Never(t, func() bool { return a.operations(t) > 0 }, time.Second, 20*time.Millisecond,
		"intents reached the ledger while the backlog was over its bound")

	// The dispatchers catch up.
	batch, err := a.cons.Fetch(6, jetstream.FetchMaxWait(5*time.Second))
	require.NoError(t, err)
	taken := 0
	for m := range batch.Messages() {
		require.NoError(t, m.Ack())
		taken++
	}
	require.Equal(t, 6, taken)
	require.Eventually(t, func() bool { return a.operations(t) == 5 }, 10*time.Second, 20*time.Millisecond)
	require.Equal(t, float64(5), a.held(t, "admitted"))
	require.Zero(t, a.held(t, "timed_out"))
}

// A hold is bounded: while the backlog never falls (every dispatcher down),
// intents still go in, each after its hold. Breaking it: a wait without a
// bound (nothing reaches the ledger), or no wait at all (counted as held
// by neither end).
func TestIngestHoldIsBounded(t *testing.T) {
	t.Parallel()
	a := startAdmission(t, 5, 300*time.Millisecond, true)
	a.backlog(t, 6)
	require.Eventually(t, func() bool {
		return a.backlogRead(t) == 6
	}, 5*time.Second, 10*time.Millisecond)
	start := time.Now()
	a.publish(t, "bounded", 5)
	require.Eventually(t, func() bool { return a.operations(t) == 5 }, 10*time.Second, 20*time.Millisecond)
	require.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond, "the intents went in before their hold ended")
	require.Equal(t, float64(5), a.held(t, "timed_out"))
}

// A backlog that cannot be read holds nothing: with no dispatchers'
// consumer on the server yet, intents go in at once. Breaking it: a read
// error treated as "over the bound".
func TestIngestAdmitsWhenTheBacklogIsUnknown(t *testing.T) {
	t.Parallel()
	a := startAdmission(t, 1, time.Minute, false)
	a.publish(t, "unknown", 5)
	require.Eventually(t, func() bool { return a.operations(t) == 5 }, 10*time.Second, 20*time.Millisecond)
	require.Zero(t, a.held(t, "admitted")+a.held(t, "timed_out"))
}
